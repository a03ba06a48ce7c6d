"""Model specs: `anthropic:MODEL`, `openai:MODEL`, `openai:MODEL@BASE_URL`."""

import re
from dataclasses import dataclass
from typing import Any

from .errors import InputError

DEFAULT_KEY_ENV = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY"}


@dataclass(frozen=True)
class ModelSpec:
    spec: str
    provider: str
    model: str
    base_url: str | None = None
    api_key_env: str | None = None

    @property
    def key_env(self) -> str | None:
        """The environment variable holding this model's key; None when it needs none."""
        if self.api_key_env:
            return self.api_key_env
        if self.provider == "openai" and self.base_url:
            return None  # a local OpenAI-compatible server (Ollama, vLLM) takes no key
        return DEFAULT_KEY_ENV.get(self.provider, f"{self.provider.upper()}_API_KEY")

    def to_dict(self) -> dict[str, Any]:
        return {
            "spec": self.spec,
            "provider": self.provider,
            "model": self.model,
            "base_url": self.base_url,
            "api_key_env": self.key_env,
        }


def parse_model_spec(spec: str, api_key_env: str | None = None) -> ModelSpec:
    """Parse `PROVIDER:MODEL[@BASE_URL]` (the form only: providers.parse_spec checks the provider)."""
    provider, sep, rest = spec.partition(":")
    if not sep or not rest:
        raise InputError(
            f"model {spec!r}: expected PROVIDER:MODEL, e.g. anthropic:claude-sonnet-4-5 "
            "or openai:llama3@http://localhost:11434/v1"
        )
    model, at, base_url = rest.partition("@")
    if not model or (at and not re.match(r"https?://", base_url)):
        raise InputError(f"model {spec!r}: expected MODEL@http(s)://HOST/... after {provider}:")
    return ModelSpec(spec, provider, model, base_url or None, api_key_env)
