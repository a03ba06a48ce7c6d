"""The CI workflow of docs/ci.md, for real: scripts/ci-gate.sh in a throwaway git repository
against the demo server, and the example files it takes a baseline of are files, not links."""

import filecmp
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import ROOT
from servers import LocalServer, Reply

from promptprobe.demo import DemoServer

SCRIPT = ROOT / "scripts" / "ci-gate.sh"
PACKAGE_DEMO = ROOT / "src" / "promptprobe" / "demo"
EXCEPTION_ONLY = (ROOT / "prompts" / "exception-only.md").read_bytes()


def test_the_documented_workflows_use_the_action_and_the_script():
    workflow = (ROOT / "docs" / "ci.md").read_text()
    assert "uses: OWNER/promptprobe@v1" in workflow and "steps.probe.outputs.comparison" in workflow
    assert "run: scripts/ci-gate.sh origin/main prompts/always-header.md" in workflow
    assert "if: always()" in workflow and "report.html" in workflow


def test_the_examples_are_files_equal_to_the_packaged_demo():
    # `git show REF:prompts/always-header.md` must give the prompt's bytes, not a link target.
    pairs = [
        (ROOT / "probes" / "refusal-header.toml", PACKAGE_DEMO / "refusal-header.toml"),
        (ROOT / "prompts" / "always-header.md", PACKAGE_DEMO / "prompts" / "always-header.md"),
        (ROOT / "prompts" / "exception-only.md", PACKAGE_DEMO / "prompts" / "exception-only.md"),
        (ROOT / "examples" / "demo" / "probe.toml", PACKAGE_DEMO / "probe.toml"),
    ]
    pairs += [(ROOT / "examples" / "demo" / "acme" / p.name, p) for p in (PACKAGE_DEMO / "acme").iterdir()]
    for copy, packaged in pairs:
        assert not copy.is_symlink() and copy.is_file(), copy
        assert filecmp.cmp(copy, packaged, shallow=False), f"{copy} differs from {packaged}"
    for folder in (ROOT / "probes", ROOT / "prompts", ROOT / "examples"):
        assert not [p for p in folder.rglob("*") if p.is_symlink()], folder
    assert sorted(p.name for p in (ROOT / "examples" / "demo" / "acme").iterdir()) == sorted(
        p.name for p in (PACKAGE_DEMO / "acme").iterdir()
    )


@pytest.fixture
def repository(tmp_path):
    """A git repository holding the example probe set, prompt and target, committed on main."""
    repo = tmp_path / "repo"
    (repo / "probes").mkdir(parents=True)
    (repo / "prompts").mkdir()
    shutil.copy(ROOT / "probes" / "refusal-header.toml", repo / "probes")
    shutil.copy(ROOT / "prompts" / "always-header.md", repo / "prompts")
    shutil.copytree(ROOT / "examples" / "demo", repo / "examples" / "demo")
    git = ["git", "-c", "user.name=ci", "-c", "user.email=ci@example.com"]
    for command in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "baseline"]):
        subprocess.run([*git, *command], cwd=repo, check=True)
    return repo


def gate(repo: Path, model: str, prompts: list[str] | None = None, **env: str) -> subprocess.CompletedProcess:
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    environment = {
        **os.environ,
        "PATH": path,
        "MODEL": model,
        "PROBE_RUN_ARGS": "-n 2",
        "OUT": "out",
        "GITHUB_ENV": str(repo / "github.env"),
        **env,
    }
    return subprocess.run(
        [str(SCRIPT), "main", *(prompts or ["prompts/always-header.md"])],
        cwd=repo,
        env=environ_clean(environment),
        capture_output=True,
        text=True,
        timeout=120,
    )


def environ_clean(environment: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in environment.items() if not k.startswith(("OPENAI_", "ANTHROPIC_"))}


@pytest.fixture(scope="module")
def demo_model():
    server = DemoServer("127.0.0.1", 0).start()
    yield f"openai:acme-helpdesk@{server.url}"
    server.stop()


def test_an_unchanged_prompt_passes_and_leaves_the_run_and_the_report(repository, demo_model):
    result = gate(repository, demo_model)
    assert result.returncode == 0, result.stdout + result.stderr
    run = (repository / "out" / "probe-run.txt").read_text().strip()
    assert (repository / run / "manifest.json").is_file()
    assert (repository / "github.env").read_text() == f"RUN={run}\n"
    assert "<html" in (repository / "out" / "report.html").read_text()
    baseline = repository / "out" / "baseline-always-header.md"
    assert baseline.read_bytes() == (ROOT / "prompts" / "always-header.md").read_bytes()  # the bytes
    assert "FAIL:" not in result.stderr
    comparison = (repository / "out" / "comparison.md").read_text()
    assert comparison.startswith("## promptprobe: prompts/always-header.md against main\n")
    assert "### prompts/always-header.md: not worse" in comparison and "| header_present " in comparison
    assert "p adjusted: p-values adjusted for comparing" in comparison  # --all: one family


