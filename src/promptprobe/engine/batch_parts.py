"""The two jobs a batch run hands off: sending requests in batches (within the provider's limits
and --max-cost, each batch in the ledger as soon as it has an id) and recording what comes back
as sample records exactly like live ones. engine/batch.py drives both."""

import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import ProbeError, StartError
from ..jsonio import dumps_line, iter_jsonl
from ..providers.base import ProviderError
from ..providers.batching import BatchLimits, BatchState, chunked
from ..retrievers import Passage
from .cost import Tokens, estimate_tokens, split_usage
from .executor import Executor, Retrieved
from .limiter import Cancelled
from .plan import Arm, Unit, sample_id
from .retry import Attempted, call_with_retries
from .store import RunStore, utc_now

if TYPE_CHECKING:
    from .run import ProbeRun

LEDGER = "batches.jsonl"
WRITE_GROUP = 500  # result records written (and fsynced) together
# Batches of at most this many requests, within every provider's limit: each goes out as soon as
# it is full, so requests are never all held at once, and results come back in pieces.
SUBMIT_CHUNK = 10_000


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

    def progress(self, states: dict[str, BatchState], first_submitted: float | None) -> str:
        """The progress line's account: batches ended, requests done, the expected wait."""
        total = sum(len(e["samples"]) for e in self.entries)
        ended = sum(1 for e in self.entries if e.get("collected"))
        done = sum(len(e["samples"]) for e in self.entries if e.get("collected")) + sum(
            s.done for s in states.values() if not s.ended
        )
        text = f"batches: {ended}/{len(self.entries)} ended, {done:,}/{total:,} requests done"
        if first_submitted is not None and 0 < done < total:
            elapsed = time.monotonic() - first_submitted
            left = round(elapsed * (total - done) / done)
            text += f", expected wait about {left // 3600}:{left % 3600 // 60:02d}:{left % 60:02d}"
        elif done < total:
            text += ", results within the providers' 24 h window"
        return text


class UnitPreparer:
    """Retrieves a unit once (on worker threads) and prepares each arm's request; cancelled or
    broken production code leaves the unit out (never half-recorded) and stops the run."""

    def __init__(
        self,
        executor: Executor,
        reuse: dict[tuple[str, int], Retrieved],
        record_extra: dict[str, Any],
        down: dict[str, Any],
        cancel: threading.Event,
    ) -> None:
        self.executor = executor
        self.reuse = reuse
        self.record_extra = record_extra
        self.down = down
        self.cancel = cancel
        self.abort: ProbeError | None = None

    def prepare(self, item: tuple[Unit, list[Arm]]) -> list[tuple[Arm, dict[str, Any], Any]]:
        """(arm, record, (messages, passages)) per arm; the last None when the record is final
        already (a model down from the start)."""
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
            self.abort = self.abort or StartError(
                f"internal error while preparing {unit.case.id}: {type(exc).__name__}: {exc}"
            )
            self.cancel.set()
            return []

    def _prepare(self, unit: Unit, arms: list[Arm]) -> list[tuple[Arm, dict[str, Any], Any]]:
        retrieved = self.reuse.pop((unit.case.id, unit.repeat), None)
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


