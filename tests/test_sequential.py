"""`probe run --until-decided`: rounds against the local test server, the e-value against its
reference values, the run directory, report/compare/resume on a sequential run, and the plan."""

import itertools
import json
import math

import pytest
from click.testing import CliRunner
from conftest import run_dir_of, write_probeset
from servers import LocalServer, Reply

from promptprobe.cli import main
from promptprobe.jsonio import read_jsonl
from promptprobe.stats.sequential import decide, mixture_e_value

# ../shared/reference/statistics.md: the uniform mixture e = 2^d B(s+1, d-s+1).
UNIFORM = [((8, 8), 28.4444), ((7, 8), 3.5556), ((10, 12), 4.7739), ((15, 20), 3.2206)]


@pytest.mark.parametrize("sd,e", UNIFORM)
def test_uniform_mixture_reference_values(sd, e):
    s, d = sd
    assert mixture_e_value(s, d, a=1.0) == pytest.approx(e, abs=1e-4)


@pytest.mark.parametrize("a", [1.0, 0.5])
@pytest.mark.parametrize("d", [1, 5, 12, 20])
def test_the_mixture_has_mean_one_under_the_null(a, d):
    # A nonnegative martingale with mean 1 (Ville): the sum over every sequence of d fair coins.
    mean = sum(math.comb(d, s) * 0.5**d * mixture_e_value(s, d, a) for s in range(d + 1))
    assert mean == pytest.approx(1.0, abs=1e-12)


def test_the_kt_mixture_by_enumeration_of_sequences():
    # e for s of d is the ratio of the KT probability of the sequence to 2^-d, for any order.
    def kt_probability(sequence):
        p, ones = 1.0, 0
        for i, x in enumerate(sequence):
            p1 = (ones + 0.5) / (i + 1)
            p *= p1 if x else 1 - p1
            ones += x
        return p

    for sequence in itertools.product([0, 1], repeat=7):
        s = sum(sequence)
        assert mixture_e_value(s, 7) == pytest.approx(kt_probability(sequence) * 2**7, rel=1e-12)


def test_decide_needs_the_threshold_and_takes_the_direction():
    assert decide(8, 8, 0.05, a=1.0) == "B>A"  # 28.4 >= 20
    assert decide(0, 8, 0.05, a=1.0) == "A>B"
    assert decide(7, 8, 0.05, a=1.0) is None  # 3.6 < 20


