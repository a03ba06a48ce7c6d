"""`probe run --until-decided`: two arms in rounds, stopping as soon as the answer is known.

A round asks every case once under each arm, with one retrieval per (case, round) shared by
both (a round is a repeat of the plan). After each complete round the discordant pairs of
the round are added to the evidence (promptprobe.stats.sequential) and the run stops when the
e-value reaches 1/alpha (after at least `min_rounds`), or at `max_rounds` as indistinguishable.
A failed sample counts as that metric's unfavourable outcome for its arm, so a pair where
one arm failed is discordant against it. Each round is a line of sequential.jsonl.
"""

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..checks import METRICS, CheckSettings
from ..config import TargetConfig
from ..errors import InputError
from ..jsonio import iter_jsonl
from ..models import ModelSpec
from ..probeset import Case, ProbeSet
from ..prompts import PromptVersion
from ..stats.planning import paired_repeats
from ..stats.sequential import KT, decide, mixture_e_value
from .plan import Arm, Unit, sample_id
from .run import ProbeRun, RunOptions, RunOutcome
from .store import iter_samples

CAP_BASIS = {"p1": 0.85, "p2": 1.0, "icc": 0.5, "power": 0.8}


@dataclass(frozen=True)
class SequentialRule:
    metric: str = "header_present"
    alpha: float = 0.05
    min_rounds: int = 2
    max_rounds: int | None = None  # None: twice what a fixed paired plan needs (CAP_BASIS)
    mixture: float = KT

    @property
    def threshold(self) -> float:
        return 1 / self.alpha


def default_max_rounds(cases: int, alpha: float) -> tuple[int, int | None]:
    """(cap, fixed rounds): twice the repeats a fixed paired test needs for 80% power at
    0.85 vs 1.0 with ICC 0.5 (by simulation of that test); 200 when none is found."""
    fixed = paired_repeats(
        CAP_BASIS["p1"], CAP_BASIS["p2"], cases, CAP_BASIS["icc"], alpha, CAP_BASIS["power"]
    ).repeats
    return (2 * fixed if fixed else 200), fixed


def round_pairs(
    samples: Sequence[dict[str, Any]],
    arms: tuple[Arm, Arm],
    cases: dict[str, Case],
    settings: CheckSettings,
    metric: str,
) -> tuple[int, int, int]:
    """(pairs, favour_b, favour_a) over one round's samples of the two arms."""
    rule = METRICS[metric]
    outcome: dict[tuple[str, int], bool] = {}
    for sample in samples:
        case = cases[sample["case_id"]]
        if not rule.applies(case, settings):
            continue
        index = 0 if sample["prompt"] == arms[0].prompt.name and sample["model"] == arms[0].model.spec else 1
        if sample.get("error"):
            good = False  # a failure is the unfavourable outcome for its own arm
        else:
            good = rule.outcome(sample, case, settings) == rule.higher_is_better
        outcome[(case.id, index)] = good
    pairs = favour_b = favour_a = 0
    for case_id in cases:
        if (case_id, 0) in outcome and (case_id, 1) in outcome:
            pairs += 1
            a, b = outcome[(case_id, 0)], outcome[(case_id, 1)]
            favour_b += b and not a
            favour_a += a and not b
    return pairs, favour_b, favour_a


class SequentialRun:
    """Drives a ProbeRun (new or resumed) round by round."""

    def __init__(self, runner: ProbeRun, rule: SequentialRule, fixed_rounds: int | None = None) -> None:
        if len(runner.plan.arms) != 2:
            raise InputError(
                f"--until-decided compares exactly two arms (two prompts, or two models); this run has "
                f"{len(runner.plan.arms)}"
            )
        if rule.max_rounds is not None and rule.max_rounds < rule.min_rounds:
            raise InputError(f"--max-rounds {rule.max_rounds} is below --min-rounds {rule.min_rounds}")
        self.runner = runner
        self.rule = rule
        self.fixed_rounds = fixed_rounds
        arms = runner.plan.arms
        self.arms: tuple[Arm, Arm] = (arms[0], arms[1])
        runner.extra_manifest["sequential"] = {
            "metric": rule.metric,
            "alpha": rule.alpha,
            "threshold": rule.threshold,
            "min_rounds": rule.min_rounds,
            "max_rounds": runner.plan.repeats,
            "mixture": f"Beta({rule.mixture:g}, {rule.mixture:g})",
            "a": f"prompt={arms[0].prompt.name},model={arms[0].model.spec}",
            "b": f"prompt={arms[1].prompt.name},model={arms[1].model.spec}",
            "fixed_rounds": fixed_rounds,
            "cap_basis": CAP_BASIS,
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
        fixed = None
        max_rounds = rule.max_rounds
        if max_rounds is None:
            max_rounds, fixed = default_max_rounds(len(probeset.cases), rule.alpha)
        runner = ProbeRun(probeset, prompts, models, config, replace(options, repeats=max_rounds))
        return cls(runner, replace(rule, max_rounds=max_rounds), fixed)

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

    def cancel(self) -> None:
        self.runner.cancel()

    def describe(self) -> str:
        cases = len(self.runner.plan.cases)
        cap = self.runner.plan.repeats
        basis = (
            f"twice the {self.fixed_rounds} rounds a fixed paired test needs for 80% power at 85% vs 100% "
            f"(ICC 0.5)"
            if self.fixed_rounds
            else "--max-rounds"
        )
        return (
            f"sequential: rounds of {cases} cases x 2 arms on {self.rule.metric}; stops when the evidence "
            f"reaches e >= {self.rule.threshold:g} (alpha {self.rule.alpha:g}) after at least "
            f"{self.rule.min_rounds} rounds, or at {cap} rounds ({basis}) as indistinguishable"
        )

    # -- running -----------------------------------------------------------------------------

    def _history(self) -> tuple[int, int, int, dict[str, Any] | None]:
        """(rounds done, discordant, favour_b, last line) from sequential.jsonl (resume)."""
        assert self.runner.store is not None
        lines = list(iter_jsonl(self.runner.store.path / "sequential.jsonl"))
        if not lines:
            return 0, 0, 0, None
        last = lines[-1]
        return last["round"], last["discordant_total"], last["favour_b_total"], last

    def _round_samples(self, round_number: int) -> list[dict[str, Any]]:
        assert self.runner.store is not None
        ids = {sample_id(c.id, round_number, arm) for c in self.runner.plan.cases for arm in self.arms}
        return [s for s in iter_samples(self.runner.store.path) if s["sample_id"] in ids]

    def execute(self) -> RunOutcome:
        runner = self.runner
        runner.open()
        done, discordant, favour_b, last = self._history()
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
            favour_b += b_wins
            e_value = mixture_e_value(favour_b, discordant, self.rule.mixture)
            decision = decide(favour_b, discordant, self.rule.alpha, self.rule.mixture)
            stop = False
            if decision and round_number >= self.rule.min_rounds:
                stop = True
            elif round_number == runner.plan.repeats:
                decision, stop = "indistinguishable", True
            else:
                decision = None
            assert runner.store is not None
            runner.store.append(
                "sequential.jsonl",
                {
                    "round": round_number,
                    "pairs": pairs,
                    "discordant": b_wins + a_wins,
                    "favour_b": b_wins,
                    "favour_a": a_wins,
                    "discordant_total": discordant,
                    "favour_b_total": favour_b,
                    "e_value": e_value,
                    "decision": decision,
                    "stop": stop,
                },
            )
            if stop:
                break
        if scheduler is None:
            scheduler = runner.run_units([])
        return runner.conclude(scheduler)
