"""Where a model's calls go, and what set it: the spec's `@URL`, an environment variable the SDK
reads (`OPENAI_BASE_URL`, `ANTHROPIC_BASE_URL`, ...), the cloud region, or the SDK's default.

The address is worked out here by the SDKs' own rules, without building a client, importing a
cloud library or making a call, so a dry run can say it too; tests check each rule against the
SDK's client. List prices apply only on a provider's own endpoint (`own`). A recorded address
never holds a secret: a URL's user name, password and query values are removed.
"""

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from .models import ModelSpec

# Each provider's own hosts: its list prices apply to calls sent there and nowhere else.
OWN_HOSTS = {
    "openai": re.compile(r"api\.openai\.com"),
    "anthropic": re.compile(r"api\.anthropic\.com"),
    "azure": re.compile(r"[a-z0-9-]+\.(openai\.azure\.com|cognitiveservices\.azure\.com)"),
    "bedrock": re.compile(r"bedrock-runtime(-fips)?\.[a-z0-9-]+\.amazonaws\.com"),
    "vertex": re.compile(r"([a-z0-9-]+-)?aiplatform(\.[a-z]+\.rep)?\.googleapis\.com"),
}
DEFAULT_URLS = {"openai": "https://api.openai.com/v1", "anthropic": "https://api.anthropic.com"}
# The variable each SDK reads for its address when the client is given none.
BASE_URL_ENV = {
    "openai": "OPENAI_BASE_URL",
    "anthropic": "ANTHROPIC_BASE_URL",
    "bedrock": "ANTHROPIC_BEDROCK_BASE_URL",
    "vertex": "ANTHROPIC_VERTEX_BASE_URL",
}
# Vertex's multi-region names have their own hosts (the SDK's table).
VERTEX_HOSTS = {
    "global": "https://aiplatform.googleapis.com/v1",
    "us": "https://aiplatform.us.rep.googleapis.com/v1",
    "eu": "https://aiplatform.eu.rep.googleapis.com/v1",
}
REMOVED = "REMOVED"
SECRET_QUERY = re.compile(r"key|token|secret|sig|pass|auth|code", re.IGNORECASE)


@dataclass(frozen=True)
class Endpoint:
    url: str | None  # secrets removed; None when only the SDK can tell at run time
    source: str  # "spec", "environment OPENAI_BASE_URL", "default", "region (AWS_REGION)", ...
    own: bool  # the provider's own public endpoint, where its list prices apply

    def to_dict(self) -> dict[str, Any]:
        return {"url": self.url, "from": self.source, "provider_own": self.own}

    @staticmethod
    def from_dict(data: Mapping[str, Any]) -> "Endpoint":
        return Endpoint(data.get("url"), str(data.get("from") or "recorded"), bool(data.get("provider_own")))

    def describe(self) -> str:
        """`URL (from SOURCE)`, as tables and sentences show it."""
        return f"{self.url or 'unknown'} (from {self.source})"


def scrub_url(url: str) -> str:
    """The URL without a user name or password, with each query value replaced and no fragment."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return REMOVED  # not a URL we can take apart: record nothing of it
    netloc = (f"[{host}]" if ":" in host else host) + (f":{port}" if port else "")
    query = urlencode([(key, REMOVED) for key, _ in parse_qsl(parts.query, keep_blank_values=True)])
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


def url_secrets(url: str) -> list[str]:
    """The parts of a URL that are credentials: its password, and query values whose name says
    key, token, secret, signature or password (an Azure SAS `sig`, an `api-key`)."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return []
    query = [value for key, value in parse_qsl(parts.query) if value and SECRET_QUERY.search(key)]
    return ([password] if password else []) + query


def _is_own(provider: str, url: str) -> bool:
    pattern = OWN_HOSTS.get(provider)
    try:
        parts = urlsplit(url)
        host, port = parts.hostname or "", parts.port
    except ValueError:
        return False
    return bool(pattern and parts.scheme == "https" and port in (None, 443) and pattern.fullmatch(host))


