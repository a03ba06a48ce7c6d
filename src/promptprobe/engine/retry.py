"""The one retry policy (tenacity): which failures are retried, how long to wait, and the log
of every failed attempt. SDK-level retries are off, so each attempt here is one real call."""

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from ..redaction import SCRUBBER
from .limiter import Cancelled, Limiter
from .store import utc_now

if TYPE_CHECKING:
    from tenacity import RetryCallState

T = TypeVar("T")
BODY_LIMIT = 64 * 1024


@dataclass
class RetryPolicy:
    max_attempts: int = 6
    backoff_initial: float = 1.0
    max_retry_wait: float = 60.0
    sleep: Callable[[float], None] | None = None  # tests record waits instead of sleeping
    rng: random.Random = field(default_factory=random.Random)

    def wait_for(self, error: BaseException | None, attempt: int) -> float:
        """Retry-After when the server gave one, else exponential backoff; jitter either way."""
        retry_after = getattr(error, "retry_after", None)
        if retry_after is not None:
            base = min(retry_after, self.max_retry_wait)
        else:
            base = min(self.backoff_initial * 2 ** (attempt - 1), self.max_retry_wait)
        # Jitter: workers that failed together do not all come back in the same instant.
        return min(self.max_retry_wait, base + self.rng.uniform(0, max(0.05, 0.1 * base)))


class Attempted(Exception):
    """A call that failed after `attempts` tries; wraps the last error and logs every attempt."""

    def __init__(self, error: BaseException, attempts: int, log: list[dict[str, Any]]) -> None:
        super().__init__(str(error))
        self.error = error
        self.attempts = attempts
        self.log = log


def attempt_entry(error: BaseException) -> dict[str, Any]:
    body = getattr(error, "body", None)
    return {
        "at": utc_now(),
        "kind": getattr(error, "kind", type(error).__name__),
        "status": getattr(error, "status", None),
        "request_id": getattr(error, "request_id", None),
        "message": SCRUBBER.text(str(error)),
        "body": SCRUBBER.text(body.decode("utf-8", "replace"))[:BODY_LIMIT] if body else None,
    }


def _retryable(exc: BaseException) -> bool:
    return bool(getattr(exc, "retryable", False))


def call_with_retries(
    call: Callable[[], T],
    policy: RetryPolicy,
    cancel: threading.Event,
    limiter: Limiter | None = None,
    retryable_kinds: tuple[type[BaseException], ...] = (Exception,),
) -> tuple[T, int, list[dict[str, Any]]]:
    """Run `call` under the policy; (result, attempts, log of failed attempts) or Attempted.

    Waits are cut short by `cancel`; after a cancel no new call starts (Cancelled).
    """
    attempts = 0
    log: list[dict[str, Any]] = []

    def attempt() -> T:
        nonlocal attempts
        if cancel.is_set():
            raise Cancelled
        if limiter is not None:
            limiter.wait(cancel)
        attempts += 1
        try:
            return call()
        except retryable_kinds as exc:
            log.append(attempt_entry(exc))
            raise

    def wait(state: "RetryCallState") -> float:
        error = state.outcome.exception() if state.outcome else None
        seconds = policy.wait_for(error, state.attempt_number)
        last = state.attempt_number >= policy.max_attempts  # tenacity asks before it checks stop
        if limiter is not None and getattr(error, "status", None) in (429, 529) and not last:
            # Rate limited or overloaded: the whole endpoint waits, this worker with it.
            limiter.pause(seconds)
            return 0.0
        return seconds

    def sleep(seconds: float) -> None:
        if seconds <= 0:
            return
        if policy.sleep is not None:
            policy.sleep(seconds)
        elif cancel.wait(seconds):
            raise Cancelled

    # The first attempt is made before tenacity is set up: most calls succeed at once, and its
    # bookkeeping (a Retrying, its state, its actions) is then work for nothing.
    try:
        return attempt(), attempts, log
    except BaseException as exc:  # as tenacity takes it: anything retryable is retried
        if isinstance(exc, Cancelled) or not _retryable(exc) or policy.max_attempts <= 1:
            if isinstance(exc, retryable_kinds) and not isinstance(exc, Cancelled):
                raise Attempted(exc, attempts, log) from exc
            raise
        first: list[BaseException] = [exc]

    def again() -> T:
        """Tenacity's first attempt is the failure above (its wait and count as ever), then real ones."""
        if first:
            raise first.pop()
        return attempt()

    # Imported here: a run whose calls all succeed at once never needs it (15 ms of start-up).
    from tenacity import Retrying, retry_if_exception, stop_after_attempt

    retrying = Retrying(
        stop=stop_after_attempt(policy.max_attempts),
        wait=wait,
        retry=retry_if_exception(_retryable),
        sleep=sleep,
        reraise=True,
    )
    try:
        return retrying(again), attempts, log
    except Cancelled:
        raise
    except retryable_kinds as exc:
        raise Attempted(exc, attempts, log) from exc


def monotonic_ms(started: float) -> int:
    return round((time.monotonic() - started) * 1000)
