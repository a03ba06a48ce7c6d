"""`probe migrate RUN`: a run recorded before packs (one file per blob: `raw/<sample_id>.txt`,
`.body`, `.request.json`) converted to packs, losing nothing. Every blob is appended to the pack
as it is (no scrub, no change), read back and checked by sha256 against the file it came from
(and against its record's sha256 for an output); only then are the records rewritten (atomically)
to point into the pack, and only then are the old files removed. A kill at any point leaves a run
every command reads; migrating again finishes the work, packing no blob twice."""

import hashlib
import os
from pathlib import Path
from typing import Any

from .engine.store import RunStore, load_manifest
from .errors import InputError
from .jsonio import content_end, dumps_line, loads
from .pack import (
    BODY,
    LEGACY_SUFFIX,
    RAW_DIR,
    REQUEST,
    TEXT,
    RawReader,
    RawUnreadable,
    iter_index,
    read_legacy,
)
from .paths import open_run_file

RECORD_FILES = ("samples.jsonl", "superseded.jsonl")


def _legacy_files(run_dir: Path) -> dict[tuple[str, str], str]:
    """(sample id, kind) -> relative path of each blob file of a run before packs."""
    found: dict[tuple[str, str], str] = {}
    try:
        names = os.listdir(run_dir / RAW_DIR)
    except OSError:
        return found
    for name in names:
        for kind in (REQUEST, BODY, TEXT):  # `.request.json` before a shorter suffix could match
            suffix = LEGACY_SUFFIX[kind]
            if name.endswith(suffix) and len(name) > len(suffix):
                found[(name[: -len(suffix)], kind)] = f"{RAW_DIR}/{name}"
                break
    return found


def _read_lines(path: Path) -> list[bytes]:
    """The whole lines of a records file; a torn or NUL tail is refused (verify, resume first)."""
    try:
        handle = open_run_file(path.parent, path.name)
    except FileNotFoundError:
        return []
    with handle:
        end, size = content_end(handle), os.fstat(handle.fileno()).st_size
        data = handle.read(end)
    if end < size or (data and not data.endswith(b"\n")):
        raise InputError(
            f"{path}: its last line is torn or NUL-filled; probe run --resume cuts it before migrating"
        )
    return data.splitlines(keepends=True)


class Migration:
    """One run's blobs packed and its records rewritten."""

    def __init__(self, run_dir: Path) -> None:
        load_manifest(run_dir)
        self.run_dir = run_dir
        self.store = RunStore.open(run_dir)  # its lock: no run or other migration works on it meanwhile
        self.reader = RawReader(run_dir)
        self.legacy = _legacy_files(run_dir)
        self.moved: dict[tuple[str, str], dict[str, Any]] = {}
        # A migration killed midway packed some blobs already: those are used, not packed twice.
        self.packed = {(e["sample_id"], e["kind"]): e for e in iter_index(run_dir)}

    def pack(self, sample_id: str, kind: str, recorded_sha: str | None = None) -> dict[str, Any]:
        """The blob's location in the pack (appended once, checked against its file)."""
        key = (sample_id, kind)
        if key in self.moved:
            return self.moved[key]
        relative = f"{RAW_DIR}/{sample_id}{LEGACY_SUFFIX[kind]}"
        try:
            data = read_legacy(self.run_dir, sample_id, kind)
        except RawUnreadable as exc:
            raise InputError(f"{exc}; nothing was migrated (probe verify lists the damage)") from None
        digest = hashlib.sha256(data).hexdigest()
        if recorded_sha is not None and digest != recorded_sha:
            raise InputError(
                f"{relative}: does not match the sha256 its record holds; nothing was migrated "
                "(probe verify lists the damage)"
            )
        earlier = self.packed.get(key)
        if earlier is not None and earlier["sha256"] == digest:
            location = {name: earlier[name] for name in ("pack", "offset", "bytes", "sha256")}
        else:
            location = self.store.packs.append(sample_id, kind, data)  # as it is: scrubbed when written
        self.moved[key] = location
        return location

    def record(self, line: bytes) -> bytes:
        if not line.strip():
            return line
        record = loads(line)
        if not isinstance(record, dict) or not isinstance(record.get("sample_id"), str):
            return line
        sid = record["sample_id"]
        raw = record.get("raw")
        if isinstance(raw, dict) and "pack" not in raw:
            record["raw"] = self.pack(sid, TEXT, raw.get("sha256"))
        response = record.get("response")
        if isinstance(response, dict) and isinstance(response.get("body"), str):
            response["body"] = self.pack(sid, BODY)
        if (sid, REQUEST) in self.legacy:
            self.pack(sid, REQUEST)
        return dumps_line(record)

    def run(self) -> dict[str, Any]:
        try:
            rewritten = {
                name: [self.record(line) for line in _read_lines(self.run_dir / name)]
                for name in RECORD_FILES
            }
            for sample_id, kind in sorted(self.legacy):  # blobs no record names (a sample in flight)
                self.pack(sample_id, kind)
            self.store.packs.sync()
            self.check_packed()
            for name, lines in rewritten.items():
                if (self.run_dir / name).is_file():
                    self.replace(name, b"".join(lines))
            for relative in sorted(set(self.legacy.values())):
                os.unlink(self.run_dir / relative)
        finally:
            self.store.release()
        return {
            "run": str(self.run_dir),
            "packed": len(self.moved),
            "files_removed": len(set(self.legacy.values())),
        }

    def check_packed(self) -> None:
        """Every blob read back from the pack against the sha256 of the file it came from."""
        for (sample_id, _kind), location in self.moved.items():
            data = self.reader.read({"sample_id": sample_id, "raw": location}, TEXT, check=False)
            if hashlib.sha256(data).hexdigest() != location["sha256"]:
                raise InputError(f"{location['pack']}: a blob of {sample_id} did not read back as written")

    def replace(self, name: str, data: bytes) -> None:
        """The records file replaced whole (written beside, fsynced, renamed)."""
        temp = self.run_dir / f"{name}.tmp"
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, self.store.file_mode)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, self.run_dir / name)


def migrate_run(run_dir: str | Path) -> dict[str, Any]:
    """Convert a run's raw files to packs (see the module's docstring); what was moved."""
    return Migration(Path(run_dir)).run()
