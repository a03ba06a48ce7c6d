"""Classifying files and recorded runs offline, from their raw bytes."""

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .errors import InputError
from .header import HeaderConfig, classify
from .tomlfile import read_input


def classify_file(path: Path, config: HeaderConfig | None = None) -> dict[str, Any]:
    """Classify one file's exact bytes; invalid UTF-8 is an InputError naming the byte."""
    data = read_input(path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not valid UTF-8 (byte {exc.start})") from None
    return {"path": str(path), **classify(text, config)}


def classify_path(path: Path, config: HeaderConfig | None = None) -> Iterator[dict[str, Any]]:
    """A file gives one result; a run directory gives one per recorded sample."""
    if (path / "samples.jsonl").is_file():
        yield from reclassify_run(path, config)
    elif path.is_dir():
        raise InputError(f"{path}: a directory that is not a run (no samples.jsonl)")
    else:
        yield classify_file(path, config)


def reclassify_run(run_dir: Path, config: HeaderConfig | None = None) -> Iterator[dict[str, Any]]:
    """Reclassify every sample of a run from raw/ with the run's header config or `config`."""
    manifest = json.loads((run_dir / "manifest.json").read_text("utf-8"))
    if config is None:
        header = manifest.get("header") or {}
        config = HeaderConfig(
            markers=tuple(header.get("markers", HeaderConfig().markers)),
            no_answer=header.get("no_answer", HeaderConfig().no_answer),
            allow_leading_whitespace=header.get("allow_leading_whitespace", False),
        )
    with open(run_dir / "samples.jsonl", encoding="utf-8") as lines:
        for line in lines:
            if not line.strip():
                continue
            sample = json.loads(line)
            if sample.get("raw") is None:
                yield {"sample_id": sample["sample_id"], "path": None, "error": sample["error"]}
                continue
            result = classify_file(run_dir / sample["raw"]["path"], config)
            yield {"sample_id": sample["sample_id"], **result}
