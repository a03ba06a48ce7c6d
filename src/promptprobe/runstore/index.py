"""A run's index in the store, `<run>/.store/index.json`: every file of the run with its size, its
sha256 and the objects that hold it, in order (one whole object at the file's own key, or the
parts a running writer appended since). It is written after every object it names, so a reader
that goes by it never reads half a run; a file whose bytes do not match it is refused."""

import hashlib
import os
from pathlib import Path
from typing import Any

import orjson

from ..errors import InputError

INDEX = ".store/index.json"
# Local files never uploaded: the writer's lock and reserve, a file being replaced, a reader's hint.
SKIPPED_NAMES = {".lock", ".reserve", ".store-state"}


def skipped(relative: str) -> bool:
    name = relative.rpartition("/")[2]
    return name in SKIPPED_NAMES or name.endswith(".tmp") or relative.startswith(".store/")


def safe_relative(relative: Any, where: str) -> str:
    """A file's path inside a run as an index names it: relative, no `..`, nothing skipped."""
    if (
        not isinstance(relative, str)
        or not relative
        or relative.startswith("/")
        or "\\" in relative
        or "\0" in relative
        or any(part in ("", ".", "..") for part in relative.split("/"))
        or skipped(relative)
    ):
        raise InputError(
            f"{where}: the index names a file outside the run ({str(relative)[:80]!r}); nothing was read"
        )
    return relative


def _part_key(key: Any, where: str) -> str:
    """An object an index names for a file: the run's own key for it, or one of its parts."""
    if isinstance(key, str) and key.startswith(".store/parts/"):
        rest = key.removeprefix(".store/parts/")
        if rest and not any(part in ("", ".", "..") for part in rest.split("/")) and "\0" not in rest:
            return key
    return safe_relative(key, where)


def parse_index(data: bytes, where: str) -> dict[str, dict[str, Any]]:
    """The files an index names: {relative path: {"size", "sha256", "parts": [[key, size]...]}}."""
    try:
        index = orjson.loads(data)
        files = index["files"]
        checked = {}
        for relative, entry in files.items():
            parts = [(_part_key(key, where), int(size)) for key, size in entry["parts"]]
            checked[safe_relative(relative, where)] = {
                "size": int(entry["size"]),
                "sha256": str(entry["sha256"]),
                "parts": parts,
            }
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError):
        raise InputError(f"{where}: the run's index is damaged (not the JSON probe writes)") from None
    return checked


def index_session(data: bytes) -> str | None:
    """The writer session that wrote an index (None: pushed, or not readable)."""
    try:
        session = orjson.loads(data).get("session")
    except (orjson.JSONDecodeError, AttributeError):
        return None
    return session if isinstance(session, str) else None


def dump_index(files: dict[str, dict[str, Any]], session: str) -> bytes:
    return orjson.dumps({"version": 1, "session": session, "files": files}, option=orjson.OPT_SORT_KEYS)


def local_files(folder: Path) -> dict[str, os.stat_result]:
    """Every regular file of a run directory by relative path (links and skipped files left out)."""
    found: dict[str, os.stat_result] = {}
    for directory, folders, names in os.walk(folder):
        folders[:] = [f for f in folders if not os.path.islink(os.path.join(directory, f))]
        base = os.path.relpath(directory, folder)
        for name in names:
            relative = name if base == "." else f"{base}/{name}".replace(os.sep, "/")
            if skipped(relative):
                continue
            info = os.lstat(os.path.join(directory, name))
            if os.path.isfile(os.path.join(directory, name)) and not os.path.islink(
                os.path.join(directory, name)
            ):
                found[relative] = info
    return found


def file_digest(path: Path, size: int | None = None) -> Any:
    """The running sha256 (a hashlib object, to go on with) of a file's first `size` bytes (all of
    it when None), read a megabyte at a time."""
    digest = hashlib.sha256()
    left = size
    with open(path, "rb") as handle:
        while left is None or left > 0:
            chunk = handle.read(1 << 20 if left is None else min(1 << 20, left))
            if not chunk:
                break
            digest.update(chunk)
            if left is not None:
                left -= len(chunk)
    return digest


def file_sha256(path: Path, size: int | None = None) -> str:
    """The sha256 of a file's first `size` bytes (all of it when None)."""
    return str(file_digest(path, size).hexdigest())
