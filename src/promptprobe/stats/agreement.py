"""A valid interval made to agree with the verdict beside it, losing almost none of its coverage.

An interval I that covers its target (promptprobe.stats.case_means, .confidence_sequence) need not
agree with the test that decides the verdict. It is made to:

- undecided, and I excludes 0: I is extended to reach 0 (widening only adds coverage);
- decided in direction d, and I reaches 0 or beyond: the end on 0's side is the test's own
  inverted end on side d (it excludes 0 because the test rejected 0), or, where the test has no
  interval, the point a hundredth of the way from 0 to the estimate. Coverage is lost only where
  the target lies between 0 and that end, which needs the test to have rejected a value beside
  the truth: at most about the false-alarm rate;
- decided, and I already lies on side d: I as it is.

The two ends are always strictly apart: an interval is never a single point.
"""

from collections.abc import Callable

Bounds = tuple[float, float]
NEAR_ZERO_SHARE = 0.01  # without a test interval: the decided end this share of the way to the estimate


def agree(
    interval: Bounds,
    estimate: float,
    direction: int,
    test_interval: "Bounds | None | Callable[[], Bounds | None]" = None,
) -> Bounds:
    """`interval` made to agree with a verdict decided in `direction` (+1 B>A, -1 A>B, 0 undecided);
    `test_interval`, the verdict's own test inverted (or a function computing it, read only when
    needed), gives the end on 0's side when a decided interval reaches 0."""
    low, high = interval
    if direction == 0:
        low, high = min(low, 0.0), max(high, 0.0)
        return _apart(low, high)
    if (low > 0) if direction > 0 else (high < 0):
        return _apart(low, high)
    tested = test_interval() if callable(test_interval) else test_interval
    # The estimate stays inside: the end on 0's side never passes it (it lies on side d).
    if direction > 0:
        end = tested[0] if tested is not None and tested[0] > 0 else NEAR_ZERO_SHARE * max(estimate, 1e-6)
        end = min(end, estimate) if estimate > 0 else end
        low, high = end, max(high, end)
    else:
        end = tested[1] if tested is not None and tested[1] < 0 else NEAR_ZERO_SHARE * min(estimate, -1e-6)
        end = max(end, estimate) if estimate < 0 else end
        low, high = min(low, end), end
    return _apart(low, high, keep=-direction)


def _apart(low: float, high: float, keep: int = 0) -> Bounds:
    """Ends strictly apart, inside [-1, 1]: a tie moves one end out by a thousandth of a point
    (`keep` -1 keeps the low end where it is, +1 the high one, 0 either)."""
    low, high = max(-1.0, low), min(1.0, high)
    if high > low:
        return (low, high)
    step = 1e-5
    if keep < 0 or (keep == 0 and high < 1.0):
        return (low, min(1.0, low + step)) if low < 1.0 else (low - step, low)
    return (max(-1.0, high - step), high) if high > -1.0 else (high, high + step)
