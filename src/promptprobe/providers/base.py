"""The provider interface: send messages, return the exact output text and the raw body.

A provider only makes its call and classifies its errors; the runner owns retries, pacing and
recording. Each call runs under a deadline and a cancel signal, checked on every chunk of the
response body, so a reply trickling one byte a second still ends on time and Ctrl-C stops a
stream at once.
"""

import os
import threading
import time
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from .. import deadline
from ..errors import StartError
from ..models import DEFAULT_KEY_ENV, ModelSpec
from ..redaction import MIN_SECRET_LENGTH, SCRUBBER
from ..retry_after import parse_retry_after

RETRYABLE_STATUS = frozenset({408, 409, 429})
ERROR_BODY_LIMIT = 64 * 1024


@dataclass(frozen=True)
class GenerationParams:
    """Sampling parameters; None means "not sent", so the API's own default applies."""

    max_tokens: int = 1024
    temperature: float | None = None
    seed: int | None = None
    stream: bool = False
    timeout: float = 120.0  # the whole call, body included
    cache: bool = False  # mark the system prompt and the conversation cacheable (Anthropic)


@dataclass
class Completion:
    text: str | None  # None: the API returned no text at all (null content, only a tool call)
    body: bytes
    stop_reason: str | None = None
    usage: dict[str, Any] = field(default_factory=dict)
    request_id: str | None = None
    model: str | None = None
    refusal: str | None = None  # the API's own refusal field, when it has one
    headers: dict[str, str] = field(default_factory=dict)


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
        request_id: str | None = None,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.status = status
        self.retryable = retryable
        self.retry_after = retry_after
        self.request_id = request_id
        # Scrubbed before it is cut, so that no cut leaves part of a secret behind.
        self.body = SCRUBBER.bytes(body)[:ERROR_BODY_LIMIT] if body else body
        self.headers = headers or {}


class CallAborted(Exception):
    """Raised inside the body stream when the call's deadline passes or the run is cancelled."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def status_retryable(status: int) -> bool:
    return status in RETRYABLE_STATUS or status >= 500


class CallMonitor:
    """Per calling thread: the response body as received, its headers, a deadline and a cancel
    signal. Installed as a response event hook on the SDK's HTTP client, it wraps
    `iter_bytes`, which the SDKs use for plain and streamed replies alike."""

    def __init__(self) -> None:
        self.local = threading.local()

    def start(self, deadline: float, cancel: threading.Event | None) -> None:
        self.local.chunks = []
        self.local.headers = {}
        self.local.deadline = deadline
        self.local.cancel = cancel

    def take(self) -> bytes:
        return b"".join(getattr(self.local, "chunks", []))

    def headers(self) -> dict[str, str]:
        return dict(getattr(self.local, "headers", {}))

    def check(self) -> None:
        cancel = getattr(self.local, "cancel", None)
        if cancel is not None and cancel.is_set():
            raise CallAborted("cancelled")
        if time.monotonic() > getattr(self.local, "deadline", float("inf")):
            raise CallAborted("deadline")

    def hook(self, response: Any) -> None:
        chunks = getattr(self.local, "chunks", None)
        if chunks is None:
            return
        self.local.headers = {k.lower(): v for k, v in response.headers.items()}
        # By the class and a weak reference: a bound method kept in the response's own attribute
        # made every response a reference cycle, for the collector to find (77 objects a call).
        original = type(response).iter_bytes
        owner = weakref.ref(response)
        check = self.check

        def iter_bytes(*args: Any, **kwargs: Any) -> Iterator[bytes]:
            for chunk in original(owner(), *args, **kwargs):
                chunks.append(chunk)
                check()
                yield chunk

        response.iter_bytes = iter_bytes


def field_of(value: Any, name: str) -> Any:
    """An attribute of an SDK object, or a key of a dict; None when absent (replies are read
    with every field optional)."""
    if isinstance(value, dict):
        return value.get(name)
    return getattr(value, name, None)


def text_of(value: Any, what: str) -> str | None:
    """A field that must be text when present; ValueError (a reply we cannot read) otherwise."""
    if value is None or isinstance(value, str):
        return value
    raise ValueError(f"{what} is {type(value).__name__}, not text")


# The objects a usage holds (their own counts inside): OpenAI's `prompt_tokens_details`,
# `completion_tokens_details`, Anthropic's `cache_creation` and `server_tool_use`.
USAGE_OBJECTS = ("cache_creation", "server_tool_use")


def usage_dict(usage: Any) -> dict[str, Any]:
    """An SDK usage object (or a dict) as a plain dict of token counts: fields the API left out,
    and values that are not counts (a server's malformed usage: -5, 1.5, "12", an object where a
    count belongs), are dropped. docs/runs.md promises exactly this."""
    if not usage:
        return {}
    if not isinstance(usage, dict):
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # pydantic warns about the very values dropped here
            usage = usage.model_dump(exclude_none=True)
    return _counts(usage, nested=True)


def count_of(value: Any) -> int | None:
    """A whole number of tokens (or requests) from 0 up (2.0 is 2, as an SDK may have made it);
    None for anything else: a bool, a fraction, a negative number, text, an object."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and not value.is_integer():
        return None
    return int(value) if 0 <= value < 10**15 else None


