"""Exit codes and one-sentence errors of `probe run` and `probe report` (DESIGN.md)."""

import json
import socket
import time

from click.testing import CliRunner
from conftest import ROOT, run_dir_of, write_config, write_probeset
from servers import LocalServer, Reply

from promptprobe.cli import main

PROBESET = str(ROOT / "probes" / "refusal-header.toml")
PROMPT = str(ROOT / "prompts" / "always-header.md")


def invoke(tmp_path, monkeypatch, *args):
    monkeypatch.chdir(tmp_path)
    # Without a probe.toml of the test's own, probing without retrieval is asked for explicitly.
    flag = [] if (tmp_path / "probe.toml").exists() or "--config" in args else ["--retrieval", "none"]
    result = CliRunner().invoke(main, ["run", *flag, *args, "--runs-dir", str(tmp_path / "runs")])
    assert "Traceback" not in result.output
    return result


def no_runs(tmp_path) -> bool:
    return not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_missing_key_is_exit_3_before_any_call(tmp_path, monkeypatch, retrieval_server):
    write_config(tmp_path / "probe.toml", retrieval_server.url)
    result = invoke(tmp_path, monkeypatch, PROBESET, "--prompt", PROMPT, "--model", "anthropic:claude-sonnet-4-5")
    assert result.exit_code == 3
    assert result.stderr.strip() == (
        "error: model anthropic:claude-sonnet-4-5: environment variable ANTHROPIC_API_KEY is not set "
        "(it holds the API key)")
    assert retrieval_server.requests == [] and no_runs(tmp_path)


def test_named_key_env_is_required_for_a_compatible_server(tmp_path, monkeypatch):
    (tmp_path / "probe.toml").write_text(
        '[run]\nmodels = [{ spec = "openai:m@http://127.0.0.1:9/v1", api_key_env = "MY_VLLM_KEY" }]\n')
    result = invoke(tmp_path, monkeypatch, PROBESET, "--prompt", PROMPT)
    assert result.exit_code == 3
    assert "environment variable MY_VLLM_KEY is not set" in result.stderr


