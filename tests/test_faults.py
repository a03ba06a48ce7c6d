"""Faults a real provider produces, injected by a local server speaking its wire format: each
is retried (or not) and recorded the way a user needs it. The real SDKs run over real sockets."""

import base64
import json
import socket
import struct
import time
from email.utils import formatdate
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import ROOT, write_probeset
from servers import (
    LocalServer,
    RawServer,
    Reply,
    anthropic_body,
    anthropic_stream,
    http_response,
    openai_body,
    openai_stream,
    sse,
)

from promptprobe.cli import main
from promptprobe.config import load_config
from promptprobe.engine.run import RunOptions, run_probe
from promptprobe.engine.store import load_manifest
from promptprobe.jsonio import read_jsonl
from promptprobe.models import parse_model_spec
from promptprobe.pack import read_raw
from promptprobe.probeset import load_probeset
from promptprobe.prompts import load_prompt
from promptprobe.providers.base import GenerationParams

PROMPT = ROOT / "prompts" / "always-header.md"
ANTHROPIC_KEY = "sk-ant-test-key-do-not-echo-000000000000"


@pytest.fixture(autouse=True)
def anthropic_key(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", ANTHROPIC_KEY)


def spec(provider: str, server: LocalServer, model: str = "m") -> str:
    return f"anthropic:{model}@{server.url}" if provider == "anthropic" else f"openai:{model}@{server.url}/v1"


def probe(tmp_path: Path, server: LocalServer, provider: str = "openai", cases: int = 1, waits=None,
          model: str = "m", **kwargs) -> tuple[Path, list[dict]]:
    probeset = load_probeset(write_probeset(tmp_path / "p.toml", [(f"c{i}", f"q{i}", None) for i in range(cases)]))
    defaults = {"runs_dir": tmp_path / "runs", "sleep": (waits.append if waits is not None else lambda s: None),
                "concurrency": 1, "max_attempts": 3}
    outcome = run_probe(probeset, [load_prompt(PROMPT)], [parse_model_spec(spec(provider, server, model))],
                        load_config(None), RunOptions(**(defaults | kwargs)))
    return outcome.path, read_jsonl(outcome.path / "samples.jsonl")


def stream_params(stream: bool) -> dict:
    return {"params": GenerationParams(stream=stream, timeout=20)}


def scripted(*replies: Reply):
    """Reply with each in turn, then with the last one for ever."""
    calls = []

    def responder(request):
        calls.append(request)
        return replies[min(len(calls), len(replies)) - 1]

    return responder


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_a_stream_cut_before_its_final_event_is_truncated_and_retried(tmp_path, provider):
    full = (anthropic_stream if provider == "anthropic" else openai_stream)("[[ANSWER]]\nThe whole answer.", "m", None)
    final = b"event: message_stop" if provider == "anthropic" else b'"finish_reason": "stop"'
    cut = full.index(final) - 10  # the text so far arrived; the final event did not
    # A whole HTTP reply whose event stream stops early (a proxy or server that gave up).
    with LocalServer(scripted(Reply(body=full[:cut], content_type="text/event-stream"),
                              Reply("[[ANSWER]]\nThe whole answer."))) as server:
        run, (sample,) = probe(tmp_path, server, provider, **stream_params(True))
    assert sample["error"] is None and sample["attempts"] == 2
    assert sample["attempts_log"][0]["kind"] == "truncated"
    assert "ended before its final event" in sample["attempts_log"][0]["message"]
    assert read_raw(run, sample) == b"[[ANSWER]]\nThe whole answer."


def test_a_stream_that_is_always_cut_fails_as_truncated(tmp_path):
    full = openai_stream("[[ANSWER]]\nhalf", "m", None)
    with LocalServer(lambda r: Reply(body=full[: len(full) // 2], content_type="text/event-stream")) as server:
        run, (sample,) = probe(tmp_path, server, **stream_params(True))
    assert sample["error"]["kind"] == "truncated" and sample["attempts"] == 3
    assert sample["raw"] is None and sample["header"] is None  # half a text is not an answer


def test_anthropic_overloaded_error_event_in_a_stream_is_retried(tmp_path):
    overloaded = sse([
        ("message_start", {"type": "message_start", "message": {
            "id": "msg_1", "type": "message", "role": "assistant", "model": "m", "content": [],
            "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 5, "output_tokens": 1}}}),
        ("error", {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
    ])
    with LocalServer(scripted(Reply(body=overloaded, content_type="text/event-stream"),
                              Reply("[[ANSWER]]\nok"))) as server:
        _, (sample,) = probe(tmp_path, server, "anthropic", **stream_params(True))
    assert sample["error"] is None and sample["attempts"] == 2
    first = sample["attempts_log"][0]
    assert first["kind"] == "stream_error" and "overloaded_error" in first["message"]


def test_openai_error_chunk_in_a_stream_is_retried(tmp_path):
    broken = b'data: {"error": {"message": "The server had an error", "type": "server_error"}}\n\n'
    with LocalServer(scripted(Reply(body=broken, content_type="text/event-stream"),
                              Reply("[[ANSWER]]\nok"))) as server:
        _, (sample,) = probe(tmp_path, server, **stream_params(True))
    assert sample["error"] is None and sample["attempts_log"][0]["kind"] == "stream_error"


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
@pytest.mark.parametrize("body,content_type", [
    (b"<html><body><h1>502 Bad Gateway</h1></body></html>", "text/html"),
    (b'{"id": "chatcmpl-1", "choices": [{"message"', "application/json"),
])
def test_a_proxy_page_or_cut_json_is_transient_then_named(tmp_path, provider, body, content_type):
    with LocalServer(lambda r: Reply(body=body, content_type=content_type)) as server:
        _, (sample,) = probe(tmp_path, server, provider)
    assert sample["error"]["kind"] == "bad_body" and sample["attempts"] == 3  # retried, then recorded
    assert "the reply is not a valid API response" in sample["error"]["message"]
    assert body[:20].decode() in sample["error"]["message"]
    assert all(a["body"] == body.decode() for a in sample["attempts_log"])


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_a_trickling_reply_meets_the_deadline(tmp_path, stream):
    with LocalServer(lambda r: Reply("[[ANSWER]]\n" + "slow " * 100, trickle=0.05)) as server:
        started = time.monotonic()
        _, (sample,) = probe(tmp_path, server, max_attempts=1, params=GenerationParams(stream=stream, timeout=1.0))
        elapsed = time.monotonic() - started
    assert sample["error"]["kind"] == "timeout"
    assert "no complete reply within 1 s" in sample["error"]["message"]
    assert elapsed < 12  # the reply alone would take 25 s (room for a loaded machine)


def test_a_connection_reset_mid_stream_is_retried(tmp_path):
    full = openai_stream("[[ANSWER]]\nfine", "m", None)
    with LocalServer(scripted(Reply(body=full, cut=40, reset=True, content_type="text/event-stream"),
                              Reply("[[ANSWER]]\nfine"))) as server:
        _, (sample,) = probe(tmp_path, server, **stream_params(True))
    assert sample["error"] is None and sample["attempts_log"][0]["kind"] == "connection"


def test_every_attempt_is_logged_with_status_request_id_and_body(tmp_path):
    replies = [
        Reply(status=500, body=b'{"error": {"message": "boom 1"}}', headers={"x-request-id": "req_1"}),
        Reply(status=503, body=b'{"error": {"message": "boom 2"}}', headers={"x-request-id": "req_2"}),
        Reply("[[ANSWER]]\nok"),
    ]
    with LocalServer(scripted(*replies)) as server:
        _, (sample,) = probe(tmp_path, server)
    assert sample["attempts"] == 3 and sample["error"] is None
    assert [(a["status"], a["request_id"]) for a in sample["attempts_log"]] == [(500, "req_1"), (503, "req_2")]
    assert "boom 1" in sample["attempts_log"][0]["body"]


@pytest.mark.parametrize("header,low,high", [
    ({"retry-after-ms": "1500"}, 1.5, 2.0),
    ({"retry-after": "2"}, 2.0, 2.7),
])
def test_retry_after_in_each_form(tmp_path, header, low, high):
    waits: list[float] = []
    with LocalServer(scripted(Reply(status=429, body=b"{}", headers=header), Reply("[[ANSWER]]\nok"))) as server:
        _, (sample,) = probe(tmp_path, server, waits=waits)
    assert sample["error"] is None
    # The endpoint pauses for the wait, plus at most 10% jitter and a stagger of up to a fifth.
    assert len(waits) == 1 and low <= waits[0] <= high


def test_retry_after_as_an_http_date_waits_until_that_date(tmp_path):
    date = int(time.time()) + 20  # whole seconds: the header's resolution
    answered: list[float] = []

    def responder(request):
        answered.append(time.time())
        if len(answered) == 1:
            return Reply(status=429, body=b"{}", headers={"retry-after": formatdate(date, usegmt=True)})
        return Reply("[[ANSWER]]\nok")

    waits: list[float] = []
    with LocalServer(responder) as server:
        _, (sample,) = probe(tmp_path, server, waits=waits)
    ended = time.time()
    assert sample["error"] is None and len(waits) == 1
    # Read between the 429 going out and the run's end, whatever the machine's load made of that
    # time; the jitter adds at most 10%, the endpoint's stagger at most a fifth.
    assert date - ended <= waits[0] <= (date - answered[0]) * 1.1 * 1.2


def test_max_retry_wait_caps_a_long_retry_after(tmp_path):
    waits: list[float] = []
    with LocalServer(scripted(Reply(status=429, body=b"{}", headers={"retry-after": "600"}),
                              Reply("[[ANSWER]]\nok"))) as server:
        probe(tmp_path, server, waits=waits, max_retry_wait=2.0)
    assert waits and waits[0] <= 2.0 * 1.2  # the cap, plus the stagger of a released pause (a fifth at most)


def test_a_429_slows_the_whole_provider_down(tmp_path):
    """With 4 workers, one 429 with retry-after 1.5 s holds every worker of that provider."""
    times: list[float] = []
    limited = []

    def responder(request):
        now = time.monotonic()
        if not limited:
            limited.append(now)
            return Reply(status=429, body=b"{}", headers={"retry-after": "1.5"})
        times.append(now)
        return Reply("[[ANSWER]]\nok", delay=0.05)

    with LocalServer(responder) as server:
        probe(tmp_path, server, cases=12, concurrency=4, sleep=None)
    later = [t for t in times if t > limited[0] + 0.2]
    assert later and min(later) >= limited[0] + 1.4  # nobody called during the pause
    assert len(times) == 12


def test_jitter_spreads_workers_released_by_a_pause():
    # Four workers waiting at the same instant on a 1 s pause resume staggered over a fifth of it,
    # not in the same millisecond. Decided on the limiter's own clock: no wall time under load.
    import random
    import threading

    from promptprobe.engine.limiter import Limiter

    delays: list[float] = []
    limiter = Limiter(clock=lambda: 0.0, sleep=delays.append)
    limiter.rng = random.Random(7)
    limiter.pause(1.0)
    for _ in range(4):
        limiter.wait(threading.Event())
        limiter.slept = 0.0  # every worker waited from the same instant
    assert all(1.0 <= d <= 1.2 for d in delays) and len(delays) == 4
    assert max(delays) - min(delays) > 0.05  # spread, over up to 0.2 s


def test_a_key_echoed_in_an_error_body_is_scrubbed(tmp_path):
    echo = json.dumps({"type": "error", "error": {"type": "authentication_error",
                                                  "message": f"invalid x-api-key {ANTHROPIC_KEY}"}}).encode()
    with LocalServer(scripted(Reply(status=500, body=echo), Reply("[[ANSWER]]\nok"))) as server:
        run, (sample,) = probe(tmp_path, server, "anthropic")
    assert "[ANTHROPIC_API_KEY removed]" in sample["attempts_log"][0]["body"]
    for path in run.rglob("*"):
        if path.is_file():
            assert ANTHROPIC_KEY.encode() not in path.read_bytes(), path


def test_an_intermittent_retrieval_endpoint_is_retried(tmp_path):
    calls = []

    def search(request):
        calls.append(request)
        if len(calls) % 2:
            return Reply(status=502, body=b"bad gateway", content_type="text/plain")
        return Reply(body=b'{"results": [{"id": "a", "text": "Alpha", "score": 1}]}')

    probeset = load_probeset(write_probeset(tmp_path / "p.toml", [(f"c{i}", f"q{i}", None) for i in range(3)]))
    with LocalServer(search) as retrieval, LocalServer() as model:
        (tmp_path / "probe.toml").write_text(
            f'[retrieval]\nkind = "http"\nurl = "{retrieval.url}/s"\nbody = {{ q = "{{question}}" }}\n')
        outcome = run_probe(probeset, [load_prompt(PROMPT)], [parse_model_spec(f"openai:m@{model.url}/v1")],
                            load_config(tmp_path / "probe.toml"),
                            RunOptions(runs_dir=tmp_path / "runs", sleep=lambda s: None, concurrency=1))
    assert outcome.errors == 0
    retrievals = read_jsonl(outcome.path / "retrievals.jsonl")
    assert all(r["attempts"] == 2 and r["attempts_log"][0]["status"] == 502 for r in retrievals)


def test_a_retrieval_that_resets_its_first_connections_is_flaky_not_unreachable(tmp_path):
    # It accepts each connection; only a refused one means the target is down (exit 3).
    calls = []

    def search(conn, request):
        calls.append(request)
        if len(calls) <= 2:  # the preflight's two quick attempts
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            return
        conn.sendall(http_response(b'{"results": [{"id": "a", "text": "Alpha", "score": 1}]}'))

    probeset = load_probeset(write_probeset(tmp_path / "p.toml", [("c0", "q0", None)]))
    with RawServer(search) as retrieval, LocalServer() as model:
        (tmp_path / "probe.toml").write_text(f'[retrieval]\nkind = "http"\nurl = "{retrieval.url}/s"\n')
        outcome = run_probe(probeset, [load_prompt(PROMPT)], [parse_model_spec(f"openai:m@{model.url}/v1")],
                            load_config(tmp_path / "probe.toml"),
                            RunOptions(runs_dir=tmp_path / "runs", sleep=lambda s: None, concurrency=1))
    assert outcome.status == "complete" and outcome.errors == 0 and len(calls) == 3


def test_a_null_completion_is_empty_not_absent(tmp_path):
    body = json.loads(openai_body("x", "m", None))
    body["choices"][0]["message"].update(content=None, refusal="I can't help with that.")
    with LocalServer(lambda r: Reply(body=json.dumps(body).encode())) as server:
        run, (sample,) = probe(tmp_path, server)
    assert sample["header"]["header"] == "empty"
    assert sample["response"]["refusal"] == "I can't help with that." and sample["response"]["content"] is None
    assert read_raw(run, sample) == b""
    from promptprobe.views.report import build_report

    (arm,) = build_report(run)["arms"]
    assert arm["cases"][0]["empty"] == 1 and arm["metrics"]["header_absent"]["k"] == 0


@pytest.mark.parametrize("model,key", [("o3-mini", "max_completion_tokens"), ("gpt-5", "max_completion_tokens"),
                                       ("gpt-4.1", "max_tokens")])
def test_reasoning_models_get_max_completion_tokens(tmp_path, model, key):
    with LocalServer() as server:
        probe(tmp_path, server, model=model, params=GenerationParams(max_tokens=55))
        body = server.requests[0].json
    assert body[key] == 55 and ({"max_tokens", "max_completion_tokens"} - {key}).isdisjoint(body)


def test_nan_scores_become_null_with_a_note(tmp_path):
    (tmp_path / "nanrag.py").write_text(
        'def retrieve(question, history):\n'
        '    return [{"id": "a", "text": "Alpha", "score": float("nan")}, {"id": "b", "text": "Beta", "score": 1.0}]\n')
    (tmp_path / "probe.toml").write_text('[retrieval]\nkind = "python"\nfunction = "nanrag:retrieve"\n')
    import os

    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        probeset = load_probeset(write_probeset(tmp_path / "p.toml", [("c", "q?", None)]))
        with LocalServer() as server:
            outcome = run_probe(probeset, [load_prompt(PROMPT)], [parse_model_spec(f"openai:m@{server.url}/v1")],
                                load_config(tmp_path / "probe.toml"), RunOptions(runs_dir=tmp_path / "runs"))
    finally:
        os.chdir(cwd)
    for name in ("samples.jsonl", "retrievals.jsonl", "manifest.json"):
        text = (outcome.path / name).read_text()
        assert "NaN" not in text and "Infinity" not in text
    (retrieval,) = read_jsonl(outcome.path / "retrievals.jsonl")
    assert retrieval["passages"][0]["score"] is None and "nan" in retrieval["passages"][0]["note"]
    assert read_jsonl(outcome.path / "samples.jsonl")[0]["retrieval"]["scores"] == [None, 1.0]


def test_a_hanging_server_meets_the_timeout(tmp_path):
    with LocalServer(lambda r: Reply("[[ANSWER]]\nlate", delay=30)) as server:
        started = time.monotonic()
        _, (sample,) = probe(tmp_path, server, max_attempts=1, params=GenerationParams(timeout=1.0))
        elapsed = time.monotonic() - started
    assert sample["error"]["kind"] == "timeout" and elapsed < 15  # the reply would take 30 s


@pytest.mark.parametrize("fault", ["hangs", "resets mid-stream"])
def test_a_model_that_accepts_connections_but_fails_them_is_flaky_not_down(tmp_path, fault):
    # Its first samples all fail the same way, but it is up: every sample is called and counted.
    full = openai_stream("[[ANSWER]]\nfine", "m", None)
    reply = (Reply("[[ANSWER]]\nlate", delay=30) if fault == "hangs"
             else Reply(body=full, cut=40, reset=True, content_type="text/event-stream"))
    with LocalServer(lambda r: reply) as server:
        run, samples = probe(tmp_path, server, cases=4, max_attempts=1,
                             params=GenerationParams(stream=True, timeout=0.5))
        calls = len(server.requests)
    kind = "timeout" if fault == "hangs" else "connection"
    assert [s["error"]["kind"] for s in samples] == [kind] * 4 and calls == 4
    assert load_manifest(run)["status"] == "complete"


def test_rpm_spaces_the_calls_of_a_provider(tmp_path):
    times: list[float] = []

    def responder(request):
        times.append(time.monotonic())
        return Reply("[[ANSWER]]\nok")

    started = time.monotonic()
    with LocalServer(responder) as server:
        probe(tmp_path, server, cases=4, concurrency=4, rpm=120, sleep=None)  # one call every 0.5 s
    # The k-th call may go out no earlier than k half-seconds after the start; a loaded machine
    # only delays a call (two arrivals may then come closer than 0.5 s), never brings one forward.
    assert len(times) == 4
    assert all(arrived - started >= 0.5 * k for k, arrived in enumerate(sorted(times)))


def test_a_spent_rate_limit_budget_pauses_until_its_reset(tmp_path):
    times: list[float] = []

    def responder(request):
        times.append(time.monotonic())
        headers = {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "1s"} if len(times) == 1 else {}
        return Reply("[[ANSWER]]\nok", headers=headers)

    with LocalServer(responder) as server:
        probe(tmp_path, server, cases=3, concurrency=1, sleep=None)
    assert len(times) == 3 and times[1] - times[0] >= 0.95  # the spent budget held the next call


def test_a_lone_surrogate_in_a_reply_is_kept_and_every_json_view_reads_it(tmp_path):
    # "\ud800" is valid JSON but no UTF-8: the raw file keeps its bytes, JSON views show U+FFFD.
    body = openai_body("PLACEHOLDER", "m", None).replace(b"PLACEHOLDER", b"[[ANSWER]]\\nx\\ud800y")
    with LocalServer(lambda r: Reply(body=body)) as server:
        run, (sample,) = probe(tmp_path, server)
    assert sample["error"] is None
    assert read_raw(run, sample) == "[[ANSWER]]\nx\ud800y".encode("utf-8", "surrogatepass")
    shown = CliRunner().invoke(main, ["show", str(run), "--format", "json"])
    exported = CliRunner().invoke(main, ["export", str(run), "--format", "json"])
    assert shown.exit_code == 0 and exported.exit_code == 0, shown.output + exported.output
    assert json.loads(shown.stdout)["samples"][0]["text"] == "[[ANSWER]]\nx\ufffd\ufffd\ufffdy"
    (item,) = json.loads(exported.stdout)["cases"][0]["arms"][0]["groups"]
    assert base64.b64decode(item["raw_base64"]) == read_raw(run, sample)


def test_a_lone_surrogate_in_a_retrieved_passage_is_sent_and_recorded_alike(tmp_path):
    passages = b'{"results": [{"id": "a", "text": "x\\ud800y", "score": 1}]}'
    probeset = load_probeset(write_probeset(tmp_path / "p.toml", [("c0", "q0", None), ("c1", "q1", None)]))
    with LocalServer(lambda r: Reply(body=passages)) as retrieval, LocalServer() as model:
        (tmp_path / "probe.toml").write_text(f'[retrieval]\nkind = "http"\nurl = "{retrieval.url}/s"\n')
        outcome = run_probe(probeset, [load_prompt(PROMPT)], [parse_model_spec(f"openai:m@{model.url}/v1")],
                            load_config(tmp_path / "probe.toml"),
                            RunOptions(runs_dir=tmp_path / "runs", sleep=lambda s: None, concurrency=1))
        sent = [m["content"] for r in model.requests for m in r.json["messages"] if m["role"] == "system"]
    assert outcome.status == "complete" and outcome.errors == 0
    (passage,) = read_jsonl(outcome.path / "retrievals.jsonl")[0]["passages"]
    assert passage["text"] == "x\ufffdy" and "lone surrogate" in passage["note"]
    assert len(sent) == 2 and all("x\ufffdy" in text for text in sent)


@pytest.mark.parametrize("header,low,high", [({"retry-after": "4"}, 4.0, 4.9), ({"retry-after-ms": "3500"}, 3.5, 4.3)])
def test_a_retrieval_endpoint_asking_to_wait_is_waited_for(tmp_path, header, low, high):
    # Retrieval errors carry Retry-After as model errors do: the runner's retries honour both.
    calls = []

    def search(request):
        calls.append(request)
        if len(calls) == 1:
            return Reply(status=429, body=b"slow down", content_type="text/plain", headers=header)
        return Reply(body=b'{"results": [{"id": "a", "text": "Alpha", "score": 1}]}')

    probeset = load_probeset(write_probeset(tmp_path / "p.toml", [("c0", "q0", None)]))
    waits: list[float] = []
    with LocalServer(search) as retrieval, LocalServer() as model:
        (tmp_path / "probe.toml").write_text(f'[retrieval]\nkind = "http"\nurl = "{retrieval.url}/s"\n')
        outcome = run_probe(probeset, [load_prompt(PROMPT)], [parse_model_spec(f"openai:m@{model.url}/v1")],
                            load_config(tmp_path / "probe.toml"),
                            RunOptions(runs_dir=tmp_path / "runs", sleep=waits.append, concurrency=1))
    assert outcome.errors == 0 and len(calls) == 2
    assert len(waits) == 1 and low <= waits[0] <= high, waits


# -- live replies an audit found handled otherwise than documented (issue 37, item 7) ------------

CHUNK = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "m"}


@pytest.mark.parametrize("choice", [{"index": 0}, None], ids=["no delta, no finish_reason", "null"])
def test_a_streamed_choice_without_a_message_is_bad_body_not_truncated(tmp_path, choice):
    """docs/runs.md: a choice without a message is `bad_body` (it was recorded `truncated`)."""
    body = sse([(None, CHUNK | {"choices": [{"index": 0, "delta": {"content": "[[ANSWER]]\nhi"}}]}),
                (None, CHUNK | {"choices": [choice]}), (None, "[DONE]")])
    with LocalServer(lambda r: Reply(body=body, content_type="text/event-stream")) as server:
        _, (sample,) = probe(tmp_path, server, **stream_params(True))
    assert sample["error"]["kind"] == "bad_body" and sample["attempts"] == 3
    assert "choice" in sample["error"]["message"]


def test_a_final_chunk_with_a_finish_reason_and_no_delta_is_an_answer(tmp_path):
    body = sse([(None, CHUNK | {"choices": [{"index": 0, "delta": {"content": "[[ANSWER]]\nhi"}}]}),
                (None, CHUNK | {"choices": [{"index": 0, "finish_reason": "stop"}]}), (None, "[DONE]")])
    with LocalServer(lambda r: Reply(body=body, content_type="text/event-stream")) as server:
        run, (sample,) = probe(tmp_path, server, **stream_params(True))
    assert sample["error"] is None and read_raw(run, sample) == b"[[ANSWER]]\nhi"


def _streamed_usage(provider: str, bad: object) -> bytes:
    if provider == "openai":
        return sse([(None, CHUNK | {"choices": [{"index": 0, "delta": {"content": "[[ANSWER]]\nhi"}}]}),
                    (None, CHUNK | {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
                    (None, CHUNK | {"choices": [], "usage": {"prompt_tokens": bad, "completion_tokens": 4}}),
                    (None, "[DONE]")])
    return sse([
        ("message_start", {"type": "message_start", "message": {
            "id": "msg_1", "type": "message", "role": "assistant", "model": "m", "content": [],
            "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": bad, "output_tokens": 1}}}),
        ("content_block_start", {"type": "content_block_start", "index": 0,
                                 "content_block": {"type": "text", "text": ""}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                 "delta": {"type": "text_delta", "text": "[[ANSWER]]\nhi"}}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                           "usage": {"output_tokens": bad}}),
        ("message_stop", {"type": "message_stop"}),
    ])


@pytest.mark.parametrize("bad", [-5, "lots"], ids=["negative", "text"])
@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_streamed_usage_with_a_count_that_is_not_one_drops_the_count_not_the_sample(tmp_path, provider, bad):
    body = _streamed_usage(provider, bad)
    with LocalServer(lambda r: Reply(body=body, content_type="text/event-stream")) as server:
        _, (sample,) = probe(tmp_path, server, provider, **stream_params(True))
    assert sample["error"] is None and sample["attempts"] == 1
    usage = sample["response"]["usage"]
    assert all(isinstance(v, int) and v >= 0 for v in usage.values()) and bad not in usage.values()


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_invalid_utf8_in_a_reply_is_bad_body_on_both_paths_with_the_bytes_kept(tmp_path, provider, stream):
    """A JSON text must be UTF-8 (RFC 8259): the same reply is treated alike streamed or not."""
    text = "[[ANSWER]]\nok QQ"
    if stream:
        body = _streamed_usage(provider, 1).replace(b"hi", b"ok QQ") if provider == "anthropic" else sse(
            [(None, CHUNK | {"choices": [{"index": 0, "delta": {"content": text}}]}),
             (None, CHUNK | {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}), (None, "[DONE]")])
    else:
        body = (openai_body if provider == "openai" else anthropic_body)(text, "m", None)
    body = body.replace(b"QQ", b"\xff\xfe")
    kind = "text/event-stream" if stream else "application/json"
    with LocalServer(lambda r: Reply(body=body, content_type=kind)) as server:
        _, (sample,) = probe(tmp_path, server, provider, **stream_params(stream))
    assert sample["error"]["kind"] == "bad_body" and sample["attempts"] == 3
    assert all("\\xff" in entry["body"] or "\ufffd" in entry["body"] for entry in sample["attempts_log"])


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_reply_shorter_than_its_content_length_is_lost_and_retried(tmp_path, provider, stream):
    """The OpenAI SDK stops reading a stream at [DONE]: a body cut after it was taken as whole."""
    make = {("openai", False): openai_body, ("anthropic", False): anthropic_body,
            ("openai", True): openai_stream, ("anthropic", True): anthropic_stream}[(provider, stream)]
    body = make("[[ANSWER]]\nok", "m", None)
    whole = http_response(body, content_type="text/event-stream" if stream else "application/json")
    declared = whole.replace(f"content-length: {len(body)}".encode(), f"content-length: {len(body) + 50}".encode())
    calls = []

    def handler(conn, request):
        calls.append(request)
        conn.sendall(declared if len(calls) == 1 else whole)

    with RawServer(handler) as server:
        _, (sample,) = probe(tmp_path, server, provider, **stream_params(stream))
    assert sample["error"] is None and sample["attempts"] == 2 and len(calls) == 2
    assert sample["attempts_log"][0]["kind"] == "connection"
