"""The production retrieval endpoint over HTTP (POST a JSON body, or GET with params)."""

import os
import re
from collections.abc import Sequence
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
        # `timeout` bounds the whole retrieval (connect, headers, body), not each read.
        self.timeout = float(config.get("timeout", 30.0))
        self.client = httpx.Client(headers=headers, timeout=self.timeout)
        deadline.apply(self.client, httpcore)
        self.description = f"http {self.method} {self.shown_url}"

    def retrieve(self, question: str, history: Sequence[dict[str, str]]) -> list[Passage]:
        payload = _substitute(self.body, question)
        if history:
            payload = dict(payload, history=list(history))
        try:
            with deadline.until(self.timeout):
                if self.method == "GET":
                    params = {k: v for k, v in payload.items() if not isinstance(v, list | dict)}
                    response = self.client.get(self.url, params=params)
                else:
                    response = self.client.post(self.url, json=payload)
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
                f"{response.reason_phrase}: {SCRUBBER.text(response.text)[:200]!r}",
                retryable=retryable,
                status=response.status_code,
                body=SCRUBBER.bytes(response.content)[:ERROR_BODY_LIMIT],
                retry_after=parse_retry_after(response.headers) if retryable else None,
            )
        try:
            data = response.json()
        except ValueError:
            raise RetrievalError(
                f"retrieval {self.shown_url}: reply is not JSON: {SCRUBBER.text(response.text)[:200]!r}",
                retryable=True,  # a proxy's error page: transient more often than not
                status=response.status_code,
                body=SCRUBBER.bytes(response.content)[:ERROR_BODY_LIMIT],
            ) from None
        try:
            items = _dig(data, self.results)
        except KeyError:
            raise RetrievalError(
                f"retrieval {self.shown_url}: reply has no '{self.results}' (it has: {_shape(data)})"
            ) from None
        return passages_from(items, *self.fields, where=f"retrieval {self.shown_url}")

    def close(self) -> None:
        self.client.close()
