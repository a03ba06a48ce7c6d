"""Retrievers: how a question reaches the production retrieval path.

Every retriever implements `retrieve(question, history) -> list[Passage]` and raises
RetrievalError when it cannot: the runner then records the sample as an error and never
calls the model without context.
"""

import hashlib
import importlib
import os
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from .errors import InputError, StartError

SECRET_KEY = re.compile(r"authorization|api[-_]?key|token|secret|password|cookie", re.IGNORECASE)
ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass(frozen=True)
class Passage:
    id: str
    text: str
    score: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "text": self.text, "score": self.score}


class RetrievalError(Exception):
    """Retrieval failed; `retryable` for connection errors, timeouts and 5xx replies."""

    def __init__(self, message: str, retryable: bool = False, unreachable: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.unreachable = unreachable


class Retriever:
    """One retrieval path. Subclasses implement `retrieve`."""

    description = "retriever"

    def retrieve(self, question: str, history: Sequence[dict[str, str]]) -> list[Passage]:
        raise NotImplementedError

    def close(self) -> None:
        """Release connections; the default holds none."""


def snapshot_digest(passages: Sequence[Passage]) -> str:
    """sha256 over the passage texts in order, each length-prefixed so boundaries count."""
    digest = hashlib.sha256()
    for passage in passages:
        data = passage.text.encode("utf-8")
        digest.update(len(data).to_bytes(8, "big") + data)
    return digest.hexdigest()


def _passages(items: Any, id_field: str, text_field: str, score_field: str, where: str) -> list[Passage]:
    if not isinstance(items, list):
        raise RetrievalError(f"{where}: expected a list of passages, got {type(items).__name__}")
    passages = []
    for number, item in enumerate(items, 1):
        if not isinstance(item, dict) or text_field not in item or id_field not in item:
            raise RetrievalError(f"{where}: passage {number} lacks the '{id_field}' or '{text_field}' field")
        text = item[text_field]
        if not isinstance(text, str):
            raise RetrievalError(f"{where}: passage {number} '{text_field}' is not a string")
        score = item.get(score_field)
        if score is not None and (isinstance(score, bool) or not isinstance(score, int | float)):
            raise RetrievalError(f"{where}: passage {number} '{score_field}' is not a number: {score!r}")
        passages.append(Passage(str(item[id_field]), text, float(score) if score is not None else None))
    return passages


class NoRetriever(Retriever):
    """No retrieval: the prompt gets no passages (for systems without RAG)."""

    description = "none"

    def retrieve(self, question: str, history: Sequence[dict[str, str]]) -> list[Passage]:
        return []


def _substitute(template: Any, question: str) -> Any:
    if isinstance(template, str):
        return question if template == "{question}" else template.replace("{question}", question)
    if isinstance(template, dict):
        return {k: _substitute(v, question) for k, v in template.items()}
    if isinstance(template, list):
        return [_substitute(v, question) for v in template]
    return template


def _expand_env(value: str, where: str) -> str:
    def lookup(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in os.environ:
            raise StartError(f"{where}: environment variable {name} is not set")
        return os.environ[name]

    return ENV_REF.sub(lookup, value)


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
    """The production retrieval endpoint over HTTP (POST a JSON body, or GET with params)."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.url: str = config["url"]
        self.method: str = config.get("method", "POST")
        self.body: dict[str, Any] = config.get("body", {"query": "{question}"})
        self.results: str = config.get("results", "results")
        self.fields = (config.get("id", "id"), config.get("text", "text"), config.get("score", "score"))
        headers = {
            k: _expand_env(str(v), f"[retrieval] header {k}") for k, v in config.get("headers", {}).items()
        }
        self.client = httpx.Client(headers=headers, timeout=config.get("timeout", 30.0))
        self.description = f"http {self.method} {self.url}"

    def retrieve(self, question: str, history: Sequence[dict[str, str]]) -> list[Passage]:
        payload = _substitute(self.body, question)
        if history:
            payload = dict(payload, history=list(history))
        try:
            if self.method == "GET":
                params = {k: v for k, v in payload.items() if not isinstance(v, list | dict)}
                response = self.client.get(self.url, params=params)
            else:
                response = self.client.post(self.url, json=payload)
        except httpx.TimeoutException:
            raise RetrievalError(f"retrieval {self.url}: timed out", retryable=True) from None
        except httpx.TransportError as exc:
            raise RetrievalError(
                f"retrieval {self.url}: cannot connect ({exc or type(exc).__name__})",
                retryable=True,
                unreachable=True,
            ) from None
        if response.status_code >= 400:
            retryable = response.status_code in (408, 409, 429) or response.status_code >= 500
            raise RetrievalError(
                f"retrieval {self.url}: HTTP {response.status_code} "
                f"{response.reason_phrase}: {response.text[:200]!r}",
                retryable=retryable,
            )
        try:
            data = response.json()
        except ValueError:
            raise RetrievalError(
                f"retrieval {self.url}: reply is not JSON: {response.text[:200]!r}"
            ) from None
        try:
            items = _dig(data, self.results)
        except KeyError:
            raise RetrievalError(
                f"retrieval {self.url}: reply has no '{self.results}' (it has: {_shape(data)})"
            ) from None
        return _passages(items, *self.fields, where=f"retrieval {self.url}")

    def close(self) -> None:
        self.client.close()


def import_function(reference: str, what: str) -> Callable[..., Any]:
    """Import `module:function` with the current directory first on the path (production code)."""
    module_name, _, attribute = reference.partition(":")
    cwd = os.getcwd()
    if sys.path[:1] != [cwd]:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise InputError(f"{what} {reference!r}: cannot import {module_name!r} ({exc})") from None
    function = module
    for part in attribute.split("."):
        function = getattr(function, part, None)
        if function is None:
            raise InputError(f"{what} {reference!r}: {module_name!r} has no {attribute!r}")
    if not callable(function):
        raise InputError(f"{what} {reference!r}: not callable")
    return function


class PythonRetriever(Retriever):
    """The production retrieval function itself: f(question, history) -> list of dicts."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.reference = config["function"]
        self.function = import_function(self.reference, "[retrieval] function")
        self.fields = (config.get("id", "id"), config.get("text", "text"), config.get("score", "score"))
        self.description = f"python {self.reference}"

    def retrieve(self, question: str, history: Sequence[dict[str, str]]) -> list[Passage]:
        try:
            items = self.function(question, [dict(turn) for turn in history])
        except Exception as exc:  # production code may raise anything; it is this sample's error
            raise RetrievalError(f"retrieval {self.reference}: {type(exc).__name__}: {exc}") from exc
        return _passages(
            list(items) if isinstance(items, tuple) else items,
            *self.fields,
            where=f"retrieval {self.reference}",
        )


def make_retriever(config: dict[str, Any], base_dir: Path | None = None) -> Retriever:
    """Build the retriever a target config describes."""
    kind = config.get("kind", "none")
    if kind == "http":
        return HttpRetriever(config)
    if kind == "python":
        return PythonRetriever(config)
    if kind == "local":
        from .localindex import LocalRetriever

        return LocalRetriever(config, base_dir)
    return NoRetriever()


def redact(value: Any) -> Any:
    """A copy of a config with anything secret-looking removed, for the manifest."""
    if isinstance(value, dict):
        return {k: "[removed]" if SECRET_KEY.search(str(k)) else redact(v) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v) for v in value]
    return value
