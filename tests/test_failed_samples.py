"""Failed samples and checks that do not apply to every case (issue 24, item 3), end to end:
a failed sample on a case where a [[check]] returns None for every output is outside that
check, so the design stays paired; an arm whose every sample failed is worse on every metric
that applies, user checks included; `probe compare --fail-if-worse` exits accordingly."""

import json
import uuid
from pathlib import Path

from click.testing import CliRunner
from conftest import run_dir_of
from servers import LocalServer, Reply

from promptprobe.cli import main
from promptprobe.comparison import Side, adjust, compare_sides
from promptprobe.counts import build_counts
from promptprobe.stats.verdict import paired_verdict

REFUSALS = 6  # cases 0-5 expect no_answer (the check applies), 6-11 are answerable (it does not)
CASES = 12

CHECK = '''
def leaks(sample):
    """Lower is better: a refusal that leaks. Does not apply to answerable cases."""
    if sample["case"].get("expect") != "no_answer":
        return None
    return "LEAK" in sample["text"]
'''


def write_inputs(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    module = f"leakcheck_{uuid.uuid4().hex[:8]}"
    (folder / f"{module}.py").write_text(CHECK)
    lines = ["repeats = 2"]
    for i in range(CASES):
        lines += ["[[case]]", f'id = "c{i}"', f'question = "question {i}"',
                  f'expect = "{"no_answer" if i < REFUSALS else "answer"}"']
    (folder / "p.toml").write_text("\n".join(lines) + "\n")
    for name in ("base", "cand"):
        (folder / f"{name}.md").write_text(f"VERSION={name}\n")
    (folder / "probe.toml").write_text(
        f'[retrieval]\nkind = "none"\n\n[[check]]\nname = "leaks"\nfunction = "{module}:leaks"\n'
        'higher_is_better = false\ndescription = "a refusal that leaks"\n'
    )
    return folder


def record(folder: Path, leaks: dict[str, list[int]], fail: dict, prompts=("base", "cand"), runs="runs") -> Path:
    """A run of `prompts`; per prompt, per refusal case, how many of its 2 replies leak; `fail`:
    per prompt, per case, how many of its first requests fail (every request: the value "all")."""
    seen: dict[tuple[str, int], int] = {}

    def reply(request):
        name = request.json["messages"][0]["content"].split("=")[1].strip()
        case = int(request.json["messages"][-1]["content"].split()[-1])
        seen[(name, case)] = seen.get((name, case), 0) + 1
        if fail.get(name) == "all" or seen[(name, case)] <= fail.get(name, {}).get(case, 0):
            return Reply(status=500, body=b'{"error": {"message": "upstream down"}}')
        if case >= REFUSALS:
            return Reply("[[ANSWER]]\nHere is how.")
        leaked = seen[(name, case)] <= leaks[name][case]
        return Reply("[[NO_ANSWER]]\n" + ("LEAK" if leaked else "no."))

    args = ["run", str(folder / "p.toml")]
    for name in prompts:
        args += ["--prompt", str(folder / f"{name}.md")]
    with LocalServer(reply) as server:
        result = CliRunner().invoke(main, [*args, "-m", f"openai:m@{server.url}/v1", "--config",
                                           str(folder / "probe.toml"), "--runs-dir", str(folder / runs),
                                           "--max-attempts", "1", "--concurrency", "1"])
    assert result.exit_code in (0, 1), result.output
    return run_dir_of(result)


def compare(a: str, b: str, *extra: str):
    gate = CliRunner().invoke(main, ["compare", a, b, "--metric", "leaks", "--fail-if-worse"])
    data = json.loads(CliRunner().invoke(main, ["compare", a, b, "--metric", "leaks", "--json", *extra]).stdout)
    return gate, data


def test_a_candidate_whose_every_sample_failed_fails_the_gate_on_a_check(tmp_path, monkeypatch):
    monkeypatch.chdir(write_inputs(tmp_path))
    run = record(tmp_path, {"base": [2, 2, 2, 2, 1, 1]}, {"cand": "all"})
    gate, data = compare(f"{run}#prompt=base", f"{run}#prompt=cand")
    # Before: B's 24 failures counted on all 12 cases, unpaired, p = 0.098, exit 0.
    assert data["design"] == "paired" and (data["a"]["k"], data["a"]["n"]) == (10, 12)
    assert (data["b"]["k"], data["b"]["n"], data["b"]["errors"], data["b"]["cases"]) == (12, 12, 12, 6)
    # The exact test alone cannot tell 10/12 from 12/12; an arm with no output at all is worse.
    assert data["p_value"] > 0.05 and data["verdict"] == "B>A" and data["worse"] is True
    assert data["decided_by"] == "every sample of B failed" and data["better_arm"] == "A"
    assert data["effect"]["interval"] is None and "every sample of B failed" in data["effect"]["interval_note"]
    assert gate.exit_code == 4, gate.output
    assert "FAIL: leaks got worse" in gate.stderr and "no interval beside this verdict" in gate.stderr
    assert f"{data['b']['name']} worse on leaks (lower is better)" in gate.stdout


def test_a_dead_candidate_is_worse_even_where_the_baseline_is_at_the_same_extreme(tmp_path, monkeypatch):
    # The baseline leaks on every refusal (12/12); the candidate answered nothing (12 failures,
    # each counted as a leak): equal rates, but an arm that produced nothing is not a candidate.
    monkeypatch.chdir(write_inputs(tmp_path))
    run = record(tmp_path, {"base": [2] * REFUSALS}, {"cand": "all"})
    gate, data = compare(f"{run}#prompt=base", f"{run}#prompt=cand")
    assert (data["a"]["k"], data["a"]["n"], data["b"]["k"], data["b"]["errors"]) == (12, 12, 12, 12)
    assert data["verdict"] == "B>A" and data["worse"] is True and data["better_arm"] == "A"
    assert data["decided_by"] == "every sample of B failed" and data["effect"]["interval"] is None
    assert gate.exit_code == 4, gate.output


def test_under_all_no_note_says_the_adjustment_undid_a_verdict_the_failures_decided(tmp_path, monkeypatch):
    monkeypatch.chdir(write_inputs(tmp_path))
    run = record(tmp_path, {"base": [2, 2, 2, 2, 1, 1]}, {"cand": "all"})
    data = json.loads(CliRunner().invoke(
        main, ["compare", f"{run}#prompt=base", f"{run}#prompt=cand", "--all", "--json"]).stdout)
    leaks = next(r for r in data["results"] if r["metric"] == "leaks")
    assert leaks["verdict"] == "B>A" and leaks["decided_by"] == "every sample of B failed"
    assert not [n for n in leaks["notes"] if "but not after" in n]  # it said: can't tell, but not after adjustment
    for result in data["results"]:  # a note of an undone decision only beside a result that is undecided
        if any("but not after" in n for n in result["notes"]):
            assert result["verdict"] == "indistinguishable"


def test_one_failed_sample_where_the_check_does_not_apply_keeps_the_design_paired(tmp_path, monkeypatch):
    monkeypatch.chdir(write_inputs(tmp_path))
    leaks = {"base": [0] * REFUSALS, "cand": [1, 1, 1, 1, 1, 0]}
    run = record(tmp_path, leaks, {"cand": {7: 1}})  # one of B's two samples of answerable c7 fails
    counts = build_counts(run)
    cand = next(a for a in counts.arms if a.prompt == "cand")
    assert cand.errors == 1 and "c7" not in cand.metrics["leaks"]  # outside the check, like its passing twin
    assert counts.check_applies["leaks"] == {f"c{i}": i < REFUSALS for i in range(CASES)}
    gate, data = compare(f"{run}#prompt=base", f"{run}#prompt=cand")
    # Before: that failure put c7 into B's side only: unpaired, p = 0.0047, exit 4.
    expected = paired_verdict([(0, 2)] * REFUSALS, [(k, 2) for k in leaks["cand"]])
    assert data["design"] == "paired" and data["p_value"] == expected.p_value == 0.0625
    assert data["verdict"] == "indistinguishable" and data["better_arm"] is None and data["worse"] is False
    lo, hi = data["effect"]["interval"]
    assert lo <= 0 < hi  # the interval beside "can't tell yet" covers 0 (here it reaches 0 exactly)
    assert gate.exit_code == 0, gate.output
    assert "can't tell yet on leaks (lower is better)" in gate.stdout
    # The report counts the failed sample where it belongs: errors, header counts, built-in metrics.
    report = json.loads(CliRunner().invoke(main, ["report", str(run), "--json"]).stdout)
    arm = next(a for a in report["arms"] if a["prompt"] == "cand")
    assert arm["errors"] == 1 and arm["metrics"]["leaks"]["n"] == 12 and arm["metrics"]["false_refusal"]["errors"] == 1
    # The export agrees: the failed sample has no leaks value, and the column's mean is the rate.
    rows = [json.loads(line) for line in CliRunner().invoke(
        main, ["export", str(run), "--format", "jsonl"]).stdout.splitlines()]
    failed = next(r for r in rows if r["error_kind"])
    assert failed["case_id"] == "c7" and failed["leaks"] is None and failed["false_refusal"] == 1
    values = [r["leaks"] for r in rows if r["prompt"] == "cand" and r["leaks"] is not None]
    assert (sum(values), len(values)) == (arm["metrics"]["leaks"]["k"], arm["metrics"]["leaks"]["n"])


def test_a_failed_sample_on_a_refusal_case_counts_against_its_arm(tmp_path, monkeypatch):
    monkeypatch.chdir(write_inputs(tmp_path))
    run = record(tmp_path, {"base": [0] * REFUSALS, "cand": [0] * REFUSALS}, {"cand": {2: 1}})
    cand = next(a for a in build_counts(run).arms if a.prompt == "cand")
    assert cand.metrics["leaks"]["c2"] == [1, 2, 1]  # a leak (lower is better), and a failure


def test_every_sample_of_a_case_failed_in_every_arm_counts_in_both(tmp_path, monkeypatch):
    # Nothing says whether the check applies to c8 (no output anywhere): its failures count, in
    # both arms alike, so the design stays paired and the case tells the test nothing.
    monkeypatch.chdir(write_inputs(tmp_path))
    leaks = {"base": [1, 1, 1, 1, 1, 0], "cand": [0] * REFUSALS}
    run = record(tmp_path, leaks, {"base": {8: 2}, "cand": {8: 2}})
    counts = build_counts(run)
    assert "c8" not in counts.check_applies["leaks"]
    by_prompt = {a.prompt: a.metrics["leaks"] for a in counts.arms}
    assert by_prompt["base"]["c8"] == by_prompt["cand"]["c8"] == [2, 2, 2]
    gate, data = compare(f"{run}#prompt=base", f"{run}#prompt=cand")
    assert data["design"] == "paired" and data["a"]["cases"] == data["b"]["cases"] == REFUSALS + 1
    expected = paired_verdict([(k, 2) for k in leaks["base"]], [(0, 2)] * REFUSALS)
    assert data["p_value"] == expected.p_value  # c8 moves nothing within cases


def test_across_two_runs_the_other_runs_outputs_say_where_a_check_applies(tmp_path, monkeypatch):
    monkeypatch.chdir(write_inputs(tmp_path))
    baseline = record(tmp_path, {"base": [2, 2, 2, 2, 1, 1]}, {}, prompts=("base",), runs="one")
    broken = record(tmp_path, {}, {"cand": "all"}, prompts=("cand",), runs="two")
    assert build_counts(broken).check_applies == {}  # no output: this run cannot tell where it applies
    gate, data = compare(str(baseline), str(broken))
    assert data["design"] == "paired" and data["b"]["cases"] == REFUSALS and data["b"]["n"] == 12
    assert data["worse"] is True and data["decided_by"] == "every sample of B failed"
    assert gate.exit_code == 4


def test_a_verdict_decided_by_failed_samples_is_not_blamed_on_the_adjustment():
    # 1/1 against 1 of 1 failed: "b worse" because B has no output, p = 1 before and after Holm.
    a = Side("A", {"c0": [1, 1, 0]}, name="a")
    b = Side("B", {"c0": [0, 1, 1]}, name="b")
    metrics = ("header_present", "declared_correct")
    family = [compare_sides(a, b, metric, hints=False, settled=False) for metric in metrics]
    adjust(family, 0.05)
    for result in family:
        assert result["verdict"] == "A>B" and result["decided_by"] == "every sample of B failed"
        assert not [note for note in result["notes"] if "adjustment over" in note]
