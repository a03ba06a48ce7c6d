"""A run's per-arm totals: its samples, failures, tokens, cost and latency, as the report and the
provenance show them (`usage`). The process that counts a whole run at its end (`probe run`'s own
report) keeps them in the run's manifest (`totals`, docs/runs.md), so that a page showing one
sample (`probe show`) has its provenance without a pass over a million lines. They are used only
while they still describe the run as it stands: the same samples.jsonl (size and modification
time), the same manifest, classification, promptprobe version and price data; anything else (an
older run, a run still going, a resume, a reclassification, a hand-edited file, a copy that did not
keep modification times) is counted again, as it always was.
"""

import hashlib
import math
import os
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import orjson

from .counts import ArmCounts, CountsTable, arm_specs, build_counts, classifications
from .engine.store import RunStore, StorageError, load_manifest
from .errors import InputError
from .version import __version__

FORMAT = 1  # bumped whenever what the totals hold, or how they are counted, changes
USAGE_KEYS = ("input_tokens", "output_tokens", "cost_usd", "cache_saved_usd", "batch_samples", "latency_ms")
ARM_KEYS = ("prompt", "model", "samples", "errors", "usage")


def percentiles(values: Iterable[float], qs: tuple[float, ...]) -> list[float | None]:
    """Each q-quantile of the values, interpolated between order statistics as sorting them would
    give it, from the count of each distinct value (latencies repeat: a million need no sort)."""
    counted = Counter(values)
    n = sum(counted.values())
    if not n:
        return [None for _ in qs]
    wanted: dict[int, float] = {}
    for q in qs:
        position = (n - 1) * q
        wanted.setdefault(math.floor(position), 0.0)
        wanted.setdefault(math.ceil(position), 0.0)
    seen, ranks = 0, sorted(wanted)
    at = 0
    for value in sorted(counted):
        seen += counted[value]
        while at < len(ranks) and ranks[at] < seen:  # the values of ranks seen-count .. seen-1
            wanted[ranks[at]] = value
            at += 1
        if at == len(ranks):
            break
    found = []
    for q in qs:
        position = (n - 1) * q
        low, high = wanted[math.floor(position)], wanted[math.ceil(position)]
        found.append(low + (high - low) * (position - math.floor(position)))
    return found


def usage(arm: ArmCounts) -> dict[str, Any]:
    """An arm's tokens, cost, cache savings, batched samples and latency median and p90."""
    median, p90 = percentiles(arm.latencies, (0.5, 0.9))
    return {
        "input_tokens": arm.input_tokens,
        "output_tokens": arm.output_tokens,
        "cost_usd": None if arm.cost_unknown else round(arm.cost, 6),
        "cache_saved_usd": None if arm.cost_unknown else round(arm.cache_saved, 6),
        "batch_samples": arm.batched,
        "latency_ms": {"median": median, "p90": p90},
    }


@dataclass(frozen=True)
class ArmTotals:
    """One arm's totals over the whole run, as the provenance shows them."""

    prompt: str
    model: str  # the arm's model name (its spec unless named NAME=SPEC)
    spec: str
    samples: int
    errors: int
    usage: dict[str, Any]

    @classmethod
    def of(cls, arm: ArmCounts) -> "ArmTotals":
        return cls(arm.prompt, arm.model, arm.spec, arm.samples, arm.errors, usage(arm))

    def to_dict(self) -> dict[str, Any]:
        """As the manifest keeps it (the spec is the manifest's own: not repeated)."""
        return {
            "prompt": self.prompt,
            "model": self.model,
            "samples": self.samples,
            "errors": self.errors,
            "usage": self.usage,
        }


def stamp(run_dir: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    """What the totals were counted from: everything that, changed, could change them."""
    try:
        info = os.stat(run_dir / "samples.jsonl")
        size, mtime = info.st_size, info.st_mtime_ns
    except FileNotFoundError:
        size, mtime = 0, None
    numbers = classifications(run_dir)
    rest = {key: value for key, value in manifest.items() if key != "totals"}
    return {
        "format": FORMAT,
        "tool_version": __version__,
        "prices": _price_data(),
        "classification": numbers[-1] if numbers else None,
        "samples_bytes": size,
        "samples_mtime_ns": mtime,
        "manifest_sha256": hashlib.sha256(orjson.dumps(rest, option=orjson.OPT_SORT_KEYS)).hexdigest(),
    }


def _price_data() -> str | None:
    """The version of the price library the built-in prices come from (read without importing it)."""
    try:
        return f"genai-prices {version('genai-prices')}"
    except PackageNotFoundError:
        return None


def count_and_keep(run_dir: Path) -> CountsTable:
    """The run's counts table; when the run has ended and nothing changed it while it was counted,
    its per-arm totals are kept in its manifest for later readers (`kept_totals`)."""
    before = stamp(run_dir, load_manifest(run_dir))
    counts = build_counts(run_dir)
    if counts.manifest.get("status") not in (None, "running") and counts.classification is None:
        _keep(run_dir, before, [ArmTotals.of(arm) for arm in counts.arms])
    return counts


def _keep(run_dir: Path, before: dict[str, Any], arms: list[ArmTotals]) -> None:
    """Write the totals into the manifest, holding the run's lock, if the run is still as counted."""
    try:
        store = RunStore.open(run_dir)
    except (InputError, StorageError, OSError):
        return  # another process works on the run (it keeps its own totals), or it cannot be written
    try:
        manifest = load_manifest(run_dir)
        if stamp(run_dir, manifest) == before:
            store.write_manifest({**manifest, "totals": {**before, "arms": [a.to_dict() for a in arms]}})
    except (InputError, StorageError, OSError):
        return  # the run stays as it was, without totals: readers count it
    finally:
        store.release()


def kept_totals(run_dir: Path, manifest: dict[str, Any]) -> list[ArmTotals] | None:
    """The per-arm totals the manifest keeps, in the manifest's arm order, when they still describe
    the run as it stands (None: the run must be counted)."""
    kept = manifest.get("totals")
    if not isinstance(kept, dict) or manifest.get("status") in (None, "running"):
        return None
    arms = kept.get("arms")
    if {key: value for key, value in kept.items() if key != "arms"} != stamp(run_dir, manifest):
        return None
    planned = [(a.get("prompt"), a.get("model")) for a in manifest["arms"] if isinstance(a, dict)]
    if not isinstance(arms, list) or len(arms) != len(manifest["arms"]) or not all(map(_well_formed, arms)):
        return None
    if [(a["prompt"], a["model"]) for a in arms] != planned:
        return None
    specs = arm_specs(manifest)
    return [
        ArmTotals(
            a["prompt"], a["model"], specs.get(a["model"], a["model"]), a["samples"], a["errors"], a["usage"]
        )
        for a in arms
    ]


def _well_formed(arm: Any) -> bool:
    """An arm's totals as `ArmTotals.to_dict` writes them, its usage as `usage` makes it."""
    if not isinstance(arm, dict) or tuple(arm) != ARM_KEYS or not isinstance(arm["usage"], dict):
        return False
    use = arm["usage"]
    latency = use.get("latency_ms")
    return (
        tuple(use) == USAGE_KEYS
        and isinstance(latency, dict)
        and tuple(latency) == ("median", "p90")
        and all(type(arm[key]) is int for key in ("samples", "errors"))
        and all(type(use[key]) is int for key in ("input_tokens", "output_tokens", "batch_samples"))
        and all(type(use[key]) in (float, int, type(None)) for key in ("cost_usd", "cache_saved_usd"))
        and all(type(value) in (float, type(None)) for value in latency.values())
    )
