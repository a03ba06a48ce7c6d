"""A gate you can trust: one meaning of `verdict` in every design, Holm across metrics, the effect
agreeing with the verdict, decisions that do not hang on rounding, plans and hints from the
tests the verdicts use, and `--resume` flags that are taken or refused, never ignored."""

import itertools
import json
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import run_dir_of, write_probeset
from hypothesis import given, settings
from hypothesis import strategies as st
from servers import LocalServer, Reply

from promptprobe.cli import main
from promptprobe.comparison import Side, adjust, compare_sides
from promptprobe.jsonio import read_jsonl
from promptprobe.stats import effect, power, tests
from promptprobe.stats.verdict import paired_verdict, unpaired_verdict

# -- the verdict matrix, end to end -------------------------------------------------------------

BEHAVIOUR = {"good": "[[ANSWER]]\nok", "bad": "ok, no header at all"}


def reply(request):
    name = request.json["messages"][0]["content"].split("=")[1].strip()
    if name == "broken":
        return Reply(status=500, body=b'{"error": {"message": "upstream down"}}')
    return Reply(BEHAVIOUR[name])


def prompt_files(folder: Path, names: list[str]) -> list[str]:
    args = []
    for name in names:
        path = folder / f"{name}.md"
        path.write_text(f"VERSION={name}\n")
        args += ["--prompt", str(path)]
    return args


def probe(folder: Path, server, prompts: list[str], *extra: str, questions: str = "question") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    probeset = write_probeset(folder / "p.toml", [(f"c{i}", f"{questions} {i}", None) for i in range(6)])
    result = CliRunner().invoke(
        main,
        [
            "run",
            "--retrieval",
            "none",
            str(probeset),
            *prompt_files(folder, prompts),
            "--model",
            f"openai:m@{server.url}/v1",
            "--runs-dir",
            str(folder / "runs"),
            "--max-attempts",
            "1",
            "--concurrency",
            "4",
            *extra,
        ],
    )
    assert result.exit_code in (0, 1), result.output  # 1: B's samples failed, as planned
    return run_dir_of(result)


SCENARIOS = {"B better": ("bad", "good"), "B worse": ("good", "bad"), "B all failed": ("good", "broken")}
# Per metric and scenario: the verdict (which RATE is higher) and whether B is worse.
EXPECTED = {
    ("header_present", "B better"): ("B>A", False),
    ("header_present", "B worse"): ("A>B", True),
    ("header_present", "B all failed"): ("A>B", True),  # a failure is a miss where higher is better
    ("header_absent", "B better"): ("A>B", False),  # B's rate of absent headers is lower: better
    ("header_absent", "B worse"): ("B>A", True),
    ("header_absent", "B all failed"): ("B>A", True),  # a failure is an event where lower is better
}


@pytest.fixture(scope="module")
def matrix_runs(tmp_path_factory):
    """Per design and scenario, the two selectors to compare (sequential: per metric too)."""
    tmp = tmp_path_factory.mktemp("matrix")
    pairs = {}
    with LocalServer(reply) as server:
        for scenario, (a, b) in SCENARIOS.items():
            run = probe(tmp / "paired" / scenario, server, [a, b], "-n", "3")
            pairs[("paired", scenario)] = (f"{run}#prompt={a}", f"{run}#prompt={b}")
            run_a = probe(tmp / "unpaired" / scenario / "a", server, [a], "-n", "3")
            run_b = probe(
                tmp / "unpaired" / scenario / "b", server, [b], "-n", "3", questions="other question"
            )
            pairs[("unpaired", scenario)] = (str(run_a), str(run_b))
            for metric in ("header_present", "header_absent"):
                run = probe(
                    tmp / "sequential" / metric / scenario,
                    server,
                    [a, b],
                    "--until-decided",
                    "--metric",
                    metric,
                    "--max-rounds",
                    "4",
                )
                pairs[("sequential", scenario, metric)] = (f"{run}#prompt={a}", f"{run}#prompt={b}")
    return pairs


CELLS = [
    (design, metric, scenario)
    for design in ("paired", "unpaired", "sequential")
    for metric in ("header_present", "header_absent")
    for scenario in SCENARIOS
]


