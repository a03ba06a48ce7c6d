"""Anthropic Messages API through the official SDK (SDK retries off: the runner owns them)."""

import json
import threading
from collections.abc import Collection, Iterator, Sequence
from dataclasses import replace
from typing import Any

import anthropic
import httpcore2
import httpx2

from .. import deadline
from ..models import ModelSpec
from .base import (
    CallAborted,
    Completion,
    GenerationParams,
    Provider,
    ProviderError,
    bad_body,
    field_of,
    text_of,
    unfinished_stream,
    usage_dict,
)
from .batching import (
    FIND_PAGES,
    FIND_WINDOW,
    BatchAPI,
    BatchLimits,
    BatchResult,
    BatchState,
    Submission,
    count_field,
    failed,
    id_of,
    listed,
    read_result,
    seconds_of,
    split_lines,
    succeeded,
    text_field,
)

CACHED = {"type": "ephemeral"}


class AnthropicProvider(Provider):
    def __init__(self, spec: ModelSpec, params: GenerationParams, key: str | None) -> None:
        super().__init__(spec, params)
        options: dict[str, Any] = {
            "api_key": key,
            "max_retries": 0,
            "timeout": httpx2.Timeout(params.timeout, connect=min(10.0, params.timeout)),
            "http_client": anthropic.DefaultHttpxClient(event_hooks={"response": [self.monitor.hook]}),
        }
        if spec.base_url:  # otherwise the SDK honours ANTHROPIC_BASE_URL itself
            options["base_url"] = spec.base_url
        self.client = self.make_client(options)
        deadline.apply(options["http_client"], httpcore2)  # --timeout bounds headers and connect too
        self.client.messages.with_raw_response  # noqa: B018  # its lazy imports now, not at the first call

    def make_client(self, options: dict[str, Any]) -> Any:
        """The SDK client (a subclass picks another of the SDK's client classes)."""
        return anthropic.Anthropic(**options)

    def _request(self, messages: Sequence[dict[str, str]]) -> dict[str, Any]:
        system = "\n\n".join(m["content"] for m in messages if m["role"] == "system")
        request: dict[str, Any] = {
            "model": self.spec.model,
            "max_tokens": self.params.max_tokens,
            "messages": [
                {"role": m["role"], "content": m["content"]} for m in messages if m["role"] != "system"
            ],
        }
        if system:
            request["system"] = system
        if self.params.cache:
            # Cache the prefix: the system prompt (with the passages), then the whole conversation,
            # so the repeats of one question read it back instead of paying for it again.
            if system:
                request["system"] = [{"type": "text", "text": system, "cache_control": CACHED}]
            if request["messages"]:
                last = request["messages"][-1]
                last["content"] = [{"type": "text", "text": last["content"], "cache_control": CACHED}]
        if self.params.temperature is not None:
            # Recent SDKs dropped the keyword (newer models refuse it); older models still
            # take it on the wire, so it goes in the body when the user asks for it.
            request["extra_body"] = {"temperature": self.params.temperature}
        return request  # the Messages API has no seed parameter

    def complete(
        self, messages: Sequence[dict[str, str]], cancel: threading.Event | None = None
    ) -> Completion:
        request = self._request(messages)
        with self.calling(anthropic, httpx2.TransportError, cancel):
            if self.params.stream:
                return self._stream(request)
            raw = self.client.messages.with_raw_response.create(**request)
            try:
                reply = read_message(raw.parse())
            except Exception as exc:  # HTML, cut-off JSON, or JSON of another shape: not a reply
                raise bad_body(self.spec, self.monitor, exc) from None
            return Completion(
                text=reply["text"],
                body=self.monitor.take() or raw.http_response.content,
                stop_reason=reply["stop"],
                usage=reply["usage"],
                request_id=raw.headers.get("request-id"),
                model=reply["model"],
                headers=self.monitor.headers(),
            )

    def _stream(self, request: dict[str, Any]) -> Completion:
        stream = self.client.messages.create(stream=True, **request)
        request_id = stream.response.headers.get("request-id")
        reader = StreamReader()
        try:
            for event in stream:
                reader.add(event)
        except (anthropic.APIError, httpx2.TransportError, CallAborted):
            raise  # errors_of classifies them
        except Exception as exc:  # an event that is not JSON, or JSON of another shape
            raise bad_body(self.spec, self.monitor, exc) from None
        if not reader.finished:
            raise unfinished_stream(self.spec, self.monitor, reader.events, "no message_stop event")
        return Completion(
            "".join(reader.texts) if reader.texts else None,
            self.monitor.take(),
            reader.stop,
            reader.usage,
            request_id,
            reader.model,
            headers=self.monitor.headers(),
        )

    def batch_api(self) -> "AnthropicBatch":
        return AnthropicBatch(self)

    def close(self) -> None:
        self.client.close()


