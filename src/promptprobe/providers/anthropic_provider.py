"""Anthropic Messages API through the official SDK (SDK retries off: the runner owns them)."""

import threading
import time
from collections.abc import Sequence
from typing import Any

import anthropic
import httpcore2
import httpx2

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


class AnthropicProvider(Provider):
    def __init__(self, spec: ModelSpec, params: GenerationParams, key: str | None) -> None:
        super().__init__(spec, params)
        options: dict[str, Any] = {
            "api_key": key,
            "max_retries": 0,
            "timeout": httpx2.Timeout(params.timeout, connect=min(10.0, params.timeout)),
            "http_client": anthropic.DefaultHttpxClient(event_hooks={"response": [self.monitor.hook]}),
        }
        if spec.base_url:  # otherwise the SDK honours ANTHROPIC_BASE_URL itself
            options["base_url"] = spec.base_url
        self.client = self.make_client(options)
        deadline.apply(options["http_client"], httpcore2)  # --timeout bounds headers and connect too
        self.client.messages.with_raw_response  # noqa: B018  # its lazy imports now, not at the first call

    def make_client(self, options: dict[str, Any]) -> Any:
        """The SDK client (a subclass picks another of the SDK's client classes)."""
        return anthropic.Anthropic(**options)

    def _request(self, messages: Sequence[dict[str, str]]) -> dict[str, Any]:
        system = "\n\n".join(m["content"] for m in messages if m["role"] == "system")
        request: dict[str, Any] = {
            "model": self.spec.model,
            "max_tokens": self.params.max_tokens,
            "messages": [
                {"role": m["role"], "content": m["content"]} for m in messages if m["role"] != "system"
            ],
        }
        if system:
            request["system"] = system
        if self.params.temperature is not None:
            # Recent SDKs dropped the keyword (newer models refuse it); older models still
            # take it on the wire, so it goes in the body when the user asks for it.
            request["extra_body"] = {"temperature": self.params.temperature}
        return request  # the Messages API has no seed parameter

    def complete(
        self, messages: Sequence[dict[str, str]], cancel: threading.Event | None = None
    ) -> Completion:
        self.monitor.start(time.monotonic() + self.params.timeout, cancel)
        request = self._request(messages)
        with deadline.until(self.params.timeout), self.errors_of(anthropic, httpx2.TransportError):
            if self.params.stream:
                return self._stream(request)
            raw = self.client.messages.with_raw_response.create(**request)
            try:
                reply = read_message(raw.parse())
            except Exception as exc:  # HTML, cut-off JSON, or JSON of another shape: not a reply
                raise bad_body(self.spec, self.monitor, exc) from None
            return Completion(
                text=reply["text"],
                body=self.monitor.take() or raw.http_response.content,
                stop_reason=reply["stop"],
                usage=reply["usage"],
                request_id=raw.headers.get("request-id"),
                model=reply["model"],
                headers=self.monitor.headers(),
            )

    def _stream(self, request: dict[str, Any]) -> Completion:
        stream = self.client.messages.create(stream=True, **request)
        request_id = stream.response.headers.get("request-id")
        reader = StreamReader()
        try:
            for event in stream:
                reader.add(event)
        except (anthropic.APIError, httpx2.TransportError, CallAborted):
            raise  # errors_of classifies them
        except Exception as exc:  # an event that is not JSON, or JSON of another shape
            raise bad_body(self.spec, self.monitor, exc) from None
        if not reader.finished:
            raise truncated(self.spec, self.monitor, "no message_stop event")
        return Completion(
            "".join(reader.texts) if reader.texts else None,
            self.monitor.take(),
            reader.stop,
            reader.usage,
            request_id,
            reader.model,
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


def _usage(value: Any) -> dict[str, Any]:
    return usage_dict(value)


def read_message(message: Any) -> dict[str, Any]:
    """Text, stop reason, usage and model of a Messages API reply, every field optional;
    ValueError when it is not a message (no content list, a text block without text)."""
    content = _field(message, "content")
    if not isinstance(content, list):
        raise ValueError("the reply has no content list")
    texts = []
    for block in content:
        if _field(block, "type") == "text":
            text = _text(_field(block, "text"), "a text block's text")
            if text is None:
                raise ValueError("a text block has no text")
            texts.append(text)
    return {
        "text": "".join(texts) if texts else None,
        "stop": _text(_field(message, "stop_reason"), "stop_reason"),
        "usage": _usage(_field(message, "usage")),
        "model": _text(_field(message, "model"), "model"),
    }


class StreamReader:
    """The parts of a Messages API stream, read event by event with every field optional."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.stop: str | None = None
        self.model: str | None = None
        self.usage: dict[str, Any] = {}
        self.finished = False

    def add(self, event: Any) -> None:
        kind = _field(event, "type")
        if kind == "message_start":
            message = _field(event, "message")
            self.model = _text(_field(message, "model"), "model")
            self.usage.update(_usage(_field(message, "usage")))
        elif kind == "content_block_delta":
            delta = _field(event, "delta")
            if _field(delta, "type") == "text_delta":
                text = _text(_field(delta, "text"), "text_delta")
                if text:
                    self.texts.append(text)
        elif kind == "message_delta":
            self.stop = _text(_field(_field(event, "delta"), "stop_reason"), "stop_reason") or self.stop
            self.usage.update(_usage(_field(event, "usage")))
        elif kind == "message_stop":
            self.finished = True


def make(spec: ModelSpec, params: GenerationParams, key: str | None) -> AnthropicProvider:
    return AnthropicProvider(spec, params, key)


__all__ = ["AnthropicProvider", "ProviderError", "make"]
