"""`probe run` end to end: real SDKs over real sockets to local servers speaking the wire formats."""

import _thread
import json
import signal
from pathlib import Path

import pytest
from brute_force import corrected_score_bounds
from click.testing import CliRunner
from conftest import ROOT, write_config, write_probeset
from servers import LocalServer, Reply

from promptprobe.cli import main
from promptprobe.config import load_config
from promptprobe.engine.run import ProbeRun, RunOptions, run_probe
from promptprobe.jsonio import read_jsonl
from promptprobe.models import parse_model_spec
from promptprobe.pack import read_raw
from promptprobe.probeset import load_probeset
from promptprobe.prompts import load_prompt
from promptprobe.providers import make_provider
from promptprobe.providers.base import GenerationParams
from promptprobe.stats.intervals import wilson
from promptprobe.views.report import build_report

TRICKY = {
    "crlf": "[[ANSWER]]\r\nLine one.\r\nLine two.\r\n",
    "trailing-spaces": "[[NO_ANSWER]]   \nNot in the docs.  \n\n",
    "bom": "\ufeff[[NO_ANSWER]]\nSorry.",
    "zero-width": "\u200b[[ANSWER]]\u200d\nYes\u2060.",
    "emoji": "[[ANSWER]]\nSure 👍🏽 — done 🎉",
    "chinese": "抱歉，文档没有说明。\n[[NO_ANSWER]]",
}
EXPECTED_HEADER = {"crlf": "present", "trailing-spaces": "present", "bom": "misplaced",
                   "zero-width": "misplaced", "emoji": "present", "chinese": "misplaced"}


def question_of(request) -> str:
    return request.json["messages"][-1]["content"]


def tricky_reply(request) -> Reply:
    return Reply(TRICKY[question_of(request).split(" ")[-1].rstrip("?")])


def options(tmp_path, waits=None, **kwargs) -> RunOptions:
    waits = [] if waits is None else waits
    return RunOptions(runs_dir=tmp_path / "runs", backoff_initial=0.5, max_retry_wait=30,
                      sleep=waits.append, **kwargs)


def spec_for(provider: str, server: LocalServer) -> str:
    return f"anthropic:claude-test@{server.url}" if provider == "anthropic" else f"openai:gpt-test@{server.url}/v1"


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_raw_outputs_are_byte_identical(tmp_path, monkeypatch, retrieval_server, provider, stream):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-not-a-real-key-000000")
    probeset = load_probeset(write_probeset(
        tmp_path / "p.toml", [(name, f"What about {name}?", None) for name in TRICKY]))
    config = load_config(write_config(tmp_path / "probe.toml", retrieval_server.url))
    with LocalServer(tricky_reply) as server:
        outcome = run_probe(probeset, [load_prompt(ROOT / "prompts" / "always-header.md")],
                            [parse_model_spec(spec_for(provider, server))], config,
                            options(tmp_path, params=GenerationParams(stream=stream)))
        assert all(r.json.get("stream", False) is stream for r in server.requests)
    assert (outcome.planned, outcome.recorded, outcome.errors, outcome.status) == (6, 6, 0, "complete")
    samples = {s["case_id"]: s for s in read_jsonl(outcome.path / "samples.jsonl")}
    for name, text in TRICKY.items():
        sample = samples[name]
        raw = read_raw(outcome.path, sample)
        assert raw == text.encode("utf-8")
        assert sample["raw"]["bytes"] == len(text.encode("utf-8"))
        assert sample["header"]["header"] == EXPECTED_HEADER[name]
        assert sample["attempts"] == 1 and sample["error"] is None
        body = read_raw(outcome.path, sample, "body")
        if stream:
            assert body.startswith(b"event: message_start" if provider == "anthropic" else b"data: {")
        else:
            assert json.loads(body)["model"] == sample["response"]["model"]
        assert sample["response"]["model"].startswith(("claude-test-", "gpt-test-"))
        assert sample["response"]["request_id"] == f"req_test_{provider}"
        assert sample["response"]["stop_reason"] in ("end_turn", "stop")
        assert sample["response"]["usage"]


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_server_receives_prompt_with_passages_and_history(tmp_path, monkeypatch, retrieval_server, provider):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-not-a-real-key-000000")
    probeset_path = write_probeset(tmp_path / "p.toml", [("q1", "How much is Team?", "answer")], extra="""
history = [{ role = "user", content = "Hi" }, { role = "assistant", content = "Hello!" }]
""")
    prompt_path = tmp_path / "v1.md"
    prompt_path.write_bytes(b"Rules \xe2\x80\x94 keep them.\r\n\r\nSources:\n{{sources}}\nEnd.  ")
    config = load_config(write_config(tmp_path / "probe.toml", retrieval_server.url))
    with LocalServer() as server:
        run_probe(load_probeset(probeset_path), [load_prompt(prompt_path)],
                  [parse_model_spec(spec_for(provider, server))], config,
                  options(tmp_path, params=GenerationParams(max_tokens=77, temperature=0.2)))
        (request,) = server.requests
    history_json = json.dumps([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}])
    expected_system = ("Rules — keep them.\r\n\r\nSources:\n"
                       "[1] Starter is free. Team is $20 per user per month.\n\n"
                       "[2] Downgrades take effect at the next invoice.\n\n"
                       f"[3] {history_json}\nEnd.  ")
    body = request.json
    if provider == "anthropic":
        assert body["system"] == expected_system
        turns = body["messages"]
    else:
        assert body["messages"][0] == {"role": "system", "content": expected_system}
        turns = body["messages"][1:]
    assert turns == [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
                     {"role": "user", "content": "How much is Team?"}]
    assert body["max_tokens"] == 77 and body["temperature"] == 0.2
    assert "seed" not in body and "top_p" not in body
    search = retrieval_server.requests[0].json
    assert search == {"q": "How much is Team?", "k": 2, "history": json.loads(history_json)}


