"""Classifying files, and reclassifying recorded runs offline from their raw bytes.

A reclassification re-runs every check on every sample (no network call: the passages come
from retrievals.jsonl, the text from the raw pack) with the run's settings or new ones, and is written
as `classifications/N.jsonl` beside the earlier ones (each with the settings that made it).
Report and compare use the latest unless told otherwise. Asking again with identical settings
and unchanged production code (the files of the functions the checks import) reuses the
classification that has them: same number, no new file.
"""

import os
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

from .checks import (
    CheckError,
    CheckSettings,
    SampleView,
    build_checks,
    close_checks,
    metrics_for,
    outcomes,
    run_checks,
)
from .checks.header import classify, header_class
from .checks.settings import HeaderConfig
from .counts import classifications, merged_samples, settings_of
from .engine.store import RunStore, load_manifest, utc_now
from .errors import InputError
from .jsonio import iter_jsonl
from .judgments import judgments_source
from .models import model_of
from .pack import RawReader
from .paths import is_file
from .probeset import parse_probeset
from .providers import protect_keys
from .tomlfile import read_input
from .version import __version__


def classify_file(path: Path, config: HeaderConfig | None = None) -> dict[str, Any]:
    """Classify one file's exact bytes; invalid UTF-8 is an InputError naming the byte."""
    data = read_input(path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not valid UTF-8 (byte {exc.start})") from None
    return {"path": str(path), **classify(text, config)}


def is_run(path: Path) -> bool:
    return is_file(path / "manifest.json")


def code_fingerprint(settings: CheckSettings) -> str:
    """The fingerprint of the production code these checks call (promptprobe.production)."""
    from .production import code_fingerprint as fingerprint

    return fingerprint(settings.functions())


# Errors a check made of a sample that has its output: a reclassification may clear them.
CHECK_ERRORS = ("check", "filter")


def _same(
    run_dir: Path, manifest: dict[str, Any], numbers: list[int], settings: CheckSettings
) -> int | None | bool:
    """The classification with these settings, this code and this version of promptprobe (None:
    the run's own), or False."""
    wanted = settings.to_dict()
    fingerprint = code_fingerprint(settings)
    from .jsonio import iter_jsonl as lines

    for number in reversed(numbers):
        meta = next(iter(lines(run_dir / "classifications" / f"{number}.jsonl", lambda message: None)), None)
        same_tool = meta and meta.get("tool_version") == __version__  # a newer classifier may differ
        if same_tool and meta.get("settings") == wanted and meta.get("code") == fingerprint:
            return number
    own = CheckSettings.from_dict(manifest.get("checks") or {"header": manifest.get("header")}).to_dict()
    same_tool = manifest.get("tool_version") == __version__
    if not numbers and same_tool and own == wanted and manifest.get("code", fingerprint) == fingerprint:
        return None
    return False


def _classified(
    checks: list[Any], view: SampleView, sample: dict[str, Any], settings: CheckSettings
) -> dict[str, Any]:
    """The sample's line of a classification: its header, checks and outcomes, or the check error."""
    line: dict[str, Any] = {"sample_id": sample["sample_id"]}
    try:
        line["header"], line["checks"] = run_checks(checks, view)
        if (sample.get("error") or {}).get("kind") in CHECK_ERRORS:
            line["error"] = None  # the checks that failed on this output run cleanly now
        line["outcomes"] = outcomes(dict(sample, **line), view.case, settings)
    except CheckError as exc:
        line.update(
            header=None,
            checks={},
            error={"kind": exc.kind, "message": str(exc), "attempts": sample["attempts"]},
        )
    return line


def _metrics_changed(
    sample: dict[str, Any], new: dict[str, Any], case: Any, old: CheckSettings, settings: CheckSettings
) -> list[str]:
    """The metrics whose outcome for this sample differs between the two classifications."""
    if sample.get("error") or new.get("error"):
        return []
    return [
        name
        for name, metric in metrics_for(settings).items()
        if metric.applies(case, old)
        and metric.applies(case, settings)
        and metric.outcome(sample, case, old) != metric.outcome(new, case, settings)
    ]


def reclassify_run(run_dir: Path, settings: CheckSettings | None = None) -> dict[str, Any]:
    """Re-run every check offline; write classification N; say what moved against the latest.
    With the settings and code of an existing classification, that one is reused."""
    manifest = load_manifest(run_dir)
    numbers = classifications(run_dir)
    previous = numbers[-1] if numbers else None
    old_settings = settings_of(run_dir, manifest, previous)
    # Judged checks change only by `probe judge`: a reclassification keeps them and their judgments.
    settings = replace(settings or old_settings, judges=old_settings.judges)
    existing = _same(run_dir, manifest, numbers, settings)
    if existing is not False:
        return _summary(run_dir, existing, previous, settings, 0, Counter(), Counter(), reused=True)
    # The checks are user code run with the keys in the environment: what they say is scrubbed.
    protect_keys([model_of(model) for model in manifest.get("models") or []])
    checks = build_checks(settings)
    try:
        probeset = parse_probeset(
            manifest["probeset"]["source"].encode("utf-8"), Path(manifest["probeset"]["path"])
        )
        cases = {c.id: c for c in probeset.cases}
        passages: dict[tuple[str, int], list[dict[str, Any]]] = {}
        for record in iter_jsonl(run_dir / "retrievals.jsonl"):
            if record.get("error") is None:
                passages[(record["case_id"], record["repeat"])] = record["passages"]
        number = (numbers[-1] + 1) if numbers else 1
        store = RunStore(run_dir, 0o777 & ~os.stat(run_dir).st_mode)
        (run_dir / "classifications").mkdir(mode=store.dir_mode, exist_ok=True)
        name = f"classifications/{number}.jsonl"
        store.append(
            name,
            {
                "classification": number,
                "created": utc_now(),
                "settings": settings.to_dict(),
                "based_on": previous,
                "code": code_fingerprint(settings),
                "tool_version": __version__,
                **({"judgments": judgments_source(run_dir, previous)} if settings.judges else {}),
            },
        )
        moved: Counter = Counter()
        changed: Counter = Counter()
        total = 0
        reader = RawReader(run_dir)
        for sample in merged_samples(run_dir, previous, lambda message: None):
            if sample.get("raw") is None:
                continue  # no output: nothing to classify (the failure stays what it was)
            case = cases.get(sample["case_id"])
            if case is None:
                continue
            total += 1
            raw = reader.read(sample).decode("utf-8", "surrogateescape")  # RawUnreadable: one sentence
            response = sample.get("response") or {}
            text = None if response.get("content", "") is None else raw
            got = passages.get((case.id, sample["repeat"]), [])
            line = _classified(checks, SampleView(case, text, got, response, settings, {}), sample, settings)
            store.append(name, line)
            new = dict(sample, **line)
            before, after = header_class(sample) or "error", header_class(new) or "error"
            if before != after:
                moved[(before, after)] += 1
            changed.update(_metrics_changed(sample, new, case, old_settings, settings))
    finally:
        close_checks(checks)
    return _summary(run_dir, number, previous, settings, total, moved, changed, reused=False)


def _summary(
    run_dir: Path,
    number: int,
    previous: int | None,
    settings: CheckSettings,
    total: int,
    moved: Counter,
    changed: Counter,
    reused: bool,
) -> dict[str, Any]:
    """What `probe classify RUN` says: the classification, and what moved against the latest."""
    return {
        "run": str(run_dir),
        "classification": number,
        "based_on": previous,
        "reused": reused,
        "samples": total,
        "settings": settings.to_dict(),
        "moved": [{"from": a, "to": b, "samples": n} for (a, b), n in sorted(moved.items())],
        "metrics_changed": dict(changed),
    }


def describe_reclassification(result: dict[str, Any]) -> str:
    if result.get("reused"):
        which = f"classification {result['classification']}" if result["classification"] else "the run's own"
        return (
            f"{result['run']}: {which} already has these settings and this code; nothing to do "
            "(probe report and probe compare use it)"
        )
    basis = f"classification {result['based_on']}" if result["based_on"] else "the run's own classification"
    lines = [
        f"classification {result['classification']} of {result['run']}: {result['samples']} samples "
        f"reclassified offline (compared with {basis})"
    ]
    if not result["moved"]:
        lines.append("no sample changed header class")
    for move in result["moved"]:
        lines.append(f"{move['samples']} samples moved from {move['from']} to {move['to']}")
    for metric, n in sorted(result["metrics_changed"].items()):
        lines.append(f"{metric}: {n} samples changed outcome")
    lines.append("probe report and probe compare now use it (--classification N picks another)")
    return "\n".join(lines)
