"""OpenAI Chat Completions, and any OpenAI-compatible server (Ollama, vLLM, llama.cpp)."""

import re
import threading
import time
from collections.abc import Sequence
from typing import Any

import httpx2
import openai

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
        self.client = openai.OpenAI(**options)
        self.client.chat.completions.with_raw_response  # noqa: B018  # its lazy imports now, not at the first call

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
        with self.errors_of(openai, httpx2.TransportError):
            if self.params.stream:
                return self._stream(request)
            raw = self.client.chat.completions.with_raw_response.create(**request)
            try:
                completion = raw.parse()
                choices = completion.choices
            except (ValueError, TypeError, AttributeError) as exc:  # HTML, cut-off JSON, another shape
                raise bad_body(self.spec, self.monitor, exc) from None
            if not choices:
                raise bad_body(self.spec, self.monitor, ValueError("the reply has no choices"))
            choice = choices[0]
            return Completion(
                text=choice.message.content,
                body=self.monitor.take() or raw.http_response.content,
                stop_reason=choice.finish_reason,
                usage=usage_dict(completion.usage),
                request_id=raw.headers.get("x-request-id"),
                model=completion.model,
                refusal=getattr(choice.message, "refusal", None),
                headers=self.monitor.headers(),
            )

    def _stream(self, request: dict[str, Any]) -> Completion:
        texts: list[str] = []
        refusals: list[str] = []
        stop = model = None
        usage: dict[str, Any] = {}
        stream = self.client.chat.completions.create(
            stream=True, stream_options={"include_usage": True}, **request
        )
        request_id = stream.response.headers.get("x-request-id")
        try:
            for chunk in stream:
                model = chunk.model or model
                if chunk.usage:
                    usage = usage_dict(chunk.usage)
                for choice in chunk.choices:
                    if choice.delta.content:
                        texts.append(choice.delta.content)
                    if getattr(choice.delta, "refusal", None):
                        refusals.append(choice.delta.refusal)
                    if choice.finish_reason:
                        stop = choice.finish_reason
        except ValueError as exc:  # a chunk that is not JSON
            raise bad_body(self.spec, self.monitor, exc) from None
        if stop is None:
            raise truncated(self.spec, self.monitor, "no finish_reason")
        return Completion(
            "".join(texts) if texts else None,
            self.monitor.take(),
            stop,
            usage,
            request_id,
            model,
            refusal="".join(refusals) or None,
            headers=self.monitor.headers(),
        )

    def close(self) -> None:
        self.client.close()


def make(spec: ModelSpec, params: GenerationParams, key: str | None) -> OpenAIProvider:
    return OpenAIProvider(spec, params, key)


__all__ = ["OpenAIProvider", "ProviderError", "make"]