def resolve(spec: ModelSpec, environ: Mapping[str, str] | None = None) -> Endpoint:
    """Where this model's calls go when a run starts with `environ` (default: this process's)."""
    env = os.environ if environ is None else environ
    provider = spec.provider
    variable = BASE_URL_ENV.get(provider)
    if spec.base_url:
        url, source = spec.base_url, "spec"
    elif variable and env.get(variable) is not None:
        url, source = env[variable], f"environment {variable}"
    elif provider in DEFAULT_URLS:
        url, source = DEFAULT_URLS[provider], "default"
    elif provider == "bedrock":
        return _bedrock(spec, env)
    elif provider == "vertex":
        return _vertex(spec, env)
    else:
        return Endpoint(None, "the provider's SDK", False)
    if provider == "azure":
        # AzureOpenAI(azure_endpoint=...) sends to ENDPOINT/openai.
        url = url.rstrip("/") + "/openai"
    return Endpoint(scrub_url(url), source, _is_own(provider, url))


def _bedrock(spec: ModelSpec, env: Mapping[str, str]) -> Endpoint:
    region, source = spec.region, "region in the model's table"
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        if not region and env.get(name):
            region, source = env[name], f"region from {name}"
    if not region:
        # The AWS profile's region: read when the run builds its client, not here.
        return Endpoint(None, "region of the AWS profile", False)
    url = f"https://bedrock-runtime.{region}.amazonaws.com"
    return Endpoint(scrub_url(url), source, _is_own("bedrock", url))


def _vertex(spec: ModelSpec, env: Mapping[str, str]) -> Endpoint:
    region, source = spec.region, "region in the model's table"
    if not region and env.get("CLOUD_ML_REGION"):
        region, source = env["CLOUD_ML_REGION"], "region from CLOUD_ML_REGION"
    if not region:
        return Endpoint(None, "no region given", False)
    url = VERTEX_HOSTS.get(region, f"https://{region}-aiplatform.googleapis.com/v1")
    return Endpoint(scrub_url(url), source, _is_own("vertex", url))


def protect(spec: ModelSpec, environ: Mapping[str, str] | None = None) -> None:
    """Hand the parts of a model's URLs that may be credentials to the scrubber, so that no file
    written (a run, an export, `-o FILE`) keeps them, whatever else quotes the spec."""
    from .redaction import SCRUBBER

    env = os.environ if environ is None else environ
    variable = BASE_URL_ENV.get(spec.provider)
    for url in (spec.base_url, env.get(variable) if variable else None):
        for secret in url_secrets(url or ""):
            SCRUBBER.add("a credential in an endpoint URL", secret)


def model_record(spec: ModelSpec, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A model as a manifest records it: its spec and where its calls go (secrets protected)."""
    protect(spec, environ)
    return {**spec.to_dict(), "endpoint": resolve(spec, environ).to_dict()}


def changed(models: list[Mapping[str, Any]], specs: list[ModelSpec]) -> list[str]:
    """For a resumed run: each model whose calls would now go elsewhere than the run recorded."""
    moved = []
    for model, spec in zip(models, specs, strict=True):
        then, now = recorded(model, spec), resolve(spec)
        if "endpoint" in model and then.url != now.url:
            moved.append(f"{spec.spec} went to {then.describe()} and would now go to {now.describe()}")
    return moved


def of_run(manifest: Mapping[str, Any]) -> dict[str, Endpoint]:
    """Each model spec of a run and where its calls went, as its manifest recorded it."""
    from .models import model_of

    return {m["spec"]: recorded(m, model_of(m)) for m in manifest.get("models") or []}


def recorded(model: Mapping[str, Any], spec: ModelSpec) -> Endpoint:
    """A model's endpoint as its manifest recorded it; a run recorded before endpoints were
    recorded is taken to have gone where its spec alone sends it (no environment)."""
    data = model.get("endpoint")
    if isinstance(data, Mapping):
        return Endpoint.from_dict(data)
    return resolve(spec, {})


__all__ = [
    "Endpoint",
    "changed",
    "model_record",
    "of_run",
    "protect",
    "recorded",
    "resolve",
    "scrub_url",
    "url_secrets",
]
