"""The scheduler: worker threads that pull the plan lazily, retrieve each unit once and call
every arm, pipelined (a unit's model calls start as soon as its own retrieval is back).

It asks the health watch (engine/health.py) whether a model is down before calling it, and
stops the run (exit 3) when the watch says the target is down. Cancelling (Ctrl-C, SIGTERM)
stops dispatching at once, cuts waits and streams short, and gives calls in flight a short
grace to finish.
Workers are daemon threads, so a call that hangs cannot hold the process open.
"""

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ..errors import ProbeError, StartError
from .cost import PriceTable, split_usage
from .executor import Executor, Retrieved
from .health import HealthWatch
from .limiter import Cancelled
from .plan import Arm, Plan, Unit, sample_id
from .store import StoreClosed

GRACE_SECONDS = 1.5  # how long calls in flight may finish after a cancel


@dataclass
class Slot:
    """A unit's retrieval, filled by the worker that took the unit, awaited by its other arms."""

    event: threading.Event = field(default_factory=threading.Event)
    value: Retrieved | None = None

    def set(self, value: Retrieved | None) -> None:
        self.value = value
        self.event.set()


@dataclass
class Task:
    unit: Unit
    arm: Arm
    slot: Slot
    retrieves: bool  # this worker does the unit's retrieval


@dataclass
class Tally:
    recorded: int = 0
    errors: int = 0
    cost: float = 0.0
    cost_known: bool = True


class Scheduler:
    def __init__(
        self,
        plan: Plan,
        executor: Executor,
        concurrency: int,
        cancel: threading.Event,
        *,
        prices: PriceTable | None = None,
        max_cost: float | None = None,
        skip: Callable[[str], bool] = lambda sid: False,
        reuse: dict[tuple[str, int], Retrieved] | None = None,
        on_record: Callable[[dict[str, Any]], None] | None = None,
        record_extra: dict[str, Any] | None = None,
        tally: Tally | None = None,
        down: dict[str, str] | None = None,
    ) -> None:
        self.plan = plan
        self.executor = executor
        self.concurrency = concurrency
        self.cancel = cancel
        self.prices = prices
        self.max_cost = max_cost
        self.skip = skip
        self.reuse = reuse or {}
        self.on_record = on_record or (lambda record: None)
        self.record_extra = record_extra or {}
        self.tally = tally or Tally()
        self.lock = threading.Lock()
        self.pending: deque[Task] = deque()
        self.units: Iterator[Unit] = iter(())
        self.abort: ProbeError | None = None
        self.stopped_by: str | None = None
        self.health = HealthWatch([arm.model.spec for arm in plan.arms], down or {})

    # -- dispatch --------------------------------------------------------------------------

    def _next(self) -> Task | None:
        with self.lock:
            while True:
                if self.cancel.is_set() or self.stopped_by:
                    return None
                if self.pending:
                    return self.pending.popleft()
                if self.max_cost is not None and self.tally.cost >= self.max_cost:
                    self.stopped_by = "max_cost"
                    return None
                unit = next(self.units, None)
                if unit is None:
                    return None
                arms = [
                    a
                    for a in self.plan.arm_order(unit.case, unit.repeat)
                    if not self.skip(sample_id(unit.case.id, unit.repeat, a))
                ]
                if not arms:
                    continue
                slot = Slot()
                tasks = [Task(unit, arm, slot, i == 0) for i, arm in enumerate(arms)]
                self.pending.extend(tasks[1:])
                return tasks[0]

    # -- work ------------------------------------------------------------------------------

    def _retrieval_for(self, task: Task) -> Retrieved | None:
        if task.retrieves:
            key = (task.unit.case.id, task.unit.repeat)
            retrieved = self.reuse.pop(key, None)
            if retrieved is None:
                try:
                    retrieved = self.executor.retrieve(task.unit.case)
                except Cancelled:
                    task.slot.set(None)
                    return None
                self.executor.record_retrieval(task.unit, retrieved, self.record_extra)
                with self.lock:
                    stop = self.health.saw_retrieval(retrieved)
                if stop is not None:
                    self._stop(stop)
            task.slot.set(retrieved)
            return retrieved
        while not task.slot.event.wait(0.2):
            if self.cancel.is_set():
                return None
        return task.slot.value

    def _work(self, task: Task) -> None:
        retrieved = self._retrieval_for(task)
        if retrieved is None:
            return
        down = self.health.down(task.arm.model.spec)
        if down is not None:
            record = self.executor.not_called(task.unit, task.arm, "model_down", down)
        else:
            record = self.executor.sample(task.unit, task.arm, retrieved)
            if record is None:
                return  # cancelled mid-call: not recorded, resume runs it again
        record.update(self.record_extra)
        self.executor.store.append_sample(record)
        self._count(task.arm, record)

    def _worker(self) -> None:
        while True:
            task = self._next()
            if task is None:
                return
            try:
                self._work(task)
            except StoreClosed:
                return  # the run was finished while this call was in flight; resume redoes it
            except ProbeError as exc:  # storage failure, production code calling sys.exit
                self._stop(exc)
            except Exception as exc:  # a bug must stop the run loudly, never lose a sample quietly
                self._stop(
                    StartError(
                        f"internal error while running {task.unit.case.id}: {type(exc).__name__}: {exc}"
                    )
                )
            finally:
                task.slot.event.set()  # never leave the unit's other arms waiting

    def _stop(self, error: ProbeError) -> None:
        with self.lock:
            if self.abort is None:
                self.abort = error
        self.cancel.set()

    # -- counting ---------------------------------------------------------------------------

    def _count(self, arm: Arm, record: dict[str, Any]) -> None:
        with self.lock:
            self.tally.recorded += 1
            error = record.get("error")
            if error:
                self.tally.errors += 1
            self._add_cost(arm, record)
            stop = self.health.saw_sample(arm.model.spec, record)
            if stop is not None:
                self.abort = self.abort or stop
                self.cancel.set()
            self.on_record(record)

    def _add_cost(self, arm: Arm, record: dict[str, Any]) -> None:
        usage = (record.get("response") or {}).get("usage")
        if not usage:
            return
        price = self.prices.lookup(arm.model) if self.prices else None
        if price is None:
            self.tally.cost_known = False
            return
        self.tally.cost += price.cost_of(split_usage(usage), record.get("via") == "batch")

    # -- the loop --------------------------------------------------------------------------

    def run(self, units: Iterable[Unit]) -> None:
        """Work through `units`; returns when done, stopped or cancelled (raises nothing)."""
        self.units = iter(units)
        workers = [
            threading.Thread(target=self._worker, name=f"probe-worker-{i}", daemon=True)
            for i in range(self.concurrency)
        ]
        for worker in workers:
            worker.start()
        for worker in workers:
            # Join in turn, waking often enough to notice a cancel (the last one ends the loop at once).
            while worker.is_alive() and not self.cancel.is_set():
                worker.join(0.05)
        deadline = time.monotonic() + GRACE_SECONDS
        for worker in workers:
            worker.join(max(0.0, deadline - time.monotonic()))
