"""Arms that asked their cases a different number of times: the unpaired verdict (the beta-binomial
test over cases), the generalisation line (the sign test conditional on each case's total), and
the interval each test gives by inversion, against brute-force enumeration, scipy and the
reproductions of issue 24."""

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest
from brute_force import permutation_p
from click.testing import CliRunner
from conftest import write_probeset
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as sp
from scipy.optimize import minimize
from servers import LocalServer, Reply

from promptprobe.cli import main
from promptprobe.config import load_config
from promptprobe.engine.run import RunOptions, run_probe
from promptprobe.models import parse_model_spec
from promptprobe.probeset import load_probeset
from promptprobe.prompts import load_prompt
from promptprobe.stats import betabinomial
from promptprobe.stats.betabinomial import BetaBinomialTest, _case_pmf, _design, _fit_mu, _tail_p, lgamma
from promptprobe.stats.generalisation import ConditionalSignTest
from promptprobe.stats.inversion import invert
from promptprobe.stats.tests import CasePermutation, case_permutation, decides, sign_test
from promptprobe.stats.verdict import generalisation, unpaired_verdict

# -- the reproductions ---------------------------------------------------------------------------


def test_one_repeat_all_passed_against_twenty_repeats_at_sixteen_is_not_a_difference():
    # A: 8 questions asked once, all passed; B: 8 other questions asked 20 times, 16/20 each. The
    # case permutation said A>B at p = 0.000155 (2 / C(16, 8)); Fisher on the pooled 8/8 vs
    # 128/160 gives 0.36.
    a, b = [(1, 1)] * 8, [(16, 20)] * 8
    assert case_permutation([1.0] * 8, [0.8] * 8) == pytest.approx(2 / math.comb(16, 8))
    assert sp.fisher_exact([[8, 0], [128, 32]]).pvalue == pytest.approx(0.36, abs=0.01)
    verdict = unpaired_verdict(a, b)
    assert verdict.test == betabinomial.TEST
    assert verdict.verdict == "indistinguishable" and verdict.p_value > 0.1
    lo, hi = verdict.interval_at(0.05)
    assert lo < 0 < hi and lo <= -0.2  # the observed -20 points is inside


def test_one_repeat_against_ten_at_nine_does_not_generalise():
    # 12 cases, A 1/1 each, B 9/10 each: the plain sign test said "likely", p = 0.000488 (12 of 12
    # towards A). Given each case's total (10 of 11), A's single sample is the success with
    # probability 10/11 by noise alone, which is a move towards A: 12 of 12 is the likeliest outcome.
    a, b = [(1, 1)] * 12, [(9, 10)] * 12
    assert sign_test(0, 12) == pytest.approx(0.000488, abs=1e-6)
    result = generalisation(a, b)
    assert (result.up, result.down) == (0, 12) and not result.likely
    assert result.p_value == pytest.approx(2 * (10 / 11) ** 12, abs=1e-12)
    lo, hi = result.interval
    assert lo < 0 < hi


def record(folder: Path, prompt: str, questions: list[str], passing: list[int], repeats: int) -> Path:
    """A real run of one prompt through a scripted server: case i has the header in its first
    passing[i] replies (the rest put it last). Questions end in the case's number."""
    folder.mkdir(parents=True)
    probeset = write_probeset(
        folder / "p.toml", [(f"c{i}", q, None) for i, q in enumerate(questions)], repeats=repeats
    )
    (folder / f"{prompt}.md").write_text(f"VERSION={prompt}\n")
    seen: dict[int, int] = {}

    def reply(request):
        case = int(request.json["messages"][-1]["content"].split()[-1])
        seen[case] = seen.get(case, 0) + 1
        return Reply("[[ANSWER]]\nok" if seen[case] <= passing[case] else "ok\n[[ANSWER]]")

    with LocalServer(reply) as server:
        outcome = run_probe(
            load_probeset(probeset),
            [load_prompt(folder / f"{prompt}.md")],
            [parse_model_spec(f"openai:m@{server.url}/v1")],
            load_config(None),
            RunOptions(runs_dir=folder / "runs", concurrency=4, max_attempts=1, seed=5),
        )
    return outcome.path


