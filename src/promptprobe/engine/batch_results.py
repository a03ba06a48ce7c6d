"""What comes back from a batch, recorded: each result a sample record exactly like a live one
(but for `via` and `batch`); a failure that may succeed later (an expired request, a 5xx, a line
that could not be read) kept for a follow-up batch while --max-attempts allows; the rest failed
samples, which stay in every denominator."""

import threading
from collections import Counter, defaultdict
from typing import Any

from ..providers.base import ProviderError
from ..providers.batching import BatchResult, BatchState
from .backend import Pass
from .batch_collect import BatchCollector, seconds_since, unanswered
from .batch_ledger import BatchLedger
from .batch_work import BatchSettings, Pending
from .retry import attempt_entry
from .store import utc_now


class BatchResults:
    """The samples awaited from batches, and those kept for the next follow-up batch."""

    def __init__(
        self, work: Pass, settings: BatchSettings, ledger: BatchLedger, sent: Counter, cancel: threading.Event
    ) -> None:
        self.work = work
        self.settings = settings
        self.ledger = ledger
        self.sent = sent  # batches each sample has been sent in
        self.cancel = cancel
        self.collector = BatchCollector(settings, work.recorder.store, cancel)
        self.waiting: dict[str, Pending] = {}  # submitted, result not yet recorded
        self.retry: dict[str, list[Pending]] = defaultdict(list)  # model spec -> for the next follow-up

    def collect(self, entry: dict[str, Any], state: BatchState) -> bool:
        """Record an ended batch's results; False when the run was cancelled while reading them. A
        batch found again without a marker of the run is first confirmed by its custom ids."""
        if entry.get("confirmed") is False:
            mine = self.collector.ours(entry, state)
            if mine is None:
                return False
            if not mine:
                self._not_ours(entry)
                return True
            self.ledger.update(entry, confirmed=True)
        started = seconds_since(entry["submitted"])

        def take(sid: str, result: BatchResult) -> None:
            pending = self.waiting.pop(sid, None)
            if pending is None:
                return  # recorded already (a resumed run collecting again)
            if result.completion is not None:
                record = self._record_of(pending, entry["batch"])
                record.update(latency_ms=round(started * 1000, 1))
                self.work.records.completed(record, result.completion, pending.unit, pending.passages)
                self.work.recorder.record(record, pending.arm)
            else:
                assert result.error is not None
                self.failed(pending, result.error, entry)

        read = self.collector.results(entry, state, take)
        if read is None:
            return False
        seen, unmatched = read
        for sid in entry["samples"]:
            pending = self.waiting.pop(sid, None) if sid not in seen else None
            if pending is not None:
                self.failed(pending, unanswered(entry, state, unmatched), entry)
        self.work.recorder.flush()
        self.ledger.update(entry, status=state.status, ended=utc_now(), collected=True)
        return True

    def _not_ours(self, entry: dict[str, Any]) -> None:
        """A batch found again proved another's: none of its results is used, it is not counted as
        an attempt, and its requests go out again in a follow-up batch."""
        batch_id = entry["batch"]
        error = ProviderError(
            "batch_not_ours",
            f"{entry['model']}: batch {batch_id}, found again by its size and creation time after a "
            "create call's answer was lost, is another's (its results name other requests): none of "
            "them was used, and this request goes out again",
            retryable=True,
        )
        self.ledger.foreign(entry)
        for sid in entry["samples"]:
            self.sent[sid] -= 1
            pending = self.waiting.pop(sid, None)
            if pending is None:
                continue
            pending.log.append(dict(attempt_entry(error), batch=batch_id))
            if self.settings.cancel_batches or self.cancel.is_set():
                self.record_failure(pending, error, None)
            else:
                pending.error = error
                self.retry[pending.arm.model.spec].append(pending)

    def failed(self, pending: Pending, error: Any, entry: dict[str, Any]) -> None:
        """A request its batch answered with a failure: into a follow-up batch while it may succeed
        and has attempts left, else a failed sample."""
        pending.log.append(dict(attempt_entry(error), batch=entry["batch"]))
        again = self.sent[pending.sample_id] < self.settings.policy.max_attempts
        if getattr(error, "retryable", False) and again and not self.settings.cancel_batches:
            if not self.cancel.is_set():
                pending.error = error
                self.retry[pending.arm.model.spec].append(pending)
                return
        self.record_failure(pending, error, entry["batch"])

    def give_up(self) -> None:
        """Follow-ups that cannot go out now (a stop, --max-cost): failed samples with their last
        failure, their attempts kept (a resume runs them again)."""
        for pendings in self.retry.values():
            for pending in pendings:
                self.record_failure(pending, pending.error, None)
        self.retry.clear()

    def record_failure(self, pending: Pending, error: Any, batch_id: str | None) -> None:
        record = self._record_of(pending, batch_id)
        kind = getattr(error, "kind", "error")
        record["error"] = {"kind": kind, "message": str(error), "attempts": record["attempts"]}
        self.work.recorder.record(record, pending.arm)

    def _record_of(self, pending: Pending, batch_id: str | None) -> dict[str, Any]:
        record = self.work.records.base(pending.unit, pending.arm)
        record.update(
            started_at=pending.started_at,
            retrieval=self.work.records.retrieval_summary(pending.passages),
            attempts=self.sent[pending.sample_id],
            attempts_log=pending.log,
            via="batch",
            batch=batch_id,
        )
        return record
