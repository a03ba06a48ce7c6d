"""The CI gate for real: `probe gate` in a throwaway git repository against the demo server (two
models arm by arm, new and unchanged prompts, failed samples, bad input), and the GitHub Action's
own steps run as a runner runs them, with the GITHUB_* environment it sets, against a local
stand-in for the GitHub REST API: one comment created on the first push, the same one updated on
the second."""

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
from click.testing import CliRunner
from conftest import ROOT
from github_server import GitHubServer
from servers import LocalServer, Reply

from promptprobe.cli import main
from promptprobe.demo import DemoServer
from promptprobe.github import Runner as GitHubRunner
from promptprobe.github import marker, post_comment

PACKAGE_DEMO = ROOT / "src" / "promptprobe" / "demo"
EXCEPTION_ONLY = (ROOT / "prompts" / "exception-only.md").read_bytes()
ALWAYS_HEADER = (ROOT / "prompts" / "always-header.md").read_bytes()
GIT = ["git", "-c", "user.name=ci", "-c", "user.email=ci@example.com"]


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


def commit(repo: Path, message: str) -> None:
    subprocess.run([*GIT, "add", "-A"], cwd=repo, check=True)
    subprocess.run([*GIT, "commit", "-qm", message], cwd=repo, check=True)


@pytest.fixture
def demo_url():
    # One per test: the simulated model's replies follow how often it has seen each request, so
    # each test's outcome is the same whichever tests ran before it.
    server = DemoServer("127.0.0.1", 0).start()
    yield server.url
    server.stop()


@pytest.fixture
def repository(tmp_path, demo_url):
    """A git repository with the example probe set and prompts and a target config naming two
    models (as the README's probe.toml does), committed on main."""
    repo = tmp_path / "repo"
    (repo / "probes").mkdir(parents=True)
    (repo / "prompts").mkdir()
    shutil.copy(ROOT / "probes" / "refusal-header.toml", repo / "probes")
    shutil.copy(ROOT / "prompts" / "always-header.md", repo / "prompts")
    shutil.copy(ROOT / "prompts" / "exception-only.md", repo / "prompts")
    shutil.copytree(ROOT / "examples" / "demo" / "acme", repo / "acme")
    config = (ROOT / "examples" / "demo" / "probe.toml").read_text()
    two = (f'models = [{{ name = "one", spec = "openai:acme-helpdesk@{demo_url}" }}, '
           f'{{ name = "two", spec = "openai:acme-helpdesk@{demo_url.replace("127.0.0.1", "localhost")}" }}]')
    config = re.sub(r"(?m)^models = .*$", two, config).replace("repeats = 3", "repeats = 1")
    (repo / "probe.toml").write_text(config)
    subprocess.run([*GIT, "init", "-q", "-b", "main"], cwd=repo, check=True)
    commit(repo, "baseline")
    return repo


def gate(repo: Path, monkeypatch, *args: str):
    monkeypatch.chdir(repo)
    return CliRunner().invoke(main, ["gate", *args, "--runs-dir", str(repo / "runs")])


def test_two_models_are_gated_arm_by_arm_in_one_run_and_one_family(repository, monkeypatch):
    # The pull request breaks always-header (it becomes exception-only) and leaves the other alone.
    (repository / "prompts" / "always-header.md").write_bytes(EXCEPTION_ONLY)
    result = gate(repository, monkeypatch, "main", "prompts/always-header.md", "prompts/exception-only.md",
                  "--metric", "header_present", "--metric", "refusal_recall", "-n", "2", "--format", "json")
    assert result.exit_code == 4, result.output
    data = json.loads(result.stdout)
    assert [(p["path"], p["status"]) for p in data["prompts"]] == [
        ("prompts/always-header.md", "gated"), ("prompts/exception-only.md", "unchanged")]
    # Each model's baseline against its own candidate: 2 models x 2 metrics, one family.
    pairs = sorted({r["pair"] for r in data["comparison"]["results"]})
    assert pairs == ["prompts/always-header.md on one", "prompts/always-header.md on two"]
    assert data["comparison"]["family"] == 4 and len(data["rows"]) == 4
    assert all(r["p_adjusted"] is not None for r in data["comparison"]["results"])
    assert {r["model"] for r in data["rows"] if r["metric"] == "header_present" and r["kind"] == "worse"} == {
        "one", "two"}
    assert "FAIL: header_present (prompts/always-header.md on one) got worse" in result.stderr
    manifest = json.loads((Path(data["run"]) / "manifest.json").read_text())
    names = {p["name"]: p for p in manifest["prompts"]}
    assert set(names) == {"always-header.baseline", "always-header.candidate"}  # the unchanged one not probed
    assert names["always-header.baseline"]["path"] == "main:prompts/always-header.md"
    copy = Path(data["run"]) / names["always-header.baseline"]["copy"]
    assert copy.read_bytes() == ALWAYS_HEADER  # the bytes at the ref, exactly
    assert [m["name"] for m in manifest["models"]] == ["one", "two"]


