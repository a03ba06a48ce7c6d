"""The interval beside a verdict agrees with it (issue 24, item 1): the paired verdict's interval
is the stratified exact test inverted, checked against a direct enumeration of the noncentral
hypergeometric convolution, scipy's single-table exact conditional odds ratio, and end to end:
the table, the sentence, the JSON, the FAIL line and the HTML boxes at the level each verdict was
decided at."""

import html
import itertools
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import run_dir_of, write_probeset
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats
from scipy.stats.contingency import odds_ratio
from servers import LocalServer, Reply

from promptprobe.cli import main
from promptprobe.comparison import Side, adjust, compare_sides, effective_alpha, finish
from promptprobe.comparison.words import points
from promptprobe.stats.conditional import conditional_interval, model_of
from promptprobe.stats.effect import mantel_haenszel
from promptprobe.stats.sequential import look
from promptprobe.stats.sequential_interval import Rounds, sequential_interval, stagewise_p
from promptprobe.stats.tests import RELATIVE_TOLERANCE, decides, decision_limit, stratified_exact
from promptprobe.stats.verdict import paired_verdict
from promptprobe.views.compare import render_comparison
from promptprobe.views.html import report_html

# -- against enumeration -------------------------------------------------------------------------


def enumerated_p(cases, thetas):
    """p(theta) for each theta: every table of the cases enumerated, weights C(nA,a)C(nB,t-a)e^(-theta·a)."""
    per_case = []
    for a, n_a, b, n_b in cases:
        t = a + b
        per_case.append([(x, math.comb(n_a, x) * math.comb(n_b, t - x)) for x in range(max(0, t - n_b), min(t, n_a) + 1)])
    totals: dict[int, int] = {}
    for combo in itertools.product(*per_case):
        s = sum(x for x, _ in combo)
        totals[s] = totals.get(s, 0) + math.prod(w for _, w in combo)
    values = np.array(sorted(totals), dtype=float)
    logs = np.log(np.array([float(totals[s]) for s in sorted(totals)]))
    at = int(np.nonzero(values == sum(c[0] for c in cases))[0][0])
    tilted = logs[None, :] - np.asarray(thetas)[:, None] * values[None, :]
    weights = np.exp(tilted - tilted.max(axis=1, keepdims=True))
    extreme = weights <= weights[:, [at]] * (1 + RELATIVE_TOLERANCE)
    return (weights * extreme).sum(axis=1) / weights.sum(axis=1)


GRID = np.round(np.linspace(-14, 14, 28001), 9)  # steps of 0.001 in log odds ratio


def enumerated_hull(cases, alpha):
    """The interval the construction promises, found by brute force on a fine grid: decided, the
    hull of the accepted log odds ratios on the estimate's side; not decided, of all and 0."""
    result = stratified_exact(cases)
    accepted = enumerated_p(cases, GRID) > decision_limit(alpha)
    accepted[GRID == 0] = not decides(result.p_value, alpha)
    if decides(result.p_value, alpha):
        points = GRID[accepted & (GRID * result.sign > 0)]
    else:
        points = np.append(GRID[accepted], 0.0)
    return points.min(), points.max(), result


def random_cases(rng, most_cases=4, most_repeats=6):
    cases = []
    for _ in range(int(rng.integers(1, most_cases + 1))):
        n_a, n_b = int(rng.integers(1, most_repeats + 1)), int(rng.integers(1, most_repeats + 1))
        cases.append((int(rng.integers(0, n_a + 1)), n_a, int(rng.integers(0, n_b + 1)), n_b))
    return cases


def test_the_inverted_intervals_ends_are_the_enumerated_ones():
    rng = np.random.default_rng(5)
    for _ in range(80):
        cases = random_cases(rng)
        alpha = float(rng.choice([0.01, 0.05, 0.2, 0.5]))
        low, high, result = enumerated_hull(cases, alpha)
        theta = conditional_interval(cases, result.p_value, alpha, result.sign).theta
        for found, expected in zip(theta, (low, high), strict=True):
            if abs(expected) >= 13.99:  # the grid's end: the construction's end is infinite or far out
                assert math.isinf(found) or abs(found) > 13, (cases, alpha, theta, (low, high))
            else:
                assert found == pytest.approx(expected, abs=0.0011), (cases, alpha, theta, (low, high))