def two_prompt_run(tmp_path, rates: dict[str, float], *extra: str, cases: int = 6):
    """Prompts a and b; each case's replies carry the header in the stated share of calls."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    probeset = write_probeset(tmp_path / "p.toml", [(f"c{i}", f"question {i}", None) for i in range(cases)])
    prompts = []
    for name in rates:
        (tmp_path / f"{name}.md").write_text(f"VERSION={name}\n")
        prompts += ["--prompt", str(tmp_path / f"{name}.md")]
    seen: dict = {}

    def reply(request):
        name = request.json["messages"][0]["content"].split("=")[1].strip()
        key = (name, request.json["messages"][-1]["content"])
        seen[key] = seen.get(key, 0) + 1
        # Deterministic: the header in round r when r * rate crosses a whole number.
        count = seen[key]
        present = math.floor(count * rates[name]) > math.floor((count - 1) * rates[name])
        return Reply("[[ANSWER]]\nok" if present else "ok, no header")

    with LocalServer(reply) as server:
        result = CliRunner().invoke(main, ["run", "--retrieval", "none", str(probeset), *prompts, "--model", f"openai:m@{server.url}/v1",
                                           "--until-decided", "--runs-dir", str(tmp_path / "runs"), *extra])
    return result


def test_clearly_different_prompts_stop_early_with_the_right_verdict(tmp_path):
    result = two_prompt_run(tmp_path, {"a": 0.0, "b": 1.0}, "--max-rounds", "10")
    assert result.exit_code == 0, result.output
    assert "sequential: rounds of 6 cases x 2 arms on header_present" in result.stderr
    run = run_dir_of(result)
    rounds = read_jsonl(run / "sequential.jsonl")
    assert [r["round"] for r in rounds] == [1, 2]  # 6 discordant pairs a round; --min-rounds 2
    assert rounds[-1]["decision"] == "B>A" and rounds[-1]["stop"] is True
    assert rounds[-1]["e_value"] >= 20 and rounds[-1]["b_higher_total"] == 12
    samples = read_jsonl(run / "samples.jsonl")
    assert sorted(s["sample_id"] for s in samples) == sorted(
        f"c{i}.r{r}.a{a}" for i in range(6) for r in (1, 2) for a in (1, 2))  # exactly the completed rounds
    assert len(read_jsonl(run / "retrievals.jsonl")) == 12  # one per (case, round), shared by both arms
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["sequential"]["max_rounds"] == 10 and manifest["status"] == "complete"
    said = result.stdout.replace("\n  ", " ")  # lines wrapped at the terminal's width, joined
    assert "sequential on header_present: b better: B>A (b's rate is higher), decided at round 2 (cap 10 rounds); e = " in said
    compare = CliRunner().invoke(main, ["compare", f"{run}#prompt=a", f"{run}#prompt=b", "--json"])
    data = json.loads(compare.stdout)
    assert data["design"] == "sequential" and data["verdict"] == "B>A"
    assert data["p_value"] == pytest.approx(1 / rounds[-1]["e_value"])  # the anytime-valid p
    assert any("fixed-n tests after optional stopping are not valid" in n for n in data["notes"])
    reverse = json.loads(CliRunner().invoke(main, ["compare", f"{run}#prompt=b", f"{run}#prompt=a", "--json"]).stdout)
    assert reverse["verdict"] == "A>B"


def test_equal_prompts_run_to_the_cap_and_are_indistinguishable(tmp_path):
    result = two_prompt_run(tmp_path, {"a": 0.5, "b": 0.5}, "--max-rounds", "4")
    assert result.exit_code == 0, result.output
    rounds = read_jsonl(run_dir_of(result) / "sequential.jsonl")
    assert len(rounds) == 4 and rounds[-1]["decision"] == "indistinguishable" and rounds[-1]["stop"]
    assert all(r["decision"] is None for r in rounds[:-1])
    assert len(read_jsonl(run_dir_of(result) / "samples.jsonl")) == 4 * 6 * 2
    assert "sequential on header_present: indistinguishable at the cap of 4 rounds; e = " in result.stdout.replace(
        "\n  ", " ")


def test_only_two_arms(tmp_path):
    result = two_prompt_run(tmp_path, {"a": 1.0, "b": 1.0, "c": 1.0})
    assert result.exit_code == 2 and "exactly two arms" in result.stderr


def test_the_default_cap_is_shown_before_the_run_and_comes_from_detect(tmp_path):
    from promptprobe.stats.sequential import rounds_for_power

    result = two_prompt_run(tmp_path, {"a": 0.0, "b": 1.0})
    assert result.exit_code == 0, result.output
    cap = rounds_for_power(0.15, 6)
    assert f"or at the cap of {cap.rounds} rounds ({cap.rounds * 6} samples per arm" in result.stderr
    assert "decide a 15-point difference in" in result.stderr
    manifest = json.loads((run_dir_of(result) / "manifest.json").read_text())
    assert manifest["sequential"]["max_rounds"] == cap.rounds and manifest["sequential"]["detect"] == 0.15
    wider = two_prompt_run(tmp_path / "wider", {"a": 0.0, "b": 1.0}, "--detect", "40")
    assert f"the cap of {rounds_for_power(0.4, 6).rounds} rounds" in wider.stderr
    assert rounds_for_power(0.4, 6).rounds < cap.rounds


def test_resume_continues_the_rounds(tmp_path):
    result = two_prompt_run(tmp_path, {"a": 0.5, "b": 0.5}, "--max-rounds", "3")
    run = run_dir_of(result)
    # Take the run back to the middle of round 2 as if it had been killed there.
    samples = read_jsonl(run / "samples.jsonl")
    keep = [s for s in samples if s["repeat"] == 1] + [s for s in samples if s["repeat"] == 2][:5]
    (run / "samples.jsonl").write_text("".join(json.dumps(s) + "\n" for s in keep))
    (run / "sequential.jsonl").write_text(json.dumps(read_jsonl(run / "sequential.jsonl")[0]) + "\n")
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["status"] = "interrupted"
    (run / "manifest.json").write_text(json.dumps(manifest))
    with LocalServer(lambda r: Reply("ok, no header")) as server:
        manifest["models"][0]["spec"] = f"openai:m@{server.url}/v1"
        manifest["arms"] = [dict(a, model=manifest["models"][0]["spec"]) for a in manifest["arms"]]
        (run / "manifest.json").write_text(json.dumps(manifest))
        resumed = CliRunner().invoke(main, ["run", "--resume", str(run)])
    assert resumed.exit_code == 0, resumed.output
    rounds = read_jsonl(run / "sequential.jsonl")
    assert [r["round"] for r in rounds] == [1, 2, 3] and rounds[-1]["decision"] == "indistinguishable"
    assert len(read_jsonl(run / "samples.jsonl")) == 3 * 6 * 2


def test_plan_sequential():
    result = CliRunner().invoke(main, ["plan", "--sequential", "--p1", "0.9", "--p2", "0.5", "--cases", "10",
                                       "--format", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert 2 <= data["rounds"]["median"] <= data["rounds"]["p90"] <= data["max_rounds"]
    assert data["samples_per_arm"]["median"] == 10 * data["rounds"]["median"]
    assert data["decided_share"] > 0.9 and data["fixed_rounds"] >= 1
    text = CliRunner().invoke(main, ["plan", "--sequential", "--p1", "0.9", "--p2", "0.5", "--cases", "10"]).output
    assert "samples per arm to a decision: median" in text and "90th percentile" in text