def test_several_prompts_are_one_run_each_gated_at_alpha_over_their_number(repository, demo_model):
    shutil.copy(ROOT / "prompts" / "exception-only.md", repository / "prompts")
    subprocess.run(["git", "add", "prompts/exception-only.md"], cwd=repository, check=True)
    subprocess.run(["git", "-c", "user.name=ci", "-c", "user.email=ci@example.com", "commit", "-qm", "two"],
                   cwd=repository, check=True)
    # The pull request breaks always-header (it becomes exception-only) and leaves the other alone.
    (repository / "prompts" / "always-header.md").write_bytes(EXCEPTION_ONLY)
    result = gate(repository, demo_model, GATE_METRICS="header_present",
                  prompts=["prompts/always-header.md", "prompts/exception-only.md"])
    assert result.returncode == 4, result.stdout + result.stderr
    assert "FAIL: header_present got worse: always-header.baseline " in result.stderr
    assert "exception-only.baseline" not in result.stderr.split("FAIL:", 1)[1]
    comparison = (repository / "out" / "comparison.md").read_text()
    assert "2 prompts, each compared at alpha 0.025 (0.05 over the prompts)" in comparison
    assert "### prompts/always-header.md: **worse**" in comparison
    assert "### prompts/exception-only.md: not worse" in comparison
    run = (repository / "out" / "probe-run.txt").read_text().strip()
    manifest = json.loads((repository / run / "manifest.json").read_text())
    assert [p["name"] for p in manifest["prompts"]] == [
        "always-header.baseline", "always-header.candidate", "exception-only.baseline", "exception-only.candidate"]


def test_a_run_with_failed_samples_still_leaves_its_report(repository):
    # A model that fails every other call: the run ends with exit 1, the report is still written.
    calls = {"n": 0}

    def flaky(request):
        calls["n"] += 1
        if calls["n"] % 2:
            return Reply(status=500, body=b'{"error": {"message": "overloaded"}}')
        return Reply("[[ANSWER]]\nok")

    with LocalServer(flaky) as server:
        result = gate(repository, f"openai:m@{server.url}/v1", PROBE_RUN_ARGS="-n 1 --max-attempts 1")
    assert result.returncode in (1, 4), result.stdout + result.stderr
    assert "samples failed after retries" in result.stderr
    assert "<html" in (repository / "out" / "report.html").read_text()
    assert (repository / "out" / "probe-run.txt").read_text().strip()


def test_a_target_that_is_down_still_leaves_a_report_page(repository):
    result = gate(repository, "openai:m@http://127.0.0.1:9/v1")
    assert result.returncode == 3, result.stdout + result.stderr
    assert "could not start" in (repository / "out" / "report.html").read_text()
    assert not (repository / "out" / "probe-run.txt").exists()


def test_a_prompt_missing_at_the_baseline_is_exit_2(repository, demo_model):
    (repository / "prompts" / "new.md").write_text("a new prompt")
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    result = subprocess.run(
        [str(SCRIPT), "main", "prompts/new.md"],
        cwd=repository,
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": path, "MODEL": demo_model, "OUT": "out"},
        timeout=60,
    )
    assert result.returncode == 2 and "does not exist at main" in result.stderr
    assert (repository / "out" / "report.html").is_file()


# -- the GitHub Action (action.yml): its steps, run here as a runner would ---------------------

ACTION = ROOT / "action.yml"
EXPRESSION = re.compile(r"\$\{\{\s*(.+?)\s*\}\}")


def action() -> dict:
    return yaml.safe_load(ACTION.read_text())


def test_the_action_is_composite_and_its_steps_reference_what_exists():
    spec = action()
    assert spec["runs"]["using"] == "composite"
    steps = spec["runs"]["steps"]
    text = ACTION.read_text()
    referenced = set(re.findall(r"inputs\.([A-Za-z0-9_-]+)", text))
    assert referenced == set(spec["inputs"]), "every input is used, and only inputs that exist"
    ids = {step.get("id") for step in steps}
    for name, output in spec["outputs"].items():
        (step_id,) = re.findall(r"steps\.([a-z]+)\.outputs\.", output["value"])
        assert step_id in ids, name
    assert [s["uses"] for s in steps if "uses" in s] == ["actions/setup-python@v5", "actions/upload-artifact@v4"]
    for step in steps:
        if "run" in step:
            assert step["shell"] == "bash", step["name"]
            for script in re.findall(r"\$GITHUB_ACTION_PATH/([\w./-]+)", step["run"]):
                assert os.access(ROOT / script, os.X_OK), script
    install = next(s for s in steps if s.get("id") == "install")
    assert '"$GITHUB_ACTION_PATH"' in install["run"] and (ROOT / "pyproject.toml").is_file()
    upload = next(s for s in steps if s.get("uses", "").startswith("actions/upload-artifact"))
    assert upload["if"] == "always()"
    # The step the workflow's comment step reads: the comparison's path, written by the script.
    assert "comparison" in (ROOT / "scripts" / "ci-gate.sh").read_text().split("output comparison")[1][:40]


