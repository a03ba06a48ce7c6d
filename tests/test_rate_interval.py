"""The per-arm rate's displayed interval (the "95% Wilson" column, `wilson` in JSON): Wilson's score
interval with continuity correction, checked against published values and root finding, and its
exact coverage of the drawn questions' rate pinned by enumerating every outcome."""

import math

import pytest
from brute_force import corrected_score_bounds
from hypothesis import given
from hypothesis import strategies as st
from scipy.stats import norm

from promptprobe.comparison.rates import metric_object
from promptprobe.stats.intervals import clustered_rate, wilson, wilson_cc

# Published 95% continuity-corrected score intervals: Newcombe (1998, Table II, method 4) and
# Fagerland, Lydersen & Laake (2017, Ligarden et al.'s 13/16), to the 4 decimals printed.
PUBLISHED = [
    ((15, 148), (0.0598, 0.1644)),
    ((0, 20), (0.0, 0.2005)),
    ((1, 29), (0.0018, 0.1963)),
    ((13, 16), (0.5369, 0.9503)),
]


@pytest.mark.parametrize("counts,expected", PUBLISHED)
def test_matches_published_values(counts, expected):
    assert wilson_cc(*counts) == pytest.approx(expected, abs=5e-5)


def test_matches_r_prop_test():
    # R: prop.test(0, 10)$conf.int (continuity correction on by default).
    assert wilson_cc(0, 10)[1] == pytest.approx(0.3445372, abs=1e-7)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 7, 12, 30, 120])
def test_solves_its_defining_equation(n):
    for k in range(n + 1):
        assert wilson_cc(k, n) == pytest.approx(corrected_score_bounds(k, n), abs=1e-9)


def test_other_levels_solve_their_equation():
    for confidence in (0.90, 0.99):
        z = norm.isf((1 - confidence) / 2)
        assert wilson_cc(13, 15, confidence) == pytest.approx(corrected_score_bounds(13, 15, z), abs=1e-9)


def binomial(k, n, p):
    return math.comb(n, k) * p**k * (1 - p) ** (n - k)


def poisson_binomial(rates):
    """The distribution of the number of successes over independent trials at these rates."""
    chances = [1.0]
    for p in rates:
        chances = [
            (chances[k] if k < len(chances) else 0.0) * (1 - p) + (chances[k - 1] * p if k else 0.0)
            for k in range(len(chances) + 1)
        ]
    return chances


def coverage(interval, rates):
    """Exact chance that the interval over all the arm's samples holds their mean rate."""
    n, target = len(rates), sum(rates) / len(rates)
    return sum(
        chance
        for k, chance in enumerate(poisson_binomial(rates))
        if interval(k, n)[0] - 1e-12 <= target <= interval(k, n)[1] + 1e-12
    )


@pytest.mark.parametrize("rate", [0.05, 0.5, 0.95])
def test_covers_the_rate_at_least_92_percent_at_every_small_n(rate):
    for n in range(1, 13):
        assert coverage(wilson_cc, [rate] * n) >= 0.92, n
    # The plain score interval it replaced does not: 4 samples at 50% (0/4 and 4/4 both miss).
    assert coverage(wilson, [0.5] * 4) == pytest.approx(0.875, abs=1e-12)


@pytest.mark.parametrize(
    "question_rates,repeats",
    [
        ([0.05, 0.95], [1, 1]),
        ([0.05, 0.95, 0.5, 0.25], [3, 3, 3, 3]),
        ([1.0, 0.0, 0.9, 0.1], [1, 12, 3, 1]),
        ([0.02, 0.1, 0.3, 0.6, 0.98, 0.5], [1, 3, 12, 1, 3, 12]),
    ],
)
def test_covers_the_drawn_questions_rate_over_the_samples(question_rates, repeats):
    """Questions at different rates (the sweep's target: their trial-weighted mean)."""
    rates = [p for p, m in zip(question_rates, repeats, strict=True) for _ in range(m)]
    assert coverage(wilson_cc, rates) >= 0.92


def test_the_report_shows_it():
    shown = metric_object({"c1": [3, 4, 0], "c2": [0, 4, 1]}, higher_is_better=True)
    assert shown["wilson"] == pytest.approx(corrected_score_bounds(3, 8), abs=1e-9)
    assert clustered_rate([3, 0], [4, 4]).wilson == pytest.approx(corrected_score_bounds(3, 8), abs=1e-9)
    # Wider than the plain score interval on both sides.
    plain = wilson(3, 8)
    assert shown["wilson"][0] < plain[0] and shown["wilson"][1] > plain[1]


@given(st.integers(0, 300), st.integers(1, 300))
def test_holds_the_estimate_and_the_plain_interval(k, n):
    k = min(k, n)
    low, high = wilson_cc(k, n)
    plain = wilson(k, n)
    assert 0 <= low <= plain[0] <= k / n <= plain[1] <= high <= 1
