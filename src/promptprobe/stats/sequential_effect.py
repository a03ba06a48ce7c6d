"""The effect beside a sequential verdict: B - A per pair, with an interval valid at any stopping round.

The estimate is the rounds' lead over the pairs asked: (pairs where only B succeeded - pairs where
only A succeeded) / pairs, the mean B - A over the drawn questions. The interval is the betting
confidence sequence on the rounds' means (promptprobe.stats.confidence_sequence), which treats
neither the share of discordant pairs nor their split as known, made to agree with the rule's
verdict (promptprobe.stats.agreement): when the rule decided and the sequence still reaches 0, the
end on 0's side is the rule's stage-wise test inverted (promptprobe.stats.sequential_interval).
"""

from collections.abc import Callable, Sequence

from .agreement import agree
from .confidence_sequence import confidence_sequence, round_means
from .sequential_interval import Rounds, sequential_interval
from .tests import decides

METHOD = (
    "mean difference per pair over the rounds (betting confidence sequence, valid at any stopping "
    "round; the decided end from the rule's stage-wise test)"
)


TestInterval = Callable[[float, str], "tuple[float, float] | None"]


def boundary_test(
    discordant: Sequence[int], needed: Sequence[int | None], lead: int, pairs: int, p_value: float
) -> TestInterval:
    """The exact boundary's stage-wise test inverted, at a level and a decision ("B>A"/"A>B")."""

    def tested(alpha: float, decision: str) -> tuple[float, float] | None:
        if not sum(discordant):
            return None
        return sequential_interval(
            Rounds(list(discordant), list(needed), lead, pairs), p_value, alpha, decision
        )[1]

    return tested


def sequential_effect(
    leads: Sequence[int],
    pairs: Sequence[int],
    p_value: float,
    alpha: float,
    test_interval: TestInterval | None = None,
) -> tuple[float, tuple[float, float]]:
    """(estimate, 1 - alpha interval) after these rounds, from each round's lead (B-higher minus
    A-higher discordant pairs) and pairs asked; `p_value` the rule's own p where it stopped (1
    when it has not decided); `test_interval` the rule's test inverted (`boundary_test`), read only
    for the end on 0's side of a decided interval."""
    total_pairs = sum(pairs)
    lead = sum(leads)
    estimate = lead / total_pairs if total_pairs else 0.0
    interval = confidence_sequence(round_means(leads, pairs), alpha)
    direction = ((lead > 0) - (lead < 0)) if decides(p_value, alpha) else 0
    decision = "B>A" if direction > 0 else "A>B"

    def tested() -> tuple[float, float] | None:
        return test_interval(alpha, decision) if test_interval is not None else None

    return estimate, agree(interval, estimate, direction, tested)
