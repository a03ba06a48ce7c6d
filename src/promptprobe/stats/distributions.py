"""The distribution functions the statistics need, in pure Python.

A report or a run should not pay for importing scipy (about a second), so the normal, Student
t and F quantiles and the hypergeometric and binomial probabilities are computed here; the tests
check them against scipy. The regularized incomplete beta function uses the continued fraction
of Numerical Recipes (Lentz's method); quantiles invert it by bisection to full precision.
"""

import math
from collections.abc import Callable
from functools import lru_cache
from statistics import NormalDist

_NORMAL = NormalDist()
_TINY = 1e-300


def normal_cdf(x: float) -> float:
    return _NORMAL.cdf(x)


def normal_isf(q: float) -> float:
    """The upper-q quantile of the standard normal; exact also for tiny q (no 1 - q rounding)."""
    # Below the smallest float the quantile is past any figure a test compares against.
    return -_NORMAL.inv_cdf(max(q, math.ulp(0.0)))


def _beta_fraction(a: float, b: float, x: float) -> float:
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c = 1.0
    d = 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, 10_000):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > _TINY else _TINY)
        c = 1.0 + aa / c
        c = c if abs(c) > _TINY else _TINY
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > _TINY else _TINY)
        c = 1.0 + aa / c
        c = c if abs(c) > _TINY else _TINY
        step = d * c
        h *= step
        if abs(step - 1.0) < 1e-16:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    front = math.exp(log_front)
    # The fraction converges fast on the side of the mean; use the symmetry on the other.
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_fraction(a, b, x) / a
    return 1.0 - front * _beta_fraction(b, a, 1.0 - x) / b


def _invert(cdf: Callable[[float], float], q: float) -> float:
    """The x in (0, 1) where an increasing cdf reaches q, to float precision.

    The bracket descends geometrically first, so a tiny solution (a far tail) keeps its
    relative precision; then bisection, geometric while the bracket spans orders of magnitude.
    """
    lo, hi = 0.0, 1.0
    x = 0.5
    while x > 1e-300 and cdf(x) >= q:
        hi, x = x, x * x
    lo = x if cdf(x) < q else 0.0
    for _ in range(400):
        mid = math.sqrt(lo * hi) if lo > 0 and hi > 4 * lo else (lo + hi) / 2
        if mid <= lo or mid >= hi:
            break
        if cdf(mid) < q:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


@lru_cache(maxsize=256)
def t_isf(q: float, df: float) -> float:
    """The upper-q quantile of Student's t (q < 0.5 gives a positive value)."""
    if not 0 < q < 1 or df <= 0:
        raise ValueError(f"t quantile needs 0 < q < 1 and df > 0, got q={q}, df={df}")
    if q > 0.5:
        return -t_isf(1.0 - q, df)
    if q == 0.5:
        return 0.0
    # Solve on x = df / (df + t²) in (0, 1), where the tail is 0.5·I_x(df/2, 1/2), increasing in x.
    x = _invert(lambda v: 0.5 * betainc(df / 2.0, 0.5, v), q)
    return math.sqrt(df * (1.0 - x) / x) if x > 0 else math.inf


@lru_cache(maxsize=256)
def f_ppf(q: float, d1: float, d2: float) -> float:
    """The lower-q quantile of the F distribution with (d1, d2) degrees of freedom."""
    if not 0 < q < 1:
        raise ValueError(f"F quantile needs 0 < q < 1, got {q}")
    # Solve on u = d1·x / (d1·x + d2) in (0, 1), where the cdf is I_u(d1/2, d2/2).
    u = _invert(lambda v: betainc(d1 / 2.0, d2 / 2.0, v), q)
    return d2 * u / (d1 * (1.0 - u)) if u < 1 else math.inf


def binomial_two_sided_half(successes: int, trials: int) -> float:
    """Exact two-sided p of a binomial(trials, 1/2) count: the sign test."""
    if trials == 0:
        return 1.0
    low = min(successes, trials - successes)
    tail = sum(math.comb(trials, i) for i in range(low + 1)) / 2**trials
    return min(1.0, 2.0 * tail)
