"""Names people can type and runs compared arm by arm: `--model NAME=SPEC` (and `[run] models`
entries with a name) recorded in the manifest and every sample, selectors that take the name or
the spec, `probe runs` keeping the arms at 100 columns, and `probe compare RUN1 RUN2` pairing
each arm of one run with the arm of the same name in the other, one family, gated together."""

import json

import pytest
from click.testing import CliRunner
from conftest import write_probeset
from servers import LocalServer, Reply

import promptprobe
from promptprobe.cli import main
from promptprobe.config import parse_config
from promptprobe.errors import InputError
from promptprobe.models import model_of
from promptprobe.runref import list_runs
from promptprobe.views.runs import arms_cell, render_runs
from promptprobe.views.tables import wrap_cell

CASES = [(f"c{i}", f"question {i}", None) for i in range(10)]


def invoke(*args: str):
    return CliRunner().invoke(main, list(args))


def reply_by_prompt(good: set[str]):
    """A model whose reply has the header only under the prompts named (by their text), or for
    the model ids named."""

    def reply(request):
        prompt = request.json["messages"][0]["content"].strip()
        return Reply("[[ANSWER]]\nok" if {prompt, request.json["model"]} & good else "ok, no header")

    return reply


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("arms")
    for name in ("old", "new", "other"):
        (tmp / f"{name}.md").write_text(f"prompt {name}\n")
    write_probeset(tmp / "p.toml", CASES, repeats=2)
    return tmp


def record(tmp, runs, prompts, models, good, *extra):
    """`probe run` through the CLI against a local server; the run directory."""
    with LocalServer(reply_by_prompt(good)) as server:
        args = ["run", str(tmp / "p.toml"), "--retrieval", "none", "--runs-dir", str(tmp / runs), "--json"]
        for prompt in prompts:
            args += ["--prompt", str(tmp / f"{prompt}.md")]
        for model in models:
            args += ["--model", model.format(url=f"{server.url}/v1")]
        result = invoke(*args, *extra)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["run"]


# -- names ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def named_run(workspace):
    """Two models by name: helpdesk (model m) answers with the header, other (model n) never."""
    return record(workspace, "named", ["old"], ["helpdesk=openai:m@{url}", "other=openai:n@{url}"], {"m"})


def test_a_model_name_is_recorded_in_the_manifest_and_every_sample(named_run):
    manifest = json.loads(open(f"{named_run}/manifest.json").read())
    assert [(m["name"], m["spec"].split("@")[0]) for m in manifest["models"]] == [
        ("helpdesk", "openai:m"), ("other", "openai:n")]
    assert [a["model"] for a in manifest["arms"]] == ["helpdesk", "other"]
    samples = [json.loads(line) for line in open(f"{named_run}/samples.jsonl")]
    assert {s["model"] for s in samples} == {"helpdesk", "other"}
    assert model_of(manifest["models"][0]).label == "helpdesk"


def test_selectors_take_the_name_or_the_spec_and_sentences_say_the_name(named_run):
    by_name = invoke("compare", f"{named_run}#model=helpdesk", f"{named_run}#model=other", "--json")
    assert by_name.exit_code == 0, by_name.output
    data = json.loads(by_name.stdout)
    assert (data["a"]["name"], data["b"]["name"], data["verdict"]) == ("helpdesk", "other", "A>B")
    manifest = json.loads(open(f"{named_run}/manifest.json").read())
    spec = manifest["models"][0]["spec"]
    by_spec = json.loads(invoke("compare", f"{named_run}#model={spec}", f"{named_run}#model=other", "--json").stdout)
    assert by_spec["p_value"] == data["p_value"] and by_spec["a"]["k"] == data["a"]["k"]
    text = invoke("compare", f"{named_run}#model=helpdesk", f"{named_run}#model=other").stdout
    assert "other worse on header_present" in text and "helpdesk" in text
    assert "@http" not in text.split("\n\n", 1)[1]  # past the A = / B = lines, no spec is repeated
    report = invoke("report", named_run).stdout
    assert "helpdesk" in report and "other" in report
    assert json.loads(invoke("report", named_run, "--json").stdout)["arms"][0]["model_spec"] == spec


def test_names_are_checked_and_unique(workspace):
    for given, words in (
        (["bad name=openai:m@http://127.0.0.1:9/v1"], "model name 'bad name' must start with a letter"),
        (["a=openai:m@http://127.0.0.1:9/v1", "a=openai:n@http://127.0.0.1:9/v1"], "two models are both called 'a'"),
        (["a=openai:m@http://127.0.0.1:9/v1", "openai:m@http://127.0.0.1:9/v1"],
         "the model openai:m@http://127.0.0.1:9/v1 is given twice"),
    ):
        args = ["run", str(workspace / "p.toml"), "--prompt", str(workspace / "old.md"), "--retrieval", "none",
                "--dry-run"]
        for model in given:
            args += ["--model", model]
        result = invoke(*args)
        assert result.exit_code == 2 and words in result.stderr, result.output


