"""`probe compare` and `probe plan` against published values, on real recorded runs."""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import write_probeset
from servers import LocalServer, Reply

from promptprobe.cli import main
from promptprobe.compare import Side, compare_sides, parse_selector
from promptprobe.config import load_config
from promptprobe.models import parse_model_spec
from promptprobe.probeset import load_probeset
from promptprobe.prompts import load_prompt
from promptprobe.runner import RunOptions, run_probe
from promptprobe.simulation import simulate
from promptprobe.stats import boschloo_p, newcombe

# Newcombe (1998) Table II, method 10.
NEWCOMBE_TABLE_II = [
    ((56, 70), (48, 80), (0.0524, 0.3339)),
    ((9, 10), (3, 10), (0.1705, 0.8090)),
    ((6, 7), (2, 7), (0.0582, 0.8062)),
    ((5, 56), (0, 29), (-0.0381, 0.1926)),
    ((0, 10), (0, 20), (-0.1611, 0.2775)),
    ((10, 10), (0, 20), (0.6791, 1.0000)),
]
# statsmodels / scipy reference values (../shared/reference/statistics.md).
REFERENCE = [
    ((13, 15), (11, 15), (-0.158438, 0.403773), 0.421339, "indistinguishable"),
    ((17, 18), (9, 18), (0.153273, 0.659052), 0.003987, "A>B"),
    ((30, 30), (26, 30), (-0.005675, 0.296813), 0.069791, "indistinguishable"),
    ((60, 60), (45, 60), (0.139873, 0.372321), 1.39228e-05, "A>B"),
    ((5, 5), (4, 5), (-0.264325, 0.624465), 0.753906, "indistinguishable"),
    ((28, 30), (20, 30), (0.063268, 0.451911), 0.013502, "A>B"),
]


@pytest.mark.parametrize("a,b,expected", NEWCOMBE_TABLE_II)
def test_newcombe_table_ii(a, b, expected):
    assert newcombe(*a, *b) == pytest.approx(expected, abs=1e-4)


@pytest.mark.parametrize("a,b,interval,p,verdict", REFERENCE)
def test_reference_intervals_p_values_and_verdicts(a, b, interval, p, verdict):
    assert newcombe(*a, *b) == pytest.approx(interval, abs=1e-4)
    assert boschloo_p(*a, *b) == pytest.approx(p, rel=1e-3, abs=1e-6)

    def side(label, k, n, prefix):  # one repeat per case: no clustering
        return Side(label, {f"{prefix}{i}": (int(i < k), 1) for i in range(n)})

    for prefix_b, design in (("q", "paired"), ("other", "unpaired")):
        if design == "paired" and a[1] != b[1]:
            continue
        result = compare_sides(side("A", *a, "q"), side("B", *b, prefix_b))
        assert result["design"] == design
        assert result["verdict"] == verdict
        assert result["newcombe"] == pytest.approx(interval, abs=1e-4)
        assert result["p_boschloo"] == pytest.approx(p, rel=1e-3, abs=1e-6)
        assert result["diff"] == pytest.approx(a[0] / a[1] - b[0] / b[1])


def test_sentence_matches_the_issue_example():
    from promptprobe.compare import sentence

    a = Side("A", {f"q{i}": (int(i < 13), 1) for i in range(15)})
    b = Side("B", {f"q{i}": (int(i < 11), 1) for i in range(15)})
    result = compare_sides(a, b)
    assert result["n_needed_per_arm"] == 141  # exact rates 13/15 vs 11/15, classic pooled formula
    assert sentence(result, cases=10) == (
        "indistinguishable: 13/15 vs 11/15 (difference +13 points, 95% CI -16 to +40); to detect a "
        "13-point difference you need about 141 samples per arm (15 repeats of this 10-case probe "
        "set, more if its cases are clustered)")


def test_unpaired_clustered_uses_adjusted_interval():
    # 24/30 clustered as in the reference example vs 15/30 from other questions.
    a = Side("A", {f"a{i}": (k, 3) for i, k in enumerate([3, 3, 3, 3, 3, 3, 0, 3, 2, 1])})
    b = Side("B", {f"b{i}": (k, 3) for i, k in enumerate([2, 1, 2, 1, 2, 1, 2, 1, 2, 1])})
    result = compare_sides(a, b)
    assert result["design"] == "unpaired" and result["paired"] is None
    assert result["a"]["wilson_eff"] == pytest.approx((0.491762, 0.942975), abs=1e-6)
    assert result["newcombe"][0] > 0  # the naive interval would call it
    lo, hi = result["newcombe_eff"]
    assert lo < 0 < hi and result["verdict"] == "indistinguishable"


