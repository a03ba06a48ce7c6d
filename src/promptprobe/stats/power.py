"""Power of the tests the verdicts actually use: exact where it can be enumerated, otherwise
simulated with the test itself (vectorised over many simulated probes at once).

- `fisher_power`: the exact conditional test on one question asked n times per arm (the
  stratified exact test with one case: Fisher's exact test, two-sided by summing the
  probabilities no larger than the observed one), by enumerating every table: exact.
- `stratified_p_batch`: the stratified exact test's p for many probes of equal repeats at once.
  The null distribution of A's total is the convolution of the cases' hypergeometrics, done as a
  product of their Fourier transforms; it is centred on its mean and computed on a window of
  ±13 null standard deviations (what lies beyond carries less than 1e-35 and only ever adds to a
  p-value that is already far below any alpha). Tests check it against `stratified_exact`.
- `permutation_p_batch`: the case permutation test's p for many probes at once (the same
  subsets of cases as the verdict's test, one matrix product).
- `log_mixture_e`: the Beta mixture e-value the sequential rule used before its exact boundary
  (the benchmark compares with it).
"""

import math
from functools import lru_cache
from typing import Any

from .tests import EXACT_PERMUTATIONS, RELATIVE_TOLERANCE, RESAMPLES, _side_a_subsets

# Null standard deviations kept on each side of the mean of A's total (more for a tiny alpha:
# what lies beyond must be far below alpha, by the sub-Gaussian tail exp(-k²/4)).
WINDOW_SDS = 13
FISHER_WINDOW_SDS = 11


def window_sds(alpha: float, floor: float) -> float:
    return max(floor, math.sqrt(4 * (math.log(1e6) - math.log(alpha))))  # 1e6 / alpha overflows below 1e-303


@lru_cache(maxsize=8)
def _log_factorials(n: int) -> Any:
    import numpy as np

    return np.concatenate([[0.0], np.cumsum(np.log(np.arange(1, n + 1, dtype=float)))])


def _log_binomial_pmf(n: int, p: float, x: Any) -> Any:
    import numpy as np

    lf = _log_factorials(n)
    with np.errstate(divide="ignore"):
        log_p = np.log(p) if p > 0 else -np.inf
        log_q = np.log1p(-p) if p < 1 else -np.inf
    terms = lf[n] - lf[x] - lf[n - x]
    # 0·log(0) is 0: the edge rates put all their mass on one count.
    with np.errstate(invalid="ignore"):
        success = np.where(x > 0, x * log_p, 0.0)
        failure = np.where(n - x > 0, (n - x) * log_q, 0.0)
    return terms + success + failure


def _row_searchsorted_p(pmf: Any, valid: Any) -> Any:
    """Per row of null probabilities (invalid cells ignored): each cell's two-sided p, the sum of
    the row's probabilities no larger than its own (relative tolerance 1e-7).

    One searchsorted serves every row: each row's log-probabilities are shifted into a band of
    their own, so that rows never mix; in log space a probability of 1e-300 keeps its place
    (absolute error ~1e-8 in the log, far inside the 1e-7 tolerance)."""
    import numpy as np

    rows = pmf.shape[0]
    with np.errstate(divide="ignore"):
        logs = np.maximum(np.log(np.where(valid, pmf, 0.0)), -LOG_SPAN)
    ordered_pmf = np.sort(np.where(valid, pmf, np.inf), axis=1)
    cumulative = np.cumsum(np.where(np.isfinite(ordered_pmf), ordered_pmf, 0.0), axis=1)
    band = 3 * LOG_SPAN * np.arange(rows)[:, None]
    ordered_logs = np.sort(np.where(valid, logs, LOG_SPAN), axis=1) + band  # invalid cells sort last
    keys = np.where(valid, logs + math.log1p(RELATIVE_TOLERANCE), -2 * LOG_SPAN) + band
    index = np.searchsorted(ordered_logs.ravel(), keys.ravel(), side="right").reshape(keys.shape)
    index -= (np.arange(rows) * pmf.shape[1])[:, None] + 1
    p_values = np.take_along_axis(cumulative, np.clip(index, 0, None), axis=1)
    return np.where(valid & (index >= 0), p_values, 1.0)


# Log-probabilities below -LOG_SPAN are 0 in double precision anyway.
LOG_SPAN = 1000.0