def test_probe_toml_names_models_and_a_bare_name_picks_one():
    config = parse_config({"run": {"models": [
        {"name": "helpdesk", "spec": "openai:acme@http://127.0.0.1:8765/v1", "api_key_env": "ACME_KEY"},
        "mini=openai:gpt-4.1-mini",
        "anthropic:claude-sonnet-5-5",
    ]}}, None)
    assert [m.label for m in config.run.models] == ["helpdesk", "mini", "anthropic:claude-sonnet-5-5"]
    (picked,) = config.models_for(["helpdesk"])
    assert picked.api_key_env == "ACME_KEY" and picked.name == "helpdesk"
    (renamed,) = config.models_for(["fast=openai:gpt-4.1-mini"])
    assert (renamed.name, renamed.spec) == ("fast", "openai:gpt-4.1-mini")
    for bad in ({"name": "a b", "spec": "openai:x"}, {"name": 3, "spec": "openai:x"}):
        with pytest.raises(InputError, match="model"):
            parse_config({"run": {"models": [bad]}}, None)
    with pytest.raises(InputError, match="two models are both called 'x'"):
        parse_config({"run": {"models": ["x=openai:a", "x=openai:b"]}}, None)
    # A mistyped name is said as one, with the names there are, not as a malformed spec.
    with pytest.raises(InputError) as raised:
        config.models_for(["helpdesc"])
    assert str(raised.value) == (
        "model 'helpdesc': no [run] models entry has that name (names: helpdesk, mini) (did you mean "
        "'helpdesk'?), and it is not a spec PROVIDER:MODEL"
    )


def test_the_python_api_takes_names(workspace):
    with LocalServer(reply_by_prompt({"prompt new"})) as server:
        result = promptprobe.run(workspace / "p.toml", prompts=[workspace / "new.md"],
                                 models=[f"local=openai:m@{server.url}/v1"], retrieval="none",
                                 runs_dir=workspace / "api-runs")
    assert result.report.rate("header_present", model="local") == 1.0
    spec = result.report.arms[0]["model_spec"]
    assert result.report.rate("header_present", model=spec) == 1.0


# -- probe runs at 100 columns --------------------------------------------------------------


def test_probe_runs_shows_the_arms_at_100_columns(named_run, workspace):
    result = CliRunner(env={"COLUMNS": "100"}).invoke(main, ["runs", "--runs-dir", str(workspace / "named")])
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert "arms" in lines[0].split() and max(map(len, lines)) <= 100
    assert "old x helpdesk, other" in result.stdout


def test_long_specs_wrap_inside_the_arms_column_at_any_width(named_run, workspace):
    spec = "openai:acme-helpdesk@http://127.0.0.1:8765/v1"
    (info,) = list_runs(workspace / "named")
    info = type(info)(**{**info.__dict__, "pairs": (("exception-only", spec), ("always-header", spec))})
    for width in (80, 100, 120):
        text = render_runs([info], "table", width=width)
        assert max(map(len, text.splitlines())) <= width, text
        column = text.splitlines()[0].index("arms")
        cell = "".join(line[column:].split("  ")[0] for line in text.splitlines()[2:])
        assert cell.replace(" ", "") == arms_cell(info.pairs).replace(" ", "")  # nothing lost, only folded
    wide = render_runs([info], "table", width=200)
    assert "probe set" in wide and "created" in wide and arms_cell(info.pairs) in wide


def test_wrap_cell_breaks_long_words_after_separators():
    assert wrap_cell("x openai:acme-helpdesk@http://127.0.0.1:8765/v1", 30) == (
        "x openai:acme-helpdesk@\nhttp://127.0.0.1:8765/v1")
    assert wrap_cell("a b c", 3) == "a b\nc"
    assert all(len(line) <= 10 for line in wrap_cell("z" * 35, 10).splitlines())


# -- two runs compared arm by arm -----------------------------------------------------------


@pytest.fixture(scope="module")
def two_runs(workspace):
    """Run 1: old and new both with the header; run 2: new lost it. Same model, no names."""
    first = record(workspace, "pairs", ["old", "new"], ["openai:m@{url}"], {"prompt old", "prompt new"})
    second = record(workspace, "pairs", ["old", "new"], ["openai:m@{url}"], {"prompt old"})
    return first, second


