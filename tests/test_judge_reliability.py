"""The grader's reliability beside a judged metric (issue 34, item 4): agreement of repeated
judgments, sensitivity and specificity against hand labels per arm, the corrected rate and
effect, and the warning when the judge grades one arm's outputs differently; the same figures
and words in the report's and the comparison's JSON, the terminal, the HTML and the viewer.

The run: two prompts on a local OpenAI-format server, a judged check with 3 judgments an output
on another, and hand labels of every output. The judge is honest on v1's outputs but for two it
wavers on, and lenient on v2's (it passes v2's wrong prices), so it errs differently on the two
arms. Every figure is checked against promptprobe.stats.judge called on the run's own lists."""

import html
import itertools
import json
import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import run_dir_of
from servers import LocalServer, Reply

from promptprobe.cli import main
from promptprobe.judged import judged_samples
from promptprobe.stats.judge import accuracy, agreement, bias, corrected_effect, corrected_rate, effect_level

CASES = 6
PROBESET = "name = \"prices\"\nrepeats = 2\n" + "".join(
    f'\n[[case]]\nid = "c{i}"\nquestion = "How much is plan {i}?"\nexpect = "answer"\n' for i in range(CASES)
)
RUBRIC = "Question: {question}\nThe reply:\n{output}\nIs the price $20? End with GROUNDED or UNGROUNDED.\n"
WAVERING = ("v1 c0", "v1 c1")  # the judge's grades of these outputs split 2 to 1


def target():
    """Each output is numbered (so each is judged as itself); cases c0-c2 quote the right price."""
    numbers = itertools.count()

    def reply(request):
        prompt = request.json["messages"][0]["content"]
        arm = "v2" if "v2" in prompt else "v1"
        case = re.search(r"plan (\d)", request.json["messages"][-1]["content"]).group(1)
        price = "$20" if int(case) < 3 else "$35"
        return Reply(f"[[ANSWER]]\n{arm} c{case} #{next(numbers)}: the plan is {price} per user.")

    return reply


def judge():
    """Honest on v1 but wavering on two of its outputs (pass, fail, pass); lenient on v2."""
    seen: dict[str, int] = {}

    def reply(request):
        output = re.search(r"<output-[0-9a-f]{16}>\n(.*)\n</output-", request.json["messages"][-1]["content"],
                           re.S).group(1)
        seen[output] = seen.get(output, 0) + 1
        if output.split(" #")[0].removeprefix("[[ANSWER]]\n") in WAVERING:
            return Reply("GROUNDED" if seen[output] != 2 else "UNGROUNDED")
        return Reply("GROUNDED" if "$20" in output or "v2 " in output else "UNGROUNDED")

    return reply


@pytest.fixture(scope="module")
def judged_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("reliability")
    (folder / "prices.toml").write_text(PROBESET)
    (folder / "v1.md").write_text("You are the help desk (v1).\n")
    (folder / "v2.md").write_text("You are the help desk (v2).\n")
    (folder / "rubric.md").write_text(RUBRIC)
    with LocalServer(target()) as server, LocalServer(judge()) as grader:
        (folder / "probe.toml").write_text(f'''[retrieval]
kind = "none"

[[check]]
name = "grounded"
kind = "judge"
model = "openai:judge-1@{grader.url}/v1"
rubric = "rubric.md"
labels = {{ pass = "GROUNDED", fail = "UNGROUNDED" }}
repeats = 3
labels_file = "labels.csv"
''')
        result = CliRunner().invoke(main, [
            "run", str(folder / "prices.toml"), "--prompt", str(folder / "v1.md"), "--prompt", str(folder / "v2.md"),
            "-m", f"openai:m@{server.url}/v1", "--config", str(folder / "probe.toml"),
            "--runs-dir", str(folder / "runs")])
        assert result.exit_code == 0, result.output
        run_dir = run_dir_of(result)
        # Hand labels of every output, by sample id: the truth is the price the output quotes.
        truth = {s.sample_id: int(s.case_id[1:]) < 3 for arm in judged_samples(run_dir) for s in arm.samples}
        (folder / "labels.csv").write_text(
            "sample_id,label\n" + "".join(f"{sid},{'pass' if ok else 'fail'}\n" for sid, ok in truth.items()))
        yield run_dir  # the judge stays up: a test judges a copy of the run again