def test_a_new_prompt_is_reported_and_not_gated(repository, monkeypatch):
    (repository / "prompts" / "new.md").write_text("A new prompt.\n{{sources}}\n")
    result = gate(repository, monkeypatch, "main", "prompts/new.md", "prompts/always-header.md")
    assert result.exit_code == 0, result.output
    assert "prompts/new.md: new in this change (absent at main), not gated" in result.stdout
    assert "prompts/always-header.md: unchanged since main, not probed" in result.stdout
    assert "gate: nothing to gate: no prompt changed since main" in result.stdout
    assert not (repository / "runs").exists()  # nothing was probed, nothing was paid for


def flaky(request):
    """The demo's behaviour for the header, and every call about one question failing."""
    if "Enterprise" in json.dumps(request.json["messages"][-1]):
        return Reply(status=500, body=b'{"error": {"message": "upstream down"}}')
    return Reply("[[ANSWER]]\nok [1]")


def test_failed_samples_are_decided_on_what_was_recorded_and_strict_fails_on_them(repository, monkeypatch):
    (repository / "prompts" / "always-header.md").write_bytes(ALWAYS_HEADER + b"\nBe brief.\n")
    with LocalServer(flaky) as server:
        args = ["main", "prompts/always-header.md", "--model", f"openai:m@{server.url}/v1",
                "--max-attempts", "1", "--metric", "header_present", "-n", "1"]
        result = gate(repository, monkeypatch, *args)
        strict = gate(repository, monkeypatch, *args, "--strict", "--format", "json")
    failed = [json.loads(line) for line in (Path(json.loads(strict.stdout)["run"]) / "samples.jsonl").open()]
    errors = sum(1 for s in failed if s["error"])
    assert errors == 2  # the one question that always fails, once per arm
    assert result.exit_code == 0, result.output
    assert (f"not worse: no candidate is reliably worse than main (1 comparison, one family at 0.05). "
            f"{errors} of 24 samples failed after retries: each counts against its arm, decided on what "
            "was recorded") in result.stdout
    assert strict.exit_code == 1, strict.output
    assert "--strict fails on them" in json.loads(strict.stdout)["summary"]


def test_bad_input_is_exit_2_and_a_target_that_is_down_exit_3(repository, monkeypatch):
    (repository / "prompts" / "always-header.md").write_bytes(EXCEPTION_ONLY)
    no_ref = gate(repository, monkeypatch, "origin/main", "prompts/always-header.md")
    assert no_ref.exit_code == 2
    assert "baseline ref 'origin/main' is not a commit of this checkout: fetch it" in no_ref.stderr
    capped = gate(repository, monkeypatch, "main", "prompts/always-header.md", "--max-cost", "1")
    assert capped.exit_code == 2 and not (repository / "runs").exists()  # refused before anything
    assert capped.stderr.startswith("error: --max-cost refuses to start: cost unknown for openai:acme-helpdesk@")
    missing = gate(repository, monkeypatch, "main", "prompts/nope.md")
    assert missing.exit_code == 2 and "prompts/nope.md: no such prompt file in the working tree" in missing.stderr
    (repository / "probe.toml").rename(repository / "elsewhere.toml")  # no target config: never silently none
    bare = gate(repository, monkeypatch, "main", "prompts/always-header.md", "--model", "openai:m@http://127.0.0.1:9/v1")
    assert bare.exit_code == 2 and "no retrieval path: there is no probe.toml here" in bare.stderr
    (repository / "elsewhere.toml").rename(repository / "probe.toml")
    down = gate(repository, monkeypatch, "main", "prompts/always-header.md", "-n", "1",
                "--model", "openai:m@http://127.0.0.1:9/v1")
    assert down.exit_code == 3, down.output
    assert not (repository / "runs").exists() or not list((repository / "runs").iterdir())


