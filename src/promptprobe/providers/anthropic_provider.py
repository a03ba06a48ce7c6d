"""Anthropic Messages API through the official SDK (SDK retries off: the runner owns them)."""

import threading
import time
from collections.abc import Sequence
from typing import Any

import anthropic
import httpx2

from ..models import ModelSpec
from .base import (
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
        self.client = anthropic.Anthropic(**options)
        self.client.messages.with_raw_response  # noqa: B018  # its lazy imports now, not at the first call

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
        with self.errors_of(anthropic, httpx2.TransportError):
            if self.params.stream:
                return self._stream(request)
            raw = self.client.messages.with_raw_response.create(**request)
            try:
                message = raw.parse()
                texts = [b.text for b in message.content if b.type == "text"]
                stop_reason, model, usage = message.stop_reason, message.model, usage_dict(message.usage)
            except (ValueError, TypeError, AttributeError) as exc:  # HTML, cut-off JSON, another shape
                raise bad_body(self.spec, self.monitor, exc) from None
            return Completion(
                text="".join(texts) if texts else None,
                body=self.monitor.take() or raw.http_response.content,
                stop_reason=stop_reason,
                usage=usage,
                request_id=raw.headers.get("request-id"),
                model=model,
                headers=self.monitor.headers(),
            )

    def _stream(self, request: dict[str, Any]) -> Completion:
        texts: list[str] = []
        stop = model = None
        usage: dict[str, Any] = {}
        finished = False
        stream = self.client.messages.create(stream=True, **request)
        request_id = stream.response.headers.get("request-id")
        try:
            for event in stream:
                if event.type == "message_start":
                    model = event.message.model
                    usage.update(usage_dict(event.message.usage))
                elif event.type == "content_block_delta" and event.delta.type == "text_delta":
                    texts.append(event.delta.text)
                elif event.type == "message_delta":
                    stop = event.delta.stop_reason
                    usage.update(usage_dict(event.usage))
                elif event.type == "message_stop":
                    finished = True
        except ValueError as exc:  # an event that is not JSON
            raise bad_body(self.spec, self.monitor, exc) from None
        if not finished:
            raise truncated(self.spec, self.monitor, "no message_stop event")
        return Completion(
            "".join(texts) if texts else None,
            self.monitor.take(),
            stop,
            usage,
            request_id,
            model,
            headers=self.monitor.headers(),
        )

    def close(self) -> None:
        self.client.close()


def make(spec: ModelSpec, params: GenerationParams, key: str | None) -> AnthropicProvider:
    return AnthropicProvider(spec, params, key)


__all__ = ["AnthropicProvider", "ProviderError", "make"]