def test_two_runs_compare_arm_by_arm_in_one_family(two_runs):
    first, second = two_runs
    result = invoke("compare", first, second, "--metric", "header_present", "--metric", "header_absent", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    rows = [(r["pair"], r["metric"]) for r in data["results"]]
    assert rows == [("old", "header_present"), ("old", "header_absent"),
                    ("new", "header_present"), ("new", "header_absent")]
    assert data["family"] == 4
    new = data["results"][2]
    assert (new["a"]["k"], new["b"]["k"], new["verdict"], new["worse"]) == (20, 0, "A>B", True)
    assert all(r["p_adjusted"] >= r["p_value"] for r in data["results"])
    assert new["p_adjusted"] > new["p_value"]  # adjusted over the whole family, not per pair
    assert new["a"]["label"] == f"{first}#prompt=new,model={new['a']['label'].split('model=')[1]}"


def test_the_gate_fails_on_the_pair_that_got_worse(two_runs):
    first, second = two_runs
    result = invoke("compare", first, second, "--all", "--fail-if-worse")
    assert result.exit_code == 4
    fails = [line for line in result.stderr.splitlines() if line.startswith("FAIL:")]
    assert fails and all("(new) got worse" in line for line in fails)
    assert "arm by arm: old, new" in result.stdout


def test_the_python_api_compares_two_runs_the_same_way(two_runs):
    first, second = two_runs
    comparison = promptprobe.compare(first, second, ["header_present"])
    assert [r["pair"] for r in comparison.results] == ["old", "new"] and comparison.worse
    assert comparison.failures()[0].startswith("FAIL: header_present (new) got worse")
    assert "<html" in comparison.html() or "promptprobe" in comparison.html()


def test_the_html_of_two_runs_names_the_arm_of_every_row(two_runs, tmp_path):
    # The terminal says "new: ..." before each pair's verdict; the page must not lose which arm it is.
    first, second = two_runs
    page = tmp_path / "c.html"
    result = invoke("compare", first, second, "--metric", "header_present", "-o", str(page))
    assert result.exit_code == 0, result.output
    html = page.read_text()
    data = json.loads(invoke("compare", first, second, "--metric", "header_present", "--json").stdout)
    for r in data["results"]:
        badge = f'data-metric="{r["metric"]}">{r["pair"]}: {r["words"]["badge"]}</li>'.replace("'", "&#39;")
        assert badge in html, r["pair"]
        assert f'<td data-label="arm">{r["pair"]}</td>' in html
        assert f'{r["pair"]}: {r["words"]["sentence"]}'.replace("'", "&#39;") in html
    assert "arm by arm: old, new" in html


def test_names_that_do_not_match_list_the_forms_to_type(two_runs, workspace):
    first, _ = two_runs
    third = record(workspace, "pairs", ["other"], ["openai:m@{url}"], set())
    fourth = record(workspace, "pairs", ["other", "new"], ["openai:m@{url}"], set())
    result = invoke("compare", first, fourth)  # new pairs; old and other have no partner: a note
    assert result.exit_code == 0 and "note: not compared: A's arm prompt=old has no arm of the same name in B" in result.stdout
    result = invoke("compare", first, third)
    assert result.exit_code == 2
    assert "no arm of one has the same name as an arm of the other" in result.stderr
    assert f"'{first}#prompt=old', '{first}#prompt=new'" in result.stderr
    assert f"'{third}#prompt=other'" in result.stderr.replace("\n", "")


def test_runs_of_the_same_prompts_on_different_models_pair_by_prompt(workspace):
    first = record(workspace, "models", ["old", "new"], ["a=openai:m@{url}"], {"prompt old"})
    second = record(workspace, "models", ["old", "new"], ["b=openai:n@{url}"], {"prompt old"})
    data = json.loads(invoke("compare", first, second, "--json").stdout)
    assert [r["pair"] for r in data["results"]] == ["old", "new"]
    assert (data["results"][0]["a"]["name"], data["results"][0]["b"]["name"]) == (first, second)


def test_names_survive_a_resume_and_decide_a_sequential_run(workspace):
    calls = {"failed": False}

    def reply(request):
        # The first call for question 3 fails for good (one attempt): the run ends with exit 1.
        if request.json["messages"][-1]["content"] == "question 3" and not calls["failed"]:
            calls["failed"] = True
            return Reply(status=400, body=b'{"error": {"message": "bad request"}}')
        return Reply("[[ANSWER]]\nok" if request.json["model"] == "m" else "no header")

    with LocalServer(reply) as server:
        url = f"{server.url}/v1"
        first = invoke("run", str(workspace / "p.toml"), "--prompt", str(workspace / "old.md"), "--retrieval", "none",
                       "-m", f"good=openai:m@{url}", "-m", f"bad=openai:n@{url}", "--max-attempts", "1",
                       "--runs-dir", str(workspace / "resume"), "--json")
        assert first.exit_code == 1, first.output
        run = json.loads(first.stdout)["run"]
        resumed = invoke("run", "--resume", run, "--json")
        assert resumed.exit_code == 0, resumed.output
        samples = [json.loads(line) for line in open(f"{run}/samples.jsonl")]
        assert {s["model"] for s in samples} == {"good", "bad"} and not any(s["error"] for s in samples[-1:])
        report = json.loads(resumed.stdout)["report"]
        assert [(a["model"], a["samples"], a["errors"]) for a in report["arms"]] == [("good", 20, 0), ("bad", 20, 0)]
        decided = invoke("run", str(workspace / "p.toml"), "--prompt", str(workspace / "old.md"), "--retrieval", "none",
                         "-m", f"good=openai:m@{url}", "-m", f"bad=openai:n@{url}", "--until-decided",
                         "--runs-dir", str(workspace / "sequential"), "--json")
    assert decided.exit_code == 0, decided.output
    run = json.loads(decided.stdout)["run"]
    manifest = json.loads(open(f"{run}/manifest.json").read())
    assert manifest["sequential"]["a"].endswith(",model=good")
    data = json.loads(invoke("compare", f"{run}#model=good", f"{run}#model=bad", "--json").stdout)
    assert data["design"] == "sequential" and data["verdict"] == "A>B" and data["worse"]
    listed = invoke("runs", "--runs-dir", str(workspace / "sequential")).stdout
    recorded = manifest["counts"]["recorded"]
    assert f"{recorded} (cap {manifest['counts']['planned']})" in listed  # a cap, not a run cut short


def test_an_incident_attachment_names_the_model_and_its_spec(named_run):
    text = invoke("export", named_run, "--case", "c1", "--format", "md").stdout
    assert "- model helpdesk (openai:m@http://127.0.0.1:" in text and "- model other (openai:n@" in text


def test_an_arm_compared_with_itself_says_so(two_runs):
    first, _ = two_runs
    result = invoke("compare", f"{first}#prompt=old", f"{first}#prompt=old", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["verdict"] == "indistinguishable"
    (note,) = [n for n in data["notes"] if n.startswith("A and B are the same arm (")]
    assert note.startswith("A and B are the same arm (prompt=old,") and note.endswith("): choose two to compare")


# -- probe compare RUN, and the comparison a run ends with ---------------------------------------


def test_compare_run_compares_a_two_arm_runs_arms_and_lists_the_selectors_otherwise(workspace):
    two = record(workspace, "compare-run", ["old", "new"], ["m=openai:m@{url}"], {"prompt new"})
    alone = json.loads(invoke("compare", two, "--json").stdout)
    named = json.loads(invoke("compare", f"{two}#prompt=old", f"{two}#prompt=new", "--json").stdout)
    assert alone["verdict"] == named["verdict"] == "B>A" and alone["p_value"] == named["p_value"]
    four = record(workspace, "compare-run", ["old", "new"], ["a=openai:m@{url}", "b=openai:n@{url}"], set())
    refused = invoke("compare", four)
    assert refused.exit_code == 2
    assert refused.stderr.splitlines() == [f"error: {four} has 4 arms: choose two, as probe compare A B, from:"] + [
        f"error:   '{four}#prompt={p},model={m}'" for p in ("old", "new") for m in ("a", "b")]
    one = record(workspace, "compare-run", ["old"], ["m=openai:m@{url}"], set())
    single = invoke("compare", one)
    assert single.exit_code == 2 and "has one arm, so there is nothing in it to compare" in single.stderr
    arm = invoke("compare", f"{two}#prompt=old")
    assert arm.exit_code == 2 and "is one arm: give B" in arm.stderr


def test_a_run_of_two_prompts_ends_with_its_comparison_in_words_and_the_command_for_more(workspace):
    with LocalServer(reply_by_prompt({"prompt new"})) as server:
        result = invoke("run", str(workspace / "p.toml"), "--retrieval", "none", "--runs-dir",
                        str(workspace / "ends"), "--prompt", str(workspace / "old.md"), "--prompt",
                        str(workspace / "new.md"), "--model", f"a=openai:m@{server.url}/v1",
                        "--model", f"b=openai:n@{server.url}/v1")
    assert result.exit_code == 0, result.output
    run = next((workspace / "ends").iterdir())
    tail = result.stdout.split("every metric:")
    assert len(tail) == 3  # one comparison a model: new against old on a, and on b
    assert "new on a (B) against old on a (A), every metric:" in result.stdout
    for model in ("a", "b"):
        command = f"probe compare '{run}#prompt=old,model={model}' '{run}#prompt=new,model={model}' --all"
        assert f"  more: {command}" in result.stdout
        # Each line is what that command says: the same words, one line a metric.
        shown = json.loads(invoke("compare", f"{run}#prompt=old,model={model}", f"{run}#prompt=new,model={model}",
                                  "--all", "--json").stdout)
        for metric in shown["results"]:
            assert f"  {metric['words']['badge']}\n" in result.stdout
    assert "new better on header_present: +100 points" in result.stdout
