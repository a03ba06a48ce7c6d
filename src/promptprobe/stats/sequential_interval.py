"""The exact boundary's stage-wise test, inverted: the end on 0's side of the interval beside a
decided sequential verdict, where the rounds' confidence sequence reaches 0
(promptprobe.stats.sequential_effect; alone it treats the discordant pairs' share as known).

The rule (promptprobe.stats.sequential) watches the lead of the discordant pairs, a fair-coin walk
under "the arms do not differ" given each round's discordant count, and decides when it crosses
the boundary recorded for that look. Its p is stage-wise: the chance of crossing at an earlier
look, either way, plus that of a lead at least as large at the look it stopped at. For q, the
chance that a discordant pair favours B, the same ordering gives p(q): the walk takes each coin
with probability q, the boundaries stay the ones recorded (they are part of the ordering, fixed
given the discordant counts), and at q = 1/2 it is the rule's own p. q is accepted while
p(q) > alpha·(1 + 1e-9). As for the paired test (promptprobe.stats.conditional), the interval
is the hull of the accepted q on the decision's side when the rule decided, and of every
accepted q and 1/2 when it did not, so it excludes 1/2 exactly when the run decided.

On the points scale it is D·(2q - 1), D the share of the pairs asked that were discordant (B - A
over the pairs: the pairs favouring B less those favouring A, per pair), with the estimate at the
observed q = s/d, or the point of the interval nearest it.
"""

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .tests import decision_limit

GRID = 201
BISECTIONS = 40
METHOD = "discordant pairs' difference, the sequential boundary's stage-wise test inverted"


@dataclass(frozen=True)
class Rounds:
    """What sequential.jsonl recorded, in B-favouring terms of these two arms."""

    discordant: Sequence[int]  # per round
    needed: Sequence[int | None]  # the lead (either way) that decides at each look; None: none can
    lead: int  # B-favouring minus A-favouring discordant pairs at the last look
    pairs: int  # pairs asked in all


def stagewise_p(rounds: Rounds, q: np.ndarray) -> np.ndarray:
    """P_q(an outcome at least as extreme as the observed one in the stage-wise ordering)."""
    q = np.atleast_1d(np.asarray(q, dtype=float))
    width = int(sum(rounds.discordant))
    h = np.zeros((len(q), 2 * width + 1))
    h[:, width] = 1.0
    leads = np.abs(np.arange(-width, width + 1))
    crossed = np.zeros(len(q))
    last = len(rounds.discordant) - 1
    up, down = q[:, None], 1 - q[:, None]
    for index, (coins, needed) in enumerate(zip(rounds.discordant, rounds.needed, strict=True)):
        for _ in range(int(coins)):
            step = np.zeros_like(h)
            step[:, 1:] += h[:, :-1] * up
            step[:, :-1] += h[:, 1:] * down
            h = step
        if index < last:
            if needed:
                beyond = leads >= needed
                crossed += h[:, beyond].sum(axis=1)
                h[:, beyond] = 0.0
        else:
            crossed += h[:, leads >= abs(rounds.lead)].sum(axis=1)
    return np.minimum(1.0, crossed)


def _edge(rounds: Rounds, inside: float, outside: float, limit: float) -> float:
    """Bisection between an accepted q and a rejected one (p(q) is continuous in q)."""
    for _ in range(BISECTIONS):
        middle = (inside + outside) / 2
        if middle == 0.5 or stagewise_p(rounds, np.array([middle]))[0] <= limit:
            outside = middle
        else:
            inside = middle
    return inside


def sequential_interval(
    rounds: Rounds, p_value: float, alpha: float, decision: str | None
) -> tuple[float, tuple[float, float]]:
    """(estimate, interval) for B - A at level alpha; the interval excludes 0 exactly when the
    run decided (`decision` "B>A" or "A>B", `p_value` the rule's own p, <= alpha then)."""
    limit = decision_limit(alpha)
    discordant = int(sum(rounds.discordant))
    share = discordant / rounds.pairs if rounds.pairs else 0.0
    if not discordant:
        return 0.0, (-1.0, 1.0)  # no discordant pair: nothing says how far apart the arms are
    grid = np.linspace(0.0, 1.0, GRID)
    p = stagewise_p(rounds, grid)
    p[grid == 0.5] = p_value  # the rule's own p, never a recomputation
    accepted = p > limit
    if decision in ("B>A", "A>B"):
        side = grid > 0.5 if decision == "B>A" else grid < 0.5
        points = np.nonzero(accepted & side)[0]
        if not len(points):  # the accepted q lie between grid points: the nearest to the observed
            observed = (discordant + rounds.lead) / (2 * discordant)
            points = np.array([int(np.argmin(np.abs(grid - observed)))])
    else:
        points = np.nonzero(accepted | (grid == 0.5))[0]
    first, last = int(points.min()), int(points.max())
    low = grid[first] if first == 0 else _edge(rounds, grid[first], grid[first - 1], limit)
    high = grid[last] if last == GRID - 1 else _edge(rounds, grid[last], grid[last + 1], limit)
    if decision == "B>A":
        low = max(low, np.nextafter(0.5, 1.0))
    elif decision == "A>B":
        high = min(high, np.nextafter(0.5, 0.0))
    else:
        low, high = min(low, 0.5), max(high, 0.5)
    low, high = float(low), float(high)
    observed = min(max((discordant + rounds.lead) / (2 * discordant), low), high)
    interval = (share * (2 * low - 1), share * (2 * high - 1))
    return share * (2 * observed - 1), (max(-1.0, interval[0]), min(1.0, interval[1]))