def test_retrieval_failure_is_an_error_and_never_answers_without_context(tmp_path):
    def search(request):
        if "broken" in request.json["q"]:
            return Reply(status=500, body=b'{"error": "index shard down"}')
        return Reply(body=b'{"results": [{"id": "a", "text": "Alpha", "score": 1}]}')

    probeset = load_probeset(write_probeset(
        tmp_path / "p.toml", [("ok", "fine question", None), ("bad", "broken question", None)], repeats=2))
    waits: list[float] = []
    with LocalServer(search) as retrieval, LocalServer() as model:
        config_path = tmp_path / "probe.toml"
        config_path.write_text(f'[retrieval]\nkind = "http"\nurl = "{retrieval.url}/s"\nbody = {{ q = "{{question}}" }}\n')
        outcome = run_probe(probeset, [load_prompt(ROOT / "prompts" / "always-header.md")],
                            [parse_model_spec(f"openai:m@{model.url}/v1")], load_config(config_path),
                            options(tmp_path, waits))
        asked = [question_of(r) for r in model.requests]
    assert asked == ["fine question", "fine question"]
    assert (outcome.recorded, outcome.errors, outcome.status) == (4, 2, "complete")
    bad = [s for s in read_jsonl(outcome.path / "samples.jsonl") if s["case_id"] == "bad"]
    assert len(bad) == 2
    for sample in bad:
        assert sample["error"]["kind"] == "retrieval"
        assert sample["error"]["attempts"] == 6  # 5xx is retried (6 attempts by default), then recorded
        assert sample["attempts"] == 6 and len(sample["attempts_log"]) == 6
        assert all(a["status"] == 500 and "index shard down" in a["body"] for a in sample["attempts_log"])
        assert f"{retrieval.url}/s" in sample["error"]["message"] and "HTTP 500" in sample["error"]["message"]
        assert sample["raw"] is None and sample["header"] is None
    # Five waits per failed retrieval, and one more when the run's first question (retrieved
    # once, with a single retry, before anything is created) is the broken one.
    assert len(waits) in (10, 11)
    retrievals = read_jsonl(outcome.path / "retrievals.jsonl")
    assert sorted((r["case_id"], r["repeat"]) for r in retrievals) == [("bad", 1), ("bad", 2), ("ok", 1), ("ok", 2)]
    report = build_report(outcome.path)
    (arm,) = report["arms"]
    assert arm["errors"] == 2
    assert arm["metrics"]["header_present"]["n"] == 4  # failures stay in the denominator
    assert arm["metrics"]["header_present"]["k"] == 2


