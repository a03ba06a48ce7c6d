"""Nothing a server or a user sends can crash a run or leak a secret: each fault and bad input
of issue 17, through the real SDKs over real sockets, and the CLI's exit codes and one sentence."""

import base64
import itertools
import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import ROOT, run_dir_of, write_probeset
from servers import LocalServer, RawServer, Reply, http_response, openai_body, sse

from promptprobe.cli import main
from promptprobe.config import load_config
from promptprobe.engine.run import RunOptions, run_probe
from promptprobe.jsonio import read_jsonl
from promptprobe.models import parse_model_spec
from promptprobe.pack import read_raw
from promptprobe.probeset import load_probeset
from promptprobe.prompts import load_prompt
from promptprobe.providers.base import GenerationParams
from promptprobe.redaction import SCRUBBER

PROMPT = str(ROOT / "prompts" / "always-header.md")
PROBE = str(Path(sys.executable).parent / "probe")
KEY = "sk-ant-hostile-key-000000000000000000000000"


@pytest.fixture(autouse=True)
def anthropic_key(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)


def spec(provider: str, url: str) -> str:
    return f"anthropic:m@{url}" if provider == "anthropic" else f"openai:m@{url}/v1"


def probe(tmp_path: Path, model: str, cases: int = 2, config=None, **options):
    tmp_path.mkdir(parents=True, exist_ok=True)
    probeset = load_probeset(
        write_probeset(tmp_path / "p.toml", [(f"c{i}", f"q{i}", None) for i in range(cases)])
    )
    defaults = {"runs_dir": tmp_path / "runs", "sleep": lambda s: None, "concurrency": 2, "max_attempts": 2}
    outcome = run_probe(
        probeset,
        [load_prompt(PROMPT)],
        [parse_model_spec(model)],
        config or load_config(None),
        RunOptions(**(defaults | options)),
    )
    return outcome, read_jsonl(outcome.path / "samples.jsonl")


def everything_written(run: Path) -> bytes:
    return b"".join(p.read_bytes() for p in run.rglob("*") if p.is_file())


# -- one deadline per call ------------------------------------------------------------------------


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_response_headers_trickled_a_byte_a_second_stop_at_the_deadline(tmp_path, provider):
    head = http_response(b"{}")

    def trickle(conn, request):
        server.trickle(conn, head, 1.0)

    with RawServer(trickle) as server:
        outcome, samples = probe(
            tmp_path,
            spec(provider, server.url),
            cases=1,
            max_attempts=1,
            params=GenerationParams(timeout=2.0),
        )
    # The whole attempt, headers and all (a byte a second, the headers alone would take minutes).
    assert samples[0]["latency_ms"] < (2.0 + 10) * 1000
    assert samples[0]["error"]["kind"] == "timeout" and "within 2 s" in samples[0]["error"]["message"]


def test_an_http_retrieval_trickled_a_byte_a_second_stops_at_its_timeout(tmp_path):
    reply = http_response(json.dumps({"results": [{"id": "a", "text": "t", "score": 1.0}]}).encode())

    def trickle(conn, request):
        server.trickle(conn, reply, 1.0)

    from promptprobe.retrievers.base import RetrievalError
    from promptprobe.retrievers.http import HttpRetriever

    with RawServer(trickle) as server:
        retriever = HttpRetriever({"url": f"{server.url}/search", "timeout": 1.5})
        started = time.monotonic()
        with pytest.raises(RetrievalError, match="no complete reply within 1.5 s"):
            retriever.retrieve("q", [])
        assert time.monotonic() - started < 1.5 + 10  # the whole reply would trickle for minutes


# -- replies the SDK accepts but that are not answers -----------------------------------------------

WRONG_SHAPES = {
    "openai": [
        b'{"choices":[{"index":0}]}',
        b'{"choices":[null]}',
        b'{"choices":[]}',
        b'{"choices":[{"index":0,"message":{"role":"assistant","content":7}}]}',
    ],
    "anthropic": [
        b'{"type":"message","content":[{"type":"text"}]}',
        b'{"type":"message"}',
        b'{"type":"message","content":"text"}',
    ],
}
WRONG_STREAMS = {
    "openai": [
        sse([(None, {"id": "x"})]),
        sse([("error", {"message": "boom", "code": 500})]),
        sse([(None, {"id": "x", "choices": [None]})]),
        b"data: {not json\n\n",
    ],
    "anthropic": [
        sse([("message_start", {"type": "message_start"})]),
        sse([("error", {"message": "boom", "code": 500})]),
        sse([("content_block_delta", {"type": "content_block_delta", "delta": None})]),
    ],
}


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_valid_json_of_the_wrong_shape_is_a_bad_body_attempt_never_a_crash(tmp_path, provider):
    replies = [Reply(body=b, content_type="application/json") for b in WRONG_SHAPES[provider]]
    replies += [Reply(body=b, content_type="text/event-stream") for b in WRONG_STREAMS[provider]]
    for index, reply in enumerate(replies):
        stream = reply.content_type == "text/event-stream"
        with LocalServer(lambda request, reply=reply: reply) as server:
            outcome, samples = probe(
                tmp_path / str(index),
                spec(provider, server.url),
                params=GenerationParams(stream=stream, timeout=10),
            )
        assert outcome.status == "complete" and len(samples) == 2, reply.body
        for sample in samples:
            assert sample["error"] is not None and sample["raw"] is None, reply.body
            assert sample["error"]["kind"] in ("bad_body", "stream_error", "truncated"), sample["error"]
            assert sample["attempts"] == 2  # retried like any transient failure
            assert sample["attempts_log"][0]["body"] is not None  # the bytes are kept


# -- disk, pauses, down targets -------------------------------------------------------------------


