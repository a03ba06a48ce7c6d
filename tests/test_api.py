"""The Python API: run/load/report/compare/plan return objects whose to_dict() is exactly the
CLI's JSON; reports and comparisons render in Jupyter; the pytest helper fails with the FAIL:
sentence; the example notebook runs; nothing but __all__ is public."""

import ast
import html
import json
import os
import socket
import subprocess
import sys

import pytest
from click.testing import CliRunner
from conftest import ROOT, write_probeset
from servers import LocalServer, Reply

import promptprobe
from promptprobe.cli import main
from promptprobe.testing import assert_not_worse

PROMPT = ROOT / "prompts" / "always-header.md"


def cli_json(*args: str):
    result = CliRunner().invoke(main, [*args, "--json"])
    assert result.exit_code in (0, 1, 4), result.output
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def two_prompt_run(tmp_path_factory):
    """One run of two prompts; B (v2) always has the header, A (v1) only on some questions."""
    tmp = tmp_path_factory.mktemp("api")

    def reply(request):
        prompt = request.json["messages"][0]["content"]
        question = request.json["messages"][-1]["content"]
        good = "v2" in prompt or question.endswith(("0", "1"))
        return Reply("[[ANSWER]]\nok" if good else "ok")

    (tmp / "v1.md").write_text("help desk v1\n")
    (tmp / "v2.md").write_text("help desk v2\n")
    probeset = write_probeset(tmp / "p.toml", [(f"c{i}", f"question {i}", None) for i in range(8)], repeats=3)
    with LocalServer(reply) as server:
        result = promptprobe.run(probeset, prompts=[tmp / "v1.md", tmp / "v2.md"],
                                 models=[f"openai:m@{server.url}/v1"], retrieval="none", runs_dir=tmp / "runs")
    return tmp, result


def test_all_is_the_public_api_and_importing_it_is_light():
    assert sorted(promptprobe.__all__) == sorted([
        "Comparison", "InputError", "Plan", "Report", "Run", "RunResult", "StartError", "__version__",
        "compare", "load", "plan", "report", "run"])
    for name in promptprobe.__all__:
        assert getattr(promptprobe, name) is not None
    with pytest.raises(AttributeError):
        promptprobe.ProbeRun  # noqa: B018  # internal: not reachable from the package
    for name in ("run", "load", "report", "compare", "plan"):
        assert getattr(promptprobe, name).__doc__
    loaded = subprocess.run([sys.executable, "-c", "import sys, promptprobe; print(sorted(m for m in sys.modules "
                             "if m.split('.')[0] in ('numpy', 'openai', 'anthropic', 'scipy')))"],
                            capture_output=True, text=True, timeout=60)
    assert loaded.stdout.strip() == "[]"


def test_run_and_report_are_the_cli_json(two_prompt_run):
    tmp, result = two_prompt_run
    assert isinstance(result, promptprobe.RunResult) and result.status == "complete"
    assert result.counts == {"planned": 48, "recorded": 48, "errors": 0}
    assert result.to_dict()["report"] == cli_json("report", str(result.path))
    assert promptprobe.report(result.path).to_dict() == cli_json("report", str(result.path))
    assert promptprobe.report(result.path, by_tag=True).to_dict() == cli_json("report", str(result.path), "--by", "tag")
    assert result.report.rate("header_present", prompt="v2") == 1.0
    with pytest.raises(promptprobe.InputError):
        result.report.rate("header_present")  # two arms: name one


def test_the_run_json_has_the_cli_shape(two_prompt_run, tmp_path):
    _, result = two_prompt_run
    probeset = write_probeset(tmp_path / "p.toml", [("c0", "question 0", None)])
    with LocalServer() as server:
        printed = CliRunner().invoke(main, ["run", str(probeset), "--prompt", str(PROMPT), "-m",
                                            f"openai:m@{server.url}/v1", "--retrieval", "none", "--runs-dir",
                                            str(tmp_path / "runs"), "--json"])
        made = promptprobe.run(probeset, prompts=[PROMPT], models=[f"openai:m@{server.url}/v1"], retrieval="none",
                               runs_dir=tmp_path / "runs2")
    cli = json.loads(printed.stdout)
    api = made.to_dict()
    assert api.keys() == cli.keys() and api["counts"] == cli["counts"] and api["status"] == cli["status"]
    assert api["report"].keys() == cli["report"].keys()


