"""The evidence a sequential run keeps: each round's discordant pairs, the rule's look after it
(promptprobe.stats.sequential), and one line of sequential.jsonl per round.

Pairs are counted by rate (B's outcome 1, A's 0: B's rate higher there), so the decision reads
like every verdict: `B>A` = B's rate reliably higher, whatever the metric's direction. A failed
sample counts as that metric's unfavourable outcome for its arm (a 0 where higher is better, a 1
where lower is better), so a pair where one arm failed is discordant against it.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..checks import CheckSettings, metrics_for
from ..errors import InputError
from ..jsonio import iter_jsonl
from ..probeset import Case
from ..stats.sequential import Look, look
from .plan import Arm

LEDGER = "sequential.jsonl"
OLD_RULE = (
    "this sequential run was recorded under the mixture e-value of an earlier promptprobe; its rounds "
    "cannot be continued under the exact boundary (report and compare still read it; start a new run)"
)


@dataclass(frozen=True)
class RoundPairs:
    pairs: int  # (case, round) pairs where both arms have an outcome
    b_higher: int  # only B's outcome is 1
    a_higher: int  # only A's outcome is 1

    @property
    def discordant(self) -> int:
        return self.b_higher + self.a_higher


def round_pairs(
    samples: Sequence[dict[str, Any]],
    arms: tuple[Arm, Arm],
    cases: dict[str, Case],
    settings: CheckSettings,
    metric: str,
) -> RoundPairs:
    """The pairs of one round's samples of the two arms, and which of them are discordant."""
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
    return RoundPairs(pairs, b_higher, a_higher)


class RoundBook:
    """sequential.jsonl of one run: the rounds recorded so far, and the next round's line."""

    def __init__(self, folder: Path, alpha: float, cap: int, min_rounds: int, higher_is_better: bool) -> None:
        self.path = folder / LEDGER
        self.alpha, self.cap, self.min_rounds = alpha, cap, min_rounds
        self.higher_is_better = higher_is_better
        self.discordant: list[int] = []
        self.b_higher: list[int] = []
        self.last: dict[str, Any] | None = None
        for line in iter_jsonl(self.path):
            if "b_higher" not in line or "lead" not in line:
                raise InputError(f"{self.path}: {OLD_RULE}")
            self.discordant.append(line["discordant"])
            self.b_higher.append(line["b_higher"])
            self.last = line

    @property
    def rounds(self) -> int:
        return len(self.discordant)

    @property
    def stopped(self) -> bool:
        return bool(self.last and self.last.get("stop"))

    def record(self, store: Any, counted: RoundPairs) -> Look:
        """The rule's look after one more round, appended to sequential.jsonl."""
        self.discordant.append(counted.discordant)
        self.b_higher.append(counted.b_higher)
        seen = look(self.discordant, self.b_higher, self.alpha, self.cap, self.min_rounds)
        decision = seen.decision or ("indistinguishable" if seen.stop else None)
        line = {
            "round": seen.round,
            "pairs": counted.pairs,
            "discordant": counted.discordant,
            "b_higher": counted.b_higher,
            "a_higher": counted.a_higher,
            "discordant_total": seen.discordant,
            "b_higher_total": sum(self.b_higher),
            "lead": seen.lead,
            "lead_needed": seen.needed,
            "alpha_budget": seen.budget,
            "alpha_spent": seen.spent,
            "p_value": seen.p_value,
            "decision": decision,
            "worse": decision == ("A>B" if self.higher_is_better else "B>A"),
            "stop": seen.stop,
        }
        store.append(LEDGER, line)
        self.last = line
        return seen
