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
- Boschloo's exact unconditional test on the pooled counts, shown, never deciding: Fisher's
  one-sided p orders the tables, the p-value is the largest probability of a table at least as
  extreme over the common rate (the nuisance parameter), maximised on a grid and refined; the
  two-sided p is twice the smaller one-sided one (scipy's definition, computed here in numpy so
  that a comparison does not pay a second for importing scipy.stats).
- Every p-value decides through `decides`: p <= alpha·(1 + 1e-9), so that an exact p of 1/20
  decides at alpha 0.05 whichever way floating point rounded it.
- Several metrics at once: Holm's step-down adjustment (`holm`).
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

from .distributions import binomial_two_sided_half

# Probabilities this much smaller than the largest are zero in double precision anyway.
_LOG_FLOOR = -745.0
# Boschloo orders every table of (n1+1)(n2+1): ~0.08 s at 200 samples per arm, 0.6 s at 1,000.
# Above this it is skipped with a note (it never decides).
BOSCHLOO_MAX_TABLES = 201 * 201
EXACT_PERMUTATIONS = 20_000
RESAMPLES = 20_000
RELATIVE_TOLERANCE = 1e-7
# A p-value within this relative distance of alpha decides: exact arithmetic must not hang on rounding.
DECISION_TOLERANCE = 1e-9


def decision_limit(alpha: float) -> float:
    """The largest p-value that decides at `alpha` (arrays of p-values compare against it)."""
    return alpha * (1 + DECISION_TOLERANCE)


def decides(p_value: float | None, alpha: float) -> bool:
    """Whether a p-value is at or below alpha (p <= alpha·(1 + 1e-9))."""
    return p_value is not None and p_value <= decision_limit(alpha)


def holm(p_values: Sequence[float | None]) -> list[float | None]:
    """Holm's step-down adjusted p-values (None stays None and is not counted in the family).

    Sorted ascending, the i-th of m gets max over j <= i of min(1, (m - j + 1)·p_(j)); rejecting
    where the adjusted p <= alpha keeps the family-wise error rate at most alpha.
    """
    present = sorted((p, i) for i, p in enumerate(p_values) if p is not None)
    m = len(present)
    adjusted: list[float | None] = [None] * len(p_values)
    running = 0.0
    for rank, (p, index) in enumerate(present):
        running = max(running, min(1.0, (m - rank) * p))
        adjusted[index] = running
    return adjusted


def direction_sign(cases: Sequence[tuple[int, int, int, int]]) -> int:
    """The exact sign of Σ (b·nA - a·nB)/N over cases: +1 when B is ahead within cases.

    It is both the Mantel-Haenszel risk difference's numerator and (negated) A's total minus
    its null expectation, so the verdict's direction and the effect's sign are one number.
    """
    total = Fraction(0)
    for a, n_a, b, n_b in cases:
        if n_a and n_b:
            total += Fraction(b * n_a - a * n_b, n_a + n_b)
    return (total > 0) - (total < 0)


@dataclass(frozen=True)
class StratifiedResult:
    p_value: float
    observed: int  # A's total successes
    expected: float  # its expectation under the null
    sign: int = 0  # +1: B ahead within cases, -1: A ahead, 0: neither (exact)

    @property
    def a_ahead(self) -> bool:
        return self.sign < 0


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
    sign = direction_sign(cases)
    if len(dist) == 1:
        return StratifiedResult(1.0, observed, expected, sign)
    if not 0 <= index < len(dist):
        return StratifiedResult(0.0, observed, expected, sign)  # beyond double precision's range
    dist = np.clip(dist, 0.0, None)
    dist /= dist.sum()
    p_obs = dist[index]
    p = float(dist[dist <= p_obs * (1 + RELATIVE_TOLERANCE)].sum())
    return StratifiedResult(min(1.0, p), observed, expected, sign)


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


class CasePermutation:
    """The permutation test over cases, and the same test of "B - A = delta" (B's rates shifted by
    -delta, Lehmann's shift model) for its interval. Every exchange's statistic is linear in delta:
    the cases put on side A sum to s0 - delta·c, c the number of B's cases among them."""

    def __init__(
        self,
        rates_a: Sequence[float],
        rates_b: Sequence[float],
        *,
        seed: int = 20261130,
        exact_limit: int = EXACT_PERMUTATIONS,
        resamples: int = RESAMPLES,
    ) -> None:
        import numpy as np

        a = np.asarray(rates_a, dtype=float)
        b = np.asarray(rates_b, dtype=float)
        if len(a) == 0 or len(b) == 0:
            raise ValueError("each side needs at least one case")
        self.a, self.b = a, b
        self.exact, chosen = _side_a_subsets(len(a), len(b), exact_limit, resamples, seed)
        pooled = np.concatenate([a, b])
        self.sums = pooled[chosen].sum(axis=1)
        self.from_b = (chosen >= len(a)).sum(axis=1)
        self.estimate = float(b.mean() - a.mean())
        self.cache: dict[float, float] = {}

    def p_at(self, delta: float = 0.0) -> float:
        """Two-sided p of mean(B - delta) - mean(A) with whole cases exchanged."""
        import numpy as np

        if delta not in self.cache:
            n_a, n_b = len(self.a), len(self.b)
            total = self.a.sum() + self.b.sum() - delta * n_b
            observed = abs(self.b.mean() - delta - self.a.mean())
            sums = self.sums - delta * self.from_b
            hits = int(np.sum(np.abs((total - sums) / n_b - sums / n_a) >= observed - 1e-12))
            n = len(sums)
            self.cache[delta] = hits / n if self.exact else (1 + hits) / (1 + n)
        return self.cache[delta]


