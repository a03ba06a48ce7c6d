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
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from servers import LocalServer, Reply, anthropic_body, anthropic_stream, openai_body, openai_stream, sse

from promptprobe.cli import main
from promptprobe.config import load_config
from promptprobe.engine.run import RunOptions, run_probe
from promptprobe.jsonio import read_jsonl
from promptprobe.models import parse_model_spec
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
                raw = (outcome.path / sample["raw"]["path"]).read_bytes()
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
                assert (run / sample["raw"]["path"]).read_bytes().startswith(b"[[ANSWER]]")
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