# -- the comment ----------------------------------------------------------------------------------------


def github_env(tmp_path: Path, api: str, token: str, number: int = 7, head: str = "acme/helpdesk") -> dict:
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"pull_request": {"number": number, "head": {"repo": {"full_name": head}}}}))
    return {"GITHUB_API_URL": api, "GITHUB_REPOSITORY": "acme/helpdesk", "GITHUB_EVENT_PATH": str(event),
            "GITHUB_TOKEN": token, "GITHUB_SERVER_URL": "https://github.example", "GITHUB_RUN_ID": "4242",
            "GITHUB_EVENT_NAME": "pull_request"}


def test_the_comment_is_found_by_its_marker_past_the_first_page(tmp_path):
    with GitHubServer("acme/helpdesk", "t0ken") as server:
        others = [{"id": i, "body": f"comment {i}", "html_url": "u"} for i in range(1, 151)]
        server.comments[7] = [*others[:120], {"id": 500, "body": "<!-- promptprobe:example -->\nold",
                                              "html_url": "u"}, *others[120:]]
        runner = GitHubRunner.from_environment(github_env(tmp_path, server.url, "t0ken"))
        posted = post_comment(runner, marker("probes/example.toml"), "new table")
        assert posted.action == "updated"
        assert server.comments[7][120]["body"] == "<!-- promptprobe:example -->\nnew table"
        assert len(server.comments[7]) == 151  # updated in place, nothing added
        assert [c.method for c in server.calls] == ["GET", "GET", "PATCH"]  # two pages of 100


def test_a_fork_pull_request_says_why_there_is_no_comment(tmp_path):
    with GitHubServer("acme/helpdesk", "t0ken") as server:
        env = github_env(tmp_path, server.url, server.read_only_token, head="someone/helpdesk")
        runner = GitHubRunner.from_environment(env)
        assert runner.fork
        posted = post_comment(runner, marker("probes/example.toml"), "table")
    assert posted.action == "skipped" and "HTTP 403" in posted.reason and "from a fork" in posted.reason
    assert server.comments == {}


# -- the GitHub Action (action.yml): its steps, run here as a runner would ---------------------------

ACTION = ROOT / "action.yml"
EXPRESSION = re.compile(r"\$\{\{\s*(.+?)\s*\}\}")


def action() -> dict:
    return yaml.safe_load(ACTION.read_text())


def test_the_action_is_composite_and_calls_probe_gate():
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
    gate_step = next(s for s in steps if s.get("id") == "gate")
    assert "probe gate " in gate_step["run"] and "scripts/" not in text
    assert not (ROOT / "scripts" / "ci-gate.sh").exists()


