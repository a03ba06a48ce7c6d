"""A runs store in object storage (`s3://BUCKET/PREFIX`), reached through fsspec and s3fs: the one
module that talks to it. Credentials come from the standard AWS chain (environment, shared
profile, instance role) and a custom endpoint from AWS_ENDPOINT_URL, both read by botocore itself:
nothing here sees, keeps or writes them. Every failure is a StoreError naming the object and why.
"""

import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ..errors import InputError, StartError

SCHEMES = ("s3://",)
RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,200}")
COMPONENT = re.compile(r"[A-Za-z0-9._=+@,-][A-Za-z0-9._=+@,~-]*")
_FILESYSTEMS: dict[str, Any] = {}
# A large file goes up in 50 MB parts, this many at once: s3fs holds each in memory meanwhile.
PUT_CONCURRENCY = 4
_FS_LOCK = threading.Lock()


class StoreError(StartError):
    """The runs store cannot be read or written (network, permissions, no bucket): exit 3."""


def is_store(text: object) -> bool:
    return isinstance(text, Store) or (isinstance(text, str) and text.lower().startswith(SCHEMES))


def _filesystem() -> Any:
    """One s3fs file system per process: no listing cache (runs change under us), short retries."""
    with _FS_LOCK:
        if "s3" not in _FILESYSTEMS:
            try:
                import s3fs
            except ImportError:
                raise StartError("a runs store in S3 needs s3fs: pip install 'promptprobe[s3]'") from None
            _FILESYSTEMS["s3"] = s3fs.S3FileSystem(
                use_listings_cache=False,
                skip_instance_cache=True,
                config_kwargs={"connect_timeout": 10, "read_timeout": 60, "retries": {"max_attempts": 3}},
            )
        return _FILESYSTEMS["s3"]


def _reason(exc: BaseException) -> str:
    """Why a call failed, in words (botocore's own message holds no credential)."""
    name = type(exc).__name__
    if name in ("NoCredentialsError", "PartialCredentialsError"):
        return "no AWS credentials (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE)"
    if isinstance(exc, PermissionError):
        return f"access denied ({exc})"
    if isinstance(exc, FileNotFoundError):
        return "no such bucket or object"
    # A user name or password in an endpoint URL is never repeated.
    text = re.sub(r"://[^/@\s\"']+@", "://", str(exc) or name)
    return text if len(text) < 300 else text[:300] + "..."