def _counts(value: dict[str, Any], nested: bool) -> dict[str, Any]:
    clean: dict[str, Any] = {}
    for key, item in value.items():
        if not isinstance(key, str):
            continue
        if isinstance(item, dict):
            if nested and (key.endswith("_details") or key in USAGE_OBJECTS):
                inner = _counts(item, nested=False)
                if inner:
                    clean[key] = inner
        elif (count := count_of(item)) is not None:
            clean[key] = count
    return clean


def aborted_by(exc: BaseException) -> CallAborted | None:
    """The CallAborted behind an exception the SDK wrapped, if there is one."""
    seen = 0
    current: BaseException | None = exc
    while current is not None and seen < 10:
        if isinstance(current, CallAborted):
            return current
        current = current.__cause__ or current.__context__
        seen += 1
    return None


def aborted_error(reason: CallAborted, spec: ModelSpec, timeout: float) -> ProviderError:
    if reason.reason == "cancelled":
        return ProviderError("cancelled", f"{spec.spec}: call cancelled")
    return ProviderError(
        "timeout",
        f"{spec.spec}: no complete reply within {timeout:g} s (the --timeout deadline)",
        retryable=True,
    )


def body_snippet(body: bytes, content_type: str | None) -> str:
    text = SCRUBBER.bytes(body)[:200].decode("utf-8", "replace").strip()
    kind = f" ({content_type})" if content_type else ""
    return f"{text!r}{kind}"