class BatchSubmitter:
    """Sends one model's requests in batches within its limits and what --max-cost allows; every
    batch is in the ledger before anything waits on it, and `sent` counts each sample's batches."""

    def __init__(self, run: "ProbeRun", ledger: BatchLedger) -> None:
        assert run.store is not None
        self.run_ = run
        self.store = run.store
        self.apis = run.parts.batch_apis
        self.options = run.options
        self.cancel = run.cancel_event
        self.tally = run.tally
        self.ledger = ledger
        self.sent = ledger.submissions()
        self.committed = 0.0  # the most the batches submitted so far can cost
        self.first_submitted: float | None = None
        self.held_back = False  # --max-cost kept a batch back: nothing more goes out

    def submit(
        self, spec: str, items: list[tuple[Pending, bytes]]
    ) -> tuple[list[Pending], list[tuple[Pending, Exception]]]:
        """(the samples now in a batch, the samples whose batch could not be created, with why);
        bodies are JSON bytes."""
        submitted: list[Pending] = []
        failures: list[tuple[Pending, Exception]] = []
        api = self.apis[spec]
        sized = [(str(index), body, len(body)) for index, (_, body) in enumerate(items)]
        by_index = {str(i): pending for i, (pending, _) in enumerate(items)}
        limits = BatchLimits(min(api.limits.requests, SUBMIT_CHUNK), api.limits.bytes)
        for chunk in chunked(sized, limits):
            if self.cancel.is_set() or self.held_back:
                break
            if self.options.max_cost is not None:
                chunk = self._within_cost(chunk, by_index)
                if not chunk:
                    self.held_back = True
                    break
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
                break
            except Attempted as failure:
                for pending in pendings:
                    pending.log.extend(failure.log)
                    failures.append((pending, failure.error))
                continue
            self.ledger.add(
                {
                    "batch": batch_id,
                    "provider": pendings[0].arm.model.provider,
                    "model": spec,
                    "samples": [p.sample_id for p in pendings],
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
            submitted.extend(pendings)
        return submitted, failures

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

    def _most_cost(self, arm: Arm, body: bytes) -> float:
        price = self.run_.prices.lookup(arm.model)
        if price is None:
            return 0.0
        tokens = Tokens(
            estimate_tokens(body.decode("utf-8", "replace")), 0, 0, self.options.params.max_tokens
        )
        return price.cost_of(tokens, batch=True)


class BatchRecorder:
    """Batch results as sample records, exactly like live ones but for `via` and `batch`, written
    in groups of WRITE_GROUP; tallies and prices them at the batch rate."""

    def __init__(self, run: "ProbeRun", executor: Executor, record_extra: dict[str, Any]) -> None:
        assert run.store is not None
        self.run_ = run
        self.store = run.store
        self.executor = executor
        self.tally = run.tally
        self.on_record = run.on_record or (lambda record: None)
        self.record_extra = record_extra
        self.buffer: list[dict[str, Any]] = []

    def succeeded(
        self, pending: Pending, completion: Any, batch_id: str, seconds: float, attempts: int
    ) -> None:
        record = self._record_of(pending)
        record.update(
            attempts=attempts,
            attempts_log=pending.log,
            latency_ms=round(seconds * 1000, 1),
            via="batch",
            batch=batch_id,
        )
        self.executor.record_completion(record, completion, pending.unit, pending.passages)
        self.final(record, pending.arm)

    def failed(self, pending: Pending, error: Any, batch_id: str | None, attempts: int) -> None:
        record = self._record_of(pending)
        record.update(attempts=attempts, attempts_log=pending.log, via="batch", batch=batch_id)
        kind = getattr(error, "kind", "error")
        record["error"] = {"kind": kind, "message": str(error), "attempts": attempts}
        self.final(record, pending.arm)

    def final(self, record: dict[str, Any], arm: Arm) -> None:
        """A finished record: counted, priced, shown, and written with its group."""
        record.update(self.record_extra)
        self.buffer.append(record)
        self.tally.recorded += 1
        self.tally.errors += bool(record.get("error"))
        if not record.get("error"):
            self._add_cost(arm, record)
        self.on_record(record)
        if len(self.buffer) >= WRITE_GROUP:
            self.flush()

    def flush(self) -> None:
        if self.buffer:
            self.store.append_many("samples.jsonl", self.buffer)
            self.buffer = []

    def _record_of(self, pending: Pending) -> dict[str, Any]:
        record = self.executor.base_record(pending.unit, pending.arm)
        record["started_at"] = pending.started_at
        record["retrieval"] = self.executor.retrieval_summary(pending.passages)
        return record

    def _add_cost(self, arm: Arm, record: dict[str, Any]) -> None:
        usage = (record.get("response") or {}).get("usage")
        price = self.run_.prices.lookup(arm.model)
        if not usage:
            return
        if price is None:
            self.tally.cost_known = False
            return
        self.tally.cost += price.cost_of(split_usage(usage), batch=True)
