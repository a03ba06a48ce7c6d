"""`probe run --until-decided`: two arms in rounds, stopping as soon as the answer is known.

A round asks every case once under each arm, with one retrieval per (case, round) shared by
both (a round is a repeat of the plan). After each complete round its discordant pairs go to
the evidence (engine.rounds) and the exact boundary of promptprobe.stats.sequential looks at
them; the run stops when it decides (after at least `min_rounds`), or at the cap as
indistinguishable. The cap is the rounds the rule needs for 80% power at the smallest
difference worth finding (`--detect POINTS`, default 15), or `--max-rounds`; the boundary
spends alpha over the rounds up to it, so the cap is fixed when the run starts.
"""

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..checks import metrics_for
from ..config import TargetConfig
from ..errors import InputError
from ..jsonio import iter_jsonl
from ..judgments import JudgmentIndex
from ..models import ModelSpec
from ..probeset import ProbeSet
from ..prompts import PromptVersion
from ..stats.sequential import RULE, SPENDING, Cap, rounds_for_power
from .plan import Arm, Unit, sample_id
from .rounds import LEDGER, OLD_RULE, RoundBook, round_pairs
from .run import ProbeRun, RunOptions, RunOutcome
from .store import iter_samples

DEFAULT_DETECT = 0.15
TERMS = "rate"  # how sequential.jsonl counts pairs; runs before it named the arm that did well


@dataclass(frozen=True)
class SequentialRule:
    metric: str = "header_present"
    alpha: float = 0.05
    min_rounds: int = 2
    max_rounds: int | None = None  # None: the rounds for 80% power at `detect`
    detect: float = DEFAULT_DETECT  # the smallest difference worth finding (a share, 0.15 = 15 points)


def default_cap(cases: int, rule: SequentialRule) -> Cap:
    """The rounds the rule needs for 80% power at `rule.detect` (see stats.sequential)."""
    return rounds_for_power(rule.detect, cases, rule.alpha, 0.8, rule.min_rounds)


def _refuse_unreachable(cap: Cap, rule: SequentialRule, cases: int) -> None:
    if cap.rounds is None:
        how_far = (
            f"decide it in only {100 * cap.power:.0f}% of runs" if cap.power is not None else "are not enough"
        )
        raise InputError(
            f"--detect {100 * rule.detect:g}: even {cap.limit} rounds of {cases} cases {how_far}; "
            "detect a larger difference or set --max-rounds"
        )


def _refuse_design(arms: int, rule: SequentialRule) -> None:
    if arms != 2:
        raise InputError(
            f"--until-decided compares exactly two arms (two prompts, or two models); this run has {arms}"
        )
    if rule.max_rounds is not None and rule.max_rounds < rule.min_rounds:
        raise InputError(f"--max-rounds {rule.max_rounds} is below --min-rounds {rule.min_rounds}")


def _cases_counted(
    probeset: ProbeSet, config: TargetConfig, options: RunOptions, rule: SequentialRule
) -> int:
    """The cases the rule's metric applies to (a round's pairs); InputError for a metric it cannot
    decide on: unknown, or one that applies to no case (every round would count no pair)."""
    known = metrics_for(config.checks)
    if rule.metric not in known:
        raise InputError(f"--metric {rule.metric}: unknown metric (known: {', '.join(known)})")
    settings = config.checks.with_top_k(options.top_k)
    cases = sum(1 for case in probeset.cases if known[rule.metric].applies(case, settings))
    if not cases:
        raise InputError(
            f"--metric {rule.metric} applies to no case of probe set {probeset.name}, so no round could "
            "count a pair: decide on another metric, or add cases it applies to"
        )
    return cases


