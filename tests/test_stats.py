"""Statistics against published values (../shared/reference/statistics.md), never self-computed."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from promptprobe import stats

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
    got = stats.wilson(k, n)
    assert got[0] == pytest.approx(lo, abs=TOL) and got[1] == pytest.approx(hi, abs=TOL)


@pytest.mark.parametrize("confidence,lo,hi", [(0.90, 0.666425, 0.954849), (0.99, 0.534942, 0.973496)])
def test_wilson_other_levels(confidence, lo, hi):
    assert stats.wilson(13, 15, confidence) == pytest.approx((lo, hi), abs=TOL)


def test_clustering_reference_example():
    result = stats.clustered_rate([3, 3, 3, 3, 3, 3, 0, 3, 2, 1], [3] * 10)
    assert (result.k, result.n) == (24, 30)
    assert result.icc == pytest.approx(0.614286, abs=TOL)
    assert result.deff == pytest.approx(2.228571, abs=TOL)
    assert result.n_eff == pytest.approx(13.461538, abs=TOL)
    assert result.wilson == pytest.approx((0.626943, 0.904949), abs=TOL)
    assert result.wilson_eff == pytest.approx((0.491762, 0.942975), abs=TOL)
    assert stats.t_critical(9) == pytest.approx(2.262157, abs=TOL)
    # With z instead of t at the same effective n (the reference's intermediate value).
    assert stats.wilson_crit(0.8 * result.n_eff, result.n_eff, stats.z_critical()) == pytest.approx(
        (0.533502, 0.933291), abs=TOL
    )


def test_no_clustering_with_one_case_or_one_repeat():
    one_case = stats.clustered_rate([13], [15])
    assert one_case.deff == 1 and one_case.wilson_eff == one_case.wilson
    one_repeat = stats.clustered_rate([1] * 13 + [0] * 2, [1] * 15)
    assert one_repeat.deff == 1
    assert one_repeat.wilson_eff == pytest.approx((0.621180, 0.962639), abs=TOL)


def test_icc_zero_when_all_equal_and_floored():
    assert stats.icc_anova([3] * 10, [3] * 10) == 0
    assert stats.icc_anova([0] * 10, [3] * 10) == 0
    # Every case exactly 2 of 4: less between-case variation than chance gives, so floored.
    assert stats.icc_anova([2] * 5, [4] * 5) == 0


@given(n=st.integers(1, 500), data=st.data(), confidence=st.sampled_from([0.8, 0.9, 0.95, 0.99]))
def test_wilson_properties(n, data, confidence):
    k = data.draw(st.integers(0, n))
    lo, hi = stats.wilson(k, n, confidence)
    assert 0 <= lo <= k / n <= hi <= 1


@given(numerator=st.integers(0, 10), denominator=st.integers(1, 10), scale=st.integers(1, 50))
def test_wilson_narrows_as_n_grows(numerator, denominator, scale):
    numerator = min(numerator, denominator)
    small = stats.wilson(numerator * scale, denominator * scale)
    large = stats.wilson(numerator * scale * 2, denominator * scale * 2)
    assert large[1] - large[0] < small[1] - small[0]


@given(st.lists(st.tuples(st.integers(0, 5), st.integers(1, 5)), min_size=1, max_size=15))
def test_cluster_interval_properties(groups):
    successes = [min(k, m) for k, m in groups]
    trials = [m for _, m in groups]
    result = stats.clustered_rate(successes, trials)
    assert result.deff >= 1
    assert 0 <= result.wilson_eff[0] <= result.rate <= result.wilson_eff[1] <= 1
    # The adjusted interval is never narrower than the naive one.
    assert result.wilson_eff[0] <= result.wilson[0] + 1e-12
    assert result.wilson_eff[1] >= result.wilson[1] - 1e-12


def test_bad_counts():
    with pytest.raises(ValueError):
        stats.wilson(6, 5)
