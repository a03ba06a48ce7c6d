"""OpenAI Chat Completions, and any OpenAI-compatible server (Ollama, vLLM, llama.cpp)."""

import json
import re
import threading
from collections.abc import Collection, Iterator, Sequence
from dataclasses import replace
from typing import Any

import httpcore2
import httpx2
import openai
import pydantic

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
    short_of_its_length,
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
    status_error,
    succeeded,
    text_field,
)

# The SDK refuses an empty key; local servers ignore it. Never the user's OPENAI_API_KEY,
# which must not be sent to a server it was not meant for.
NO_KEY = "no-key-needed"
# Reasoning models refuse `max_tokens` (HTTP 400) and take `max_completion_tokens`.
COMPLETION_TOKENS_MODELS = re.compile(r"^(o\d|gpt-5)")
# What create() gives a Chat Completions request besides its body: the key as a bearer token.
CHAT_OPTIONS: Any = {"security": {"bearer_auth": True}}


def uses_max_completion_tokens(model: str) -> bool:
    return bool(COMPLETION_TOKENS_MODELS.match(model))


class OpenAIProvider(Provider):
    def __init__(self, spec: ModelSpec, params: GenerationParams, key: str | None) -> None:
        super().__init__(spec, params)
        options: dict[str, Any] = {
            "api_key": key or NO_KEY,
            "max_retries": 0,
            "timeout": httpx2.Timeout(params.timeout, connect=min(10.0, params.timeout)),
            "http_client": openai.DefaultHttpxClient(event_hooks={"response": [self.monitor.hook]}),
        }
        if spec.base_url:
            options["base_url"] = spec.base_url
        self.client = self.make_client(options)
        deadline.apply(options["http_client"], httpcore2)  # --timeout bounds headers and connect too
        if params.stream:
            self.client.chat.completions  # noqa: B018  # its lazy imports now, not at the first call

    def make_client(self, options: dict[str, Any]) -> Any:
        """The SDK client (a subclass picks another of the SDK's client classes)."""
        return openai.OpenAI(**options)

    def _request(self, messages: Sequence[dict[str, str]]) -> dict[str, Any]:
        tokens = "max_completion_tokens" if uses_max_completion_tokens(self.spec.model) else "max_tokens"
        request: dict[str, Any] = {
            "model": self.spec.model,
            "messages": [{"role": m["role"], "content": m["content"]} for m in messages],
            tokens: self.params.max_tokens,
        }
        if self.params.temperature is not None:
            request["temperature"] = self.params.temperature
        if self.params.seed is not None:
            request["seed"] = self.params.seed
        return request

    def complete(
        self, messages: Sequence[dict[str, str]], cancel: threading.Event | None = None
    ) -> Completion:
        request = self._request(messages)
        with self.calling(openai, httpx2.TransportError, cancel):
            if self.params.stream:
                return self._stream(request)
            # The body as create() would send it, posted as it is: its messages are plain strings,
            # which create() walks against its types (about 1 ms of CPU a call) to change nothing.
            response = self.client.post(
                "/chat/completions", body=sdk_ordered(request), cast_to=httpx2.Response, options=CHAT_OPTIONS
            )
            try:
                reply = read_completion(reply_of(response))
            except Exception as exc:  # HTML, cut-off JSON, or JSON of another shape: not a reply
                raise bad_body(self.spec, self.monitor, exc) from None
            return Completion(
                text=reply["text"],
                body=self.monitor.take() or response.content,
                stop_reason=reply["stop"],
                usage=reply["usage"],
                request_id=response.headers.get("x-request-id"),
                model=reply["model"],
                refusal=reply["refusal"],
                headers=self.monitor.headers(),
            )

    def _stream(self, request: dict[str, Any]) -> Completion:
        stream = self.client.chat.completions.create(
            stream=True, stream_options={"include_usage": True}, **request
        )
        request_id = stream.response.headers.get("x-request-id")
        reader = StreamReader()
        try:
            for chunk in stream:
                reader.add(chunk)
        except (openai.APIError, httpx2.TransportError, CallAborted):
            raise  # errors_of classifies them
        except Exception as exc:  # an event that is not JSON, or JSON of another shape
            raise bad_body(self.spec, self.monitor, exc) from None
        if reader.stop is None:
            raise unfinished_stream(self.spec, self.monitor, reader.events, "no finish_reason")
        if (short := short_of_its_length(self.spec, self.monitor)) is not None:
            raise short  # the SDK stops reading at [DONE]: a body cut after it would pass unseen
        return Completion(
            "".join(reader.texts) if reader.texts else None,
            self.monitor.take(),
            reader.stop,
            reader.usage,
            request_id,
            reader.model,
            refusal="".join(reader.refusals) or None,
            headers=self.monitor.headers(),
        )

    def batch_api(self) -> "OpenAIBatch":
        return OpenAIBatch(self)

    def close(self) -> None:
        self.client.close()


def sdk_ordered(request: dict[str, Any]) -> dict[str, Any]:
    """A request's keys in the order create() sends them (seed before temperature)."""
    if "seed" in request and "temperature" in request:
        request["temperature"] = request.pop("temperature")
    return request


