"""`probe run --until-decided`: two arms in rounds, stopping as soon as the answer is known.

A round asks every case once under each arm, with one retrieval per (case, round) shared by
both (a round is a repeat of the plan). After each complete round the discordant pairs of
the round are added to the evidence (promptprobe.stats.sequential) and the run stops when the
e-value reaches 1/alpha (after at least `min_rounds`), or at the cap as indistinguishable. The
cap is the rounds the rule needs for 80% power at the smallest difference worth finding
(`--detect POINTS`, default 15), or `--max-rounds`.

Pairs are counted by rate (B's outcome 1, A's 0: B's rate higher there), so the decision reads
like every verdict: `B>A` = B's rate reliably higher, whatever the metric's direction. A failed
sample counts as that metric's unfavourable outcome for its arm (a 0 where higher is better, a 1
where lower is better), so a pair where one arm failed is discordant against it. Each round is
a line of sequential.jsonl.
"""

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..checks import CheckSettings, metrics_for
from ..config import TargetConfig
from ..errors import InputError
from ..jsonio import iter_jsonl
from ..models import ModelSpec
from ..probeset import Case, ProbeSet
from ..prompts import PromptVersion
from ..stats.sequential import KT, Cap, decide, mixture_e_value, rounds_for_power
from .plan import Arm, Unit, sample_id
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
    mixture: float = KT
    detect: float = DEFAULT_DETECT  # the smallest difference worth finding (a share, 0.15 = 15 points)

    @property
    def threshold(self) -> float:
        return 1 / self.alpha


def default_cap(cases: int, rule: SequentialRule) -> Cap:
    """The rounds the rule needs for 80% power at `rule.detect` (see stats.sequential)."""
    return rounds_for_power(rule.detect, cases, rule.alpha, 0.8, rule.min_rounds, rule.mixture)


def round_pairs(
    samples: Sequence[dict[str, Any]],
    arms: tuple[Arm, Arm],
    cases: dict[str, Case],
    settings: CheckSettings,
    metric: str,
) -> tuple[int, int, int]:
    """(pairs, b_higher, a_higher) over one round's samples of the two arms: the pairs where only
    B's outcome is 1, and where only A's is."""
    rule = metrics_for(settings)[metric]
    outcome: dict[tuple[str, int], bool] = {}
    for sample in samples:
        case = cases[sample["case_id"]]
        if not rule.applies(case, settings):
            continue
        index = 0 if sample["prompt"] == arms[0].prompt.name and sample["model"] == arms[0].model.label else 1
        if sample.get("error"):
            hit = not rule.higher_is_better  # a failure is the unfavourable outcome for its own arm
        else:
            found = rule.outcome(sample, case, settings)
            if found is None:
                continue  # a user's check that does not apply to this sample: no pair
            hit = bool(found)
        outcome[(case.id, index)] = hit
    pairs = b_higher = a_higher = 0
    for case_id in cases:
        if (case_id, 0) in outcome and (case_id, 1) in outcome:
            pairs += 1
            a, b = outcome[(case_id, 0)], outcome[(case_id, 1)]
            b_higher += b and not a
            a_higher += a and not b
    return pairs, b_higher, a_higher