def test_paired_view_and_generalisation():
    a = Side("A", {f"q{i}": (3, 3) for i in range(10)})
    b = Side("B", {f"q{i}": (1, 3) for i in range(10)})
    result = compare_sides(a, b)
    assert result["design"] == "paired" and result["verdict"] == "A>B"
    assert result["paired"]["mean_diff"] == pytest.approx(2 / 3)
    assert result["paired"]["t_interval"] == pytest.approx((2 / 3, 2 / 3))  # zero spread
    assert [c["diff"] for c in result["paired"]["cases"]] == pytest.approx([2 / 3] * 10)


@pytest.mark.parametrize("paired", [True, False], ids=["paired", "unpaired"])
@pytest.mark.parametrize("rate", [0.8, 0.6])
def test_simulated_false_claims_stay_near_alpha(paired, rate):
    result = simulate(rate, rate, paired=paired, trials=400)
    assert result.rate <= 0.075
    if not paired:
        assert result.naive_rate > result.rate  # what the cluster adjustment is for


@pytest.mark.parametrize("paired", [True, False], ids=["paired", "unpaired"])
def test_simulated_clear_differences_are_found(paired):
    assert simulate(0.95, 0.5, paired=paired, trials=200).rate >= 0.75


# -- plan --------------------------------------------------------------------------------


