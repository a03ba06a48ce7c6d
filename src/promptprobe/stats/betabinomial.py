"""The unpaired test when the arms asked their cases different numbers of times.

Exchanging whole cases between the arms (the case permutation test) is exact only when every case
was asked equally often: a case asked once has a rate of 0 or 1, one asked 20 times has a rate
near its question's, so the two are not exchangeable as they stand (8 questions asked once, all
passed, against 8 asked 20 times at 16/20 each gave p = 0.000155 by permutation; Fisher's exact
test on the pooled 8/8 vs 128/160 gives 0.36). This test models what the permutation cannot:

- Model under the null: every case's rate is drawn from one beta distribution (mean mu, intra-class
  correlation rho), whichever arm asked it, so a case asked n times has a beta-binomial count
  BB(n, mu, rho); rho = 0 is the binomial, rho = 1 a case that always or never succeeds.
- Statistic: the difference of the mean per-case rates, D = mean_B(k/n) - mean_A(k/n), the effect
  shown. Its exact null distribution given (mu, rho) is the convolution of the cases'
  beta-binomials, each arm's mean on its own integer lattice (the lcm of its repeats); the
  two-sided p is equal-tailed, 2·min(P(D* <= d), P(D* >= d)).
- Nuisance: (mu, rho) fitted under the null by maximum likelihood (the profile over a grid of rho;
  mu on a grid refined twice, the log-likelihood being concave in mu). rho is taken at the upper
  end of its 99% profile-likelihood interval (deviance 6.635): a point estimate rests on the few
  cases asked more than once and is near 0 by chance when they happen to agree, which makes the
  many-repeat arm look precise. And the p is the largest over mu at its estimate and at the ends
  of its 50% profile-likelihood interval (rho fixed; deviance 0.455): with few cases an extreme
  arm's tail sits on the edge of alpha as the estimate of mu moves.
- Shifted nulls, for the interval: mu_B = mu_A + delta with one rho, fitted the same way; p(delta)
  is the same tail rule. At delta = 0 it is the test.

The log-gamma function is computed here in numpy (Stirling's series after a shift by 8, 1e-13
relative), so that no scipy import is paid for by a comparison.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from .tests import _convolve

UPPER_LEVEL = 0.99
# The 99% quantile of the chi-square distribution on one degree of freedom (scipy.stats.chi2.ppf).
DEVIANCE_LIMIT = 6.6348966010212145
RHO_GRID = np.concatenate([[0.0], np.geomspace(1e-4, 0.999, 31)])
COARSE, FINE = 48, 16  # grid points for mu: a coarse grid, then twice a finer one around its best
EDGE = 1e-9  # mu this close to 0 or 1 is 0 or 1
LATTICE_LIMIT = 200_000  # an arm's mean is computed on at most this many lattice points
TEST = "beta-binomial test over cases, with the case permutation (unequal repeats)"

Counts = tuple[int, int]  # (successes, trials)

_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def lgamma(x: np.ndarray) -> np.ndarray:
    """log Γ(x) for x > 0, elementwise: Stirling's series at x + 8, shifted back by the log of
    x(x+1)...(x+7)."""
    x = np.asarray(x, dtype=float)
    shifted = x + 8.0
    inverse = 1.0 / shifted
    square = inverse * inverse
    series = inverse * (1 / 12 - square * (1 / 360 - square * (1 / 1260 - square / 1680)))
    value = (shifted - 0.5) * np.log(shifted) - shifted + _HALF_LOG_2PI + series
    # One log of the product (no overflow below x = 1e38, far beyond any count here).
    product = x * (x + 1) * (x + 2) * (x + 3) * (x + 4) * (x + 5) * (x + 6) * (x + 7)
    return value - np.log(product)


@dataclass(frozen=True)
class _Design:
    """Distinct (arm, k, n) with how many cases have them; each arm's lattice."""

    arm: np.ndarray  # 0 for A, 1 for B
    k: np.ndarray
    n: np.ndarray
    weight: np.ndarray  # how many cases have this (arm, k, n)
    cases: tuple[int, int]  # cases per arm
    lattice: tuple[int, int]  # lattice points per trial of each arm (the lcm of its repeats, capped)
    observed: int  # D on the integer scale


def _lcm(values: Sequence[int]) -> int:
    result = 1
    for value in values:
        result = result * value // math.gcd(result, value)
    return result


