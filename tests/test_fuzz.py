"""Fuzzing (hypothesis, derandomized so CI sees the same cases): random replies through the real
SDKs over a socket, random probe sets, configs, prompts and flags into `probe check` and
`probe run --dry-run`, and random fault scenarios into `probe run`. Invariants: an exit code in
the documented set, never a traceback, every planned sample recorded once, no success made of a
broken reply, and no secret in any file."""

import json
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import ROOT, write_probeset
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from servers import LocalServer, Reply, anthropic_body, anthropic_stream, openai_body, openai_stream, sse

from promptprobe.cli import main
from promptprobe.config import load_config
from promptprobe.engine.run import RunOptions, run_probe
from promptprobe.jsonio import read_jsonl
from promptprobe.models import parse_model_spec
from promptprobe.pack import read_raw
from promptprobe.probeset import load_probeset
from promptprobe.prompts import load_prompt
from promptprobe.providers import make_provider
from promptprobe.providers.base import Completion, GenerationParams, ProviderError

PROMPT = str(ROOT / "prompts" / "always-header.md")
KEY = "sk-ant-fuzz-key-0000000000000000000000000"
FUZZ = settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-5, 5)
    | st.floats(allow_nan=False, width=16)
    | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3)
    ),
    max_leaves=8,
)


def mutated(document: object, draw) -> object:
    """A valid reply with parts deleted or replaced by random JSON: the shapes servers get wrong."""
    if isinstance(document, dict) and document:
        key = draw(st.sampled_from(sorted(document)))
        action = draw(st.sampled_from(["delete", "replace", "recurse", "keep"]))
        if action == "delete":
            return {k: v for k, v in document.items() if k != key}
        if action == "replace":
            return {**document, key: draw(json_values)}
        if action == "recurse":
            return {**document, key: mutated(document[key], draw)}
        return document
    if isinstance(document, list) and document:
        index = draw(st.integers(0, len(document) - 1))
        return [mutated(v, draw) if i == index else v for i, v in enumerate(document)]
    return draw(st.one_of(st.just(document), json_values))


@st.composite
def replies(draw, provider: str) -> Reply:
    kind = draw(st.sampled_from(["json", "stream", "garbage"]))
    if kind == "garbage":
        body = draw(
            st.binary(max_size=64) | st.sampled_from([b"<html>proxy error</html>", b"", b"{", b"null"])
        )
        return Reply(body=body, content_type=draw(st.sampled_from(["application/json", "text/html"])))
    if kind == "json":
        valid = json.loads(
            (anthropic_body if provider == "anthropic" else openai_body)("[[ANSWER]]\nok", "m", None)
        )
        return Reply(body=json.dumps(mutated(valid, draw)).encode(), content_type="application/json")
    valid = (anthropic_stream if provider == "anthropic" else openai_stream)("[[ANSWER]]\nok", "m", None)
    events = []
    for block in valid.decode().strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines())
        data = lines["data"]
        payload = data if data == "[DONE]" else mutated(json.loads(data), draw)
        events.append((lines.get("event"), payload))
    cut = draw(st.integers(0, len(events)))
    events = events[:cut] + draw(
        st.lists(st.tuples(st.sampled_from([None, "error", "ping"]), json_values), max_size=2)
    )
    return Reply(body=sse(events), content_type="text/event-stream")