@pytest.mark.parametrize("design,metric,scenario", CELLS, ids=["-".join(c).replace(" ", "_") for c in CELLS])
def test_verdict_means_the_same_in_every_design(matrix_runs, design, metric, scenario):
    key = (design, scenario, metric) if design == "sequential" else (design, scenario)
    a, b = matrix_runs[key]
    verdict, worse = EXPECTED[(metric, scenario)]
    data = json.loads(CliRunner().invoke(main, ["compare", a, b, "--metric", metric, "--json"]).stdout)
    assert data["design"] == design
    assert (data["verdict"], data["worse"]) == (verdict, worse)
    # The effect shown agrees with the verdict, and so does the rate difference here.
    assert math.copysign(1, data["effect"]["estimate"]) == (1 if verdict == "B>A" else -1)
    # The interval beside the verdict excludes 0 on the verdict's side, with the estimate inside.
    lo, hi = data["effect"]["interval"]
    assert lo <= data["effect"]["estimate"] <= hi and (lo > 0 if verdict == "B>A" else hi < 0)
    # In words: the candidate's name and the metric's direction.
    assert data["better_arm"] == ("A" if worse else "B")
    assert data["words"]["verdict"] == f"{data['b']['name']} {'worse' if worse else 'better'}"
    if design == "sequential":
        rounds = read_jsonl(Path(a.split("#")[0]) / "sequential.jsonl")
        assert rounds[-1]["decision"] == verdict and rounds[-1]["worse"] is worse and rounds[-1]["stop"]
    gate = CliRunner().invoke(main, ["compare", a, b, "--metric", metric, "--fail-if-worse"])
    failures = [line for line in gate.stderr.splitlines() if line.startswith("FAIL:")]
    if worse:
        assert gate.exit_code == 4
        assert failures and failures[0].startswith(f"FAIL: {metric} got worse: ")
        assert ("higher is better" if metric == "header_present" else "lower is better") in failures[0]
    else:
        assert gate.exit_code == 0 and failures == []
        assert f"{data['b']['name']} better on {metric}" in gate.stdout


# -- Holm ---------------------------------------------------------------------------------------


def test_holm_matches_statsmodels():
    from statsmodels.stats.multitest import multipletests

    rng = np.random.default_rng(4)
    for size in (1, 2, 5, 13):
        p = list(rng.uniform(0, 0.2, size))
        assert tests.holm(p) == pytest.approx(list(multipletests(p, method="holm")[1]), abs=1e-15)
    assert tests.holm([0.01, None, 0.04]) == [0.02, None, 0.04]


def side(name, counts, questions=None):
    return Side(name, {f"q{i}": [k, n, 0] for i, (k, n) in enumerate(counts)}, questions, name=name)


def test_a_family_decides_on_holm_adjusted_p_values():
    # Two metrics: each alone is A>B at p = 0.030; as a family of two the smaller is doubled.
    a = side("A", [(3, 3)] * 4 + [(2, 3)] * 5)
    b = side("B", [(0, 3)] + [(3, 3)] * 3 + [(1, 3)] * 5)
    single = compare_sides(a, b, "header_present", hints=False)
    assert single["verdict"] == "A>B" and single["p_adjusted"] == single["p_value"] < 0.05
    family = [
        compare_sides(a, b, "header_present", hints=False),
        compare_sides(a, b, "declared_correct", hints=False),
    ]
    adjust(family, 0.05)
    for result in family:
        assert result["p_adjusted"] == pytest.approx(min(1, 2 * single["p_value"]))
        assert result["verdict"] == "indistinguishable" and result["worse"] is False
        assert any("Holm" in note for note in result["notes"])