def _position(k: int, n: int, lattice: int) -> int:
    """Where k/n sits on an arm's lattice (exact when the lattice is a multiple of n)."""
    return (k * lattice) // n if lattice % n == 0 else round(k * lattice / n)


def _design(a: Sequence[Counts], b: Sequence[Counts]) -> _Design:
    rows: dict[tuple[int, int, int], int] = {}
    lattices = []
    totals = []
    for arm, side in enumerate((a, b)):
        kept = [(k, n) for k, n in side if n > 0]
        lattice = _lcm(sorted({n for _, n in kept}))
        if lattice * len(kept) > LATTICE_LIMIT:
            lattice = max(1, LATTICE_LIMIT // len(kept))  # rounded: the rates are placed to 1/lattice
        lattices.append(lattice)
        totals.append(sum(_position(k, n, lattice) for k, n in kept))
        for k, n in kept:
            rows[(arm, k, n)] = rows.get((arm, k, n), 0) + 1
    keys = sorted(rows)
    cases = (
        sum(w for (arm, _, _), w in rows.items() if arm == 0),
        sum(w for (arm, _, _), w in rows.items() if arm == 1),
    )
    scale_a, scale_b = cases[0] * lattices[0], cases[1] * lattices[1]
    return _Design(
        np.array([key[0] for key in keys]),
        np.array([key[1] for key in keys], dtype=float),
        np.array([key[2] for key in keys], dtype=float),
        np.array([rows[key] for key in keys], dtype=float),
        cases,
        (lattices[0], lattices[1]),
        totals[1] * scale_a - totals[0] * scale_b,
    )


class _Likelihood:
    """The beta-binomial log-likelihood (without the binomial coefficients) of a design at a
    grid of rho, as a function of mu_a under B - A = delta."""

    def __init__(self, design: _Design, delta: float, rho: np.ndarray) -> None:
        self.design, self.delta = design, delta
        self.positive = rho > 0
        # rho = 0 rows are the binomial; their strength is a placeholder that is never used.
        self.strength = (1 / np.where(self.positive, rho, 0.5) - 1)[:, None, None]
        self.fixed = lgamma(self.strength) - lgamma(design.n[None, None, :] + self.strength)

    def __call__(self, mu_a: np.ndarray) -> np.ndarray:
        """mu_a of shape (rho, points): the log-likelihood at each."""
        design = self.design
        mu = np.where(design.arm == 0, mu_a[..., None], mu_a[..., None] + self.delta)
        mu = np.clip(mu, EDGE, 1 - EDGE)
        k, n = design.k, design.n
        a, b = mu * self.strength, (1 - mu) * self.strength
        values = lgamma(np.stack([k + a, a, n - k + b, b]))  # one call: numpy's overhead dominates
        terms = values[0] - values[1] + values[2] - values[3] + self.fixed
        if not self.positive.all():
            binomial = k * np.log(mu) + (n - k) * np.log1p(-mu)
            terms = np.where(self.positive[:, None, None], terms, binomial)
        return terms @ design.weight


def _fit_mu(design: _Design, delta: float, rho: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each rho: the mu_a maximising the likelihood, which is concave in mu_a: a grid, a finer
    grid around its best point, and the vertex of the parabola through the best three."""
    likelihood = _Likelihood(design, delta, rho)
    low, high = max(0.0, -delta) + EDGE, min(1.0, 1.0 - delta) - EDGE
    rows = np.arange(len(rho))
    grid = np.broadcast_to(np.linspace(low, high, COARSE), (len(rho), COARSE))
    for points in (FINE, FINE):
        values = likelihood(grid)
        best = values.argmax(axis=1)
        step = grid[:, 1] - grid[:, 0]
        centre = grid[rows, best]
        left = np.maximum(low, centre - step)
        right = np.minimum(high, centre + step)
        grid = left[:, None] + (right - left)[:, None] * np.linspace(0, 1, points)[None, :]
    values = likelihood(grid)
    best = np.clip(values.argmax(axis=1), 1, grid.shape[1] - 2)
    x0, x1, x2 = grid[rows, best - 1], grid[rows, best], grid[rows, best + 1]
    f0, f1, f2 = values[rows, best - 1], values[rows, best], values[rows, best + 1]
    curvature = f0 - 2 * f1 + f2
    shift = np.where(curvature < 0, (f0 - f2) / (2 * np.where(curvature < 0, curvature, -1.0)), 0.0)
    mu = np.clip(x1 + shift * (x1 - x0), np.minimum(x0, x2), np.maximum(x0, x2))
    return mu, likelihood(mu[:, None])[:, 0]


def fit_null(design: _Design, delta: float, limit: float | None = None) -> tuple[float, float]:
    """(mu_a, rho) of the null B - A = delta: rho at the upper end of its 99% profile-likelihood
    interval (between grid points, where the deviance crosses 6.635 along log rho), mu_a its
    maximum-likelihood value there (`limit`: another deviance, for the benchmark's comparisons)."""
    limit = DEVIANCE_LIMIT if limit is None else limit
    mus, profile = _fit_mu(design, delta, RHO_GRID)
    deviance = 2 * (profile.max() - profile)
    inside = np.nonzero(deviance <= limit)[0]
    last = int(inside.max())
    if last == len(RHO_GRID) - 1:
        return float(mus[last]), float(RHO_GRID[last])
    # Interpolate the crossing between the last grid point inside and the next one.
    d0, d1 = deviance[last], deviance[last + 1]
    share = (limit - d0) / (d1 - d0) if d1 > d0 else 0.0
    lo, hi = RHO_GRID[last], RHO_GRID[last + 1]
    rho = (
        lo + share * (hi - lo) if lo == 0 else math.exp(math.log(lo) + share * (math.log(hi) - math.log(lo)))
    )
    mu, _ = _fit_mu(design, delta, np.array([rho]))
    return float(mu[0]), float(rho)


def _mu_range(design: _Design, delta: float, mu_a: float, rho: float) -> list[float]:
    """mu_a and the ends of its profile-likelihood interval at MU_DEVIANCE (rho fixed), found by
    bisection from the maximum (the log-likelihood is concave in mu_a)."""
    if MU_DEVIANCE <= 0:
        return [mu_a]
    likelihood = _Likelihood(design, delta, np.array([rho]))

    def drop(mu: float) -> float:
        return 2 * (top - float(likelihood(np.array([[mu]]))[0, 0]))

    top = float(likelihood(np.array([[mu_a]]))[0, 0])
    ends = []
    for edge in (max(0.0, -delta) + EDGE, min(1.0, 1.0 - delta) - EDGE):
        inside, outside = mu_a, edge
        if drop(edge) <= MU_DEVIANCE:
            ends.append(edge)
            continue
        for _ in range(30):
            middle = (inside + outside) / 2
            inside, outside = (middle, outside) if drop(middle) <= MU_DEVIANCE else (inside, middle)
        ends.append(inside)
    return [mu_a, *ends]


MU_DEVIANCE = 0.4549364231195724  # the chi-square's median on one degree of freedom


@lru_cache(maxsize=64)  # a handful per p-value; kept small, a pmf may hold thousands of counts
def _case_pmf(n: int, mu: float, rho: float) -> np.ndarray:
    """P(k) for k = 0..n of BB(n, mu, rho)."""
    k = np.arange(n + 1, dtype=float)
    if mu <= EDGE or mu >= 1 - EDGE:
        pmf = np.zeros(n + 1)
        pmf[0 if mu <= EDGE else n] = 1.0
        return pmf
    log_choose = lgamma(np.array([n + 1.0]))[0] - lgamma(k + 1) - lgamma(n - k + 1)
    if rho <= 0:
        logs = log_choose + k * math.log(mu) + (n - k) * math.log1p(-mu)
    else:
        s = 1 / rho - 1
        a, b = mu * s, (1 - mu) * s
        logs = log_choose + lgamma(k + a) + lgamma(n - k + b) - lgamma(np.array([n + s]))[0]
        logs += lgamma(np.array([s]))[0] - lgamma(np.array([a]))[0] - lgamma(np.array([b]))[0]
    pmf = np.exp(logs - logs.max())
    pmf.flags.writeable = False
    return pmf / pmf.sum()


def _power(pmf: np.ndarray, times: int) -> np.ndarray:
    """The distribution of the sum of `times` independent draws from `pmf` (repeated squaring)."""
    result = np.ones(1)
    base = pmf
    while times:
        if times & 1:
            result = _convolve(result, base)
        times >>= 1
        if times:
            base = _convolve(base, base)
    return np.clip(result, 0.0, None)


def _arm_distribution(design: _Design, arm: int, mu: float, rho: float) -> np.ndarray:
    """The distribution of the arm's sum of lattice positions, sum over its cases of k·lattice/n."""
    lattice = design.lattice[arm]
    total = np.ones(1)
    for n in sorted({int(n) for n, side in zip(design.n, design.arm, strict=True) if side == arm}):
        count = int(
            sum(
                w
                for w, m, side in zip(design.weight, design.n, design.arm, strict=True)
                if side == arm and m == n
            )
        )
        pmf = _case_pmf(n, round(mu, 15), round(rho, 15))
        placed = np.zeros(lattice + 1)
        np.add.at(placed, [_position(k, n, lattice) for k in range(n + 1)], pmf)
        total = _convolve(total, _power(placed, count))
    total = np.clip(total, 0.0, None)
    return total / total.sum()


def _tail_p(design: _Design, mu_a: float, mu_b: float, rho: float) -> float:
    """2·min(P(D* <= d), P(D* >= d)) under BB(mu_a, rho) for A's cases and BB(mu_b, rho) for B's."""
    dist_a = _arm_distribution(design, 0, mu_a, rho)
    dist_b = _arm_distribution(design, 1, mu_b, rho)
    scale_a = design.cases[0] * design.lattice[0]  # what X_B is multiplied by
    scale_b = design.cases[1] * design.lattice[1]  # what X_A is multiplied by
    x_a = np.arange(len(dist_a), dtype=np.int64)
    cdf_b = np.concatenate([[0.0], np.cumsum(dist_b)])  # cdf_b[j + 1] = P(X_B <= j)
    sf_b = np.concatenate([np.cumsum(dist_b[::-1])[::-1], [0.0]])  # sf_b[j] = P(X_B >= j)
    # X_B·scale_a - X_A·scale_b <= d  <=>  X_B <= floor((d + X_A·scale_b) / scale_a)
    reach = design.observed + x_a * scale_b
    below = np.clip(np.floor_divide(reach, scale_a), -1, len(dist_b) - 1)
    above = np.clip(-np.floor_divide(-reach, scale_a), 0, len(dist_b))
    lower = float(dist_a @ cdf_b[below + 1])
    upper = float(dist_a @ sf_b[above])
    return min(1.0, 2 * min(lower, upper))


class BetaBinomialTest:
    """The test of B - A = delta for two arms' per-case counts; p_at(0) is the verdict's p."""

    def __init__(self, a: Sequence[Counts], b: Sequence[Counts]) -> None:
        self.design = _design(a, b)
        if not all(self.design.cases):
            raise ValueError("each side needs at least one case with a trial")
        rates_a = [k / n for k, n in a if n]
        rates_b = [k / n for k, n in b if n]
        self.estimate = sum(rates_b) / len(rates_b) - sum(rates_a) / len(rates_a)
        self.constant = bool((self.design.k == 0).all() or (self.design.k == self.design.n).all())
        self.cache: dict[tuple[float, float | None], float] = {}

    def p_at(self, delta: float, rho: float | None = None) -> float:
        """p of B - A = delta; `rho` given: with the ICC known instead of fitted (the benchmark's
        ceiling)."""
        key = (delta, rho)
        if key not in self.cache:
            if delta == 0 and self.constant:
                self.cache[key] = 1.0  # every outcome the same: nothing to test
            elif abs(delta) >= 1:
                self.cache[key] = self._edge(delta)
            else:
                if rho is None:
                    mu_a, rho_used = fit_null(self.design, delta)
                else:
                    mu, _ = _fit_mu(self.design, delta, np.array([rho]))
                    mu_a, rho_used = float(mu[0]), rho
                self.cache[key] = max(
                    _tail_p(self.design, mu, min(1.0, max(0.0, mu + delta)), rho_used)
                    for mu in _mu_range(self.design, delta, mu_a, rho_used)
                )
        return self.cache[key]

    def _edge(self, delta: float) -> float:
        """B - A = ±1: every A case at 0 and every B case at 1 (or the other way); only that fits."""
        want_a, want_b = (0, 1) if delta > 0 else (1, 0)
        fits = all(
            (k == 0 if (want_a if side == 0 else want_b) == 0 else k == n)
            for k, n, side in zip(self.design.k, self.design.n, self.design.arm, strict=True)
        )
        return 1.0 if fits else 0.0

    @property
    def p_value(self) -> float:
        return self.p_at(0.0)
