"""The provider interface: send messages, return the exact output text and the raw body."""

import os
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import StartError
from ..models import ModelSpec

RETRYABLE_STATUS = frozenset({408, 409, 429})


@dataclass(frozen=True)
class GenerationParams:
    """Sampling parameters; None means "not sent", so the API's own default applies."""

    max_tokens: int = 1024
    temperature: float | None = None
    seed: int | None = None
    stream: bool = False
    timeout: float = 60.0


@dataclass
class Completion:
    text: str
    body: bytes
    stop_reason: str | None = None
    usage: dict[str, Any] = field(default_factory=dict)
    request_id: str | None = None
    model: str | None = None


class ProviderError(Exception):
    """A failed call, classified so the runner can decide whether to retry."""

    def __init__(
        self,
        kind: str,
        message: str,
        *,
        status: int | None = None,
        retryable: bool = False,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.status = status
        self.retryable = retryable
        self.retry_after = retry_after


def status_retryable(status: int) -> bool:
    return status in RETRYABLE_STATUS or status >= 500


def parse_retry_after(headers: Any) -> float | None:
    """Seconds from `retry-after-ms` or `retry-after` (seconds form); None when absent."""
    if headers is None:
        return None
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            return max(0.0, float(value) * scale)
        except ValueError:
            continue  # an HTTP date: fall back to our own backoff
    return None


class BodyRecorder:
    """Keeps the bytes of each HTTP response body the SDK reads, per calling thread.

    Installed as a response event hook on the SDK's HTTP client, it wraps `iter_bytes`, which
    the SDKs use for plain and streamed replies alike, so what is kept is the body as received
    (after content decoding).
    """

    def __init__(self) -> None:
        self.local = threading.local()

    def start(self) -> None:
        self.local.chunks = []

    def take(self) -> bytes:
        return b"".join(getattr(self.local, "chunks", []))

    def hook(self, response: Any) -> None:
        chunks = getattr(self.local, "chunks", None)
        if chunks is None:
            return
        original = response.iter_bytes

        def iter_bytes(*args: Any, **kwargs: Any) -> Iterator[bytes]:
            for chunk in original(*args, **kwargs):
                chunks.append(chunk)
                yield chunk

        response.iter_bytes = iter_bytes


def usage_dict(usage: Any) -> dict[str, Any]:
    """An SDK usage object as a plain dict without the fields the API left out."""
    return {k: v for k, v in usage.model_dump().items() if v is not None} if usage else {}


def sdk_error(exc: Exception, sdk: Any, spec: ModelSpec) -> ProviderError:
    """Classify an exception of the anthropic or openai SDK (they share one error hierarchy)."""
    if isinstance(exc, sdk.APIStatusError):
        return ProviderError(
            "http_status",
            f"{spec.spec}: HTTP {exc.status_code}: {exc.message}",
            status=exc.status_code,
            retryable=status_retryable(exc.status_code),
            retry_after=parse_retry_after(exc.response.headers),
        )
    if isinstance(exc, sdk.APITimeoutError):
        return ProviderError("timeout", f"{spec.spec}: request timed out", retryable=True)
    if isinstance(exc, sdk.APIConnectionError):
        return ProviderError("connection", f"{spec.spec}: cannot connect ({exc})", retryable=True)
    return ProviderError("api", f"{spec.spec}: {exc}")


def api_key(spec: ModelSpec) -> str | None:
    """The key from the environment; a missing required key is a StartError naming the variable."""
    env = spec.key_env
    if env is None:
        return None
    value = os.environ.get(env)
    if not value:
        raise StartError(f"model {spec.spec}: environment variable {env} is not set (it holds the API key)")
    return value


class Provider:
    """One model behind one API. Subclasses implement `complete` and map SDK errors."""

    def __init__(self, spec: ModelSpec, params: GenerationParams) -> None:
        self.spec = spec
        self.params = params
        self.recorder = BodyRecorder()

    def complete(self, messages: Sequence[dict[str, str]]) -> Completion:
        raise NotImplementedError

    def close(self) -> None:
        """Release the SDK client."""


def make_provider(spec: ModelSpec, params: GenerationParams) -> Provider:
    """Build the provider for a spec, checking its key before any call is made."""
    key = api_key(spec)
    if spec.provider == "anthropic":
        from .anthropic_provider import AnthropicProvider

        return AnthropicProvider(spec, params, key)
    from .openai_provider import OpenAIProvider

    return OpenAIProvider(spec, params, key)
