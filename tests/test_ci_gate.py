"""The CI workflow of docs/ci.md, for real: scripts/ci-gate.sh in a throwaway git repository
against the demo server, and the example files it takes a baseline of are files, not links."""

import filecmp
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT
from servers import LocalServer, Reply

from promptprobe.demo import DemoServer

SCRIPT = ROOT / "scripts" / "ci-gate.sh"
PACKAGE_DEMO = ROOT / "src" / "promptprobe" / "demo"
EXCEPTION_ONLY = (ROOT / "prompts" / "exception-only.md").read_bytes()


def test_the_documented_workflow_runs_the_script():
    workflow = (ROOT / "docs" / "ci.md").read_text()
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


def gate(repo: Path, model: str, **env: str) -> subprocess.CompletedProcess:
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
        [str(SCRIPT), "main", "prompts/always-header.md"],
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


def test_a_prompt_that_breaks_the_header_fails_the_gate(repository, demo_model):
    (repository / "prompts" / "always-header.md").write_bytes(EXCEPTION_ONLY)
    result = gate(repository, demo_model)
    assert result.returncode == 4, result.stdout + result.stderr
    assert "FAIL: header_present got worse: baseline " in result.stderr
    assert (repository / "out" / "report.html").is_file() and (repository / "out" / "probe-run.txt").is_file()


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
