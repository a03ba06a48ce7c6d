"""A test turned into an interval: the values of the effect a test does not reject.

`p_at(delta)` is the test of "B - A = delta" (at delta = 0 the verdict's own test). The values it
does not reject at level alpha (p > alpha·(1 + 1e-9), the verdict's `decides` turned round) need
not form an interval for a discrete test, so the interval is built so that it agrees with the
verdict by construction:

- not decided (0 accepted): each end is found by bisection between an accepted anchor (0, and the
  estimate when it is accepted) and the far edge, so the interval contains 0;
- decided (0 rejected): the end on 0's side is found by bisection between the estimate (accepted)
  and 0 (rejected), so it lies strictly on the estimate's side: the interval excludes 0.

Each end reported is an accepted value, to `tolerance`; where the edge itself is accepted, the end
is the edge. When the estimate is rejected as well as 0 nothing can agree, and the answer is None.
The search between an accepted and a rejected point is regula falsi on log p - log alpha (the
Illinois variant), with a bisection step whenever the bracket fails to halve in two steps, so a
smooth p costs a handful of evaluations and a step function no more than bisection does.
"""

import math
from collections.abc import Callable

from .tests import decides, decision_limit

TOLERANCE = 1e-4  # on the scale searched: a hundredth of a point for a difference of rates
_LOG_P_FLOOR = -60.0


def _boundary(gap: Callable[[float], float], inside: float, outside: float, tolerance: float) -> float:
    """An accepted point next to a rejection, between an accepted `inside` (gap > 0) and a
    rejected `outside` (gap <= 0)."""
    g_in, g_out = gap(inside), gap(outside)
    width = abs(outside - inside)
    last_side = 0
    steps = 0
    while abs(outside - inside) > tolerance:
        steps += 1
        span = outside - inside
        if steps % 2 == 0 and abs(span) > width / 2:
            middle = inside + span / 2  # not halving: bisect
        else:
            middle = outside - span * g_out / (g_out - g_in) if g_in != g_out else inside + span / 2
            # Step just past the estimated root, so that the bracket can close from either side.
            middle += math.copysign(tolerance / 2, span if last_side == 1 else -span)
            if not min(inside, outside) < middle < max(inside, outside):
                middle = inside + span / 2
        if steps % 2 == 0:
            width = abs(outside - inside)
        value = gap(middle)
        if value > 0:
            inside, g_in = middle, value
            if last_side == 1:
                g_out /= 2  # Illinois: the end that stays put loses half its weight
            last_side = 1
        else:
            outside, g_out = middle, value
            if last_side == -1:
                g_in /= 2
            last_side = -1
    return inside


def invert(
    p_at: Callable[[float], float],
    estimate: float,
    alpha: float,
    low: float = -1.0,
    high: float = 1.0,
    tolerance: float = TOLERANCE,
    guess: tuple[float, float] | None = None,
) -> tuple[float, float] | None:
    """The 1 - alpha interval of the test `p_at`, excluding 0 exactly when p_at(0) decides at alpha.

    `guess`, an approximate interval, only narrows where the search starts."""
    cache: dict[float, float] = {}
    limit = math.log(decision_limit(alpha))

    def gap(delta: float) -> float:
        """log p - log(the largest p that decides): > 0 exactly when delta is accepted."""
        if delta not in cache:
            p = p_at(delta)
            value = max(_LOG_P_FLOOR, math.log(p)) - limit if p > 0 else _LOG_P_FLOOR - limit
            # decides() is the rule; the log only steers the search.
            cache[delta] = (
                value if (value > 0) == (not decides(p, alpha)) else (1e-300 if value <= 0 else 0.0)
            )
        return cache[delta]

    def accepted(delta: float) -> bool:
        return gap(delta) > 0

    def end(anchor: float, edge: float, hint: float | None) -> float:
        """The end of the interval between an accepted anchor and the edge (or 0, rejected)."""
        if edge != 0.0 and accepted(edge):
            return edge
        if hint is not None and min(anchor, edge) < hint < max(anchor, edge):
            if accepted(hint):
                anchor = hint
            else:
                edge = hint
        return _boundary(gap, anchor, edge, tolerance)

    estimate = min(high, max(low, estimate))
    hint_low, hint_high = guess if guess is not None else (None, None)
    anchors = [x for x in (0.0, estimate) if accepted(x)]
    if not accepted(0.0):
        if not anchors:
            return None
        if estimate > 0:
            return (end(estimate, 0.0, hint_low), end(estimate, high, hint_high))
        return (end(estimate, low, hint_low), end(estimate, 0.0, hint_high))
    return (end(min(anchors), low, hint_low), end(max(anchors), high, hint_high))
