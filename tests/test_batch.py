"""Batch runs through the real SDKs to a local server speaking the batch wire formats: results
recorded exactly like live samples, per-request failures and expired batches retried in
follow-up batches, Ctrl-C detaching, SIGKILL and resume re-attaching without submitting
anything twice, --cancel, Azure's paths, one batch per sequential round, batch prices, and
prompt caching with what it saved."""

import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from batch_server import BatchServer, error_reply, html_reply, no_fault
from click.testing import CliRunner
from conftest import ROOT, run_dir_of, write_probeset
from servers import LocalServer, Reply

from promptprobe.cli import main
from promptprobe.jsonio import read_jsonl
from promptprobe.pack import read_raw

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
        line = read_raw(batch_run_dir, sample, "body")
        result = json.loads(line)  # the result line's own bytes are the sample's body
        assert result["response"]["body"]["choices"][0]["message"]["content"] == read_raw(batch_run_dir, sample).decode("utf-8")
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
        # The batch is in the run's own ledger (a file the process writes) before Ctrl-C: only then
        # can the process name it as detached, whatever the machine's load.
        wait_for(lambda: len(server.batches) == 1 and (tmp_path / "runs").exists()
                 and any((tmp_path / "runs").iterdir()) and (the_run(tmp_path) / "batches.jsonl").exists()
                 and read_jsonl(the_run(tmp_path) / "batches.jsonl"))
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
    # The batch list once before anything is created, then the upload and the create.
    assert paths[0].startswith("/openai/batches?api-version=") and paths[0].endswith("&limit=1")
    assert paths[1].startswith("/openai/files?api-version=") and paths[2].startswith("/openai/batches?api-version=")
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


@pytest.mark.parametrize("spec", ["bedrock:anthropic.claude-sonnet-4-5-v1:0", "vertex:claude-sonnet-4-5"])
def test_a_model_without_a_batch_api_is_bad_input_before_its_credentials_and_in_a_dry_run(tmp_path, monkeypatch, spec):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_REGION", "AWS_DEFAULT_REGION",
                 "CLOUD_ML_REGION", "ANTHROPIC_VERTEX_ACCESS_TOKEN", "ANTHROPIC_VERTEX_PROJECT_ID"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    provider = spec.split(":")[0]
    for extra in ([], ["--dry-run"]):
        result = batch_run(tmp_path, spec, *extra)
        assert result.exit_code == 2, result.output  # the batch is refused, whatever the region or credentials
        assert f"no batch API for {provider} models" in result.stderr and len(result.stderr.strip().splitlines()) == 1
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


# -- a hostile batch server: submission is bounded -------------------------------------------------

SPECS = {"openai": "openai:m@{url}/v1", "anthropic": "anthropic:claude-test@{url}"}
ANTHROPIC_KEY = {"ANTHROPIC_API_KEY": "sk-ant-test-key-0123456789"}


def run_batch(tmp_path: Path, api: str, server, *args: str, cases: int = 3):
    """`probe run --batch` in-process against `server`, with a key for either API."""
    return CliRunner(env=ANTHROPIC_KEY).invoke(main, [
        "run", str(probeset(tmp_path, cases)), "--prompt", PROMPT, "-m", SPECS[api].format(url=server.url),
        "--retrieval", "none", "--batch", "--poll-interval", "0.02", "-n", "2",
        "--runs-dir", str(tmp_path / "runs"), *args])


def resume(run: Path, *args: str):
    return CliRunner(env=ANTHROPIC_KEY).invoke(main, ["run", "--resume", str(run), "--poll-interval", "0.02", *args])


def failing(kind: str, reply: Reply, times: int | None = None):
    """A fault: calls of `kind` answer `reply` (the first `times` of them; all when None), doing nothing."""
    def fault(call_kind, n, handle, request):
        if call_kind == kind and (times is None or n <= times):
            return Reply(status=reply.status, body=reply.body, content_type=reply.content_type, cut=reply.cut)
        return handle()
    return fault


def one_sentence_error(result) -> str:
    lines = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    return lines[0]


def all_samples(run: Path) -> dict[str, dict]:
    samples = read_jsonl(run / "samples.jsonl")
    ids = [s["sample_id"] for s in samples]
    assert len(ids) == len(set(ids)), "a sample recorded twice"
    return {s["sample_id"]: s for s in samples}


def ledger_of(run: Path) -> list[dict]:
    """batches.jsonl as its entries: the last line of each is its state."""
    entries: dict[str, dict] = {}
    for entry in read_jsonl(run / "batches.jsonl"):
        entries[entry.get("submission") or entry["batch"]] = entry
    return list(entries.values())


