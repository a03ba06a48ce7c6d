"""A run's per-arm totals: its samples, failures, tokens, cost and latency, as the report and the
provenance show them (`usage`). The process that counts a whole run at its end (`probe run`'s own
report) keeps them in the run's manifest (`totals`, docs/runs.md), so that a page showing one
sample (`probe show`) has its provenance without a pass over a million lines; beside them, the
run's whole counts table (kept-counts.json), so that the report and comparisons need none either.
They are used only while their stamp (promptprobe.stamp) is the run's stamp now: the same
samples.jsonl and judgments (size and modification time), the same manifest, classification,
promptprobe version and price data; anything else (an older run, a run still going, a resume, a
reclassification, a judgment, a hand-edited file, a copy that did not keep modification times) is
counted again, as it always was.
"""

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from .counts import KEPT_COUNTS, ArmCounts, CountsTable, arm_specs, build_counts, kept_form
from .engine.store import RunStore, StorageError, load_manifest
from .errors import InputError
from .stamp import holds, stamp

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


def count_and_keep(run_dir: Path) -> CountsTable:
    """The run's counts table; when the run has ended, was counted without a warning, and nothing
    changed it while it was counted, its per-arm totals (`kept_totals`, in its manifest) and its
    counts (KEPT_COUNTS, which promptprobe.counts reads back) are kept for later readers."""
    before = stamp(run_dir, load_manifest(run_dir))
    counts = build_counts(run_dir)
    ended = counts.manifest.get("status") not in (None, "running")
    if ended and counts.classification is None and not counts.warnings:
        _keep(run_dir, before, [ArmTotals.of(arm) for arm in counts.arms], kept_form(counts))
    return counts


def _keep(run_dir: Path, before: dict[str, Any], arms: list[ArmTotals], counts: dict[str, Any]) -> None:
    """Write the counts and the totals, holding the run's lock, if the run is still as counted."""
    try:
        store = RunStore.open(run_dir)
    except (InputError, StorageError, OSError):
        return  # another process works on the run (it keeps its own), or it cannot be written
    try:
        manifest = load_manifest(run_dir)
        if stamp(run_dir, manifest) == before:
            store.replace_file(KEPT_COUNTS, orjson.dumps({"stamp": before, "counts": counts}) + b"\n")
            store.write_manifest({**manifest, "totals": {**before, "arms": [a.to_dict() for a in arms]}})
    except (InputError, StorageError, OSError):
        return  # the run stays as it was, without them: readers count it
    finally:
        store.release()


def kept_totals(run_dir: Path, manifest: dict[str, Any]) -> list[ArmTotals] | None:
    """The per-arm totals the manifest keeps, in the manifest's arm order, when they still describe
    the run as it stands (None: the run must be counted)."""
    kept = manifest.get("totals")
    if not isinstance(kept, dict) or not holds(
        {k: v for k, v in kept.items() if k != "arms"}, run_dir, manifest
    ):
        return None
    arms = kept.get("arms")
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