def test_a_disk_already_full_is_exit_3_with_nothing_left_behind(tmp_path):
    mount = tmp_path / "tiny"
    mount.mkdir()
    if (
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)], capture_output=True
        ).returncode
        != 0
    ):
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    try:
        (mount / "runs").mkdir()
        fd = os.open(mount / "filler", os.O_WRONLY | os.O_CREAT)
        try:
            while os.write(fd, b"\0" * 4096):
                pass
        except OSError as exc:
            assert exc.errno == 28  # full, as intended
        finally:
            os.close(fd)
        with LocalServer() as server:
            result = CliRunner().invoke(
                main,
                [
                    "run",
                    "--retrieval",
                    "none",
                    str(write_probeset(tmp_path / "p.toml", [("c0", "q", None)])),
                    "--prompt",
                    PROMPT,
                    "--model",
                    f"openai:m@{server.url}/v1",
                    "--runs-dir",
                    str(mount / "runs"),
                ],
            )
        assert result.exit_code == 3, result.output
        assert result.stderr.count("\n") == 1 and "the disk is full" in result.stderr
        assert "Traceback" not in result.output
        assert list((mount / "runs").iterdir()) == []
    finally:
        subprocess.run(["umount", str(mount)], capture_output=True)


def test_rate_limit_headers_pause_at_most_max_retry_wait(tmp_path):
    spent = {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "1000s"}
    waits: list[float] = []
    with LocalServer(lambda r: Reply("[[ANSWER]]\nok", headers=dict(spent))) as server:
        # The pauses are recorded, not slept: what each would have been, whatever the machine's load.
        outcome, samples = probe(
            tmp_path, spec("openai", server.url), cases=5, concurrency=1, max_retry_wait=0.5, sleep=waits.append
        )
    assert len(samples) == 5 and all(s["error"] is None for s in samples)
    assert waits and max(waits) <= 0.5  # the reset says 1000 s: every pause is cut to max_retry_wait


# -- secrets --------------------------------------------------------------------------------------


def no_trace_of(secret: str, data: bytes) -> bool:
    """Not the secret, nor any 12 characters of it, in any of its written forms."""
    pieces = {secret[i : i + 12] for i in range(len(secret) - 11)}
    return not any(piece.encode() in data for piece in pieces)


def test_a_key_in_an_html_error_page_near_byte_200_is_not_kept_in_part(tmp_path):
    page = b"<html><body>" + b"x" * 170 + b" key=" + KEY.encode() + b" </body></html>"
    with LocalServer(lambda r: Reply(body=page, content_type="text/html")) as server:
        outcome, samples = probe(tmp_path, spec("anthropic", server.url), cases=1)
    assert samples[0]["error"]["kind"] == "bad_body"
    assert no_trace_of(KEY, everything_written(outcome.path))
    shown = CliRunner().invoke(main, ["export", str(outcome.path), "--format", "json"]).stdout
    assert no_trace_of(KEY, shown.encode())


@pytest.mark.parametrize("before", [170, 180, 190])
def test_a_batch_line_that_cannot_be_read_keeps_no_part_of_a_key_its_reason_is_cut_across(before):
    from promptprobe.providers.batching import read_result

    key = "sk-batchcut-0123456789abcdefghij"
    SCRUBBER.add("BATCH_CUT_KEY", key)

    def read(item):
        raise ValueError("x" * before + key)  # the reason is cut to 200 characters

    line = b'{"custom_id": "c1.r1.a1", "response": {}}'
    result = read_result("openai:m", line, read)
    assert result.error.kind == "bad_body" and "a batch result line cannot be read" in str(result.error)
    assert no_trace_of(key, str(result.error).encode())


