"""The retrieval adapters against a real local HTTP server, and the config that describes them."""

import json
import socket

import pytest
from servers import LocalServer, Reply

from promptprobe.config import parse_config
from promptprobe.errors import InputError
from promptprobe.retrievers import RetrievalError, redact
from promptprobe.retrievers.http import HttpRetriever

HITS = b'{"data": {"hits": [{"doc": "a", "body": "Alpha", "rel": 2.5}, {"doc": 7, "body": "Beta"}]}}'


def http(url: str, **extra) -> HttpRetriever:
    return HttpRetriever({"kind": "http", "url": url, "body": {"q": "{question}", "k": 2},
                          "results": "data.hits", "id": "doc", "text": "body", "score": "rel", **extra})


def test_post_reads_the_configured_path_and_fields():
    with LocalServer(lambda r: Reply(body=HITS)) as server:
        passages = http(f"{server.url}/search").retrieve("Wie geht's? 你好", [])
        assert server.requests[0].method == "POST"
        assert server.requests[0].json == {"q": "Wie geht's? 你好", "k": 2}
    assert [(p.id, p.text, p.score) for p in passages] == [("a", "Alpha", 2.5), ("7", "Beta", None)]


def test_get_sends_query_parameters():
    with LocalServer(lambda r: Reply(body=HITS)) as server:
        http(f"{server.url}/search", method="GET").retrieve("a b&c", [])
        assert server.requests[0].method == "GET"
        assert server.requests[0].path == "/search?q=a+b%26c&k=2"


def test_non_2xx_names_url_and_status():
    with LocalServer(lambda r: Reply(status=503, body=b"overloaded")) as server:
        with pytest.raises(RetrievalError) as info:
            http(f"{server.url}/search").retrieve("q", [])
    assert str(info.value) == f"retrieval {server.url}/search: HTTP 503 Service Unavailable: 'overloaded'"
    assert info.value.retryable
    with LocalServer(lambda r: Reply(status=404, body=b"no")) as server:
        with pytest.raises(RetrievalError) as info:
            http(f"{server.url}/search").retrieve("q", [])
    assert not info.value.retryable


def test_timeout_names_url():
    with LocalServer(lambda r: Reply(body=HITS, delay=1.0)) as server:
        with pytest.raises(RetrievalError, match=rf"retrieval {server.url}/search: no complete reply within 0.2 s") as info:
            http(f"{server.url}/search", timeout=0.2).retrieve("q", [])
    assert info.value.retryable


def test_connection_error_is_unreachable():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(RetrievalError, match="cannot connect") as info:
        http(f"http://127.0.0.1:{port}/search").retrieve("q", [])
    assert info.value.unreachable and info.value.retryable


@pytest.mark.parametrize("body,message", [
    (b'{"results": []}', "reply has no 'data.hits' (it has: results)"),
    (b'not json', "reply is not JSON"),
    (b'{"data": {"hits": [{"doc": "a"}]}}', "passage 1 lacks the 'doc' or 'body' field"),
    (b'{"data": {"hits": {"doc": "a"}}}', "expected a list of passages"),
])
def test_malformed_replies(body, message):
    with LocalServer(lambda r: Reply(body=body)) as server:
        with pytest.raises(RetrievalError) as info:
            http(f"{server.url}/search").retrieve("q", [])
    assert str(info.value).startswith(f"retrieval {server.url}/search") and message in str(info.value)


def test_history_is_sent_when_present():
    with LocalServer(lambda r: Reply(body=HITS)) as server:
        http(f"{server.url}/s").retrieve("and then?", [{"role": "user", "content": "hi"}])
        assert server.requests[0].json["history"] == [{"role": "user", "content": "hi"}]


def test_redact_removes_secret_looking_keys():
    config = {"url": "u", "headers": {"Authorization": "Bearer x", "X-Api-Key": "k", "Accept": "json"},
              "body": {"token": "t", "q": "{question}"}}
    assert redact(config) == {"url": "u", "headers": {"Authorization": "[removed]", "X-Api-Key": "[removed]",
                                                      "Accept": "json"},
                              "body": {"token": "[removed]", "q": "{question}"}}


