"""Several metrics at once: the adjusted p-values a family of comparisons is decided on.

- Holm's step-down adjustment (promptprobe.stats.tests.holm) keeps the family-wise false-alarm
  rate at alpha under any dependence, and pays for it: the metrics of one run read the same
  outputs (header_present and header_absent are nearly complements), so m of them are far fewer
  than m independent chances of a false alarm.
- Westfall-Young step-down min-P (Westfall & Young 1993, algorithm 2.8) uses that dependence.
  Under "the two arms do not differ on any metric", the samples of one case are exchangeable
  between the arms, so which of a case's samples are labelled A is a uniformly random choice of
  nA of them; one sample gives every metric, so a relabelling moves all metrics at once and their
  correlation is kept. Each metric's p is its stratified exact test's (the verdict's own), and
  the adjusted p of the k-th smallest observed p is the probability, over relabellings, that the
  smallest p among the metrics not yet stepped past is at most it (then made monotone, and never
  below the metric's own p).

What makes it fast: a relabelling within a case leaves every metric's case margins (its totals
and each arm's count of samples it applies to) as they were, so a metric's p is a function of
its statistic alone (A's total of successes), tabulated once from the convolution of the cases'
hypergeometrics. All a relabelling needs of the samples is, per (case, arm), how many samples
showed each distinct vector of metric outcomes (the joint patterns the counts pass keeps); A's
share of each pattern is multivariate hypergeometric. A metric that does not apply to some
samples of a case (a user check returning None) would change its margins under relabelling, so
samples are relabelled only among those with the same set of metrics that apply to them (a
stratum): still exact, conditional on which samples each metric applies to.

The relabellings are enumerated exactly when there are at most EXACT_LIMIT distinct outcomes,
otherwise drawn: PERMUTATIONS seeded draws (numpy), p = (1 + hits) / (1 + draws), so the same run
always gives the same adjusted p-values. Relabelled within whole cases, each metric's p is exact
under the relabelling, so the exact min-P is never above Holm's (Bonferroni bounds it); the draws
can give no less than 1/(1 + draws), far above a p of 1e-10, so there Holm's value stands (the
adjusted p is the smaller of the two).
"""

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from .tests import RELATIVE_TOLERANCE, _convolve, _hypergeometric_pmf, holm

PERMUTATIONS = 10_000
EXACT_LIMIT = 20_000
SEED = 20261130
HOLM = "Holm"
WESTFALL_YOUNG = "Westfall-Young min-P"

Pattern = tuple[int | None, ...]  # one sample's outcome per metric: 1, 0, or None (does not apply)
CasePatterns = Mapping[Pattern, int]  # how many of a (case, arm)'s samples showed each pattern


@dataclass(frozen=True)
class Adjusted:
    p_adjusted: list[float | None]
    method: str  # HOLM or WESTFALL_YOUNG
    exact: bool = False  # Westfall-Young over every relabelling (not drawn)
    permutations: int = 0  # relabellings drawn (0 when exact or Holm)
    raw: list[float] | None = None  # Westfall-Young: each metric's own p, from the patterns
    reason: str | None = None  # why Holm, where Westfall-Young was asked for


def adjust(
    p_values: Sequence[float | None],
    patterns: "Sequence[tuple[CasePatterns, CasePatterns]] | None" = None,
    *,
    permutations: int = PERMUTATIONS,
    seed: int = SEED,
) -> Adjusted:
    """Adjusted p-values for a family: Westfall-Young min-P when the joint outcome patterns of every
    case of a paired comparison are given (one (A, B) pair of pattern counts per case, the
    patterns over the family's metrics in order), else Holm."""
    if patterns is None or any(p is None for p in p_values):
        return Adjusted(holm(p_values), HOLM)
    return westfall_young(patterns, len(p_values), permutations=permutations, seed=seed)


@dataclass(frozen=True)
class _Stratum:
    """Samples of one case to which the same metrics apply: their patterns, A's count of each."""

    patterns: np.ndarray  # (distinct patterns, metrics) of 0/1 (a metric that does not apply: 0)
    counts: np.ndarray  # how many samples showed each pattern, both arms
    observed: np.ndarray  # how many of them A had
    n_a: int

    @property
    def free(self) -> bool:
        return len(self.counts) > 1 and 0 < self.n_a < self.counts.sum()


