"""OpenAI Chat Completions, and any OpenAI-compatible server (Ollama, vLLM, llama.cpp)."""

import re
import threading
import time
from collections.abc import Sequence
from typing import Any

import httpcore2
import httpx2
import openai

from .. import deadline
from ..models import ModelSpec
from .base import (
    CallAborted,
    Completion,
    GenerationParams,
    Provider,
    ProviderError,
    bad_body,
    truncated,
    usage_dict,
)

# The SDK refuses an empty key; local servers ignore it. Never the user's OPENAI_API_KEY,
# which must not be sent to a server it was not meant for.
NO_KEY = "no-key-needed"
# Reasoning models refuse `max_tokens` (HTTP 400) and take `max_completion_tokens`.
COMPLETION_TOKENS_MODELS = re.compile(r"^(o\d|gpt-5)")


def uses_max_completion_tokens(model: str) -> bool:
    return bool(COMPLETION_TOKENS_MODELS.match(model))


class OpenAIProvider(Provider):
    def __init__(self, spec: ModelSpec, params: GenerationParams, key: str | None) -> None:
        super().__init__(spec, params)
        options: dict[str, Any] = {
            "api_key": key or NO_KEY,
            "max_retries": 0,
            "timeout": httpx2.Timeout(params.timeout, connect=min(10.0, params.timeout)),
            "http_client": openai.DefaultHttpxClient(event_hooks={"response": [self.monitor.hook]}),
        }
        if spec.base_url:
            options["base_url"] = spec.base_url
        self.client = self.make_client(options)
        deadline.apply(options["http_client"], httpcore2)  # --timeout bounds headers and connect too
        self.client.chat.completions.with_raw_response  # noqa: B018  # its lazy imports now, not at the first call

    def make_client(self, options: dict[str, Any]) -> Any:
        """The SDK client (a subclass picks another of the SDK's client classes)."""
        return openai.OpenAI(**options)

    def _request(self, messages: Sequence[dict[str, str]]) -> dict[str, Any]:
        tokens = "max_completion_tokens" if uses_max_completion_tokens(self.spec.model) else "max_tokens"
        request: dict[str, Any] = {
            "model": self.spec.model,
            "messages": [{"role": m["role"], "content": m["content"]} for m in messages],
            tokens: self.params.max_tokens,
        }
        if self.params.temperature is not None:
            request["temperature"] = self.params.temperature
        if self.params.seed is not None:
            request["seed"] = self.params.seed
        return request

    def complete(
        self, messages: Sequence[dict[str, str]], cancel: threading.Event | None = None
    ) -> Completion:
        self.monitor.start(time.monotonic() + self.params.timeout, cancel)
        request = self._request(messages)
        with deadline.until(self.params.timeout), self.errors_of(openai, httpx2.TransportError):
            if self.params.stream:
                return self._stream(request)
            raw = self.client.chat.completions.with_raw_response.create(**request)
            try:
                reply = read_completion(raw.parse())
            except Exception as exc:  # HTML, cut-off JSON, or JSON of another shape: not a reply
                raise bad_body(self.spec, self.monitor, exc) from None
            return Completion(
                text=reply["text"],
                body=self.monitor.take() or raw.http_response.content,
                stop_reason=reply["stop"],
                usage=reply["usage"],
                request_id=raw.headers.get("x-request-id"),
                model=reply["model"],
                refusal=reply["refusal"],
                headers=self.monitor.headers(),
            )

    def _stream(self, request: dict[str, Any]) -> Completion:
        stream = self.client.chat.completions.create(
            stream=True, stream_options={"include_usage": True}, **request
        )
        request_id = stream.response.headers.get("x-request-id")
        reader = StreamReader()
        try:
            for chunk in stream:
                reader.add(chunk)
        except (openai.APIError, httpx2.TransportError, CallAborted):
            raise  # errors_of classifies them
        except Exception as exc:  # an event that is not JSON, or JSON of another shape
            raise bad_body(self.spec, self.monitor, exc) from None
        if reader.stop is None:
            raise truncated(self.spec, self.monitor, "no finish_reason")
        return Completion(
            "".join(reader.texts) if reader.texts else None,
            self.monitor.take(),
            reader.stop,
            reader.usage,
            request_id,
            reader.model,
            refusal="".join(reader.refusals) or None,
            headers=self.monitor.headers(),
        )

    def close(self) -> None:
        self.client.close()


def _field(value: Any, name: str) -> Any:
    """An attribute of an SDK object, or a key of a dict; None when absent."""
    if isinstance(value, dict):
        return value.get(name)
    return getattr(value, name, None)


def _text(value: Any, what: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise ValueError(f"{what} is {type(value).__name__}, not text")


def read_completion(completion: Any) -> dict[str, Any]:
    """Text, stop reason, usage, model and refusal of a Chat Completions reply, every field
    optional; ValueError when there is no choice to read (the reply is not an answer)."""
    choices = _field(completion, "choices")
    if not choices:
        raise ValueError("the reply has no choices")
    choice = choices[0]
    message = _field(choice, "message")
    if message is None:
        raise ValueError("the first choice has no message")
    usage = _field(completion, "usage")
    return {
        "text": _text(_field(message, "content"), "message.content"),
        "stop": _text(_field(choice, "finish_reason"), "finish_reason"),
        "usage": usage_dict(usage),
        "model": _text(_field(completion, "model"), "model"),
        "refusal": _text(_field(message, "refusal"), "message.refusal"),
    }


class StreamReader:
    """The parts of a Chat Completions stream, read chunk by chunk with every field optional."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.refusals: list[str] = []
        self.stop: str | None = None
        self.model: str | None = None
        self.usage: dict[str, Any] = {}

    def add(self, chunk: Any) -> None:
        self.model = _text(_field(chunk, "model"), "model") or self.model
        usage = _field(chunk, "usage")
        if usage:
            self.usage = usage_dict(usage)
        for choice in _field(chunk, "choices") or []:
            delta = _field(choice, "delta")
            content = _text(_field(delta, "content"), "delta.content") if delta is not None else None
            if content:
                self.texts.append(content)
            refusal = _text(_field(delta, "refusal"), "delta.refusal") if delta is not None else None
            if refusal:
                self.refusals.append(refusal)
            finish = _text(_field(choice, "finish_reason"), "finish_reason")
            if finish:
                self.stop = finish


def make(spec: ModelSpec, params: GenerationParams, key: str | None) -> OpenAIProvider:
    return OpenAIProvider(spec, params, key)


__all__ = ["OpenAIProvider", "ProviderError", "make"]