def sequential_options(
    probeset: ProbeSet, config: TargetConfig, options: RunOptions, rule: SequentialRule, arms: int
) -> tuple[RunOptions, SequentialRule, Cap | None]:
    """A sequential run's options (its repeats are the cap in rounds, recorded as such) and its rule
    with the cap set; the Cap when it came from `rule.detect`, for the pairs a round counts (the
    cases the metric applies to)."""
    _refuse_design(arms, rule)
    cases = _cases_counted(probeset, config, options, rule)
    cap = None
    max_rounds = rule.max_rounds
    source = "flag"  # --max-rounds
    if max_rounds is None:
        cap = default_cap(cases, rule)
        _refuse_unreachable(cap, rule, cases)
        max_rounds = cap.rounds
        source = f"--until-decided cap at --detect {100 * rule.detect:g}"
    # The rounds replace any repeats: the manifest must not credit the probe set or a flag with them.
    settings = {**options.settings, "repeats": {"value": max_rounds, "from": source}}
    return replace(options, repeats=max_rounds, settings=settings), replace(rule, max_rounds=max_rounds), cap


def dry_run_sequential(
    probeset: ProbeSet,
    prompts: Sequence[PromptVersion],
    models: Sequence[ModelSpec],
    config: TargetConfig,
    options: RunOptions,
    rule: SequentialRule,
    fetch: bool = True,
) -> dict[str, Any]:
    """`--dry-run --until-decided`: the plan priced at its cap, the most the run can ask."""
    from .dryrun import dry_run

    capped, rule, _ = sequential_options(probeset, config, options, rule, len(prompts) * len(models))
    result = dry_run(probeset, prompts, models, config, capped, fetch=fetch)
    result["notes"].append(
        f"--until-decided: priced at its cap of {rule.max_rounds} rounds, the most it can ask; it stops "
        "as soon as the rule decides, often well before"
    )
    return result


class RunFacade:
    """What the CLI and the demo reach through a run that wraps a ProbeRun: its plan, store,
    tally, the on_* hooks and cancel, so that they drive it like a ProbeRun."""

    runner: ProbeRun

    @property
    def plan(self) -> Any:
        return self.runner.plan

    @property
    def store(self) -> Any:
        return self.runner.store

    @property
    def tally(self) -> Any:
        return self.runner.tally

    @property
    def on_record(self) -> Any:
        return self.runner.on_record

    @on_record.setter
    def on_record(self, value: Any) -> None:
        self.runner.on_record = value

    @property
    def on_batches(self) -> Any:
        return self.runner.on_batches

    @on_batches.setter
    def on_batches(self, value: Any) -> None:
        self.runner.on_batches = value

    @property
    def on_start(self) -> Any:
        return self.runner.on_start

    @on_start.setter
    def on_start(self, value: Any) -> None:
        self.runner.on_start = value

    def cancel(self) -> None:
        self.runner.cancel()