def reply_of(response: httpx2.Response) -> Any:
    """A reply's JSON as the SDK's parse reads it: a body not labelled JSON is read as JSON when it
    is, else as text; the usage is the SDK's own object (its order, its coercions)."""
    content_type = response.headers.get("content-type", "*").split(";")[0]
    if content_type.endswith("json"):
        data = response.json()
    else:
        try:
            data = response.json()
        except Exception:  # not JSON: the text, which read_completion refuses as no reply
            return response.text
    if isinstance(data, dict) and "usage" in data:
        # Only the usage is built as the SDK builds it: the whole reply costs 0.25 ms of CPU more.
        data = {**data, "usage": sdk_usage(data["usage"])}
    return data


def sdk_usage(value: Any) -> Any:
    """A reply's usage as the SDK's parse builds it: validated when it validates (which is what the
    SDK tries first, and 20 times quicker than its construct), else constructed as it is."""
    try:
        return openai.types.CompletionUsage.model_validate(value)
    except pydantic.ValidationError:
        return openai.types.chat.ChatCompletion.construct(usage=value).usage


def read_completion(completion: Any) -> dict[str, Any]:
    """Text, stop reason, usage, model and refusal of a Chat Completions reply, every field
    optional; ValueError when there is no choice to read (the reply is not an answer)."""
    choices = field_of(completion, "choices")
    if not choices:
        raise ValueError("the reply has no choices")
    choice = choices[0]
    message = field_of(choice, "message")
    if message is None:
        raise ValueError("the first choice has no message")
    usage = field_of(completion, "usage")
    return {
        "text": text_of(field_of(message, "content"), "message.content"),
        "stop": text_of(field_of(choice, "finish_reason"), "finish_reason"),
        "usage": usage_dict(usage),
        "model": text_of(field_of(completion, "model"), "model"),
        "refusal": text_of(field_of(message, "refusal"), "message.refusal"),
    }


