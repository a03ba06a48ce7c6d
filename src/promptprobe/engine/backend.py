"""How a run's units reach the models: the one interface a run drives. Live calls
(engine/scheduler.py) and the providers' batch APIs (engine/batch.py) are its two back-ends.
For each pass over units the run builds one, submits the units to it and collects the results;
`abort`, `stopped_by` and `detached` then say how the pass ended. Both back-ends take a unit's
retrieval from Retrieval, build records with SampleRecords and hand every finished sample to the
Recorder, so a sample reads the same whichever way it went; nothing here knows the run."""

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from ..errors import ProbeError
from .plan import Arm, Plan, Unit, sample_id
from .recorder import Recorder
from .records import SampleRecords
from .retrieval import Retrieval, Retrieved


@dataclass
class Pass:
    """What a back-end is given for one pass over units."""

    plan: Plan
    retrieval: Retrieval
    records: SampleRecords
    recorder: Recorder
    cancel: threading.Event
    skip: Callable[[str], bool] = lambda sid: False  # samples recorded already (a resume)
    reuse: dict[tuple[str, int], Retrieved] = field(default_factory=dict)  # retrievals to use again
    down: dict[str, str] = field(default_factory=dict)  # model spec -> why it is not called

    def arms(self, unit: Unit) -> list[Arm]:
        """The unit's arms still to run, in the plan's order for it."""
        return [
            a
            for a in self.plan.arm_order(unit.case, unit.repeat)
            if not self.skip(sample_id(unit.case.id, unit.repeat, a))
        ]


class Backend(ABC):
    """Takes units, returns when every sample of them is recorded, or the pass was stopped."""

    def __init__(self, work: Pass) -> None:
        self.work = work
        self.abort: ProbeError | None = None  # why the pass had to stop (the run fails)
        self.stopped_by: str | None = None  # a limit that stopped it (max_cost, batch_cancelled)
        self.detached: list[str] = []  # batches left running at the provider
        self.keep = False  # the run directory holds work a resume needs, recorded samples or not

    @abstractmethod
    def submit(self, units: Iterable[Unit]) -> None:
        """Send the units on their way (live: workers take them; batch: batches are created)."""

    @abstractmethod
    def collect(self) -> None:
        """Wait for every result and record it; returns when done, stopped or cancelled."""

    def run(self, units: Iterable[Unit]) -> None:
        """Submit `units` and collect their results (raises nothing a run would not)."""
        self.submit(units)
        self.collect()

    def stop(self, error: ProbeError) -> None:
        """End the pass: the first reason given is the one reported."""
        self.abort = self.abort or error
        self.work.cancel.set()