def test_compare_is_the_cli_json(two_prompt_run):
    _, result = two_prompt_run
    a, b = f"{result.path}#prompt=v1", f"{result.path}#prompt=v2"
    one = promptprobe.compare(a, b)
    assert one.to_dict() == cli_json("compare", a, b)
    assert one.verdict == "B>A" and not one.worse
    several = promptprobe.compare(a, b, ["header_present", "header_absent"])
    assert several.to_dict() == cli_json("compare", a, b, "--metric", "header_present", "--metric", "header_absent")
    family = promptprobe.compare(a, b, all_metrics=True)
    assert family.to_dict() == cli_json("compare", a, b, "--all")
    with pytest.raises(promptprobe.InputError):
        family.verdict  # noqa: B018  # several metrics: each has its own
    with pytest.raises(promptprobe.InputError, match="unknown metric"):
        promptprobe.compare(a, b, "no_such_metric")


@pytest.mark.parametrize("kwargs,flags", [
    ({"p1": 0.85, "p2": 1.0}, ["--p1", "0.85", "--p2", "1.0"]),
    ({"p1": 0.85, "p2": 1.0, "cases": 10, "icc": 0.5}, ["--p1", "0.85", "--p2", "1.0", "--cases", "10", "--icc", "0.5"]),
    ({"p1": 0.85, "n": 30}, ["--p1", "0.85", "--n", "30"]),
    ({"gate_any_of": 5, "p": 0.87}, ["--gate-any-of", "5", "--p", "0.87"]),
    ({"p1": 0.9, "p2": 0.5, "cases": 10, "sequential": True, "detect": 30}, ["--p1", "0.9", "--p2", "0.5", "--cases", "10", "--sequential", "--detect", "30"]),
])
def test_plan_is_the_cli_json(kwargs, flags):
    p1, p2 = kwargs.pop("p1", None), kwargs.pop("p2", None)
    assert promptprobe.plan(p1, p2, **kwargs).to_dict() == cli_json("plan", *flags)



@pytest.mark.parametrize("kwargs,flags", [
    ({"p1": 0.001, "p2": 0.0015}, ["--p1", "0.001", "--p2", "0.0015"]),
    ({"p1": 0.99, "n": 5}, ["--p1", "0.99", "--n", "5"]),
    ({"p1": 0.5, "n": 50000}, ["--p1", "0.5", "--n", "50000"]),
    ({"gate_any_of": 3, "p": 0.9}, ["--gate-any-of", "3", "--p", "0.9"]),
])
def test_a_plan_prints_as_probe_plan_does(kwargs, flags):
    # One view object: the text of the API's plan is the CLI's, figure for figure.
    printed = CliRunner().invoke(main, ["plan", *flags])
    assert printed.exit_code == 0, printed.output
    assert str(promptprobe.plan(**kwargs)) + "\n" == printed.stdout
    assert "%" in printed.stdout

def test_load_is_its_line_of_probe_runs(two_prompt_run):
    tmp, result = two_prompt_run
    loaded = promptprobe.load(result.path)
    listed = cli_json("runs", "--runs-dir", str(tmp / "runs"))["runs"]
    assert loaded.to_dict() == next(r for r in listed if r["id"] == result.path.name)
    assert promptprobe.load("latest", runs_dir=tmp / "runs").path == result.path
    assert sum(1 for _ in loaded.samples()) == 48
    with pytest.raises(promptprobe.InputError, match="no run directory or run id matches"):
        promptprobe.load("nothing-like-it", runs_dir=tmp / "runs")


