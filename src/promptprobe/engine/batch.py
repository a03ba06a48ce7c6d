"""The batch back-end (`--batch`): every retrieval first, snapshotted as in a live run; then the
planned requests go to each model's batch API in batches within its limits; the results are
recorded exactly like live samples (`via: "batch"`), and what failed and may be retried goes into
a follow-up batch, up to --max-attempts submissions per sample.

Nothing is submitted twice: each batch is in `batches.jsonl` before its create call and again as
soon as the provider has given it an id, before its results are awaited (engine/batch_submit.py).
Ctrl-C detaches (the batches keep running at the provider); `probe run --resume RUN` re-attaches
to every batch not yet collected and submits only what was never submitted; `--cancel` cancels
what is outstanding.
"""

from collections import defaultdict
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..errors import ProbeError
from ..jsonio import dumps_line, loads, warn
from ..providers.base import ProviderError
from ..providers.batching import BatchResult, BatchState
from .backend import Backend, Pass
from .batch_collect import BatchCollector, seconds_since, unanswered
from .batch_ledger import BatchLedger
from .batch_submit import SUBMIT_CHUNK, BatchSubmitter
from .batch_work import BatchSettings, Pending, UnitPreparer
from .plan import Unit, sample_id
from .retry import attempt_entry
from .store import utc_now

PREPARE_WINDOW = 1_000  # units retrieved and prepared at a time