def sdk_error(
    exc: Exception, sdk: Any, spec: ModelSpec, monitor: CallMonitor, timeout: float
) -> ProviderError:
    """Classify an exception of the anthropic or openai SDK (they share one error hierarchy)."""
    aborted = aborted_by(exc)
    if aborted is not None:
        return aborted_error(aborted, spec, timeout)
    if isinstance(exc, sdk.APIStatusError):
        headers = {k.lower(): v for k, v in exc.response.headers.items()}
        try:
            body = exc.response.content
        except Exception:  # a streamed reply the SDK did not read: the monitor kept what arrived
            body = monitor.take()
        request_id = headers.get("request-id") or headers.get("x-request-id")
        error_type = _error_type(exc.body)
        if exc.status_code < 400:
            # An error event inside a 200 stream (overloaded_error, api_error): transient.
            retryable = error_type not in (
                "invalid_request_error",
                "authentication_error",
                "permission_error",
            )
            return ProviderError(
                "stream_error",
                f"{spec.spec}: the stream reported an error: {error_type or exc.message}",
                status=exc.status_code,
                retryable=retryable,
                request_id=request_id,
                body=monitor.take() or body,
                headers=headers,
            )
        return ProviderError(
            "http_status",
            f"{spec.spec}: HTTP {exc.status_code}: {exc.message}",
            status=exc.status_code,
            retryable=status_retryable(exc.status_code),
            retry_after=parse_retry_after(headers),
            request_id=request_id,
            body=body or monitor.take(),
            headers=headers,
        )
    if isinstance(exc, sdk.APITimeoutError):
        return ProviderError(
            "timeout",
            f"{spec.spec}: no complete reply within {timeout:g} s (the --timeout deadline)",
            retryable=True,
        )
    if isinstance(exc, sdk.APIConnectionError):
        cause = exc.__cause__
        detail = f"{type(cause).__name__}: {cause}" if cause else str(exc)
        return ProviderError(
            "connection", f"{spec.spec}: cannot connect or connection lost ({detail})", retryable=True
        )
    if isinstance(exc, sdk.APIError):
        # openai raises APIError for an error chunk inside a stream.
        error_type = _error_type(getattr(exc, "body", None))
        return ProviderError(
            "stream_error",
            f"{spec.spec}: the stream reported an error: {error_type or exc}",
            retryable=error_type != "invalid_request_error",
            body=monitor.take(),
        )
    return ProviderError("api", f"{spec.spec}: {exc}")


def _error_type(body: Any) -> str | None:
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict):
            return error.get("type") or error.get("code")
    return None


def timed_out(exc: BaseException) -> bool:
    """Whether a transport error is the call's deadline: a timeout of the HTTP stack (the
    deadline bounds each read), or any error once the deadline has passed."""
    from .. import deadline

    left = deadline.remaining()
    return any(cls.__name__ == "TimeoutException" for cls in type(exc).__mro__) or (
        left is not None and left <= 0
    )


def transport_error(exc: Exception, spec: ModelSpec, monitor: CallMonitor, timeout: float) -> ProviderError:
    """A connection reset or a malformed chunk while reading a stream (outside the SDK's request);
    a stream cut off by the deadline is a timeout, as it is when the deadline passes earlier."""
    if timed_out(exc):
        return aborted_error(CallAborted("deadline"), spec, timeout)
    return ProviderError(
        "connection",
        f"{spec.spec}: connection lost while streaming ({type(exc).__name__}: {exc})",
        retryable=True,
        body=monitor.take(),
    )


def bad_body(spec: ModelSpec, monitor: CallMonitor, exc: Exception) -> ProviderError:
    """A 200 reply the SDK could not read (a proxy's HTML page, cut-off JSON): transient."""
    headers = monitor.headers()
    body = monitor.take()
    return ProviderError(
        "bad_body",
        f"{spec.spec}: the reply is not a valid API response ({type(exc).__name__}): "
        f"{body_snippet(body, headers.get('content-type'))}",
        status=200,
        retryable=True,
        request_id=headers.get("request-id") or headers.get("x-request-id"),
        body=body,
        headers=headers,
    )


def not_a_stream(body: bytes) -> bool:
    """A reply to a streamed request that holds no server-sent event at all (a proxy's HTML page,
    a JSON document): not a stream that was cut short, a reply of the wrong kind."""
    if not body.strip():
        return False  # nothing came: the stream was cut before its first event
    fields = (b"data:", b"event:", b"id:", b"retry:", b":")
    return not any(line.lstrip().startswith(fields) for line in body.splitlines())


def unfinished_stream(spec: ModelSpec, monitor: CallMonitor, events: int, what: str) -> ProviderError:
    """A stream that ended before its final event: `truncated`, or `bad_body` when what came was
    no event stream at all."""
    if events == 0 and not_a_stream(monitor.take()):
        return bad_body(spec, monitor, ValueError("the reply to a streamed request is not an event stream"))
    return truncated(spec, monitor, what)