class SequentialRun(RunFacade):
    """Drives a ProbeRun (new or resumed) round by round until the rule stops it."""

    def __init__(self, runner: ProbeRun, rule: SequentialRule, cap: Cap | None = None) -> None:
        _refuse_design(len(runner.plan.arms), rule)
        self.runner = runner
        self.rule = rule
        self.cap = cap
        arms = runner.plan.arms
        self.arms: tuple[Arm, Arm] = (arms[0], arms[1])
        before = runner.extra_manifest.get("sequential") or {}
        if "mixture" in before:
            raise InputError(OLD_RULE)
        runner.extra_manifest["sequential"] = {
            "metric": rule.metric,
            "alpha": rule.alpha,
            "min_rounds": rule.min_rounds,
            "max_rounds": runner.plan.repeats,
            "rule": RULE,
            "spending": SPENDING,
            "a": f"prompt={arms[0].prompt.name},model={arms[0].model.label}",
            "b": f"prompt={arms[1].prompt.name},model={arms[1].model.label}",
            "detect": rule.detect,
            # A resumed run keeps the cap's figure from when it started.
            "cap_power": cap.power if cap else before.get("cap_power"),
            "terms": TERMS,
        }

    @classmethod
    def new(
        cls,
        probeset: ProbeSet,
        prompts: Sequence[PromptVersion],
        models: Sequence[ModelSpec],
        config: TargetConfig,
        options: RunOptions,
        rule: SequentialRule,
    ) -> "SequentialRun":
        options, rule, cap = sequential_options(probeset, config, options, rule, len(prompts) * len(models))
        return cls(ProbeRun(probeset, prompts, models, config, options), rule, cap)

    def describe(self) -> str:
        """What the run will do, said before it starts: the rule and its cap."""
        cases = len(self.runner.plan.cases)
        cap = self.runner.plan.repeats
        cap_power = self.runner.extra_manifest["sequential"]["cap_power"]
        basis = (
            f"the rounds that decide a {100 * self.rule.detect:g}-point difference in "
            f"{100 * cap_power:.0f}% of simulated runs (--detect)"
            if cap_power is not None
            else "--max-rounds"
        )
        return (
            f"sequential: rounds of {cases} cases x 2 arms on {self.rule.metric}; stops when one arm leads "
            f"by enough discordant pairs (an exact boundary spending alpha {self.rule.alpha:g} over "
            f"the rounds) after at least {self.rule.min_rounds} rounds, or at the cap of {cap} rounds "
            f"({cap * cases} samples per arm; {basis}) as indistinguishable"
        )

    # -- running -----------------------------------------------------------------------------

    def _round_samples(self, round_number: int) -> list[dict[str, Any]]:
        assert self.runner.store is not None
        self.runner.store.flush_writes()  # the round's records, handed to the writer, are on disk
        ids = {sample_id(c.id, round_number, arm) for c in self.runner.plan.cases for arm in self.arms}
        samples = [s for s in iter_samples(self.runner.store.path) if s["sample_id"] in ids]
        index = JudgmentIndex.of(self.runner.store.path, None, self.runner.settings)
        return samples if index is None else [index.attach(s) for s in samples]

    def _settle_resume(self) -> None:
        """A resume re-runs failed samples, but not those of rounds in sequential.jsonl: the rule
        has counted them against their arm, and the run must end with what it decided on. A run
        that is complete after its rule stopped has nothing to resume."""
        path = getattr(self.runner, "path", None)  # a ResumedRun's run directory
        if path is None:
            return
        lines = list(iter_jsonl(path / LEDGER, lambda warning: None))
        if lines and lines[-1].get("stop") and self.runner.previous.get("status") == "complete":
            raise InputError(
                f"{path}: the sequential run already stopped at round {len(lines)}; nothing to resume"
            )
        self.runner.keep_failed = lambda record: record["repeat"] <= len(lines)

    def execute(self) -> RunOutcome:
        runner = self.runner
        self._settle_resume()
        runner.open()
        assert runner.store is not None
        runner.store.repair_tail(LEDGER)
        metric = metrics_for(runner.settings)[self.rule.metric]
        book = RoundBook(
            runner.store.path,
            self.rule.alpha,
            runner.plan.repeats,
            self.rule.min_rounds,
            metric.higher_is_better,
        )
        # A run killed or interrupted after its rule stopped only has its manifest to finish.
        first = runner.plan.repeats + 1 if book.stopped else book.rounds + 1
        cases = {c.id: c for c in runner.plan.cases}
        scheduler = None
        for round_number in range(first, runner.plan.repeats + 1):
            units = [Unit(case, round_number) for case in runner.plan.case_order(round_number)]
            scheduler = runner.run_units(units)
            if scheduler.abort or runner.cancel_event.is_set() or scheduler.stopped_by:
                return runner.conclude(scheduler)
            counted = round_pairs(
                self._round_samples(round_number), self.arms, cases, runner.settings, self.rule.metric
            )
            if book.record(runner.store, counted).stop:
                break
        if scheduler is None:
            scheduler = runner.run_units([])
        return runner.conclude(scheduler)
