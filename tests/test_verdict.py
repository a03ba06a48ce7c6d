"""The verdict rules: the stratified exact test against brute-force enumeration and published
values, the case permutation test against enumeration, the sign test, Boschloo (scipy), and
the small samples that used to be called different."""

import itertools
import math

import numpy as np
import pytest
from brute_force import permutation_p
from scipy import stats as sp
from statsmodels.stats.contingency_tables import StratifiedTable

from promptprobe.stats.tests import boschloo_p, case_permutation, sign_test, stratified_exact
from promptprobe.stats.verdict import generalisation, paired_verdict, unpaired_verdict

# Reference p-values of the stratified exact conditional test, by brute-force enumeration.
REFERENCE = [
    ([(2, 3, 0, 3), (3, 3, 1, 3), (1, 3, 1, 3)], 0.16),
    ([(3, 3, 0, 3)] * 3, 0.00025),
    ([(2, 2, 0, 2)], 1 / 3),
    ([(3, 3, 2, 3)] * 10, 0.001953125),
]


@pytest.mark.parametrize("cases,p", REFERENCE)
def test_stratified_exact_reference_values(cases, p):
    assert stratified_exact(cases).p_value == pytest.approx(p, abs=1e-12)


def brute_force(cases):
    """Enumerate every table with the observed per-case totals; the exact conditional p."""
    options = []
    for a, n_a, b, n_b in cases:
        t = a + b
        values = range(max(0, t - n_b), min(t, n_a) + 1)
        # Hypergeometric weights by direct counting (no shared code with the DP).
        options.append([(x, math.comb(n_a, x) * math.comb(n_b, t - x) / math.comb(n_a + n_b, t)) for x in values])
    dist: dict[int, float] = {}
    for combo in itertools.product(*options):
        total = sum(x for x, _ in combo)
        dist[total] = dist.get(total, 0.0) + math.prod(w for _, w in combo)
    observed = dist[sum(a for a, _, _, _ in cases)]
    return sum(p for p in dist.values() if p <= observed * (1 + 1e-7))


def test_stratified_exact_matches_brute_force_on_every_3x2_probe():
    # Every outcome of 3 cases x 2 repeats per arm: 3^6 = 729 probes.
    per_case = [(a, 2, b, 2) for a in range(3) for b in range(3)]
    for cases in itertools.product(per_case, repeat=3):
        assert stratified_exact(list(cases)).p_value == pytest.approx(brute_force(cases), abs=1e-12)


def test_stratified_exact_matches_brute_force_with_unequal_repeats():
    cases = [(3, 5, 1, 3), (0, 4, 2, 2), (5, 5, 3, 6), (2, 3, 2, 3)]
    assert stratified_exact(cases).p_value == pytest.approx(brute_force(cases), abs=1e-12)


def test_stratified_exact_agrees_with_statsmodels_cmh_on_large_strata():
    rng = np.random.default_rng(7)
    cases = []
    for _ in range(10):
        rate = rng.uniform(0.3, 0.9)
        a = int(rng.binomial(200, min(1, rate + 0.03)))
        b = int(rng.binomial(200, rate))
        cases.append((a, 200, b, 200))
    tables = [np.array([[a, b], [n_a - a, n_b - b]]) for a, n_a, b, n_b in cases]
    asymptotic = StratifiedTable(tables).test_null_odds(correction=True).pvalue
    exact = stratified_exact(cases).p_value
    assert exact == pytest.approx(asymptotic, rel=0.05)


def test_stratified_null_variance_is_the_cmh_variance():
    # The DP's null distribution has the CMH variance: sum nA nB t (N - t) / (N^2 (N - 1)).
    cases = [(4, 7, 2, 5), (1, 3, 3, 4), (6, 6, 2, 9)]
    from promptprobe.stats.tests import _convolve, _hypergeometric_pmf

    dist, offset = np.ones(1), 0
    for a, n_a, b, n_b in cases:
        low, pmf = _hypergeometric_pmf(n_a, n_b, a + b)
        offset += low
        dist = _convolve(dist, pmf)
    values = np.arange(len(dist)) + offset
    mean = float((values * dist).sum())
    variance = float(((values - mean) ** 2 * dist).sum())
    expected = sum(n_a * n_b * (a + b) * (n_a + n_b - a - b) / ((n_a + n_b) ** 2 * (n_a + n_b - 1))
                   for a, n_a, b, n_b in cases)
    assert variance == pytest.approx(expected, rel=1e-12)


def test_tiny_paired_samples_are_indistinguishable():
    # Newcombe on the pooled counts called both of these A>B.
    assert paired_verdict([(2, 2)], [(0, 2)]).verdict == "indistinguishable"
    assert paired_verdict([(1, 1), (1, 1)], [(0, 1), (0, 1)]).verdict == "indistinguishable"
    four = paired_verdict([(4, 4)], [(1, 4)])
    assert four.verdict == "indistinguishable"
    assert four.p_value == pytest.approx(sp.hypergeom.sf(3, 8, 5, 4) * 2, abs=1e-12)  # 1 - P(A=4) twice: 1/7
    assert paired_verdict([(3, 3)] * 10, [(0, 3)] * 10).verdict == "A>B"
    assert paired_verdict([(0, 3)] * 10, [(3, 3)] * 10).verdict == "B>A"


@pytest.mark.parametrize("a,b", [
    ([1, 1, 2 / 3, 1, 0], [0, 1 / 3, 0, 2 / 3, 1 / 3]),
    ([1, 1, 1, 1, 1], [0, 0, 0, 0, 0]),
    ([0.5, 0.5, 0.5], [0.5, 0.5, 0.5, 0.5]),
    ([1, 0, 1, 0, 1, 1], [0, 0, 1, 0]),
])
def test_case_permutation_matches_enumeration(a, b):
    assert case_permutation(a, b) == pytest.approx(permutation_p(a, b), abs=1e-12)