class Runner:
    """Runs the composite action's steps the way a GitHub runner does: `run` steps in bash with
    their env and the runner's GITHUB_* variables, expressions filled in, outputs read back from
    $GITHUB_OUTPUT, `if:` honoured. setup-python and the install step are this test's interpreter."""

    def __init__(self, workspace: Path, temp: Path, inputs: dict[str, str], github: dict[str, str]) -> None:
        self.spec = action()
        self.workspace, self.temp, self.github = workspace, temp, github
        self.inputs = {name: str(i.get("default", "")) for name, i in self.spec["inputs"].items()} | inputs
        self.outputs: dict[str, dict[str, str]] = {}
        self.summary = temp / "summary.md"
        self.uploaded: list[Path] = []
        self.failed = False
        self.exit_code = 0
        self.log = ""

    def value(self, expression: str) -> str:
        head, _, rest = expression.partition(".")
        if head == "inputs":
            return self.fill(self.inputs[rest])
        if expression == "runner.temp":
            return str(self.temp)
        if expression == "github.token":
            return self.github["GITHUB_TOKEN"]
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
            output.write_text("")
            env = {
                **{k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_", "GITHUB_"))},
                "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
                "GITHUB_ACTION_PATH": str(ROOT),
                "GITHUB_OUTPUT": str(output),
                "GITHUB_STEP_SUMMARY": str(self.summary),
                "GITHUB_BASE_REF": "main",
                "GITHUB_WORKSPACE": str(self.workspace),
                "RUNNER_TEMP": str(self.temp),
                **{k: v for k, v in self.github.items() if k != "GITHUB_TOKEN"},  # the step's env gives it
                **{k: self.fill(str(v)) for k, v in (step.get("env") or {}).items()},
            }
            done = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]],
                                  cwd=self.workspace, env=env, capture_output=True, text=True, timeout=180)
            self.log += done.stdout + done.stderr
            if "id" in step:
                self.outputs[step["id"]] = dict(
                    line.split("=", 1) for line in output.read_text().splitlines() if "=" in line)
            if done.returncode:
                self.failed, self.exit_code = True, done.returncode

    def output(self, name: str) -> str:
        return self.value(self.spec["outputs"][name]["value"].strip("${} "))


def documented_workflow() -> dict:
    text = (ROOT / "docs" / "ci.md").read_text()
    (block,) = re.findall(r"```yaml\n(name: prompt gate\n.*?)```", text, re.S)
    return yaml.safe_load(block)


def test_the_documented_workflow_works_as_written():
    text = (ROOT / "docs" / "ci.md").read_text()
    assert "OWNER/" not in text and "@v1" not in text and "scripts/ci-gate.sh" not in text
    workflow = documented_workflow()
    steps = workflow["jobs"]["probe"]["steps"]
    (gate_step,) = [s for s in steps if s.get("uses") == "./promptprobe"]
    checkouts = [s for s in steps if s.get("uses", "").startswith("actions/checkout@")]
    assert checkouts[0]["with"]["fetch-depth"] == 0 and checkouts[0]["with"]["submodules"] is True
    assert set(gate_step["with"]) <= set(action()["inputs"])
    assert workflow["permissions"]["pull-requests"] == "write"


def push(checkout: Path, prompt: bytes, message: str) -> None:
    (checkout / "prompts" / "always-header.md").write_bytes(prompt)
    commit(checkout, message)


def run_action(checkout: Path, temp: Path, github: dict[str, str], demo_url: str) -> Runner:
    documented = next(s for s in documented_workflow()["jobs"]["probe"]["steps"] if s.get("uses") == "./promptprobe")
    inputs = {**{k: str(v) for k, v in documented["with"].items()},
              "probeset": "probes/refusal-header.toml", "prompts": "prompts/always-header.md prompts/new.md",
              "model": f"helpdesk=openai:acme-helpdesk@{demo_url}", "args": "-n 1"}
    temp.mkdir()
    runner = Runner(checkout, temp, inputs, github)
    runner.run()
    return runner


