"""The judge's reliability figures against published values, statsmodels/scipy and brute force."""

import itertools
import math

import pytest
from scipy.stats import binom, fisher_exact
from statsmodels.stats.inter_rater import fleiss_kappa as sm_fleiss_kappa
from statsmodels.stats.proportion import proportion_confint

from promptprobe.stats.judge import (
    Accuracy,
    Estimate,
    accuracy,
    agreement,
    bias,
    clopper_pearson,
    corrected_effect,
    corrected_rate,
    effect_level,
    fleiss_kappa,
    rogan_gladen,
)

# Fleiss (1971) as reproduced on Wikipedia's "Fleiss' kappa": 10 subjects, 14 raters, 5 categories.
FLEISS_EXAMPLE = [
    [0, 0, 0, 0, 14], [0, 2, 6, 4, 2], [0, 0, 3, 5, 6], [0, 3, 9, 2, 0], [2, 2, 8, 1, 1],
    [7, 7, 0, 0, 0], [3, 2, 6, 3, 0], [2, 5, 3, 2, 2], [6, 5, 2, 1, 0], [0, 2, 2, 3, 7],
]


def test_fleiss_kappa_matches_the_published_example_and_statsmodels():
    assert fleiss_kappa(FLEISS_EXAMPLE) == pytest.approx(0.20993, abs=5e-5)
    assert fleiss_kappa(FLEISS_EXAMPLE) == pytest.approx(sm_fleiss_kappa(FLEISS_EXAMPLE, method="fleiss"))


def test_fleiss_kappa_is_undefined_when_every_judgment_is_the_same():
    assert fleiss_kappa([[3, 0, 0], [3, 0, 0]]) is None


@pytest.mark.parametrize(("k", "n"), [(0, 10), (3, 10), (10, 10), (17, 40), (1, 1)])
def test_clopper_pearson_matches_statsmodels(k, n):
    low, high = proportion_confint(k, n, alpha=0.05, method="beta")
    assert clopper_pearson(k, n) == pytest.approx((low if k else 0.0, high if k < n else 1.0), abs=1e-10)


def test_agreement_counts_split_outputs_and_keeps_failed_judgments_as_their_own_label():
    judgments = [[True, True, True], [True, False, True], [False, False, False], [None, None, None],
                 [True]]  # judged once: left out of agreement
    result = agreement(judgments)
    assert result.outputs == 4 and result.unanimous == 3 and result.split == [1]
    assert result.share.estimate == pytest.approx(0.75)
    expected = sm_fleiss_kappa([[3, 0, 0], [2, 1, 0], [0, 3, 0], [0, 0, 3]], method="fleiss")
    assert result.kappa.estimate == pytest.approx(expected)
    low, high = result.kappa.interval
    assert low < result.kappa.estimate < high


def test_agreement_with_one_judgment_per_output_says_why_there_is_none():
    result = agreement([[True], [False]])
    assert result.outputs == 0 and result.kappa.estimate is None and "repeats = 1" in result.kappa.reason


def test_accuracy_counts_a_failed_judgment_as_a_judged_fail():
    pairs = [(True, True), (None, True), (False, True), (True, True), (False, False), (None, False),
             (True, False)]
    acc = accuracy(pairs)
    assert (acc.true_pass, acc.labelled_pass, acc.true_fail, acc.labelled_fail) == (2, 4, 2, 3)
    assert acc.sensitivity.estimate == 0.5 and acc.sensitivity.interval == clopper_pearson(2, 4)
    assert acc.specificity.estimate == pytest.approx(2 / 3)


def test_bias_uses_fisher_exact_on_each_arm_and_holm_over_the_two():
    a = accuracy([(True, True)] * 19 + [(False, True)] + [(False, False)] * 10)
    b = accuracy([(True, True)] * 8 + [(False, True)] * 12 + [(False, False)] * 10)
    result = bias(a, b)
    assert result.p_sensitivity == pytest.approx(fisher_exact([[19, 1], [8, 12]]).pvalue)
    assert result.p_specificity == pytest.approx(1.0)
    assert result.p_adjusted == pytest.approx(min(1.0, 2 * result.p_sensitivity))
    assert result.biased
    assert not bias(a, a).biased


def test_fisher_reference_value_tea_tasting():
    a = accuracy([(True, True)] * 3 + [(False, True)])
    b = accuracy([(True, True)] + [(False, True)] * 3)
    assert bias(a, b).p_sensitivity == pytest.approx(0.4857, abs=1e-4)


def test_rogan_gladen_point_and_undefined_judge():
    assert rogan_gladen(0.5, 0.9, 0.8) == pytest.approx((0.5 + 0.8 - 1) / 0.7)
    assert rogan_gladen(0.05, 0.9, 0.8) == 0.0  # clipped, never negative
    assert rogan_gladen(0.5, 0.5, 0.5) is None


def _acc(tp: int, lp: int, tf: int, lf: int) -> Accuracy:
    return accuracy([(True, True)] * tp + [(False, True)] * (lp - tp)
                    + [(False, False)] * tf + [(True, False)] * (lf - tf))


def test_corrected_rate_interval_contains_its_point_and_needs_both_label_kinds():
    acc = _acc(18, 20, 17, 20)
    est = corrected_rate(0.6, 60, acc)
    low, high = est.interval
    assert low < est.estimate < high
    assert corrected_rate(0.6, 60, _acc(5, 5, 0, 0)).estimate is None


def test_corrected_rate_with_a_possibly_useless_judge_says_so():
    useless = corrected_rate(0.6, 10, _acc(1, 3, 2, 3))  # Se 1/3, Sp 2/3: J = 0
    assert useless.estimate is None and useless.interval is None and "chance" in useless.reason
    unsure = corrected_rate(0.6, 10, _acc(1, 1, 1, 5))  # J = 0.2, but one label cannot rule out 0
    assert unsure.estimate is not None and unsure.interval == (0.0, 1.0) and "chance" in unsure.reason


def test_corrected_rate_covers_by_brute_force_enumeration():
    """Every outcome of judged k/n and of the labels of each kind, enumerated: exact coverage."""
    n, lp, lf = 10, 8, 8
    for truth, se, sp in [(0.3, 0.9, 0.85), (0.7, 0.8, 0.95), (0.5, 0.95, 0.95)]:
        judged_rate = se * truth + (1 - sp) * (1 - truth)
        covered = 0.0
        for k, tp, tf in itertools.product(range(n + 1), range(lp + 1), range(lf + 1)):
            prob = binom.pmf(k, n, judged_rate) * binom.pmf(tp, lp, se) * binom.pmf(tf, lf, sp)
            est = corrected_rate(k / n, n, _acc(tp, lp, tf, lf))
            if est.interval is not None and est.interval[0] <= truth <= est.interval[1]:
                covered += prob
        assert covered >= 0.95, (truth, se, sp, covered)


def test_corrected_effect_scales_by_youden_and_keeps_the_sign_of_the_judged_interval():
    acc = _acc(45, 50, 45, 50)
    est = corrected_effect(0.2, (0.1, 0.3), acc)
    assert est.estimate == pytest.approx(0.2 / 0.8)
    assert est.interval[0] > 0 and est.interval[1] >= 0.3 / 0.8
    straddling = corrected_effect(0.0, (-0.1, 0.1), acc)
    assert straddling.interval[0] < 0 < straddling.interval[1]


def test_estimate_to_dict_shape():
    assert Estimate(0.5, (0.25, 0.75)).to_dict() == {"estimate": 0.5, "interval": [0.25, 0.75]}
    assert math.isclose(effect_level(0.95), 0.975)