def test_the_gate_on_several_metrics_uses_adjusted_p_values(demo_run):
    _, run = demo_run
    good, bad = f"{run}#prompt=always-header", f"{run}#prompt=exception-only"
    # marker_leaked alone: exception-only leaks the marker in 5 of 36 against 0 (exact p = 0.05).
    alone = CliRunner().invoke(main, ["compare", good, bad, "--metric", "marker_leaked", "--fail-if-worse"])
    assert alone.exit_code == 4 and "FAIL: marker_leaked got worse" in alone.stderr
    both = CliRunner().invoke(
        main,
        [
            "compare",
            good,
            bad,
            "--metric",
            "marker_leaked",
            "--metric",
            "citation_none",
            "--fail-if-worse",
            "--json",
        ],
    )
    # Westfall-Young: citation_none's p cannot come near 0.05 under any relabelling of these
    # samples (5/18 against 6/18 over 6 cases), so adding it costs marker_leaked nothing (Holm
    # would have doubled its p to 0.1).
    assert both.exit_code == 4, both.stderr
    data = json.loads(both.stdout)
    assert data["family"] == 2 and [r["metric"] for r in data["results"]] == [
        "marker_leaked",
        "citation_none",
    ]
    leaked = data["results"][0]
    assert leaked["adjustment"] == "Westfall-Young min-P"
    assert leaked["p_adjusted"] == pytest.approx(leaked["p_value"]) and leaked["verdict"] == "B>A"
    everything = CliRunner().invoke(main, ["compare", good, bad, "--all", "--fail-if-worse"])
    assert everything.exit_code == 4  # header_present got far worse, whatever the family
    failing = [line.split()[1] for line in everything.stderr.splitlines() if line.startswith("FAIL:")]
    assert "header_present" in failing and "marker_leaked" not in failing
    assert "Westfall-Young min-P-adjusted" in everything.stderr


# -- the effect agrees with the verdict ------------------------------------------------------------


def test_simpsons_paradox_table_verdict_and_effect_agree():
    # Easy question: A 20/20, B 80/100; hard question: A 10/100, B 0/20. A is ahead within both,
    # but B is 42 points ahead on the pooled counts.
    a = Side("A", {"easy": [20, 20, 0], "hard": [10, 100, 0]})
    b = Side("B", {"easy": [80, 100, 0], "hard": [0, 20, 0]})
    result = compare_sides(a, b, hints=False)
    assert result["diff"] == pytest.approx(80 / 120 - 30 / 120)
    assert result["verdict"] == "A>B" and result["worse"] is True and result["p_value"] < 0.01
    lo, hi = result["effect"]["interval"]
    assert result["effect"]["estimate"] < 0 and hi < 0
    assert any("Simpson" in note for note in result["notes"])


counts = st.integers(1, 6).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n)))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(counts, counts), min_size=1, max_size=8))
def test_the_paired_verdicts_direction_is_the_effects_sign(cases):
    a = [c[0] for c in cases]
    b = [c[1] for c in cases]
    decision = paired_verdict(a, b, alpha=0.5)  # a loose alpha so that many tables decide
    estimate = decision.effect.estimate
    if decision.verdict == "B>A":
        assert estimate > 0
    elif decision.verdict == "A>B":
        assert estimate < 0
    lo, hi = decision.effect.interval
    assert -1 <= lo <= estimate <= hi <= 1 and hi > lo


@settings(max_examples=200, deadline=None)
@given(st.lists(counts, min_size=1, max_size=6), st.lists(counts, min_size=1, max_size=6))
def test_the_unpaired_verdicts_direction_is_the_effects_sign(a, b):
    decision = unpaired_verdict(a, b, alpha=0.5)
    if decision.verdict != "indistinguishable":
        assert (decision.effect.estimate > 0) == (decision.verdict == "B>A")


def sato_by_hand(cases):
    """Sato (1989) in exact rationals, written from the paper's formulas (group 1 = B)."""
    num = den = p_sum = q_sum = Fraction(0)
    for a, n_a, b, n_b in cases:
        n = n_a + n_b
        num += Fraction(b * n_a - a * n_b, n)
        den += Fraction(n_a * n_b, n)
        p_sum += Fraction(n_b**2 * a - n_a**2 * b, n**2) + Fraction(n_b * n_a * (n_a - n_b), 2 * n**2)
        q_sum += Fraction(b * (n_a - a) + a * (n_b - b), 2 * n)
    rd = num / den
    return float(rd), float((rd * p_sum + q_sum) / den**2)


def test_sato_variance_against_exact_arithmetic_and_wald_for_one_case():
    rng = np.random.default_rng(7)
    for _ in range(50):
        cases = []
        for _ in range(rng.integers(1, 8)):
            n_a, n_b = int(rng.integers(2, 12)), int(rng.integers(2, 12))
            cases.append((int(rng.integers(1, n_a)), n_a, int(rng.integers(1, n_b)), n_b))
        rd, variance = sato_by_hand(cases)
        result = effect.mantel_haenszel(cases)
        assert result.estimate == pytest.approx(rd, abs=1e-12)
        half = (result.interval[1] - result.interval[0]) / 2
        if -1 < result.interval[0] and result.interval[1] < 1:
            assert (
                half >= 1.959963984540054 * math.sqrt(variance) - 1e-12
            )  # Sato, or the noise floor above it
    # One case: Sato's variance is the Wald variance of p_B - p_A (3/10 against 7/10: 0.042).
    assert sato_by_hand([(3, 10, 7, 10)]) == (pytest.approx(0.4), pytest.approx(0.042))
    one = effect.mantel_haenszel([(3, 10, 7, 10)])
    assert one.interval == pytest.approx(
        (0.4 - 1.959963984540054 * math.sqrt(0.042), 0.4 + 1.959963984540054 * math.sqrt(0.042))
    )


