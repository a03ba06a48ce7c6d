"""A run's raw bytes in packs: each sample's output text, HTTP response body and request are
appended, exactly as received, to `raw/pack-NNNNNN.bin` (a new pack past PACK_LIMIT bytes), and
each blob gets one line in `raw/index.jsonl`: `sample_id`, `kind`, `pack`, `offset`, `bytes`,
`sha256`. A sample's record carries the location of its text (`raw`) and body (`response.body`)
too, so a reader needs no index for those. A run holds O(1) files however many samples it has.

This module is the one way raw bytes are read: by sample id, from a pack, or from a run written
before packs (`raw/<sample_id>.txt`, `.body`, `.request.json`, confined to exactly those names and
never through a symbolic link). Reading never follows a path a record names out of the run.
"""

import hashlib
import os
import re
import threading
from pathlib import Path
from typing import Any

from .errors import InputError
from .jsonio import dumps_line, loads
from .paths import RunFileRefused, open_in_run, open_run_file

RAW_DIR = "raw"
INDEX = "raw/index.jsonl"
PACK_LIMIT = 1 << 30  # a new pack past 1 GiB: a 1M-sample run stays a handful of files
BLOCK = 8 << 20  # what read_many reads of a pack at a time
PACK_NAME = re.compile(r"raw/pack-(\d{6})\.bin")
KIND = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}")
# The kinds a live or batch sample writes; a judge or any other writer may add its own.
TEXT, BODY, REQUEST = "txt", "body", "request"
LEGACY_SUFFIX = {TEXT: ".txt", BODY: ".body", REQUEST: ".request.json"}
APPEND_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW


class RawUnreadable(InputError):
    """A sample's raw bytes cannot be given: missing, damaged, or a path that leaves the run."""


def pack_name(number: int) -> str:
    return f"raw/pack-{number:06d}.bin"


def packs_of(run_dir: Path) -> list[str]:
    """The run's packs, oldest first (relative names)."""
    folder = run_dir / RAW_DIR
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    return sorted(f"{RAW_DIR}/{n}" for n in names if PACK_NAME.fullmatch(f"{RAW_DIR}/{n}"))


class PackWriter:
    """Appends blobs to the run's newest pack and queues their index lines; `sync` writes what was
    appended so far and makes it durable (packs, then the index) before the records that point to
    it are written. An append only places the blob (its offset is known at once) and keeps it in
    memory: the writing is done by `sync`, one write a pack for every blob since the last, off the
    threads that make calls (each write releases the interpreter, and taking it back costs a
    busy worker more than the write)."""

    def __init__(self, run_dir: Path, file_mode: int, limit: int = PACK_LIMIT) -> None:
        self.run_dir = run_dir
        self.file_mode = file_mode
        self.limit = limit
        self.lock = threading.Lock()
        self.fd: int | None = None
        self.name = ""
        self.offset = 0  # where the next blob goes in the current pack (written or not)
        self.pending: dict[int, list[bytes]] = {}  # per pack (fd): blobs placed, not yet written
        self.retired: list[int] = []  # rolled-over packs' fds, closed once synced
        self.queued: list[bytes] = []  # index lines not yet written
        self.written: dict[str, tuple[str, int, int]] = {}  # this process's requests: pack, offset, bytes
        self.unwritten: dict[str, bytes] = {}  # requests placed since the last sync, by sample id
        self.writing: dict[str, bytes] = {}  # those a sync is writing now
        self.broken: OSError | None = None  # a failed write: blobs placed after it have no bytes

    def _open(self, name: str) -> None:
        fd = os.open(self.run_dir / name, APPEND_FLAGS, self.file_mode)
        self.fd, self.name, self.offset = fd, name, os.fstat(fd).st_size

    def _target(self, size: int) -> int:
        if self.fd is None:
            existing = packs_of(self.run_dir)
            self._open(existing[-1] if existing else pack_name(1))
        if self.offset and self.offset + size > self.limit:
            assert self.fd is not None
            self.retired.append(self.fd)
            number = int(PACK_NAME.fullmatch(self.name).group(1)) + 1  # type: ignore[union-attr]
            self._open(pack_name(number))
        assert self.fd is not None
        return self.fd

    def append(self, sample_id: str, kind: str, data: bytes) -> dict[str, Any]:
        """Place one blob (written by the next `sync`); returns its location {pack, offset, bytes,
        sha256}."""
        if not KIND.fullmatch(kind):
            raise ValueError(f"a raw kind is lower-case letters, digits, '.', '_' or '-', not {kind!r}")
        digest = hashlib.sha256(data).hexdigest()
        data = bytes(data)  # kept until written: never a buffer its owner could change meanwhile
        with self.lock:
            if self.broken is not None:
                raise self.broken
            fd = self._target(len(data))
            start = self.offset
            self.offset = start + len(data)
            self.pending.setdefault(fd, []).append(data)
            location = {"pack": self.name, "offset": start, "bytes": len(data), "sha256": digest}
            self.queued.append(dumps_line({"sample_id": sample_id, "kind": kind, **location}))
            if kind == REQUEST:  # read again to resend a batch request: kept small, one per sample
                self.written[sample_id] = (self.name, start, len(data))
                self.unwritten[sample_id] = data
            return location

    def placed(self, sample_id: str) -> bytes | None:
        """A request appended since the last sync (not in its pack yet), or None."""
        with self.lock:
            return self.unwritten.get(sample_id) or self.writing.get(sample_id)

    def sync(self) -> None:
        """Packs written and to disk, then their index lines appended and to disk: an index line
        or a record never points at bytes a power loss could take back. A failed write is cut
        back (a pack never holds part of a blob) and every later append and sync raises it."""
        with self.lock:
            if self.broken is not None:
                raise self.broken
            pending, self.pending = self.pending, {}
            retired, self.retired = self.retired, []
            lines, self.queued = self.queued, []
            self.writing, self.unwritten = self.unwritten, {}
        for fd, blobs in pending.items():
            start = None
            try:
                start = os.fstat(fd).st_size
                _write_all(fd, b"".join(blobs))
            except OSError as exc:
                with self.lock:
                    self.broken = exc
                if start is not None:
                    os.ftruncate(fd, start)
                raise
        with self.lock:
            self.writing = {}  # in their packs now: read from there
        for fd in pending:
            os.fdatasync(fd)
        for fd in retired:
            os.close(fd)
        if lines:
            fd = os.open(self.run_dir / INDEX, APPEND_FLAGS, self.file_mode)
            try:
                _write_all(fd, b"".join(lines))
                os.fdatasync(fd)
            finally:
                os.close(fd)

    def close(self) -> None:
        with self.lock:
            for fd in [*self.retired, *([self.fd] if self.fd is not None else [])]:
                os.close(fd)
            self.fd, self.retired, self.pending = None, [], {}


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written <= 0:
            raise OSError(28, "short write")  # ENOSPC
        view = view[written:]


