"""Bringing a run's copy in the store up to date with its working copy, at a checkpoint.

File-agnostic: a file that grew in place (same inode, larger, its last uploaded bytes unchanged)
and is large goes up as a new part holding only what it gained (samples.jsonl, retrievals.jsonl,
packs); any other change (a small file, a file replaced whole) goes up whole, as a part of its
own. The manifest goes up after every other file, and the index after the manifest, so a reader
going by the index never sees a run whose files are not all there.

No checkpoint overwrites an object the store's index names: until the index is replaced, that
index and every object it names stay as they were, so a writer killed at any point leaves the
run as its last checkpoint left it. At the last checkpoint every file is written whole at its
own key (the store then mirrors the run directory), then the index naming them, and the parts
are removed; an object at a file's own key that the index names and that is to be rewritten is
first copied (in the store) to a part, and an index naming the copy put in its place.
"""

import hashlib
import itertools
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .cache import mark_session
from .index import INDEX, dump_index, file_digest, local_files
from .lease import Lease
from .remote import Store

# Below this a changed file goes up whole (PROBE_STORE_APPEND_BYTES tunes it; the tests set 0).
APPEND_MIN = int(os.environ.get("PROBE_STORE_APPEND_BYTES", "").strip() or 64 * 1024)
TAIL = 4096  # the bytes compared to tell an append from a rewrite in place
PUT_FILE_MIN = 16 * 1024 * 1024  # a file this large goes up from disk (multipart), not from memory


Quiet = Callable[[], AbstractContextManager[None]]  # holds appends off while sizes are taken


@dataclass
class Uploaded:
    """What the store holds of one file."""

    inode: int
    size: int
    mtime_ns: int
    digest: Any  # hashlib sha256 over the `size` bytes uploaded
    parts: list[tuple[str, int]] = field(default_factory=list)
    tail: bytes = b""

    def entry(self) -> dict[str, Any]:
        return {"size": self.size, "sha256": self.digest.hexdigest(), "parts": [list(p) for p in self.parts]}


def _read(path: Path, start: int, end: int) -> bytes:
    with open(path, "rb") as handle:
        handle.seek(start)
        return handle.read(end - start)


def adopted(local: Path, files: dict[str, dict[str, Any]]) -> dict[str, Uploaded]:
    """What the store holds of each file (its index's `files`) that the working copy `local` holds
    as a prefix of itself: a resumed run goes on from there."""
    found = {}
    for relative, entry in files.items():
        path = local / relative
        try:
            info = os.stat(path)
        except OSError:
            continue
        if info.st_size < entry["size"]:
            continue
        digest = file_digest(path, entry["size"])
        if digest.hexdigest() != entry["sha256"]:
            continue
        tail = _read(path, max(0, entry["size"] - TAIL), entry["size"])
        mtime = info.st_mtime_ns if info.st_size == entry["size"] else -1
        found[relative] = Uploaded(info.st_ino, entry["size"], mtime, digest, list(entry["parts"]), tail)
    return found


def copy_aside(
    store: Store, run_id: str, session: str, serials: Iterator[int], parts_of: dict[str, list[Any]]
) -> bool:
    """Before files are written over at their own keys: each own-key object that the store's index
    names among their parts (`parts_of`, file -> its parts, changed in place) is copied to a part
    of `session` first, so that a writer or push killed while the own keys are written leaves an
    index that holds once it names the copies (the caller puts it). Whether any was copied."""
    moved = False
    for relative, parts in parts_of.items():
        for number, (key, size) in enumerate(parts):
            if key == relative:
                aside = f".store/parts/{session}/{relative}.{next(serials):06d}.whole"
                store.copy(store.key(run_id, key), store.key(run_id, aside))
                parts[number] = (aside, size)
                moved = True
    return moved