def test_errors_are_the_domain_exceptions(tmp_path):
    probeset = write_probeset(tmp_path / "p.toml", [("c0", "q", None)])
    with pytest.raises(promptprobe.InputError, match="no retrieval path"):
        promptprobe.run(probeset, prompts=[PROMPT], models=["openai:m@http://127.0.0.1:9/v1"])
    with pytest.raises(promptprobe.StartError, match="cannot connect"):
        promptprobe.run(probeset, prompts=[PROMPT], models=["openai:m@http://127.0.0.1:9/v1"], retrieval="none",
                        runs_dir=tmp_path / "runs")
    with pytest.raises(promptprobe.InputError, match="alpha"):
        promptprobe.compare("a", "b", alpha=0.9)


@pytest.mark.parametrize(
    ("kwargs", "sentence"),
    [
        ({"repeats": 0}, "repeats=0: must be between 1 and 1e+06"),
        ({"concurrency": 2.5}, "concurrency=2.5: must be a whole number"),
        ({"temperature": float("nan")}, "temperature=nan: must be between 0 and 100"),
        ({"max_tokens": "5"}, "max_tokens='5': must be a whole number"),
        ({"poll_interval": 7200}, "poll_interval=7200: must be between 0 and 3600"),
    ],
)
def test_run_refuses_numbers_the_cli_would_refuse(tmp_path, kwargs, sentence):
    probeset = write_probeset(tmp_path / "p.toml", [("c0", "q", None)])
    with pytest.raises(promptprobe.InputError) as raised:
        promptprobe.run(probeset, prompts=[PROMPT], models=["openai:m@http://127.0.0.1:9/v1"], retrieval="none",
                        runs_dir=tmp_path / "runs", **kwargs)
    assert str(raised.value) == sentence and not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    ("call", "sentence"),
    [
        (lambda: promptprobe.plan(0.9, 0.7, cases=0, icc=0.1), "cases=0: must be a whole number, at least 1"),
        (lambda: promptprobe.plan(0.9, n=2.5), "n=2.5: must be a whole number, at least 1"),
        (lambda: promptprobe.plan(gate_any_of=5000, p=0.9), "gate_any_of=5000: must be between 1 and 1000"),
        (lambda: promptprobe.report("latest", top_k=0), "top_k=0: must be a whole number, at least 1"),
        (lambda: promptprobe.compare("a", "b", classification=True), "classification=True: must be a whole number, at least 1"),
    ],
)
def test_report_compare_and_plan_refuse_counts_the_cli_would_refuse(call, sentence):
    with pytest.raises(promptprobe.InputError) as raised:
        call()
    assert str(raised.value) == sentence


def test_run_takes_the_batch_poll_interval(tmp_path):
    from batch_server import BatchServer

    probeset = write_probeset(tmp_path / "p.toml", [("c0", "q", None), ("c1", "r", None)], repeats=2)
    with BatchServer(polls=3) as server:
        result = promptprobe.run(probeset, prompts=[PROMPT], models=[f"openai:m@{server.url}/v1"],
                                 retrieval="none", runs_dir=tmp_path / "runs", batch=True, poll_interval=0.05)
    assert result.status == "complete" and result.counts["recorded"] == 4 and len(server.submitted) == 4
    assert result.report.to_dict()["arms"][0]["usage"]["batch_samples"] == 4


