"""Batch runs (`--batch`): every retrieval first, snapshotted as in a live run; then the planned
requests go to each model's batch API in batches within its limits; the results are recorded
exactly like live samples (`via: "batch"`), and what failed and may be retried goes into a
follow-up batch, up to --max-attempts submissions per sample.

Nothing is submitted twice: each batch is written to `batches.jsonl` as soon as the provider
has given it an id, before its results are awaited. Ctrl-C detaches (the batches keep running
at the provider); `probe run --resume RUN` re-attaches to every batch not yet collected and
submits only what was never submitted; `--cancel` cancels what is outstanding.
"""

import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import ProbeError
from ..jsonio import dumps_line, iter_jsonl, loads, warn
from ..providers.base import ProviderError
from ..providers.batching import BatchAPI, BatchLimits, BatchState, chunked
from ..retrievers import Passage
from .cost import Tokens, estimate_tokens
from .executor import Executor, Retrieved
from .limiter import Cancelled
from .plan import Arm, Unit, sample_id
from .retry import Attempted, attempt_entry, call_with_retries
from .store import RunStore, utc_now

if TYPE_CHECKING:
    from .run import ProbeRun

LEDGER = "batches.jsonl"
WRITE_GROUP = 500  # result records written (and fsynced) together
# Batches of at most this many requests, within every provider's limit: each goes out as soon as
# it is full, so requests are never all held at once, and results come back in pieces.
SUBMIT_CHUNK = 10_000
PREPARE_WINDOW = 1_000  # units retrieved and prepared at a time
OPEN_STATES = ("submitted",)


@dataclass(slots=True)
class Pending:
    """A sample on its way through a batch: what its record and its checks will need (the record
    itself is built when its result comes: a hundred thousand of them must stay small)."""

    unit: Unit
    arm: Arm
    started_at: str
    passages: list[Passage]
    log: list[dict[str, Any]] = field(default_factory=list)

    @property
    def sample_id(self) -> str:
        return sample_id(self.unit.case.id, self.unit.repeat, self.arm)