def _open_confined(root: Path, relative: str) -> int:
    """A descriptor of a regular file of the run's raw/ folder, never through a symbolic link."""
    parts = relative.split("/")
    if len(parts) != 2 or parts[0] != RAW_DIR or parts[1] in ("", ".", ".."):
        raise RawUnreadable(f"{relative}: not a file of the run's raw/ folder; not read")
    try:
        return open_in_run(root, relative)
    except RunFileRefused as exc:
        raise RawUnreadable(str(exc)) from None
    except OSError as exc:
        raise RawUnreadable(f"{root / relative}: not read ({exc.strerror})") from None


def _read_confined(root: Path, relative: str, offset: int, length: int | None) -> bytes:
    """`length` bytes at `offset` of a regular file of the run, never through a symbolic link."""
    fd = _open_confined(root, relative)
    try:
        info = os.fstat(fd)
        if length is None:
            length = info.st_size - offset
        if offset + length > info.st_size:
            raise RawUnreadable(
                f"{root / relative}: ends at byte {info.st_size}, before the {length} bytes at {offset} "
                "the record names (cut short)"
            )
        data = os.pread(fd, length, offset)
        while len(data) < length:
            more = os.pread(fd, length - len(data), offset + len(data))
            if not more:
                break
            data += more
        return data
    finally:
        os.close(fd)


def _location_problem(location: Any) -> str | None:
    if not isinstance(location.get("pack"), str) or not PACK_NAME.fullmatch(location["pack"]):
        return "names no pack of the run"
    for key in ("offset", "bytes"):
        if type(location.get(key)) is not int or location[key] < 0:
            return f"has no valid {key}"
    return None