def test_case_permutation_monte_carlo_is_close_and_valid():
    rng = np.random.default_rng(3)
    a, b = rng.uniform(0, 1, 10), rng.uniform(0.2, 1, 10)
    exact = case_permutation(a, b, exact_limit=10**6)  # C(20, 10) = 184,756: enumerated
    sampled = case_permutation(a, b, exact_limit=1)
    assert sampled == pytest.approx(exact, abs=0.015)  # 20,000 resamples
    assert case_permutation([1] * 12, [0] * 12, exact_limit=1) == 1 / 20_001  # never 0


def test_unpaired_rule_takes_the_case_as_its_unit():
    # 24/30 vs 15/30 pooled counts look very different; as ten cases a side they are not shown.
    a = [(k, 3) for k in [3, 3, 3, 3, 3, 3, 0, 3, 2, 1]]
    b = [(k, 3) for k in [2, 1, 2, 1, 2, 1, 2, 1, 2, 1]]
    verdict = unpaired_verdict(a, b)
    assert verdict.test.startswith("permutation")
    exact = case_permutation([k / 3 for k, _ in a], [k / 3 for k, _ in b], exact_limit=10**6)
    assert verdict.p_value == pytest.approx(exact, abs=0.01) and verdict.p_value > 0.05
    assert verdict.verdict == "indistinguishable"


@pytest.mark.parametrize("up,down,p", [(2, 0, 0.5), (6, 0, 0.03125), (9, 1, 0.021484375), (5, 5, 1.0), (0, 0, 1.0)])
def test_sign_test(up, down, p):
    assert sign_test(up, down) == pytest.approx(p, abs=1e-12)
    if up + down:
        assert sign_test(up, down) == pytest.approx(sp.binomtest(up, up + down, 0.5).pvalue, abs=1e-12)


def test_generalisation_never_has_zero_width_and_needs_five_moved_cases():
    two = generalisation([(0, 3), (0, 3)], [(3, 3), (3, 3)])
    assert two.up == 2 and two.p_value == 0.5 and not two.likely
    lo, hi = two.interval
    assert hi == 1.0 and lo < 1.0  # every case moved by +100: the interval still has width, clipped at 100
    same = generalisation([(1, 3)] * 10, [(3, 3)] * 10)
    lo, hi = same.interval
    assert hi - lo > 0.1 and -1 <= lo <= hi <= 1
    assert same.likely and same.p_value == pytest.approx(2 / 2**10)
    five = generalisation([(0, 3)] * 5, [(3, 3)] * 5)
    assert not five.likely  # 5 of 5 up: sign test p = 1/16 > 0.05


# Boschloo reference p-values, scipy.stats.boschloo_exact's own, on B - A arguments.
BOSCHLOO = [((13, 15), (11, 15), 0.421339), ((17, 18), (9, 18), 0.003987), ((30, 30), (26, 30), 0.069791),
            ((60, 60), (45, 60), 1.39228e-05), ((5, 5), (4, 5), 0.753906), ((28, 30), (20, 30), 0.013502)]


@pytest.mark.parametrize("a,b,p", BOSCHLOO)
def test_boschloo_reference(a, b, p):
    assert boschloo_p(*a, *b) == pytest.approx(p, rel=1e-3, abs=1e-6)


def test_boschloo_has_no_shortcut_for_equal_rates_and_is_skipped_when_too_large():
    assert boschloo_p(15, 30, 15, 30) == pytest.approx(sp.boschloo_exact([[15, 15], [15, 15]]).pvalue, abs=1e-9)
    assert boschloo_p(15, 30, 15, 30) == pytest.approx(0.939, abs=0.001)
    assert boschloo_p(500, 1000, 400, 1000) is None  # ~28 s and growing with n^2: not computed


def test_at_many_repeats_the_adjusted_interval_keeps_its_coverage_and_the_old_rule_did_not():
    """10 cases x 10 repeats, ICC 0.5, rate 0.9 (fixed seed): where the rule it replaced failed."""
    from promptprobe.stats.intervals import anova, clustered_rate, t_critical, wilson_crit
    from promptprobe.stats.simulation import single_counts

    counts = single_counts(np.random.default_rng(11), 0.9, 0.5, 400, 10, 10)
    new = old = 0
    for row in counts:
        successes = [int(k) for k in row]
        lo, hi = clustered_rate(successes, [10] * 10).wilson_eff
        new += lo <= 0.9 <= hi
        fit = anova(successes, [10] * 10)
        n_eff = 100 / (1 + 9 * fit.icc) if fit else 100
        lo, hi = wilson_crit(sum(successes) / 100 * n_eff, n_eff, t_critical(9))
        old += lo <= 0.9 <= hi
    assert new / 400 >= 0.95 and old / 400 < 0.88


def test_the_unpaired_rule_stays_near_alpha_at_many_repeats():
    """10 cases x 10 repeats, ICC 0.5, rate 0.9: the old rule called a difference 13.5% of the time."""
    from promptprobe.stats.simulation import unpaired_counts

    a, b = unpaired_counts(np.random.default_rng(12), 0.9, 0.9, 0.5, 400, 10, 10)
    claims = sum(
        unpaired_verdict([(int(k), 10) for k in x], [(int(k), 10) for k in y], resamples=999).verdict
        != "indistinguishable"
        for x, y in zip(a, b, strict=True)
    )
    assert claims / 400 <= 0.07