class BatchLedger:
    """`batches.jsonl`: one line per submitted batch (provider, model, batch id, the sample ids it
    carries, submitted/ended times, status, collected), rewritten whole as batches end."""

    def __init__(self, store: RunStore) -> None:
        self.store = store
        entries: dict[str, dict[str, Any]] = {}
        for entry in iter_jsonl(store.path / LEDGER):
            entries[entry["batch"]] = entry  # the last line of a batch is its state
        self.entries = list(entries.values())

    def add(self, entry: dict[str, Any]) -> None:
        self.entries.append(entry)
        self.store.append(LEDGER, entry)

    def update(self, entry: dict[str, Any], **fields: Any) -> None:
        entry.update(fields)
        self.store.replace_file(LEDGER, b"".join(dumps_line(e) for e in self.entries))

    def uncollected(self) -> list[dict[str, Any]]:
        return [e for e in self.entries if not e.get("collected")]

    def submissions(self) -> Counter:
        """How many batches each sample id has been sent in."""
        return Counter(sid for entry in self.entries for sid in entry["samples"])


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
        self.run_ = run
        self.store = run.store
        self.plan = run.plan
        self.executor: Executor = run.executor_for(run.store)
        self.cancel = run.cancel_event
        self.tally = run.tally
        self.options = run.options
        self.apis: dict[str, BatchAPI] = run.batch_apis
        self.on_record = run.on_record or (lambda record: None)
        self.on_batches = run.on_batches or (lambda text: None)
        self.skip = skip
        self.reuse = reuse or {}
        self.record_extra = record_extra or {}
        self.down = run.down_models
        self.ledger = BatchLedger(run.store)
        self.sent = self.ledger.submissions()
        self.waiting: dict[str, Pending] = {}
        self.abort: ProbeError | None = None
        self.stopped_by: str | None = None
        self.detached: list[str] = []  # batch ids left running at the provider
        self.committed = 0.0  # the most the batches submitted so far can cost
        self.first_submitted: float | None = None
        self.buffer: list[dict[str, Any]] = []
        self.retry: dict[str, list[Pending]] = defaultdict(list)

    # -- preparing -------------------------------------------------------------------------

    def _prepare(self, unit: Unit, arms: list[Arm]) -> list[tuple[Arm, dict[str, Any], Any]]:
        """Retrieve a unit once (worker threads) and prepare each arm: (arm, record, messages),
        the messages None when the record is final already."""
        key = (unit.case.id, unit.repeat)
        retrieved = self.reuse.pop(key, None)
        if retrieved is None:
            retrieved = self.executor.retrieve(unit.case)
            self.executor.record_retrieval(unit, retrieved, self.record_extra)
        prepared: list[tuple[Arm, dict[str, Any], Any]] = []
        for arm in arms:
            down = self.down.get(arm.model.spec)
            if down is not None:
                prepared.append((arm, self.executor.not_called(unit, arm, "model_down", down), None))
                continue
            record, messages = self.executor.prepared(unit, arm, retrieved)
            prepared.append(
                (arm, record, (messages, retrieved.passages or []) if messages is not None else None)
            )
        return prepared

    def _final(self, record: dict[str, Any], arm: Arm) -> None:
        record.update(self.record_extra)
        self.buffer.append(record)
        self.tally.recorded += 1
        self.tally.errors += bool(record.get("error"))
        if not record.get("error"):
            self._add_cost(arm, record)
        self.on_record(record)
        if len(self.buffer) >= WRITE_GROUP:
            self._flush()

    def _flush(self) -> None:
        if self.buffer:
            self.store.append_many("samples.jsonl", self.buffer)
            self.buffer = []

    def _add_cost(self, arm: Arm, record: dict[str, Any]) -> None:
        from .cost import split_usage

        usage = (record.get("response") or {}).get("usage")
        price = self.run_.prices.lookup(arm.model)
        if not usage:
            return
        if price is None:
            self.tally.cost_known = False
            return
        self.tally.cost += price.cost_of(split_usage(usage), batch=True)

    # -- submitting ------------------------------------------------------------------------

    def _most_cost(self, arm: Arm, body: bytes) -> float:
        price = self.run_.prices.lookup(arm.model)
        if price is None:
            return 0.0
        tokens = Tokens(
            estimate_tokens(body.decode("utf-8", "replace")), 0, 0, self.options.params.max_tokens
        )
        return price.cost_of(tokens, batch=True)

    def _submit(self, spec: str, items: list[tuple[Pending, bytes]]) -> None:
        """Send one model's requests (bodies as JSON bytes) in batches within its limits, each
        written to the ledger as soon as the provider has given it an id."""
        if self.stopped_by:
            return  # --max-cost held a batch back: nothing more goes out
        api = self.apis[spec]
        sized = [(str(index), body, len(body)) for index, (_, body) in enumerate(items)]
        by_index = {str(i): pending for i, (pending, _) in enumerate(items)}
        limits = BatchLimits(min(api.limits.requests, SUBMIT_CHUNK), api.limits.bytes)
        for chunk in chunked(sized, limits):
            if self.cancel.is_set():
                return
            if self.options.max_cost is not None:
                chunk = self._within_cost(chunk, by_index)
                if not chunk:
                    self.stopped_by = "max_cost"
                    return
            pendings = [by_index[index] for index, _, _ in chunk]
            requests = [(f"p{position}", body) for position, (_, body, _) in enumerate(chunk)]
            label = f"{self.store.path.name}-{len(self.ledger.entries) + 1}"
            try:
                batch_id, _, log = call_with_retries(
                    lambda requests=requests, label=label: api.submit(requests, label),
                    self.options.policy(),
                    self.cancel,
                    retryable_kinds=(ProviderError,),
                )
            except Cancelled:
                return
            except Attempted as failure:
                error = failure.error
                for pending in pendings:
                    pending.log.extend(failure.log)
                    self._failed(pending, error, None)
                continue
            sids = [p.sample_id for p in pendings]
            self.ledger.add(
                {
                    "batch": batch_id,
                    "provider": pendings[0].arm.model.provider,
                    "model": spec,
                    "samples": sids,
                    "submitted": utc_now(),
                    "status": "submitted",
                    "ended": None,
                    "collected": False,
                    "retries": len(log),
                }
            )
            self.first_submitted = self.first_submitted or time.monotonic()
            for pending in pendings:
                self.sent[pending.sample_id] += 1
                self.waiting[pending.sample_id] = pending

    def _within_cost(self, chunk: list[tuple[str, Any, int]], by_index: dict[str, Pending]) -> list[Any]:
        """The part of a chunk whose most possible cost still fits under --max-cost."""
        assert self.options.max_cost is not None
        kept = []
        for item in chunk:
            most = self._most_cost(by_index[item[0]].arm, item[1])
            if self.tally.cost + self.committed + most > self.options.max_cost:
                break
            self.committed += most
            kept.append(item)
        return kept

    # -- collecting ------------------------------------------------------------------------

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
            self.abort = self.abort or _start_error(
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
                self._succeeded(pending, result.completion, entry, started)
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
        self._flush()
        self.ledger.update(entry, status=state.status, ended=utc_now(), collected=True)

    def _record_of(self, pending: Pending) -> dict[str, Any]:
        record = self.executor.base_record(pending.unit, pending.arm)
        record["started_at"] = pending.started_at
        record["retrieval"] = self.executor.retrieval_summary(pending.passages)
        return record

    def _succeeded(self, pending: Pending, completion: Any, entry: dict[str, Any], started: float) -> None:
        record = self._record_of(pending)
        sid = record["sample_id"]
        record.update(
            attempts=self.sent[sid],
            attempts_log=pending.log,
            latency_ms=round(started * 1000, 1),
            via="batch",
            batch=entry["batch"],
        )
        self.executor.record_completion(record, completion, pending.unit, pending.passages)
        self._final(record, pending.arm)

    def _failed(self, pending: Pending, error: Any, entry: dict[str, Any] | None) -> None:
        sid = pending.sample_id
        retryable = getattr(error, "retryable", False)
        again = self.sent[sid] < self.options.max_attempts and not self.options.cancel_batches
        if retryable and again and not self.cancel.is_set():
            self.retry[pending.arm.model.spec].append(pending)
            return
        record = self._record_of(pending)
        record.update(
            attempts=self.sent[sid],
            attempts_log=pending.log,
            via="batch",
            batch=entry["batch"] if entry else None,
        )
        kind = getattr(error, "kind", "error")
        record["error"] = {"kind": kind, "message": str(error), "attempts": self.sent[sid]}
        self._final(record, pending.arm)

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
            self._flush()
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
                for (unit, _), prepared in zip(window, pool.map(self._guarded, window), strict=True):
                    for arm, record, ready in prepared:
                        if ready is None:
                            self._final(record, arm)
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
        self._flush()
        if self.cancel.is_set():
            return
        if submitting:
            for spec, items in by_model.items():
                self._submit(spec, items)
        else:
            self.stopped_by = "batch_cancelled"  # nothing new goes out; what was sent is collected
        by_model.clear()
        self._wait()

    def _guarded(self, item: tuple[Unit, list[Arm]]) -> list[tuple[Arm, dict[str, Any], Any]]:
        """A unit prepared; cancelled or broken production code leaves it out (never half-recorded)."""
        unit, arms = item
        try:
            return self._prepare(unit, arms)
        except Cancelled:
            return []
        except ProbeError as exc:
            self.abort = self.abort or exc
            self.cancel.set()
            return []
        except Exception as exc:  # a bug must stop the run loudly, never lose a sample quietly
            self.abort = self.abort or _start_error(
                f"internal error while preparing {unit.case.id}: {type(exc).__name__}: {exc}"
            )
            self.cancel.set()
            return []

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
            self.on_batches(self._summary(states))
            if any(not s.ended for s in states.values()) and not any(self.retry.values()):
                self.cancel.wait(self.options.poll_interval)

    def _summary(self, states: dict[str, BatchState]) -> str:
        total = sum(len(e["samples"]) for e in self.ledger.entries)
        ended = sum(1 for e in self.ledger.entries if e.get("collected"))
        done = sum(len(e["samples"]) for e in self.ledger.entries if e.get("collected")) + sum(
            s.done for b, s in states.items() if not s.ended
        )
        text = f"batches: {ended}/{len(self.ledger.entries)} ended, {done:,}/{total:,} requests done"
        if self.first_submitted is not None and 0 < done < total:
            elapsed = time.monotonic() - self.first_submitted
            left = round(elapsed * (total - done) / done)
            text += f", expected wait about {left // 3600}:{left % 3600 // 60:02d}:{left % 60:02d}"
        elif done < total:
            text += ", results within the providers' 24 h window"
        return text


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


def _start_error(message: str) -> ProbeError:
    from ..errors import StartError

    return StartError(message)