def _strata(cases: Sequence[tuple[CasePatterns, CasePatterns]], metrics: int) -> list[_Stratum]:
    strata = []
    for in_a, in_b in cases:
        groups: dict[tuple[bool, ...], dict[Pattern, list[int]]] = {}
        for arm, side in enumerate((in_a, in_b)):
            for pattern, count in side.items():
                if len(pattern) != metrics:
                    raise ValueError(f"a pattern has {len(pattern)} outcomes for {metrics} metrics")
                if count:
                    group = groups.setdefault(tuple(v is None for v in pattern), {})
                    group.setdefault(pattern, [0, 0])[arm] += count
        for group in groups.values():
            keys = sorted(group, key=lambda p: tuple(-1 if v is None else v for v in p))
            strata.append(
                _Stratum(
                    np.array([[1 if v == 1 else 0 for v in p] for p in keys], dtype=np.int64).reshape(
                        -1, metrics
                    ),
                    np.array([sum(group[p]) for p in keys], dtype=np.int64),
                    np.array([group[p][0] for p in keys], dtype=np.int64),
                    sum(group[p][0] for p in keys),
                )
            )
    return strata


def _margins(
    cases: Sequence[tuple[CasePatterns, CasePatterns]], metric: int
) -> list[tuple[int, int, int, int]]:
    """Per case (a, nA, b, nB) of one metric, the samples it applies to only."""
    out = []
    for in_a, in_b in cases:
        cell = [0, 0, 0, 0]
        for arm, side in enumerate((in_a, in_b)):
            for pattern, count in side.items():
                if pattern[metric] is not None:
                    cell[2 * arm + 1] += count
                    cell[2 * arm] += count * (pattern[metric] == 1)
        if cell[1] or cell[3]:
            out.append(tuple(cell))
    return out


@dataclass(frozen=True)
class _Table:
    """A metric's two-sided stratified exact p for every value of A's total."""

    offset: int
    p: np.ndarray

    def __call__(self, totals: np.ndarray) -> np.ndarray:
        """The p of each total; 0 beyond the support kept (as the verdict's test says there)."""
        index = totals - self.offset
        inside = (index >= 0) & (index < len(self.p))
        return np.where(inside, self.p[np.clip(index, 0, len(self.p) - 1)], 0.0)


def p_table(cases: Sequence[tuple[int, int, int, int]]) -> tuple[_Table, int]:
    """(the p of every value of A's total, the observed total): the stratified exact test's null
    distribution, tabulated (each value's p sums the probabilities no larger than its own)."""
    offset, observed = 0, 0
    dist = np.ones(1)
    for a, n_a, b, n_b in cases:
        observed += a
        low, pmf = _hypergeometric_pmf(n_a, n_b, a + b)
        offset += low
        if len(pmf) > 1:
            dist = _convolve(dist, pmf)
    if len(dist) == 1:
        return _Table(offset, np.ones(1)), observed
    dist = np.clip(dist, 0.0, None)
    dist /= dist.sum()
    ordered = np.sort(dist)
    cumulative = np.cumsum(ordered)
    index = np.searchsorted(ordered, dist * (1 + RELATIVE_TOLERANCE), side="right") - 1
    return _Table(offset, np.minimum(1.0, cumulative[index])), observed


def _compositions(total: int, bounds: Sequence[int]) -> list[tuple[int, ...]]:
    """Every way to write `total` as a sum of len(bounds) counts, each within its bound."""
    if not bounds:
        return [()] if total == 0 else []
    room = sum(bounds[1:])
    return [
        (first, *rest)
        for first in range(max(0, total - room), min(bounds[0], total) + 1)
        for rest in _compositions(total - first, bounds[1:])
    ]


def _support(stratum: _Stratum) -> tuple[np.ndarray, np.ndarray]:
    """Every way A's samples can fall over the stratum's patterns, with its probability."""
    ways = _compositions(stratum.n_a, [int(c) for c in stratum.counts])
    total = math.comb(int(stratum.counts.sum()), stratum.n_a)
    weights = [
        math.prod(math.comb(int(c), k) for c, k in zip(stratum.counts, x, strict=True)) / total for x in ways
    ]
    return np.array(ways, dtype=np.int64), np.array(weights)


def _support_size(stratum: _Stratum, limit: int) -> int:
    """The number of ways (capped just above `limit`): the count of compositions within bounds."""
    ways = np.zeros(stratum.n_a + 1, dtype=object)
    ways[0] = 1
    for c in stratum.counts:
        nxt = np.zeros_like(ways)
        for k in range(min(int(c), stratum.n_a) + 1):
            nxt[k:] += ways[: len(ways) - k]
        ways = nxt
        if ways.sum() > limit:
            return limit + 1
    return int(ways[stratum.n_a])


