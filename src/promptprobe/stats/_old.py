"""Interval statistics: pure functions over counts, built on scipy.

Formulas:
- Wilson score interval (Wilson 1927): centre (x + z²/2)/(n + z²),
  half-width z·sqrt(x(n-x)/n + z²/4)/(n + z²).
- One-way ANOVA intra-class correlation over G clusters (cases) of m_i binary outcomes:
  ICC = (MSB - MSW) / (MSB + (m0 - 1)·MSW), m0 = (N - Σm_i²/N)/(G - 1), floored at 0.
- Design effect DEFF = 1 + (m̄ - 1)·ICC; effective n = n / DEFF.
- Cluster-adjusted interval: Wilson at the effective n (x = rate·n_eff) with the Student t
  critical value on G-1 degrees of freedom in place of z (Cameron & Miller 2015).
- Newcombe (1998) hybrid score interval, method 10, for p1 - p2:
  [d - sqrt((p1-l1)² + (u2-p2)²), d + sqrt((u1-p1)² + (p2-l2)²)].
- Sample size per arm, classic pooled normal approximation (no continuity correction):
  n = [z_{α/2}·sqrt(2·p̄q̄) + z_β·sqrt(p1q1 + p2q2)]² / (p1 - p2)².
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass

from scipy import optimize, stats


def z_critical(confidence: float = 0.95) -> float:
    return float(stats.norm.ppf(1 - (1 - confidence) / 2))


def t_critical(df: int, confidence: float = 0.95) -> float:
    return float(stats.t.ppf(1 - (1 - confidence) / 2, df))


def _check_counts(k: float, n: float) -> None:
    if n < 0 or k < 0 or k > n:
        raise ValueError(f"counts must satisfy 0 <= k <= n, got k={k}, n={n}")


def wilson_crit(k: float, n: float, crit: float) -> tuple[float, float]:
    """Wilson score interval for k of n with critical value `crit`; k may be fractional."""
    _check_counts(k, n)
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    denom = n + crit**2
    centre = (k + crit**2 / 2) / denom
    half = crit * math.sqrt(k * (n - k) / n + crit**2 / 4) / denom
    # Exact bounds at the edges: the closed form only reaches them up to rounding.
    lo = 0.0 if k == 0 else max(0.0, min(p, centre - half))
    hi = 1.0 if k == n else min(1.0, max(p, centre + half))
    return (lo, hi)


def wilson(k: float, n: float, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval (no continuity correction)."""
    return wilson_crit(k, n, z_critical(confidence))


@dataclass(frozen=True)
class Clustered:
    """A rate over cases with repeats, with its cluster adjustment."""

    k: int
    n: int
    rate: float | None
    wilson: tuple[float, float]
    icc: float
    deff: float
    n_eff: float
    wilson_eff: tuple[float, float]


def icc_anova(successes: Sequence[float], trials: Sequence[float]) -> float:
    """One-way ANOVA ICC of binary outcomes grouped by case; floored at 0."""
    groups = [(k, m) for k, m in zip(successes, trials, strict=True) if m > 0]
    g = len(groups)
    total = sum(m for _, m in groups)
    if g < 2 or total <= g:
        return 0.0
    p = sum(k for k, _ in groups) / total
    msb = sum(m * (k / m - p) ** 2 for k, m in groups) / (g - 1)
    msw = sum(k - k * k / m for k, m in groups) / (total - g)
    m0 = (total - sum(m * m for _, m in groups) / total) / (g - 1)
    denom = msb + (m0 - 1) * msw
    if denom <= 0:
        return 0.0  # every outcome equal: no variation to attribute to cases
    return max(0.0, (msb - msw) / denom)


def clustered_rate(successes: Sequence[int], trials: Sequence[int], confidence: float = 0.95) -> Clustered:
    """Rate, Wilson interval, design effect and cluster-adjusted interval from per-case counts."""
    groups = [(k, m) for k, m in zip(successes, trials, strict=True) if m > 0]
    k = sum(s for s, _ in groups)
    n = sum(m for _, m in groups)
    naive = wilson(k, n, confidence)
    g = len(groups)
    mean_m = n / g if g else 0.0
    if g < 2 or mean_m <= 1:
        # One case or one repeat per case: nothing is clustered.
        return Clustered(k, n, k / n if n else None, naive, 0.0, 1.0, float(n), naive)
    icc = icc_anova([s for s, _ in groups], [m for _, m in groups])
    deff = 1 + (mean_m - 1) * icc
    n_eff = n / deff
    rate = k / n
    adjusted = wilson_crit(rate * n_eff, n_eff, t_critical(g - 1, confidence))
    return Clustered(k, n, rate, naive, icc, deff, n_eff, adjusted)