def test_the_noncentral_hypergeometric_is_scipys():
    # The weights the enumeration and the model use are Fisher's noncentral hypergeometric.
    for n_a, n_b, t, theta in [(3, 4, 3, 0.7), (5, 2, 4, -1.3), (6, 6, 6, 2.0)]:
        xs = np.arange(max(0, t - n_b), min(t, n_a) + 1)
        weights = np.array([math.comb(n_a, x) * math.comb(n_b, t - x) * math.exp(-theta * x) for x in xs])
        reference = stats.nchypergeom_fisher(n_a + n_b, n_a, t, math.exp(-theta)).pmf(xs)
        assert weights / weights.sum() == pytest.approx(reference, rel=1e-10)


def test_one_table_matches_scipys_exact_conditional_odds_ratio():
    rng = np.random.default_rng(2)
    for _ in range(300):
        n_a, n_b = int(rng.integers(1, 12)), int(rng.integers(1, 12))
        a, b = int(rng.integers(0, n_a + 1)), int(rng.integers(0, n_b + 1))
        cases = [(a, n_a, b, n_b)]
        reference = odds_ratio(np.array([[b, n_b - b], [a, n_a - a]]), kind="conditional")
        model = model_of(cases)
        if model.moving:  # the conditional maximum-likelihood estimate of B's odds over A's
            estimate = model.estimate_theta()
            expected = reference.statistic
            if math.isinf(estimate):
                assert expected == (math.inf if estimate > 0 else 0.0)
            else:
                assert estimate == pytest.approx(math.log(expected), abs=1e-6)
        # The minimum-likelihood interval lies inside scipy's central one (two one-sided tests).
        result = stratified_exact(cases)
        low, high = conditional_interval(cases, result.p_value, 0.05, result.sign).theta
        central = reference.confidence_interval(0.95)
        assert low >= (math.log(central.low) if central.low > 0 else -math.inf) - 1e-6
        assert high <= (math.log(central.high) if central.high < math.inf else math.inf) + 1e-6


def test_at_theta_zero_it_is_the_verdicts_test():
    rng = np.random.default_rng(8)
    for _ in range(100):
        cases = random_cases(rng, 5, 8)
        assert enumerated_p(cases, [0.0])[0] == pytest.approx(stratified_exact(cases).p_value, abs=1e-12)


def test_the_estimate_is_the_mantel_haenszel_risk_difference_at_the_conditional_mle():
    rng = np.random.default_rng(9)
    for _ in range(100):
        cases = random_cases(rng, 5, 8)
        model = model_of(cases)
        if not model.moving:
            continue
        assert model.risk_difference(model.estimate_theta()) == pytest.approx(
            mantel_haenszel(cases).estimate, abs=1e-9)


counts = st.integers(1, 7).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n)))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(counts, counts), min_size=1, max_size=8), st.sampled_from([0.01, 0.05, 0.1, 0.3]))
def test_the_interval_excludes_0_exactly_when_the_verdict_decides(cases, alpha):
    decision = paired_verdict([c[0] for c in cases], [c[1] for c in cases], alpha)
    low, high = decision.interval_at(alpha)
    assert -1 <= low <= decision.effect.estimate <= high <= 1
    assert (low > 0 or high < 0) == decides(decision.p_value, alpha)
    if decides(decision.p_value, alpha):
        assert (low > 0) == (decision.verdict == "B>A") and decision.effect.estimate * (1 if low > 0 else -1) > 0
    assert decision.effect.interval == (low, high)


# -- the reproductions -------------------------------------------------------------------