def test_the_action_comments_once_and_updates_the_same_comment_on_the_next_push(repository, tmp_path, demo_url):
    checkout = tmp_path / "checkout"  # the pull request's checkout: a clone, so the baseline is origin/main
    subprocess.run(["git", "clone", "-q", str(repository), str(checkout)], check=True)
    (checkout / "prompts" / "new.md").write_text("A new prompt.\n{{sources}}\n")
    with GitHubServer("acme/helpdesk", "t0ken") as server:
        github = github_env(tmp_path, server.url, "t0ken")
        push(checkout, EXCEPTION_ONLY, "first push: the header only in the exception")
        first = run_action(checkout, tmp_path / "push-1", github, demo_url)
        assert first.failed and first.exit_code == 4 and first.output("status") == "4", first.log
        (created,) = server.comments[7]
        before = created["body"]
        push(checkout, ALWAYS_HEADER + b"\nAnswer in one paragraph.\n", "second push: the header back")
        second = run_action(checkout, tmp_path / "push-2", github, demo_url)
        assert not second.failed and second.output("status") == "0", second.log
        (updated,) = server.comments[7]  # still one comment: the same one, updated in place
        after = updated["body"]
    assert updated["id"] == created["id"]
    assert [c.method for c in server.calls] == ["GET", "POST", "GET", "PATCH"]
    assert all(c.authorization == "Bearer t0ken" for c in server.calls)
    for body, verdict in ((before, "worse"), (after, "not worse")):
        assert body.startswith("<!-- promptprobe:refusal-header -->\n")
        assert f"### promptprobe gate: {verdict}\n" in body
        assert "| metric " in body and "| baseline " in body and "| change (B - A, interval) " in body
        assert "prompts/new.md: new in this change (absent at origin/main), not gated" in body
        assert "[this workflow run](https://github.example/acme/helpdesk/actions/runs/4242#artifacts)" in body
        assert str(tmp_path) not in body and "runs/2" not in body  # no runner paths
        assert body.count("\n|") < 20  # a short table, not one column per number
    assert "| header_present " in before and "**worse**" in before
    assert "pull-request comment created: https://github.example/acme/helpdesk/pull/7#issuecomment-" in first.log
    assert "pull-request comment updated" in second.log
    # The job summary, the artifact and the outputs, as before.
    assert second.summary.read_text().strip() in after
    (uploaded,) = second.uploaded
    assert (uploaded / "report.html").is_file() and Path(second.output("run")).parent == uploaded / "runs"
    if os.environ.get("PROBE_SAVE_COMMENTS"):
        Path(os.environ["PROBE_SAVE_COMMENTS"]).write_text(f"{before}\n----- after the second push -----\n{after}")


def test_a_fork_without_a_key_gets_the_reason_in_the_summary_and_no_comment(repository, tmp_path, monkeypatch):
    # A fork's workflow has no secrets: here, a model that needs a key the job does not have.
    (repository / "prompts" / "always-header.md").write_bytes(EXCEPTION_ONLY)
    with GitHubServer("acme/helpdesk", "t0ken") as server:
        env = {**github_env(tmp_path, server.url, server.read_only_token, head="someone/helpdesk"),
               "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"), "OPENAI_API_KEY": None}
        monkeypatch.chdir(repository)
        result = CliRunner(env=env).invoke(main, ["gate", "main", "prompts/always-header.md", "-n", "1",
                                                  "--model", "openai:gpt-4.1-mini", "--comment"])
    assert result.exit_code == 3, result.output
    summary = (tmp_path / "summary.md").read_text()
    assert summary.startswith("### promptprobe gate: could not run\n") and "OPENAI_API_KEY" in summary
    assert "This pull request comes from a fork: GitHub gives such a workflow no secrets" in summary
    assert "pull-request comment not posted: GitHub refused it (HTTP 403): on a pull request from a fork" in result.stderr
    assert server.comments == {}


def test_the_action_that_cannot_start_still_sets_its_outputs_and_fails_after_the_upload(repository, tmp_path):
    checkout = tmp_path / "checkout"
    subprocess.run(["git", "clone", "-q", str(repository), str(checkout)], check=True)
    push(checkout, EXCEPTION_ONLY, "a push")
    with GitHubServer("acme/helpdesk", "t0ken") as server:
        runner = Runner(checkout, tmp_path / "temp", {"prompts": "prompts/always-header.md",
                                                       "model": "openai:m@http://127.0.0.1:9/v1"},
                        github_env(tmp_path, server.url, "t0ken"))
        runner.temp.mkdir()
        runner.run()
        (comment,) = server.comments[7]
    assert runner.failed and runner.exit_code == 3 and runner.output("status") == "3", runner.log
    assert runner.output("run") == "" and runner.uploaded  # no run, and the artifact step still ran
    assert comment["body"].startswith("<!-- promptprobe:refusal-header -->\n### promptprobe gate: could not run\n")
