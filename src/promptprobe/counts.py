"""One streaming pass over a run directory into a counts table: per (arm, case, metric) the
successes, trials and failures, plus per arm its header classes, tokens, cost and latencies,
and per case what the retrieval returned. Report, compare, why and the HTML view all read this
table; none of them reads samples.jsonl itself for counting. Memory does not grow with the
number of samples (latencies are kept as one packed array per arm).

A failed sample (no output) stays in every denominator it belongs to and counts as that
metric's unfavourable outcome: a miss where higher is better, an event where lower is better.
"""

from array import array
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .checks import METRICS, CheckSettings, Metric
from .checks.header import header_class
from .engine.cost import PriceTable, load_prices, usage_tokens
from .engine.store import iter_samples, load_manifest, run_state
from .errors import InputError
from .jsonio import iter_jsonl
from .models import parse_model_spec
from .probeset import Case, ProbeSet, parse_probeset

HEADER_STATES = ("present", "absent", "misplaced", "empty", "errors")


@dataclass
class ArmCounts:
    prompt: str
    model: str
    samples: int = 0
    errors: int = 0
    error_kinds: Counter = field(default_factory=Counter)
    # metric -> case_id -> [successes, trials, failed samples among the trials]
    metrics: dict[str, dict[str, list[int]]] = field(default_factory=dict)
    headers: dict[str, Counter] = field(default_factory=dict)
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0
    cost_unknown: bool = False
    latencies: array = field(default_factory=lambda: array("d"))

    @property
    def label(self) -> str:
        return f"prompt={self.prompt},model={self.model}"


@dataclass
class CountsTable:
    run: Path
    manifest: dict[str, Any]
    state: str
    probeset: ProbeSet
    settings: CheckSettings
    classification: int | None
    arms: list[ArmCounts]
    # case_id -> Counter of the passage-id tuples its samples got
    snapshots: dict[str, Counter] = field(default_factory=dict)
    empty_retrievals: Counter = field(default_factory=Counter)
    recorded: int = 0
    simulated: bool = False
    warnings: list[str] = field(default_factory=list)
    sequential: list[dict[str, Any]] = field(default_factory=list)

    @property
    def cases(self) -> dict[str, Case]:
        return {c.id: c for c in self.probeset.cases}

    @property
    def case_order(self) -> list[str]:
        return [c.id for c in self.probeset.cases]

    @property
    def planned(self) -> int | None:
        return (self.manifest.get("counts") or {}).get("planned")

    def arm(self, prompt: str, model: str) -> ArmCounts:
        return next(a for a in self.arms if a.prompt == prompt and a.model == model)


def classifications(run_dir: Path) -> list[int]:
    """The numbers of a run's offline reclassifications, oldest first."""
    folder = run_dir / "classifications"
    if not folder.is_dir():
        return []
    return sorted(int(p.stem) for p in folder.glob("*.jsonl") if p.stem.isdigit())


def _overlay(
    run_dir: Path, number: int, on_warning: Callable[[str], None]
) -> tuple[dict[str, Any], Iterator[dict[str, Any]]]:
    path = run_dir / "classifications" / f"{number}.jsonl"
    lines = iter_jsonl(path, on_warning)
    meta = next(lines, None)
    if not meta or "classification" not in meta:
        raise InputError(f"{path}: not a classification file (no header line)")
    return meta, lines


def merged_samples(
    run_dir: Path, number: int | None, on_warning: Callable[[str], None]
) -> Iterator[dict[str, Any]]:
    """The samples, with header and checks replaced by reclassification `number` when given."""
    samples = iter_samples(run_dir, on_warning)
    if number is None:
        yield from samples
        return
    _, lines = _overlay(run_dir, number, on_warning)
    pending: dict[str, dict[str, Any]] = {}
    for sample in samples:
        # Reclassification streams samples.jsonl in order, so lines usually match one for one.
        override = pending.pop(sample["sample_id"], None)
        while override is None:
            line = next(lines, None)
            if line is None:
                break
            if line["sample_id"] == sample["sample_id"]:
                override = line
            else:
                pending[line["sample_id"]] = line
        if override is not None and sample.get("raw") is not None:
            sample = dict(sample, header=override.get("header"), checks=override.get("checks") or {})
            if override.get("error"):
                sample["error"] = override["error"]
        yield sample


def settings_of(run_dir: Path, manifest: dict[str, Any], number: int | None) -> CheckSettings:
    if number is not None:
        meta, _ = _overlay(run_dir, number, lambda message: None)
        return CheckSettings.from_dict(meta.get("settings"))
    return CheckSettings.from_dict(manifest.get("checks") or {"header": manifest.get("header")})