@pytest.mark.parametrize("config,message", [
    ({"retrieval": {"kind": "elastic"}}, "'kind' must be one of http, python, none, local"),
    ({"retrieval": {"kind": "http"}}, "'url' must be an http(s) URL"),
    ({"retrieval": {"kind": "http", "url": "http://x", "method": "PUT"}}, "'method' must be"),
    ({"retrieval": {"kind": "python", "function": "nocolon"}}, "'function' must be \"module:function\""),
    ({"retrieval": {"kind": "none", "url": "http://x"}}, "unknown key 'url'"),
    ({"run": {"concurrency": 0}}, "'concurrency' must be between 1 and 1000"),
    ({"run": {"max_tokens": "many"}}, "'max_tokens' must be int"),
    ({"run": {"models": ["claude"]}}, "expected PROVIDER:MODEL"),
    ({"run": {"models": [{"spec": "openai:m", "key": "x"}]}}, "unknown key 'key'"),
    ({"header": {"markers": ["A"], "no_answer": "B"}}, "not one of the markers"),
    ({"assemble": {"function": "x:y", "extra": 1}}, "unknown key 'extra'"),
    ({"retreival": {}}, "unknown key 'retreival'"),
])
def test_config_errors(config, message, tmp_path):
    with pytest.raises(InputError) as info:
        parse_config(config, tmp_path / "probe.toml")
    assert str(info.value).startswith(str(tmp_path / "probe.toml")) and message in str(info.value)


def test_python_retriever_import_errors(tmp_path, monkeypatch):
    from promptprobe.retrievers.python import PythonRetriever

    monkeypatch.chdir(tmp_path)
    (tmp_path / "prod.py").write_text("def boom(q, h):\n    raise RuntimeError('index offline')\n")
    with pytest.raises(InputError, match="cannot import 'nosuchmodule'"):
        PythonRetriever({"function": "nosuchmodule:f"})
    with pytest.raises(InputError, match="'prod' has no 'missing'"):
        PythonRetriever({"function": "prod:missing"})
    with pytest.raises(RetrievalError, match="retrieval prod:boom: RuntimeError: index offline"):
        PythonRetriever({"function": "prod:boom"}).retrieve("q", [])


def test_seed_and_temperature_reach_openai_only_when_set(tmp_path):
    from promptprobe.models import parse_model_spec
    from promptprobe.providers import make_provider
    from promptprobe.providers.base import GenerationParams

    with LocalServer() as server:
        spec = parse_model_spec(f"openai:m@{server.url}/v1")
        make_provider(spec, GenerationParams(seed=42, temperature=0.0)).complete([{"role": "user", "content": "x"}])
        make_provider(spec, GenerationParams()).complete([{"role": "user", "content": "x"}])
        first, second = (json.loads(r.body) for r in server.requests)
    assert first["seed"] == 42 and first["temperature"] == 0.0
    assert "seed" not in second and "temperature" not in second
    assert server.requests[1].headers["authorization"] == "Bearer no-key-needed"


def test_redact_removes_credentials_under_any_key_or_auth_name():
    """Azure API Management's Ocp-Apim-Subscription-Key, an X-Auth header, a Proxy-Authorization:
    credentials under names other than Authorization and API key are removed too."""
    headers = {"Ocp-Apim-Subscription-Key": "literal-subscription-0123", "X-Auth": "literal-auth-4567",
               "Proxy-Authorization": "Basic abc", "X-Session-Id": "s-1", "Accept": "json"}
    assert redact({"headers": headers})["headers"] == {
        "Ocp-Apim-Subscription-Key": "[removed]", "X-Auth": "[removed]", "Proxy-Authorization": "[removed]",
        "X-Session-Id": "[removed]", "Accept": "json"}


@pytest.mark.parametrize("params", [{}, {"seed": 42, "temperature": 0.0}, {"max_tokens": 7}], ids=str)
def test_an_openai_call_sends_what_the_sdks_create_sends_byte_for_byte(params):
    """The provider posts its body through the SDK's client without create()'s type walk: the
    server must not be able to tell the two apart (body bytes, path, method and headers)."""
    import openai

    from promptprobe.models import parse_model_spec
    from promptprobe.providers import make_provider
    from promptprobe.providers.base import GenerationParams

    messages = [{"role": "system", "content": "Sé breve.\r\n"}, {"role": "user", "content": "價格？\u200b"}]
    with LocalServer() as server:
        provider = make_provider(parse_model_spec(f"openai:m@{server.url}/v1"), GenerationParams(**params))
        provider.complete(messages)
        request = provider._request(messages)  # the same request, as create() takes it
        client = openai.OpenAI(api_key="no-key-needed", base_url=f"{server.url}/v1", max_retries=0)
        client.chat.completions.create(**request)
        client.close()
        ours, sdks = server.requests
    per_call = {"x-stainless-read-timeout"}  # the provider's --timeout, against the bare client's default
    assert (ours.method, ours.path, ours.body) == (sdks.method, sdks.path, sdks.body)
    assert {k: v for k, v in ours.headers.items() if k not in per_call} == {
        k: v for k, v in sdks.headers.items() if k not in per_call
    }
