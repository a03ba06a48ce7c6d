"""The production retrieval endpoint over HTTP (POST a JSON body, or GET with params)."""

import json
import os
import re
import zlib
from collections.abc import Iterator, Sequence
from typing import Any

import httpcore
import httpx

from .. import deadline
from ..endpoints import scrub_url, url_secrets
from ..errors import StartError
from ..redaction import SCRUBBER
from ..retry_after import parse_retry_after
from .base import SECRET_NAME, Passage, RetrievalError, Retriever, passages_from

ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
ERROR_BODY_LIMIT = 64 * 1024
MAX_BYTES = 8 * 1024 * 1024  # [retrieval] max_bytes by default: the reply body as received
MAX_DEPTH = 100  # [retrieval] max_depth by default: JSON nesting
# The encodings asked for (and read): a reply in another one is refused, not decoded blindly.
DECODERS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


def _substitute(template: Any, question: str) -> Any:
    if isinstance(template, str):
        return question if template == "{question}" else template.replace("{question}", question)
    if isinstance(template, dict):
        return {k: _substitute(v, question) for k, v in template.items()}
    if isinstance(template, list):
        return [_substitute(v, question) for v in template]
    return template


def expand_env(value: str, where: str) -> str:
    def lookup(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in os.environ:
            raise StartError(f"{where}: environment variable {name} is not set")
        SCRUBBER.add(name, os.environ[name])
        return os.environ[name]

    return ENV_REF.sub(lookup, value)


def env_references(value: Any) -> list[str]:
    """The ${NAME} environment variables a config value refers to (their values are secrets)."""
    if isinstance(value, str):
        return ENV_REF.findall(value)
    if isinstance(value, dict):
        return [name for v in value.values() for name in env_references(v)]
    if isinstance(value, list):
        return [name for v in value for name in env_references(v)]
    return []


def _shape(data: Any) -> str:
    return ", ".join(sorted(map(str, data))) if isinstance(data, dict) else type(data).__name__


def _dig(data: Any, dotted: str) -> Any:
    for part in dotted.split(".") if dotted else []:
        if isinstance(data, dict) and part in data:
            data = data[part]
        elif isinstance(data, list) and part.isdigit() and int(part) < len(data):
            data = data[int(part)]
        else:
            raise KeyError(part)
    return data


class TooLarge(Exception):
    """A reply body past one of the retriever's limits (the sentence names it)."""


def _decoded(chunks: Iterator[bytes], encoding: str, limit: int) -> Iterator[bytes]:
    """The body of a reply in `encoding` (identity, gzip or deflate), decoded as it comes, never
    more than `limit` bytes of it at once: TooLarge past the limit (a gzip bomb stops there)."""
    if encoding in ("", "identity"):
        yield from chunks
        return
    decoder = zlib.decompressobj(DECODERS[encoding])
    made = 0
    for chunk in chunks:
        data = chunk
        while data:
            piece = decoder.decompress(data, limit - made + 1)
            made += len(piece)
            if made > limit:
                raise TooLarge(
                    f"the reply expands to more than [retrieval] max_decompressed_bytes = {limit:,} bytes"
                )
            yield piece
            data = decoder.unconsumed_tail
    rest = decoder.flush()
    if made + len(rest) > limit:
        raise TooLarge(f"the reply expands to more than [retrieval] max_decompressed_bytes = {limit:,} bytes")
    yield rest


def read_body(response: httpx.Response, max_bytes: int, max_decompressed: int, cut: bool = False) -> bytes:
    """A streamed reply's body, read no further than the limits allow: memory holds at most
    max_bytes of it as received and max_decompressed once decoded. Past a limit, TooLarge; with
    `cut`, what came before the limit instead."""
    encoding = response.headers.get("content-encoding", "").strip().lower()
    if encoding not in ("", "identity", *DECODERS):
        raise TooLarge(f"the reply's content-encoding {encoding!r} is not one probe reads (gzip, deflate)")
    declared = response.headers.get("content-length", "")
    if not cut and declared.isdigit() and int(declared) > max_bytes:
        raise TooLarge(f"the reply is larger than [retrieval] max_bytes = {max_bytes:,} bytes")
    received = 0

    def raw() -> Iterator[bytes]:
        nonlocal received
        for chunk in response.iter_raw():
            received += len(chunk)
            if received > max_bytes:
                raise TooLarge(f"the reply is larger than [retrieval] max_bytes = {max_bytes:,} bytes")
            yield chunk

    parts: list[bytes] = []
    try:
        for piece in _decoded(raw(), encoding, max_decompressed if encoding else max_bytes):
            parts.append(piece)
    except (TooLarge, zlib.error):
        if not cut:
            raise
    return b"".join(parts)[: max_decompressed if cut else None]


def nesting_problem(data: Any, limit: int) -> bool:
    """True when a parsed reply is nested deeper than `limit` (looked at without recursion)."""
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict | list):
            if depth > limit:
                return True
            stack.extend((item, depth + 1) for item in (value.values() if isinstance(value, dict) else value))
    return False


