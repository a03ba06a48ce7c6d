"""Providers, one module per API, and their registry: the prefix of a model spec names one.

Built-in providers register exactly like a third-party one would (`register(prefix, module)`);
a provider's SDK is imported only when a model of that provider is used, and this registry
imports nothing heavy, so reading a run never pays for it.
"""

import gc
import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..models import ModelSpec
    from .base import GenerationParams, Provider

REGISTRY: dict[str, "str | Callable[..., Provider]"] = {}


def register(prefix: str, factory: "str | Callable[[ModelSpec, GenerationParams, str | None], Provider]") -> None:
    """A factory, or the dotted name of a module whose `make(spec, params, key)` builds one."""
    REGISTRY[prefix] = factory


register("anthropic", f"{__name__}.anthropic_provider")
register("openai", f"{__name__}.openai_provider")


def make_provider(spec: "ModelSpec", params: "GenerationParams") -> "Provider":
    """Build the provider for a spec, checking its key before any call is made."""
    from .base import api_key

    key = api_key(spec)
    factory: Any = REGISTRY[spec.provider]
    if isinstance(factory, str):
        factory = _import_quietly(factory).make
    return factory(spec, params, key)


def _import_quietly(module: str) -> Any:
    """Import an SDK with the garbage collector paused, then freeze what it built: its many
    long-lived objects are never collected, so sparing the collector from walking them cuts
    the import, every later collection and the interpreter's exit (about 0.3 s for openai)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return importlib.import_module(module)
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


__all__ = ["REGISTRY", "make_provider", "register"]
