"""The Python API: what the CLI does, as functions that return typed objects.

    import promptprobe
    result = promptprobe.run("probes/refusal-header.toml", prompts=["prompts/v1.md", "prompts/v2.md"],
                             models=["openai:gpt-4.1-mini"], retrieval="none")
    comparison = promptprobe.compare(f"{result.path}#prompt=v1", f"{result.path}#prompt=v2")
    print(comparison.verdict, comparison.worse)

Each object's `to_dict()` is exactly the JSON the matching command prints with `--json`, and
reports and comparisons render as HTML in Jupyter (`_repr_html_`, the `--format html` page
without its chrome). Errors are the domain exceptions (`InputError`: bad input, exit 2;
`StartError`: could not start, exit 3). Nothing else of the package is public.
"""

import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import arguments
from .errors import InputError

if TYPE_CHECKING:
    from .planning import PlanView


def _html_fragment(page: str) -> str:
    """A report page without its chrome: its body in a `.promptprobe` box, its styles scoped to
    that box so they cannot restyle the notebook around it."""
    style = re.search(r"<style>(.*?)</style>", page, re.S)
    body = re.search(r"<body>(.*)</body>", page, re.S)
    if style is None or body is None:
        return page

    def scoped(match: re.Match[str]) -> str:
        selectors = match.group(1)
        if selectors.strip().startswith("@"):
            return match.group(0)
        parts = [s.strip() for s in selectors.split(",")]
        return ", ".join(".promptprobe" if s == "body" else f".promptprobe {s}" for s in parts) + " {"

    css = re.sub(r"([^{}]+)\{", scoped, style.group(1))
    return f'<div class="promptprobe">\n<style>{css}</style>\n{body.group(1)}</div>'


@dataclass(frozen=True)
class Report:
    """`probe report RUN --json`: per arm, every metric's k/n with its intervals, usage and cost."""

    data: dict[str, Any]
    path: Path

    def to_dict(self) -> dict[str, Any]:
        return self.data

    @property
    def arms(self) -> list[dict[str, Any]]:
        return self.data["arms"]

    def rate(self, metric: str, prompt: str | None = None, model: str | None = None) -> float:
        """One arm's rate of a metric (the arm named by prompt and/or model; the only one if unnamed)."""
        for name, value in (("prompt", prompt), ("model", model)):
            if value is not None and not isinstance(value, str):
                raise InputError(f"{name}={value!r}: must be an arm's {name} name (text) or None")
        arms = [
            a
            for a in self.arms
            if (prompt is None or a["prompt"] == prompt)
            and (model is None or model in (a["model"], a.get("model_spec")))
        ]
        if len(arms) != 1:
            raise InputError(f"{len(arms)} arms match prompt={prompt!r} model={model!r}; name one")
        metrics = arms[0]["metrics"]
        if not isinstance(metric, str) or metric not in metrics:
            raise InputError(f"metric={metric!r}: this report has {', '.join(metrics)}")
        return metrics[metric]["rate"]

    def html(self) -> str:
        """The `--format html` page."""
        from .views.html import report_html

        return report_html(self.path)

    def _repr_html_(self) -> str:
        return _html_fragment(self.html())

    def __str__(self) -> str:
        from .views.report import render_report

        return render_report(self.data)


@dataclass(frozen=True)
class Comparison:
    """`probe compare A B --json`: one metric's object, or the family (`results`) of several."""

    data: dict[str, Any]
    a: str
    b: str

    def to_dict(self) -> dict[str, Any]:
        results = self.data["results"]
        if len(results) == 1 and not self.data.get("all"):
            return dict(
                results[0],
                retrieval_drift=self.data["retrieval_drift"],
                warnings=self.data["warnings"],
                interim_notes=self.data.get("interim_notes", []),
                final_notes=self.data.get("final_notes", []),
            )
        return {k: v for k, v in self.data.items() if k != "all"}

    @property
    def results(self) -> list[dict[str, Any]]:
        return self.data["results"]

    @property
    def verdict(self) -> str:
        """`A>B`, `B>A` (which rate is reliably higher) or `indistinguishable`; of the only metric."""
        if len(self.results) != 1:
            raise InputError("several metrics were compared: read each result's verdict in .results")
        return self.results[0]["verdict"]

    @property
    def worse(self) -> bool:
        """Whether B is reliably worse than A on any metric compared (the gate's question)."""
        return any(r["worse"] for r in self.results)

    def failures(self) -> list[str]:
        """The `FAIL:` line of every metric on which B is reliably worse."""
        from .views.compare import failure_line

        return [failure_line(r) for r in self.results if r["worse"]]

    def html(self) -> str:
        from .views.html import compare_html

        a, b = self.a, self.b
        if self.results and self.results[0].get("pair"):  # two runs arm by arm: the first pair's outputs
            a, b = self.results[0]["a"]["label"], self.results[0]["b"]["label"]
        return compare_html(a, b, self.data)

    def _repr_html_(self) -> str:
        return _html_fragment(self.html())

    def __str__(self) -> str:
        from .views.compare import render_comparison

        return render_comparison(self.data)