@pytest.mark.parametrize("p1,p2,n", [(0.85, 1.0, 48), (0.87, 0.73, 127), (0.9, 0.7, 62), (0.95, 0.8, 76), (0.5, 0.6, 388)])
def test_plan_sample_size(p1, p2, n):
    result = CliRunner().invoke(main, ["plan", "--p1", str(p1), "--p2", str(p2), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == {"p1": p1, "p2": p2, "n_per_arm": n, "alpha": 0.05, "power": 0.8}


def test_plan_gate():
    result = CliRunner().invoke(main, ["plan", "--gate-any-of", "5", "--p", "0.87", "--json"])
    values = json.loads(result.output)
    assert values["p"] == 0.87
    assert values["block_probability"] == pytest.approx(
        {"1": 0.13, "2": 0.2431, "3": 0.341497, "4": 0.427102, "5": 0.501579}, abs=1e-6)
    text = CliRunner().invoke(main, ["plan", "--gate-any-of", "3", "--p", "0.87"]).output
    assert "k=3: 34.1%" in text and "redder" in text and "rate with an interval" in text


def test_plan_repeats_with_clustering():
    result = CliRunner().invoke(main, ["plan", "--p1", "0.85", "--p2", "1.0", "--cases", "30", "--icc", "0.2", "--json"])
    values = json.loads(result.output)
    # n_eff(m) = 30 m / (1 + 0.2 (m - 1)) >= 48  ->  m >= 48 * 0.8 / (30 - 9.6) = 1.88  ->  2 repeats
    assert values["repeats"] == 2
    impossible = CliRunner().invoke(main, ["plan", "--p1", "0.85", "--p2", "1.0", "--cases", "10", "--icc", "0.5"])
    assert "cannot get there at any number of repeats" in impossible.output


def test_plan_detectable_difference():
    result = CliRunner().invoke(main, ["plan", "--n", "48", "--p1", "0.85", "--json"])
    values = json.loads(result.output)
    # 48 per arm is exactly what 0.85 vs 1.0 needs, so the detectable rise is about 15 points.
    assert values["detectable_difference"]["up"] == pytest.approx(0.15, abs=0.005)


def test_plan_bad_flags_are_exit_2():
    result = CliRunner().invoke(main, ["plan", "--p1", "0.5"])
    assert result.exit_code == 2 and "give --p1 and --p2" in result.stderr
    assert CliRunner().invoke(main, ["plan", "--p1", "1.5", "--p2", "0.5"]).exit_code == 2


# -- on recorded runs --------------------------------------------------------------------


def record_run(tmp_path: Path, present: dict[str, list[int]], cases: int = 5, repeats: int = 3,
               probeset_name: str = "p.toml") -> Path:
    """A real run through a scripted server: per prompt name, present headers per case."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    probeset = write_probeset(tmp_path / probeset_name, [(f"c{i}", f"question {i}", None) for i in range(cases)],
                              repeats=repeats)
    prompts = []
    for name in present:
        path = tmp_path / f"{name}.md"
        path.write_text(f"VERSION={name}\n")
        prompts.append(load_prompt(path))
    seen: dict[tuple[str, int], int] = {}

    def reply(request):
        system = request.json["messages"][0]["content"]
        name = system.split("=")[1].strip()
        case = int(request.json["messages"][-1]["content"].split()[-1])
        seen[(name, case)] = seen.get((name, case), 0) + 1
        return Reply("[[ANSWER]]\nok" if seen[(name, case)] <= present[name][case] else "ok\n[[ANSWER]]")

    with LocalServer(reply) as server:
        outcome = run_probe(load_probeset(probeset), prompts, [parse_model_spec(f"openai:m@{server.url}/v1")],
                            load_config(None), RunOptions(runs_dir=tmp_path / "runs", concurrency=1))
    return outcome.path


def compare_cli(*args):
    result = CliRunner().invoke(main, ["compare", *args])
    assert "Traceback" not in result.output
    return result


def test_compare_inside_one_run(tmp_path):
    run = record_run(tmp_path, {"old": [3, 3, 3, 3, 3], "new": [0, 1, 0, 0, 1]})
    result = compare_cli(f"{run}#prompt=old", f"{run}#prompt=new", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert (data["a"]["k"], data["a"]["n"], data["b"]["k"], data["b"]["n"]) == (15, 15, 2, 15)
    assert data["design"] == "paired" and data["verdict"] == "A>B"
    assert [c["case_id"] for c in data["paired"]["cases"]] == ["c0", "c1", "c2", "c3", "c4"]
    assert set(data) >= {"metric", "design", "a", "b", "diff", "newcombe", "newcombe_eff", "p_boschloo",
                         "paired", "verdict", "n_needed_per_arm"}
    assert compare_cli(f"{run}#prompt=old", f"{run}#prompt=new", "--fail-if-worse").exit_code == 4
    assert compare_cli(f"{run}#prompt=new", f"{run}#prompt=old", "--fail-if-worse").exit_code == 0
    table = compare_cli(f"{run}#prompt=old", f"{run}#prompt=new").output
    assert "A>B: 15/15 vs 2/15" in table and "cases that moved (5 of 5)" in table
    assert "would it generalise" in table


def test_compare_across_runs_and_all_metrics(tmp_path):
    first = record_run(tmp_path / "one", {"v1": [3, 3, 2, 3, 3]})
    second = record_run(tmp_path / "two", {"v2": [3, 2, 3, 3, 2]})
    result = compare_cli(str(first), str(second), "--json")
    data = json.loads(result.output)
    assert data["design"] == "paired" and data["verdict"] == "indistinguishable"
    assert data["n_needed_per_arm"] is not None
    everything = compare_cli(str(first), str(second), "--all", "--json")
    metrics = [r["metric"] for r in json.loads(everything.output)]
    assert metrics[:3] == ["header_present", "header_absent", "header_misplaced"]
    text = compare_cli(str(first), str(second), "--all").output
    assert "header_misplaced" in text and "indistinguishable" in text


def test_compare_mismatched_probe_sets_is_said(tmp_path):
    first = record_run(tmp_path / "one", {"v1": [3, 3, 3, 3, 3]}, cases=5)
    second = record_run(tmp_path / "two", {"v1": [3, 3, 3, 3, 3, 3]}, cases=6)
    result = compare_cli(str(first), str(second))
    assert result.exit_code == 0
    assert "note: the two sides ran different probe sets: no paired view" in result.output
    data = json.loads(compare_cli(str(first), str(second), "--json").output)
    assert data["design"] == "unpaired" and data["paired"] is None


def test_ambiguous_and_unknown_selectors_are_exit_2(tmp_path):
    run = record_run(tmp_path, {"old": [3] * 5, "new": [3] * 5})
    result = compare_cli(str(run), f"{run}#prompt=new")
    assert result.exit_code == 2
    assert "matches 2 arms; the run has: prompt=old,model=openai:m@" in result.stderr
    result = compare_cli(f"{run}#prompt=nope", f"{run}#prompt=new")
    assert result.exit_code == 2 and "matches no arm" in result.stderr
    assert compare_cli(f"{run}#prompt=old", f"{run}#prompt=new", "--metric", "vibes").exit_code == 2
    assert compare_cli(f"{run}#colour=old", f"{run}#prompt=new").exit_code == 2


def test_selector_parsing_keeps_urls():
    path, filters = parse_selector("runs/x#prompt=a,model=openai:m@http://h:1/v1")
    assert path == Path("runs/x") and filters == {"prompt": "a", "model": "openai:m@http://h:1/v1"}