def test_retries_honour_retry_after_and_do_not_retry_400(tmp_path, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-not-a-real-key-000000")
    calls: dict[str, int] = {}

    def flaky(request):
        question = question_of(request)
        calls[question] = calls.get(question, 0) + 1
        if question == "overloaded" and calls[question] == 1:
            return Reply(status=529, headers={"retry-after": "7"},
                         body=b'{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}')
        if question == "rate":
            return Reply(status=429, body=b'{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}')
        if question == "bad":
            return Reply(status=400, body=b'{"type":"error","error":{"type":"invalid_request_error","message":"bad"}}')
        return Reply("[[ANSWER]]\nfine")

    probeset = load_probeset(write_probeset(
        tmp_path / "p.toml", [("o", "overloaded", None), ("r", "rate", None), ("b", "bad", None)]))
    waits: list[float] = []
    with LocalServer(flaky) as server:
        outcome = run_probe(probeset, [load_prompt(ROOT / "prompts" / "always-header.md")],
                            [parse_model_spec(f"anthropic:c@{server.url}")], load_config(None),
                            options(tmp_path, waits, max_attempts=3, concurrency=1))
    samples = {s["case_id"]: s for s in read_jsonl(outcome.path / "samples.jsonl")}
    assert samples["o"]["attempts"] == 2 and samples["o"]["error"] is None
    assert samples["r"]["error"]["kind"] == "http_status" and samples["r"]["error"]["attempts"] == 3
    assert "HTTP 429" in samples["r"]["error"]["message"]
    assert samples["b"]["error"]["attempts"] == 1 and "HTTP 400" in samples["b"]["error"]["message"]
    assert calls == {"overloaded": 2, "rate": 3, "bad": 1}
    assert any(7.0 <= w <= 9.5 for w in waits)  # retry-after honoured (plus jitter and a stagger)
    assert len(waits) == 3


def test_full_probe_120_samples_matches_published_wilson(tmp_path, monkeypatch, retrieval_server):
    """10 cases x 3 repeats x 2 prompts x 2 models; headers scripted per arm to known counts."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-not-a-real-key-000000")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-test-not-a-real-key-0000000000")
    cases = [(f"c{i}", f"question number {i}?", "no_answer" if i < 6 else "answer") for i in range(10)]
    probeset_path = write_probeset(tmp_path / "p.toml", cases, repeats=3)
    # Present-header successes per case out of 3 for each arm (prompt, provider).
    plan = {
        ("always-header", "anthropic"): [3] * 10,                          # 30/30
        ("always-header", "openai"): [3, 3, 2, 3, 3, 2, 3, 2, 3, 2],       # 26/30
        ("exception-only", "anthropic"): [3, 3, 3, 3, 3, 3, 0, 3, 2, 1],   # 24/30
        ("exception-only", "openai"): [2, 1, 2, 1, 2, 1, 2, 1, 2, 1],      # 15/30
    }
    seen: dict[tuple, int] = {}

    def scripted(request):
        body = request.json
        system = body.get("system") or body["messages"][0]["content"]
        prompt = "always-header" if "first line of every reply" in system else "exception-only"
        provider = "anthropic" if request.path.endswith("/messages") else "openai"
        case = int(question_of(request).split(" ")[-1].rstrip("?"))
        key = (prompt, provider, case)
        seen[key] = seen.get(key, 0) + 1
        if seen[key] <= plan[(prompt, provider)][case]:
            return Reply("[[NO_ANSWER]]\nNot covered." if case < 6 else "[[ANSWER]]\nYes.")
        return Reply("I could not find that.\n[[NO_ANSWER]]")

    with LocalServer(scripted) as server:
        config = write_config(tmp_path / "probe.toml", retrieval_server.url, f"""
[run]
models = ["anthropic:claude-x@{server.url}", {{ spec = "openai:gpt-x@{server.url}/v1", api_key_env = "OPENAI_API_KEY" }}]
concurrency = 4
""")
        monkeypatch.chdir(tmp_path)
        result = CliRunner().invoke(main, [
            "run", str(probeset_path), "--prompt", str(ROOT / "prompts" / "always-header.md"),
            "--prompt", str(ROOT / "prompts" / "exception-only.md"), "--config", str(config),
            "--format", "json"])
    assert result.exit_code == 0, result.output
    output = json.loads(result.stdout)  # --format json: JSON only on stdout
    run_dir = Path(output["run"])
    assert output["status"] == "complete" and output["counts"] == {"planned": 120, "recorded": 120, "errors": 0}
    report = output["report"]
    samples = read_jsonl(run_dir / "samples.jsonl")
    assert len(samples) == 120 and len({s["sample_id"] for s in samples}) == 120
    assert len(read_jsonl(run_dir / "retrievals.jsonl")) == 30  # once per (case, repeat)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["finished"]
    assert manifest["counts"] == {"planned": 120, "recorded": 120, "errors": 0}
    assert [a["prompt"] for a in manifest["arms"]] == ["always-header", "always-header", "exception-only", "exception-only"]
    assert (run_dir / "prompts" / "always-header.md").read_bytes() == (ROOT / "prompts" / "always-header.md").read_bytes()
    assert (run_dir / "probeset.toml").read_bytes() == probeset_path.read_bytes()
    published = {  # plain Wilson 95% (published reference values)
        ("always-header", "anthropic"): (30, (0.886487, 1.0)),
        ("always-header", "openai"): (26, (0.703187, 0.946903)),
        ("exception-only", "anthropic"): (24, (0.626943, 0.904949)),
        ("exception-only", "openai"): (15, (0.331541, 0.668459)),
    }
    for arm in report["arms"]:
        k, plain = published[(arm["prompt"], arm["model"].split(":")[0])]
        metric = arm["metrics"]["header_present"]
        assert (metric["k"], metric["n"]) == (k, 30)
        assert wilson(k, 30) == pytest.approx(plain, abs=1e-6)
        # Shown: the continuity-corrected score interval, solved from its equation; wider than plain.
        assert metric["wilson"] == pytest.approx(corrected_score_bounds(k, 30), abs=1e-9)
        assert metric["wilson"][0] <= plain[0] and metric["wilson"][1] >= plain[1]
        assert arm["samples"] == 30 and arm["errors"] == 0
    clustered = next(a for a in report["arms"] if a["prompt"] == "exception-only" and a["model"].startswith("anthropic"))
    metric = clustered["metrics"]["header_present"]
    assert metric["deff"] == pytest.approx(2.228571, abs=1e-6)
    assert metric["n_eff"] == pytest.approx(13.461538, abs=1e-6)
    # Wilson at n / DEFF_U (the ICC's 99% upper limit) with t(9), computed with scipy's F and t.
    assert metric["wilson_eff"] == pytest.approx((0.455888, 0.950240), abs=1e-6)
    assert [c["present"] for c in clustered["cases"]] == plan[("exception-only", "anthropic")]
    assert [c["misplaced"] for c in clustered["cases"]] == [3 - k for k in plan[("exception-only", "anthropic")]]


def test_no_key_reaches_the_run_directory(tmp_path, monkeypatch, retrieval_server):
    secret = "sk-ant-api03-SECRETSECRETSECRET-do-not-write"
    retrieval_secret = "retrieval-bearer-SECRET-value-9876"
    monkeypatch.setenv("ANTHROPIC_API_KEY", secret)
    monkeypatch.setenv("RETRIEVAL_TOKEN", retrieval_secret)
    probeset = load_probeset(write_probeset(tmp_path / "p.toml", [("a", "Q?", None)]))
    config_path = tmp_path / "probe.toml"
    config_path.write_text(f"""
[retrieval]
kind = "http"
url = "{retrieval_server.url}/search"
body = {{ q = "{{question}}" }}
results = "data.hits"
id = "doc"
text = "body"
headers = {{ Authorization = "Bearer ${{RETRIEVAL_TOKEN}}" }}
""")
    with LocalServer() as server:
        outcome = run_probe(probeset, [load_prompt(ROOT / "prompts" / "always-header.md")],
                            [parse_model_spec(f"anthropic:c@{server.url}")], load_config(config_path),
                            options(tmp_path))
        assert secret in server.requests[0].headers.get("x-api-key", "") + server.requests[0].headers.get("authorization", "")
    assert retrieval_server.requests[0].headers["authorization"] == f"Bearer {retrieval_secret}"
    files = [p for p in outcome.path.rglob("*") if p.is_file()]
    assert len(files) >= 6
    for path in files:
        data = path.read_bytes()
        assert secret.encode() not in data and retrieval_secret.encode() not in data, path
    manifest = json.loads((outcome.path / "manifest.json").read_text())
    assert manifest["target"]["retrieval"]["headers"] == {"Authorization": "[removed]"}


def test_python_retriever_and_production_assembler(tmp_path, monkeypatch):
    (tmp_path / "myrag.py").write_text('''
def retrieve(question, history):
    return [{"id": "kb-1", "text": "Answer for " + question, "score": 0.5}]

def build_messages(prompt, question, passages, history):
    context = " | ".join(p["id"] + ":" + p["text"] for p in passages)
    return [{"role": "system", "content": prompt.strip() + " CONTEXT " + context},
            {"role": "user", "content": question}]
''')
    (tmp_path / "probe.toml").write_text(
        '[retrieval]\nkind = "python"\nfunction = "myrag:retrieve"\n'
        '[assemble]\nfunction = "myrag:build_messages"\n')
    monkeypatch.chdir(tmp_path)
    (tmp_path / "v.md").write_text("Be exact.\n")
    probeset = load_probeset(write_probeset(tmp_path / "p.toml", [("a", "Where?", None)]))
    with LocalServer() as server:
        outcome = run_probe(probeset, [load_prompt(tmp_path / "v.md")],
                            [parse_model_spec(f"openai:m@{server.url}/v1")], load_config(None),
                            options(tmp_path))
        assert server.requests[0].json["messages"][0]["content"] == "Be exact. CONTEXT kb-1:Answer for Where?"
    (sample,) = read_jsonl(outcome.path / "samples.jsonl")
    assert sample["retrieval"]["passage_ids"] == ["kb-1"] and sample["retrieval"]["scores"] == [0.5]


def test_provider_down_mid_run_keeps_recorded_samples(tmp_path):
    probeset = load_probeset(write_probeset(tmp_path / "p.toml", [(f"c{i}", f"q{i}", None) for i in range(4)]))
    server = LocalServer(lambda r: Reply("[[ANSWER]]\nok"))
    server.__enter__()

    recorded = []

    def stop_after_two(record):
        recorded.append(record)
        if len(recorded) == 2:
            server.__exit__()

    outcome = run_probe(probeset, [load_prompt(ROOT / "prompts" / "always-header.md")],
                        [parse_model_spec(f"openai:m@{server.url}/v1")], load_config(None),
                        options(tmp_path, concurrency=1), on_record=stop_after_two)
    samples = read_jsonl(outcome.path / "samples.jsonl")
    assert [s["error"] is None for s in samples] == [True, True, False, False]
    assert all(s["error"]["kind"] == "connection" for s in samples[2:])
    assert read_raw(outcome.path, samples[0]) == b"[[ANSWER]]\nok"


def test_cancel_marks_the_run_interrupted_and_keeps_samples(tmp_path):
    probeset = load_probeset(write_probeset(tmp_path / "p.toml", [(f"c{i}", f"q{i}", None) for i in range(6)]))
    runner = ProbeRun(probeset, [load_prompt(ROOT / "prompts" / "always-header.md")],
                      [parse_model_spec("openai:m@http://127.0.0.1:9/v1")], load_config(None),
                      options(tmp_path, concurrency=1))

    def cancel_after_two(record):
        if runner.tally.recorded == 2:
            runner.cancel()

    runner.on_record = cancel_after_two
    with LocalServer() as server:
        runner.parts.providers = {"openai:m@http://127.0.0.1:9/v1": make_provider(
            parse_model_spec(f"openai:m@{server.url}/v1"), GenerationParams())}
        outcome = runner.execute()
    assert outcome.status == "interrupted"
    manifest = json.loads((outcome.path / "manifest.json").read_text())
    assert manifest["status"] == "interrupted" and manifest["finished"]
    assert manifest["counts"]["recorded"] == 2
    samples = read_jsonl(outcome.path / "samples.jsonl")
    assert len(samples) == 2
    assert all(read_raw(outcome.path, s) == b"[[ANSWER]]\nok" for s in samples)


def test_keyboard_interrupt_in_the_main_thread_finishes_the_manifest(tmp_path, request):
    probeset = load_probeset(write_probeset(tmp_path / "p.toml", [(f"c{i}", f"q{i}", None) for i in range(20)]))

    def slow(request):
        return Reply("[[ANSWER]]\nok", delay=0.3)

    recorded = []

    def interrupt_after_two(record):
        recorded.append(record)
        if len(recorded) == 2:
            _thread.interrupt_main()  # as Ctrl-C would, while the main thread waits on the workers

    # As in a terminal (the test runner may itself run as a background job, Ctrl-C ignored).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    request.addfinalizer(lambda: signal.signal(signal.SIGINT, previous))
    with LocalServer(slow) as server, pytest.raises(KeyboardInterrupt):
        run_probe(probeset, [load_prompt(ROOT / "prompts" / "always-header.md")],
                  [parse_model_spec(f"openai:m@{server.url}/v1")], load_config(None),
                  options(tmp_path, concurrency=2), on_record=interrupt_after_two)
    (run_dir,) = (tmp_path / "runs").iterdir()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "interrupted" and manifest["finished"]
    samples = read_jsonl(run_dir / "samples.jsonl")
    assert 0 < len(samples) < 20
    assert manifest["counts"]["recorded"] == len(samples)


def test_samples_tallied_by_their_recorded_outcomes_count_as_one_by_one(tmp_path, monkeypatch):
    """The counting adds samples whose recorded outcomes alone decide their part once per distinct
    set of outcomes (a check of yours that does not apply included): the same cells, patterns,
    headers, errors and latencies as adding each sample on its own."""
    from dataclasses import asdict

    from promptprobe import counts

    (tmp_path / "mycheck.py").write_text(
        "def says_yes(sample):\n    text = sample['text'] or ''\n    return None if 'Sorry' in text else 'Yes' in text\n")
    (tmp_path / "probe.toml").write_text(
        '[[check]]\nname = "says_yes"\nfunction = "mycheck:says_yes"\n')
    cases = [(name, f"q {name}", "answer" if i % 2 else "no_answer") for i, name in enumerate(TRICKY)]
    probeset = write_probeset(tmp_path / "p.toml", [*cases, ("broken", "q broken", None)], repeats=3)
    with LocalServer(lambda r: Reply(status=400) if "broken" in question_of(r)
                     else Reply(TRICKY[question_of(r).split()[-1]])) as server:
        monkeypatch.chdir(tmp_path)
        result = CliRunner().invoke(main, [
            "run", str(probeset), "--prompt", str(ROOT / "prompts" / "always-header.md"), "--retrieval", "none",
            "--model", f"openai:m@{server.url}/v1", "--config", str(tmp_path / "probe.toml"),
            "--runs-dir", str(tmp_path / "runs"), "--format", "json"])
    run_dir = Path(json.loads(result.stdout)["run"])
    real, tallied = counts._Tally.took, []

    def seen(self, header, recorded):
        took = real(self, header, recorded)
        tallied.append(took)
        return took

    monkeypatch.setattr(counts._Tally, "took", seen)
    fast = counts.build_counts(run_dir, kept=False)  # counted, not read back
    # every sample took the tallied way but the failed ones and those your check left out ("Sorry")
    assert sum(tallied) == 3 * (len(TRICKY) - 1)
    monkeypatch.setattr(counts._Tally, "took", lambda self, header, recorded: False)  # each on its own
    slow = counts.build_counts(run_dir, kept=False)
    assert [asdict(arm) for arm in fast.arms] == [asdict(arm) for arm in slow.arms]
    assert fast.check_applies == slow.check_applies and fast.check_applies["says_yes"]["bom"] is False
    assert fast.arms[0].errors == 3 and fast.recorded == slow.recorded == 3 * len(TRICKY) + 3
