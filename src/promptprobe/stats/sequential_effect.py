"""The effect beside a sequential verdict: B - A per pair, with an interval valid at any stopping round.

The estimate is the rounds' lead over the pairs asked: (pairs where only B succeeded - pairs where
only A succeeded) / pairs, the mean B - A over the drawn questions. The interval is the betting
confidence sequence on the rounds' means (promptprobe.stats.confidence_sequence), which treats
neither the share of discordant pairs nor their split as known, made to agree with the rule's
verdict (promptprobe.stats.agreement): when the rule decided and the sequence still reaches 0, the
end on 0's side is the rule's stage-wise test inverted (promptprobe.stats.sequential_interval).
"""

from collections.abc import Sequence

from .agreement import agree
from .confidence_sequence import confidence_sequence, round_means
from .sequential_interval import Rounds, sequential_interval
from .tests import decides

METHOD = (
    "mean difference per pair over the rounds (betting confidence sequence, valid at any stopping "
    "round; the decided end from the rule's stage-wise test)"
)


def sequential_effect(
    leads: Sequence[int],
    pairs: Sequence[int],
    discordant: Sequence[int],
    needed: Sequence[int | None],
    p_value: float,
    alpha: float,
) -> tuple[float, tuple[float, float]]:
    """(estimate, 1 - alpha interval) after these rounds: per round the lead (B-higher minus
    A-higher discordant pairs), the pairs asked, the discordant pairs and the lead the rule needed
    at that look; `p_value` the rule's own p where it stopped (1 when it has not decided)."""
    total_pairs = sum(pairs)
    lead = sum(leads)
    estimate = lead / total_pairs if total_pairs else 0.0
    interval = confidence_sequence(round_means(leads, pairs), alpha)
    direction = ((lead > 0) - (lead < 0)) if decides(p_value, alpha) else 0

    def tested() -> tuple[float, float] | None:
        if not sum(discordant):
            return None
        rounds = Rounds(list(discordant), list(needed), lead, total_pairs)
        return sequential_interval(rounds, p_value, alpha, "B>A" if direction > 0 else "A>B")[1]

    return estimate, agree(interval, estimate, direction, tested)
