"""Retrieval has limits (issue 37, item 5): a reply larger than [retrieval] max_bytes, a
compressed one that expands past max_decompressed_bytes, JSON nested deeper than max_depth, or a
body that never ends fails the sample as `retrieval` with one sentence naming the limit; nothing
past it is kept or sent to the model, and memory stays bounded whatever the server sends."""

import gzip
import json
import socket
import tracemalloc

import pytest
from click.testing import CliRunner
from conftest import ROOT, write_probeset
from servers import LocalServer, RawServer, Reply, http_response

from promptprobe.cli import main
from promptprobe.config import parse_config
from promptprobe.errors import InputError
from promptprobe.retrievers import RetrievalError
from promptprobe.retrievers.http import MAX_BYTES, HttpRetriever

PROMPT = str(ROOT / "prompts" / "always-header.md")


def retriever(url: str, **limits) -> HttpRetriever:
    return HttpRetriever({"kind": "http", "url": f"{url}/search", "body": {"q": "{question}"}, **limits})


def failure(url: str, **limits) -> RetrievalError:
    with pytest.raises(RetrievalError) as info:
        retriever(url, **limits).retrieve("q", [])
    return info.value


def endless(conn: socket.socket, request: bytes) -> None:
    """A chunked body that never ends, sent as fast as the client reads it."""
    conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n")
    chunk = b"%x\r\n%s\r\n" % (65536, b'{"results": [' + b" " * (65536 - 13))
    while True:
        conn.sendall(chunk)


def peak_while(call) -> int:
    """The most memory Python held during `call` (tracemalloc: every bytes object counted)."""
    tracemalloc.start()
    try:
        call()
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak


def test_an_endless_body_stops_at_max_bytes_with_memory_bounded():
    with RawServer(endless) as server:
        url, errors = server.url, []
        peak = peak_while(lambda: errors.append(failure(url, max_bytes=1_000_000)))
    assert str(errors[0]) == (f"retrieval {url}/search: the reply is larger than [retrieval] max_bytes = "
                              "1,000,000 bytes; nothing of it was kept or sent to the model")
    assert not errors[0].retryable  # the same server sends the same again
    assert peak < 4_000_000  # today: the whole body, 7.2 GB before the timeout ends it
    assert MAX_BYTES == 8 * 1024 * 1024  # the default the docs give


def test_a_body_that_trickles_forever_ends_at_the_timeout_for_the_whole_retrieval():
    def trickle(conn: socket.socket, request: bytes) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n")
        server.trickle(conn, b"1\r\n \r\n" * 100_000, 0.02)  # a byte each read: every read is quick

    with RawServer(trickle) as server:
        url = server.url
        error = failure(url, timeout=0.5)
    assert str(error) == f"retrieval {url}/search: no complete reply within 0.5 s (its timeout)"


def test_a_declared_length_past_max_bytes_is_refused_before_the_body_is_read():
    def large(conn: socket.socket, request: bytes) -> None:
        body = json.dumps({"results": [{"id": "a", "text": "x" * 2_000_000}]}).encode()
        conn.sendall(http_response(body)[:400])  # the head and a little, then it waits: never the body
        server.stopping.wait(30)

    with RawServer(large) as server:
        error = failure(server.url, max_bytes=1_000_000, timeout=20)
    assert "larger than [retrieval] max_bytes = 1,000,000 bytes" in str(error)  # not the timeout


def test_a_gzip_bomb_stops_at_max_decompressed_bytes():
    bomb = gzip.compress(b'{"results": [{"id": "a", "text": "' + b"0" * 30_000_000 + b'"}]}', 9)
    assert len(bomb) < 40_000  # 30 KB that expand to 30 MB

    def reply(request):
        return Reply(body=bomb, headers={"content-encoding": "gzip"})

    with LocalServer(reply) as server:
        errors = []
        peak = peak_while(lambda: errors.append(failure(server.url, max_decompressed_bytes=2_000_000)))
    assert str(errors[0]) == (
        f"retrieval {server.url}/search: the reply expands to more than [retrieval] max_decompressed_bytes = "
        "2,000,000 bytes; nothing of it was kept or sent to the model")
    assert peak < 8_000_000
    assert server.requests[0].headers["accept-encoding"] == "gzip, deflate"  # only what it reads


