"""Intervals for one rate and for a difference of two rates.

- Wilson score interval (Wilson 1927): centre (x + c²/2)/(n + c²),
  half-width c·sqrt(x(n-x)/n + c²/4)/(n + c²), with c the normal critical value.
- The per-arm rate shown beside its k/n (`Clustered.wilson`, the "95% Wilson" column): Wilson's
  score interval with continuity correction (Newcombe 1998, method 4), the roots p of
  |k/n - p| - 1/(2n) = z·sqrt(p(1-p)/n); the plain one stays inside Newcombe's hybrid (method 10).
- One-way ANOVA intra-class correlation over G cases of m_i binary outcomes:
  ICC = (MSB - MSW) / (MSB + (m0 - 1)·MSW), m0 = (N - Σm_i²/N)/(G - 1), floored at 0.
- Design effect DEFF = 1 + (m0 - 1)·ICC; effective n = n / DEFF.
- `wilson_eff`, the single-arm interval that keeps its coverage whatever the repeats: Wilson
  at n / DEFF_U with the Student t critical value on G - 1 degrees of freedom, where DEFF_U
  uses the 99% upper confidence limit of the ICC (Searle: F/F_q(G-1, N-G) in place of F = MSB/MSW;
  ICC 1 when no outcome varies within a case, since then nothing bounds it). The point ICC
  alone undercovers: 10 cases x 10 repeats at rate 0.9, ICC 0.5 gave 75-85%, because a sample
  in which every case looks alike estimates ICC 0. The simulation table is in docs/statistics.md.
- Newcombe (1998) hybrid score interval, method 10, for p1 - p2:
  [d - sqrt((p1-l1)² + (u2-p2)²), d + sqrt((u1-p1)² + (p2-l2)²)].
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass

from .distributions import f_ppf, normal_isf, t_isf

ICC_UPPER_LEVEL = 0.99
# Sums of squares this small relative to their terms are exact zeros lost to rounding.
ZERO_TOLERANCE = 1e-12


def z_critical(confidence: float = 0.95) -> float:
    return normal_isf((1 - confidence) / 2)


def t_critical(df: float, confidence: float = 0.95) -> float:
    return t_isf((1 - confidence) / 2, df)


def _check_counts(k: float, n: float) -> None:
    if not (0 <= k <= n) or math.isnan(n):
        raise ValueError(f"counts must satisfy 0 <= k <= n, got k={k}, n={n}")


def wilson_crit(k: float, n: float, crit: float) -> tuple[float, float]:
    """Wilson score interval for k of n with critical value `crit`; k may be fractional."""
    _check_counts(k, n)
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    denom = n + crit**2
    centre = (k + crit**2 / 2) / denom
    half = crit * math.sqrt(max(0.0, k * (n - k) / n) + crit**2 / 4) / denom
    # Exact bounds at the edges: the closed form only reaches them up to rounding.
    lo = 0.0 if k == 0 else max(0.0, min(p, centre - half))
    hi = 1.0 if k == n else min(1.0, max(p, centre + half))
    return (lo, hi)


def wilson(k: float, n: float, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval (no continuity correction)."""
    return wilson_crit(k, n, z_critical(confidence))


def wilson_corrected(x: float, n: float, z: float) -> tuple[float, float]:
    """Wilson's score interval with continuity correction (Newcombe 1998, method 4) for x of n,
    both possibly fractional (effective counts), with critical value z."""
    if n <= 0:
        return (0.0, 1.0)
    p = min(1.0, max(0.0, x / n))
    q = 1 - p
    denominator = 2 * (n + z * z)
    low = 0.0
    if p > 0:
        root = math.sqrt(max(0.0, z * z - 2 - 1 / n + 4 * p * (n * q + 1)))
        low = max(0.0, min(p, (2 * n * p + z * z - 1 - z * root) / denominator))
    high = 1.0
    if q > 0:
        root = math.sqrt(max(0.0, z * z + 2 - 1 / n + 4 * p * (n * q - 1)))
        high = min(1.0, max(p, (2 * n * p + z * z + 1 + z * root) / denominator))
    return (low, high)