def test_reports_and_comparisons_render_in_jupyter(two_prompt_run):
    _, result = two_prompt_run
    for shown in (result.report, promptprobe.compare(f"{result.path}#prompt=v1", f"{result.path}#prompt=v2")):
        fragment = shown._repr_html_()
        assert fragment.startswith('<div class="promptprobe">') and fragment.rstrip().endswith("</div>")
        assert "<html" not in fragment and "<body" not in fragment and "<head" not in fragment
        style = fragment.split("<style>", 1)[1].split("</style>", 1)[0]
        rules = [r.split("{")[0].strip() for r in style.split("}") if "{" in r]
        selectors = [s.strip() for rule in rules if not rule.startswith("@") for s in rule.split(",")]
        assert selectors and all(s.startswith(".promptprobe") for s in selectors), selectors  # nothing leaks out
        assert "<svg" in fragment
        page = shown.html()
        assert fragment.split("</style>", 1)[1].strip().removesuffix("</div>").strip() in page  # the same HTML
    comparison = promptprobe.compare(f"{result.path}#prompt=v1", f"{result.path}#prompt=v2")
    shown = html.unescape(comparison._repr_html_())
    words = comparison.to_dict()["words"]
    assert words["verdict"] == "v2 better" and comparison.to_dict()["better_arm"] == "B"
    # The notebook shows the compare object's own words: its verdict box and its sentence.
    assert words["badge"] in shown and words["sentence"] in shown and words["badge"].startswith("v2 better on")


def test_assert_not_worse_passes_or_fails_with_the_fail_sentence(two_prompt_run):
    _, result = two_prompt_run
    better, worse = f"{result.path}#prompt=v2", f"{result.path}#prompt=v1"
    assert assert_not_worse(worse, better, metric="header_present").verdict == "B>A"
    with pytest.raises(AssertionError) as failed:
        assert_not_worse(better, worse, metric="header_present")
    gate = CliRunner().invoke(main, ["compare", better, worse, "--fail-if-worse"])
    assert gate.exit_code == 4
    fail_lines = [line for line in gate.stderr.splitlines() if line.startswith("FAIL:")]
    assert str(failed.value) == "\n".join(fail_lines) and fail_lines


def test_the_pytest_fixture_pattern_in_the_docs_works(tmp_path):
    """docs/python.md's fixture pattern, run by pytest itself in a fresh process."""
    text = (ROOT / "docs" / "python.md").read_text()
    example = text.split("<!-- pytest-example:start -->", 1)[1].split("<!-- pytest-example:end -->", 1)[0]
    code = example.split("```python\n", 1)[1].split("```", 1)[0]
    (tmp_path / "test_prompts.py").write_text(code)
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
                            capture_output=True, text=True, timeout=600, cwd=ROOT,
                            env={**os.environ, "PROBE_RUNS_DIR": str(tmp_path / "runs")})
    assert result.returncode == 1, result.stdout[-3000:]  # the example gates a worse prompt: it must fail
    assert "1 failed, 1 passed" in result.stdout and "FAIL: header_present got worse" in result.stdout


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_the_example_notebook_runs(tmp_path, monkeypatch):
    """Each code cell of examples/notebook.ipynb, in order, as Jupyter would run them."""
    notebook = json.loads((ROOT / "examples" / "notebook.ipynb").read_text())
    assert notebook["nbformat"] == 4
    monkeypatch.setenv("DEMO_PORT", str(free_port()))
    monkeypatch.setenv("PROBE_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.chdir(ROOT / "examples")
    namespace: dict = {}
    shown = []
    try:
        for cell in notebook["cells"]:
            if cell["cell_type"] != "code":
                continue
            # As IPython does: run the cell, and show the value of its last line when it is an expression.
            tree = ast.parse("".join(cell["source"]))
            last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
            exec(compile(tree, "notebook", "exec"), namespace)
            shown.append(eval(compile(ast.Expression(last.value), "notebook", "eval"), namespace) if last else None)
    finally:
        if "server" in namespace:
            namespace["server"].terminate()
    result, comparison, plan = namespace["result"], namespace["comparison"], shown[3]
    assert result.status == "complete" and result.counts["recorded"] == 72
    assert "<svg" in shown[1]._repr_html_()  # the report, plotted with its own HTML
    assert "always-header better on header_present" in shown[2]._repr_html_()
    assert comparison.to_dict()["family"] == len(comparison.results) and plan == cli_json("plan", "--p1", "0.85", "--p2", "1.0", "--cases", "12", "--icc", "0.5")
