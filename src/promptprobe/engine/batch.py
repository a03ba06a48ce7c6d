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
from ..pack import REQUEST
from ..providers.base import ProviderError
from ..providers.batching import BatchState
from .backend import Backend, Pass
from .batch_ledger import BatchLedger
from .batch_results import BatchResults
from .batch_submit import SUBMIT_CHUNK, BatchSubmitter
from .batch_work import BatchSettings, Pending, UnitPreparer
from .plan import Unit, sample_id

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
        self.results = BatchResults(work, settings, self.ledger, self.submitter.sent, work.cancel)
        self.preparer = UnitPreparer(work)

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
            self.results.give_up()
            self.work.recorder.flush()
            self.detached = [e["batch"] for e in self.ledger.uncollected()]
            self.keep = bool(self.detached or self.ledger.unsettled())

    # -- sending -------------------------------------------------------------------------------

    def _submit(self, units: list[Unit]) -> None:
        self.submitter.settle()  # creates a killed process left unanswered: found again, or not made
        for entry in self.ledger.uncollected():
            if all(self.work.skip(sid) for sid in entry["samples"]):
                self.ledger.update(entry, collected=True)  # every result was recorded before a kill
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
                        if record["sample_id"] in inflight:  # sent already: await it, never resend
                            self.results.waiting[record["sample_id"]] = pending
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
        waiting = self.results.waiting
        self.submitter.submit(
            spec, items, lambda pendings: waiting.update((p.sample_id, p) for p in pendings)
        )
        if self.submitter.held_back:
            self.stopped_by = "max_cost"

    def _resubmit(self) -> None:
        """Retryable failures go into follow-up batches, their bodies rebuilt from the requests kept."""
        retry = self.results.retry
        for spec in list(retry):
            pendings = retry.pop(spec)
            api = self.settings.apis[spec]
            items = []
            for pending in pendings:
                messages = loads(self.store.read_bytes(pending.sample_id, REQUEST))
                items.append((pending, dumps_line(api.body(messages))[:-1]))
            try:
                self._send(spec, items)
            finally:  # what did not go out (a stop, --max-cost) waits to be recorded as failed
                unsent = [p for p in pendings if p.sample_id not in self.results.waiting]
                if unsent:
                    retry[spec].extend(unsent)
            if self.stopped_by or self.cancel.is_set():
                return

    def _cancel_outstanding(self, entries: list[dict[str, Any]]) -> None:
        for entry in entries:
            if entry.get("confirmed") is False:  # found again by size and time: maybe another's
                warn(
                    f"batch {entry['batch']}: not cancelled: it was found again by its size and creation "
                    "time only and may be another run's (its results are used only if they name this "
                    "run's requests)"
                )
                continue
            try:
                self.settings.apis[entry["model"]].cancel(entry["batch"])
            except ProviderError as exc:
                warn(f"batch {entry['batch']}: could not cancel it ({exc}); it keeps running")

    # -- waiting ------------------------------------------------------------------------------

    def _wait(self) -> None:
        while not self.cancel.is_set():
            self._resubmit()
            awaited = self.results.waiting.keys()
            open_entries = [
                e for e in self.ledger.uncollected() if any(sid in awaited for sid in e["samples"])
            ]
            follow_ups = any(self.results.retry.values()) and not self.stopped_by
            if not open_entries and not follow_ups:
                return
            states: dict[str, BatchState] = {}
            for entry in open_entries:
                state = self.results.collector.state(entry)
                if state is None:
                    return
                states[entry["batch"]] = state
                if state.ended and not self.results.collect(entry, state):
                    return
            self.settings.on_batches(self.ledger.progress(states, self.submitter.first_submitted))
            if any(not s.ended for s in states.values()) and not follow_ups:
                self.cancel.wait(self.settings.poll_interval)