def test_one_case_0_of_2_against_2_of_2_has_no_interval_excluding_0():
    decision = paired_verdict([(0, 2)], [(2, 2)])
    assert decision.p_value == pytest.approx(1 / 3) and decision.verdict == "indistinguishable"
    low, high = decision.interval_at(0.05)
    assert low < 0 < high and high == 1.0  # before: "+100, 95% CI +27 to +100" beside p = 0.333
    assert all(decision.interval_at(a)[0] <= 0 for a in (0.01, 0.1, 0.3))  # every level p does not reach
    assert decision.interval_at(0.4)[0] > 0  # p = 1/3 decides at 0.4, and the interval says so
    result = finish(compare_sides(Side("A", {"q": [0, 2, 0]}, name="old"), Side("B", {"q": [2, 2, 0]}, name="new")))
    assert result["words"]["verdict"] == "can't tell yet" and result["better_arm"] is None


UNBALANCED_A = [(7, 10), (3, 3), (3, 3), (10, 10)]
UNBALANCED_B = [(1, 3), (1, 2), (2, 2), (2, 3)]


def test_an_unbalanced_paired_verdict_has_an_interval_on_its_side():
    decision = paired_verdict(UNBALANCED_A, UNBALANCED_B)
    assert decision.p_value == pytest.approx(0.04465, abs=1e-5) and decision.verdict == "A>B"
    cases = [(a, n, b, m) for (a, n), (b, m) in zip(UNBALANCED_A, UNBALANCED_B, strict=True)]
    sato = mantel_haenszel(cases).interval
    assert sato[0] < 0 < sato[1]  # before: "A>B" beside an interval from -64 to +0.4
    low, high = decision.interval_at(0.05)
    assert low <= decision.effect.estimate <= high < 0


def interrupted_run(tmp_path: Path, a: list[tuple[int, int]], b: list[tuple[int, int]]) -> Path:
    """A real run whose samples.jsonl keeps, per prompt and case, the first n samples, of which the
    first k have the header (as an interrupted run leaves them: different repeats per case)."""
    cases = len(a)
    probeset = write_probeset(tmp_path / "p.toml", [(f"c{i}", f"question {i}", None) for i in range(cases)],
                              repeats=max(n for _, n in a + b))
    seen: dict[tuple[str, int], int] = {}
    plan = {"old": a, "new": b}

    def reply(request):
        name = request.json["messages"][0]["content"].split("=")[1].strip()
        case = int(request.json["messages"][-1]["content"].split()[-1])
        seen[(name, case)] = seen.get((name, case), 0) + 1
        return Reply("[[ANSWER]]\nok" if seen[(name, case)] <= plan[name][case][0] else "ok, no header")

    args = ["run", "--retrieval", "none", str(probeset)]
    for name in plan:
        (tmp_path / f"{name}.md").write_text(f"VERSION={name}\n")
        args += ["--prompt", str(tmp_path / f"{name}.md")]
    with LocalServer(reply) as server:
        result = CliRunner().invoke(main, [*args, "--model", f"openai:m@{server.url}/v1", "--runs-dir",
                                           str(tmp_path / "runs"), "--concurrency", "1"])
    assert result.exit_code == 0, result.output
    run = run_dir_of(result)
    kept, taken = [], {}
    for line in (run / "samples.jsonl").read_bytes().splitlines(keepends=True):
        sample = json.loads(line)
        key = (sample["prompt"], int(sample["case_id"][1:]))
        taken[key] = taken.get(key, 0) + 1
        if taken[key] <= plan[key[0]][key[1]][1]:
            kept.append(line)
    (run / "samples.jsonl").write_bytes(b"".join(kept))
    return run