@dataclass(frozen=True)
class Store:
    """`s3://bucket/prefix`: runs are `<prefix>/<run id>/...` objects."""

    url: str
    bucket: str
    prefix: str
    _fs: list[Any] = field(default_factory=list, compare=False, repr=False)

    @classmethod
    def parse(cls, text: str) -> "Store":
        scheme, _, rest = text.partition("://")
        if scheme.lower() != "s3":
            raise InputError(f"{text}: a runs store is s3://BUCKET/PREFIX")
        parts = [p for p in rest.split("/") if p]
        if not parts:
            raise InputError(f"{text}: name a bucket (s3://BUCKET/PREFIX)")
        bad = [p for p in parts if p in (".", "..") or not COMPONENT.fullmatch(p)]
        if bad or not re.fullmatch(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]", parts[0]):
            raise InputError(f"{text}: not a usable runs store (s3://BUCKET/PREFIX, plain names only)")
        return cls("s3://" + "/".join(parts), parts[0], "/".join(parts[1:]))

    def __str__(self) -> str:
        return self.url

    @property
    def fs(self) -> Any:
        return _filesystem()

    @property
    def root(self) -> str:
        return f"{self.bucket}/{self.prefix}" if self.prefix else self.bucket

    def key(self, run_id: str, relative: str = "") -> str:
        return f"{self.root}/{run_id}/{relative}" if relative else f"{self.root}/{run_id}"

    def run_url(self, run_id: str) -> str:
        return f"{self.url}/{run_id}"

    def shown(self, key: str) -> str:
        return "s3://" + key

    # -- calls, each failure one sentence -------------------------------------------------------

    def _call(self, what: str, key: str, func: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except FileNotFoundError:
            raise
        except FileExistsError:
            raise
        except Exception as exc:  # botocore, aiohttp and OS errors alike: said in one sentence
            raise StoreError(f"{self.shown(key)}: cannot {what} ({_reason(exc)})") from None

    def cat(self, key: str) -> bytes | None:
        """An object's bytes, None when there is none."""
        try:
            return self._call("read it", key, self.fs.cat_file, key)  # type: ignore[no-any-return]
        except FileNotFoundError:
            return None

    def chunks(self, key: str, size: int) -> Iterator[bytes]:
        """An object's bytes, `size` at a time: a large object is never held whole.
        FileNotFoundError when there is none."""
        handle = self._call("read it", key, self.fs.open, key, "rb", block_size=size)
        with handle:
            while True:
                data = self._call("read it", key, handle.read, size)
                if not data:
                    return
                yield data

    def cat_many(self, keys: list[str]) -> dict[str, bytes | None]:
        """Several objects at once (concurrently); a missing one is None."""
        if not keys:
            return {}
        found = self._call("read objects", keys[0], self.fs.cat, keys, on_error="return")
        out: dict[str, bytes | None] = {}
        for key in keys:
            value = found.get(key)
            if isinstance(value, FileNotFoundError) or value is None:
                out[key] = None
            elif isinstance(value, BaseException):
                raise StoreError(f"{self.shown(key)}: cannot read it ({_reason(value)})")
            else:
                out[key] = value
        return out

    def pipe_many(self, objects: dict[str, bytes]) -> None:
        """Write several whole objects at once (each PUT is atomic: all of it or none)."""
        if objects:
            first = next(iter(objects))
            try:
                self._call("write objects", first, self.fs.pipe, objects)
            except FileNotFoundError:
                raise StoreError(f"{self.shown(first)}: cannot write it (no such bucket)") from None

    def put_file(self, local: str, key: str) -> None:
        try:
            self._call("write it", key, self.fs.put_file, local, key, max_concurrency=PUT_CONCURRENCY)
        except FileNotFoundError:
            raise StoreError(f"{self.shown(key)}: cannot write it (no such bucket)") from None

    def copy(self, source: str, key: str) -> None:
        """Copy an object within the store (the bytes do not come down)."""
        try:
            self._call("copy it", source, self.fs.copy, source, key)
        except FileNotFoundError:
            raise StoreError(f"{self.shown(source)}: cannot copy it (no such object)") from None

    def create(self, key: str, data: bytes) -> bool:
        """Write an object only if none is there (If-None-Match: *); False when one was."""
        try:
            self._call("write it", key, self.fs.pipe_file, key, data, mode="create")
        except FileExistsError:
            return False
        except FileNotFoundError:
            raise StoreError(f"{self.shown(key)}: cannot write it (no such bucket)") from None
        return True

    def listing(self, key: str) -> list[dict[str, Any]]:
        """The objects and folders right under `key` (empty when there are none)."""
        try:
            return self._call("list it", key, self.fs.ls, key, detail=True)  # type: ignore[no-any-return]
        except FileNotFoundError:
            return []

    def find(self, key: str) -> list[str]:
        """Every object under `key`, at any depth."""
        try:
            return list(self._call("list it", key, self.fs.find, key))
        except FileNotFoundError:
            return []

    def remove(self, keys: list[str]) -> None:
        if keys:
            try:
                self._call("remove objects", keys[0], self.fs.rm, keys)
            except FileNotFoundError:
                return

    def bucket_exists(self) -> bool:
        try:
            return bool(self._call("look at the bucket", self.bucket, self.fs.exists, self.bucket))
        except FileNotFoundError:
            return False
        except StoreError:
            return True  # cannot tell (no right to look): the listing's emptiness stands


def run_ids(store: Store) -> list[str]:
    """The run ids the store holds (folders under its prefix), newest name first."""
    ids = []
    listed = store.listing(store.root)
    if not listed and not store.bucket_exists():
        raise StoreError(f"{store.url}: no such bucket ({store.bucket}), or no access to it")
    for entry in listed:
        name = entry["name"].rstrip("/").rpartition("/")[2]
        if entry.get("type") == "directory" and RUN_ID.fullmatch(name) and name not in (".", ".."):
            ids.append(name)
    return sorted(ids, reverse=True)
