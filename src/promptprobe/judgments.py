"""Where a run's judgments are, and how readers attach them to samples.

A judgment is one call of a judged check's model on one output: a line of `judgments.jsonl`
in the run directory (the run's own), or of `classifications/N.judgments.jsonl` (a layer made by
`probe judge`): `sample_id`, `check`, `index` (1..repeats), `label` ("pass", "fail", or null
when the call failed or its reply could not be read), `reply` / `request` (`path`, `sha256`,
`bytes` of the raw reply text and of the request as sent), `response` (usage, request id, the
reply's body), `attempts`, `attempts_log`, `error`, `via` ("live" or "batch"), `judged_at`.
A later line for the same (sample, check, index) replaces an earlier one (none is written
twice by the runner: a resume judges only what has no line).

Readers (counts, show, the viewer, the judgments table) attach to each sample `judged`:
{check: [label, ...]} in index order, which checks/judge.py reads as the metric's outcome.
"""

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from .errors import InputError
from .jsonio import iter_jsonl

RUN_JUDGMENTS = "judgments.jsonl"


def read_location(run_dir: Path, location: dict[str, Any]) -> bytes:
    """The bytes a judgment's location (`sample_id`, `pack`, `offset`, `bytes`, `sha256`) points
    to, through the run's one raw reader (promptprobe.pack): RawUnreadable when they cannot be
    given as recorded."""
    from .pack import TEXT, RawReader

    return RawReader(run_dir).read({"sample_id": location.get("sample_id"), "raw": location}, TEXT)


def layer_judgments(number: int) -> str:
    """The judgments file of classification layer `number` (made by `probe judge`)."""
    return f"classifications/{number}.judgments.jsonl"


def judgments_source(run_dir: Path, number: int | None) -> str:
    """The judgments file a classification counts: the run's own, or the one its layer names
    (a reclassification carries on the judgments of the layer it was based on)."""
    if number is None:
        return RUN_JUDGMENTS
    meta = next(iter(iter_jsonl(run_dir / "classifications" / f"{number}.jsonl", lambda m: None)), None)
    return (meta or {}).get("judgments") or RUN_JUDGMENTS


def iter_judgments(
    run_dir: Path, source: str = RUN_JUDGMENTS, on_warning: Callable[[str], None] | None = None
) -> Iterator[dict[str, Any]]:
    """The judgment lines of one file, in the order written."""
    for line in iter_jsonl(run_dir / source, on_warning or (lambda message: None)):
        if isinstance(line, dict) and isinstance(line.get("sample_id"), str) and "check" in line:
            yield line


def latest_judgments(
    run_dir: Path, source: str = RUN_JUDGMENTS
) -> dict[tuple[str, str, int], dict[str, Any]]:
    """(sample_id, check, index) -> its judgment line (the last written wins)."""
    return {(j["sample_id"], j["check"], int(j.get("index", 1))): j for j in iter_judgments(run_dir, source)}


class JudgmentIndex:
    """The labels of one judgments file by sample, for attaching to samples as they stream by
    (one small list per judged sample: a judged run's memory grows with its judged samples)."""

    def __init__(self, run_dir: Path, source: str, repeats: dict[str, int], price: Any = None) -> None:
        self.source = source
        self.labels: dict[str, dict[str, list[str | None]]] = {}
        # sample_id -> what its judgments cost (None: a judge's price is unknown)
        self.cost: dict[str, float | None] = {}
        for (sid, check, index), line in sorted(latest_judgments(run_dir, source).items()):
            if check not in repeats or not 1 <= index <= repeats[check]:
                continue  # a judgment of another check, or beyond this setting's repeats
            if price is not None and (line.get("response") or {}).get("usage"):
                cost, spent = price(line), self.cost.get(sid, 0.0)
                self.cost[sid] = None if cost is None or spent is None else spent + cost
            per_check = self.labels.setdefault(sid, {}).setdefault(check, [])
            while len(per_check) < index - 1:
                per_check.append(None)  # a judgment not made is no pass
            per_check.append(line.get("label") if line.get("label") in ("pass", "fail") else None)

    @classmethod
    def of(cls, run_dir: Path, number: int | None, settings: Any) -> "JudgmentIndex | None":
        """The index for a classification's judged checks (None when it has none)."""
        if not settings.judges:
            return None
        repeats = {j.name: j.repeats for j in settings.judges}
        return cls(run_dir, judgments_source(run_dir, number), repeats, judge_pricer(run_dir))

    def cost_of(self, sample_id: str) -> float | None:
        """What the judgments of one output cost (0.0 when none were bought)."""
        return self.cost.get(sample_id, 0.0)

    def attach(self, sample: dict[str, Any]) -> dict[str, Any]:
        """The sample with its judgments as `judged` (a copy; the record read stays as it was)."""
        return {**sample, "judged": self.labels.get(sample["sample_id"], {})}


def judge_pricer(run_dir: Path) -> Any:
    """A judgment line's cost at its judge model's price (None when the price is unknown), with
    the run's [prices]; None when the run's manifest cannot be read."""
    from .engine.cost import load_prices, run_day, split_usage
    from .engine.store import load_manifest
    from .models import model_of
    from .providers import parse_spec

    manifest = load_manifest(run_dir)
    prices = load_prices(manifest.get("prices") or {}, day=run_day(manifest))  # the prices of the run's day
    models = {j["model"]["spec"]: model_of(j["model"]) for j in manifest.get("judges") or []}

    def price(line: dict[str, Any]) -> float | None:
        spec = line.get("model")
        try:
            model = models.get(spec) or parse_spec(spec)
        except InputError:  # a judge spec that no longer parses: its price is unknown
            return None
        found = prices.lookup(model)
        usage = line["response"]["usage"]
        return None if found is None else found.cost_of(split_usage(usage), batch=line.get("via") == "batch")

    return price