def read_message(message: Any) -> dict[str, Any]:
    """Text, stop reason, usage and model of a Messages API reply, every field optional;
    ValueError when it is not a message (no content list, a text block without text)."""
    content = field_of(message, "content")
    if not isinstance(content, list):
        raise ValueError("the reply has no content list")
    texts = []
    for block in content:
        if field_of(block, "type") == "text":
            text = text_of(field_of(block, "text"), "a text block's text")
            if text is None:
                raise ValueError("a text block has no text")
            texts.append(text)
    return {
        "text": "".join(texts) if texts else None,
        "stop": text_of(field_of(message, "stop_reason"), "stop_reason"),
        "usage": usage_dict(field_of(message, "usage")),
        "model": text_of(field_of(message, "model"), "model"),
    }


class StreamReader:
    """The parts of a Messages API stream, read event by event with every field optional."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.stop: str | None = None
        self.model: str | None = None
        self.usage: dict[str, Any] = {}
        self.finished = False
        self.events = 0

    def add(self, event: Any) -> None:
        self.events += 1
        kind = field_of(event, "type")
        if kind == "message_start":
            message = field_of(event, "message")
            self.model = text_of(field_of(message, "model"), "model")
            self.usage.update(usage_dict(field_of(message, "usage")))
        elif kind == "content_block_delta":
            delta = field_of(event, "delta")
            if field_of(delta, "type") == "text_delta":
                text = text_of(field_of(delta, "text"), "text_delta")
                if text:
                    self.texts.append(text)
        elif kind == "message_delta":
            self.stop = text_of(field_of(field_of(event, "delta"), "stop_reason"), "stop_reason") or self.stop
            self.usage.update(usage_dict(field_of(event, "usage")))
        elif kind == "message_stop":
            self.finished = True


class AnthropicBatch(BatchAPI):
    """Anthropic Message Batches: the requests in one create call, the results as a JSONL stream.
    A batch carries no metadata here, so a submission is found again by its size and creation
    time, and confirmed by its results' custom ids (which name the submission)."""

    limits = BatchLimits(requests=100_000, bytes=250 * 1024 * 1024)  # the API's 100,000 and 256 MB
    marked = False

    def __init__(self, provider: AnthropicProvider) -> None:
        self.provider = provider

    def _call(self, call: Any) -> Any:
        """One SDK call, its reply read inside (a reply of another shape is a bad_body error)."""
        with self.provider.calling(anthropic, httpx2.TransportError):
            return call()

    def body(self, messages: Sequence[dict[str, str]]) -> dict[str, Any]:
        request = self.provider._request(messages)
        request.update(request.pop("extra_body", {}))  # temperature travels in the params here
        return request

    def check(self) -> None:
        self._call(lambda: listed(self.provider.client.messages.batches.list(limit=1)))

    def upload(self, submission: Submission, requests: Sequence[tuple[str, bytes]]) -> Submission:
        return replace(submission, requests=requests)  # they go in the create call itself

    def create(self, submission: Submission) -> str:
        batches = self.provider.client.messages.batches
        return self._call(
            lambda: id_of(
                batches.create(
                    requests=[
                        {"custom_id": cid, "params": json.loads(body)} for cid, body in submission.requests
                    ]
                )
            )
        )

    def find(self, submission: Submission, known: Collection[str] = ()) -> str | None:
        """The batch of the submission's size created nearest the time it was recorded, within
        FIND_WINDOW either way, and none of `known`."""
        at = seconds_of(submission.at) or 0.0
        best: tuple[float, str] | None = None
        after = None
        for _ in range(FIND_PAGES):
            page = self._call(
                lambda after=after: self.provider.client.messages.batches.list(
                    limit=100, **({"after_id": after} if after else {})
                )
            )
            batches = listed(page)
            for batch in batches:
                batch_id = id_of(batch)
                created = seconds_of(field_of(batch, "created_at"))
                if batch_id in known or created is None or abs(created - at) > FIND_WINDOW:
                    continue
                if _state_of(batch).total == submission.count and (
                    best is None or abs(created - at) < best[0]
                ):
                    best = (abs(created - at), batch_id)
            oldest = min((seconds_of(field_of(b, "created_at")) or 0.0 for b in batches), default=0.0)
            if not batches or not field_of(page, "has_more") or oldest < at - FIND_WINDOW:
                break
            after = id_of(batches[-1])
        return best[1] if best else None

    def state(self, batch_id: str) -> BatchState:
        return self._call(lambda: _state_of(self.provider.client.messages.batches.retrieve(batch_id)))

    def results(self, batch_id: str, state: BatchState) -> Iterator[BatchResult]:
        spec = self.provider.spec.spec
        decoder = self._call(lambda: self.provider.client.messages.batches.results(batch_id))
        try:
            lines = split_lines(decoder.http_response.iter_bytes())
            while True:
                # Only the read is the provider's: what the caller does with a line is not wrapped.
                with self.provider.errors_of(anthropic, httpx2.TransportError):
                    line = next(lines, None)
                if line is None:
                    return
                yield read_result(spec, line, lambda item, line=line: _result(spec, item, line))
        finally:
            decoder.close()

    def cancel(self, batch_id: str) -> None:
        self._call(lambda: self.provider.client.messages.batches.cancel(batch_id))


