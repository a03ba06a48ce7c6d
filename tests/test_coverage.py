"""The intervals beside verdicts, pinned on small designs by enumerating every outcome: their exact
coverage of the stated target, their agreement with the verdict, never a single point; and where
the test knows nothing of the size (0/20 against 0/20) an interval from what the rates say,
checked against Newcombe's (1998) published values."""

import itertools
import math

import numpy as np
import pytest
from brute_force import corrected_score_bounds

from promptprobe.stats.case_means import population_difference, unpaired_difference
from promptprobe.stats.confidence_sequence import confidence_sequence
from promptprobe.stats.sequential import look
from promptprobe.stats.sequential_effect import boundary_test, sequential_effect
from promptprobe.stats.tests import decides
from promptprobe.stats.verdict import generalisation, paired_verdict, unpaired_verdict

ALPHA = 0.05


def binomial(k, n, p):
    return math.comb(n, k) * p**k * (1 - p) ** (n - k)


def orderings(outcome):
    """How many orders of the questions give this multiset of outcomes."""
    ways = math.factorial(len(outcome))
    for value in set(outcome):
        ways //= math.factorial(outcome.count(value))
    return ways


def check(interval, decided):
    low, high = interval
    assert -1 <= low < high <= 1, interval  # never a single point
    assert (low > 0 or high < 0) == decided, interval  # agrees with the verdict


@pytest.mark.parametrize("rate_a, rate_b", [(0.95, 0.05), (1.0, 0.0), (0.9, 0.1), (0.25, 0.95), (0.5, 0.5)])
def test_unpaired_interval_covers_by_enumeration_and_agrees_on_every_outcome(rate_a, rate_b):
    """3 questions x 2 repeats a side, every question at its arm's rate: every outcome."""
    cases, repeats = 3, 2
    outcomes = list(itertools.combinations_with_replacement(range(repeats + 1), cases))

    def chance(counts, p):
        return orderings(counts) * math.prod(binomial(k, repeats, p) for k in counts)

    covered = 0.0
    for side_a, side_b in itertools.product(outcomes, outcomes):
        a, b = [(k, repeats) for k in side_a], [(k, repeats) for k in side_b]
        verdict = unpaired_verdict(a, b, ALPHA)
        interval = verdict.interval_at(ALPHA)
        check(interval, verdict.verdict != "indistinguishable")
        weight = chance(side_a, rate_a) * chance(side_b, rate_b)
        covered += weight * (interval[0] <= rate_b - rate_a <= interval[1])
    assert covered >= 0.92


@pytest.mark.parametrize("rate_a, rate_b", [(0.95, 0.05), (1.0, 0.0), (0.9, 0.1), (0.25, 0.95), (0.5, 0.5)])
def test_paired_interval_covers_by_enumeration_and_agrees_on_every_outcome(rate_a, rate_b):
    """3 questions x 2 repeats, both arms on the same questions: every outcome (9^3 of them)."""
    cells = list(itertools.product(range(3), range(3)))
    covered = 0.0
    for outcome in itertools.combinations_with_replacement(cells, 3):
        a = [(x, 2) for x, _ in outcome]
        b = [(y, 2) for _, y in outcome]
        verdict = paired_verdict(a, b, ALPHA)
        interval = verdict.interval_at(ALPHA)
        check(interval, verdict.verdict != "indistinguishable")
        weight = orderings(outcome) * math.prod(
            binomial(x, 2, rate_a) * binomial(y, 2, rate_b) for x, y in outcome
        )
        covered += weight * (interval[0] <= rate_b - rate_a <= interval[1])
    assert covered >= 0.92


@pytest.mark.parametrize("rate_a, rate_b", [(0.95, 0.05), (1.0, 0.0), (0.25, 0.95), (0.5, 0.5), (0.3, 0.9)])
def test_generalisation_interval_covers_by_enumeration_and_agrees_with_its_sign_test(rate_a, rate_b):
    """6 questions asked once each, every outcome (4^6): the population's B - A is the rates'."""
    covered = 0.0
    cells = list(itertools.product(range(2), range(2)))
    for outcome in itertools.combinations_with_replacement(cells, 6):  # the order of questions is moot
        a = [(x, 1) for x, _ in outcome]
        b = [(y, 1) for _, y in outcome]
        found = generalisation(a, b, ALPHA)
        check(found.interval, decides(found.p_value, ALPHA))
        weight = orderings(outcome) * math.prod(
            binomial(x, 1, rate_a) * binomial(y, 1, rate_b) for x, y in outcome
        )
        covered += weight * (found.interval[0] <= rate_b - rate_a <= found.interval[1])
    assert covered >= 0.92


