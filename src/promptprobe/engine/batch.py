"""Batch runs (`--batch`): every retrieval first, snapshotted as in a live run; then the planned
requests go to each model's batch API in batches within its limits; the results are recorded
exactly like live samples (`via: "batch"`), and what failed and may be retried goes into a
follow-up batch, up to --max-attempts submissions per sample.

Nothing is submitted twice: each batch is written to `batches.jsonl` as soon as the provider
has given it an id, before its results are awaited. Ctrl-C detaches (the batches keep running
at the provider); `probe run --resume RUN` re-attaches to every batch not yet collected and
submits only what was never submitted; `--cancel` cancels what is outstanding.
"""

from collections import defaultdict
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from ..errors import ProbeError, StartError
from ..jsonio import dumps_line, loads, warn
from ..providers.base import ProviderError
from ..providers.batching import BatchAPI, BatchState
from .batch_parts import SUBMIT_CHUNK, BatchLedger, BatchRecorder, BatchSubmitter, Pending, UnitPreparer
from .executor import Executor, Retrieved
from .limiter import Cancelled
from .plan import Unit, sample_id
from .retry import Attempted, attempt_entry, call_with_retries
from .store import utc_now

if TYPE_CHECKING:
    from .run import ProbeRun

PREPARE_WINDOW = 1_000  # units retrieved and prepared at a time