class BatchScheduler(Backend):
    """Sends a pass's units in batches and records their results as the batches end."""

    def __init__(self, work: Pass, settings: BatchSettings) -> None:
        super().__init__(work)
        self.settings = settings
        self.cancel = work.cancel
        self.store = work.recorder.store
        self.ledger = BatchLedger(self.store)
        self.submitter = BatchSubmitter(settings, self.ledger, work.cancel, work.recorder.tally)
        self.collector = BatchCollector(settings, self.store, work.cancel)
        self.preparer = UnitPreparer(work)
        self.waiting: dict[str, Pending] = {}  # submitted, result not yet recorded
        self.retry: dict[str, list[Pending]] = defaultdict(list)  # for the next follow-up batch

    # -- the pass ----------------------------------------------------------------------------

    def submit(self, units: Iterable[Unit]) -> None:
        """Prepare `units` and send their requests, in batches as they fill."""
        try:
            self._submit(list(units))
        except ProbeError as exc:
            self.stop(exc)

    def collect(self) -> None:
        """Wait for every batch sent, record its results, send follow-ups; detach on a stop."""
        try:
            if not self.cancel.is_set():
                self._wait()
        except ProbeError as exc:
            self.stop(exc)
        finally:
            self.abort = self.abort or self.preparer.abort
            for pendings in self.retry.values():  # follow-ups that cannot go out now: failed samples
                for pending in pendings:
                    self._record_failure(pending, pending.error, None)
            self.retry.clear()
            self.work.recorder.flush()
            self.detached = [e["batch"] for e in self.ledger.uncollected()]
            self.keep = bool(self.detached or self.ledger.unsettled())

    def _submit(self, units: list[Unit]) -> None:
        self.submitter.settle()  # creates a killed process left unanswered: found again, or not made
        work = [(unit, arms) for unit in units if (arms := self.work.arms(unit))]
        wanted = {sample_id(unit.case.id, unit.repeat, arm) for unit, arms in work for arm in arms}
        open_entries = [e for e in self.ledger.uncollected() if wanted.intersection(e["samples"])]
        inflight = {sid for e in open_entries for sid in e["samples"]} & wanted
        if self.settings.cancel_batches:
            self._cancel_outstanding(open_entries)
        by_model: dict[str, list[tuple[Pending, bytes]]] = defaultdict(list)
        submitting = not self.settings.cancel_batches
        with ThreadPoolExecutor(max_workers=max(1, self.settings.concurrency)) as pool:
            for start in range(0, len(work), PREPARE_WINDOW):
                window = work[start : start + PREPARE_WINDOW]
                for (unit, _), prepared in zip(window, pool.map(self.preparer.prepare, window), strict=True):
                    for arm, record, ready in prepared:
                        if ready is None:
                            self.work.recorder.record(record, arm)
                            continue
                        pending = Pending(unit, arm, record["started_at"], ready[1])
                        if record["sample_id"] in inflight:
                            self.waiting[record["sample_id"]] = (
                                pending  # sent already: await it, never resend
                            )
                        else:
                            body = self.settings.apis[arm.model.spec].body(ready[0])
                            by_model[arm.model.spec].append((pending, dumps_line(body)[:-1]))
                if self.cancel.is_set():
                    return
                for spec, items in by_model.items():
                    if submitting and len(items) >= SUBMIT_CHUNK:
                        by_model[spec] = []
                        self._send(spec, items)
        self.work.recorder.flush()
        if not submitting:
            self.stopped_by = "batch_cancelled"  # nothing new goes out; what was sent is collected
            return
        for spec, items in by_model.items():
            self._send(spec, items)

    def _send(self, spec: str, items: list[tuple[Pending, bytes]]) -> None:
        if self.stopped_by:
            return  # --max-cost held a batch back: nothing more goes out
        self.submitter.submit(
            spec, items, lambda pendings: self.waiting.update((p.sample_id, p) for p in pendings)
        )
        if self.submitter.held_back:
            self.stopped_by = "max_cost"

    def _cancel_outstanding(self, entries: list[dict[str, Any]]) -> None:
        for entry in entries:
            try:
                self.settings.apis[entry["model"]].cancel(entry["batch"])
            except ProviderError as exc:
                warn(f"batch {entry['batch']}: could not cancel it ({exc}); it keeps running")

    def _wait(self) -> None:
        while not self.cancel.is_set():
            self._resubmit()
            awaited = self.waiting.keys()
            open_entries = [
                e for e in self.ledger.uncollected() if any(sid in awaited for sid in e["samples"])
            ]
            follow_ups = any(self.retry.values()) and not self.stopped_by
            if not open_entries and not follow_ups:
                return
            states: dict[str, BatchState] = {}
            for entry in open_entries:
                state = self.collector.state(entry)
                if state is None:
                    return
                states[entry["batch"]] = state
                if state.ended and not self._collect(entry, state):
                    return
            self.settings.on_batches(self.ledger.progress(states, self.submitter.first_submitted))
            if any(not s.ended for s in states.values()) and not follow_ups:
                self.cancel.wait(self.settings.poll_interval)

    # -- results, failures and follow-ups ------------------------------------------------------

    def _collect(self, entry: dict[str, Any], state: BatchState) -> bool:
        """Record an ended batch's results; False when the run was cancelled while reading them."""
        started = seconds_since(entry["submitted"])

        def take(sid: str, result: BatchResult) -> None:
            pending = self.waiting.pop(sid, None)
            if pending is None:
                return  # recorded already (a resumed run collecting again)
            if result.completion is not None:
                self._record_success(pending, result.completion, entry["batch"], started)
            else:
                assert result.error is not None
                pending.log.append(dict(attempt_entry(result.error), batch=entry["batch"]))
                self._failed(pending, result.error, entry)

        read = self.collector.results(entry, state, take)
        if read is None:
            return False
        seen, unmatched = read
        for sid in entry["samples"]:
            pending = self.waiting.pop(sid, None) if sid not in seen else None
            if pending is not None:
                error = unanswered(entry, state, unmatched)
                pending.log.append(dict(attempt_entry(error), batch=entry["batch"]))
                self._failed(pending, error, entry)
        self.work.recorder.flush()
        self.ledger.update(entry, status=state.status, ended=utc_now(), collected=True)
        return True

    def _failed(self, pending: Pending, error: Any, entry: dict[str, Any] | None) -> None:
        """A request that failed: into a follow-up batch while it may succeed and has attempts
        left, else a failed sample."""
        attempts = self.submitter.sent[pending.sample_id]
        again = attempts < self.settings.policy.max_attempts and not self.settings.cancel_batches
        if getattr(error, "retryable", False) and again and not self.cancel.is_set():
            pending.error = error
            self.retry[pending.arm.model.spec].append(pending)
            return
        self._record_failure(pending, error, entry["batch"] if entry else None)

    def _resubmit(self) -> None:
        """Retryable failures go into follow-up batches, their bodies rebuilt from the requests kept."""
        for spec in list(self.retry):
            pendings = self.retry.pop(spec)
            api = self.settings.apis[spec]
            items = []
            for pending in pendings:
                messages = loads((self.store.path / "raw" / f"{pending.sample_id}.request.json").read_bytes())
                items.append((pending, dumps_line(api.body(messages))[:-1]))
            try:
                self._send(spec, items)
            finally:  # what did not go out (a stop, --max-cost) waits here to be recorded as failed
                self.retry[spec].extend(p for p in pendings if p.sample_id not in self.waiting)
                if not self.retry[spec]:
                    del self.retry[spec]
            if self.stopped_by or self.cancel.is_set():
                return

    def _record_success(self, pending: Pending, completion: Any, batch_id: str, seconds: float) -> None:
        record = self._record_of(pending, batch_id)
        record.update(latency_ms=round(seconds * 1000, 1))
        self.work.records.completed(record, completion, pending.unit, pending.passages)
        self.work.recorder.record(record, pending.arm)

    def _record_failure(self, pending: Pending, error: Any, batch_id: str | None) -> None:
        record = self._record_of(pending, batch_id)
        kind = getattr(error, "kind", "error")
        record["error"] = {"kind": kind, "message": str(error), "attempts": record["attempts"]}
        self.work.recorder.record(record, pending.arm)

    def _record_of(self, pending: Pending, batch_id: str | None) -> dict[str, Any]:
        record = self.work.records.base(pending.unit, pending.arm)
        record.update(
            started_at=pending.started_at,
            retrieval=self.work.records.retrieval_summary(pending.passages),
            attempts=self.submitter.sent[pending.sample_id],
            attempts_log=pending.log,
            via="batch",
            batch=batch_id,
        )
        return record