class RawReader:
    """A run's raw bytes by sample id (packs, or the files of a run written before them)."""

    def __init__(self, run_dir: str | Path) -> None:
        self.run_dir = Path(run_dir)
        self.root = self.run_dir.resolve()
        self._index: dict[tuple[str, str], dict[str, Any]] | None = None

    def index(self) -> dict[tuple[str, str], dict[str, Any]]:
        """(sample id, kind) -> its latest location, from raw/index.jsonl (read once)."""
        if self._index is None:
            self._index = {}
            for line in iter_index(self.run_dir):
                self._index[(line["sample_id"], line["kind"])] = line
        return self._index

    def location(self, record: dict[str, Any], kind: str = TEXT) -> dict[str, Any] | None:
        """Where a record's bytes of `kind` lie: the record's own pointer, else the index."""
        sample_id = record.get("sample_id")
        if kind == TEXT:
            found = record.get("raw")
        elif kind == BODY:
            found = (record.get("response") or {}).get("body")
            if isinstance(found, str):
                found = {"path": found}
        else:
            found = None
        if found is None and kind not in (TEXT, BODY) and isinstance(sample_id, str):
            found = self.index().get((sample_id, kind))
            legacy = f"{RAW_DIR}/{sample_id}{LEGACY_SUFFIX.get(kind, '?')}"
            if found is None and os.path.lexists(self.run_dir / legacy):
                found = {"path": legacy}
        return found if isinstance(found, dict) else None

    def read(self, record: dict[str, Any], kind: str = TEXT, check: bool = True) -> bytes:
        """The exact bytes; RawUnreadable (one sentence) when they cannot be given as recorded."""
        sample_id = record.get("sample_id")
        location = self.location(record, kind)
        if location is None:
            raise RawUnreadable(f"{self.run_dir}: sample {sample_id} has no {kind} bytes recorded")
        if "pack" in location:
            problem = _location_problem(location)
            if problem is not None:
                raise RawUnreadable(f"{self.run_dir}: sample {sample_id}'s {kind} location {problem}")
            data = _read_confined(self.root, location["pack"], location["offset"], location["bytes"])
        else:
            expected = f"{RAW_DIR}/{sample_id}{LEGACY_SUFFIX.get(kind, '?')}"
            if location.get("path") != expected:
                raise RawUnreadable(
                    f"{self.run_dir}: sample {sample_id}'s {kind} path {str(location.get('path'))[:200]!r} "
                    f"is not {expected}; not read"
                )
            data = _read_confined(self.root, expected, 0, None)
        if check and isinstance(location.get("sha256"), str):
            if hashlib.sha256(data).hexdigest() != location["sha256"]:
                raise RawUnreadable(
                    f"{self.run_dir}: sample {sample_id}'s {kind} bytes do not match their recorded sha256 "
                    "(probe verify lists the damage)"
                )
        return data

    def read_or_none(self, record: dict[str, Any], kind: str = TEXT) -> bytes | None:
        try:
            return self.read(record, kind)
        except RawUnreadable:
            return None


def read_many(run_dir: Path, locations: list[dict[str, Any]], block: int = BLOCK) -> list[bytes | None]:
    """The bytes at each pack location, read pack by pack in offset order, `block` bytes at a time:
    one read for many small outputs. Their sha256 is not checked (`probe verify` does that; the
    search index reads this way); a location that is not a pack's, or lies past its end, gives None."""
    found: list[bytes | None] = [None] * len(locations)
    names = {at.get("pack") for at in locations}
    packs = {name for name in names if isinstance(name, str) and PACK_NAME.fullmatch(name)}
    spans = sorted(  # _location_problem's checks, each pack's name checked once
        (at["pack"], at["offset"], at["bytes"], i)
        for i, at in enumerate(locations)
        if at.get("pack") in packs
        and type(at.get("offset")) is int
        and type(at.get("bytes")) is int
        and at["offset"] >= 0
        and at["bytes"] >= 0
    )
    root = run_dir.resolve()
    fd, name, base, data = None, None, 0, b""
    try:
        for pack, offset, size, i in spans:
            if pack != name:
                if fd is not None:
                    os.close(fd)
                    fd = None
                name, base, data = pack, 0, b""
                try:
                    fd = _open_confined(root, pack)
                except RawUnreadable:
                    continue  # every location in this pack stays None
            if fd is None:
                continue
            if offset < base or offset + size > base + len(data):  # not in the block read last
                base, data = offset, os.pread(fd, max(size, block), offset)
            if offset + size <= base + len(data):
                found[i] = data[offset - base : offset - base + size]
    finally:
        if fd is not None:
            os.close(fd)
    return found


def iter_index(run_dir: Path) -> Any:
    """The lines of raw/index.jsonl that are whole and well formed (a torn last line is skipped)."""
    try:
        handle = open_run_file(run_dir, INDEX)
    except OSError:  # no index (a run before packs); a link or a FIFO is refused, not passed over
        return
    with handle:
        for line in handle:
            if not line.endswith(b"\n"):
                return
            try:
                entry = loads(line)
            except ValueError:
                continue
            if is_index_entry(entry):
                yield entry


def is_index_entry(entry: Any) -> bool:
    """An index line's shape: sample_id, kind, and a valid location in a pack."""
    return (
        isinstance(entry, dict)
        and isinstance(entry.get("sample_id"), str)
        and isinstance(entry.get("kind"), str)
        and _location_problem(entry) is None
    )


def read_legacy(run_dir: str | Path, sample_id: str, kind: str) -> bytes:
    """A blob of a run written before packs: exactly `raw/<sample_id>.txt` (`.body`, `.request.json`)."""
    return _read_confined(Path(run_dir).resolve(), f"{RAW_DIR}/{sample_id}{LEGACY_SUFFIX[kind]}", 0, None)


def read_raw(run_dir: str | Path, record: dict[str, Any], kind: str = TEXT) -> bytes:
    """One sample's raw bytes of `kind` (its output text by default): see RawReader.read."""
    return RawReader(run_dir).read(record, kind)