class Uploader:
    """The store's copy of one run, kept up to date by `checkpoint`."""

    def __init__(self, store: Store, run_id: str, local: Path, lease: Lease, session: str) -> None:
        self.store = store
        self.run_id = run_id
        self.local = local
        self.lease = lease
        self.session = session
        self.known: dict[str, Uploaded] = {}
        self.mutex = threading.Lock()  # one checkpoint at a time
        self.parts_made = False
        self.serials = itertools.count(1)  # number the parts that hold a whole file: none written twice

    def adopt(self, files: dict[str, dict[str, Any]]) -> None:
        """Start from what the store already holds (a resumed run)."""
        self.known.update(adopted(self.local, files))

    def _changed(self, relative: str, info: os.stat_result) -> bool:
        old = self.known.get(relative)
        return old is None or (old.inode, old.size, old.mtime_ns) != (
            info.st_ino,
            info.st_size,
            info.st_mtime_ns,
        )

    def _appended(self, relative: str, info: os.stat_result) -> bool:
        old = self.known.get(relative)
        if old is None or old.inode != info.st_ino or info.st_size <= old.size or old.size < APPEND_MIN:
            return False
        return _read(self.local / relative, old.size - len(old.tail), old.size) == old.tail

    def checkpoint(self, between_writes: Quiet, final: bool = False) -> None:
        """Upload what changed, then the manifest, then the index (see the module's docstring)."""
        with self.mutex:
            self.lease.renew()
            with between_writes():  # appends are whole lines: sizes taken between them
                files = local_files(self.local)
            if final:
                self._set_own_keys_aside(files)
            objects: dict[str, bytes] = {}
            from_disk: list[str] = []
            for relative, info in sorted(files.items()):
                if relative == "manifest.json":
                    continue
                if self._changed(relative, info) or (final and not self._whole_at_own_key(relative, info)):
                    self._stage(relative, info, final, objects, from_disk)
            self.store.pipe_many(objects)
            for relative in from_disk:
                self.store.put_file(str(self.local / relative), self.store.key(self.run_id, relative))
            manifest = files.get("manifest.json")
            single: dict[str, bytes] = {}
            if manifest is not None and (
                self._changed("manifest.json", manifest)
                or (final and not self._whole_at_own_key("manifest.json", manifest))
            ):
                self._stage("manifest.json", manifest, final, single, [], append=False)
                self.store.pipe_many(single)
            gone = set(self.known) - set(files)
            for relative in gone:
                del self.known[relative]
            if not (objects or from_disk or single or gone or final):
                return  # nothing new: the lease is renewed, the index stays as it is
            self._put_index()
            if final:
                self._drop_parts()

    def _put_index(self) -> None:
        index = dump_index({k: v.entry() for k, v in self.known.items()}, self.session)
        self.store.pipe_many({self.store.key(self.run_id, INDEX): index})
        mark_session(self.local, self.session)

    def _whole_at_own_key(self, relative: str, info: os.stat_result) -> bool:
        return self.known[relative].parts == [(relative, info.st_size)]

    def _set_own_keys_aside(self, files: dict[str, os.stat_result]) -> None:
        """Before the last checkpoint rewrites files at their own keys: see copy_aside."""
        rewritten = [
            relative
            for relative, info in files.items()
            if relative in self.known
            and (self._changed(relative, info) or not self._whole_at_own_key(relative, info))
        ]
        parts_of = {relative: self.known[relative].parts for relative in rewritten}
        if copy_aside(self.store, self.run_id, self.session, self.serials, parts_of):
            self._put_index()

    def _stage(
        self,
        relative: str,
        info: os.stat_result,
        final: bool,
        objects: dict[str, bytes],
        from_disk: list[str],
        append: bool = True,
    ) -> None:
        """Stage one changed file: its new part, or the whole of it (a part of its own, or at the
        last checkpoint the file's own key)."""
        path = self.local / relative
        size = info.st_size
        if not final and append and self._appended(relative, info):
            old = self.known[relative]
            data = _read(path, old.size, size)
            key = f".store/parts/{self.session}/{relative}.{old.size:016d}"
            objects[self.store.key(self.run_id, key)] = data
            old.digest.update(data)
            old.parts.append((key, len(data)))
            old.tail = (old.tail + data)[-TAIL:]
            old.size, old.mtime_ns = size, info.st_mtime_ns
            self.parts_made = True
            return
        if size >= PUT_FILE_MIN and final:
            digest = file_digest(path)
            from_disk.append(relative)
            tail = _read(path, max(0, size - TAIL), size)
            key = relative
        else:
            data = _read(path, 0, size)
            size = len(data)
            digest = hashlib.sha256(data)
            key = relative
            if not final:  # never over an object an index names
                key = f".store/parts/{self.session}/{relative}.{next(self.serials):06d}.whole"
                self.parts_made = True
            objects[self.store.key(self.run_id, key)] = data
            tail = data[-TAIL:]
        self.known[relative] = Uploaded(info.st_ino, size, info.st_mtime_ns, digest, [(key, size)], tail)

    def _drop_parts(self) -> None:
        """Once every file is whole at its own key, the parts any writer left are not needed."""
        self.store.remove(self.store.find(self.store.key(self.run_id, ".store/parts")))
