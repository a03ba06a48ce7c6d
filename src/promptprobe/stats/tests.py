"""Hypothesis tests behind the verdicts.

- Paired (both arms asked the same questions): the stratified exact conditional test, the exact
  form of Cochran-Mantel-Haenszel. Given each case's total successes t_i, A's count in that
  case is hypergeometric(N = nA_i + nB_i, K = t_i, draws = nA_i) under "the arms do not differ
  on this question", whatever the question's own rate. The statistic is A's total; its null
  distribution is the convolution of the cases' hypergeometrics (dynamic programming over the
  count); the two-sided p sums every probability no larger than the observed one (relative
  tolerance 1e-7).
- Unpaired (different questions): a permutation test whose unit is the case. The statistic is
  the difference in mean per-case rates; whole cases are exchanged between the arms (exactly
  when there are at most 20,000 ways, otherwise by 20,000 seeded random permutations,
  p = (1 + hits) / (1 + resamples)).
- Generalisation: the exact sign test over the cases that moved.
- Boschloo's exact unconditional test on the pooled counts (scipy), shown, never deciding.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from .distributions import binomial_two_sided_half

# Probabilities this much smaller than the largest are zero in double precision anyway.
_LOG_FLOOR = -745.0
# Boschloo maximises over a nuisance parameter on every table of (n1+1)(n2+1): ~0.3 s at 200
# samples per arm, 28 s at 1,000. Above this it is skipped with a note.
BOSCHLOO_MAX_TABLES = 201 * 201
EXACT_PERMUTATIONS = 20_000
RESAMPLES = 20_000
RELATIVE_TOLERANCE = 1e-7


@dataclass(frozen=True)
class StratifiedResult:
    p_value: float
    observed: int  # A's total successes
    expected: float  # its expectation under the null

    @property
    def a_ahead(self) -> bool:
        return self.observed > self.expected


@lru_cache(maxsize=4096)
def _hypergeometric_pmf(n_a: int, n_b: int, total: int) -> tuple[int, "np.ndarray"]:  # noqa: F821
    """P(A = a) over the values of a that carry probability; returns (smallest a, pmf).

    Built from the ratio P(a+1)/P(a) = (nA-a)(t-a) / ((a+1)(nB-t+a+1)) in log space, then cut
    to the values within double precision's range of the largest (the rest are exactly 0).
    """
    import numpy as np

    low, high = max(0, total - n_b), min(total, n_a)
    if high == low:
        return low, np.ones(1)
    a = np.arange(low, high, dtype=float)
    steps = np.log((n_a - a) * (total - a)) - np.log((a + 1) * (n_b - total + a + 1))
    logs = np.concatenate([[0.0], np.cumsum(steps)])
    keep = np.nonzero(logs >= logs.max() + _LOG_FLOOR)[0]
    logs = logs[keep[0] : keep[-1] + 1]
    pmf = np.exp(logs - logs.max())
    pmf /= pmf.sum()
    pmf.flags.writeable = False  # cached: shared between calls
    return low + int(keep[0]), pmf


def stratified_exact(cases: Sequence[tuple[int, int, int, int]]) -> StratifiedResult:
    """Two-sided stratified exact conditional p from per-case (a, nA, b, nB)."""
    import numpy as np

    offset = 0
    observed = 0
    expected = 0.0
    dist = np.ones(1)
    for a, n_a, b, n_b in cases:
        if not (0 <= a <= n_a and 0 <= b <= n_b):
            raise ValueError(f"counts must satisfy 0 <= k <= n, got {a}/{n_a} and {b}/{n_b}")
        observed += a
        total = a + b
        if n_a + n_b:
            expected += total * n_a / (n_a + n_b)
        low, pmf = _hypergeometric_pmf(n_a, n_b, total)
        offset += low
        if len(pmf) > 1:
            dist = _convolve(dist, pmf)
    index = observed - offset
    if len(dist) == 1:
        return StratifiedResult(1.0, observed, expected)
    if not 0 <= index < len(dist):
        return StratifiedResult(0.0, observed, expected)  # beyond double precision's range
    dist = np.clip(dist, 0.0, None)
    dist /= dist.sum()
    p_obs = dist[index]
    p = float(dist[dist <= p_obs * (1 + RELATIVE_TOLERANCE)].sum())
    return StratifiedResult(min(1.0, p), observed, expected)


def _convolve(left: "np.ndarray", right: "np.ndarray") -> "np.ndarray":  # noqa: F821
    import numpy as np

    if len(left) * len(right) <= 4_000_000:
        return np.convolve(left, right)
    size = len(left) + len(right) - 1
    fft_size = 1 << (size - 1).bit_length()
    out = np.fft.irfft(np.fft.rfft(left, fft_size) * np.fft.rfft(right, fft_size), fft_size)[:size]
    return out


@lru_cache(maxsize=64)
def _side_a_subsets(
    n_a: int, n_b: int, exact_limit: int, resamples: int, seed: int
) -> tuple[bool, "np.ndarray"]:  # noqa: F821
    """Index sets of the cases put on side A: all of them, or `resamples` seeded random ones."""
    import numpy as np

    ways = math.comb(n_a + n_b, n_a)
    if ways <= exact_limit:
        from itertools import combinations

        chosen = np.array(list(combinations(range(n_a + n_b), n_a)), dtype=np.int64).reshape(ways, n_a)
        return True, chosen
    rng = np.random.default_rng(seed)
    chosen = rng.random((resamples, n_a + n_b)).argsort(axis=1)[:, :n_a]
    return False, chosen


def case_permutation(
    rates_a: Sequence[float],
    rates_b: Sequence[float],
    *,
    seed: int = 20261130,
    exact_limit: int = EXACT_PERMUTATIONS,
    resamples: int = RESAMPLES,
) -> float:
    """Two-sided p of mean(B) - mean(A) with whole cases exchanged between the arms."""
    import numpy as np

    a = np.asarray(rates_a, dtype=float)
    b = np.asarray(rates_b, dtype=float)
    if len(a) == 0 or len(b) == 0:
        raise ValueError("each side needs at least one case")
    pooled = np.concatenate([a, b])
    total = pooled.sum()
    n_a, n_b = len(a), len(b)
    observed = abs(b.mean() - a.mean())
    exact, chosen = _side_a_subsets(n_a, n_b, exact_limit, resamples, seed)
    # The statistic depends only on the sum of the cases put on side A.
    sums = pooled[chosen].sum(axis=1)
    hits = int(np.sum(np.abs((total - sums) / n_b - sums / n_a) >= observed - 1e-12))
    return hits / len(chosen) if exact else (1 + hits) / (1 + len(chosen))


def sign_test(up: int, down: int) -> float:
    """Exact two-sided sign test: `up` cases moved one way, `down` the other."""
    return binomial_two_sided_half(up, up + down)


def boschloo_affordable(n1: int, n2: int) -> bool:
    return (n1 + 1) * (n2 + 1) <= BOSCHLOO_MAX_TABLES


def boschloo_p(k1: int, n1: int, k2: int, n2: int) -> float | None:
    """Two-sided Boschloo exact p-value (scipy); the table's columns are the two arms.

    None when there is nothing to test (an empty arm) or the table is too large to afford.
    """
    if n1 == 0 or n2 == 0 or not boschloo_affordable(n1, n2):
        return None
    from scipy import stats

    table = [[k1, k2], [n1 - k1, n2 - k2]]
    p = float(stats.boschloo_exact(table, alternative="two-sided").pvalue)
    if math.isnan(p):
        # scipy has no answer when a row is empty: every outcome is the same, nothing differs.
        return 1.0 if k1 + k2 in (0, n1 + n2) else None
    return min(1.0, p)