def test_nothing_moved_gives_the_interval_the_rates_allow():
    """0 of 10 against 0 of 20 questions asked once: Newcombe's hybrid of the arms' score intervals
    with continuity correction (R's prop.test(0, 10) upper bound: 0.3445372)."""
    low_b, high_b = corrected_score_bounds(0, 10)
    low_a, high_a = corrected_score_bounds(0, 20)
    assert high_b == pytest.approx(0.3445372, abs=1e-7)
    low, high = unpaired_verdict([(0, 1)] * 20, [(0, 1)] * 10, ALPHA).interval_at(ALPHA)
    assert (low, high) == pytest.approx((-high_a, high_b), abs=1e-9)
    verdict = unpaired_verdict([(0, 1)] * 20, [(1, 1)] * 10, ALPHA)
    assert verdict.verdict == "B>A"
    assert verdict.interval_at(ALPHA) == pytest.approx(
        (1 - math.hypot(high_b, high_a), 1.0), abs=1e-9
    )  # 10/10: 1 - 0/10's


@pytest.mark.parametrize("design", ["paired", "unpaired"])
def test_zero_of_twenty_against_zero_of_twenty_is_a_narrow_interval_around_zero(design):
    verdict = (paired_verdict if design == "paired" else unpaired_verdict)(
        [(0, 1)] * 20, [(0, 1)] * 20, ALPHA
    )
    low, high = verdict.interval_at(ALPHA)
    assert verdict.verdict == "indistinguishable"
    assert -0.21 < low < 0 < high < 0.21  # 0/20 vs 0/20: ±20 points (score interval of 0/20)
    found = generalisation([(0, 3)] * 20, [(0, 3)] * 20, ALPHA)
    assert -0.2 < found.interval[0] < 0 < found.interval[1] < 0.2  # 20 questions: others may differ a little


def test_separated_data_give_an_interval_not_a_point():
    """6 questions asked once, all 1 under A and all 0 under B: the old interval read -100 to -100."""
    verdict = unpaired_verdict([(1, 1)] * 6, [(0, 1)] * 6, ALPHA)
    low, high = verdict.interval_at(ALPHA)
    assert verdict.verdict == "A>B" and low == -1.0 and -0.9 < high < 0
    assert (low, high) == pytest.approx(unpaired_difference([(1, 1)] * 6, [(0, 1)] * 6, ALPHA))


def test_population_interval_is_students_t_over_the_case_differences():
    a = [(1, 3), (2, 3), (0, 3), (3, 3), (1, 3)]
    b = [(3, 3), (2, 3), (2, 3), (3, 3), (3, 3)]
    diffs = np.array([2, 0, 2, 0, 2]) / 3
    half = 2.7764451051977987 * diffs.std(ddof=1) / math.sqrt(5)  # t(0.975, 4), scipy
    assert population_difference(a, b, ALPHA) == pytest.approx((diffs.mean() - half, diffs.mean() + half))


def test_confidence_sequence_misses_at_most_alpha_over_every_path():
    """Every path of 4 rounds of 2 pairs (5 round means each): the chance that the sequence ever
    excludes the truth, by any round, is at most alpha (it only shrinks, so the last round says)."""
    alpha = 0.3
    for p_a, p_b in [(0.5, 0.5), (0.2, 0.9), (0.9, 0.2)]:
        up, down = p_b * (1 - p_a), p_a * (1 - p_b)
        same = 1 - up - down
        truth = p_b - p_a
        one = {1: up, 0: same, -1: down}
        pair = {}
        for x, y in itertools.product(one, one):
            pair[(x + y) / 2] = pair.get((x + y) / 2, 0) + one[x] * one[y]
        missed = 0.0
        for path in itertools.product(pair, repeat=4):
            low, high = confidence_sequence(path, alpha)
            if not low <= truth <= high:
                missed += math.prod(pair[z] for z in path)
        assert missed <= alpha
    # Not vacuous: rounds where every pair favours B soon exclude 0.
    assert confidence_sequence([1.0] * 6, alpha)[0] > 0


def test_sequential_interval_carries_the_uncertainty_of_the_discordant_share():
    """A run decided on its 12 questions: the interval is not pinned at the estimate (the old one
    read "+67, CI +44 to +67") and excludes 0 on the side the rule decided."""
    rng = np.random.default_rng(7)
    rates_a, rates_b = np.full(12, 0.25), np.full(12, 0.95)
    discordant, b_higher, leads = [], [], []
    for _ in range(17):
        x, y = rng.random(12) < rates_a, rng.random(12) < rates_b
        discordant.append(int((x != y).sum()))
        b_higher.append(int((y & ~x).sum()))
        leads.append(int((y & ~x).sum() - (x & ~y).sum()))
        step = look(discordant, b_higher, ALPHA, 17, 2)
        if step.stop:
            break
    assert step.decision == "B>A"
    needed = [look(discordant[:k], b_higher[:k], ALPHA, 17, 2).needed for k in range(1, len(leads) + 1)]
    test = boundary_test(discordant, needed, sum(leads), 12 * len(leads), step.p_value)
    estimate, (low, high) = sequential_effect(leads, [12] * len(leads), step.p_value, ALPHA, test)
    assert estimate == pytest.approx(sum(leads) / (12 * len(leads)))
    assert 0 < low < estimate < high