PLANNED = sorted(f"c{i}.r{r}.a1" for i in range(3) for r in (1, 2))


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_a_create_that_always_fails_is_retried_with_backoff_then_ends_the_run(tmp_path, api):
    # The real backoff once (OpenAI); the Anthropic case waits at most 0.05 s between attempts.
    quick = ["--max-retry-wait", "0.05"] if api == "anthropic" else []
    with BatchServer(polls=1, fault=failing("create", error_reply(500))) as server:
        result = run_batch(tmp_path, api, server, "--max-attempts", "3", *quick)
    assert result.exit_code == 3, result.output
    error = one_sentence_error(result)
    assert "could not create a batch after 3 attempt(s)" in error and "HTTP 500" in error
    assert "its 6 requests were not sent" in error and "nothing was recorded, so no run directory was kept" in error
    assert server.calls["create"] == 3 and server.batches == {}
    assert server.calls["upload"] == (1 if api == "openai" else 0)  # uploaded once, not once per attempt
    # Before each retry, and once more at the end, the list is read for a batch a failed call made;
    # not on Anthropic, where a batch carries no marker of the run: a create answered with an
    # error made nothing, and a batch of the same size there is another's (issue 37).
    assert server.calls["list"] == (1 + 2 + 1 if api == "openai" else 1)
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
    waits = [later - earlier for earlier, later in itertools.pairwise(server.times["create"])]
    if not quick:  # backoff: 1 s, then 2 s (at least: a loaded machine waits longer)
        assert waits[0] >= 1.0 and waits[1] >= 2.0


def test_a_server_without_the_batch_endpoints_stops_before_anything_starts(tmp_path):
    import http.server

    served: list[str] = []

    class Files(http.server.SimpleHTTPRequestHandler):  # python3 -m http.server, counting requests
        disable_nagle_algorithm = True

        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=str(tmp_path), **kwargs)

        def log_request(self, *args):
            served.append(self.requestline)

        def log_message(self, *args):
            """Quiet."""

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Files)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
        result = CliRunner().invoke(main, ["run", str(probeset(tmp_path)), "--prompt", PROMPT, "-m", f"openai:m@{url}",
                                           "--retrieval", "none", "--batch", "--runs-dir", str(tmp_path / "runs")])
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert result.exit_code == 3, result.output
    error = one_sentence_error(result)
    assert "does not speak the batch API (its batch list answered HTTP 404)" in error and "without --batch" in error
    assert served == ["GET /v1/batches?limit=1 HTTP/1.1"]  # one look, nothing uploaded
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("status", [405, 501])
def test_a_batch_list_refused_as_unknown_stops_before_anything_starts(tmp_path, status):
    with BatchServer(polls=1, fault=failing("list", error_reply(status))) as server:
        result = run_batch(tmp_path, "openai", server)
    assert result.exit_code == 3
    assert f"does not speak the batch API (its batch list answered HTTP {status})" in one_sentence_error(result)
    looks = 2 if status >= 500 else 1  # a 5xx gets the preflight's one quick retry
    assert server.calls["list"] == looks and server.calls["upload"] == 0 and not (tmp_path / "runs").exists()


def test_an_upload_that_keeps_failing_ends_the_run_without_creating_anything(tmp_path):
    with BatchServer(polls=1, fault=failing("upload", error_reply(503))) as server:
        result = run_batch(tmp_path, "openai", server, "--max-attempts", "2", "--max-retry-wait", "0.05")
    assert result.exit_code == 3
    assert "could not upload a batch's 6 requests after 2 attempt(s)" in one_sentence_error(result)
    assert server.calls["upload"] == 2 and server.calls["create"] == 0


def test_a_create_that_fails_after_another_models_batch_went_out_keeps_that_batch_for_resume(tmp_path):
    with BatchServer(polls=1, fault=lambda kind, n, handle, request: error_reply(500) if kind == "create" and n >= 2
                     else handle()) as server:
        result = CliRunner().invoke(main, [
            "run", str(probeset(tmp_path)), "--prompt", PROMPT, "-m", f"openai:model-a@{server.url}/v1",
            "-m", f"openai:model-b@{server.url}/v1", "--retrieval", "none", "--batch", "--poll-interval", "0.02",
            "-n", "2", "--max-attempts", "2", "--max-retry-wait", "0.05", "--runs-dir", str(tmp_path / "runs")])
        assert result.exit_code == 3, result.output
        run = the_run(tmp_path)
        error = one_sentence_error(result)
        assert "could not create a batch after 2 attempt(s)" in error and f"probe run --resume {run} collects it" in error
        (first,) = server.batches.values()
        assert [e["batch"] for e in ledger_of(run) if e["batch"]] == [first.id]
        assert json.loads((run / "manifest.json").read_text())["status"] == "failed"
        server.fault = no_fault  # the provider recovers
        resumed = resume(run)
    assert resumed.exit_code == 0, resumed.output
    assert len(all_samples(run)) == 12 and len(server.batches) == 2 and len(server.submitted) == 12