class HttpRetriever(Retriever):
    def __init__(self, config: dict[str, Any]) -> None:
        self.url: str = config["url"]
        # A password or key in the URL is a credential: never written, and the URL shown without it.
        for secret in url_secrets(self.url):
            SCRUBBER.add("a credential in the retrieval URL", secret)
        self.shown_url = scrub_url(self.url)
        self.method: str = config.get("method", "POST")
        self.body: dict[str, Any] = config.get("body", {"query": "{question}"})
        self.results: str = config.get("results", "results")
        self.fields = (config.get("id", "id"), config.get("text", "text"), config.get("score", "score"))
        headers = {
            k: expand_env(str(v), f"[retrieval] header {k}") for k, v in config.get("headers", {}).items()
        }
        for name, value in headers.items():
            if SECRET_NAME.search(name):  # written into probe.toml as is, it is as secret as a ${VAR}
                for secret in {value, *value.split()[-1:]}:  # "Bearer TOKEN": the token alone too
                    SCRUBBER.add(f"[retrieval] header {name}", secret)
        # Only the encodings read_body decodes (under its limit), whatever httpx could decode.
        headers.setdefault("Accept-Encoding", "gzip, deflate")
        # `timeout` bounds the whole retrieval (connect, headers, body), not each read.
        self.timeout = float(config.get("timeout", 30.0))
        self.max_bytes = int(config.get("max_bytes", MAX_BYTES))
        self.max_decompressed = int(config.get("max_decompressed_bytes", self.max_bytes))
        self.max_depth = int(config.get("max_depth", MAX_DEPTH))
        self.client = httpx.Client(headers=headers, timeout=self.timeout)
        deadline.apply(self.client, httpcore)
        self.description = f"http {self.method} {self.shown_url}"

    def _request(self, payload: dict[str, Any]) -> httpx.Request:
        if self.method == "GET":
            params = {k: v for k, v in payload.items() if not isinstance(v, list | dict)}
            return self.client.build_request("GET", self.url, params=params)
        return self.client.build_request("POST", self.url, json=payload)

    def _fetch(self, payload: dict[str, Any]) -> tuple[httpx.Response, bytes]:
        """The reply and its body, streamed under the deadline and the size limits."""
        response = self.client.send(self._request(payload), stream=True)
        try:
            if response.status_code >= 400:  # what an error says is kept short: read no more of it
                return response, _error_body(response)
            return response, read_body(response, self.max_bytes, self.max_decompressed)
        finally:
            response.close()

    def retrieve(self, question: str, history: Sequence[dict[str, str]]) -> list[Passage]:
        payload = _substitute(self.body, question)
        if history:
            payload = dict(payload, history=list(history))
        try:
            with deadline.until(self.timeout):
                response, content = self._fetch(payload)
        except TooLarge as exc:
            raise RetrievalError(
                f"retrieval {self.shown_url}: {exc}; nothing of it was kept or sent to the model"
            ) from None
        except zlib.error as exc:
            raise RetrievalError(
                f"retrieval {self.shown_url}: the reply's compressed body cannot be read ({exc})",
                retryable=True,
            ) from None
        except httpx.TimeoutException:
            raise RetrievalError(
                f"retrieval {self.shown_url}: no complete reply within {self.timeout:g} s (its timeout)",
                retryable=True,
            ) from None
        except httpx.ConnectError as exc:
            raise RetrievalError(
                f"retrieval {self.shown_url}: cannot connect ({exc or type(exc).__name__})",
                retryable=True,
                unreachable=True,
            ) from None
        except httpx.TransportError as exc:
            # It accepted the connection, then reset or dropped it: flaky, not unreachable.
            raise RetrievalError(
                f"retrieval {self.shown_url}: connection lost ({exc or type(exc).__name__})",
                retryable=True,
            ) from None
        if response.status_code >= 400:
            retryable = response.status_code in (408, 409, 429) or response.status_code >= 500
            raise RetrievalError(
                f"retrieval {self.shown_url}: HTTP {response.status_code} "
                f"{response.reason_phrase}: {SCRUBBER.text(_text(content))[:200]!r}",
                retryable=retryable,
                status=response.status_code,
                body=SCRUBBER.bytes(content)[:ERROR_BODY_LIMIT],
                retry_after=parse_retry_after(response.headers) if retryable else None,
            )
        return self._passages(response, content)

    def _passages(self, response: httpx.Response, content: bytes) -> list[Passage]:
        try:
            data = json.loads(content)
        except RecursionError:
            raise RetrievalError(self._too_deep()) from None
        except ValueError:
            raise RetrievalError(
                f"retrieval {self.shown_url}: reply is not JSON: {SCRUBBER.text(_text(content))[:200]!r}",
                retryable=True,  # a proxy's error page: transient more often than not
                status=response.status_code,
                body=SCRUBBER.bytes(content)[:ERROR_BODY_LIMIT],
            ) from None
        if nesting_problem(data, self.max_depth):
            raise RetrievalError(self._too_deep())
        try:
            items = _dig(data, self.results)
        except KeyError:
            raise RetrievalError(
                f"retrieval {self.shown_url}: reply has no '{self.results}' (it has: {_shape(data)})"
            ) from None
        return passages_from(items, *self.fields, where=f"retrieval {self.shown_url}")

    def _too_deep(self) -> str:
        return (
            f"retrieval {self.shown_url}: the reply's JSON is nested deeper than [retrieval] max_depth = "
            f"{self.max_depth}; nothing of it was kept or sent to the model"
        )

    def close(self) -> None:
        self.client.close()


def _error_body(response: httpx.Response) -> bytes:
    """The first ERROR_BODY_LIMIT bytes of an error reply (decoded when it is compressed)."""
    try:
        return read_body(response, ERROR_BODY_LIMIT, ERROR_BODY_LIMIT, cut=True)
    except TooLarge as exc:  # an encoding it cannot read: say so instead of the body
        return f"({exc})".encode()


def _text(content: bytes) -> str:
    return content.decode("utf-8", "replace")