def short_of_its_length(spec: ModelSpec, monitor: CallMonitor) -> ProviderError | None:
    """A reply whose body ended before the length its `content-length` declared (the connection
    closed early): lost, and retried, even when an SDK stopped reading at its final event."""
    declared = monitor.headers().get("content-length", "")
    body = monitor.take()
    if not declared.isdigit() or len(body) >= int(declared):
        return None
    return ProviderError(
        "connection",
        f"{spec.spec}: connection lost: the reply ended after {len(body)} of the {declared} bytes its "
        "content-length declared",
        retryable=True,
        body=body,
        headers=monitor.headers(),
    )


def truncated(spec: ModelSpec, monitor: CallMonitor, what: str) -> ProviderError:
    return ProviderError(
        "truncated",
        f"{spec.spec}: the stream ended before its final event ({what}); the partial text is not an answer",
        retryable=True,
        body=monitor.take(),
        headers=monitor.headers(),
    )


def api_key(spec: ModelSpec) -> str | None:
    """The key from the environment; a missing required key is a StartError naming the variable."""
    # A server can echo any key it sees in the environment, not only the one this model uses.
    # (A short one of them is left alone: warning about a key this run never uses would be noise.)
    for name in DEFAULT_KEY_ENV.values():
        value = os.environ.get(name) or ""
        if len(value) >= MIN_SECRET_LENGTH:
            SCRUBBER.add(name, value)
    env = spec.key_env
    if env is None:
        return None
    value = os.environ.get(env)
    if not value:
        raise StartError(f"model {spec.spec}: environment variable {env} is not set (it holds the API key)")
    SCRUBBER.add(env, value)
    return value


class Provider:
    """One model behind one API. Subclasses implement `complete` and map SDK errors."""

    def __init__(self, spec: ModelSpec, params: GenerationParams) -> None:
        self.spec = spec
        self.params = params
        self.monitor = CallMonitor()

    def complete(
        self, messages: Sequence[dict[str, str]], cancel: threading.Event | None = None
    ) -> Completion:
        raise NotImplementedError

    @contextmanager
    def calling(
        self, sdk: Any, transport: type[Exception], cancel: threading.Event | None = None
    ) -> Iterator[None]:
        """One SDK call: watched by the monitor (which `cancel` stops), within the call's deadline,
        what it raises turned into a ProviderError (errors_of)."""
        self.monitor.start(time.monotonic() + self.params.timeout, cancel)
        with deadline.until(self.params.timeout), self.errors_of(sdk, transport):
            yield

    @contextmanager
    def errors_of(self, sdk: Any, transport: type[Exception]) -> Iterator[None]:
        """Turn what an SDK call raises into a ProviderError the retry policy can read."""
        try:
            yield
        except sdk.APIError as exc:
            raise sdk_error(exc, sdk, self.spec, self.monitor, self.params.timeout) from None
        except CallAborted as exc:
            raise aborted_error(exc, self.spec, self.params.timeout) from None
        except transport as exc:  # a reset or a bad chunk while reading a stream
            raise transport_error(exc, self.spec, self.monitor, self.params.timeout) from None
        except ProviderError:
            raise
        except Exception as exc:  # whatever else the SDK raised on a reply it could not read
            raise bad_body(self.spec, self.monitor, exc) from None

    def batch_api(self) -> Any:
        """This model's batch API (providers.batching.BatchAPI); InputError when it has none."""
        from ..errors import InputError

        raise InputError(
            f"model {self.spec.spec}: promptprobe has no batch API for {self.spec.provider} models; "
            "run it without --batch"
        )

    def address(self) -> tuple[str, int] | None:
        """The host and port this provider's calls go to (None when it cannot tell)."""
        url = getattr(getattr(self, "client", None), "base_url", None)
        host = getattr(url, "host", None)
        if not host:
            return None
        return host, url.port or (443 if url.scheme == "https" else 80)

    def close(self) -> None:
        """Release the SDK client."""