# -- collecting never ends in a traceback ----------------------------------------------------------


@pytest.mark.parametrize("api", ["openai", "anthropic"])
@pytest.mark.parametrize("fault", ["500 once", "cut once", "html retrieve once"])
def test_a_transient_failure_while_collecting_is_retried(tmp_path, api, fault):
    kind = "retrieve" if fault.startswith("html") else "download"
    reply = {"500 once": error_reply(500), "html retrieve once": html_reply()}.get(fault)

    def hostile(call_kind, n, handle, request):
        if call_kind != kind or n > 1:
            return handle()
        if reply is not None:
            return reply
        full = handle()
        cut = full.body.index(b"\n") + 10  # the first line whole, then the connection drops mid-line
        return Reply(body=full.body, content_type=full.content_type, cut=cut)

    with BatchServer(polls=1, fault=hostile) as server:
        result = run_batch(tmp_path, api, server)
    assert result.exit_code == 0, result.output
    samples = all_samples(run_dir_of(result))
    assert sorted(samples) == PLANNED and all(s["error"] is None for s in samples.values())
    assert server.calls[kind] >= 2 and len(server.batches) == 1 and len(server.submitted) == 6


@pytest.mark.parametrize("api", ["openai", "anthropic"])
@pytest.mark.parametrize("fault", ["404", "cut always", "html retrieve always"])
def test_results_that_cannot_be_read_stop_the_run_and_a_resume_collects_them(tmp_path, api, fault):
    kind = "retrieve" if fault.startswith("html") else "download"

    def hostile(call_kind, n, handle, request):
        if call_kind != kind:
            return handle()
        if fault == "404":
            return error_reply(404, "no such file")
        if fault.startswith("html"):
            return html_reply()
        full = handle()
        return Reply(body=full.body, content_type=full.content_type, cut=len(full.body) // 2)

    with BatchServer(polls=1, fault=hostile) as server:
        result = run_batch(tmp_path, api, server, "--max-attempts", "2", "--max-retry-wait", "0.05")
        assert result.exit_code == 3, result.output
        error = one_sentence_error(result)
        run = the_run(tmp_path)
        assert f"probe run --resume {run} collects it" in error
        if kind == "retrieve":
            assert "cannot read its state after 2 attempt(s)" in error and "not a valid API response" in error
        else:
            expected = "HTTP 404" if fault == "404" else "connection lost"
            assert "ended but its results cannot be read" in error and expected in error
        assert server.calls[kind] == (1 if fault == "404" else 2)  # a 404 is not retried
        ledger = ledger_of(run)
        assert len(ledger) == 1 and ledger[0]["collected"] is False
        assert json.loads((run / "manifest.json").read_text())["status"] == "failed"
        server.fault = no_fault  # the provider answers again
        resumed = resume(run)
    assert resumed.exit_code == 0, resumed.output
    assert sorted(all_samples(run)) == PLANNED
    assert len(server.batches) == 1 and len(server.submitted) == 6  # collected, never sent again


ODD_LINES = {  # (the result line a case's first answer is, what its sample becomes)
    "openai": [
        (lambda cid: {"custom_id": cid, "response": {"status_code": "abc", "body": {}}, "error": None}, "bad_body"),
        (lambda cid: {"custom_id": cid, "response": "x", "error": None}, "bad_body"),
        (lambda cid: {"custom_id": cid, "response": None, "error": {"code": ["a"], "message": "m"}}, "bad_body"),
        (lambda cid: {"custom_id": cid, "response": {"status_code": 200, "body": [1, 2]}, "error": None}, "bad_body"),
        (lambda cid: {"custom_id": cid, "response": {"status_code": 500, "body": {"error": "down"}}}, "http_status"),
        (lambda cid: b'{"custom_id": "' + cid.encode() + b'", "response": {"status_code": 200, "bo', "bad_body"),
        (lambda cid: {"custom_id": [cid], "response": "x"}, "batch_missing"),
    ],
    "anthropic": [
        (lambda cid: {"custom_id": cid, "result": "x"}, "bad_body"),
        (lambda cid: {"custom_id": cid, "result": {"type": ["succeeded"]}}, "bad_body"),
        (lambda cid: {"custom_id": cid, "result": {"type": "errored", "error": [1]}}, "bad_body"),
        (lambda cid: {"custom_id": cid, "result": {"type": "succeeded", "message": "hi"}}, "bad_body"),
        (lambda cid: {"custom_id": cid, "result": {"type": "errored", "error": {"error": "a string"}}}, "batch_error"),
        (lambda cid: b'{"custom_id": "' + cid.encode() + b'", "result": {"ty', "bad_body"),
        (lambda cid: {"custom_id": [cid], "result": "x"}, "batch_missing"),
    ],
}


def odd_first_answers(api: str, lines: dict[int, bytes]):
    """Case i's first result line is the i-th odd line; every later answer is a good one."""
    def answer(custom_id, body):
        case = int(question_of(body).split()[-1])
        if case not in lines:
            made = ODD_LINES[api][case][0](custom_id)
            lines[case] = made if isinstance(made, bytes) else json.dumps(made).encode()
            return ("line", lines[case])
        return "[[ANSWER]]\nok"
    return answer


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_result_lines_that_cannot_be_read_are_bad_body_samples_with_their_bytes(tmp_path, api):
    lines: dict[int, bytes] = {}
    cases = len(ODD_LINES[api])
    with BatchServer(polls=1, answer=odd_first_answers(api, lines)) as server:
        result = run_batch(tmp_path, api, server, "--max-attempts", "1", "-n", "1", cases=cases)
    assert result.exit_code == 1, result.output  # failed samples, reported; no traceback
    assert "Traceback" not in result.output and "samples failed after retries" in result.stderr
    run = run_dir_of(result)
    samples = all_samples(run)
    assert sorted(samples) == sorted(f"c{i}.r1.a1" for i in range(cases))
    (batch_id,) = server.batches
    for case, (_, expected) in enumerate(ODD_LINES[api]):
        sample = samples[f"c{case}.r1.a1"]
        assert sample["error"]["kind"] == expected, (case, sample["error"])
        assert sample["attempts"] == 1 and sample["batch"] == batch_id and sample["raw"] is None
        (attempt,) = sample["attempts_log"]
        if expected == "batch_missing":  # its line names no request of ours: kept beside the batch
            kept = (run / "raw" / f"{batch_id}.unmatched.jsonl").read_bytes()
            assert kept == lines[case] + b"\n" and f"raw/{batch_id}.unmatched.jsonl" in sample["error"]["message"]
        else:
            assert attempt["body"] == lines[case].decode()  # the line's own bytes
    assert len(server.submitted) == cases  # --max-attempts 1: nothing sent again


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_a_line_that_cannot_be_read_goes_out_again_in_a_follow_up_batch(tmp_path, api):
    lines: dict[int, bytes] = {}
    cases = len(ODD_LINES[api])
    with BatchServer(polls=1, answer=odd_first_answers(api, lines)) as server:
        result = run_batch(tmp_path, api, server, "--max-attempts", "2", "-n", "1", cases=cases)
    samples = all_samples(run_dir_of(result))
    assert result.exit_code == 0, result.output
    for case in range(cases):  # every odd line may be a passing fault: each goes out once more
        sample = samples[f"c{case}.r1.a1"]
        assert sample["error"] is None and sample["attempts"] == 2, sample
        assert sample["attempts_log"][0]["kind"] == ODD_LINES[api][case][1]
        assert sample["attempts_log"][0]["batch"] != sample["batch"]
    assert len(server.batches) == 2 and len(server.submitted) == 2 * cases


# -- no batch submitted twice ------------------------------------------------------------------------


def blocking(kind: str, create_first: bool = True):
    """A fault: the first call of `kind` is done (when `create_first`) and then never answered."""
    def fault(call_kind, n, handle, request):
        if call_kind == kind and n == 1:
            reply = handle() if create_first else Reply(body=b"{}")
            done.set()
            return Reply(body=reply.body, status=reply.status, content_type=reply.content_type, delay=3600)
        return handle()
    done = threading.Event()
    fault.done = done
    return fault


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_a_kill_inside_the_create_call_then_resume_finds_the_batch_it_made(tmp_path, api):
    fault = blocking("create")
    with BatchServer(polls=2, fault=fault) as server:
        process = start(tmp_path, SPECS[api].format(url=server.url))
        assert fault.done.wait(30)  # the provider has made the batch; its reply never leaves
        process.send_signal(signal.SIGKILL)
        process.communicate(timeout=10)
        run = the_run(tmp_path)
        (entry,) = ledger_of(run)
        assert entry["batch"] is None and entry["status"] == "creating" and len(entry["samples"]) == 6
        resumed = resume(run)
    assert resumed.exit_code == 0, resumed.output
    assert sorted(all_samples(run)) == PLANNED
    assert len(server.batches) == 1 and len(server.submitted) == 6  # found again, not sent again
    (entry,) = ledger_of(run)
    assert entry["batch"] == next(iter(server.batches)) and entry["found_again"] is True and entry["collected"]


def test_a_kill_inside_the_upload_then_resume_submits_once(tmp_path):
    fault = blocking("upload")
    with BatchServer(polls=2, fault=fault) as server:
        process = start(tmp_path, SPECS["openai"].format(url=server.url))
        assert fault.done.wait(30)
        process.send_signal(signal.SIGKILL)
        process.communicate(timeout=10)
        run = the_run(tmp_path)
        assert not (run / "batches.jsonl").exists()  # nothing was being created yet
        resumed = resume(run)
    assert resumed.exit_code == 0, resumed.output
    assert sorted(all_samples(run)) == PLANNED
    assert len(server.batches) == 1 and len(server.submitted) == 6 and server.calls["upload"] == 2


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_a_kill_while_results_download_then_resume_collects_without_resending(tmp_path, api):
    def fault(kind, n, handle, request):
        if kind == "download" and n == 1:
            reply = handle()
            downloading.set()
            return Reply(body=reply.body, content_type=reply.content_type, trickle=5)
        return handle()

    downloading = threading.Event()
    with BatchServer(polls=1, fault=fault) as server:
        process = start(tmp_path, SPECS[api].format(url=server.url))
        assert downloading.wait(30)
        process.send_signal(signal.SIGKILL)
        process.communicate(timeout=10)
        run = the_run(tmp_path)
        resumed = resume(run)
    assert resumed.exit_code == 0, resumed.output
    assert sorted(all_samples(run)) == PLANNED
    assert len(server.batches) == 1 and len(server.submitted) == 6


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_a_create_whose_reply_times_out_is_found_not_made_again(tmp_path, api):
    def fault(kind, n, handle, request):
        if kind == "create" and n == 1:
            reply = handle()  # accepted by the provider; the reply comes after the client gave up
            return Reply(body=reply.body, content_type=reply.content_type, delay=30)
        return handle()

    with BatchServer(polls=1, fault=fault) as server:
        result = run_batch(tmp_path, api, server, "--timeout", "2", "--max-retry-wait", "0.05")
    assert result.exit_code == 0, result.output
    assert sorted(all_samples(run_dir_of(result))) == PLANNED
    assert server.calls["create"] == 1 and len(server.batches) == 1 and len(server.submitted) == 6
    (entry,) = ledger_of(run_dir_of(result))
    assert entry["found_again"] is True and entry["collected"]
    # Anthropic's batch carries no marker of the run: its custom ids confirmed it before any result was used.
    assert entry.get("confirmed") is (True if api == "anthropic" else None)


def test_an_anthropic_batch_found_again_is_confirmed_by_its_custom_ids(tmp_path):
    """Anthropic batches carry no metadata: a resume takes a batch of the same size created near
    the recorded time as a candidate only. When that batch is another's, its results name other
    requests: none is used or kept, it is not counted as an attempt nor cancelled, and the
    requests go out again."""
    fault = blocking("create", create_first=False)  # the killed create made nothing
    with BatchServer(polls=1, fault=fault) as server:
        process = start(tmp_path, SPECS["anthropic"].format(url=server.url))
        assert fault.done.wait(30)
        process.send_signal(signal.SIGKILL)
        process.communicate(timeout=10)
        run = the_run(tmp_path)
        foreign = server._new("anthropic", [(f"other-{i}", {"model": "claude-test", "messages": [
            {"role": "user", "content": "question 9"}]}) for i in range(6)])  # another's batch, same size
        resumed = resume(run)
    assert resumed.exit_code == 0, resumed.output
    samples = all_samples(run)
    assert sorted(samples) == PLANNED and all(s["error"] is None for s in samples.values())
    assert all(s["batch"] != foreign.id and s["attempts"] == 1 for s in samples.values())
    assert all(s["attempts_log"][0]["kind"] == "batch_not_ours" for s in samples.values())
    assert not (run / "raw" / f"{foreign.id}.unmatched.jsonl").exists()  # another's outputs: not ours to keep
    assert server.cancels == 0 and not foreign.cancelled
    (entry, again) = ledger_of(run)
    assert entry["foreign"] == foreign.id and entry["batch"] is None and again["batch"] not in (None, foreign.id)