def test_the_unbalanced_paired_gate_fails_beside_an_interval_that_says_so(tmp_path):
    run = interrupted_run(tmp_path, UNBALANCED_A, UNBALANCED_B)
    a, b = f"{run}#prompt=old", f"{run}#prompt=new"
    data = json.loads(CliRunner().invoke(main, ["compare", a, b, "--json"]).stdout)
    assert data["design"] == "paired" and data["p_value"] == pytest.approx(0.04465, abs=1e-5)
    assert [c["a"] for c in data["paired"]["cases"]] == [list(c) for c in UNBALANCED_A]
    low, high = data["effect"]["interval"]
    assert data["worse"] is True and high < 0 and data["effect"]["confidence"] == 0.95
    gate = CliRunner().invoke(main, ["compare", a, b, "--fail-if-worse"])
    assert gate.exit_code == 4
    fail = next(line for line in gate.stderr.splitlines() if line.startswith("FAIL:"))
    shown = re.search(r"95% CI (\S+) to (\S+);", fail)
    assert shown and float(shown.group(2)) < 0 and data["words"]["interval"] in fail
    assert data["words"]["sentence"].replace("\n", " ") in " ".join(gate.stdout.split("\n  ")).replace("\n", " ")


def test_a_family_shows_each_interval_at_the_level_its_verdict_was_decided_at():
    # Two metrics, each alone decided at p = 0.030; Holm doubles it: neither is decided, and the
    # interval beside each, at alpha·p/p_adjusted = 0.025, covers 0 where the 95% one did not.
    a = Side("A", {f"q{i}": c for i, c in enumerate([[3, 3, 0]] * 4 + [[2, 3, 0]] * 5)}, name="v1")
    b = Side("B", {f"q{i}": c for i, c in enumerate([[0, 3, 0]] + [[3, 3, 0]] * 3 + [[1, 3, 0]] * 5)}, name="v2")
    single = compare_sides(a, b, hints=False)
    alone_low, alone_high = single["effect"]["interval"]
    assert single["verdict"] == "A>B" and alone_high < 0 and single["effect"]["confidence"] == 0.95
    family = [compare_sides(a, b, "header_present", hints=False), compare_sides(a, b, "declared_correct", hints=False)]
    adjust(family, 0.05)
    for result in family:
        level = effective_alpha(result["p_value"], result["p_adjusted"], 0.05)
        assert level == pytest.approx(0.025) and result["effect"]["confidence"] == pytest.approx(0.975)
        low, high = result["effect"]["interval"]
        assert low < 0 < high and result["words"]["verdict"] == "can't tell yet"
        # One stated level, and a short phrase saying the row's own is adjusted (exact in the JSON).
        said = "95% CI {} to {}, adjusted for 2 comparisons".format(*map(points, result["effect"]["interval"]))
        assert result["words"]["interval"] == said and result["words"]["badge"].endswith(said)
    text = render_comparison({"results": [finish(r) for r in family]}, width=200)
    assert "95% CI (pts), adjusted" in text and "97.5%" not in text


def test_the_level_reproduces_the_adjusted_decision_exactly():
    rng = np.random.default_rng(4)
    for _ in range(2000):
        p = float(rng.uniform(0, 0.1))
        adjusted = min(1.0, p * float(rng.choice([1, 2, 3, 13])) * float(rng.uniform(1, 1.2)))
        assert decides(p, effective_alpha(p, adjusted, 0.05)) == decides(adjusted, 0.05)
    assert effective_alpha(0.0, 0.0, 0.05) == 0.05 and effective_alpha(0.01, 0.01, 0.05) == 0.05


