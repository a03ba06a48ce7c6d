"""The live back-end: worker threads that pull the plan lazily, retrieve each unit once and call
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

from ..errors import ProbeError, StartError
from .backend import Backend, Pass
from .executor import Executor
from .health import HealthWatch
from .limiter import Cancelled
from .plan import Arm, Unit
from .retrieval import Retrieved
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


class Scheduler(Backend):
    """Live calls: `concurrency` workers take the units' arms as they come."""

    def __init__(
        self,
        work: Pass,
        executor: Executor,
        concurrency: int,
        max_cost: float | None = None,
        reachable: Callable[[str], bool] | None = None,
    ) -> None:
        super().__init__(work)
        self.executor = executor
        self.concurrency = concurrency
        self.max_cost = max_cost
        self.cancel = work.cancel
        self.lock = threading.Lock()
        self.pending: deque[Task] = deque()
        self.units: Iterator[Unit] = iter(())
        self.health = HealthWatch([arm.model.spec for arm in work.plan.arms], work.down, reachable)
        self.workers: list[threading.Thread] = []

    # -- dispatch --------------------------------------------------------------------------

    def _next(self) -> Task | None:
        with self.lock:
            while True:
                if self.cancel.is_set() or self.stopped_by:
                    return None
                if self.pending:
                    return self.pending.popleft()
                if self.max_cost is not None and self.work.recorder.tally.cost >= self.max_cost:
                    self.stopped_by = "max_cost"
                    return None
                unit = next(self.units, None)
                if unit is None:
                    return None
                arms = self.work.arms(unit)
                if not arms:
                    continue
                slot = Slot()
                tasks = [Task(unit, arm, slot, i == 0) for i, arm in enumerate(arms)]
                self.pending.extend(tasks[1:])
                return tasks[0]

    # -- work ------------------------------------------------------------------------------

    def _retrieval_for(self, task: Task) -> Retrieved | None:
        if task.retrieves:
            retrieved = self.work.reuse.pop((task.unit.case.id, task.unit.repeat), None)
            if retrieved is None:
                try:
                    retrieved = self.work.retrieval.retrieve(task.unit.case)
                except Cancelled:
                    task.slot.set(None)
                    return None
                self.work.retrieval.record(task.unit, retrieved)
                with self.lock:
                    stop = self.health.saw_retrieval(retrieved)
                if stop is not None:
                    self.stop(stop)
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
            record = self.work.records.not_called(task.unit, task.arm, "model_down", down)
        else:
            record = self.executor.sample(task.unit, task.arm, retrieved)
            if record is None:
                return  # cancelled mid-call: not recorded, resume runs it again
        self.work.recorder.record(record, task.arm)
        with self.lock:
            stop = self.health.saw_sample(task.arm.model.spec, record)
        if stop is not None:
            self.stop(stop)

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
                self.stop(exc)
            except Exception as exc:  # a bug must stop the run loudly, never lose a sample quietly
                self.stop(
                    StartError(
                        f"internal error while running {task.unit.case.id}: {type(exc).__name__}: {exc}"
                    )
                )
            finally:
                task.slot.event.set()  # never leave the unit's other arms waiting

    def stop(self, error: ProbeError) -> None:
        with self.lock:
            if self.abort is None:
                self.abort = error
        self.cancel.set()

    # -- the pass ----------------------------------------------------------------------------

    def submit(self, units: Iterable[Unit]) -> None:
        """Workers start taking `units` (lazily: the plan is never held whole)."""
        self.units = iter(units)
        self.workers = [
            threading.Thread(target=self._worker, name=f"probe-worker-{i}", daemon=True)
            for i in range(self.concurrency)
        ]
        for worker in self.workers:
            worker.start()

    def collect(self) -> None:
        """Returns when the workers are done, or a cancel's grace is over (raises nothing)."""
        for worker in self.workers:
            # Join in turn, waking often enough to notice a cancel (the last one ends the loop at once).
            while worker.is_alive() and not self.cancel.is_set():
                worker.join(0.05)
        deadline = time.monotonic() + GRACE_SECONDS
        for worker in self.workers:
            worker.join(max(0.0, deadline - time.monotonic()))
        try:
            self.work.recorder.flush()  # the last records handed to the writer are on disk
        except ProbeError as exc:
            self.stop(exc)