def test_a_key_spelled_across_stream_events_withholds_the_body(tmp_path):
    events = [
        (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": "m",
                    "type": "message",
                    "role": "assistant",
                    "model": "m",
                    "content": [],
                    "stop_reason": None,
                    "usage": {"input_tokens": 1, "output_tokens": 1},
                },
            },
        )
    ]
    text = f"[[ANSWER]]\nthe key is {KEY}"
    for i in range(0, len(text), 5):
        events.append(
            (
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "text_delta", "text": text[i : i + 5]},
                },
            )
        )
    events += [
        (
            "message_delta",
            {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 9}},
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    body = sse(events)
    with LocalServer(lambda r: Reply(body=body, content_type="text/event-stream")) as server:
        outcome, samples = probe(
            tmp_path, spec("anthropic", server.url), cases=1, params=GenerationParams(stream=True, timeout=10)
        )
    sample = samples[0]
    assert sample["error"] is None
    assert sample["response"]["body"] is None
    assert sample["response"]["body_withheld"] == "a secret was spelled across several stream events"
    raw = read_raw(outcome.path, sample).decode("utf-8")
    assert raw == "[[ANSWER]]\nthe key is [ANTHROPIC_API_KEY removed]"
    assert no_trace_of(KEY, everything_written(outcome.path))


@pytest.mark.parametrize(
    "header,token",
    [("Bearer ${SEARCH_TOKEN}", "tok/abc/def-0123456789"), ("Bearer lit/xyz/uvw-9876543210", "lit/xyz/uvw-9876543210")],
    ids=["from the environment", "written in probe.toml"],
)
def test_a_retrieval_token_echoed_json_escaped_is_not_stored(tmp_path, monkeypatch, header, token):
    monkeypatch.setenv("SEARCH_TOKEN", "tok/abc/def-0123456789")

    def search(request):
        echoed = json.dumps(
            {"results": [{"id": "a", "text": "auth was " + request.headers["authorization"], "score": 1.0}]}
        ).replace("/", "\\/")
        return Reply(body=echoed.encode())

    with LocalServer(search) as retrieval, LocalServer() as model:
        (tmp_path / "probe.toml").write_text(
            f'[retrieval]\nkind = "http"\nurl = "{retrieval.url}/search"\n'
            f'headers = {{ Authorization = "{header}" }}\n'
        )
        outcome, samples = probe(
            tmp_path, spec("openai", model.url), cases=1, config=load_config(tmp_path / "probe.toml")
        )
    written = everything_written(outcome.path)
    assert b"removed]" in written
    assert no_trace_of(token, written) and no_trace_of(token, written.replace(b"\\/", b"/"))


def test_a_retrieval_token_echoed_in_hex_or_reversed_in_passages_is_not_stored(tmp_path, monkeypatch):
    """Issue 37: the retrieval token in hex, echoed back in passages, was kept."""
    token = "tok/abc/def-0123456789"
    monkeypatch.setenv("SEARCH_TOKEN", token)

    def search(request):
        sent = request.headers["authorization"].removeprefix("Bearer ")
        texts = [f"auth was {sent.encode().hex()}", f"AUTH WAS {sent.upper()}", f"backwards {sent[::-1]}",
                 f"split {sent[:7]}\r\n{sent[7:]}"]
        hits = [{"id": f"p{i}", "text": text, "score": 1.0} for i, text in enumerate(texts)]
        return Reply(body=json.dumps({"results": hits}).encode())

    with LocalServer(search) as retrieval, LocalServer() as model:
        (tmp_path / "probe.toml").write_text(
            f'[retrieval]\nkind = "http"\nurl = "{retrieval.url}/search"\n'
            'headers = { Authorization = "Bearer ${SEARCH_TOKEN}" }\n'
        )
        outcome, samples = probe(
            tmp_path, spec("openai", model.url), cases=1, config=load_config(tmp_path / "probe.toml")
        )
    written = everything_written(outcome.path)
    assert written.count(b"removed]") >= 4
    assert leaks(token, written) == []


def test_scrubbing_finds_every_written_form():
    SCRUBBER.add("SOME_TOKEN", "sk-proj-AbC/def+ghi=JKL mno")
    secret = "sk-proj-AbC/def+ghi=JKL mno"
    import urllib.parse

    forms = [
        secret,
        json.dumps(secret)[1:-1].replace("/", "\\/"),
        secret.replace("/", "\\u002F").replace("+", "\\u002b"),
        urllib.parse.quote(secret, safe=""),
        urllib.parse.quote_plus(secret),
        base64.b64encode(b"user:" + secret.encode()).decode(),
        base64.urlsafe_b64encode(b"ab" + secret.encode()).decode(),
    ]
    for form in forms:
        scrubbed = SCRUBBER.text(f"before {form} after")
        assert "[SOME_TOKEN removed]" in scrubbed and form not in scrubbed, form


def test_a_short_key_is_warned_about(tmp_path, monkeypatch):
    monkeypatch.setenv("SHORT_KEY", "abc123")
    with LocalServer() as server:
        (tmp_path / "probe.toml").write_text(
            f'[run]\nmodels = [{{ spec = "openai:m@{server.url}/v1", api_key_env = "SHORT_KEY" }}]\n'
        )
        result = CliRunner().invoke(
            main,
            [
                "run",
                str(write_probeset(tmp_path / "p.toml", [("c0", "q", None)])),
                "--prompt",
                PROMPT,
                "--config",
                str(tmp_path / "probe.toml"),
                "--runs-dir",
                str(tmp_path / "runs"),
            ],
        )
    assert result.exit_code == 0, result.output
    assert "warning: SHORT_KEY is shorter than 8 characters: it cannot be scrubbed reliably" in result.stderr


def test_every_file_probe_writes_is_private(tmp_path):
    with LocalServer() as server:
        outcome, _ = probe(tmp_path, spec("openai", server.url), cases=1)
    for args, name in (
        (["report", str(outcome.path), "-o"], "report.html"),
        (["report", str(outcome.path), "--format", "html", "-o"], "again.html"),
        (["compare", str(outcome.path), str(outcome.path), "-o"], "compare.txt"),
    ):
        target = tmp_path / name
        target.write_text("old")
        target.chmod(0o644)
        assert CliRunner().invoke(main, [*args, str(target)]).exit_code == 0
        assert stat.S_IMODE(target.stat().st_mode) == 0o600, name


# -- Ctrl-C ---------------------------------------------------------------------------------------


def _recorded(runs: Path) -> int:
    found = list(runs.glob("*/samples.jsonl")) if runs.exists() else []
    return len(found[0].read_bytes().splitlines()) if found else 0


# Moments of a run, each seen from outside (never a sleep that a loaded machine can outrun), and
# how many model calls are answered at once before that moment; every later call hangs until the
# test ends, so the run cannot finish before the Ctrl-C however slowly the test gets to send it.
MOMENTS = {
    "retrieval checked, nothing created": (lambda server, runs: any(
        r.path.startswith("/search") for r in server.requests
    ), 0),
    "run directory written": (lambda server, runs: bool(runs.exists() and list(runs.glob("*/manifest.json"))), 0),
    "first call in flight": (lambda server, runs: len(server.requests) >= 1, 0),
    "some samples recorded": (lambda server, runs: _recorded(runs) >= 3, 3),
    "last calls in flight": (lambda server, runs: _recorded(runs) >= 17 and len(server.requests) >= 18, 17),
}


@pytest.mark.parametrize("moment", list(MOMENTS))
def test_ctrl_c_at_any_moment_exits_130_never_1(tmp_path, moment):
    seen, answered = MOMENTS[moment]
    calls = itertools.count(1)  # next() is atomic: the server's threads number the calls

    def reply(request):
        if request.path.startswith("/search"):  # the check before anything is created: held
            return Reply(body=b'{"results": []}', content_type="application/json", delay=3600)
        return Reply("[[ANSWER]]\nok", delay=0 if next(calls) <= answered else 3600)

    with LocalServer(reply) as server:
        (tmp_path / "probe.toml").write_text(
            f'[retrieval]\nkind = "http"\nurl = "{server.url}/search"\nbody = {{ query = "{{question}}" }}\n'
            'results = "results"\n'
        )
        retrieval = ["--config", str(tmp_path / "probe.toml")] if moment.startswith("retrieval") else [
            "--retrieval", "none"]
        process = subprocess.Popen(
            [
                PROBE,
                "run",
                *retrieval,
                str(write_probeset(tmp_path / "p.toml", [(f"c{i}", f"q{i}", None) for i in range(20)])),
                "--prompt",
                PROMPT,
                "--model",
                f"openai:m@{server.url}/v1",
                "--runs-dir",
                str(tmp_path / "runs"),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        deadline = time.monotonic() + 120
        while not seen(server, tmp_path / "runs"):
            assert process.poll() is None and time.monotonic() < deadline, moment
            time.sleep(0.005)
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=30)
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr and "Aborted" not in stderr
    if moment.startswith("retrieval"):
        assert not (tmp_path / "runs").exists()
        assert stderr.strip().splitlines()[-1] == "interrupted: nothing was recorded (no run directory was created)"
        return
    (run,) = (tmp_path / "runs").iterdir()
    assert f"probe run --resume {run}" in stderr
    assert json.loads((run / "manifest.json").read_text())["status"] == "interrupted"


# -- bad input: one sentence, exit 2 ------------------------------------------------------------------


def deep_toml() -> str:
    return "x = " + "[" * 3000 + "]" * 3000 + "\n"


BAD_INPUTS = {
    "probe set nested 3000 deep": (
        lambda t: ["check", str(write(t / "p.toml", deep_toml()))],
        "nested too deeply",
    ),
    "probe.toml nested 3000 deep": (
        lambda t: [
            "run",
            probes(t),
            "--prompt",
            PROMPT,
            "--config",
            str(write(t / "c.toml", "[run]\n" + deep_toml())),
            "--dry-run",
        ],
        "nested too deeply",
    ),
    "prompt named ..": (
        lambda t: ["run", probes(t), "--prompt", f"..={PROMPT}", "--dry-run"],
        "prompt name '..'",
    ),
    "prompt named .": (
        lambda t: ["run", probes(t), "--prompt", f".={PROMPT}", "--dry-run"],
        "prompt name '.'",
    ),
    "300-character prompt name": (
        lambda t: ["run", probes(t), "--prompt", "a" * 300 + f"={PROMPT}", "--dry-run"],
        "is 300 characters long",
    ),
    "max_tokens beyond int64": (
        lambda t: [
            "run",
            probes(t),
            "--prompt",
            PROMPT,
            "--config",
            str(write(t / "c.toml", "[run]\nmax_tokens = 9223372036854775807\n")),
            "--dry-run",
        ],
        "'max_tokens' must be between 1 and 1e+06",
    ),
    "5000-character probe-set name": (
        lambda t: [
            "check",
            str(write(t / "p.toml", f'name = "{"n" * 5000}"\n[[case]]\nid = "a"\nquestion = "q"\n')),
        ],
        "is 5000 characters long",
    ),
    "300-character case id": (
        lambda t: ["check", str(write(t / "p.toml", f'[[case]]\nid = "{"c" * 300}"\nquestion = "q"\n'))],
        "is 300 characters long",
    ),
    "timeout = 1e308": (
        lambda t: [
            "run",
            probes(t),
            "--prompt",
            PROMPT,
            "--config",
            str(write(t / "c.toml", "[run]\ntimeout = 1e308\n")),
            "--dry-run",
        ],
        "'timeout' must be between",
    ),
    "--timeout 1e12": (
        lambda t: ["run", probes(t), "--prompt", PROMPT, "--timeout", "1e12", "--dry-run"],
        "--timeout",
    ),
    "max_retry_wait = 1e308": (
        lambda t: [
            "run",
            probes(t),
            "--prompt",
            PROMPT,
            "--config",
            str(write(t / "c.toml", "[run]\nmax_retry_wait = 1e308\n")),
            "--dry-run",
        ],
        "'max_retry_wait' must be between",
    ),
    "a manifest without probeset (report)": (
        lambda t: ["report", str(damaged(t))],
        "not a readable run: manifest.json lacks probeset",
    ),
    "a manifest without probeset (resume)": (
        lambda t: ["run", "--resume", str(damaged(t))],
        "not a readable run: manifest.json lacks probeset",
    ),
}


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def probes(tmp_path: Path) -> str:
    return str(write_probeset(tmp_path / "ok.toml", [("c0", "q", None)]))


def damaged(tmp_path: Path) -> Path:
    run = tmp_path / "runs" / "20261130T000000-x-000000"
    run.mkdir(parents=True)
    (run / "manifest.json").write_text(json.dumps({"schema_version": 2, "status": "complete", "arms": []}))
    return run


@pytest.mark.parametrize("name", list(BAD_INPUTS))
def test_every_bad_input_is_one_sentence_and_exit_2(tmp_path, name):
    make_args, words = BAD_INPUTS[name]
    result = CliRunner().invoke(main, make_args(tmp_path))
    assert result.exit_code == 2, (name, result.output)
    assert (
        "Traceback" not in result.output
        and result.exception is None
        or isinstance(result.exception, SystemExit)
    )
    assert words in result.stderr, result.stderr
    error_lines = [line for line in result.stderr.splitlines() if line.startswith(("error:", "Error:"))]
    assert len(error_lines) == 1, result.stderr


def test_retry_after_of_1e11_waits_no_longer_than_max_retry_wait(tmp_path):
    waits: list[float] = []
    replies = iter(
        [Reply(status=429, body=b'{"error": {"message": "slow down"}}', headers={"retry-after": "1e11"})]
    )

    def responder(request):
        return next(replies, Reply("[[ANSWER]]\nok"))

    with LocalServer(responder) as server:
        outcome, samples = probe(
            tmp_path,
            spec("openai", server.url),
            cases=1,
            concurrency=1,
            sleep=waits.append,
            max_retry_wait=2.0,
        )
    assert samples[0]["error"] is None and waits and max(waits) <= 2.0


def test_the_report_of_a_run_with_a_key_in_its_bodies_shows_none_of_it(tmp_path):
    body = openai_body(f"[[ANSWER]]\nhere: {KEY}", "m", None)
    with LocalServer(lambda r: Reply(body=body)) as server:
        outcome, _ = probe(tmp_path, spec("openai", server.url), cases=1)
    html = tmp_path / "r.html"
    assert (
        CliRunner().invoke(main, ["report", str(outcome.path), "--format", "html", "-o", str(html)]).exit_code
        == 0
    )
    assert no_trace_of(KEY, html.read_bytes()) and no_trace_of(KEY, everything_written(outcome.path))
    assert os.stat(html).st_mode & 0o077 == 0
    assert run_dir_of  # imported for the fuzz module's use as well


# -- secrets in every promised form (issue 25, item 5) ---------------------------------------------

OPENAI_KEY = "sk-test-hostile-openai-0123456789abcdefXYZ"
# No long run of one character: twelve zeros of a key would be found in any float of a report.
ANTHROPIC_KEY = "sk-ant-hostile-9f3Kq2Lm8Xv4Tz7Rw1Bn6Hd5"
PLACES = ("raw text", "response body", "request id header", "model field", "stop reason", "error body",
          "error message")


def leaks(key: str, data: bytes) -> list[str]:
    """How the key can still be read from `data` (an independent reader: JSON escapes undone
    however deep, percent-decoding, line breaks removed, any case, reversed, hex decoded, base64
    decoded at every alignment)."""
    import re
    import urllib.parse

    text = data.decode("utf-8", "replace")
    unescaped = text
    for _ in range(4):
        unescaped = re.sub(r"\\+u([0-9a-fA-F]{4})", lambda m: chr(int(m.group(1), 16)), unescaped)
        unescaped = re.sub(r"\\+/", "/", unescaped)
    decoded = urllib.parse.unquote(unescaped)
    flat = re.sub(r"\r|\n|\\+r|\\+n", "", decoded)
    found = [name for name, view in (("as written", text), ("JSON-unescaped", unescaped),
                                     ("percent-decoded", decoded)) if not no_trace_of(key, view.encode())]
    if not no_trace_of(key.lower(), flat.lower().encode()):
        found.append("line breaks removed, any case")
    if not no_trace_of(key[::-1].lower(), flat.lower().encode()):
        found.append("reversed")
    for run in re.findall(r"[0-9a-fA-F]{24,}", flat):
        for start in range(2):
            chunk = run[start:][: (len(run) - start) // 2 * 2]
            if not no_trace_of(key, bytes.fromhex(chunk)):
                found.append("hex")
    for run in re.findall(r"[A-Za-z0-9+/_-]{16,}", flat):
        for start in range(4):
            chunk = run[start:][: (len(run) - start) // 4 * 4]
            for decode in (base64.b64decode, base64.urlsafe_b64decode):
                try:
                    if not no_trace_of(key, decode(chunk)):
                        found.append("base64")
                except ValueError:
                    continue
    return found


def around(key: str, text: str) -> str:
    """The text around the first piece of the key found as written (for a failure's message)."""
    for i in range(len(key) - 11):
        at = text.find(key[i : i + 12])
        if at >= 0:
            return text[max(0, at - 150) : at + 150]
    return text[:300]


def test_the_leak_reader_finds_every_form_it_is_given():
    """The reader below is what the secret tests trust: it must see each form before scrubbing."""
    from servers import secret_forms

    for name, form in secret_forms(OPENAI_KEY).items():
        for wrapped in (form, json.dumps(form), json.dumps(json.dumps(form))):
            assert leaks(OPENAI_KEY, wrapped.encode()), (name, wrapped)


def echoing_server_reply(forms: dict[str, str], key_header: str, counts: dict[str, int]):
    """A server that echoes the caller's key, in the form the question names, in every place a
    reply has: the error body and message of a first attempt (500), then the answer's text,
    request id header, model field and stop reason (streamed or not)."""
    from servers import key_of, secret_forms

    def reply(request):
        payload = request.json
        content = payload["messages"][-1]["content"]
        name = forms[content if isinstance(content, str) else content[0]["text"]]
        form = secret_forms(key_of(request))[name]
        one_line = form.replace("\r\n", "").replace("\n", "")
        counts[name] = counts.get(name, 0) + 1
        if counts[name] == 1:
            # The form goes into the JSON text as it is: a \u-escaped key is read back by json.loads.
            quoted = json.dumps(form)[1:-1] if "\n" in form else form
            body = ('{"error": {"message": "invalid api key ' + quoted + '", "type": "api_error"}}').encode()
            return Reply(status=500, body=body, headers={key_header: one_line})
        return Reply(f"[[ANSWER]]\nyour key is {form}.", headers={key_header: one_line}, model=form, stop=form)

    return reply


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_no_promised_form_of_a_key_reaches_a_file_an_export_or_a_printed_line(tmp_path, monkeypatch, provider,
                                                                             stream):
    from servers import secret_forms

    key = OPENAI_KEY if provider == "openai" else ANTHROPIC_KEY
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    monkeypatch.setenv("ANTHROPIC_API_KEY", ANTHROPIC_KEY)
    names = list(secret_forms(key))
    forms = {f"q{i}": name for i, name in enumerate(names)}
    counts: dict[str, int] = {}
    header = "x-request-id" if provider == "openai" else "request-id"
    with LocalServer(echoing_server_reply(forms, header, counts)) as server:
        env = "OPENAI_API_KEY" if provider == "openai" else "ANTHROPIC_API_KEY"
        (tmp_path / "probe.toml").write_text(
            f'[run]\nmodels = [{{ spec = "{spec(provider, server.url)}", api_key_env = "{env}" }}]\n')
        probes_file = write_probeset(tmp_path / "p.toml", [(f"c{i}", q, None) for i, q in enumerate(forms)])
        printed = CliRunner().invoke(main, ["run", str(probes_file), "--prompt", PROMPT, "--retrieval", "none",
                                            "--config", str(tmp_path / "probe.toml"), "--runs-dir",
                                            str(tmp_path / "runs"), "--max-attempts", "2", "--max-retry-wait", "0",
                                            *(["--stream"] if stream else []), "--json"])
    assert printed.exit_code == 0, printed.output
    run = Path(json.loads(printed.stdout)["run"])
    samples = read_jsonl(run / "samples.jsonl")
    assert len(samples) == len(names) and all(s["attempts"] == 2 and s["error"] is None for s in samples)
    assert all("removed]" in s["attempts_log"][0]["body"] for s in samples)  # the error body was kept, scrubbed
    outputs = {"probe run --json": printed.stdout + printed.stderr}
    for args in (["report", str(run)], ["report", str(run), "--format", "md"], ["report", str(run), "--json"],
                 ["report", str(run), "--format", "html"], ["show", str(run)], ["show", str(run), "--json"],
                 ["export", str(run)], ["export", str(run), "--format", "json"],
                 ["export", str(run), "--format", "jsonl"], ["export", str(run), "--format", "csv"],
                 ["export", str(run), "--format", "table"], ["runs", "--runs-dir", str(tmp_path / "runs")]):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 0, (args, result.output)
        outputs[f"probe {' '.join(args[:1] + args[2:])}"] = result.stdout + result.stderr
    for path in run.rglob("*"):
        if path.is_file():
            outputs[str(path.relative_to(run))] = path.read_bytes().decode("utf-8", "replace")
    for sample in samples:  # json.loads of a stored error body must not give the key back either
        outputs[f"{sample['sample_id']} attempts_log body, json.loads"] = json.dumps(
            json.loads(sample["attempts_log"][0]["body"]))
    leaked = {where: found for where, text in outputs.items() if (found := leaks(key, text.encode()))}
    assert leaked == {}, {where: around(key, outputs[where]) for where in leaked}
    tried = len(names) * len(PLACES)
    print(f"secret forms leaked ({provider}, {'stream' if stream else 'json'}): 0 / {tried}")


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_no_promised_form_of_a_key_reaches_a_batch_runs_files(tmp_path, monkeypatch, provider):
    """The batch path writes through the same scrubber: the result lines (each sample's body), the
    ledger, the attempts of a request that failed in its first batch (Anthropic: the error type
    echoes the key), the raw text and the exports."""
    from batch_server import BatchServer
    from servers import secret_forms

    key = OPENAI_KEY if provider == "openai" else ANTHROPIC_KEY
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    monkeypatch.setenv("ANTHROPIC_API_KEY", ANTHROPIC_KEY)
    forms = secret_forms(key)
    names = list(forms)
    seen: dict[str, int] = {}

    def answer(custom_id, body):
        content = body["messages"][-1]["content"]
        question = content if isinstance(content, str) else content[0]["text"]
        form = forms[names[int(question[1:])]]
        seen[question] = seen.get(question, 0) + 1
        if provider == "anthropic" and seen[question] == 1:
            return ("error", form)  # a transient error whose type echoes the key: retried
        return f"[[ANSWER]]\nyour key is {form}."

    with BatchServer(polls=1, answer=answer) as server:
        env = "OPENAI_API_KEY" if provider == "openai" else "ANTHROPIC_API_KEY"
        (tmp_path / "probe.toml").write_text(
            f'[run]\nmodels = [{{ spec = "{spec(provider, server.url)}", api_key_env = "{env}" }}]\n')
        probes_file = write_probeset(tmp_path / "p.toml", [(f"c{i}", f"q{i}", None) for i in range(len(names))])
        printed = CliRunner().invoke(main, ["run", str(probes_file), "--prompt", PROMPT, "--retrieval", "none",
                                            "--config", str(tmp_path / "probe.toml"), "--runs-dir",
                                            str(tmp_path / "runs"), "--batch", "--poll-interval", "0.02",
                                            "--max-retry-wait", "0"])
    assert printed.exit_code == 0, printed.output
    run = run_dir_of(printed)
    samples = read_jsonl(run / "samples.jsonl")
    assert len(samples) == len(names) and all(s["via"] == "batch" and s["error"] is None for s in samples)
    if provider == "anthropic":
        assert all(s["attempts"] == 2 and "removed]" in s["attempts_log"][0]["message"] for s in samples)
    outputs = {"probe run": printed.stdout + printed.stderr}
    for args in (["export", str(run)], ["export", str(run), "--format", "json"], ["show", str(run)]):
        outputs[" ".join(args)] = CliRunner().invoke(main, args).stdout
    for path in run.rglob("*"):
        if path.is_file():
            outputs[str(path.relative_to(run))] = path.read_bytes().decode("utf-8", "replace")
    leaked = {where: found for where, text in outputs.items() if (found := leaks(key, text.encode()))}
    assert leaked == {}
    places = 3 if provider == "anthropic" else 2  # result line and raw text (and the batch error)
    print(f"secret forms leaked (batch, {provider}): 0 / {len(names) * places}")


def test_every_promised_form_is_scrubbed_however_deep_it_is_quoted():
    from servers import secret_forms

    SCRUBBER.add("OPENAI_API_KEY", OPENAI_KEY)
    tried = 0
    for name, form in secret_forms(OPENAI_KEY).items():
        for quoted in (form, json.dumps(form), json.dumps(json.dumps(form)), json.dumps({"a": [form]})):
            for text in (quoted, f"before {quoted} after", f"x{quoted}y"):
                scrubbed = SCRUBBER.text(text)
                assert not leaks(OPENAI_KEY, scrubbed.encode()), (name, text, scrubbed)
                assert not leaks(OPENAI_KEY, SCRUBBER.bytes(text.encode())), (name, text)
                tried += 1
    assert tried == len(secret_forms(OPENAI_KEY)) * 12


# -- terminals are safe (issue 25, item 6) ---------------------------------------------------------

HOSTILE_TEXT = ("[[ANSWER]]\nclipboard \x1b]52;c;cm0gLXJmIH4K\x07 title \x1b]0;owned\x07 csi \x9b31m red "
                "\x1b[2J clear \x1bP tmux \x1b\\ bell \x07 cr \r over \x7f del \x85 nel \x00 nul")
CONTROL_BYTES = {chr(c) for c in [*range(0, 9), *range(11, 32), *range(0x7F, 0xA0)]}


def controls_in(text: str) -> list[str]:
    """The control characters a terminal would act on (a CR ending a line, CSV's CRLF, is a newline)."""
    return sorted({f"U+{ord(c):04X}" for c in text.replace("\r\n", "\n") if c in CONTROL_BYTES})


def test_nothing_printed_carries_a_control_sequence_and_json_keeps_the_text(tmp_path):
    """A model's output (and the model field, the stop reason) holding OSC 52, OSC 0, C1 CSI,
    DCS, BEL, CR, DEL, NUL reaches no terminal through any command; JSON output keeps the very
    same strings (spelled as JSON escapes)."""
    reply = Reply(HOSTILE_TEXT, model="m\x1b]0;model\x07", stop="stop\x9b2J")
    with LocalServer(lambda request: reply) as server:
        result = CliRunner().invoke(main, ["run", str(write_probeset(tmp_path / "p.toml", [("c0", "q", "answer")])),
                                           "--prompt", PROMPT, "--prompt", f"b={PROMPT}", "-m",
                                           f"openai:m@{server.url}/v1", "--retrieval", "none",
                                           "--runs-dir", str(tmp_path / "runs")])
        assert result.exit_code == 0, result.output
        run = str(run_dir_of(result))
        printed = {"probe run": result.stdout + result.stderr}
        commands = [["run", str(tmp_path / "p.toml"), "--prompt", PROMPT, "-m", f"openai:m@{server.url}/v1",
                     "--retrieval", "none", "--runs-dir", str(tmp_path / "runs"), "--json"],
                    ["report", run], ["report", run, "--format", "md"], ["report", run, "--json"],
                    ["show", run], ["show", run, "--format", "md"], ["show", run, "--json"],
                    ["export", run], ["export", run, "--format", "json"], ["export", run, "--format", "jsonl"],
                    ["export", run, "--format", "csv"], ["export", run, "--format", "table"],
                    ["why", run + "#prompt=always-header", "--metric", "header_absent"],
                    ["compare", run + "#prompt=always-header", run + "#prompt=b"],
                    ["runs", "--runs-dir", str(tmp_path / "runs")]]
        for args in commands:
            done = CliRunner().invoke(main, args)
            assert done.exit_code == 0, (args, done.output)
            printed[" ".join(args[:1] + args[2:4])] = done.stdout + done.stderr
    assert {name: controls_in(text) for name, text in printed.items() if controls_in(text)} == {}
    exported = json.loads(CliRunner().invoke(main, ["export", run, "--format", "json"]).stdout)
    group = exported["cases"][0]["arms"][0]["groups"][0]
    assert group["raw_text"] == HOSTILE_TEXT  # JSON output: the same text, its controls escaped
    assert group["samples"][0]["response"]["model"] == "m\x1b]0;model\x07"
    assert "]52;c;cm0g" in CliRunner().invoke(main, ["export", run]).stdout  # shown, its ESC spelled out


def test_a_file_written_with_o_keeps_the_exact_bytes(tmp_path):
    with LocalServer(lambda request: Reply(HOSTILE_TEXT)) as server:
        outcome, samples = probe(tmp_path, spec("openai", server.url), cases=1)
    target = tmp_path / "export.json"
    assert CliRunner().invoke(main, ["export", str(outcome.path), "--format", "json", "-o", str(target)]).exit_code == 0
    assert json.loads(target.read_text())["cases"][0]["arms"][0]["groups"][0]["raw_text"] == HOSTILE_TEXT


SPEC_WITH_ESCAPE = "openai:a\x1b]0;t\x07@http://127.0.0.1:9/v1"


@pytest.mark.parametrize("where", ["flag", "probe.toml", "python"])
def test_a_model_spec_with_a_control_character_is_bad_input_wherever_it_enters(tmp_path, where):
    import promptprobe

    probes_file = str(write_probeset(tmp_path / "p.toml", [("c0", "q", None)]))
    if where == "python":
        with pytest.raises(promptprobe.InputError, match=r"holds a control character \(ESC, U\+001B\)"):
            promptprobe.run(probes_file, [PROMPT], [SPEC_WITH_ESCAPE], retrieval="none", runs_dir=tmp_path / "runs")
        assert not (tmp_path / "runs").exists()
        return
    if where == "flag":
        args = ["-m", SPEC_WITH_ESCAPE]
    else:
        (tmp_path / "c.toml").write_text(f"[run]\nmodels = [{json.dumps(SPEC_WITH_ESCAPE)}]\n")
        args = ["--config", str(tmp_path / "c.toml")]
    result = subprocess.run([PROBE, "run", probes_file, "--prompt", PROMPT, "--retrieval", "none", "--runs-dir",
                             str(tmp_path / "runs"), *args], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    assert not controls_in(result.stderr) and "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1 and "holds a control character (ESC, U+001B)" in result.stderr
    assert not (tmp_path / "runs").exists()


def test_every_printing_path_goes_through_one_function():
    """cli.say prints (jsonio.warn for readers' warnings): no other print or click.echo in the package."""
    import re

    offenders = []
    for path in (ROOT / "src" / "promptprobe").rglob("*.py"):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#")[0]
            if re.search(r"\bclick\.echo\(|(?<![\w.])print\(|sys\.std(out|err)\.write\(", code):
                offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    allowed = {"src/promptprobe/cli.py", "src/promptprobe/jsonio.py", "src/promptprobe/api.py"}
    assert [o for o in offenders if o.split(":")[0] not in allowed] == []
    assert len([o for o in offenders if o.startswith("src/promptprobe/cli.py")]) == 1  # say() itself


# -- what is recorded is what docs/runs.md says (issue 25, item 7) ---------------------------------

BAD_USAGE = {
    "openai": {"prompt_tokens": -5, "completion_tokens": {"n": 3}, "total_tokens": 1.5, "cached": "12",
               "flag": True, "prompt_tokens_details": {"cached_tokens": 7, "audio_tokens": -1, "deep": {"x": 1}},
               "completion_tokens_details": {"reasoning_tokens": 4}, "extra": {"tokens": 9}},
    "anthropic": {"input_tokens": -5, "output_tokens": {"n": 3}, "cache_read_input_tokens": 11,
                  "cache_creation_input_tokens": 2.0, "service_tier": "standard",
                  "cache_creation": {"ephemeral_5m_input_tokens": 6, "ephemeral_1h_input_tokens": -2},
                  "server_tool_use": {"web_search_requests": 1}, "input_tokens_extra": None},
}
KEPT_USAGE = {
    "openai": {"prompt_tokens_details": {"cached_tokens": 7}, "completion_tokens_details": {"reasoning_tokens": 4}},
    "anthropic": {"cache_read_input_tokens": 11, "cache_creation_input_tokens": 2, "cache_creation": {"ephemeral_5m_input_tokens": 6},
                  "server_tool_use": {"web_search_requests": 1}},
}


def with_usage(provider: str, stream: bool, usage: dict) -> bytes:
    from servers import anthropic_stream, openai_stream

    text = "[[ANSWER]]\nok"
    if not stream:
        document = json.loads((openai_body if provider == "openai" else anthropic_body_)(text, "m", None))
        document["usage"] = usage
        return json.dumps(document).encode()
    body = (openai_stream if provider == "openai" else anthropic_stream)(text, "m", None).decode()
    events = []
    for block in body.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines())
        data = lines["data"] if lines["data"] == "[DONE]" else json.loads(lines["data"])
        if isinstance(data, dict) and provider == "openai" and data.get("usage"):
            data["usage"] = usage
        if isinstance(data, dict) and provider == "anthropic":
            if data["type"] == "message_start":
                data["message"]["usage"] = {k: v for k, v in usage.items() if k != "output_tokens"}
            if data["type"] == "message_delta":
                data["usage"] = {"output_tokens": usage["output_tokens"]}
        events.append((lines.get("event"), data))
    return sse(events)


def anthropic_body_(text, model, stop):
    from servers import anthropic_body

    return anthropic_body(text, model, stop)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_usage_values_that_are_not_counts_are_dropped(tmp_path, provider, stream):
    body = with_usage(provider, stream, BAD_USAGE[provider])
    content_type = "text/event-stream" if stream else "application/json"
    with LocalServer(lambda r: Reply(body=body, content_type=content_type)) as server:
        outcome, samples = probe(tmp_path, spec(provider, server.url), cases=1,
                                 params=GenerationParams(stream=stream, timeout=10))
    assert samples[0]["error"] is None, samples[0]["error"]
    assert samples[0]["response"]["usage"] == KEPT_USAGE[provider]
    report = json.loads(CliRunner().invoke(main, ["report", str(outcome.path), "--json"]).stdout)
    assert report["arms"][0]["usage"]["input_tokens"] >= 0


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_stream_cut_off_by_the_deadline_is_a_timeout_on_every_attempt(tmp_path, provider):
    # The stream takes a minute to send; the deadline is half a second (whatever the load, a timeout).
    with LocalServer(lambda r: Reply("[[ANSWER]]\n" + "x" * 400, trickle=0.05)) as server:
        outcome, samples = probe(tmp_path, spec(provider, server.url), cases=1, max_attempts=2,
                                 params=GenerationParams(stream=True, timeout=0.5))
    sample = samples[0]
    assert sample["error"]["kind"] == "timeout" and "within 0.5 s" in sample["error"]["message"]
    assert [a["kind"] for a in sample["attempts_log"]] == ["timeout", "timeout"]


@pytest.mark.parametrize("content_type", ["text/html", "text/event-stream"])
@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_an_html_page_answering_a_streamed_request_is_a_bad_body(tmp_path, provider, content_type):
    page = b"<!DOCTYPE html>\n<html><body><h1>502 Bad Gateway</h1>\n<p>nginx</p></body></html>\n"
    with LocalServer(lambda r: Reply(body=page, content_type=content_type)) as server:
        outcome, samples = probe(tmp_path, spec(provider, server.url), cases=1,
                                 params=GenerationParams(stream=True, timeout=10))
    sample = samples[0]
    assert sample["error"]["kind"] == "bad_body", sample["error"]
    assert all(a["kind"] == "bad_body" and "502 Bad Gateway" in a["body"] for a in sample["attempts_log"])


def test_a_stream_cut_before_its_final_event_is_still_truncated(tmp_path):
    from servers import openai_stream

    cut = openai_stream("[[ANSWER]]\nok", "m", None).split(b"\n\n")[:2]
    with LocalServer(lambda r: Reply(body=b"\n\n".join(cut) + b"\n\n", content_type="text/event-stream")) as server:
        outcome, samples = probe(tmp_path, spec("openai", server.url), cases=1,
                                 params=GenerationParams(stream=True, timeout=10))
    assert samples[0]["error"]["kind"] == "truncated"