def newcombe_from_limits(
    p1: float, l1: float, u1: float, p2: float, l2: float, u2: float
) -> tuple[float, float]:
    """Newcombe's hybrid interval for p1 - p2 from each proportion's own interval."""
    d = p1 - p2
    lo = d - math.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2)
    hi = d + math.sqrt((u1 - p1) ** 2 + (p2 - l2) ** 2)
    return (max(-1.0, lo), min(1.0, hi))


def newcombe(k1: int, n1: int, k2: int, n2: int, confidence: float = 0.95) -> tuple[float, float]:
    """Newcombe (1998) method 10: hybrid score interval for k1/n1 - k2/n2."""
    l1, u1 = wilson(k1, n1, confidence)
    l2, u2 = wilson(k2, n2, confidence)
    return newcombe_from_limits(k1 / n1, l1, u1, k2 / n2, l2, u2)


def boschloo_p(k1: int, n1: int, k2: int, n2: int) -> float:
    """Two-sided Boschloo exact p-value; the table's columns are the two arms."""
    if n1 == 0 or n2 == 0:
        return float("nan")
    if k1 / n1 == k2 / n2:
        return 1.0  # identical rates: scipy may return nan on degenerate tables
    table = [[k1, k2], [n1 - k1, n2 - k2]]
    return float(stats.boschloo_exact(table, alternative="two-sided").pvalue)


def n_per_arm_float(p1: float, p2: float, alpha: float = 0.05, power: float = 0.8) -> float:
    if p1 == p2:
        return math.inf
    za = stats.norm.ppf(1 - alpha / 2)
    zb = stats.norm.ppf(power)
    pbar = (p1 + p2) / 2
    num = za * math.sqrt(2 * pbar * (1 - pbar)) + zb * math.sqrt(p1 * (1 - p1) + p2 * (1 - p2))
    return float(num**2 / (p1 - p2) ** 2)


def n_per_arm(p1: float, p2: float, alpha: float = 0.05, power: float = 0.8) -> int | None:
    """Samples per arm to tell p1 from p2 (two-sided alpha, power); None when p1 == p2."""
    for p in (p1, p2):
        if not 0 <= p <= 1:
            raise ValueError(f"rates must lie in [0, 1], got {p}")
    if p1 == p2:
        return None
    # The small tolerance keeps 48.0000000001 from becoming 49.
    return math.ceil(n_per_arm_float(p1, p2, alpha, power) - 1e-9)


def detectable_difference(
    n: int, p1: float, alpha: float = 0.05, power: float = 0.8
) -> dict[str, float | None]:
    """Smallest p2 - p1 (each direction) that n samples per arm detect; None if unreachable."""
    if n < 1:
        raise ValueError("n must be at least 1")
    result: dict[str, float | None] = {}
    for name, edge in (("up", 1.0), ("down", 0.0)):
        if p1 == edge or n_per_arm_float(p1, edge, alpha, power) > n:
            result[name] = None
            continue
        p2 = optimize.brentq(
            lambda q: n_per_arm_float(p1, q, alpha, power) - n,
            p1 + (edge - p1) * 1e-9,
            edge,
            xtol=1e-12,
        )
        result[name] = p2 - p1
    return result


def gate_block_probability(p: float, k: int) -> float:
    """A gate that fails a case when any of k runs fails blocks it with 1 - p^k."""
    return 1 - p**k


def repeats_needed(n_eff: float, cases: int, icc: float) -> int | None:
    """Repeats of `cases` cases whose effective n reaches n_eff; None if no repeat count does.

    n_eff(m) = C·m / (1 + (m-1)·ICC), which tends to C/ICC as m grows.
    """
    if cases < 1 or not 0 <= icc <= 1:
        raise ValueError("cases must be >= 1 and icc within [0, 1]")
    if cases - n_eff * icc <= 0:
        return None
    return max(1, math.ceil(n_eff * (1 - icc) / (cases - n_eff * icc) - 1e-9))


def t_interval(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float] | None:
    """Mean ± t·s/√G over G values; None with fewer than two."""
    g = len(values)
    if g < 2:
        return None
    mean = sum(values) / g
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (g - 1))
    half = t_critical(g - 1, confidence) * sd / math.sqrt(g)
    return (mean - half, mean + half)