@dataclass(frozen=True)
class Plan:
    """`probe plan ... --json`."""

    view: "PlanView"

    @property
    def data(self) -> dict[str, Any]:
        return self.view.data

    def to_dict(self) -> dict[str, Any]:
        return self.view.data

    def __str__(self) -> str:
        from .views.plan import render_plan

        return render_plan(self.view)


@dataclass(frozen=True)
class Run:
    """A run directory: `to_dict()` is its line of `probe runs --json`."""

    path: Path
    info: dict[str, Any]
    manifest: dict[str, Any] = field(repr=False)

    def to_dict(self) -> dict[str, Any]:
        return self.info

    def samples(self) -> Iterator[dict[str, Any]]:
        """The sample records (samples.jsonl), in the order they were recorded."""
        from .engine.store import iter_samples, load_manifest

        load_manifest(self.path)  # a run deleted since load() is an error, not a run of no samples
        return iter_samples(self.path)

    def raw(self, sample: str | dict[str, Any], kind: str = "txt") -> bytes:
        """A sample's exact bytes: its output text (`txt`), the provider's response `body`, or the
        `request` as sent; `sample` is a sample id or a record from samples(). Read from the run's
        pack (or the raw/ files of a run written before packs); RawUnreadable when they cannot be
        given as recorded."""
        from .pack import RawReader

        record = sample if isinstance(sample, dict) else self._record(sample)
        return RawReader(self.path).read(record, kind)

    def _record(self, sample_id: str) -> dict[str, Any]:
        from .errors import InputError

        for record in self.samples():
            if record["sample_id"] == sample_id:
                return record
        raise InputError(f"{self.path}: no sample {sample_id!r} in this run")

    def report(self, **options: Any) -> Report:
        return report(self.path, **options)


@dataclass(frozen=True)
class RunResult:
    """`probe run ... --json`: where the run is, how it ended, and its report."""

    path: Path
    status: str
    counts: dict[str, int]
    stopped_by: str | None
    report: Report

    def to_dict(self) -> dict[str, Any]:
        return {
            "run": str(self.path),
            "status": self.status,
            "counts": self.counts,
            "stopped_by": self.stopped_by,
            "report": self.report.to_dict(),
        }

    @classmethod
    def of(cls, outcome: Any) -> "RunResult":
        """From the engine's RunOutcome."""
        from .totals import count_and_keep
        from .views.report import build_report

        counts = {"planned": outcome.planned, "recorded": outcome.recorded, "errors": outcome.errors}
        path = _where(outcome.path, None)
        # Counted once: the report, and the run's totals kept in its manifest for later readers.
        made = Report(build_report(count_and_keep(path)), path)
        return cls(outcome.path, outcome.status, counts, outcome.stopped_by, made)

    def _repr_html_(self) -> str:
        return self.report._repr_html_()


def _where(run_ref: str | Path, runs_dir: str | Path | None, name: str = "run_ref") -> Path:
    from .runref import resolve

    return resolve(arguments.reference(name, run_ref), arguments.runs_location("runs_dir", runs_dir))