def test_an_effect_with_no_variation_still_has_a_width():
    result = effect.mantel_haenszel([(6, 6, 6, 6)])
    assert result.estimate == 0 and result.interval[0] < -0.1 and result.interval[1] > 0.1


# -- decisions do not hang on rounding ------------------------------------------------------------


def exact_p(cases):
    distribution = {0: Fraction(1)}
    for a, n_a, b, n_b in cases:
        total = a + b
        step = {
            x: Fraction(math.comb(n_a, x) * math.comb(n_b, total - x), math.comb(n_a + n_b, total))
            for x in range(max(0, total - n_b), min(total, n_a) + 1)
        }
        combined: dict[int, Fraction] = {}
        for s, p in distribution.items():
            for x, q in step.items():
                combined[s + x] = combined.get(s + x, Fraction(0)) + p * q
        distribution = combined
    observed = distribution[sum(c[0] for c in cases)]
    return sum(p for p in distribution.values() if p <= observed)


@pytest.mark.parametrize(
    "cases,floating",
    [
        ([(0, 2, 1, 2), (0, 2, 3, 3)], 0.05000000000000002),
        ([(1, 2, 0, 2), (2, 2, 0, 3)], 0.05),
    ],
)
def test_an_exact_p_of_one_twentieth_decides_however_it_rounded(cases, floating):
    assert exact_p(cases) == Fraction(1, 20)
    assert tests.stratified_exact(cases).p_value == floating  # how double precision lands
    assert paired_verdict([c[:2] for c in cases], [c[2:] for c in cases], 0.05).verdict != "indistinguishable"
    assert tests.decides(floating, 0.05) and not tests.decides(0.0500001, 0.05)


# -- the fast batch tests are the verdict's tests -------------------------------------------------


def test_the_batch_stratified_test_is_the_stratified_exact_test():
    rng = np.random.default_rng(11)
    for cases, repeats in [(1, 1), (3, 2), (5, 3), (12, 10), (4, 60), (20, 150)]:
        rates = rng.random((60, cases))
        a = rng.binomial(repeats, rates)
        b = rng.binomial(repeats, np.clip(rates + rng.normal(0, 0.2, rates.shape), 0, 1))
        p, signs = power.stratified_p_batch(a, b, repeats)
        for i in range(60):
            table = [(int(x), repeats, int(y), repeats) for x, y in zip(a[i], b[i], strict=True)]
            reference = tests.stratified_exact(table)
            assert p[i] == pytest.approx(reference.p_value, abs=1e-10)
            assert signs[i] == reference.sign


def test_the_batch_permutation_test_is_the_case_permutation_test():
    rng = np.random.default_rng(12)
    for g_a, g_b in [(3, 3), (4, 6), (8, 8), (12, 12)]:
        rates_a, rates_b = rng.random((20, g_a)).round(1), rng.random((20, g_b)).round(1)
        batch = power.permutation_p_batch(rates_a, rates_b)
        for i in range(20):
            assert batch[i] == pytest.approx(tests.case_permutation(rates_a[i], rates_b[i]), abs=1e-12)


def brute_force_power(n, p1, p2, alpha=0.05):
    from scipy import stats as sp

    total = 0.0
    for x, y in itertools.product(range(n + 1), repeat=2):
        if tests.stratified_exact([(x, n, y, n)]).p_value <= alpha * (1 + 1e-9):
            total += sp.binom.pmf(x, n, p1) * sp.binom.pmf(y, n, p2)
    return total


@pytest.mark.parametrize(
    "n,p1,p2", [(1, 0.2, 0.9), (4, 0.0, 1.0), (7, 0.3, 0.9), (15, 0.85, 1.0), (25, 0.5, 0.8)]
)
def test_fisher_power_is_exact(n, p1, p2):
    assert power.fisher_power(n, p1, p2, 0.05) == pytest.approx(brute_force_power(n, p1, p2), abs=1e-12)