def cli(*args: str):
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code in (0, 4), result.output
    return result.stdout


def arms_of(run_dir: Path) -> dict:
    return {arm.prompt: arm for arm in judged_samples(run_dir, "grounded")}


def pairs(arm) -> list:
    return [(s.outcome, s.labelled) for s in arm.samples if s.labelled is not None]


def test_the_report_has_every_reliability_figure_each_as_stats_judge_gives_it(judged_run):
    report = json.loads(cli("report", str(judged_run), "--json"))
    arms = arms_of(judged_run)
    pooled = accuracy([p for arm in arms.values() for p in pairs(arm)])
    assert pooled.n == 24
    for arm in report["arms"]:
        metric = arm["metrics"]["grounded"]
        judged = metric["judge"]
        mine = arms[arm["prompt"]]
        assert judged["model"].startswith("openai:judge-1") and judged["repeats"] == 3
        found = agreement([s.votes for s in mine.samples])
        assert {k: judged["agreement"][k] for k in ("outputs", "unanimous", "share", "kappa", "split")} == \
            found.to_dict()
        assert judged["agreement"]["split_samples"] == [mine.samples[i].sample_id for i in found.split]
        assert judged["labels"] == accuracy(pairs(mine)).to_dict()
        corrected = corrected_rate(metric["rate"], metric["n_eff"], pooled).to_dict()
        assert {k: judged["corrected"][k] for k in corrected} == corrected
        assert judged["corrected"]["judged"] == metric["rate"] and judged["corrected"]["labels"] == 24
        # The pooled labels assume the judge errs alike on every arm: this arm's tested against the other's.
        other = next(a for prompt, a in arms.items() if prompt != arm["prompt"])
        assert judged["bias"] == bias(accuracy(pairs(other)), accuracy(pairs(mine))).to_dict()
        assert judged["bias"]["biased"] and judged["words"][-1].startswith(
            "warning: the judge grades this arm's outputs differently from the other arms' (specificity ")
    v1, v2 = ({a["prompt"]: a["metrics"]["grounded"]["judge"] for a in report["arms"]}[p] for p in ("v1", "v2"))
    # What the scripted judge did, as the figures must show it.
    assert v1["agreement"]["outputs"] == 12 and len(v1["agreement"]["split_samples"]) == 4
    wavered = {s.sample_id for s in arms["v1"].samples if f"v1 {s.case_id}" in WAVERING}
    assert set(v1["agreement"]["split_samples"]) == wavered and len(wavered) == 4
    assert v2["agreement"]["split"] == 0 and v2["agreement"]["kappa"]["estimate"] is None
    assert v2["agreement"]["kappa"]["reason"] == "every judgment gave the same label: kappa is undefined"
    assert (v1["labels"]["specificity"]["estimate"], v2["labels"]["specificity"]["estimate"]) == (1.0, 0.0)
    assert v1["corrected"]["interval"][0] <= v1["corrected"]["estimate"] <= v1["corrected"]["interval"][1]


def test_the_terminal_and_the_html_say_the_reports_words(judged_run):
    report = json.loads(cli("report", str(judged_run), "--json"))
    text = cli("report", str(judged_run))
    page = html.unescape(cli("report", str(judged_run), "--format", "html"))
    flat = " ".join(text.split())
    for arm in report["arms"]:
        words = arm["metrics"]["grounded"]["judge"]["words"]
        assert any(w.startswith("judgments split on 4 outputs: ") for w in words) == (arm["prompt"] == "v1")
        assert any(w.startswith("against 12 hand labels (6 pass, 6 fail): sensitivity ") for w in words)
        assert any(w.startswith("corrected for the judge's errors (Rogan-Gladen, the 24 hand labels") for w in words)
        for line in words:
            assert " ".join(line.split()) in flat, line
            assert line in page, line


