"""Providers, one module per API, and their registry: the prefix of a model spec names one.

Built-in providers register exactly like a third-party one would (`register(prefix, module)`);
a provider's SDK is imported only when a model of that provider is used.
"""

import importlib
from collections.abc import Callable

from ..models import ModelSpec
from .base import Completion, GenerationParams, Provider, ProviderError, api_key

Factory = Callable[[ModelSpec, GenerationParams, str | None], Provider]
REGISTRY: dict[str, str | Factory] = {}


def register(prefix: str, factory: str | Factory) -> None:
    """A factory, or the dotted name of a module whose `make(spec, params, key)` builds one."""
    REGISTRY[prefix] = factory


register("anthropic", f"{__name__}.anthropic_provider")
register("openai", f"{__name__}.openai_provider")


def make_provider(spec: ModelSpec, params: GenerationParams) -> Provider:
    """Build the provider for a spec, checking its key before any call is made."""
    key = api_key(spec)
    factory = REGISTRY[spec.provider]
    if isinstance(factory, str):
        factory = importlib.import_module(factory).make
    return factory(spec, params, key)


__all__ = [
    "Completion",
    "GenerationParams",
    "Provider",
    "ProviderError",
    "REGISTRY",
    "make_provider",
    "register",
]