class SequentialRun:
    """Drives a ProbeRun (new or resumed) round by round."""

    def __init__(self, runner: ProbeRun, rule: SequentialRule, cap: Cap | None = None) -> None:
        if len(runner.plan.arms) != 2:
            raise InputError(
                f"--until-decided compares exactly two arms (two prompts, or two models); this run has "
                f"{len(runner.plan.arms)}"
            )
        if rule.max_rounds is not None and rule.max_rounds < rule.min_rounds:
            raise InputError(f"--max-rounds {rule.max_rounds} is below --min-rounds {rule.min_rounds}")
        self.runner = runner
        self.rule = rule
        self.cap = cap
        arms = runner.plan.arms
        self.arms: tuple[Arm, Arm] = (arms[0], arms[1])
        runner.extra_manifest["sequential"] = {
            "metric": rule.metric,
            "alpha": rule.alpha,
            "threshold": rule.threshold,
            "min_rounds": rule.min_rounds,
            "max_rounds": runner.plan.repeats,
            "mixture": f"Beta({rule.mixture:g}, {rule.mixture:g})",
            "a": f"prompt={arms[0].prompt.name},model={arms[0].model.label}",
            "b": f"prompt={arms[1].prompt.name},model={arms[1].model.label}",
            "detect": rule.detect,
            # A resumed run keeps the cap's figure from when it started.
            "cap_power": cap.power
            if cap
            else (runner.extra_manifest.get("sequential") or {}).get("cap_power"),
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
        known = metrics_for(config.checks)
        if rule.metric not in known:
            raise InputError(f"--metric {rule.metric}: unknown metric (known: {', '.join(known)})")
        cap = None
        max_rounds = rule.max_rounds
        if max_rounds is None:
            cap = default_cap(len(probeset.cases), rule)
            if cap.rounds is None:
                cases = len(probeset.cases)
                raise InputError(
                    f"--detect {100 * rule.detect:g}: even {cap.limit} rounds of {cases} cases decide that "
                    f"difference in only {100 * cap.power:.0f}% of runs; detect a larger difference or set "
                    "--max-rounds"
                )
            max_rounds = cap.rounds
        runner = ProbeRun(probeset, prompts, models, config, replace(options, repeats=max_rounds))
        return cls(runner, replace(rule, max_rounds=max_rounds), cap)

    # -- the engine's interface (the CLI drives it like a ProbeRun) ---------------------------

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

    def describe(self) -> str:
        cases = len(self.runner.plan.cases)
        cap = self.runner.plan.repeats
        basis = (
            f"the rounds that decide a {100 * self.rule.detect:g}-point difference in "
            f"{100 * self.cap.power:.0f}% of simulated runs (--detect)"
            if self.cap
            else "--max-rounds"
        )
        return (
            f"sequential: rounds of {cases} cases x 2 arms on {self.rule.metric}; stops when the evidence "
            f"reaches e >= {self.rule.threshold:g} (alpha {self.rule.alpha:g}) after at least "
            f"{self.rule.min_rounds} rounds, or at the cap of {cap} rounds ({cap * cases} samples per arm; "
            f"{basis}) as indistinguishable"
        )

    # -- running -----------------------------------------------------------------------------

    def _history(self) -> tuple[int, int, int, dict[str, Any] | None]:
        """(rounds done, discordant, b_higher, last line) from sequential.jsonl (resume)."""
        assert self.runner.store is not None
        lines = list(iter_jsonl(self.runner.store.path / "sequential.jsonl"))
        if not lines:
            return 0, 0, 0, None
        last = lines[-1]
        discordant = last["discordant_total"]
        if "b_higher_total" in last:
            return last["round"], discordant, last["b_higher_total"], last
        # A run recorded before pairs were counted by rate: favour_b counted B doing well.
        favour_b = last["favour_b_total"]
        b_higher = favour_b if self._metric.higher_is_better else discordant - favour_b
        return last["round"], discordant, b_higher, last

    @property
    def _metric(self) -> Any:
        return metrics_for(self.runner.settings)[self.rule.metric]

    def _round_samples(self, round_number: int) -> list[dict[str, Any]]:
        assert self.runner.store is not None
        ids = {sample_id(c.id, round_number, arm) for c in self.runner.plan.cases for arm in self.arms}
        return [s for s in iter_samples(self.runner.store.path) if s["sample_id"] in ids]

    def execute(self) -> RunOutcome:
        runner = self.runner
        runner.open()
        done, discordant, b_higher, last = self._history()
        if last is not None and last.get("stop"):
            raise InputError(f"{runner.store.path}: the sequential run already stopped at round {done}")
        cases = {c.id: c for c in runner.plan.cases}
        scheduler = None
        for round_number in range(done + 1, runner.plan.repeats + 1):
            units = [Unit(case, round_number) for case in runner.plan.case_order(round_number)]
            scheduler = runner.run_units(units)
            if scheduler.abort or runner.cancel_event.is_set() or scheduler.stopped_by:
                return runner.conclude(scheduler)
            pairs, b_wins, a_wins = round_pairs(
                self._round_samples(round_number), self.arms, cases, runner.settings, self.rule.metric
            )
            discordant += b_wins + a_wins
            b_higher += b_wins
            e_value = mixture_e_value(b_higher, discordant, self.rule.mixture)
            decision = decide(b_higher, discordant, self.rule.alpha, self.rule.mixture)
            stop = False
            if decision and round_number >= self.rule.min_rounds:
                stop = True
            elif round_number == runner.plan.repeats:
                decision, stop = "indistinguishable", True
            else:
                decision = None
            assert runner.store is not None
            higher = self._metric.higher_is_better
            runner.store.append(
                "sequential.jsonl",
                {
                    "round": round_number,
                    "pairs": pairs,
                    "discordant": b_wins + a_wins,
                    "b_higher": b_wins,
                    "a_higher": a_wins,
                    "discordant_total": discordant,
                    "b_higher_total": b_higher,
                    "e_value": e_value,
                    "decision": decision,
                    "worse": decision == ("A>B" if higher else "B>A"),
                    "stop": stop,
                },
            )
            if stop:
                break
        if scheduler is None:
            scheduler = runner.run_units([])
        return runner.conclude(scheduler)