def test_compare_corrects_the_effect_and_warns_of_a_judge_that_grades_the_arms_differently(judged_run):
    comparison = json.loads(cli("compare", f"{judged_run}#prompt=v1", f"{judged_run}#prompt=v2", "--metric",
                                "grounded", "--json"))
    arms = arms_of(judged_run)
    acc_a, acc_b = accuracy(pairs(arms["v1"])), accuracy(pairs(arms["v2"]))
    judged = comparison["judge"]
    assert judged["bias"] == bias(acc_a, acc_b).to_dict() and judged["bias"]["biased"] is True
    assert judged["warning"].startswith(
        "the judge grades B's outputs differently from A's (specificity 100.0% on A's, 0.0% on B's, p = ")
    assert judged["warning"].endswith("on 12 labels an arm, Holm over sensitivity and specificity): the "
                                      "difference may be the judge's")
    pooled = accuracy(pairs(arms["v1"]) + pairs(arms["v2"]))
    assert judged["labels"] == pooled.to_dict()
    corrected = judged["corrected"]
    confidence = comparison["effect"]["confidence"]
    assert corrected["confidence"] == confidence and corrected["judged_confidence"] == effect_level(confidence)
    expected = corrected_effect(comparison["effect"]["estimate"], tuple(corrected["judged_interval"]), pooled,
                                confidence)
    assert {k: corrected[k] for k in ("estimate", "interval")} == {"estimate": expected.estimate,
                                                                  "interval": list(expected.interval)}
    # The interval at 1 - alpha/2 is the comparison's own, asked at that level (wider than the verdict's).
    lo, hi = comparison["effect"]["interval"]
    assert corrected["judged_interval"][0] <= lo and corrected["judged_interval"][1] >= hi
    assert (lo, hi) != tuple(corrected["judged_interval"])
    # Each arm's reliability is the report's, beside its rate.
    report = json.loads(cli("report", str(judged_run), "--json"))
    by_prompt = {a["prompt"]: a["metrics"]["grounded"]["judge"] for a in report["arms"]}
    assert comparison["a"]["judge"] == by_prompt["v1"] and comparison["b"]["judge"] == by_prompt["v2"]
    text = " ".join(cli("compare", f"{judged_run}#prompt=v1", f"{judged_run}#prompt=v2", "--metric",
                        "grounded").split())
    assert "warning: " + judged["warning"] in text
    assert judged["words"][-1].endswith("it assumes the judge errs alike on A and B, which the warning below doubts")
    for line in judged["words"]:
        assert " ".join(line.split()) in text, line
    page = html.unescape(cli("compare", f"{judged_run}#prompt=v1", f"{judged_run}#prompt=v2", "--metric",
                             "grounded", "--format", "html"))
    assert judged["warning"] in page and all(line in page for line in judged["words"])


def test_the_viewer_and_the_python_api_show_the_same_objects(judged_run):
    pytest.importorskip("starlette")
    from starlette.testclient import TestClient

    import promptprobe
    from promptprobe.viewer.app import create_app

    report = json.loads(cli("report", str(judged_run), "--json"))
    api = promptprobe.report(str(judged_run)).to_dict()
    assert [a["metrics"]["grounded"]["judge"] for a in api["arms"]] == \
        [a["metrics"]["grounded"]["judge"] for a in report["arms"]]
    with TestClient(create_app(judged_run.parent, warm=False), base_url="http://127.0.0.1") as client:
        view = client.get(f"/runs/{judged_run.name}.json").json()
        page = html.unescape(client.get(f"/runs/{judged_run.name}").text)
    assert [a["metrics"]["grounded"]["judge"] for a in view["report"]["arms"]] == \
        [a["metrics"]["grounded"]["judge"] for a in report["arms"]]
    for arm in report["arms"]:
        assert all(line in page for line in arm["metrics"]["grounded"]["judge"]["words"])
    (result,) = [r for r in view["verdicts"]["results"] if r["metric"] == "grounded"]
    assert result["judge"]["warning"] in page
    # promptprobe.compare is probe compare's JSON; the viewer's compare page says its own object's words.
    api = promptprobe.compare(f"{judged_run}#prompt=v1", f"{judged_run}#prompt=v2", "grounded").to_dict()
    cli_json = json.loads(cli("compare", f"{judged_run}#prompt=v1", f"{judged_run}#prompt=v2", "--metric",
                              "grounded", "--json"))
    assert api["judge"] == cli_json["judge"] and api["a"]["judge"] == cli_json["a"]["judge"]
    with TestClient(create_app(judged_run.parent, warm=False), base_url="http://127.0.0.1") as client:
        query = {"a": f"{judged_run.name}:1", "b": f"{judged_run.name}:2", "metric": "grounded"}
        view = client.get("/compare.json", params=query).json()
        page = html.unescape(client.get("/compare", params=query).text)
    (result,) = [r for r in view["comparison"]["verdicts"]["results"] if r["metric"] == "grounded"]
    judged = result["judge"]
    assert judged["warning"] and judged["warning"] in page and all(line in page for line in judged["words"])