def wilson_cc(k: float, n: float, confidence: float = 0.95) -> tuple[float, float]:
    """The per-arm rate's displayed interval: Wilson with continuity correction, since the plain
    score interval covers only 87.5% at 4 samples at 50% (0/4 and 4/4 both miss)."""
    _check_counts(k, n)
    return wilson_corrected(k, n, z_critical(confidence))


@dataclass(frozen=True)
class Anova:
    """One-way ANOVA of binary outcomes grouped by case."""

    cases: int
    n: int
    msb: float
    msw: float
    m0: float

    @property
    def icc(self) -> float:
        denom = self.msb + (self.m0 - 1) * self.msw
        if self.cases < 2 or denom <= 0:
            return 0.0  # every outcome equal: nothing to attribute to cases
        # Equal mean squares are 0 exactly, not float noise (5.55e-17 once made a plan take minutes).
        if self.msb - self.msw <= ZERO_TOLERANCE * (self.msb + self.msw):
            return 0.0
        return min(1.0, (self.msb - self.msw) / denom)

    def icc_upper(self, level: float = ICC_UPPER_LEVEL) -> float:
        """Upper confidence limit of the ICC from the F distribution (Searle 1971)."""
        if self.msw <= 0:
            return 1.0  # no variation within cases: the data cannot bound the ICC
        f_upper = (self.msb / self.msw) / f_ppf(1 - level, self.cases - 1, self.n - self.cases)
        return min(1.0, max(0.0, (f_upper - 1) / (f_upper + self.m0 - 1)))


def anova(successes: Sequence[float], trials: Sequence[float]) -> Anova | None:
    """The ANOVA mean squares over cases with at least one trial; None when there is no
    within-case replication to separate the two (fewer than 2 cases, or one trial each)."""
    groups = [(k, m) for k, m in zip(successes, trials, strict=True) if m > 0]
    g = len(groups)
    total = sum(m for _, m in groups)
    if g < 2 or total <= g:
        return None
    successes = sum(k for k, _ in groups)
    # Between and within sums of squares from Σk²/m, each snapped to 0 when it is rounding.
    squares = sum(k * k / m for k, m in groups)
    between = squares - successes * successes / total
    within = successes - squares
    scale = max(1.0, squares, float(successes))
    between = 0.0 if between <= ZERO_TOLERANCE * scale else between
    within = 0.0 if within <= ZERO_TOLERANCE * scale else within
    msb = between / (g - 1)
    msw = within / (total - g)
    m0 = (total - sum(m * m for _, m in groups) / total) / (g - 1)
    return Anova(g, int(total), msb, msw, m0)


def icc_anova(successes: Sequence[float], trials: Sequence[float]) -> float:
    """One-way ANOVA ICC of binary outcomes grouped by case; floored at 0."""
    result = anova(successes, trials)
    return result.icc if result else 0.0


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


def clustered_rate(successes: Sequence[int], trials: Sequence[int], confidence: float = 0.95) -> Clustered:
    """Rate, its continuity-corrected Wilson interval, design effect and the coverage-keeping
    interval from per-case counts."""
    groups = [(k, m) for k, m in zip(successes, trials, strict=True) if m > 0]
    k = sum(s for s, _ in groups)
    n = sum(m for _, m in groups)
    shown = wilson_cc(k, n, confidence)
    g = len(groups)
    rate = k / n if n else None
    if g < 2:
        # One case: its own rate is all there is to estimate; nothing is clustered.
        return Clustered(k, n, rate, shown, 0.0, 1.0, float(n), shown)
    crit = t_critical(g - 1, confidence)
    result = anova([s for s, _ in groups], [m for _, m in groups])
    if result is None:
        # One repeat per case: no clustering, but few cases still call for t(G-1).
        return Clustered(k, n, rate, shown, 0.0, 1.0, float(n), wilson_crit(k, n, crit))
    icc = result.icc
    deff = 1 + (result.m0 - 1) * icc
    n_eff = n / deff
    n_cover = n / (1 + (result.m0 - 1) * result.icc_upper())
    adjusted = wilson_crit(k / n * n_cover, n_cover, crit)
    return Clustered(k, n, rate, shown, icc, deff, n_eff, adjusted)


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