def test_the_unpaired_reproduction_end_to_end(tmp_path):
    a = record(tmp_path / "a", "once", [f"first question {i}" for i in range(8)], [1] * 8, repeats=1)
    b = record(tmp_path / "b", "twenty", [f"other question {i}" for i in range(8)], [16] * 8, repeats=20)
    gate = CliRunner().invoke(main, ["compare", str(a), str(b), "--fail-if-worse", "--json"])
    assert gate.exit_code == 0, gate.stderr
    data = json.loads(gate.stdout)
    assert data["design"] == "unpaired" and data["test"] == betabinomial.TEST
    assert (data["a"]["k"], data["a"]["n"], data["b"]["k"], data["b"]["n"]) == (8, 8, 128, 160)
    assert data["verdict"] == "indistinguishable" and data["p_value"] > 0.1
    lo, hi = data["effect"]["interval"]
    assert lo < 0 < hi


def test_the_generalisation_reproduction_end_to_end(tmp_path):
    questions = [f"question {i}" for i in range(12)]
    a = record(tmp_path / "a", "once", questions, [1] * 12, repeats=1)
    b = record(tmp_path / "b", "ten", questions, [9] * 12, repeats=10)
    result = CliRunner().invoke(main, ["compare", str(a), str(b)])
    assert result.exit_code == 0, result.output
    assert "would it generalise: not shown; 12 of 12 cases moved (0 towards B, 12 towards A)" in result.stdout
    data = json.loads(CliRunner().invoke(main, ["compare", str(a), str(b), "--json"]).stdout)
    assert data["design"] == "paired" and data["paired"]["likely"] is False
    assert data["paired"]["p_value"] == pytest.approx(2 * (10 / 11) ** 12, abs=1e-12)


# -- the generalisation line: the sign test conditional on each case's total ----------------------


def brute_force_generalisation(cases):
    """Enumerate every outcome with the observed totals (products of hypergeometrics), keep those
    with the observed set of moved cases, and double the smaller tail of the number that went up."""
    def direction(a, n_a, b, n_b):
        return (b * n_a > a * n_b) - (b * n_a < a * n_b)

    observed = [direction(*c) for c in cases]
    options = []
    for a, n_a, b, n_b in cases:
        t = a + b
        options.append(
            [
                (direction(x, n_a, t - x, n_b), math.comb(n_a, x) * math.comb(n_b, t - x) / math.comb(n_a + n_b, t))
                for x in range(max(0, t - n_b), min(t, n_a) + 1)
            ]
        )
    up = sum(d > 0 for d in observed)
    lower = upper = total = 0.0
    for combo in itertools.product(*options):
        if [d != 0 for d, _ in combo] != [d != 0 for d in observed]:
            continue
        weight = math.prod(w for _, w in combo)
        ups = sum(d > 0 for d, _ in combo)
        total += weight
        lower += weight * (ups <= up)
        upper += weight * (ups >= up)
    return min(1.0, 2 * min(lower, upper) / total)


@pytest.mark.parametrize(
    "cases",
    [
        [(1, 1, 9, 10)] * 5,
        [(0, 1, 10, 10), (1, 1, 3, 10), (1, 2, 5, 5), (0, 3, 2, 1), (2, 2, 1, 4)],
        [(1, 3, 3, 3), (0, 3, 2, 3), (3, 3, 1, 3), (2, 3, 2, 3), (0, 3, 3, 3)],
        [(0, 1, 18, 20), (1, 1, 20, 20), (0, 1, 19, 20), (1, 1, 17, 20)],
    ],
)
def test_the_conditional_sign_test_matches_enumeration(cases):
    assert ConditionalSignTest(cases).p_value == pytest.approx(brute_force_generalisation(cases), abs=1e-12)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 4)), min_size=1, max_size=12), st.integers(1, 4))
def test_with_equal_repeats_it_is_the_sign_test(counts, n):
    cases = [(min(a, n), n, min(b, n), n) for a, b in counts]
    test = ConditionalSignTest(cases)
    up = sum(b > a for a, _, b, _ in cases)
    down = sum(b < a for a, _, b, _ in cases)
    assert (test.up, test.down) == (up, down)
    assert test.p_value == pytest.approx(sign_test(up, down), abs=1e-12)
    if up + down:
        assert test.p_value == pytest.approx(sp.binomtest(up, up + down, 0.5).pvalue, abs=1e-12)


