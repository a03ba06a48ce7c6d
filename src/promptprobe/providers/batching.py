"""The providers' batch APIs behind one small interface: upload requests under custom ids (where
the API takes a file), create a batch, find a batch already created from a submission (the
list endpoint), look at a batch, read its results line by line (each line's bytes kept, as a live
reply's body is), cancel it. Anthropic Message Batches and OpenAI Batch (also Azure) implement
it; the runner owns which requests go in which batch, the ledger, retries and recording.

Whatever a server sends back is read with every field optional: a reply that is not what the
API promises is a `bad_body` ProviderError (retried like any transient failure), and a result
line that cannot be read is a `bad_body` result carrying its bytes, never an exception."""

import json
import re
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ..redaction import SCRUBBER
from .base import Completion, ProviderError, field_of, status_retryable

# Statuses with which a server says it does not speak an endpoint at all.
UNSUPPORTED_STATUS = frozenset({404, 405, 501})
# A batch created within this many seconds of the moment its submission was recorded (either
# way, for clocks that differ) may be the one a killed process was creating.
FIND_WINDOW = 600.0
FIND_PAGES = 20  # pages of the batch list looked through at most


@dataclass(frozen=True)
class BatchLimits:
    requests: int  # most requests in one batch
    bytes: int  # most bytes of requests in one batch


@dataclass
class BatchState:
    status: str  # the provider's own word (in_progress, ended, completed, expired, ...)
    ended: bool  # no request of it will change any more
    done: int = 0  # requests finished (either way)
    total: int = 0
    error: str | None = None  # why the whole batch failed, when it did
    files: dict[str, Any] = field(default_factory=dict)  # where its results are (OpenAI's file ids)
    known: bool = True  # the status is one the API documents (else the run waits a while, then stops)


@dataclass
class BatchResult:
    custom_id: str  # "" when the line names none we can read
    line: bytes  # the result line exactly as received
    completion: Completion | None = None
    error: ProviderError | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Submission:
    """A batch on its way to being created, with what identifies it before the provider gives it
    an id: recorded in the ledger first, so a resume can look for the batch it became."""

    label: str  # ours, unique in the run; the batch's metadata where the API takes metadata
    count: int  # requests in it
    at: str  # when it was recorded (UTC, ISO 8601)
    input_file: str | None = None  # OpenAI: the uploaded input file the batch is made from
    requests: Sequence[tuple[str, bytes]] = ()  # Anthropic: sent in the create call itself (not kept)


class BatchAPI:
    """One model's batch API; every method makes its own SDK calls and raises ProviderError."""

    limits: BatchLimits
    # A batch carries a marker the run set (OpenAI's metadata and input file): find() is exact.
    # Without one (Anthropic), a batch found again is only a candidate until its results' custom
    # ids say it is the run's, and a create answered with an error is taken to have made nothing.
    marked = True

    def body(self, messages: Sequence[dict[str, str]]) -> dict[str, Any]:
        """The request body a live call would send, as plain JSON."""
        raise NotImplementedError

    def check(self) -> None:
        """Look at the batch list once: ProviderError when the server does not speak the API."""
        raise NotImplementedError

    def upload(self, submission: Submission, requests: Sequence[tuple[str, bytes]]) -> Submission:
        """The submission ready to create: (custom_id, body as JSON bytes) uploaded as its input file,
        or kept for the create call, as the API takes them."""
        raise NotImplementedError

    def create(self, submission: Submission) -> str:
        """Create the batch; its id."""
        raise NotImplementedError

    def find(self, submission: Submission, known: Collection[str] = ()) -> str | None:
        """The id of a batch already created from this submission (none of `known`, the batches
        accounted for already), None when there is none."""
        raise NotImplementedError

    def state(self, batch_id: str) -> BatchState:
        raise NotImplementedError

    def results(self, batch_id: str, state: BatchState) -> Iterator[BatchResult]:
        """Every result the provider has for an ended batch."""
        raise NotImplementedError

    def cancel(self, batch_id: str) -> None:
        raise NotImplementedError


def answered_error(error: ProviderError) -> bool:
    """The server answered the call with an error status (a lost answer, a timeout or a dropped
    connection, says nothing of what the call did)."""
    return error.status is not None and error.status >= 400


def split_lines(chunks: Iterator[bytes]) -> Iterator[bytes]:
    """JSONL lines from a byte stream, each with its own bytes (the newline dropped)."""
    buffer = b""
    for chunk in chunks:
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            if line.strip():
                yield line
    if buffer.strip():
        yield buffer