class BatchScheduler:
    """The batch counterpart of Scheduler: same `run(units)`, `abort`, `stopped_by`."""

    def __init__(
        self,
        run: "ProbeRun",
        skip: Callable[[str], bool] = lambda sid: False,
        reuse: dict[tuple[str, int], Retrieved] | None = None,
        record_extra: dict[str, Any] | None = None,
    ) -> None:
        assert run.store is not None
        self.store = run.store
        self.plan = run.plan
        self.executor: Executor = run.executor_for(run.store)
        self.cancel = run.cancel_event
        self.options = run.options
        self.apis: dict[str, BatchAPI] = run.parts.batch_apis
        self.on_batches = run.on_batches or (lambda text: None)
        self.skip = skip
        self.ledger = BatchLedger(run.store)
        self.submitter = BatchSubmitter(run, self.ledger)
        self.recorder = BatchRecorder(run, self.executor, record_extra or {})
        self.preparer = UnitPreparer(
            self.executor, reuse or {}, record_extra or {}, run.down_models, self.cancel
        )
        self.waiting: dict[str, Pending] = {}  # submitted, result not yet recorded
        self.retry: dict[str, list[Pending]] = defaultdict(list)  # for the next follow-up batch
        self.abort: ProbeError | None = None
        self.stopped_by: str | None = None
        self.detached: list[str] = []  # batch ids left running at the provider

    # -- a batch's state, results, failures and follow-ups -------------------------------------

    def _state(self, entry: dict[str, Any]) -> BatchState | None:
        api = self.apis[entry["model"]]
        try:
            state, _, _ = call_with_retries(
                lambda: api.state(entry["batch"]),
                self.options.policy(),
                self.cancel,
                retryable_kinds=(ProviderError,),
            )
        except Cancelled:
            return None
        except Attempted as failure:
            # The batch cannot be looked at now; it stays in the ledger for --resume.
            self.abort = self.abort or StartError(
                f"batch {entry['batch']} ({entry['model']}): cannot read its state: {failure.error}"
            )
            self.cancel.set()
            return None
        return state

    def _collect(self, entry: dict[str, Any], state: BatchState) -> None:
        api = self.apis[entry["model"]]
        positions = {f"p{i}": sid for i, sid in enumerate(entry["samples"])}
        seen: set[str] = set()
        started = _seconds_since(entry["submitted"])
        for result in api.results(entry["batch"], state):
            sid = positions.get(result.custom_id)
            if sid is None or sid in seen:
                continue  # not ours, or a duplicate line: the first result counts
            seen.add(sid)
            pending = self.waiting.pop(sid, None)
            if pending is None:
                continue  # recorded already (a resumed run collecting again)
            if result.completion is not None:
                self.recorder.succeeded(
                    pending, result.completion, entry["batch"], started, self.submitter.sent[sid]
                )
            else:
                assert result.error is not None
                pending.log.append(dict(attempt_entry(result.error), batch=entry["batch"]))
                self._failed(pending, result.error, entry)
        for sid in positions.values():
            pending = self.waiting.pop(sid, None) if sid not in seen else None
            if pending is not None:
                error = _unanswered(entry, state)
                pending.log.append(dict(attempt_entry(error), batch=entry["batch"]))
                self._failed(pending, error, entry)
        self.recorder.flush()
        self.ledger.update(entry, status=state.status, ended=utc_now(), collected=True)

    def _submit(self, spec: str, items: list[tuple[Pending, bytes]]) -> None:
        if self.stopped_by:
            return  # --max-cost held a batch back: nothing more goes out
        submitted, failures = self.submitter.submit(spec, items)
        for pending in submitted:
            self.waiting[pending.sample_id] = pending
        for pending, error in failures:
            self._failed(pending, error, None)
        if self.submitter.held_back:
            self.stopped_by = "max_cost"

    def _failed(self, pending: Pending, error: Any, entry: dict[str, Any] | None) -> None:
        """A request that failed: into a follow-up batch while it may succeed and has attempts
        left, else a failed sample."""
        attempts = self.submitter.sent[pending.sample_id]
        retryable = getattr(error, "retryable", False)
        again = attempts < self.options.max_attempts and not self.options.cancel_batches
        if retryable and again and not self.cancel.is_set():
            self.retry[pending.arm.model.spec].append(pending)
            return
        self.recorder.failed(pending, error, entry["batch"] if entry else None, attempts)

    def _resubmit(self) -> None:
        """Retryable failures go into follow-up batches, their bodies rebuilt from the requests kept."""
        retry, self.retry = self.retry, defaultdict(list)
        for spec, pendings in retry.items():
            api = self.apis[spec]
            items = []
            for pending in pendings:
                sid = pending.sample_id
                messages = loads((self.store.path / "raw" / f"{sid}.request.json").read_bytes())
                items.append((pending, dumps_line(api.body(messages))[:-1]))
            self._submit(spec, items)

    # -- the loop --------------------------------------------------------------------------

    def run(self, units: Iterable[Unit]) -> None:
        """Prepare and submit `units`, then wait for every batch and record its results."""
        try:
            self._run(list(units))
        except ProbeError as exc:
            self.abort = self.abort or exc
            self.cancel.set()
        finally:
            self.abort = self.abort or self.preparer.abort
            self.recorder.flush()
            self.detached = [e["batch"] for e in self.ledger.uncollected()]

    def _run(self, units: list[Unit]) -> None:
        wanted = {
            sample_id(u.case.id, u.repeat, a)
            for u in units
            for a in self.plan.arms
            if not self.skip(sample_id(u.case.id, u.repeat, a))
        }
        open_entries = [e for e in self.ledger.uncollected() if wanted & set(e["samples"])]
        inflight = {sid for e in open_entries for sid in e["samples"]} & wanted
        if self.options.cancel_batches:
            self._cancel_outstanding(open_entries)
        by_model: dict[str, list[tuple[Pending, bytes]]] = defaultdict(list)
        work = []
        for unit in units:
            arms = [
                a
                for a in self.plan.arm_order(unit.case, unit.repeat)
                if sample_id(unit.case.id, unit.repeat, a) in wanted
            ]
            if arms:
                work.append((unit, arms))
        submitting = not self.options.cancel_batches
        with ThreadPoolExecutor(max_workers=max(1, self.options.concurrency)) as pool:
            for start in range(0, len(work), PREPARE_WINDOW):
                window = work[start : start + PREPARE_WINDOW]
                for (unit, _), prepared in zip(window, pool.map(self.preparer.prepare, window), strict=True):
                    for arm, record, ready in prepared:
                        if ready is None:
                            self.recorder.final(record, arm)
                            continue
                        messages, passages = ready
                        pending = Pending(unit, arm, record["started_at"], passages)
                        if record["sample_id"] in inflight:
                            self.waiting[record["sample_id"]] = (
                                pending  # sent already: await it, never resend
                            )
                        else:
                            body = self.apis[arm.model.spec].body(messages)
                            by_model[arm.model.spec].append((pending, dumps_line(body)[:-1]))
                if self.cancel.is_set():
                    break
                for spec, items in by_model.items():
                    if submitting and len(items) >= SUBMIT_CHUNK:
                        by_model[spec] = []
                        self._submit(spec, items)
        self.recorder.flush()
        if self.cancel.is_set():
            return
        if submitting:
            for spec, items in by_model.items():
                self._submit(spec, items)
        else:
            self.stopped_by = "batch_cancelled"  # nothing new goes out; what was sent is collected
        by_model.clear()
        self._wait()

    def _cancel_outstanding(self, entries: list[dict[str, Any]]) -> None:
        for entry in entries:
            try:
                self.apis[entry["model"]].cancel(entry["batch"])
            except ProviderError as exc:
                warn(f"batch {entry['batch']}: could not cancel it ({exc}); it keeps running")

    def _wait(self) -> None:
        while not self.cancel.is_set():
            self._resubmit()
            awaited = self.waiting.keys()
            open_entries = [
                e for e in self.ledger.uncollected() if any(sid in awaited for sid in e["samples"])
            ]
            if not open_entries and not any(self.retry.values()):
                return
            states = {}
            for entry in open_entries:
                state = self._state(entry)
                if state is None:
                    return
                states[entry["batch"]] = state
                if state.ended:
                    self._collect(entry, state)
            self.on_batches(self.ledger.progress(states, self.submitter.first_submitted))
            if any(not s.ended for s in states.values()) and not any(self.retry.values()):
                self.cancel.wait(self.options.poll_interval)


def _seconds_since(stamp: str) -> float:
    from datetime import UTC, datetime

    try:
        then = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return 0.0
    return max(0.0, (datetime.now(UTC) - then).total_seconds())


def _unanswered(entry: dict[str, Any], state: BatchState) -> ProviderError:
    """A request the ended batch returned nothing for: why, from the batch's own state."""
    where = f"{entry['model']}: batch {entry['batch']} ended ({state.status})"
    if state.error:
        return ProviderError("batch_failed", f"{where}: {state.error}", retryable=False)
    if state.status == "expired":
        return ProviderError("batch_expired", f"{where} before this request was processed", retryable=True)
    if state.status in ("cancelled", "canceled"):
        return ProviderError(
            "batch_cancelled", f"{where}: the request was cancelled with it", retryable=False
        )
    return ProviderError("batch_missing", f"{where} without a result for this request", retryable=True)
