"""Anthropic Messages API through the official SDK (SDK retries off: the runner owns them)."""

from collections.abc import Sequence
from typing import Any

import anthropic

from ..models import ModelSpec
from .base import (
    Completion,
    GenerationParams,
    Provider,
    sdk_error,
    usage_dict,
)


class AnthropicProvider(Provider):
    def __init__(self, spec: ModelSpec, params: GenerationParams, key: str | None) -> None:
        super().__init__(spec, params)
        options: dict[str, Any] = {
            "api_key": key,
            "max_retries": 0,
            "timeout": params.timeout,
            "http_client": anthropic.DefaultHttpxClient(event_hooks={"response": [self.recorder.hook]}),
        }
        if spec.base_url:  # otherwise the SDK honours ANTHROPIC_BASE_URL itself
            options["base_url"] = spec.base_url
        self.client = anthropic.Anthropic(**options)

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

    def complete(self, messages: Sequence[dict[str, str]]) -> Completion:
        self.recorder.start()
        try:
            if self.params.stream:
                return self._stream(self._request(messages))
            raw = self.client.messages.with_raw_response.create(**self._request(messages))
            message = raw.parse()
            return Completion(
                text="".join(b.text for b in message.content if b.type == "text"),
                body=self.recorder.take() or raw.http_response.content,
                stop_reason=message.stop_reason,
                usage=usage_dict(message.usage),
                request_id=raw.headers.get("request-id"),
                model=message.model,
            )
        except anthropic.APIError as exc:
            raise sdk_error(exc, anthropic, self.spec) from None

    def _stream(self, request: dict[str, Any]) -> Completion:
        texts: list[str] = []
        stop = model = request_id = None
        usage: dict[str, Any] = {}
        stream = self.client.messages.create(stream=True, **request)
        request_id = stream.response.headers.get("request-id")
        for event in stream:
            if event.type == "message_start":
                model = event.message.model
                usage.update(usage_dict(event.message.usage))
            elif event.type == "content_block_delta" and event.delta.type == "text_delta":
                texts.append(event.delta.text)
            elif event.type == "message_delta":
                stop = event.delta.stop_reason
                usage.update(usage_dict(event.usage))
        return Completion("".join(texts), self.recorder.take(), stop, usage, request_id, model)

    def close(self) -> None:
        self.client.close()
