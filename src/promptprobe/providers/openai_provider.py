"""OpenAI Chat Completions, and any OpenAI-compatible server (Ollama, vLLM, llama.cpp)."""

from collections.abc import Sequence
from typing import Any

import openai

from ..models import ModelSpec
from .base import (
    Completion,
    GenerationParams,
    Provider,
    ProviderError,
    sdk_error,
    usage_dict,
)

# The SDK refuses an empty key; local servers ignore it. Never the user's OPENAI_API_KEY,
# which must not be sent to a server it was not meant for.
NO_KEY = "no-key-needed"


class OpenAIProvider(Provider):
    def __init__(self, spec: ModelSpec, params: GenerationParams, key: str | None) -> None:
        super().__init__(spec, params)
        options: dict[str, Any] = {
            "api_key": key or NO_KEY,
            "max_retries": 0,
            "timeout": params.timeout,
            "http_client": openai.DefaultHttpxClient(event_hooks={"response": [self.recorder.hook]}),
        }
        if spec.base_url:
            options["base_url"] = spec.base_url
        self.client = openai.OpenAI(**options)

    def _request(self, messages: Sequence[dict[str, str]]) -> dict[str, Any]:
        request: dict[str, Any] = {
            "model": self.spec.model,
            "messages": [{"role": m["role"], "content": m["content"]} for m in messages],
            "max_tokens": self.params.max_tokens,
        }
        if self.params.temperature is not None:
            request["temperature"] = self.params.temperature
        if self.params.seed is not None:
            request["seed"] = self.params.seed
        return request

    def complete(self, messages: Sequence[dict[str, str]]) -> Completion:
        self.recorder.start()
        try:
            if self.params.stream:
                return self._stream(self._request(messages))
            raw = self.client.chat.completions.with_raw_response.create(**self._request(messages))
            completion = raw.parse()
            if not completion.choices:
                raise ProviderError("api", f"{self.spec.spec}: reply has no choices")
            choice = completion.choices[0]
            return Completion(
                text=choice.message.content or "",
                body=self.recorder.take() or raw.http_response.content,
                stop_reason=choice.finish_reason,
                usage=usage_dict(completion.usage),
                request_id=raw.headers.get("x-request-id"),
                model=completion.model,
            )
        except openai.APIError as exc:
            raise sdk_error(exc, openai, self.spec) from None

    def _stream(self, request: dict[str, Any]) -> Completion:
        texts: list[str] = []
        stop = model = None
        usage: dict[str, Any] = {}
        stream = self.client.chat.completions.create(
            stream=True, stream_options={"include_usage": True}, **request
        )
        request_id = stream.response.headers.get("x-request-id")
        for chunk in stream:
            model = chunk.model or model
            if chunk.usage:
                usage = usage_dict(chunk.usage)
            for choice in chunk.choices:
                if choice.delta.content:
                    texts.append(choice.delta.content)
                if choice.finish_reason:
                    stop = choice.finish_reason
        return Completion("".join(texts), self.recorder.take(), stop, usage, request_id, model)

    def close(self) -> None:
        self.client.close()