def test_unreachable_retrieval_is_exit_3(tmp_path, monkeypatch):
    url = f"http://127.0.0.1:{free_port()}"
    write_config(tmp_path / "probe.toml", url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-placeholder-000000000000000000")
    result = invoke(tmp_path, monkeypatch, PROBESET, "--prompt", PROMPT, "--model", "openai:gpt-x")
    assert result.exit_code == 3
    message = result.stderr.strip().splitlines()[-1]
    assert message.startswith(f"error: retrieval {url}/search: cannot connect")
    assert message.endswith("nothing was run")
    assert no_runs(tmp_path)


def test_bad_config_is_exit_2(tmp_path, monkeypatch):
    (tmp_path / "probe.toml").write_text('[retrieval]\nkind = "http"\nurl = "http://x/search"\nresult = "hits"\n')
    result = invoke(tmp_path, monkeypatch, PROBESET, "--prompt", PROMPT, "--model", "openai:m@http://x/v1")
    assert result.exit_code == 2
    assert "probe.toml [retrieval] (kind = \"http\"): unknown key 'result'" in result.stderr


def test_config_syntax_error_names_line(tmp_path, monkeypatch):
    (tmp_path / "probe.toml").write_text('[run]\nrepeats = = 3\n')
    result = invoke(tmp_path, monkeypatch, PROBESET, "--prompt", PROMPT)
    assert result.exit_code == 2
    assert "probe.toml: TOML syntax error" in result.stderr and "line 2" in result.stderr


def test_bad_probe_set_is_exit_2(tmp_path, monkeypatch):
    bad = write_probeset(tmp_path / "bad.toml", [("a", "Same?", None), ("b", "same?", None)])
    result = invoke(tmp_path, monkeypatch, str(bad), "--prompt", PROMPT, "--model", "openai:m@http://x/v1")
    assert result.exit_code == 2
    assert "cases 'a' and 'b' ask the same question" in result.stderr


def test_unknown_prompt_file_is_exit_2(tmp_path, monkeypatch):
    result = invoke(tmp_path, monkeypatch, PROBESET, "--prompt", "prompts/nope.md", "--model", "openai:m@http://x/v1")
    assert result.exit_code == 2
    assert result.stderr.strip() == "error: prompts/nope.md: no such prompt file"


def test_unknown_provider_prefix_is_exit_2(tmp_path, monkeypatch):
    result = invoke(tmp_path, monkeypatch, PROBESET, "--prompt", PROMPT, "--model", "gemini:pro")
    assert result.exit_code == 2
    assert "model 'gemini:pro': unknown provider 'gemini'" in result.stderr


def test_no_model_is_exit_2(tmp_path, monkeypatch):
    result = invoke(tmp_path, monkeypatch, PROBESET, "--prompt", PROMPT)
    assert result.exit_code == 2
    assert "no model" in result.stderr


def test_failed_samples_exit_1_and_report_says_so(tmp_path, monkeypatch):
    probeset = write_probeset(tmp_path / "p.toml", [("a", "good", None), ("b", "bad", None)])

    def reply(request):
        if request.json["messages"][-1]["content"] == "bad":
            return Reply(status=404, body=b'{"error": {"message": "model not found"}}')
        return Reply("[[ANSWER]]\nok")

    with LocalServer(reply) as server:
        result = invoke(tmp_path, monkeypatch, str(probeset), "--prompt", PROMPT, "--model", f"openai:m@{server.url}/v1")
    assert result.exit_code == 1
    assert "1 of 2 samples failed after retries (1 http_status); they stay in every denominator" in result.stdout
    assert "error: 1 of 2 samples failed after retries" in result.stderr
    run_dir = run_dir_of(result)
    report = CliRunner().invoke(main, ["report", str(run_dir), "--format", "json"])
    assert report.exit_code == 0
    (arm,) = json.loads(report.stdout)["arms"]
    assert arm["errors"] == 1 and arm["metrics"]["header_present"]["n"] == 2
    assert arm["cases"] == [
        {"case_id": "a", "n": 1, "present": 1, "absent": 0, "misplaced": 0, "empty": 0, "errors": 0},
        {"case_id": "b", "n": 1, "present": 0, "absent": 0, "misplaced": 0, "empty": 0, "errors": 1},
    ]
    md = CliRunner().invoke(main, ["report", str(run_dir), "--format", "md"])
    lines = md.stdout.splitlines()
    assert "prompt: always-header" in lines  # one arm: its prompt and model are said above the table
    assert any(line.startswith("| header_present ") and "| 1/2 " in line for line in lines)


def test_report_of_a_non_run_is_exit_2(tmp_path):
    result = CliRunner().invoke(main, ["report", str(tmp_path)])
    assert result.exit_code == 2
    assert result.stderr.strip() == f"error: {tmp_path}: not a run directory (no manifest.json)"


def test_a_model_down_from_the_start_is_exit_3_within_seconds_and_leaves_nothing(tmp_path, monkeypatch):
    url = f"http://127.0.0.1:{free_port()}/v1"
    probeset = write_probeset(tmp_path / "p.toml", [(f"c{i}", f"q{i}", None) for i in range(6)])
    started = time.monotonic()
    result = invoke(tmp_path, monkeypatch, str(probeset), "--prompt", PROMPT, "--model", f"openai:m@{url}")
    assert time.monotonic() - started < 5
    assert result.exit_code == 3
    port = url.split(":")[2].split("/")[0]
    assert result.stderr == (f"error: model openai:m@{url}: cannot connect to 127.0.0.1:{port} "
                             "(Connection refused); nothing was run\n")
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_a_run_without_retrieval_does_not_report_its_retrievals_as_empty(tmp_path, monkeypatch):
    """With `--retrieval none` (and `kind = "none"`, what `probe init` writes) no passage is expected:
    the report does not point out every case as an empty retrieval."""
    probeset = write_probeset(tmp_path / "p.toml", [("a", "Question one?", None), ("b", "Question two?", None)])
    with LocalServer() as server:
        result = invoke(tmp_path, monkeypatch, str(probeset), "--prompt", PROMPT, "--model", f"openai:m@{server.url}/v1")
    assert result.exit_code == 0, result.output
    assert "empty results" not in result.output
    report = json.loads(CliRunner().invoke(main, ["report", str(run_dir_of(result)), "--json"]).stdout)
    assert [c["empty"] for c in report["retrieval"]["cases"]] == [0, 0]


def test_a_report_imports_neither_numpy_nor_scipy(tmp_path, monkeypatch):
    """The report's own path is pure Python (docs/performance.md): numpy and scipy, 0.1-1 s to
    import, are for the comparisons and the judges' statistics."""
    import subprocess
    import sys

    probeset = write_probeset(tmp_path / "p.toml", [("a", "Question one?", None), ("b", "Question two?", None)])
    with LocalServer() as server:
        result = invoke(tmp_path, monkeypatch, str(probeset), "--prompt", PROMPT, "--model", f"openai:m@{server.url}/v1")
    assert result.exit_code == 0, result.output
    script = ("import sys\nfrom promptprobe.cli import main\n"
              "try:\n    main(['report', sys.argv[1], '--json'], standalone_mode=False)\n"
              "finally:\n    print([m for m in ('numpy', 'scipy') if m in sys.modules], file=sys.stderr)\n")
    done = subprocess.run([sys.executable, "-c", script, str(run_dir_of(result))], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip().splitlines()[-1] == "[]"
