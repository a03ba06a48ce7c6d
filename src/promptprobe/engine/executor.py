"""The sample executor of live runs: one arm's call to its model under the retry policy and the
endpoint's rate limiter, its reply recorded like any other (engine/records.py)."""

import threading
import time
from typing import Any

from ..providers.base import Provider, ProviderError
from .limiter import Cancelled, Limiter
from .plan import Arm, Unit
from .records import SampleRecords
from .retrieval import Retrieved
from .retry import Attempted, RetryPolicy, call_with_retries, monotonic_ms


class Executor:
    """Calls a model for one sample and returns the sample's record."""

    def __init__(
        self,
        records: SampleRecords,
        providers: dict[str, Provider],
        limiters: dict[str, Limiter],
        policy: RetryPolicy,
        cancel: threading.Event,
    ) -> None:
        self.records = records
        self.providers = providers
        self.limiters = limiters
        self.policy = policy
        self.cancel = cancel

    def sample(self, unit: Unit, arm: Arm, retrieved: Retrieved) -> dict[str, Any] | None:
        """The record of one sample; None when the run was cancelled before it finished."""
        started = time.monotonic()
        record, messages = self.records.prepared(unit, arm, retrieved)
        if messages is None:
            return record
        provider = self.providers[arm.model.spec]
        limiter = self.limiters.get(arm.model.spec)
        try:
            completion, attempts, log = call_with_retries(
                lambda: provider.complete(messages, self.cancel),
                self.policy,
                self.cancel,
                limiter,
                retryable_kinds=(ProviderError,),
            )
        except Cancelled:
            return None
        except Attempted as failure:
            if getattr(failure.error, "kind", None) == "cancelled":
                return None  # Ctrl-C cut the call: resume runs it again
            record.update(
                attempts=failure.attempts, attempts_log=failure.log, latency_ms=monotonic_ms(started)
            )
            kind = getattr(failure.error, "kind", "error")
            record["error"] = {"kind": kind, "message": str(failure.error), "attempts": failure.attempts}
            return record
        record.update(attempts=attempts, attempts_log=log, latency_ms=monotonic_ms(started))
        if limiter is not None:
            limiter.observe(completion.headers)
        self.records.completed(record, completion, unit, retrieved.passages or [])
        return record