def load(run_ref: str | Path, runs_dir: str | Path | None = None) -> Run:
    """A run by reference: a directory, its id, a unique prefix of the id, `latest`, `latest~N`."""
    from .engine.store import load_manifest
    from .runref import _info
    from .views.runs import with_verdicts

    path = _where(run_ref, runs_dir)
    info = _info(path)
    if info is None:
        raise InputError(f"{path}: not a readable run")
    (info,) = with_verdicts([info])  # its line of `probe runs`, verdict included
    return Run(path, info.to_dict(), load_manifest(path))


def _counts(**values: int | None) -> None:
    """Counts the CLI takes as whole numbers of at least 1."""
    for name, value in values.items():
        arguments.count(name, value)


def report(
    run_ref: str | Path,
    *,
    by_tag: bool = False,
    classification: int | None = None,
    top_k: int | None = None,
    runs_dir: str | Path | None = None,
) -> Report:
    """`probe report RUN`."""
    from .counts import build_counts
    from .views.report import build_report

    _counts(top_k=top_k, classification=classification)
    by_tag = bool(arguments.flag("by_tag", by_tag))
    path = _where(run_ref, runs_dir)
    counts = build_counts(path, classification=classification, top_k=top_k)
    return Report(build_report(counts, by_tag=by_tag), path)


def compare(
    a: str,
    b: str | None = None,
    metric: str | Sequence[str] = "header_present",
    *,
    all_metrics: bool = False,
    alpha: float = 0.05,
    classification: int | None = None,
    top_k: int | None = None,
    runs_dir: str | Path | None = None,
) -> Comparison:
    """`probe compare A B`: A the baseline, B the candidate, each `RUN` or `RUN#prompt=NAME` /
    `RUN#model=NAME` (or its spec). Several metrics (or `all_metrics`) are one adjusted
    family; two runs of several arms compare arm by arm (each result names its `pair`). With `b`
    None, `a` is a run whose two arms are compared (a run of more: the InputError lists them)."""
    from .comparison import compare_runs
    from .runref import resolve_selector

    arguments.number("alpha", alpha, 0, 0.5, low_open=True)
    _counts(top_k=top_k, classification=classification)
    all_metrics = bool(arguments.flag("all_metrics", all_metrics))
    metrics = arguments.metric_names("metric", metric)
    folder = arguments.runs_location("runs_dir", runs_dir)
    a = arguments.reference("a", a)
    if b is None:
        from .arms import two_arms
        from .runref import split_selector

        if split_selector(str(a))[1]:
            raise InputError(f"{a} is one arm: give B, the arm to compare it with (probe compare A B)")
        a, b = two_arms(_where(a, folder, "a"))
    b = arguments.reference("b", b)
    typed = (str(a), str(b))
    a = resolve_selector(a, folder)
    b = resolve_selector(b, folder)
    data = compare_runs(
        a,
        b,
        metrics,
        all_metrics=all_metrics,
        alpha=alpha,
        classification=classification,
        top_k=top_k,
        typed=typed,
    )
    return Comparison(dict(data, all=all_metrics), a, b)


def plan(
    p1: float | None = None,
    p2: float | None = None,
    *,
    n: int | None = None,
    alpha: float = 0.05,
    power: float = 0.8,
    cases: int | None = None,
    icc: float | None = None,
    gate_any_of: int | None = None,
    p: float | None = None,
    sequential: bool = False,
    detect: float = 15.0,
    cases_b: int | None = None,
) -> Plan:
    """`probe plan`: samples (or repeats of `cases` questions at `icc`; `cases_b`: B's side of an
    unpaired design with other questions) to tell p1 from p2; the smallest difference `n`
    detects; an any-of-k gate's block rate; a sequential run's rounds."""
    from .planning import choose_plan

    _counts(n=n, cases=cases, cases_b=cases_b, gate_any_of=gate_any_of)
    # Numbers first (their ranges are the planner's own, in the words `probe plan` uses).
    for name, value in (("p1", p1), ("p2", p2), ("p", p), ("icc", icc)):
        arguments.number(name, value, -math.inf, optional=True)
    for name, value in (("alpha", alpha), ("power", power), ("detect", detect)):
        arguments.number(name, value, -math.inf)
    sequential = bool(arguments.flag("sequential", sequential))
    view = choose_plan(
        p1,
        p2,
        n=n,
        alpha=alpha,
        power=power,
        cases=cases,
        icc=icc,
        gate_any_of=gate_any_of,
        p=p,
        sequential=sequential,
        detect=detect,
        cases_b=cases_b,
    )
    return Plan(view)