def _exact_totals(strata: list[_Stratum], metrics: int, limit: int) -> tuple[np.ndarray, np.ndarray] | None:
    """Every relabelling's metric totals of A, with probabilities; None beyond `limit` outcomes."""
    size = 1
    for stratum in strata:
        size *= _support_size(stratum, limit)
        if size > limit:
            return None
    totals = np.zeros((1, metrics), dtype=np.int64)
    weights = np.ones(1)
    for stratum in strata:
        ways, probs = _support(stratum)
        contribution = ways @ stratum.patterns  # (ways, metrics)
        totals = (totals[:, None, :] + contribution[None, :, :]).reshape(-1, metrics)
        weights = (weights[:, None] * probs[None, :]).reshape(-1)
        # The same totals reached twice are one outcome: merge them, so the product stays small.
        unique, inverse = np.unique(totals, axis=0, return_inverse=True)
        weights = np.bincount(inverse.reshape(-1), weights=weights, minlength=len(unique))
        totals = unique
    return totals, weights


def _drawn_totals(strata: list[_Stratum], metrics: int, permutations: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    totals = np.zeros((permutations, metrics), dtype=np.int64)
    for stratum in strata:
        method = "count" if stratum.counts.sum() <= 200 else "marginals"
        draws = rng.multivariate_hypergeometric(stratum.counts, stratum.n_a, size=permutations, method=method)
        totals += draws @ stratum.patterns
    return totals


def westfall_young(
    cases: Sequence[tuple[CasePatterns, CasePatterns]],
    metrics: int,
    *,
    permutations: int = PERMUTATIONS,
    seed: int = SEED,
    exact_limit: int = EXACT_LIMIT,
) -> Adjusted:
    """Westfall-Young step-down min-P adjusted p-values (see the module's docstring), in the order
    of the metrics in the patterns."""
    strata = _strata(cases, metrics)
    tables, observed = [], np.zeros(metrics, dtype=np.int64)
    for j in range(metrics):
        table, total = p_table(_margins(cases, j))
        tables.append(table)
        observed[j] = total
    raw = np.array([float(tables[j](np.array([observed[j]]))[0]) for j in range(metrics)])
    fixed = np.zeros(metrics, dtype=np.int64)
    free = []
    for stratum in strata:
        if stratum.free:
            free.append(stratum)
        else:
            fixed += stratum.observed @ stratum.patterns
    exact = _exact_totals(free, metrics, exact_limit)
    if exact is not None:
        totals, weights = exact
        drawn = 0
    else:
        totals = _drawn_totals(free, metrics, permutations, seed)
        weights = np.ones(len(totals))
        drawn = permutations
    totals = totals + fixed
    p_null = np.column_stack([tables[j](totals[:, j]) for j in range(metrics)])  # (outcomes, metrics)
    order = np.argsort(raw, kind="stable")
    # The smallest p among the metrics from the k-th smallest observed on, for every outcome.
    successive = np.minimum.accumulate(p_null[:, order[::-1]], axis=1)[:, ::-1]
    limits = raw[order] * (1 + RELATIVE_TOLERANCE)
    hits = weights @ (successive <= limits[None, :])
    shares = hits / weights.sum() if drawn == 0 else (1 + hits) / (1 + drawn)
    adjusted_sorted = np.minimum(1.0, np.maximum.accumulate(np.maximum(shares, raw[order])))
    adjusted = np.empty(metrics)
    adjusted[order] = adjusted_sorted
    if _whole_cases(cases):
        # Relabelled within whole cases, each metric's p is exact under the relabelling, so the
        # min-P is never above Holm's (Bonferroni bounds it): only the draws' floor of
        # 1/(1 + draws) could make it so, for a p far below it. Holm's bounds it there.
        adjusted = np.minimum(adjusted, np.array(holm([float(x) for x in raw]), dtype=float))
    return Adjusted(
        [float(x) for x in adjusted],
        WESTFALL_YOUNG,
        exact=drawn == 0,
        permutations=drawn,
        raw=[float(x) for x in raw],
    )


def _whole_cases(cases: Sequence[tuple[CasePatterns, CasePatterns]]) -> bool:
    """Whether every case's samples all have the same metrics applying to them (one stratum)."""
    return all(
        len({tuple(v is None for v in pattern) for side in case for pattern, count in side.items() if count})
        <= 1
        for case in cases
    )


def raw_p_values(cases: Sequence[tuple[CasePatterns, CasePatterns]], metrics: int) -> list[float]:
    """Each metric's own stratified exact p from the patterns (what the verdicts use)."""
    out = []
    for j in range(metrics):
        table, total = p_table(_margins(cases, j))
        out.append(float(table(np.array([total]))[0]))
    return out
