"""Model specs: `anthropic:MODEL`, `openai:MODEL`, `openai:MODEL@BASE_URL`, and the clouds through
the same SDKs: `azure:DEPLOYMENT@https://RESOURCE.openai.azure.com`, `bedrock:MODEL`,
`vertex:MODEL` (each may name another endpoint after `@`, e.g. a proxy).

`NAME=SPEC` names a model's arm (as `--prompt NAME=PATH` names a prompt's): selectors, tables
and sentences then say NAME. A model without a name is called by its spec."""

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from . import names
from .errors import InputError
from .terminal import control_problem

DEFAULT_KEY_ENV = {
    "anthropic": "ANTHROPIC_API_KEY",
    "openai": "OPENAI_API_KEY",
    "azure": "AZURE_OPENAI_API_KEY",
}
# Credentials from the cloud's own chain (AWS, Google), not one API key variable.
CLOUD_CHAIN = ("bedrock", "vertex")


@dataclass(frozen=True)
class ModelSpec:
    spec: str
    provider: str
    model: str
    base_url: str | None = None
    api_key_env: str | None = None
    api_version: str | None = None  # azure
    region: str | None = None  # bedrock, vertex
    project: str | None = None  # vertex
    name: str | None = None  # the arm's name, given as NAME=SPEC

    @property
    def label(self) -> str:
        """What the model's arm is called in samples, selectors and tables: its name, else its spec."""
        return self.name or self.spec

    @property
    def key_env(self) -> str | None:
        """The environment variable holding this model's key; None when it needs none."""
        if self.api_key_env:
            return self.api_key_env
        if self.provider == "openai" and self.base_url:
            return None  # a local OpenAI-compatible server (Ollama, vLLM) takes no key
        if self.provider in CLOUD_CHAIN:
            return None
        return DEFAULT_KEY_ENV.get(self.provider, f"{self.provider.upper()}_API_KEY")

    def to_dict(self) -> dict[str, Any]:
        return {
            **({"name": self.name} if self.name else {}),
            "spec": self.spec,
            "provider": self.provider,
            "model": self.model,
            "base_url": self.base_url,
            "api_key_env": self.key_env,
            **{
                key: value
                for key, value in (
                    ("api_version", self.api_version),
                    ("region", self.region),
                    ("project", self.project),
                )
                if value is not None
            },
        }


def parse_model_spec(
    spec: str, api_key_env: str | None = None, check_url: bool = True, **cloud: str | None
) -> ModelSpec:
    """Parse `PROVIDER:MODEL[@BASE_URL]` (the form only: providers.parse_spec checks the provider).
    `check_url=False` reads a recorded spec, whose URL credentials were scrubbed when recorded."""
    if not isinstance(spec, str):
        raise InputError(
            f"model {spec!r}: a model spec is text such as openai:gpt-4.1-mini, not {type(spec).__name__}"
        )
    problem = control_problem(spec, "model")
    if problem:
        raise InputError(problem)
    provider, sep, rest = spec.partition(":")
    if not sep or not rest:
        raise InputError(
            f"model {spec!r}: expected PROVIDER:MODEL, e.g. anthropic:claude-sonnet-5-5 "
            "or openai:llama3@http://localhost:11434/v1"
        )
    # A model id may hold "@" itself (vertex:claude-sonnet-4-5@20250929): the endpoint starts with http.
    found = re.search(r"@(?=https?://)", rest)
    model, base_url = (rest[: found.start()], rest[found.end() :]) if found else (rest, "")
    if not model or (not found and "@" in rest and provider not in ("vertex", "bedrock")):
        raise InputError(f"model {spec!r}: expected MODEL@http(s)://HOST/... after {provider}:")
    if provider == "azure" and not base_url:
        raise InputError(
            f"model {spec!r}: an Azure model is azure:DEPLOYMENT@https://RESOURCE.openai.azure.com"
        )
    if base_url and check_url:
        problem = url_problem(base_url)
        if problem:
            raise InputError(f"model {spec!r}: {base_url!r} is not a usable URL ({problem})")
    return ModelSpec(spec, provider, model, base_url or None, api_key_env, **cloud)


def url_problem(url: str) -> str | None:
    """Why an endpoint URL cannot be called (None when it can): checked when the spec is read,
    so that a typo is bad input (exit 2), never a traceback from inside the SDK."""
    from urllib.parse import urlsplit

    if any(char.isspace() for char in url):
        return "it holds a space"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  # raises on a port that is not a number from 0 to 65535
    except ValueError as exc:
        return str(exc)
    if not parts.hostname:
        return "it names no host"
    import httpx2  # the SDKs' own URL parser: what it refuses, this refuses (and the SDK loads it anyway)

    try:
        httpx2.URL(url)
    except (httpx2.InvalidURL, ValueError) as exc:
        return str(exc)
    return None


def split_name(text: str) -> tuple[str | None, str]:
    """`NAME=SPEC` as (NAME, SPEC); a plain spec as (None, SPEC). A spec always has a `:` before
    any `=` (a URL's query string), so text before the first `=` without one is a name."""
    head, eq, rest = text.partition("=")
    if eq and ":" not in head:
        problem = names.problem(head, "model name")
        if problem:
            raise InputError(f"model {text!r}: {problem}")
        return head, rest
    return None, text


def check_names(models: Sequence[ModelSpec]) -> None:
    """Each model's arm name is unique among the models of a run (a name is never a spec: it has no `:`)."""
    seen: dict[str, str] = {}
    for model in models:
        if model.name is not None and names.problem(model.name, "model name"):
            raise InputError(str(names.problem(model.name, "model name")))
        label = model.label
        if label in seen:
            raise InputError(
                f"two models are both called {label!r} ({seen[label]} and {model.spec}): "
                "give each its own name (NAME=SPEC)"
            )
        seen[label] = model.spec


def model_of(recorded: dict[str, Any]) -> ModelSpec:
    """A model as a manifest records it (`to_dict`); runs recorded before names have none."""
    cloud = {key: recorded.get(key) for key in ("api_version", "region", "project")}
    parsed = parse_model_spec(recorded["spec"], recorded.get("api_key_env"), check_url=False, **cloud)
    return replace(parsed, name=recorded["name"]) if recorded.get("name") else parsed