def run(
    probeset: str | Path,
    prompts: Sequence[str | Path],
    models: Sequence[str] = (),
    *,
    config: str | Path | None = None,
    retrieval: str | None = None,
    repeats: int | None = None,
    until_decided: bool = False,
    metric: str = "header_present",
    detect: float = 15.0,
    alpha: float = 0.05,
    runs_dir: str | Path | None = None,
    concurrency: int | None = None,
    max_tokens: int | None = None,
    temperature: float | None = None,
    seed: int | None = None,
    batch: bool | None = None,
    cache: bool | None = None,
    max_cost: float | None = None,
    poll_interval: float | None = None,
) -> RunResult:
    """`probe run`: every case x repeat x prompt x model through the target (`until_decided`:
    two arms in rounds until the sequential test decides). `prompts` are files, or `NAME=FILE`;
    `models` are specs, or `NAME=SPEC` to name a model's arm (default: the config's);
    `retrieval="none"` probes without retrieval; `poll_interval`: seconds between looks at a
    batch in progress (`batch`; default 30)."""
    from .config import Precedence, load_config, models_setting, with_retrieval
    from .engine.run import ProbeRun, options_from
    from .probeset import load_probeset
    from .prompts import load_prompt
    from .runstore import location

    probeset_path = arguments.path("probeset", probeset)
    prompt_files = arguments.items("prompts", prompts, "prompt files (PATH or NAME=PATH)")
    if not prompt_files:
        raise InputError("prompts=[]: give at least one prompt file")
    specs_given = arguments.items("models", models, "model specs such as openai:gpt-4.1-mini", optional=True)
    config_path = arguments.path("config", config, optional=True)
    folder = arguments.runs_location("runs_dir", runs_dir)
    if retrieval is not None and retrieval != "none":
        raise InputError(f"retrieval={retrieval!r}: the only choice is 'none'; the config says how otherwise")
    numbers = {
        name: arguments.run_number(name, value)
        for name, value in (("repeats", repeats), ("concurrency", concurrency), ("max_tokens", max_tokens),
                            ("temperature", temperature), ("seed", seed), ("poll_interval", poll_interval))
    }
    rule = _sequential_rule(until_decided, metric, alpha, detect)
    batch = arguments.flag("batch", batch, optional=True)
    cache = arguments.flag("cache", cache, optional=True)
    arguments.number("max_cost", max_cost, 0, unit="USD", optional=True)
    target = with_retrieval(load_config(config_path), retrieval)
    loaded = load_probeset(probeset_path)
    precedence = Precedence.of(target, loaded, given_as="argument")
    options = options_from(
        target.run,
        location(folder, target.run.runs_dir, target.base_dir),
        precedence=precedence,
        cache=cache,
        batch=batch,
        max_cost=max_cost,
        **numbers,
    )
    specs = target.models_for(specs_given)
    options.settings["models"] = models_setting(specs_given, specs, precedence)
    versions = [load_prompt(p) for p in prompt_files]
    if rule is not None:
        from .engine.sequential import SequentialRun

        runner: Any = SequentialRun.new(loaded, versions, specs, target, options, rule)
    else:
        runner = ProbeRun(loaded, versions, specs, target, options)
    return RunResult.of(runner.execute())


def _sequential_rule(until_decided: Any, metric: Any, alpha: Any, detect: Any) -> Any:
    """The rule `until_decided` runs by (its arguments checked either way); None without it."""
    until_decided = bool(arguments.flag("until_decided", until_decided))
    arguments.metric_names("metric", metric)
    if not isinstance(metric, str):
        raise InputError(f"metric={metric!r}: the metric until_decided decides on (one name)")
    arguments.number("alpha", alpha, 0, 0.5, low_open=True)
    arguments.number("detect", detect, 0, 100, low_open=True, unit="points")
    if not until_decided:
        return None
    from .engine.sequential import SequentialRule

    return SequentialRule(metric=metric, alpha=alpha, detect=detect / 100)


__all__ = ["Comparison", "Plan", "Report", "Run", "RunResult", "compare", "load", "plan", "report", "run"]