class Runner:
    """Runs the composite action's steps the way a GitHub runner does: `run` steps in bash with
    their env, expressions filled in, outputs read back from $GITHUB_OUTPUT, `if:` honoured.
    setup-python and the install step are what this test's interpreter already is."""

    def __init__(self, workspace: Path, temp: Path, inputs: dict[str, str]) -> None:
        self.spec = action()
        self.workspace, self.temp = workspace, temp
        self.inputs = {name: str(i.get("default", "")) for name, i in self.spec["inputs"].items()} | inputs
        self.outputs: dict[str, dict[str, str]] = {}
        self.summary = temp / "summary.md"
        self.uploaded: list[Path] = []
        self.failed = False
        self.exit_code = 0

    def value(self, expression: str) -> str:
        head, _, rest = expression.partition(".")
        if head == "inputs":
            return self.inputs[rest]
        if expression == "runner.temp":
            return str(self.temp)
        if head == "steps":
            step, _, name = rest.partition(".outputs.")
            return self.outputs.get(step, {}).get(name, "")
        raise AssertionError(f"an expression this runner does not know: {expression}")

    def fill(self, text: str) -> str:
        return EXPRESSION.sub(lambda m: self.value(m.group(1)), text)

    def condition(self, step: dict) -> bool:
        condition = step.get("if")
        if condition is None:
            return not self.failed
        if condition == "always()":
            return True
        left, op, right = re.fullmatch(r"(\S+) (!=|==) '(.*)'", condition).groups()
        return (self.value(left) != right) == (op == "!=") and not self.failed

    def run(self) -> None:
        for step in self.spec["runs"]["steps"]:
            if not self.condition(step):
                continue
            if "uses" in step:
                if step["uses"].startswith("actions/upload-artifact"):
                    self.uploaded.append(Path(self.fill(step["with"]["path"])))
                continue
            if step.get("id") == "install":
                continue  # promptprobe is installed in this interpreter already
            output = self.temp / f"output-{step.get('id', 'step')}"
            output.touch()
            env = {
                **environ_clean(dict(os.environ)),
                "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
                "GITHUB_ACTION_PATH": str(ROOT),
                "GITHUB_OUTPUT": str(output),
                "GITHUB_STEP_SUMMARY": str(self.summary),
                "GITHUB_BASE_REF": "main",
                **{k: self.fill(str(v)) for k, v in (step.get("env") or {}).items()},
            }
            done = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]],
                                  cwd=self.workspace, env=env, capture_output=True, text=True, timeout=180)
            self.log = getattr(self, "log", "") + done.stdout + done.stderr
            if "id" in step:
                self.outputs[step["id"]] = dict(
                    line.split("=", 1) for line in output.read_text().splitlines() if "=" in line)
            if done.returncode:
                self.failed, self.exit_code = True, done.returncode

    def output(self, name: str) -> str:
        return self.value(self.spec["outputs"][name]["value"].strip("${} "))


@pytest.fixture
def checkout(repository, tmp_path):
    """The pull request's checkout: a clone, so the baseline is origin/main as on a runner."""
    work = tmp_path / "checkout"
    subprocess.run(["git", "clone", "-q", str(repository), str(work)], check=True)
    return work


def run_action(checkout: Path, tmp_path: Path, model: str) -> Runner:
    runner = Runner(checkout, tmp_path / "runner-temp", {
        "probeset": "probes/refusal-header.toml",
        "prompts": "prompts/always-header.md",
        "config": "examples/demo/probe.toml",
        "metrics": "header_present",
        "model": f"helpdesk={model}",
        "run-args": "-n 2",
    })
    runner.temp.mkdir()
    runner.run()
    return runner


def test_the_action_passes_an_unchanged_prompt_and_leaves_the_comparison_and_the_artifact(
    checkout, tmp_path, demo_model
):
    runner = run_action(checkout, tmp_path, demo_model)
    assert not runner.failed, runner.log
    assert runner.output("status") == "0"
    comparison = Path(runner.output("comparison"))
    text = comparison.read_text()
    assert "## promptprobe: prompts/always-header.md against origin/main" in text
    assert runner.summary.read_text() == text  # the job's summary page shows the same
    (uploaded,) = runner.uploaded
    assert comparison.parent == uploaded and (uploaded / "report.html").is_file()
    run = Path(runner.output("run"))
    assert run.parent == uploaded / "runs" and (run / "manifest.json").is_file()
    manifest = json.loads((run / "manifest.json").read_text())
    assert [m["name"] for m in manifest["models"]] == ["helpdesk"]  # --model NAME=SPEC


def test_the_action_fails_on_a_worse_prompt_after_uploading(checkout, tmp_path, demo_model):
    # The script's own exit 4 is this test's too: the action runs scripts/ci-gate.sh.
    (checkout / "prompts" / "always-header.md").write_bytes(EXCEPTION_ONLY)
    runner = run_action(checkout, tmp_path, demo_model)
    assert runner.failed and runner.exit_code == 4, runner.log
    assert runner.output("status") == "4"
    assert "FAIL: header_present got worse: baseline " in runner.log
    assert "### prompts/always-header.md: **worse**" in Path(runner.output("comparison")).read_text()
    assert runner.uploaded and (runner.uploaded[0] / "report.html").is_file()
    assert (runner.uploaded[0] / "probe-run.txt").read_text().strip() == runner.output("run")
