"""The providers' batch APIs behind one small interface: submit requests under custom ids, look
at a batch, read its results line by line (each line's bytes kept, as a live reply's body is),
cancel it. Anthropic Message Batches and OpenAI Batch (also Azure) implement it; the runner owns
which requests go in which batch, the ledger, retries and recording."""

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from .base import Completion, ProviderError, status_retryable


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


@dataclass
class BatchResult:
    custom_id: str
    line: bytes  # the result line exactly as received
    completion: Completion | None = None
    error: ProviderError | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class BatchAPI:
    """One model's batch API; every method makes its own SDK calls and raises ProviderError."""

    limits: BatchLimits

    def body(self, messages: Sequence[dict[str, str]]) -> dict[str, Any]:
        """The request body a live call would send, as plain JSON."""
        raise NotImplementedError

    def submit(self, requests: Sequence[tuple[str, bytes]], label: str) -> str:
        """Create a batch of (custom_id, body as JSON bytes); its id."""
        raise NotImplementedError

    def state(self, batch_id: str) -> BatchState:
        raise NotImplementedError

    def results(self, batch_id: str, state: BatchState) -> Iterator[BatchResult]:
        """Every result the provider has for an ended batch."""
        raise NotImplementedError

    def cancel(self, batch_id: str) -> None:
        raise NotImplementedError


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


def result_error(kind: str, message: str, retryable: bool, status: int | None = None) -> ProviderError:
    return ProviderError(kind, message, status=status, retryable=retryable)


def status_error(spec: str, status: int, message: str) -> ProviderError:
    return ProviderError(
        "http_status",
        f"{spec}: HTTP {status} in the batch: {message}",
        status=status,
        retryable=status_retryable(status),
    )


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
