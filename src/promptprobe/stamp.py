"""What a run's kept figures (its per-arm totals in its manifest and its counts in kept-counts.json,
kept at the run's end: promptprobe.totals) were counted from: everything that, changed, could
change them. A kept figure is used only while the stamp it was kept with equals the run's stamp
now."""

import hashlib
import os
import stat
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import orjson

from .version import __version__

FORMAT = 2  # bumped whenever what is kept, or how it is counted, changes (2: the counts kept too)


def _file(path: Path) -> list[int | None]:
    """A file's size and modification time (0 and None when there is none; -1 and None when it is
    a link or not a regular file: no stamp holds, so the reader opens it and refuses it)."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return [0, None]
    if not stat.S_ISREG(info.st_mode):
        return [-1, None]
    return [info.st_size, info.st_mtime_ns]


def classifications(run_dir: Path) -> list[int]:
    """The numbers of a run's offline reclassifications, oldest first."""
    folder = run_dir / "classifications"
    if not folder.is_dir():
        return []
    return sorted(int(p.stem) for p in folder.glob("*.jsonl") if p.stem.isdigit())


def stamp(run_dir: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    """The run as its figures are counted from it: samples.jsonl and the judgments (size and
    modification time), the manifest (without what it keeps), the latest classification, the
    promptprobe version and the price data."""
    samples_bytes, samples_mtime = _file(run_dir / "samples.jsonl")
    numbers = classifications(run_dir)
    rest = {key: value for key, value in manifest.items() if key != "totals"}
    return {
        "format": FORMAT,
        "tool_version": __version__,
        "prices": _price_data(),
        "classification": numbers[-1] if numbers else None,
        "samples_bytes": samples_bytes,
        "samples_mtime_ns": samples_mtime,
        "judgments": _file(run_dir / "judgments.jsonl"),
        "manifest_sha256": hashlib.sha256(orjson.dumps(rest, option=orjson.OPT_SORT_KEYS)).hexdigest(),
    }


def _price_data() -> str | None:
    """The version of the price library the built-in prices come from (read without importing it)."""
    try:
        return f"genai-prices {version('genai-prices')}"
    except PackageNotFoundError:
        return None


def holds(kept: Any, run_dir: Path, manifest: dict[str, Any]) -> bool:
    """Whether a kept stamp is the stamp of the run as it stands (and the run has ended)."""
    return (
        isinstance(kept, dict)
        and manifest.get("status") not in (None, "running")
        and kept == stamp(run_dir, manifest)
    )