def test_every_html_verdict_box_of_the_demo_agrees_with_its_verdict(demo_run, tmp_path):
    _, run = demo_run
    page = html.unescape(report_html(run))
    boxes = re.findall(r'<li data-verdict="[^"]*" class="badge (\w+)" data-metric="(\w+)">([^<]*)</li>', page)
    comparison = json.loads(CliRunner().invoke(main, [
        "compare", f"{run}#prompt=exception-only", f"{run}#prompt=always-header", "--all", "--json"]).stdout)
    words = {r["metric"]: r["words"] for r in comparison["results"]}
    assert len(boxes) == len(words) > 5
    for kind, metric, text in boxes:
        assert (kind, text) == (words[metric]["kind"], words[metric]["badge"])  # the compare object's words
        shown = re.search(r"(\d+)% CI (\S+) to (\S+?)(, adjusted for \d+ comparisons)?$", text)
        low, high = float(shown.group(2)), float(shown.group(3))
        assert shown.group(1) == "95" and bool(shown.group(4)) == (words[metric]["interval"].endswith("comparisons"))
        assert (low > 0 or high < 0) == (kind != "same"), text
    # The Holm case of the issue: an undecided metric whose 95% interval would not have covered 0.
    undecided = [r for r in comparison["results"] if r["verdict"] == "indistinguishable"]
    assert any(r["effect"]["confidence"] > 0.95 for r in undecided)


# -- the sequential boundary's interval ------------------------------------------------------------


def enumerated_stagewise(rounds: Rounds, q: float) -> float:
    """Every coin sequence of the rounds, followed through the recorded boundaries."""
    total = sum(rounds.discordant)
    extreme = 0.0
    for coins in itertools.product((1, -1), repeat=total):
        chance = math.prod(q if c > 0 else 1 - q for c in coins)
        lead, used = 0, 0
        for index, (count, needed) in enumerate(zip(rounds.discordant, rounds.needed, strict=True)):
            lead += sum(coins[used : used + count])
            used += count
            if index < len(rounds.discordant) - 1:
                if needed and abs(lead) >= needed:
                    extreme += chance
                    break
            elif abs(lead) >= abs(rounds.lead):
                extreme += chance
    return extreme


def recorded_rounds(discordant, b_higher, alpha=0.05, cap=10, min_rounds=2):
    """The rule's looks over these rounds, as sequential.jsonl records them."""
    looks = [look(discordant[: k + 1], b_higher[: k + 1], alpha, cap, min_rounds) for k in range(len(discordant))]
    rounds = Rounds(list(discordant), [seen.needed for seen in looks], looks[-1].lead, 6 * len(discordant))
    return rounds, looks[-1]


def test_the_stagewise_p_at_one_half_is_the_rules_and_matches_enumeration():
    rng = np.random.default_rng(12)
    checked = 0
    while checked < 25:
        k = int(rng.integers(1, 5))
        discordant = [int(x) for x in rng.integers(0, 5, k)]
        b_higher = [int(rng.integers(0, d + 1)) for d in discordant]
        try:
            rounds, last = recorded_rounds(discordant, b_higher)
        except ValueError:
            continue  # the rule decided before the last of these rounds
        if sum(discordant) > 12:
            continue
        checked += 1
        assert stagewise_p(rounds, np.array([0.5]))[0] == pytest.approx(last.p_value, abs=1e-12)
        for q in (0.2, 0.5, 0.7, 0.95):
            assert stagewise_p(rounds, np.array([q]))[0] == pytest.approx(enumerated_stagewise(rounds, q), abs=1e-12)


def test_the_sequential_interval_excludes_0_exactly_when_the_run_decided():
    rng = np.random.default_rng(13)
    seen = {True: 0, False: 0}
    for _ in range(300):
        k = int(rng.integers(2, 8))
        lean = float(rng.choice([0.5, 0.7, 0.9]))
        discordant = [int(x) for x in rng.integers(0, 7, k)]
        b_higher = [int(rng.binomial(d, lean)) for d in discordant]
        try:
            rounds, last = recorded_rounds(discordant, b_higher, cap=k)
        except ValueError:
            continue
        decided = last.decision is not None
        for alpha in (0.05, 0.01):
            at_level = last.decision if last.p_value <= decision_limit(alpha) else None
            estimate, (low, high) = sequential_interval(rounds, last.p_value, alpha, at_level)
            assert (low > 0 or high < 0) == (at_level is not None) and low <= estimate <= high
            if at_level:
                assert (low > 0) == (at_level == "B>A")
        seen[decided] += 1
    assert seen[True] > 20 and seen[False] > 20
