"""Intervals and distributions against published values (Wilson 1927, the clustering example)
and against scipy, never against values computed by the code under test."""

import math

import pytest
from brute_force import corrected_score_bounds
from hypothesis import given
from hypothesis import strategies as st
from scipy import special
from scipy import stats as sp

from promptprobe.stats import distributions, intervals

TOL = 1e-6

WILSON_95 = [
    (0, 5, 0.000000, 0.434482), (5, 5, 0.565518, 1.000000), (4, 5, 0.375535, 0.963776),
    (13, 15, 0.621180, 0.962639), (11, 15, 0.480496, 0.891025), (9, 18, 0.290310, 0.709690),
    (17, 18, 0.742427, 0.990125), (30, 30, 0.886487, 1.000000), (60, 60, 0.939828, 1.000000),
    (0, 30, 0.000000, 0.113513), (1, 30, 0.005909, 0.166704), (29, 30, 0.833296, 0.994091),
    (26, 30, 0.703187, 0.946903), (15, 30, 0.331541, 0.668459), (1, 1, 0.206549, 1.000000),
    (0, 1, 0.000000, 0.793451), (100, 120, 0.756547, 0.889440), (7, 10, 0.396778, 0.892209),
    (23, 30, 0.590717, 0.882076), (24, 30, 0.626943, 0.904949),
]


@pytest.mark.parametrize("k,n,lo,hi", WILSON_95)
def test_wilson_95(k, n, lo, hi):
    got = intervals.wilson(k, n)
    assert got[0] == pytest.approx(lo, abs=TOL) and got[1] == pytest.approx(hi, abs=TOL)


@pytest.mark.parametrize("confidence,lo,hi", [(0.90, 0.666425, 0.954849), (0.99, 0.534942, 0.973496)])
def test_wilson_other_levels(confidence, lo, hi):
    assert intervals.wilson(13, 15, confidence) == pytest.approx((lo, hi), abs=TOL)


def scipy_wilson(x: float, n: float, crit: float) -> tuple[float, float]:
    centre = (x + crit**2 / 2) / (n + crit**2)
    half = crit * math.sqrt(x * (n - x) / n + crit**2 / 4) / (n + crit**2)
    return centre - half, centre + half


def test_clustering_reference_example():
    result = intervals.clustered_rate([3, 3, 3, 3, 3, 3, 0, 3, 2, 1], [3] * 10)
    assert (result.k, result.n) == (24, 30)
    assert result.icc == pytest.approx(0.614286, abs=TOL)
    assert result.deff == pytest.approx(2.228571, abs=TOL)
    assert result.n_eff == pytest.approx(13.461538, abs=TOL)
    # The reference's Wilson 24/30 is the plain score interval; the one shown is continuity-corrected.
    assert intervals.wilson(24, 30) == pytest.approx((0.626943, 0.904949), abs=TOL)
    assert result.wilson == pytest.approx(corrected_score_bounds(24, 30), abs=1e-9)
    assert intervals.t_critical(9) == pytest.approx(2.262157, abs=TOL)
    # The reference's rule (Wilson at n_eff with t): the rule wilson_eff replaced.
    assert intervals.wilson_crit(0.8 * result.n_eff, result.n_eff, intervals.t_critical(9)) == pytest.approx(
        (0.491762, 0.942975), abs=TOL
    )
    # wilson_eff: Wilson at n / DEFF_U, DEFF_U from the ICC's 99% upper limit (Searle), t(9).
    msb, msw = 0.385185185185, 0.066666666667
    f_upper = (msb / msw) / sp.f.ppf(0.01, 9, 20)
    icc_upper = (f_upper - 1) / (f_upper + 3 - 1)
    n_cover = 30 / (1 + 2 * icc_upper)
    expected = scipy_wilson(0.8 * n_cover, n_cover, sp.t.ppf(0.975, 9))
    assert result.wilson_eff == pytest.approx(expected, abs=1e-6)


def test_all_equal_outcomes_count_cases_not_samples():
    # 10 cases all 3/3: nothing bounds the ICC, so the interval is as wide as 10 independent cases.
    result = intervals.clustered_rate([3] * 10, [3] * 10)
    assert result.deff == 1 and result.n_eff == 30  # the point estimate sees no clustering
    lo, hi = result.wilson_eff
    assert hi == 1.0 and lo == pytest.approx(10 / (10 + sp.t.ppf(0.975, 9) ** 2), abs=1e-9)