@pytest.fixture(scope="module")
def scripted_server():
    """One server for every example: it answers with whatever the example put in `current`."""
    current: dict[str, Reply] = {"reply": Reply("[[ANSWER]]\nok")}
    with LocalServer(lambda request: current["reply"]) as server:
        yield server, current


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_any_reply_is_read_or_is_a_provider_error(scripted_server, provider, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    server, current = scripted_server
    spec = f"anthropic:m@{server.url}" if provider == "anthropic" else f"openai:m@{server.url}/v1"
    providers = {
        stream: make_provider(parse_model_spec(spec), GenerationParams(stream=stream, timeout=5))
        for stream in (False, True)
    }

    @FUZZ
    @given(replies(provider))
    def check(reply):
        current["reply"] = reply
        stream = reply.content_type == "text/event-stream"
        try:
            result = providers[stream].complete([{"role": "user", "content": "q"}])
        except ProviderError as error:
            assert error.kind in ("bad_body", "stream_error", "truncated", "http_status", "api", "connection")
            return
        assert isinstance(result, Completion)
        assert result.text is None or isinstance(result.text, str)

    check()
    for provider_object in providers.values():
        provider_object.close()


@st.composite
def plain_replies(draw) -> Reply:
    reply = draw(replies("openai"))
    if reply.content_type == "text/event-stream":
        return Reply(body=reply.body, content_type=draw(st.sampled_from(["application/json", "text/plain"])))
    return reply


def test_a_reply_is_read_as_the_sdks_own_parse_reads_it(scripted_server):
    """The OpenAI provider posts its body and reads the reply's JSON itself (no typed create, no
    whole parse): what it reads of any reply, or the error it raises, is what the SDK's parse gave."""
    import httpx2
    import openai

    from promptprobe.providers.openai_provider import read_completion, reply_of

    server, current = scripted_server
    client = openai.OpenAI(api_key="k", base_url=f"{server.url}/v1", max_retries=0)

    def outcome(read) -> str:
        try:
            return json.dumps(read_completion(read()))  # in its order: the record keeps it
        except Exception as exc:
            return f"{type(exc).__name__}: {exc}"

    usages = [
        {"total_tokens": 3, "prompt_tokens": "2", "completion_tokens": 1.0, "x": 1},
        {"prompt_tokens": 2, "completion_tokens": 1, "total_tokens": 3, "prompt_tokens_details": {"cached_tokens": "1"}},
        {"prompt_tokens": -5, "completion_tokens_details": 4, "server_tool_use": {"a": 1}},
        [1],
        "12",
    ]

    @FUZZ
    @given(plain_replies())
    @example(Reply(body=b"null", content_type="text/plain"))
    @example(Reply(body=b'{"choices": []}', content_type="text/plain"))
    @example(Reply(body=b"[{}]", content_type="application/json"))
    @example(Reply(body=b'{"choices": [[{"message": {"content": "a"}}]]}', content_type="application/json"))
    @example(Reply(body=b'{"choices": [{"message": {"content": "\\ud800"}}]}', content_type="application/json"))
    @example(Reply(body=b'{"choices": {"0": {}}}', content_type="application/json"))
    @example(Reply(body=b"\xff\xfe", content_type="text/plain"))
    def check(reply):
        current["reply"] = reply
        request = {"model": "m", "messages": [{"role": "user", "content": "q"}], "max_tokens": 5}
        try:
            typed = client.chat.completions.with_raw_response.create(**request)
        except openai.APIError:
            return  # a status error either way (the server answers 200 here)
        posted = client.post("/chat/completions", body=request, cast_to=httpx2.Response)
        assert outcome(lambda: reply_of(posted)) == outcome(typed.parse)

    try:
        check()
        for usage in usages:  # the usage as the SDK builds it: its order, its coercions
            body = json.loads(openai_body("ok", "m", None))
            check.hypothesis.inner_test(Reply(body=json.dumps({**body, "usage": usage}).encode()))
    finally:
        client.close()


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_run_through_random_replies_records_every_sample(tmp_path_factory, provider, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    runs = []

    @settings(
        max_examples=12,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(st.lists(replies(provider), min_size=1, max_size=4), st.booleans())
    def check(script, stream):
        tmp = tmp_path_factory.mktemp("fuzzrun")
        lock = threading.Lock()
        calls = [0]

        def responder(request):
            with lock:
                calls[0] += 1
                return script[(calls[0] - 1) % len(script)]

        probeset = load_probeset(write_probeset(tmp / "p.toml", [(f"c{i}", f"q{i}", None) for i in range(3)]))
        spec = "anthropic:m@{}" if provider == "anthropic" else "openai:m@{}/v1"
        with LocalServer(responder) as server:
            outcome = run_probe(
                probeset,
                [load_prompt(PROMPT)],
                [parse_model_spec(spec.format(server.url))],
                load_config(None),
                RunOptions(
                    runs_dir=tmp / "runs",
                    sleep=lambda s: None,
                    max_attempts=2,
                    concurrency=2,
                    params=GenerationParams(stream=stream, timeout=5),
                ),
            )
        samples = read_jsonl(outcome.path / "samples.jsonl")
        assert sorted(s["sample_id"] for s in samples) == [f"c{i}.r1.a1" for i in range(3)]
        for sample in samples:
            if sample["error"] is None:  # a success is an answer that was read, with its bytes
                raw = read_raw(outcome.path, sample)
                assert sample["raw"]["bytes"] == len(raw)
        runs.append(outcome.path)

    check()
    assert runs


# -- the CLI on random input ----------------------------------------------------------------------

names = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=20)
toml_scalars = st.one_of(st.integers(-(10**20), 10**20), st.floats(allow_nan=True), st.booleans(), names)


def toml_value(value: object) -> str:
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return (
            "nan"
            if value != value
            else ("inf" if value == float("inf") else "-inf" if value == float("-inf") else repr(value))
        )
    return str(value)


@st.composite
def probe_sets(draw) -> str:
    lines = []
    for key in draw(st.lists(st.sampled_from(["name", "repeats", "description", "bogus"]), unique=True)):
        lines.append(f"{key} = {toml_value(draw(toml_scalars))}")
    for _ in range(draw(st.integers(0, 3))):
        lines.append("[[case]]")
        for key in draw(
            st.lists(
                st.sampled_from(["id", "question", "expect", "tags", "regex", "vars", "nope"]), unique=True
            )
        ):
            lines.append(f"{key} = {toml_value(draw(toml_scalars))}")
    if draw(st.booleans()):
        lines.append(draw(st.sampled_from(["[", "x = ", "id = 'a", "[[case]]\n[[case]]", "= 1"])))
    return "\n".join(lines) + "\n"


@st.composite
def configs(draw) -> str:
    lines = []
    for table, keys in (
        (
            "run",
            [
                "repeats",
                "max_tokens",
                "timeout",
                "max_retry_wait",
                "rpm",
                "concurrency",
                "temperature",
                "seed",
                "stream",
                "umask",
                "oops",
            ],
        ),
        ("retrieval", ["kind", "url", "timeout", "k"]),
        ("header", ["markers", "no_answer"]),
    ):
        if draw(st.booleans()):
            lines.append(f"[{table}]")
            for key in draw(st.lists(st.sampled_from(keys), unique=True, max_size=4)):
                lines.append(f"{key} = {toml_value(draw(toml_scalars))}")
    return "\n".join(lines) + "\n"


FLAGS = st.lists(
    st.sampled_from(
        [
            ["-n", "0"],
            ["-n", "3"],
            ["--timeout", "0"],
            ["--timeout", "1e12"],
            ["--max-tokens", "99999999999"],
            ["--concurrency", "-1"],
            ["--rpm", "nan"],
            ["--temperature", "inf"],
            ["--alpha", "0.9"],
            ["--detect", "0"],
            ["--max-retry-wait", "1e308"],
            ["--seed", "99999999999999999999999"],
            ["--prompt", "..=x.md"],
            ["--model", "nope:x"],
            ["--model", "openai:"],
            ["--top-k", "0"],
            ["--metric", "vibes"],
        ]
    ),
    max_size=3,
)


@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(probe_sets(), configs(), st.binary(max_size=40), FLAGS)
def test_random_input_to_check_and_dry_run_is_exit_0_or_2_never_a_traceback(
    tmp_path, probeset, config, prompt, flags
):
    folder = Path(tmp_path)
    (folder / "p.toml").write_text(probeset, encoding="utf-8")
    (folder / "c.toml").write_text(config, encoding="utf-8")
    (folder / "x.md").write_bytes(prompt)
    checked = CliRunner().invoke(main, ["check", str(folder / "p.toml")])
    assert checked.exit_code in (0, 2) and "Traceback" not in checked.output
    assert checked.exception is None or isinstance(checked.exception, SystemExit), checked.output
    args = [
        "run",
        str(folder / "p.toml"),
        "--prompt",
        str(folder / "x.md"),
        "--config",
        str(folder / "c.toml"),
        "--model",
        "openai:gpt-4.1-mini",
        "--dry-run",
        *[part for flag in flags for part in flag],
    ]
    result = CliRunner().invoke(main, args)
    assert result.exit_code in (0, 2), (args, result.output)
    assert result.exception is None or isinstance(result.exception, SystemExit), (args, result.output)
    if result.exit_code == 2:
        assert [line for line in result.stderr.splitlines() if line.lower().startswith("error")], (
            result.stderr
        )


# -- fault scenarios into probe run ---------------------------------------------------------------

SCENARIOS = st.sampled_from(
    [
        Reply("[[ANSWER]]\nok"),
        Reply(status=500, body=b'{"error": {"message": "boom"}}'),
        Reply(status=429, body=b'{"error": {"message": "slow"}}', headers={"retry-after": "0"}),
        Reply(status=401, body=f'{{"error": {{"message": "bad key {KEY}"}}}}'.encode()),
        Reply(status=200, body=b"<html>gateway</html>", content_type="text/html"),
        Reply(status=200, body=f"<html>{'x' * 190}{KEY}</html>".encode(), content_type="text/html"),
        Reply(body=b'{"choices": [{"index": 0}]}'),
        Reply("[[ANSWER]]\nok", cut=40),
        Reply("[[ANSWER]]\nok", delay=1.2),
        Reply(f"[[ANSWER]]\nthe key is {KEY}"),
    ]
)


@settings(
    max_examples=15,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(st.lists(SCENARIOS, min_size=1, max_size=5), st.booleans())
def test_random_fault_scenarios_end_in_a_documented_state(tmp_path_factory, script, stream):
    tmp = tmp_path_factory.mktemp("faults")
    calls = [0]
    lock = threading.Lock()

    def responder(request):
        with lock:
            calls[0] += 1
            return script[(calls[0] - 1) % len(script)]

    probeset = write_probeset(tmp / "p.toml", [(f"c{i}", f"q{i}", None) for i in range(4)])
    with LocalServer(responder) as server:
        result = CliRunner(env={"ANTHROPIC_API_KEY": KEY}).invoke(
            main,
            [
                "run",
                "--retrieval",
                "none",
                str(probeset),
                "--prompt",
                PROMPT,
                "--model",
                f"anthropic:m@{server.url}",
                "--runs-dir",
                str(tmp / "runs"),
                "--max-attempts",
                "2",
                "--max-retry-wait",
                "0.01",
                "--timeout",
                "0.6",
                *(["--stream"] if stream else []),
            ],
        )
    assert result.exit_code in (0, 1, 3), result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    runs = list((tmp / "runs").iterdir()) if (tmp / "runs").exists() else []
    for run in runs:
        samples = read_jsonl(run / "samples.jsonl")
        ids = [s["sample_id"] for s in samples]
        assert len(ids) == len(set(ids))  # never a sample twice
        manifest = json.loads((run / "manifest.json").read_text())
        if manifest["status"] == "complete":
            assert sorted(ids) == sorted(f"c{i}.r1.a1" for i in range(4))
        for sample in samples:
            if sample["error"] is None:
                assert read_raw(run, sample).startswith(b"[[ANSWER]]")
        written = b"".join(p.read_bytes() for p in run.rglob("*") if p.is_file())
        assert KEY.encode() not in written and KEY[:20].encode() not in written


# -- batch replies ---------------------------------------------------------------------------------

BATCH_LINES = {
    "openai": {"id": "batch_req_1", "custom_id": "k-p0", "error": None, "response": {
        "status_code": 200, "request_id": "req_1", "body": json.loads(openai_body("[[ANSWER]]\nok", "m", None))}},
    "anthropic": {"custom_id": "k-p0", "result": {
        "type": "succeeded", "message": json.loads(anthropic_body("[[ANSWER]]\nok", "m", None))}},
}
BATCH_VIEWS = {
    "openai": {"id": "batch_1", "object": "batch", "status": "completed", "input_file_id": "file-1",
               "output_file_id": "file-2", "error_file_id": None, "created_at": 1, "endpoint": "/v1/chat/completions",
               "completion_window": "24h", "request_counts": {"total": 1, "completed": 1, "failed": 0}},
    "anthropic": {"id": "msgbatch_1", "type": "message_batch", "processing_status": "ended",
                  "request_counts": {"processing": 0, "succeeded": 1, "errored": 0, "canceled": 0, "expired": 0},
                  "created_at": "2026-11-30T00:00:00Z", "expires_at": "2026-12-01T00:00:00Z"},
}


@st.composite
def result_lines(draw, provider: str) -> list[bytes]:
    """Result lines as a batch API might send them: valid, with parts deleted or replaced, or junk."""
    lines = []
    for _ in range(draw(st.integers(1, 4))):
        if draw(st.booleans()):
            lines.append(json.dumps(mutated(BATCH_LINES[provider], draw)).encode())
        else:
            lines.append(draw(st.binary(min_size=1, max_size=40).filter(lambda b: b"\n" not in b and b.strip())))
    return lines


@st.composite
def batch_views(draw, provider: str) -> object:
    """A batch as the retrieve call might answer it: valid, mutated, or any JSON at all."""
    return mutated(BATCH_VIEWS[provider], draw) if draw(st.booleans()) else draw(json_values)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_any_batch_reply_is_read_or_is_a_provider_error(provider, monkeypatch):
    """A batch's state and its result lines through the real SDKs: a BatchState or a ProviderError,
    and every line a result (a completion or a failure carrying the line's bytes), never an exception."""
    from promptprobe.providers.batching import BatchState

    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    current: dict[str, object] = {}

    def respond(request):
        if request.path.endswith(("/results", "/content")):
            return Reply(body=b"\n".join(current["lines"]) + b"\n", content_type="application/octet-stream")
        if current.get("view") is None:  # the SDK looks at the batch before its results: a good one
            view = dict(BATCH_VIEWS[provider], results_url=f"{server.url}/v1/messages/batches/batch_1/results")
            return Reply(body=json.dumps(view).encode())
        return Reply(body=json.dumps(current["view"]).encode())

    with LocalServer(respond) as server:
        spec = f"anthropic:m@{server.url}" if provider == "anthropic" else f"openai:m@{server.url}/v1"
        api = make_provider(parse_model_spec(spec), GenerationParams(timeout=5)).batch_api()
        ended = BatchState("ended", True, files={"output": "file-2"})

        @settings(max_examples=100, deadline=None, derandomize=True,
                  suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
        @given(batch_views(provider), result_lines(provider))
        def check(view, lines):
            current.update(view=view, lines=lines)
            try:
                state = api.state("batch_1")
            except ProviderError as error:
                assert error.kind in ("bad_body", "http_status", "api", "connection")
            else:
                assert isinstance(state, BatchState) and isinstance(state.status, str)
            current["view"] = None
            results = list(api.results("batch_1", ended))
            assert [r.line for r in results] == lines
            for result in results:
                assert (result.completion is None) != (result.error is None)
                if result.error is not None:
                    assert isinstance(result.error, ProviderError) and result.error.body == result.line

        check()
        api.provider.close()


# -- bad input is one sentence, from the CLI and from Python (issue 25, item 8) ---------------------

import inspect  # noqa: E402
import math  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

import promptprobe  # noqa: E402
import promptprobe.testing  # noqa: E402

HOSTILE_VALUES = [None, 123, -5, 0, 2, 10**30, math.nan, math.inf, True, "x", "", "yes", [], [123], [None], {},
                  object(), b"bytes", "a\0b", "x" * 5000, 0.5, 1.5, "\x1b]0;t\x07"]


def _number_in(low, high, low_open=False, high_open=False, optional=True, whole=False):
    def valid(value):
        if value is None:
            return optional
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            return False
        if whole and not float(value).is_integer():
            return False
        return (value > low if low_open else value >= low) and (value < high if high_open else value <= high)
    return valid


def _text(value):
    return isinstance(value, str) and value != "" and "\0" not in value and len(value) <= 4096


def _texts(value, optional=False):
    if value is None:
        return optional
    if _text(value):
        return True
    return isinstance(value, list) and (bool(value) or optional) and all(_text(v) for v in value)


COUNT = _number_in(1, math.inf, whole=True)
# What each argument of the public API takes; every other value must be an InputError naming it.
VALID = {
    "probeset": _text, "prompts": _texts, "models": lambda v: _texts(v, optional=True),
    "config": lambda v: v is None or _text(v), "retrieval": lambda v: v in (None, "none"),
    "repeats": _number_in(1, 1_000_000, whole=True), "until_decided": lambda v: isinstance(v, bool),
    "metric": lambda v: _texts(v), "detect": _number_in(0, 100, low_open=True, optional=False),
    "alpha": _number_in(0, 0.5, low_open=True, optional=False), "runs_dir": lambda v: v is None or _text(v),
    "concurrency": _number_in(1, 1000, whole=True), "max_tokens": _number_in(1, 1_000_000, whole=True),
    "temperature": _number_in(0, 100), "seed": _number_in(-(2**63), 2**63 - 1, whole=True),
    "batch": lambda v: v is None or isinstance(v, bool), "cache": lambda v: v is None or isinstance(v, bool),
    "max_cost": _number_in(0, math.inf), "poll_interval": _number_in(0, 3600),
    "run_ref": _text, "by_tag": lambda v: isinstance(v, bool), "classification": COUNT, "top_k": COUNT,
    "a": _text, "b": _text, "baseline": _text, "candidate": _text, "all_metrics": lambda v: isinstance(v, bool),
    "p1": _number_in(0, 1), "p2": _number_in(0, 1), "p": _number_in(0, 1), "icc": _number_in(0, 1),
    "n": COUNT, "cases": COUNT, "cases_b": COUNT, "gate_any_of": COUNT, "power": _number_in(0.5, 1, high_open=True, optional=False),
    "sequential": lambda v: isinstance(v, bool),
}


@pytest.fixture(scope="module")
def a_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("api")
    write_probeset(folder / "p.toml", [("c0", "q0", None), ("c1", "q1", None)])
    with LocalServer() as server:
        result = promptprobe.run(folder / "p.toml", [PROMPT, f"b={PROMPT}"], [f"openai:m@{server.url}/v1"],
                                 retrieval="none", runs_dir=folder / "runs")
    return folder, result.path


def test_every_argument_of_the_python_api_refuses_what_it_does_not_take_with_one_input_error(a_run):
    """Every public function (promptprobe.__all__ and promptprobe.testing), every argument, every
    hostile value its kind does not take: an InputError naming the argument, never a TypeError,
    AttributeError, ValueError or OSError from inside, and nothing written."""
    folder, run = a_run
    down = "openai:m@http://127.0.0.1:9/v1"  # refused: a value wrongly taken ends in StartError, not a run
    baselines = {
        promptprobe.run: {"probeset": str(folder / "p.toml"), "prompts": [PROMPT], "models": [down],
                          "retrieval": "none", "runs_dir": str(folder / "fresh")},
        promptprobe.load: {"run_ref": str(run)},
        promptprobe.report: {"run_ref": str(run)},
        promptprobe.compare: {"a": f"{run}#prompt=always-header", "b": f"{run}#prompt=b"},
        promptprobe.plan: {"p1": 0.5, "p2": 0.7},
        promptprobe.testing.assert_not_worse: {"baseline": f"{run}#prompt=always-header",
                                               "candidate": f"{run}#prompt=b"},
    }
    tried = clean = 0
    unclean = []
    for function, baseline in baselines.items():
        for name in inspect.signature(function).parameters:
            valid = VALID[name]
            for value in HOSTILE_VALUES:
                if valid(value):
                    continue
                if function is promptprobe.run and name == "metric" and isinstance(value, str):
                    continue  # a name: an unknown one is said when the run knows its metrics
                tried += 1
                try:
                    function(**{**baseline, name: value})
                except promptprobe.InputError as exc:
                    if name in str(exc) and "\n" not in str(exc):
                        clean += 1
                        continue
                    unclean.append((function.__name__, name, value, f"InputError not naming it: {exc}"))
                except Exception as exc:  # what must never come out of the API
                    unclean.append((function.__name__, name, repr(value)[:40], f"{type(exc).__name__}: {exc}"[:200]))
                else:
                    unclean.append((function.__name__, name, repr(value)[:40], "accepted"))
    assert not (folder / "fresh").exists()
    assert unclean == [], "\n".join(map(str, unclean))
    print(f"Python API bad inputs clean: {clean} / {tried}")


def test_report_rate_names_an_unknown_metric(a_run):
    _, run = a_run
    report = promptprobe.report(run)
    with pytest.raises(promptprobe.InputError, match="metric='nope': this report has header_present"):
        report.rate("nope", prompt="b")
    with pytest.raises(promptprobe.InputError, match="prompt=5"):
        report.rate("header_present", prompt=5)


PROBE = str(Path(sys.executable).parent / "probe")
CLI_HOSTILE = ["x" * 300, "x" * 5000, "/dev/null", "adir", "", "-", "a/" * 2000, "\x1b]0;t\x07",
               "missing/deeper/file.toml", "latest~99999999999999999999", "latest~-1"]


def test_every_path_and_name_argument_of_the_cli_is_one_sentence_never_a_traceback(a_run, tmp_path, monkeypatch):
    """Each command, each argument that names a file, a run, a spec or a metric, each hostile value:
    an exit code of docs/cli.md, one `error:` line when it is bad input, never a traceback."""
    _, run = a_run
    monkeypatch.chdir(tmp_path)
    (tmp_path / "adir").mkdir()
    write_probeset(tmp_path / "p.toml", [("c0", "q0", None)])
    r = str(run)
    templates = [
        ["check", "{}"], ["classify", "{}"], ["run", "{}", "--prompt", PROMPT, "--retrieval", "none", "--dry-run"],
        ["run", "p.toml", "--prompt", "{}", "--retrieval", "none", "--dry-run"],
        ["run", "p.toml", "--prompt", "n={}", "--retrieval", "none", "--dry-run"],
        ["run", "p.toml", "--prompt", PROMPT, "--config", "{}", "--dry-run"],
        ["run", "p.toml", "--prompt", PROMPT, "--retrieval", "{}", "--dry-run"],
        ["run", "p.toml", "--prompt", PROMPT, "--retrieval", "none", "-m", "{}", "--dry-run"],
        ["run", "p.toml", "--prompt", PROMPT, "--retrieval", "none", "-m", "openai:m@http://{}/v1", "--dry-run"],
        ["run", "p.toml", "--prompt", PROMPT, "--retrieval", "none", "--runs-dir", "{}", "-m",
         "openai:m@http://127.0.0.1:9/v1"],
        ["run", "--resume", "{}"], ["report", "{}"], ["report", r, "-o", "{}"], ["report", "latest", "--runs-dir", "{}"],
        ["compare", "{}", r], ["compare", r, "{}"], ["compare", r + "#{}", r], ["compare", r, r, "--metric", "{}"],
        ["why", "{}"], ["why", r, "--metric", "{}"], ["show", "{}"], ["show", r, "--sample", "{}"],
        ["show", r, "--case", "{}"], ["export", "{}"], ["export", r, "-o", "{}"], ["runs", "--runs-dir", "{}"],
        ["plan", "--p1", "0.5", "--p2", "0.6", "-o", "{}"],
    ]
    tried = clean = 0
    unclean = []
    for template in templates:
        for value in CLI_HOSTILE:
            args = [part.replace("{}", value) for part in template]
            result = CliRunner().invoke(main, args)
            tried += 1
            traceback = result.exception is not None and not isinstance(result.exception, SystemExit)
            errors = [line for line in result.stderr.splitlines() if line.startswith(("error:", "Error:"))]
            if traceback or result.exit_code not in (0, 1, 2, 3) or (result.exit_code == 2 and len(errors) != 1):
                unclean.append(([a[:30] for a in args], result.exit_code, repr(result.exception)[:100]))
            else:
                clean += 1
    # The two of the issue, through a real process.
    for args in (["report", "r" * 5000], ["run", "p.toml", "--prompt", PROMPT, "--retrieval", "none", "-m",
                                          "openai:m@http://[::1/v1"]):
        done = subprocess.run([PROBE, *args], capture_output=True, text=True, timeout=60, cwd=tmp_path)
        tried += 1
        if done.returncode == 2 and done.stderr.count("\n") == 1 and "Traceback" not in done.stderr:
            clean += 1
        else:
            unclean.append((args[:2], done.returncode, done.stderr[-300:]))
    assert unclean == [], "\n".join(map(str, unclean))
    print(f"CLI bad inputs clean: {clean} / {tried}")