def test_the_generalisation_line_keeps_its_level_with_unequal_repeats_exactly():
    # 7 cases each asked once under A and 10 times under B at rate 0.9 (the arms alike): the
    # probability, over every outcome, that the line says "likely". Cases are independent and
    # alike, so outcomes are enumerated as multisets of per-case outcomes; those where B had 5 or
    # fewer successes (0.16% per case) are left out and their whole mass added as if "likely".
    rate, cases = 0.9, 7
    kinds = [(a, b) for a in range(2) for b in range(6, 11)]
    weight = {k: sp.binom.pmf(k[0], 1, rate) * sp.binom.pmf(k[1], 10, rate) for k in kinds}
    neglected = 1 - sum(weight.values()) ** cases
    shipped = old = 0.0
    for combo in itertools.combinations_with_replacement(kinds, cases):
        counts = {k: combo.count(k) for k in set(combo)}
        probability = math.factorial(cases) * math.prod(weight[k] ** c / math.factorial(c) for k, c in counts.items())
        test = ConditionalSignTest([(a, 1, b, 10) for a, b in combo])
        shipped += probability * (test.up + test.down >= 5 and decides(test.p_value, 0.05))
        up = sum(b / 10 > a for a, b in combo)
        down = sum(b / 10 < a for a, b in combo)
        old += probability * (up + down >= 5 and decides(sign_test(up, down), 0.05))
    assert neglected < 0.02 and shipped + neglected <= 0.05
    assert old > 0.08  # the plain sign test: towards A by noise alone


# -- the beta-binomial test ---------------------------------------------------------------------------


def test_lgamma_and_the_deviance_constant_match_scipy():
    from scipy.special import gammaln

    x = np.geomspace(1e-6, 1e7, 4000)
    assert np.max(np.abs(lgamma(x) - gammaln(x)) / np.maximum(1, np.abs(gammaln(x)))) < 1e-11
    assert betabinomial.DEVIANCE_LIMIT == pytest.approx(sp.chi2.ppf(betabinomial.UPPER_LEVEL, 1), rel=1e-14)


@pytest.mark.parametrize("n,mu,rho", [(5, 0.3, 0.2), (20, 0.9, 0.01), (1, 0.7, 0.5), (10, 0.5, 0.999), (7, 0.2, 0.0)])
def test_case_distribution_is_scipys_beta_binomial(n, mu, rho):
    k = np.arange(n + 1)
    if rho:
        s = 1 / rho - 1
        expected = sp.betabinom.pmf(k, n, mu * s, (1 - mu) * s)
    else:
        expected = sp.binom.pmf(k, n, mu)
    assert np.abs(_case_pmf(n, mu, rho) - expected).max() < 1e-12


def brute_force_tail_p(a, b, mu_a, mu_b, rho):
    """2·min of the tails of D = mean_B(k/n) - mean_A(k/n), enumerating every count vector."""
    s = 1 / rho - 1
    observed = np.mean([k / n for k, n in b]) - np.mean([k / n for k, n in a])
    options = [
        [(k, sp.betabinom.pmf(k, n, mu * s, (1 - mu) * s)) for k in range(n + 1)]
        for (_, n), mu in [*((c, mu_a) for c in a), *((c, mu_b) for c in b)]
    ]
    lower = upper = 0.0
    for combo in itertools.product(*options):
        ks = [k for k, _ in combo]
        d = np.mean([ks[len(a) + j] / n for j, (_, n) in enumerate(b)]) - np.mean(
            [ks[i] / n for i, (_, n) in enumerate(a)]
        )
        w = math.prod(p for _, p in combo)
        lower += w * (d <= observed + 1e-12)
        upper += w * (d >= observed - 1e-12)
    return min(1.0, 2 * min(lower, upper))


@pytest.mark.parametrize(
    "a,b,mu_a,mu_b,rho",
    [
        ([(1, 1), (0, 1), (1, 2)], [(3, 4), (4, 4)], 0.6, 0.6, 0.3),
        ([(1, 1), (1, 1), (0, 1)], [(2, 5), (5, 5)], 0.7, 0.5, 0.1),
        ([(2, 3), (1, 2)], [(0, 1), (1, 1), (3, 3)], 0.4, 0.55, 0.8),
    ],
)
def test_the_null_distribution_matches_enumeration(a, b, mu_a, mu_b, rho):
    # Unequal repeats within an arm too: each arm's mean is placed on the lcm of its repeats.
    assert _tail_p(_design(a, b), mu_a, mu_b, rho) == pytest.approx(brute_force_tail_p(a, b, mu_a, mu_b, rho), abs=1e-12)


