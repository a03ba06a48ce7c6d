"""Intervals for means of per-case rates that carry each case's own binomial noise.

- One arm's mean per-case rate m = mean(k_i/n_i), as an estimate of the mean of the drawn cases'
  true rates: given those rates its variance is Σ p_i(1-p_i)/n_i / G², at most m(1-m)/n_e with the
  effective count n_e = G² / Σ 1/n_i when every case was asked equally often (concavity: cases
  that differ have less binomial noise than cases all at their mean). So the Wilson score interval
  at m·n_e successes of n_e, widened by the ratio of the cases' own noise to that bound where it
  is larger (unequal repeats put more noise on the cases asked least), rates smoothed as
  (k+1/2)/(n+1); with the continuity correction (Newcombe 1998, method 4), since the plain
  score interval dips to 85% at 4 samples. It is never a single point and uses what the rates
  say: 0 of 20 cases is [0, 20%], not [0, 100%].
- The difference of two arms' means (the unpaired effect, B - A of the drawn cases): Newcombe's
  (1998) hybrid score interval from the two arms' intervals above (his method 11). Its exact
  coverage with two binomial arms of 2 to 48 samples each, at rates 0, 2, 5, 10, 20, ..., 98,
  100%, is at least 91.8% (16 samples a side at 2% against 98%; the plain score interval there:
  85.1%).
- The mean per-case difference over the population of questions (the generalisation line, paired):
  a Student t interval on G - 1 degrees of freedom over the per-case differences
  d_i = b_i/nB_i - a_i/nA_i, whose spread already holds both the questions' spread and their
  binomial noise; its variance is never below the noise alone (rates smoothed as (k+1)/(n+2)),
  so separated data (every case 0/3 against 3/3) do not give an interval of no width.
All intervals are for B - A in [-1, 1] and at level 1 - alpha.
"""

import math
from collections.abc import Sequence

from .distributions import normal_isf, t_isf
from .intervals import newcombe_from_limits, wilson_corrected

Counts = tuple[int, int]  # (successes, trials)
TINY_TAIL = 1e-300
Bounds = tuple[float, float]


def _smoothed(k: int, n: int, prior: float) -> float:
    return (k + prior) / (n + 2 * prior)


def mean_rate_interval(
    counts: Sequence[Counts], alpha: float = 0.05, weights: Sequence[float] | None = None
) -> tuple[float, Bounds]:
    """(mean per-case rate, its 1 - alpha interval for the drawn cases' mean true rate); `weights`
    per case (1 each unless given) weight both the mean and its target."""
    weights = [1.0] * len(counts) if weights is None else list(weights)
    groups = [(k, n, w) for (k, n), w in zip(counts, weights, strict=True) if n and w > 0]
    if not groups:
        return 0.0, (0.0, 1.0)
    total = sum(w for _, _, w in groups)
    mean = sum(w * k / n for k, n, w in groups) / total
    spread = sum(w * w / n for _, n, w in groups)
    n_eff = total * total / spread
    smoothed = [(_smoothed(k, n, 0.5), n, w) for k, n, w in groups]
    centre = sum(w * p for p, _, w in smoothed) / total
    noise = sum(w * w * p * (1 - p) / n for p, n, w in smoothed)
    n_eff /= max(1.0, noise / (centre * (1 - centre) * spread))
    low, high = wilson_corrected(mean * n_eff, n_eff, normal_isf(alpha / 2))
    return mean, (low, high)


def unpaired_difference(
    a: Sequence[Counts], b: Sequence[Counts], alpha: float = 0.05, weights: Sequence[float] | None = None
) -> Bounds:
    """Newcombe's hybrid interval for B - A, the difference of the drawn cases' (weighted) mean rates."""
    mean_a, (low_a, high_a) = mean_rate_interval(a, alpha, weights)
    mean_b, (low_b, high_b) = mean_rate_interval(b, alpha, weights)
    return newcombe_from_limits(mean_b, low_b, high_b, mean_a, low_a, high_a)


def population_difference(a: Sequence[Counts], b: Sequence[Counts], alpha: float = 0.05) -> Bounds | None:
    """A t interval for the mean B - A over questions like these (paired cases); None without a case."""
    pairs = [(ka, na, kb, nb) for (ka, na), (kb, nb) in zip(a, b, strict=True) if na and nb]
    g = len(pairs)
    if not g:
        return None
    diffs = [kb / nb - ka / na for ka, na, kb, nb in pairs]
    mean = sum(diffs) / g
    spread = sum((d - mean) ** 2 for d in diffs) / max(1, g - 1)
    noise = (
        sum(
            _smoothed(ka, na, 1.0) * (1 - _smoothed(ka, na, 1.0)) / na
            + _smoothed(kb, nb, 1.0) * (1 - _smoothed(kb, nb, 1.0)) / nb
            for ka, na, kb, nb in pairs
        )
        / g
    )
    if g < 2:
        return (-1.0, 1.0)  # one question says nothing of how others would move
    # A tail of 0 (alpha 5e-324 halved) is the smallest a float quantile search can take.
    half = t_isf(max(alpha / 2, TINY_TAIL), g - 1) * math.sqrt(max(spread, noise) / g)
    return (max(-1.0, mean - half), min(1.0, mean + half))
