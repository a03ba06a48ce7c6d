"""The run directory: manifest first, samples appended and flushed as they finish, raw bytes."""

import hashlib
import json
import os
import secrets
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .errors import InputError

SCHEMA_VERSION = 1


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _dump(record: dict[str, Any]) -> str:
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"))


class RunStore:
    """Writes one run directory; every write is complete on disk before the next sample."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lock = threading.Lock()

    @classmethod
    def create(cls, runs_dir: Path, probeset_name: str) -> "RunStore":
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
        safe_name = "".join(c if c.isalnum() or c in "._-" else "-" for c in probeset_name)
        path = runs_dir / f"{stamp}-{safe_name}-{secrets.token_hex(3)}"
        (path / "raw").mkdir(parents=True)
        (path / "prompts").mkdir()
        return cls(path)

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        # Write beside and rename, so a crash never leaves half a manifest.
        temp = self.path / "manifest.json.tmp"
        temp.write_text(json.dumps(manifest, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
        os.replace(temp, self.path / "manifest.json")

    def write_bytes(self, relative: str, data: bytes) -> dict[str, Any]:
        with open(self.path / relative, "wb") as handle:
            handle.write(data)
        return {"path": relative, "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}

    def _append(self, name: str, record: dict[str, Any]) -> None:
        with self.lock, open(self.path / name, "a", encoding="utf-8") as handle:
            handle.write(_dump(record) + "\n")
            handle.flush()
            os.fsync(handle.fileno())

    def append_sample(self, record: dict[str, Any]) -> None:
        self._append("samples.jsonl", record)

    def append_retrieval(self, record: dict[str, Any]) -> None:
        self._append("retrievals.jsonl", record)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    records = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                # Lines are written whole and fsynced, so a bad line means the file was edited.
                raise InputError(f"{path}: line {number} is not valid JSON") from None
    return records


def load_run(run_dir: str | Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The manifest and the samples of a recorded run."""
    run_dir = Path(run_dir)
    manifest_path = run_dir / "manifest.json"
    if not manifest_path.is_file():
        raise InputError(f"{run_dir}: not a run directory (no manifest.json)")
    try:
        manifest = json.loads(manifest_path.read_text("utf-8"))
    except json.JSONDecodeError as exc:
        raise InputError(f"{manifest_path}: not valid JSON ({exc})") from None
    return manifest, read_jsonl(run_dir / "samples.jsonl")