def test_a_small_gzip_reply_is_read_and_an_unknown_encoding_is_refused():
    hits = json.dumps({"results": [{"id": "a", "text": "Alpha 你好"}]}).encode()
    with LocalServer(lambda r: Reply(body=gzip.compress(hits), headers={"content-encoding": "gzip"})) as server:
        assert [p.text for p in retriever(server.url).retrieve("q", [])] == ["Alpha 你好"]
    with LocalServer(lambda r: Reply(body=hits, headers={"content-encoding": "br"})) as server:
        assert "content-encoding 'br' is not one probe reads (gzip, deflate)" in str(failure(server.url))


def nested(depth: int) -> bytes:
    return b'{"results": [], "x": ' + b"[" * depth + b"]" * depth + b"}"


@pytest.mark.parametrize("depth", [200_000, 101])
def test_json_nested_past_max_depth_is_one_sentence(depth):
    with LocalServer(lambda r: Reply(body=nested(depth))) as server:
        error = failure(server.url)
    assert str(error) == (f"retrieval {server.url}/search: the reply's JSON is nested deeper than [retrieval] "
                          "max_depth = 100; nothing of it was kept or sent to the model")
    with LocalServer(lambda r: Reply(body=nested(98))) as server:
        assert retriever(server.url).retrieve("q", []) == []  # 100 deep in all: within the limit


def test_a_run_records_a_limit_as_the_samples_retrieval_failure_and_never_calls_the_model(tmp_path):
    probeset = write_probeset(tmp_path / "p.toml", [("deep", "q deep", None)])
    with LocalServer(lambda r: Reply(body=nested(200_000))) as retrieval, LocalServer() as model:
        (tmp_path / "probe.toml").write_text(
            f'[retrieval]\nkind = "http"\nurl = "{retrieval.url}/s"\nbody = {{ q = "{{question}}" }}\n'
            "max_bytes = 4000000\nmax_depth = 50\n")
        result = CliRunner().invoke(main, ["run", str(probeset), "--prompt", PROMPT, "--model",
                                           f"openai:m@{model.url}/v1", "--runs-dir", str(tmp_path / "runs"),
                                           "--config", str(tmp_path / "probe.toml")])
        assert model.requests == []
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output and "RecursionError" not in result.output
    assert result.exit_code == 1, result.output  # a sample failed: the run went on and ended
    sample = json.loads(next((tmp_path / "runs").glob("*/samples.jsonl")).read_text())
    assert sample["error"]["kind"] == "retrieval" and sample["error"]["message"] == (
        f"retrieval {retrieval.url}/s: the reply's JSON is nested deeper than [retrieval] max_depth = 50; "
        "nothing of it was kept or sent to the model")
    kept = json.loads(next((tmp_path / "runs").glob("*/retrievals.jsonl")).read_text())
    assert kept["passages"] == [] and kept["error"] == sample["error"]["message"]


def test_the_limits_are_checked_in_the_config():
    good = parse_config({"retrieval": {"kind": "http", "url": "http://x/s", "max_bytes": 1_000,
                                       "max_decompressed_bytes": 5_000, "max_depth": 20}}, None)
    assert good.retrieval["max_depth"] == 20
    for key, value in (("max_bytes", 0), ("max_depth", 501), ("max_decompressed_bytes", "1MB")):
        with pytest.raises(InputError, match=f"'{key}' must be"):
            parse_config({"retrieval": {"kind": "http", "url": "http://x/s", key: value}}, None)