def test_without_labels_or_repeats_each_figure_says_why_it_is_absent(judged_run, tmp_path):
    labels = judged_run.parent.parent / "labels.csv"
    kept = labels.read_bytes()
    labels.unlink()
    try:
        report = json.loads(cli("report", str(judged_run), "--json"))
        comparison = json.loads(cli("compare", f"{judged_run}#prompt=v1", f"{judged_run}#prompt=v2", "--metric",
                                    "grounded", "--json"))
        text = " ".join(cli("report", str(judged_run)).split())
    finally:
        labels.write_bytes(kept)
    why = f"no hand labels: {labels} does not exist yet (probe label writes it)"
    for arm in report["arms"]:
        judged = arm["metrics"]["grounded"]["judge"]
        assert judged["corrected"] == {"estimate": None, "interval": None, "reason": why,
                                       "judged": arm["metrics"]["grounded"]["rate"], "labels": 0}
        assert judged["labels"]["n"] == 0 and judged["labels"]["sensitivity"]["reason"] == why
    assert f"no corrected rate: {why}" in text and f"sensitivity and specificity: not measured, {why}" in text
    judged = comparison["judge"]
    assert judged["corrected"]["estimate"] is None and judged["corrected"]["reason"] == why
    assert judged["warning"] is None and judged["bias"]["biased"] is False
    # Labels of one arm only: that arm's figures, and why the other has none.
    v1_ids = {s.sample_id for s in arms_of(judged_run)["v1"].samples}
    labels.write_text("".join(line + "\n" for line in kept.decode().splitlines() if line.split(",")[0] not in v1_ids))
    try:
        report = json.loads(cli("report", str(judged_run), "--json"))
    finally:
        labels.write_bytes(kept)
    v1, v2 = ({a["prompt"]: a["metrics"]["grounded"]["judge"] for a in report["arms"]}[p] for p in ("v1", "v2"))
    assert v1["labels"]["sensitivity"]["reason"] == f"no hand label in {labels} for this arm's outputs (probe " \
        "label collects them)"
    assert v2["labels"]["n"] == 12 and v1["corrected"]["labels"] == 12
    # One judgment an output: no agreement to measure, and the reason in its place.
    copy = tmp_path / judged_run.name
    shutil.copytree(judged_run, copy)
    # Two runs compared arm by arm: each pair's result has its judge, said with the pair's name.
    both = json.loads(cli("compare", str(judged_run), str(copy), "--metric", "grounded", "--json"))
    assert [(r["pair"], r["judge"]["bias"]["biased"]) for r in both["results"]] == [("v1", False), ("v2", False)]
    text = cli("compare", str(judged_run), str(copy), "--metric", "grounded")
    for r in both["results"]:
        assert all(" ".join(f"{r['pair']}: {line}".split()) in " ".join(text.split()) for line in r["judge"]["words"])
    assert CliRunner().invoke(main, ["judge", str(copy), "--check", "grounded", "--repeats", "1"]).exit_code == 0
    report = json.loads(cli("report", str(copy), "--json"))
    for arm in report["arms"]:
        found = arm["metrics"]["grounded"]["judge"]["agreement"]
        assert found["outputs"] == 0 and found["split_samples"] == []
        assert found["share"]["reason"] == found["kappa"]["reason"] == "no output was judged twice (repeats = 1)"
        assert "agreement: not measured, no output was judged twice (repeats = 1)" in \
            arm["metrics"]["grounded"]["judge"]["words"]