def _state_of(batch: Any) -> BatchState:
    status = text_field(field_of(batch, "processing_status"), "processing_status")
    if not status:
        raise ValueError(f"the reply is not a message batch ({type(batch).__name__})")
    counts = field_of(batch, "request_counts")
    done = sum(
        count_field(field_of(counts, name), f"request_counts.{name}")
        for name in ("succeeded", "errored", "canceled", "expired")
    )
    processing = count_field(field_of(counts, "processing"), "request_counts.processing")
    known = status in ("in_progress", "canceling", "ended")
    return BatchState(status, status == "ended", done, done + processing, known=known)


def _result(spec: str, item: dict[str, Any], line: bytes) -> BatchResult:
    """One line of the results stream (every odd field raises: read_result makes it bad_body)."""
    custom_id = item["custom_id"]
    result = item["result"]
    kind = text_field(field_of(result, "type"), "result.type") if isinstance(result, dict) else None
    if kind is None:
        raise ValueError("the line has no result type")
    if kind == "succeeded":
        message = result.get("message")
        return succeeded(
            spec,
            custom_id,
            line,
            "a message",
            lambda: read_message(message),
            lambda: text_field(field_of(message, "id"), "id"),
        )
    if kind == "errored":
        outer = result.get("error")
        error = field_of(outer, "error") or outer if isinstance(outer, dict) else outer
        if error is not None and not isinstance(error, dict | str):
            raise ValueError(f"error is {type(error).__name__}")
        error_type = text_field(field_of(error, "type"), "error.type") if isinstance(error, dict) else None
        message = (
            text_field(field_of(error, "message"), "error.message") if isinstance(error, dict) else error
        )
        retryable = error_type not in (
            "invalid_request_error",
            "authentication_error",
            "permission_error",
            "not_found_error",
        )
        return failed(
            custom_id, line, "batch_error", f"{spec}: {error_type or 'error'}: {message}", retryable
        )
    if kind == "expired":
        return failed(
            custom_id, line, "batch_expired", f"{spec}: the request expired before the batch reached it", True
        )
    return failed(
        custom_id, line, "batch_cancelled", f"{spec}: the request was cancelled with its batch", False
    )


def make(spec: ModelSpec, params: GenerationParams, key: str | None) -> AnthropicProvider:
    return AnthropicProvider(spec, params, key)


__all__ = ["AnthropicProvider", "ProviderError", "make"]