def scipy_profile(a, b, delta, rho):
    """The maximum over mu_a of the beta-binomial log-likelihood at rho, by scipy."""
    s = 1 / rho - 1

    def minus(x):
        mu = x[0]
        total = sum(sp.betabinom.logpmf(k, n, mu * s, (1 - mu) * s) - math.log(math.comb(n, k)) for k, n in a)
        nu = mu + delta
        total += sum(sp.betabinom.logpmf(k, n, nu * s, (1 - nu) * s) - math.log(math.comb(n, k)) for k, n in b)
        return -total

    low, high = max(0, -delta) + 1e-6, min(1, 1 - delta) - 1e-6
    best = min((minimize(minus, [x0], bounds=[(low, high)]) for x0 in np.linspace(low, high, 3)), key=lambda r: r.fun)
    return best.x[0], -best.fun


@pytest.mark.parametrize("delta", [0.0, 0.1, -0.2])
def test_the_fit_under_the_null_is_the_maximum_likelihood(delta):
    a = [(1, 1), (0, 1), (1, 1), (1, 1), (0, 1)]
    b = [(15, 20), (19, 20), (8, 20), (20, 20)]
    rho = np.array([0.05, 0.7])
    mus, values = _fit_mu(_design(a, b), delta, rho)
    for r, mu, value in zip(rho, mus, values, strict=True):
        expected_mu, expected_value = scipy_profile(a, b, delta, r)
        assert mu == pytest.approx(expected_mu, abs=1e-4) and value == pytest.approx(expected_value, abs=1e-7)


def test_identical_outcomes_test_nothing_and_the_edges_fit_only_a_sure_split():
    assert BetaBinomialTest([(3, 3)] * 4, [(1, 1)] * 6).p_value == 1.0
    sure = BetaBinomialTest([(0, 3)] * 4, [(1, 1)] * 6)
    assert sure.p_at(1.0) == 1.0 and sure.p_at(-1.0) == 0.0


# -- the case permutation and its shifted nulls ------------------------------------------------------


@pytest.mark.parametrize("delta", [0.0, 0.2, -0.35, 0.5])
def test_the_shifted_case_permutation_matches_enumeration(delta):
    a, b = [1, 1, 2 / 3, 1, 0], [0, 1 / 3, 0, 2 / 3, 1 / 3, 1]
    assert CasePermutation(a, b).p_at(delta) == pytest.approx(permutation_p(a, b, delta), abs=1e-12)


# -- every interval agrees with its test ------------------------------------------------------------


steps = st.lists(st.tuples(st.floats(-1, 1), st.floats(0, 1)), min_size=1, max_size=12)


@settings(max_examples=300, deadline=None)
@given(steps, st.floats(-1, 1), st.sampled_from([0.05, 0.01, 0.2]))
def test_inversion_excludes_zero_exactly_when_the_test_decides(jumps, estimate, alpha):
    # Any p-function at all (a step function with arbitrary steps): the construction alone agrees.
    def p_at(delta):
        return max((p for where, p in jumps if where <= delta), default=jumps[0][1])

    found = invert(p_at, estimate, alpha)
    if found is None:
        assert decides(p_at(0.0), alpha) and decides(p_at(estimate), alpha)
        return
    lo, hi = found
    assert -1 <= lo <= hi <= 1
    assert (lo > 0 or hi < 0) == decides(p_at(0.0), alpha)


counts = st.integers(1, 20).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n)))


@settings(max_examples=10, deadline=None)
@given(st.lists(counts, min_size=2, max_size=6), st.lists(counts, min_size=2, max_size=6), st.sampled_from([0.05, 0.01]))
def test_the_unpaired_interval_agrees_with_its_verdict(a, b, alpha):
    # (benchmarks/verdict_rules.py counts the disagreements over hundreds of random designs: 0)
    verdict = unpaired_verdict(a, b, alpha=alpha)
    for level in (alpha,):
        bounds = verdict.interval_at(level)
        assert bounds is not None
        assert (bounds[0] > 0 or bounds[1] < 0) == decides(verdict.p_value, level)
    if verdict.verdict != "indistinguishable":
        lo, hi = verdict.interval_at(alpha)
        assert (lo > 0) == (verdict.verdict == "B>A")


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(counts, counts), min_size=1, max_size=10), st.sampled_from([0.05, 0.2]))
def test_the_generalisation_interval_agrees_with_its_test(cases, alpha):
    result = generalisation([c[0] for c in cases], [c[1] for c in cases], alpha)
    if result.interval is not None:
        lo, hi = result.interval
        assert (lo > 0 or hi < 0) == decides(result.p_value, alpha)