def test_smallest_attainable_p_values_by_enumeration():
    assert power.fisher_smallest_p(2) == pytest.approx(1 / 3)  # 2/2 against 0/2
    assert tests.stratified_exact([(2, 2, 0, 2)]).p_value == pytest.approx(power.fisher_smallest_p(2))
    assert power.permutation_smallest_p(3, 3) == pytest.approx(0.1)
    assert tests.case_permutation([1, 1, 1], [0, 0, 0]) == pytest.approx(0.1)
    table = [(3, 3, 0, 3)] * 2
    assert tests.stratified_exact(table).p_value == pytest.approx(power.stratified_smallest_p(2, 3))


def test_boschloo_in_numpy_matches_scipy():
    from scipy import stats as sp

    rng = np.random.default_rng(13)
    for _ in range(25):
        n1, n2 = int(rng.integers(1, 40)), int(rng.integers(1, 40))
        k1, k2 = int(rng.integers(0, n1 + 1)), int(rng.integers(0, n2 + 1))
        expected = sp.boschloo_exact([[k1, k2], [n1 - k1, n2 - k2]]).pvalue
        if not math.isnan(expected):
            assert tests.boschloo_p(k1, n1, k2, n2) == pytest.approx(expected, rel=1e-9, abs=1e-12)


# -- compare stays fast -------------------------------------------------------------------------


def test_no_between_case_spread_is_an_icc_of_exactly_zero_in_the_hint():
    # 11/12 against 12/12 over 4 cases x 3 repeats (the comparison that once took 409 s).
    a = Side("A", {"c0": [3, 3, 0], "c1": [3, 3, 0], "c2": [3, 3, 0], "c3": [2, 3, 0]})
    b = Side("B", {"c0": [3, 3, 0], "c1": [3, 3, 0], "c2": [3, 3, 0], "c3": [3, 3, 0]})
    result = compare_sides(a, b)
    assert result["verdict"] == "indistinguishable"
    hint = result["repeats_needed"]
    assert hint["icc"] == 0.0 and hint["cases"] == 4
    assert hint["repeats"] is None or hint["repeats"] > 3


# -- resume takes the flags that may change, and refuses the rest ------------------------------


def interrupted_run(tmp_path, server):
    run = probe(tmp_path, server, ["good"], "-n", "2", "--concurrency", "1", "--rpm", "60000")
    samples = read_jsonl(run / "samples.jsonl")
    (run / "samples.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples[:5]))
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["status"] = "interrupted"
    (run / "manifest.json").write_text(json.dumps(manifest))
    return run


def test_resume_takes_how_it_calls_and_says_so(tmp_path):
    with LocalServer(reply) as server:
        run = interrupted_run(tmp_path, server)
        result = CliRunner().invoke(
            main,
            ["run", "--resume", str(run), "--concurrency", "8", "--rpm", "100000", "--max-attempts", "2"],
        )
    assert result.exit_code == 0, result.output
    assert "resume: --concurrency 8 from now on (the run had 1)" in result.stderr
    assert "resume: --rpm 100000 from now on (the run had 60000.0)" in result.stderr
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["parameters"]["concurrency"] == 8 and manifest["parameters"]["rpm"] == 100000
    assert manifest["parameters"]["max_attempts"] == 2
    assert manifest["resumes"][-1]["changed"]["concurrency"] == {"from": 1, "to": 8}
    assert len(read_jsonl(run / "samples.jsonl")) == 12


@pytest.mark.parametrize(
    "flag",
    [
        ["--temperature", "0.5"],
        ["--alpha", "0.1"],
        ["--metric", "header_absent"],
        ["--until-decided"],
        ["--seed", "3"],
        ["--top-k", "2"],
        ["--detect", "10"],
        ["--stream"],
    ],
)
def test_resume_refuses_every_other_flag(tmp_path, flag):
    with LocalServer(reply) as server:
        run = interrupted_run(tmp_path, server)
        result = CliRunner().invoke(main, ["run", "--resume", str(run), *flag])
    assert result.exit_code == 2
    assert f"not {flag[0]}" in result.stderr and "it accepts only --concurrency" in result.stderr
    assert len(read_jsonl(run / "samples.jsonl")) == 5  # nothing ran