def case_permutation(
    rates_a: Sequence[float],
    rates_b: Sequence[float],
    *,
    seed: int = 20261130,
    exact_limit: int = EXACT_PERMUTATIONS,
    resamples: int = RESAMPLES,
) -> float:
    """Two-sided p of mean(B) - mean(A) with whole cases exchanged between the arms."""
    test = CasePermutation(rates_a, rates_b, seed=seed, exact_limit=exact_limit, resamples=resamples)
    return test.p_at(0.0)


def sign_test(up: int, down: int) -> float:
    """Exact two-sided sign test: `up` cases moved one way, `down` the other."""
    return binomial_two_sided_half(up, up + down)


def boschloo_affordable(n1: int, n2: int) -> bool:
    return (n1 + 1) * (n2 + 1) <= BOSCHLOO_MAX_TABLES


def _log_factorials(n: int) -> "np.ndarray":  # noqa: F821
    import numpy as np

    return np.concatenate([[0.0], np.cumsum(np.log(np.arange(1, n + 1, dtype=float)))])


def _one_sided_boschloo(k1: int, n1: int, k2: int, n2: int, log_fact: "np.ndarray") -> float:  # noqa: F821
    """P(X1 <= k1)-ordered Boschloo p: the largest null probability of the tables whose Fisher
    one-sided p (lower tail of arm 1's successes given the total) is at most the observed one."""
    import numpy as np

    total = n1 + n2
    x1 = np.arange(n1 + 1)
    x2 = np.arange(n2 + 1)
    log_c1 = log_fact[n1] - log_fact[x1] - log_fact[n1 - x1]
    log_c2 = log_fact[n2] - log_fact[x2] - log_fact[n2 - x2]
    log_cn = log_fact[total] - log_fact[np.arange(total + 1)] - log_fact[total - np.arange(total + 1)]
    # Fisher's lower-tail p of every table, per total successes t (an anti-diagonal of the grid).
    fisher = np.empty((n1 + 1, n2 + 1))
    for t in range(total + 1):
        low, high = max(0, t - n2), min(t, n1)
        xs = np.arange(low, high + 1)
        pmf = np.exp(log_c1[xs] + log_c2[t - xs] - log_cn[t])
        fisher[xs, t - xs] = np.minimum(1.0, np.cumsum(pmf))
    observed = fisher[k1, k2]
    extreme = fisher <= observed * (1 + 1e-13)  # scipy's guard against rounding between equal tables
    # Null probability of the extreme set at common rate pi: sum over s of w_s pi^s (1-pi)^(N-s).
    sums = (x1[:, None] + x2[None, :])[extreme]
    logs = (log_c1[:, None] + log_c2[None, :])[extreme]
    log_w = np.full(total + 1, -np.inf)
    np.logaddexp.at(log_w, sums, logs)
    present = np.isfinite(log_w)
    s = np.arange(total + 1)[present]
    log_w = log_w[present]

    def log_p(pi: "np.ndarray") -> "np.ndarray":  # noqa: F821
        pi = np.clip(pi, 1e-300, 1 - 1e-16)
        terms = (
            log_w[None, :] + s[None, :] * np.log(pi)[:, None] + (total - s)[None, :] * np.log1p(-pi)[:, None]
        )
        top = terms.max(axis=1)
        return top + np.log(np.exp(terms - top[:, None]).sum(axis=1))

    # The maximum over the common rate: a grid, then two finer grids around the best point.
    grid = np.linspace(0.0, 1.0, 1001)
    step = grid[1]
    for _ in range(3):
        values = log_p(grid)
        centre = grid[int(np.argmax(values))]
        grid = np.clip(np.linspace(centre - step, centre + step, 201), 0.0, 1.0)
        step = grid[1] - grid[0]
    best = float(max(values.max(), log_p(grid).max()))
    return min(1.0, math.exp(best))


def boschloo_p(k1: int, n1: int, k2: int, n2: int) -> float | None:
    """Two-sided Boschloo exact p-value; arm 1 is k1 of n1, arm 2 k2 of n2.

    None when there is nothing to test (an empty arm) or the table is too large to afford.
    """
    if n1 == 0 or n2 == 0 or not boschloo_affordable(n1, n2):
        return None
    if k1 + k2 in (0, n1 + n2):
        return 1.0  # every outcome is the same: nothing differs
    log_fact = _log_factorials(n1 + n2)
    less = _one_sided_boschloo(k1, n1, k2, n2, log_fact)
    greater = _one_sided_boschloo(k2, n2, k1, n1, log_fact)  # the same ordering with the arms swapped
    return min(1.0, 2 * min(less, greater))