def _probeset(manifest: dict[str, Any]) -> ProbeSet:
    return parse_probeset(manifest["probeset"]["source"].encode("utf-8"), Path(manifest["probeset"]["path"]))


def build_counts(
    run_dir: str | Path,
    *,
    classification: int | None = None,
    top_k: int | None = None,
    on_warning: Callable[[str], None] | None = None,
) -> CountsTable:
    """The counts table of a recorded run (the latest reclassification unless one is named)."""
    run_dir = Path(run_dir)
    manifest = load_manifest(run_dir)
    warnings: list[str] = []
    warn = on_warning or warnings.append
    numbers = classifications(run_dir)
    if classification is not None and classification not in numbers:
        known = ", ".join(map(str, numbers)) or "none"
        raise InputError(f"{run_dir}: no classification {classification} (this run has: {known})")
    number = classification if classification is not None else (numbers[-1] if numbers else None)
    settings = settings_of(run_dir, manifest, number).with_top_k(top_k)
    probeset = _probeset(manifest)
    cases = {c.id: c for c in probeset.cases}
    arms = [ArmCounts(a["prompt"], a["model"]) for a in manifest["arms"]]
    by_key = {(a.prompt, a.model): a for a in arms}
    # Which metrics apply depends on the case and the settings only: work it out once per case.
    applicable: dict[str, list[tuple[str, Metric]]] = {
        case_id: [(name, m) for name, m in METRICS.items() if m.applies(case, settings)]
        for case_id, case in cases.items()
    }
    for arm in arms:
        arm.metrics = {name: {} for name in METRICS}
        arm.headers = {case_id: Counter() for case_id in cases}
    prices = load_prices(manifest.get("prices") or {})
    price_of = _pricer(prices, manifest)
    table = CountsTable(run_dir, manifest, run_state(run_dir, manifest), probeset, settings, number, arms)
    for sample in merged_samples(run_dir, number, warn):
        arm = by_key.get((sample["prompt"], sample["model"]))
        case = cases.get(sample["case_id"])
        if arm is None or case is None:
            warn(
                f"{run_dir}: sample {sample['sample_id']} belongs to no arm or case of the manifest; ignored"
            )
            continue
        table.recorded += 1
        _count(arm, sample, case, applicable[case.id], settings, price_of)
        retrieval = sample.get("retrieval")
        if retrieval is not None:
            table.snapshots.setdefault(case.id, Counter())[tuple(retrieval.get("passage_ids") or ())] += 1
            if retrieval.get("empty") or not retrieval.get("passage_ids"):
                table.empty_retrievals[case.id] += 1
        model = (sample.get("response") or {}).get("model") or ""
        table.simulated = table.simulated or "SIMULATED" in model
    table.sequential = list(iter_jsonl(run_dir / "sequential.jsonl", warn))
    table.warnings = warnings
    return table


def _pricer(prices: PriceTable, manifest: dict[str, Any]) -> Callable[[str], Any]:
    specs = {m["spec"]: parse_model_spec(m["spec"], m.get("api_key_env")) for m in manifest.get("models", [])}
    cache: dict[str, Any] = {}

    def price_of(model: str) -> Any:
        if model not in cache:
            cache[model] = prices.lookup(specs[model]) if model in specs else None
        return cache[model]

    return price_of


def _count(
    arm: ArmCounts,
    sample: dict[str, Any],
    case: Case,
    metrics: list[tuple[str, Metric]],
    settings: CheckSettings,
    price_of: Callable[[str], Any],
) -> None:
    arm.samples += 1
    error = sample.get("error")
    if error:
        arm.errors += 1
        arm.error_kinds[error["kind"]] += 1
        arm.headers[case.id]["errors"] += 1
    else:
        arm.headers[case.id][header_class(sample) or "errors"] += 1
    for name, metric in metrics:
        cell = arm.metrics[name].get(case.id)
        if cell is None:
            cell = arm.metrics[name][case.id] = [0, 0, 0]
        cell[1] += 1
        if error:
            cell[2] += 1
            # Errors never flatter an arm: a miss where higher is better, an event where lower is.
            cell[0] += 0 if metric.higher_is_better else 1
        elif metric.outcome(sample, case, settings):
            cell[0] += 1
    latency = sample.get("latency_ms")
    if latency is not None and not error:
        arm.latencies.append(latency)
    usage = (sample.get("response") or {}).get("usage")
    if usage:
        tokens_in, tokens_out = usage_tokens(usage)
        arm.input_tokens += tokens_in
        arm.output_tokens += tokens_out
        price = price_of(sample["model"])
        if price is None:
            arm.cost_unknown = True
        else:
            arm.cost += price.cost(tokens_in, tokens_out)