def fisher_power(n: int, p1: float, p2: float, alpha: float) -> float:
    """Exact power of the two-sided exact conditional test with n samples per arm.

    Only counts that carry probability are enumerated (the rest add less than 1e-18), and of
    the null distribution given each total only ±11 SDs around its mean: a table beyond that is
    rejected (its p is below 1e-25)."""
    import numpy as np

    from .tests import DECISION_TOLERANCE

    x = np.arange(n + 1)
    prob_a = np.exp(_log_binomial_pmf(n, p1, x))
    prob_b = np.exp(_log_binomial_pmf(n, p2, x))
    kept_a = np.nonzero(prob_a > 1e-20)[0]
    kept_b = np.nonzero(prob_b > 1e-20)[0]
    a_low, a_high, b_low, b_high = kept_a[0], kept_a[-1], kept_b[0], kept_b[-1]
    # Probability of each total: the convolution of the two count distributions.
    by_total = np.convolve(prob_a[a_low : a_high + 1], prob_b[b_low : b_high + 1])
    totals = np.arange(a_low + b_low, a_high + b_high + 1)
    lf = _log_factorials(2 * n)
    log_c = lf[n] - lf[x] - lf[n - x]
    reach = math.ceil(window_sds(alpha, FISHER_WINDOW_SDS) * math.sqrt(n / 8 * 2 * n / max(1, 2 * n - 1))) + 5
    offsets = np.arange(-reach, reach + 1)
    x1 = (totals // 2)[:, None] + offsets[None, :]
    in_support = (x1 >= np.maximum(0, totals - n)[:, None]) & (x1 <= np.minimum(totals, n)[:, None])
    x1c = np.clip(x1, 0, n)
    x2c = np.clip(totals[:, None] - x1c, 0, n)
    log_null = log_c[x1c] + log_c[x2c] - (lf[2 * n] - lf[totals] - lf[2 * n - totals])[:, None]
    null = np.where(in_support, np.exp(log_null), 0.0)
    p_values = _row_searchsorted_p(null, in_support)
    weight = np.where(in_support, prob_a[x1c] * prob_b[x2c], 0.0)
    rejected = (weight * (p_values <= alpha * (1 + DECISION_TOLERANCE))).sum()
    outside = np.clip(by_total - weight.sum(axis=1), 0.0, None).sum()  # beyond the window: rejected
    return float(min(1.0, rejected + outside))


def fisher_smallest_p(n: int) -> float:
    """The smallest two-sided p the test can give with n per arm: n/n against 0/n."""
    return min(1.0, 2 / math.comb(2 * n, n))


def stratified_smallest_p(cases: int, repeats: int) -> float:
    """The smallest paired p with `repeats` per arm in each of `cases` cases: every case m/m vs 0/m."""
    return min(1.0, 2 / math.comb(2 * repeats, repeats) ** cases)


def permutation_smallest_p(cases_a: int, cases_b: int) -> float:
    ways = math.comb(cases_a + cases_b, cases_a)
    return min(1.0, 2 / ways) if ways <= EXACT_PERMUTATIONS else 1 / (RESAMPLES + 1)


@lru_cache(maxsize=64)
def _case_transforms(repeats: int, size: int) -> tuple[Any, Any]:
    """For every case total t in 0..2m: the Fourier transform (length `size`, circular) of A's
    hypergeometric count minus floor(t/2), and that shift."""
    import numpy as np

    m = repeats
    lf = _log_factorials(2 * m)
    t = np.arange(2 * m + 1)[:, None]
    a = np.arange(m + 1)[None, :]
    valid = (a >= t - m) & (a <= t)
    ac = np.clip(a, 0, m)
    bc = np.clip(t - a, 0, m)
    log_pmf = lf[m] - lf[ac] - lf[m - ac] + lf[m] - lf[bc] - lf[m - bc] - (lf[2 * m] - lf[t] - lf[2 * m - t])
    pmf = np.where(valid, np.exp(log_pmf), 0.0)
    shifts = np.arange(2 * m + 1) // 2
    table = np.zeros((2 * m + 1, size))
    rows = np.broadcast_to(t, pmf.shape)
    columns = (a - shifts[:, None]) % size
    if size > m:
        table[rows, columns] = pmf  # every count of a row lands in its own cell
    else:
        np.add.at(table, (rows, columns), pmf)  # a window narrower than a case wraps its far tail
    transforms = np.fft.rfft(table, axis=1)
    # log of an exact zero: a huge negative number, so that a count of 0 contributes nothing finite.
    magnitude = np.abs(transforms)
    logs = np.log(np.where(magnitude < 1e-300, 1e-300, transforms))
    return logs, shifts


def stratified_p_batch(
    a: Any, b: Any, repeats: int, chunk: int = 256, alpha: float = 0.05
) -> tuple[Any, Any]:
    """(p-values, signs of B - A) of the stratified exact test for probes a, b of shape
    (probes, cases), every case asked `repeats` times per arm; p-values are exact to ~1e-12 and
    those of totals beyond the window (far below `alpha`) are reported as 0."""
    import numpy as np

    a = np.asarray(a, dtype=np.int64)
    b = np.asarray(b, dtype=np.int64)
    probes, cases = a.shape
    m = repeats
    full = cases * m + 1
    sd = math.sqrt(cases * m / 8 * (2 * m / max(1, 2 * m - 1)))
    windowed = 2 * math.ceil(window_sds(alpha, WINDOW_SDS) * sd) + 8
    size = 1 << max(5, (min(full, windowed) - 1).bit_length())
    logs, shifts = _case_transforms(m, size)
    totals = a + b
    observed = a.sum(axis=1) - shifts[totals].sum(axis=1)
    # The null mean of A's total minus the shifts: where the window is centred.
    centre = (totals / 2 - shifts[totals]).sum(axis=1)
    p_values = np.empty(probes)
    for start in range(0, probes, chunk):
        rows = slice(start, min(probes, start + chunk))
        t = totals[rows]
        if cases <= 2 * m + 1:
            log_phi = logs[t].sum(axis=1)
        else:
            counts = np.zeros((t.shape[0], 2 * m + 1))
            np.add.at(counts, (np.arange(t.shape[0])[:, None], t), 1.0)
            log_phi = counts @ logs
        dist = np.fft.irfft(np.exp(log_phi), size, axis=1)
        dist = np.clip(dist, 0.0, None)
        dist /= dist.sum(axis=1, keepdims=True)
        obs = observed[rows]
        # Without a window nothing wraps; with one, a total more than its null SDs out is outside it.
        near = np.abs(obs - centre[rows]) < size / 2 - 2 if size < full else np.ones(len(obs), dtype=bool)
        p_obs = dist[np.arange(len(obs)), obs % size]
        at_most = dist <= (p_obs * (1 + RELATIVE_TOLERANCE))[:, None]
        p = (dist * at_most).sum(axis=1)
        # Beyond the window the observed total is more than 13 null SDs out: p is ~0.
        p_values[rows] = np.where(near, np.minimum(1.0, p), 0.0)
    signs = np.sign(b.sum(axis=1) - a.sum(axis=1))  # equal repeats: the MH numerator's sign
    # No discordance at all: nothing to test.
    p_values[(totals % (2 * m) == 0).all(axis=1)] = 1.0
    return p_values, signs


def permutation_p_batch(rates_a: Any, rates_b: Any, seed: int = 20261130, resamples: int = RESAMPLES) -> Any:
    """Two-sided p of the case permutation test for probes of per-case rates (probes x cases)."""
    import numpy as np

    rates_a = np.asarray(rates_a, dtype=float)
    rates_b = np.asarray(rates_b, dtype=float)
    g_a, g_b = rates_a.shape[1], rates_b.shape[1]
    # Fewer resamples than the verdict's (a quick hint) also means sampling where it would enumerate.
    exact, chosen = _side_a_subsets(g_a, g_b, min(EXACT_PERMUTATIONS, resamples), resamples, seed)
    indicator = np.zeros((len(chosen), g_a + g_b))
    np.put_along_axis(indicator, chosen, 1.0, axis=1)
    pooled = np.concatenate([rates_a, rates_b], axis=1)
    total = pooled.sum(axis=1)
    observed = np.abs(rates_b.mean(axis=1) - rates_a.mean(axis=1))
    scale = 1 / g_a + 1 / g_b
    p_values = np.empty(len(pooled))
    chunk = max(1, 4_000_000 // len(chosen))
    for start in range(0, len(pooled), chunk):
        rows = slice(start, start + chunk)
        sums = pooled[rows] @ indicator.T
        # |mean_B - mean_A| = |T/g_b - s·(1/g_a + 1/g_b)| for side-A sum s: at least the observed
        # one (less 1e-12 for rounding) exactly when s is at most `low` or at least `high`.
        centre, reach = total[rows] / g_b, observed[rows] - 1e-12
        low, high = (centre - reach) / scale, (centre + reach) / scale
        hits = np.count_nonzero((sums <= low[:, None]) | (sums >= high[:, None]), axis=1)
        p_values[rows] = hits / len(chosen) if exact else (1 + hits) / (1 + len(chosen))
    return p_values


@lru_cache(maxsize=16)
def _log_gamma_table(size: int, a: float) -> tuple[Any, Any]:
    """lgamma(k + a) and lgamma(k + 2a) for k in 0..size (pure Python, once per size)."""
    import numpy as np

    return (
        np.array([math.lgamma(k + a) for k in range(size + 1)]),
        np.array([math.lgamma(k + 2 * a) for k in range(size + 1)]),
    )


def log_mixture_e(b_higher: Any, discordant: Any, a: float) -> Any:
    """log of the Beta(a, a) mixture e-value, vectorised over integer arrays."""
    import numpy as np

    size = int(np.max(discordant)) if np.size(discordant) else 0
    lg_a, lg_2a = _log_gamma_table(size, a)
    log_beta_aa = 2 * math.lgamma(a) - math.lgamma(2 * a)
    return (
        discordant * math.log(2)
        + lg_a[b_higher]
        + lg_a[discordant - b_higher]
        - lg_2a[discordant]
        - log_beta_aa
    )
