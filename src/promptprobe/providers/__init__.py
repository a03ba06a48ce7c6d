"""Providers, one module per API, and their registry: the prefix of a model spec names one.

Built-in providers register exactly like a third-party one would (`register(prefix, module)`);
a provider's SDK is imported only when a model of that provider is used, and this registry
imports nothing heavy, so reading a run never pays for it.
"""

import importlib
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..collector import paused
from ..errors import InputError
from ..models import DEFAULT_KEY_ENV, ModelSpec, parse_model_spec

if TYPE_CHECKING:
    from .base import GenerationParams, Provider

REGISTRY: dict[str, "str | Callable[..., Provider]"] = {}
VERTEX_TOKEN_ENV = "ANTHROPIC_VERTEX_ACCESS_TOKEN"  # a ready token; else Google's default chain
# Cloud secrets the SDKs read from the environment: scrubbed like API keys wherever they appear.
CLOUD_SECRETS = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_BEARER_TOKEN_BEDROCK", VERTEX_TOKEN_ENV)
# Built-in providers whose batch inference is no API of these SDKs (Bedrock's goes through S3,
# Vertex's through Cloud Storage or BigQuery): known from the spec, before any client is built.
NO_BATCH_API = frozenset({"bedrock", "vertex"})


def register(
    prefix: str, factory: "str | Callable[[ModelSpec, GenerationParams, str | None], Provider]"
) -> None:
    """A factory, or the dotted name of a module whose `make(spec, params, key)` builds one."""
    REGISTRY[prefix] = factory


register("anthropic", f"{__name__}.anthropic_provider")
register("openai", f"{__name__}.openai_provider")
register("azure", f"{__name__}.cloud")
register("bedrock", f"{__name__}.cloud")
register("vertex", f"{__name__}.cloud")


def parse_spec(spec: str, api_key_env: str | None = None, **cloud: str | None) -> ModelSpec:
    """A model spec whose provider is registered (`anthropic:MODEL`, `openai:MODEL[@URL]`,
    `azure:`, `bedrock:`, `vertex:`)."""
    parsed = parse_model_spec(spec, api_key_env, **cloud)
    if parsed.provider not in REGISTRY:
        raise InputError(
            f"model {spec!r}: unknown provider {parsed.provider!r} (known: {', '.join(REGISTRY)}; "
            "OpenAI-compatible servers use openai:MODEL@BASE_URL)"
        )
    return parsed


def refuse_batch(specs: Sequence[ModelSpec]) -> None:
    """InputError naming the first model without a batch API: a batch run (or its dry run) with it is
    bad input, refused before credentials or regions are looked at."""
    for spec in specs:
        if spec.provider in NO_BATCH_API:
            raise InputError(
                f"model {spec.spec}: promptprobe has no batch API for {spec.provider} models; "
                "run it without --batch"
            )


def make_provider(spec: ModelSpec, params: "GenerationParams") -> "Provider":
    """Build the provider for a spec, checking its key before any call is made."""
    from .base import api_key

    key = api_key(spec)
    factory: Any = REGISTRY[spec.provider]
    # The SDK is imported and its client built with the garbage collector paused, then what
    # they built is frozen: those many long-lived objects are never collected, so sparing the
    # collector from walking them cuts the import, every later collection and the
    # interpreter's exit (about 0.6 s for openai on a small machine).
    with paused():
        if isinstance(factory, str):
            factory = importlib.import_module(factory).make
        return factory(spec, params, key)


def protect_keys(specs: Sequence[ModelSpec]) -> None:
    """Hand every key these models' calls would use to the scrubber, requiring none: for work that
    runs user code on a recorded run without building a provider (`probe classify RUN`)."""
    from ..endpoints import protect
    from ..redaction import MIN_SECRET_LENGTH, SCRUBBER

    names = {*DEFAULT_KEY_ENV.values(), *CLOUD_SECRETS, *(spec.key_env for spec in specs if spec.key_env)}
    for name in sorted(names):
        value = os.environ.get(name) or ""
        if len(value) >= MIN_SECRET_LENGTH:
            SCRUBBER.add(name, value)
    for spec in specs:
        protect(spec)


__all__ = ["REGISTRY", "make_provider", "parse_spec", "protect_keys", "refuse_batch", "register"]