class StreamReader:
    """The parts of a Chat Completions stream, read chunk by chunk with every field optional."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.refusals: list[str] = []
        self.stop: str | None = None
        self.model: str | None = None
        self.usage: dict[str, Any] = {}
        self.events = 0

    def add(self, chunk: Any) -> None:
        self.events += 1
        self.model = text_of(field_of(chunk, "model"), "model") or self.model
        usage = field_of(chunk, "usage")
        if usage:
            self.usage = usage_dict(usage)
        for choice in field_of(chunk, "choices") or []:
            if choice is None or isinstance(choice, str | int | float | list):
                raise ValueError(f"a streamed choice is {type(choice).__name__}, not an object")
            delta = field_of(choice, "delta")
            if delta is None and field_of(choice, "finish_reason") is None:
                raise ValueError("a streamed choice has neither a delta (its message) nor a finish_reason")
            content = text_of(field_of(delta, "content"), "delta.content") if delta is not None else None
            if content:
                self.texts.append(content)
            refusal = text_of(field_of(delta, "refusal"), "delta.refusal") if delta is not None else None
            if refusal:
                self.refusals.append(refusal)
            finish = text_of(field_of(choice, "finish_reason"), "finish_reason")
            if finish:
                self.stop = finish


class OpenAIBatch(BatchAPI):
    """OpenAI Batch (and Azure's): the requests as a JSONL file, a batch over it (its metadata names
    the submission), the output and error files read back line by line."""

    limits = BatchLimits(requests=50_000, bytes=190 * 1024 * 1024)  # the API's 50,000 and 200 MB

    def __init__(self, provider: "OpenAIProvider", endpoint: str = "/v1/chat/completions") -> None:
        self.provider = provider
        self.endpoint = endpoint

    def _call(self, call: Any) -> Any:
        """One SDK call, its reply read inside (a reply of another shape is a bad_body error)."""
        with self.provider.calling(openai, httpx2.TransportError):
            return call()

    def body(self, messages: Sequence[dict[str, str]]) -> dict[str, Any]:
        return self.provider._request(messages)

    def check(self) -> None:
        self._call(lambda: listed(self.provider.client.batches.list(limit=1)))

    def upload(self, submission: Submission, requests: Sequence[tuple[str, bytes]]) -> Submission:
        url = json.dumps(self.endpoint).encode()
        data = b"".join(
            b'{"custom_id":'
            + json.dumps(cid).encode()
            + b',"method":"POST","url":'
            + url
            + b',"body":'
            + body
            + b"}\n"
            for cid, body in requests
        )
        client = self.provider.client
        file_id = self._call(
            lambda: id_of(client.files.create(file=(f"{submission.label}.jsonl", data), purpose="batch"))
        )
        return replace(submission, input_file=file_id)

    def create(self, submission: Submission) -> str:
        return self._call(
            lambda: id_of(
                self.provider.client.batches.create(
                    input_file_id=submission.input_file,
                    endpoint=self.endpoint,
                    completion_window="24h",
                    metadata={"promptprobe": submission.label},
                )
            )
        )

    def find(self, submission: Submission, known: Collection[str] = ()) -> str | None:
        """The batch made from the submission's input file (or carrying its label), looking back
        from the newest batch to FIND_WINDOW before the submission was recorded."""
        since = (seconds_of(submission.at) or 0.0) - FIND_WINDOW
        after = None
        for _ in range(FIND_PAGES):
            page = self._call(
                lambda after=after: self.provider.client.batches.list(
                    limit=100, **({"after": after} if after else {})
                )
            )
            batches = listed(page)
            for batch in batches:
                batch_id = id_of(batch)
                metadata = field_of(batch, "metadata")
                label = field_of(metadata, "promptprobe") if metadata is not None else None
                made_from = field_of(batch, "input_file_id")
                if batch_id not in known and (
                    (submission.input_file and made_from == submission.input_file)
                    or label == submission.label
                ):
                    return batch_id
            created = [seconds_of(field_of(b, "created_at")) for b in batches]
            if not batches or not field_of(page, "has_more") or min(c or 0.0 for c in created) < since:
                return None
            after = id_of(batches[-1])
        return None

    def state(self, batch_id: str) -> BatchState:
        return self._call(lambda: _state_of(self.provider.client.batches.retrieve(batch_id)))

    def results(self, batch_id: str, state: BatchState) -> Iterator[BatchResult]:
        spec = self.provider.spec.spec
        for file_id in (state.files.get("output"), state.files.get("errors")):
            if not file_id:
                continue
            content = self._call(
                lambda file_id=file_id: _bytes_of(self.provider.client.files.content(file_id))
            )
            for line in split_lines(iter([content])):
                yield read_result(spec, line, lambda item, line=line: _result(spec, item, line))

    def cancel(self, batch_id: str) -> None:
        self._call(lambda: self.provider.client.batches.cancel(batch_id))


def _bytes_of(content: Any) -> bytes:
    data = field_of(content, "content")
    if not isinstance(data, bytes):
        raise ValueError("the file's content is not bytes")
    return data


OPENAI_STATUSES = frozenset(
    {"validating", "failed", "in_progress", "finalizing", "completed", "expired", "cancelling", "cancelled"}
)


def _state_of(batch: Any) -> BatchState:
    status = text_field(field_of(batch, "status"), "status")
    if not status:
        raise ValueError(f"the reply is not a batch ({type(batch).__name__})")
    counts = field_of(batch, "request_counts")
    completed = count_field(field_of(counts, "completed"), "request_counts.completed")
    failed = count_field(field_of(counts, "failed"), "request_counts.failed")
    error = None
    if status == "failed":
        errors = field_of(field_of(batch, "errors"), "data") or []
        items = errors if isinstance(errors, list) else [errors]
        error = (
            "; ".join(f"{field_of(e, 'code')}: {field_of(e, 'message')}" for e in items) or "the batch failed"
        )
    return BatchState(
        status,
        status in ("completed", "failed", "expired", "cancelled"),
        completed + failed,
        count_field(field_of(counts, "total"), "request_counts.total"),
        error,
        {
            "output": text_field(field_of(batch, "output_file_id"), "output_file_id"),
            "errors": text_field(field_of(batch, "error_file_id"), "error_file_id"),
        },
        known=status in OPENAI_STATUSES,
    )


def _result(spec: str, item: dict[str, Any], line: bytes) -> BatchResult:
    """One line of an output or error file (every odd field raises: read_result makes it bad_body)."""
    custom_id = item["custom_id"]
    error = item.get("error")
    if error:
        if not isinstance(error, dict):
            raise ValueError(f"error is {type(error).__name__}, not an object")
        code = text_field(error.get("code"), "error.code")
        message = text_field(error.get("message"), "error.message")
        kind = {"batch_expired": "batch_expired", "batch_cancelled": "batch_cancelled"}.get(
            code or "", "batch_error"
        )
        return failed(custom_id, line, kind, f"{spec}: {code or 'error'}: {message}", kind == "batch_expired")
    response = item.get("response")
    if not isinstance(response, dict):
        raise ValueError(f"response is {type(response).__name__}, not an object")
    status = response.get("status_code")
    if isinstance(status, bool) or not isinstance(status, int):
        raise ValueError(f"status_code is {status!r}, not a number")
    if status != 200:
        body = response.get("body")
        detail = field_of(body, "error") if isinstance(body, dict) else None
        detail = field_of(detail, "message") if isinstance(detail, dict) else detail
        message = detail if isinstance(detail, str) and detail else "no detail"
        return BatchResult(custom_id, line, error=status_error(spec, status, message, line))
    return succeeded(
        spec,
        custom_id,
        line,
        "a reply",
        lambda: read_completion(response.get("body")),
        lambda: text_field(response.get("request_id"), "request_id"),
    )


def make(spec: ModelSpec, params: GenerationParams, key: str | None) -> OpenAIProvider:
    return OpenAIProvider(spec, params, key)


__all__ = ["OpenAIBatch", "OpenAIProvider", "ProviderError", "make"]
