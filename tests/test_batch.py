"""Batch runs through the real SDKs to a local server speaking the batch wire formats: results
recorded exactly like live samples, per-request failures and expired batches retried in
follow-up batches, Ctrl-C detaching, SIGKILL and resume re-attaching without submitting
anything twice, --cancel, Azure's paths, one batch per sequential round, batch prices, and
prompt caching with what it saved."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from batch_server import BatchServer
from click.testing import CliRunner
from conftest import ROOT, run_dir_of, write_probeset
from servers import LocalServer, Reply

from promptprobe.cli import main
from promptprobe.jsonio import read_jsonl

PROMPT = str(ROOT / "prompts" / "always-header.md")
PROBE = str(Path(sys.executable).parent / "probe")


def probeset(tmp_path: Path, cases: int = 3) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    return write_probeset(tmp_path / "p.toml", [(f"c{i}", f"question {i}", None) for i in range(cases)])


def batch_run(tmp_path: Path, spec: str, *args: str, cases: int = 3):
    return CliRunner().invoke(main, ["run", str(probeset(tmp_path, cases)), "--prompt", PROMPT, "-m", spec,
                                     "--retrieval", "none", "--batch", "--poll-interval", "0.02", "-n", "2",
                                     "--runs-dir", str(tmp_path / "runs"), *args])


def question_of(body: dict) -> str:
    content = body["messages"][-1]["content"]
    return content if isinstance(content, str) else content[0]["text"]


@pytest.fixture
def anthropic_env(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-key-0123456789")


def test_a_batch_sample_is_recorded_exactly_like_a_live_one(tmp_path):
    with BatchServer(polls=3) as server:
        batch = batch_run(tmp_path / "b", f"openai:m@{server.url}/v1")
        live = CliRunner().invoke(main, ["run", str(probeset(tmp_path / "l")), "--prompt", PROMPT, "-m",
                                         f"openai:m@{server.url}/v1", "--retrieval", "none", "-n", "2",
                                         "--runs-dir", str(tmp_path / "l" / "runs")])
    assert batch.exit_code == 0 and live.exit_code == 0, batch.output
    assert len(server.submitted) == 6 and len(server.batches) == 1  # one batch, nothing sent twice
    batch_run_dir, live_run_dir = run_dir_of(batch), run_dir_of(live)
    batched = {s["sample_id"]: s for s in read_jsonl(batch_run_dir / "samples.jsonl")}
    lived = {s["sample_id"]: s for s in read_jsonl(live_run_dir / "samples.jsonl")}
    assert batched.keys() == lived.keys()
    for sid, sample in batched.items():
        assert set(sample) - set(lived[sid]) == {"via", "batch"} and sample["via"] == "batch"
        assert sample["header"] == lived[sid]["header"] and sample["outcomes"] == lived[sid]["outcomes"]
        assert sample["attempts"] == 1 and sample["error"] is None
        line = (batch_run_dir / sample["response"]["body"]).read_bytes()
        result = json.loads(line)  # the result line's own bytes are the sample's body
        assert result["response"]["body"]["choices"][0]["message"]["content"] == (batch_run_dir / sample["raw"]["path"]).read_text()
    ledger = read_jsonl(batch_run_dir / "batches.jsonl")
    assert len(ledger) == 1 and ledger[0]["collected"] is True and sorted(ledger[0]["samples"]) == sorted(batched)
    assert ledger[0].keys() >= {"batch", "provider", "model", "samples", "submitted", "ended", "status"}
    reports = [json.loads(CliRunner().invoke(main, ["report", str(r), "--json"]).stdout) for r in (batch_run_dir, live_run_dir)]
    assert [a["metrics"] for a in reports[0]["arms"]] == [a["metrics"] for a in reports[1]["arms"]]
    manifest = json.loads((batch_run_dir / "manifest.json").read_text())
    assert manifest["parameters"]["batch"] is True and manifest["status"] == "complete"


def test_anthropic_batches_retry_what_may_succeed_and_fail_what_cannot(tmp_path, anthropic_env):
    seen: dict[str, int] = {}

    def answer(custom_id, body):
        question = question_of(body)
        seen[question] = seen.get(question, 0) + 1
        if question == "question 0" and seen[question] <= 2:
            return ("error", "overloaded_error")  # transient: retried in a follow-up batch
        if question == "question 1":
            return ("error", "invalid_request_error")  # permanent: a failed sample at once
        return "[[ANSWER]]\nok"

    with BatchServer(polls=1, answer=answer) as server:
        result = batch_run(tmp_path, f"anthropic:claude-test@{server.url}")
    assert result.exit_code == 1, result.output  # some samples failed after retries
    samples = {s["sample_id"]: s for s in read_jsonl(run_dir_of(result) / "samples.jsonl")}
    retried = samples["c0.r1.a1"]
    assert retried["error"] is None and retried["attempts"] == 2 and len(retried["attempts_log"]) == 1
    assert "overloaded_error" in retried["attempts_log"][0]["message"]
    assert retried["attempts_log"][0]["batch"] != retried["batch"]  # the follow-up batch answered it
    failed = samples["c1.r1.a1"]
    assert failed["error"]["kind"] == "batch_error" and "invalid_request_error" in failed["error"]["message"]
    assert failed["attempts"] == 1 and failed["raw"] is None
    assert len(samples) == 6 and sum(1 for s in samples.values() if s["error"]) == 2
    # Both c0 samples failed once (transient) and were retried together in one follow-up batch.
    assert len(server.batches) == 2 and len(server.submitted) == 6 + 2


def test_an_expired_batch_goes_out_again_until_max_attempts(tmp_path):
    with BatchServer(polls=1, expire_first=1) as server:
        result = batch_run(tmp_path, f"openai:m@{server.url}/v1")
    assert result.exit_code == 0, result.output
    samples = read_jsonl(run_dir_of(result) / "samples.jsonl")
    assert all(s["attempts"] == 2 and s["attempts_log"][0]["kind"] == "batch_expired" for s in samples)
    assert len(server.batches) == 2

    always_expired = BatchServer(polls=1, expire_first=100)
    with always_expired as server:
        result = batch_run(tmp_path / "again", f"openai:m@{server.url}/v1", "--max-attempts", "3")
    assert result.exit_code == 1
    samples = read_jsonl(run_dir_of(result) / "samples.jsonl")
    assert all(s["error"]["kind"] == "batch_expired" and s["attempts"] == 3 for s in samples)
    assert len(server.batches) == 3  # --max-attempts submissions, then the samples fail


def test_a_request_the_batch_never_answered_is_said_so(tmp_path):
    def answer(custom_id, body):
        return ("error", 500) if question_of(body) == "question 2" else "[[ANSWER]]\nok"

    with BatchServer(polls=1, answer=answer) as server:
        result = batch_run(tmp_path, f"openai:m@{server.url}/v1", "--max-attempts", "2")
    samples = {s["sample_id"]: s for s in read_jsonl(run_dir_of(result) / "samples.jsonl")}
    assert samples["c2.r1.a1"]["error"]["kind"] == "http_status" and "HTTP 500" in samples["c2.r1.a1"]["error"]["message"]
    assert samples["c2.r1.a1"]["attempts"] == 2 and result.exit_code == 1


def start(tmp_path: Path, spec: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [PROBE, "run", str(probeset(tmp_path)), "--prompt", PROMPT, "-m", spec, "--retrieval", "none", "--batch",
         "--poll-interval", "0.05", "-n", "2", "--runs-dir", str(tmp_path / "runs"), *args],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "ANTHROPIC_API_KEY": "sk-ant-test-key-0123456789"},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def wait_for(condition, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.02)


def the_run(tmp_path: Path) -> Path:
    (run,) = (tmp_path / "runs").iterdir()
    return run


@pytest.mark.parametrize("spec", ["openai:m@{url}/v1", "anthropic:claude-test@{url}"], ids=["openai", "anthropic"])
def test_sigkill_while_waiting_then_resume_collects_without_submitting_twice(tmp_path, spec):
    with BatchServer(polls=10_000) as server:  # the batch does not end while the process lives
        process = start(tmp_path, spec.format(url=server.url))
        wait_for(lambda: (tmp_path / "runs").exists() and any((tmp_path / "runs").iterdir())
                 and (the_run(tmp_path) / "batches.jsonl").exists() and len(server.requests) >= 4)
        process.send_signal(signal.SIGKILL)
        process.communicate(timeout=10)
        run = the_run(tmp_path)
        assert read_jsonl(run / "batches.jsonl")[0]["collected"] is False
        assert not (run / "samples.jsonl").exists() or read_jsonl(run / "samples.jsonl") == []
        for batch in server.batches.values():
            batch.polls_left = 2  # the provider finishes it while nobody watches
        resumed = CliRunner(env={"ANTHROPIC_API_KEY": "sk-ant-test-key-0123456789"}).invoke(
            main, ["run", "--resume", str(run), "--poll-interval", "0.02"])
    assert resumed.exit_code == 0, resumed.output
    samples = read_jsonl(run / "samples.jsonl")
    assert sorted(s["sample_id"] for s in samples) == sorted(f"c{i}.r{r}.a1" for i in range(3) for r in (1, 2))
    assert len(server.batches) == 1 and len(server.submitted) == 6  # re-attached: nothing submitted twice
    assert read_jsonl(run / "batches.jsonl")[0]["collected"] is True
    assert json.loads((run / "manifest.json").read_text())["status"] == "complete"


def test_ctrl_c_detaches_and_cancel_cancels_what_is_outstanding(tmp_path):
    with BatchServer(polls=10_000) as server:
        process = start(tmp_path, f"openai:m@{server.url}/v1")
        wait_for(lambda: len(server.batches) == 1 and len(server.requests) >= 4)
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=10)
        assert process.returncode == 130
        assert "1 batch(es) keep running at the provider (batch_0001)" in err and "--cancel" in err
        run = the_run(tmp_path)
        assert json.loads((run / "manifest.json").read_text())["status"] == "interrupted"
        assert server.cancels == 0  # detaching is not cancelling
        cancelled = CliRunner().invoke(main, ["run", "--resume", str(run), "--cancel", "--poll-interval", "0.02"])
    assert server.cancels == 1 and len(server.submitted) == 6
    samples = read_jsonl(run / "samples.jsonl")
    assert len(samples) == 6 and all(s["error"]["kind"] == "batch_cancelled" for s in samples)
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["stopped_by"] == "batch_cancelled" and cancelled.exit_code == 1


def test_cancel_needs_a_batch_run_and_resume(tmp_path):
    result = CliRunner().invoke(main, ["run", str(probeset(tmp_path)), "--prompt", PROMPT, "--cancel"])
    assert result.exit_code == 2 and "give it with --resume RUN" in result.stderr


def test_azure_batches_use_its_paths_and_api_version(tmp_path, monkeypatch):
    monkeypatch.setenv("AZURE_OPENAI_API_KEY", "azure-secret-key-1234567890")
    with BatchServer(polls=1) as server:
        result = batch_run(tmp_path, f"azure:support-gpt4o@{server.url}")
    assert result.exit_code == 0, result.output
    paths = [r.path for r in server.requests]
    assert paths[0].startswith("/openai/files?api-version=") and paths[1].startswith("/openai/batches?api-version=")
    assert all(r.headers.get("api-key") == "azure-secret-key-1234567890" for r in server.requests)
    uploaded = next(iter(server.files.values())).splitlines()
    assert json.loads(uploaded[0])["url"] == "/chat/completions" and json.loads(uploaded[0])["body"]["model"] == "support-gpt4o"


def test_a_model_without_a_batch_api_is_refused_before_anything_starts(tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret-secret-secret")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    result = batch_run(tmp_path, "bedrock:anthropic.claude-sonnet-4-5-v1:0@http://127.0.0.1:9")
    assert result.exit_code == 2 and "no batch API for bedrock models" in result.stderr
    assert not (tmp_path / "runs").exists()


def test_until_decided_sends_one_batch_per_round(tmp_path):
    def answer(custom_id, body):
        return "[[ANSWER]]\nok" if "VERSION=b" in json.dumps(body) else "ok"

    for name in "ab":
        (tmp_path / f"{name}.md").write_text(f"VERSION={name}\n")
    with BatchServer(polls=1, answer=answer) as server:
        result = CliRunner().invoke(main, [
            "run", str(probeset(tmp_path, 6)), "--prompt", str(tmp_path / "a.md"), "--prompt", str(tmp_path / "b.md"),
            "-m", f"openai:m@{server.url}/v1", "--retrieval", "none", "--batch", "--poll-interval", "0.02",
            "--until-decided", "--runs-dir", str(tmp_path / "runs")])
    assert result.exit_code == 0, result.output
    rounds = read_jsonl(run_dir_of(result) / "sequential.jsonl")
    assert len(rounds) == 2 and rounds[-1]["decision"] == "B>A"
    assert len(server.batches) == len(rounds) and len(server.submitted) == 2 * 6 * 2  # 6 cases x 2 arms a round


def test_dry_run_and_max_cost_price_a_batch_at_batch_rates(tmp_path):
    args = ["run", str(probeset(tmp_path)), "--prompt", PROMPT, "-m", "anthropic:claude-sonnet-5-5", "-n", "10", "--dry-run",
            "--json"]
    live = json.loads(CliRunner().invoke(main, args).stdout)
    batch = json.loads(CliRunner().invoke(main, [*args, "--batch"]).stdout)
    assert batch["cost_usd"] == pytest.approx(live["cost_usd"] / 2)
    assert batch["arms"][0]["price"]["batch"] == 0.5
    assert any("batch rate" in note for note in batch["notes"])


def test_batch_samples_cost_the_batch_rate_in_the_report(tmp_path):
    with BatchServer(polls=1) as server:
        spec = f"openai:m@{server.url}/v1"
        (tmp_path / "probe.toml").write_text(f'[retrieval]\nkind = "none"\n[prices]\n"{spec}" = {{ input = 2, output = 8 }}\n')
        result = CliRunner().invoke(main, ["run", str(probeset(tmp_path)), "--prompt", PROMPT, "-m", spec,
                                           "--config", str(tmp_path / "probe.toml"), "--batch", "--poll-interval",
                                           "0.02", "-n", "2", "--max-cost", "100", "--runs-dir", str(tmp_path / "runs")])
    assert result.exit_code == 0, result.output
    report = json.loads(CliRunner().invoke(main, ["report", str(run_dir_of(result)), "--json"]).stdout)
    usage = report["arms"][0]["usage"]
    # 6 replies of 120 prompt and 17 completion tokens (the server's usage), at half of 2 and 8 USD/M.
    assert usage["cost_usd"] == pytest.approx(6 * (120 * 2 + 17 * 8) / 1e6 * 0.5)
    assert usage["batch_samples"] == 6
    assert "6 samples went through a batch API" in CliRunner().invoke(main, ["report", str(run_dir_of(result))]).stdout


def test_caching_marks_the_prefix_and_the_report_says_what_it_saved(tmp_path, anthropic_env):
    usage = {"input_tokens": 20, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 1000, "output_tokens": 10}

    def reply(request):
        body = {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-5-5",
                "content": [{"type": "text", "text": "[[ANSWER]]\nok"}], "stop_reason": "end_turn", "usage": usage}
        return Reply(body=json.dumps(body).encode())

    with LocalServer(reply) as server:
        spec = f"anthropic:claude-sonnet-5-5@{server.url}"
        (tmp_path / "probe.toml").write_text(f'[retrieval]\nkind = "none"\n[prices]\n"{spec}" = {{ input = 3, output = 15 }}\n')
        result = CliRunner().invoke(main, ["run", str(probeset(tmp_path)), "--prompt", PROMPT, "-m", spec,
                                           "--config", str(tmp_path / "probe.toml"), "--cache", "-n", "2",
                                           "--runs-dir", str(tmp_path / "runs"), "--json"])
    assert result.exit_code == 0, result.output
    sent = server.requests[0].json
    assert sent["system"][0]["cache_control"] == {"type": "ephemeral"}
    assert sent["messages"][-1]["content"][0]["cache_control"] == {"type": "ephemeral"}
    run = run_dir_of(result)
    samples = read_jsonl(run / "samples.jsonl")
    assert samples[0]["response"]["usage"]["cache_read_input_tokens"] == 1000
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["parameters"]["cache"] is True
    # Reading 1000 cached tokens costs 0.1x input (the anthropic rates of the price table).
    report = json.loads(CliRunner().invoke(main, ["report", str(run), "--json"]).stdout)
    arm = report["arms"][0]["usage"]
    per_sample = (20 * 3 + 1000 * 0.3 + 10 * 15) / 1e6
    assert arm["cost_usd"] == pytest.approx(6 * per_sample)
    assert arm["cache_saved_usd"] == pytest.approx(6 * (1000 * 3 - 1000 * 0.3) / 1e6)
    assert "caching saved" in CliRunner().invoke(main, ["report", str(run)]).stdout