def test_one_repeat_per_case_uses_t_on_cases():
    result = intervals.clustered_rate([1] * 13 + [0] * 2, [1] * 15)
    assert result.deff == 1 and result.n_eff == 15
    assert result.wilson_eff == pytest.approx(scipy_wilson(13, 15, sp.t.ppf(0.975, 14)), abs=1e-9)
    one_case = intervals.clustered_rate([13], [15])
    assert one_case.wilson_eff == one_case.wilson


@pytest.mark.parametrize("q", [0.4, 0.1, 0.025, 0.005, 1e-6, 1e-12])
@pytest.mark.parametrize("df", [1, 2, 4, 9, 29, 300, 1e5])
def test_t_quantile_matches_scipy(q, df):
    assert distributions.t_isf(q, df) == pytest.approx(sp.t.isf(q, df), rel=1e-9)


@pytest.mark.parametrize("q", [0.001, 0.01, 0.5, 0.99])
@pytest.mark.parametrize("d1,d2", [(1, 1), (4, 20), (9, 20), (19, 40), (9, 1000)])
def test_f_quantile_matches_scipy(q, d1, d2):
    assert distributions.f_ppf(q, d1, d2) == pytest.approx(sp.f.ppf(q, d1, d2), rel=1e-9)


@given(st.floats(0.05, 50), st.floats(0.05, 50), st.floats(0, 1))
def test_incomplete_beta_matches_scipy(a, b, x):
    assert distributions.betainc(a, b, x) == pytest.approx(special.betainc(a, b, x), abs=1e-10)


def test_normal_quantile_for_tiny_alpha_does_not_overflow():
    assert distributions.normal_isf(1e-300 / 2) == pytest.approx(sp.norm.isf(1e-300 / 2), rel=1e-12)
    assert intervals.z_critical(0.95) == pytest.approx(1.959963984540054, abs=1e-12)


def test_no_spread_between_cases_is_an_icc_of_exactly_zero():
    # 11/12 as (3, 3, 3, 2) of 3: the mean squares are equal in exact arithmetic (MSB = MSW =
    # 1/12), so the ICC is 0, not the 5.55e-17 of float noise that once made a hint take minutes.
    analysis = intervals.anova([3, 3, 3, 2], [3, 3, 3, 3])
    assert analysis.msb == pytest.approx(1 / 12) and analysis.msw == pytest.approx(1 / 12)
    assert analysis.icc == 0.0
    assert intervals.icc_anova([3, 3, 3, 3], [3, 3, 3, 3]) == 0.0
    assert intervals.clustered_rate([3, 3, 3, 2], [3, 3, 3, 3]).deff == 1.0


@given(st.integers(0, 200), st.integers(1, 200))
def test_wilson_contains_the_estimate(k, n):
    k = min(k, n)
    lo, hi = intervals.wilson(k, n)
    assert 0 <= lo <= k / n <= hi <= 1


@given(st.lists(st.tuples(st.integers(0, 5), st.integers(1, 5)), min_size=2, max_size=12))
def test_adjusted_interval_is_never_narrower_than_at_n_eff(groups):
    successes = [min(k, m) for k, m in groups]
    trials = [m for _, m in groups]
    result = intervals.clustered_rate(successes, trials)
    lo, hi = result.wilson_eff
    assert 0 <= lo <= result.rate <= hi <= 1
    # The coverage-keeping interval is at least as wide as the point-ICC one it replaced.
    point = intervals.wilson_crit(result.rate * result.n_eff, result.n_eff, intervals.t_critical(len(groups) - 1))
    assert lo <= point[0] + 1e-12 and hi >= point[1] - 1e-12


def test_latency_percentiles_from_counted_values_are_numpys_linear_percentiles():
    """The report's median and p90 latency come from the count of each distinct value (no sort of a
    million latencies): the same numbers as numpy's linear interpolation between order statistics."""
    import random

    import numpy as np

    from promptprobe.totals import percentiles

    rng = random.Random(7)
    samples = [[5.0], [3.0, 1.0], [2.0, 2.0, 2.0], [float(rng.randint(20, 40)) for _ in range(1001)],
               [rng.random() * 900 for _ in range(250)], [float(v) for v in range(10, 0, -1)]]
    for values in samples:
        found = percentiles(values, (0.5, 0.9))
        assert found == pytest.approx([np.percentile(values, 50), np.percentile(values, 90)], abs=1e-9)
    assert percentiles([], (0.5, 0.9)) == [None, None]