def result_error(
    kind: str, message: str, retryable: bool, status: int | None = None, line: bytes | None = None
) -> ProviderError:
    return ProviderError(kind, message, status=status, retryable=retryable, body=line)


def status_error(spec: str, status: int, message: str, line: bytes | None = None) -> ProviderError:
    return ProviderError(
        "http_status",
        f"{spec}: HTTP {status} in the batch: {message}",
        status=status,
        retryable=status_retryable(status),
        body=line,
    )


def failed(custom_id: str, line: bytes, kind: str, message: str, retryable: bool) -> BatchResult:
    """The result of a request that failed; the line's bytes are kept as the error's body."""
    return BatchResult(custom_id, line, error=result_error(kind, message, retryable, line=line))


def read_result(spec: str, line: bytes, read: Callable[[Any], BatchResult]) -> BatchResult:
    """A result line read by `read` (given the parsed JSON); any line it cannot read, whatever is
    odd about it, is a `bad_body` result with its bytes (and its custom id when that is text)."""
    try:
        item = json.loads(line)
    except ValueError:
        item = None
    custom_id = item.get("custom_id") if isinstance(item, dict) else None
    if item is None:  # cut-off or broken JSON: the request it answers may still be named at its start
        named = re.search(rb'"custom_id"\s*:\s*"([A-Za-z0-9_.:-]{1,128})"', line)
        custom_id = named.group(1).decode() if named else None
    custom_id = custom_id if isinstance(custom_id, str) else ""
    try:
        if not custom_id:
            raise ValueError("the line names no custom_id")
        if not isinstance(item, dict):
            raise ValueError("the line is not a JSON object")
        return read(item)
    except Exception as exc:  # whatever is odd in a line: that line fails, never the collection
        # Scrubbed before the cut, so no cut keeps part of a key.
        reason = SCRUBBER.text(f"{type(exc).__name__}: {exc}")[:200]
        return failed(
            custom_id, line, "bad_body", f"{spec}: a batch result line cannot be read ({reason})", True
        )


def succeeded(
    spec: str,
    custom_id: str,
    line: bytes,
    what: str,
    read: Callable[[], dict[str, Any]],
    request_id: Callable[[], str | None],
) -> BatchResult:
    """The result of a request that succeeded: its reply as `read` reads it (text, stop, usage,
    model, refusal when the API has one), or a retryable `bad_body` result when it is not `what`
    (ValueError or TypeError); `request_id` is read after the reply."""
    try:
        reply = read()
    except (ValueError, TypeError) as exc:
        return failed(custom_id, line, "bad_body", f"{spec}: the batch result is not {what} ({exc})", True)
    completion = Completion(
        reply["text"],
        line,
        reply["stop"],
        reply["usage"],
        request_id(),
        reply["model"],
        refusal=reply.get("refusal"),
    )
    return BatchResult(custom_id, line, completion)


def id_of(value: Any) -> str:
    """The id of an object the API returned; ValueError when it has no text id (not its reply)."""
    found = field_of(value, "id")
    if not isinstance(found, str) or not found:
        raise ValueError(f"the reply has no id ({type(value).__name__})")
    return found


def listed(page: Any) -> list[Any]:
    """The batches of a page of the batch list; ValueError when it has no data list."""
    data = field_of(page, "data")
    if not isinstance(data, list):
        raise ValueError(f"the batch list has no data list ({type(page).__name__})")
    return data


def text_field(value: Any, name: str) -> str | None:
    """A field of a batch object that must be text (or absent)."""
    if value is None or isinstance(value, str):
        return value
    raise ValueError(f"{name} is {type(value).__name__}, not text")


def count_field(value: Any, name: str) -> int:
    """A request count of a batch object: a whole number, 0 when absent."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} is {value!r}, not a count")
    return value


def seconds_of(value: Any) -> float | None:
    """A creation time as epoch seconds: a number (OpenAI), a datetime or an ISO string
    (Anthropic); None when it is neither."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
    if isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=UTC)).timestamp()
    return None


def chunked(
    items: Sequence[tuple[str, bytes, int]], limits: BatchLimits
) -> Iterator[list[tuple[str, bytes, int]]]:
    """(custom_id, body, size) items in batches within the provider's request and byte limits."""
    batch: list[tuple[str, bytes, int]] = []
    size = 0
    for item in items:
        if batch and (len(batch) >= limits.requests or size + item[2] > limits.bytes):
            yield batch
            batch, size = [], 0
        batch.append(item)
        size += item[2]
    if batch:
        yield batch
