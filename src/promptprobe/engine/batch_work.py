"""What a batch pass works with: its settings, the samples on their way through a batch
(Pending), and the first half of each unit: its retrieval (once, on worker threads, recorded as
in a live run) and each arm's request, ready to go into a batch."""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import ProbeError, StartError
from ..providers.batching import BatchAPI
from ..retrievers import Passage
from .backend import Pass
from .cost import PriceTable
from .limiter import Cancelled
from .plan import Arm, Unit, sample_id
from .retry import RetryPolicy


@dataclass
class BatchSettings:
    """How a batch pass sends and waits: the run's options that concern it, and its batch APIs."""

    apis: dict[str, BatchAPI]  # model spec -> its batch API
    policy: RetryPolicy  # every call to a batch API, and --max-attempts submissions per sample
    label: str  # names the run's submissions (the run directory's name)
    concurrency: int = 8  # units prepared at once
    poll_interval: float = 30.0  # seconds between looks at a batch in progress
    cancel_batches: bool = False  # (resume) cancel the batches still running, submit nothing new
    max_cost: float | None = None
    prices: PriceTable | None = None
    max_tokens: int = 1024  # a request's most output, for the most a batch can cost
    on_batches: Callable[[str], None] = lambda text: None  # told how the batches are doing


@dataclass(slots=True)
class Pending:
    """A sample on its way through a batch: what its record and its checks will need (the record
    itself is built when its result comes: a hundred thousand of them must stay small)."""

    unit: Unit
    arm: Arm
    started_at: str
    passages: list[Passage]
    log: list[dict[str, Any]] = field(default_factory=list)
    error: Any = None  # the last failure, while it waits for a follow-up batch

    @property
    def sample_id(self) -> str:
        return sample_id(self.unit.case.id, self.unit.repeat, self.arm)


class UnitPreparer:
    """Retrieves a unit once and prepares each arm's request; cancelled or broken production code
    leaves the unit out (never half-recorded) and stops the run."""

    def __init__(self, work: Pass) -> None:
        self.work = work
        self.abort: ProbeError | None = None

    def prepare(self, item: tuple[Unit, list[Arm]]) -> list[tuple[Arm, dict[str, Any], Any]]:
        """(arm, record, (messages, passages)) per arm; the last None when the record is final
        already (a model down from the start, a failed retrieval)."""
        unit, arms = item
        try:
            return self._prepare(unit, arms)
        except Cancelled:
            return []
        except ProbeError as exc:
            self._stop(exc)
            return []
        except Exception as exc:  # a bug must stop the run loudly, never lose a sample quietly
            self._stop(
                StartError(f"internal error while preparing {unit.case.id}: {type(exc).__name__}: {exc}")
            )
            return []

    def _stop(self, error: ProbeError) -> None:
        self.abort = self.abort or error
        self.work.cancel.set()

    def _prepare(self, unit: Unit, arms: list[Arm]) -> list[tuple[Arm, dict[str, Any], Any]]:
        retrieved = self.work.retrieval.fetch(unit, self.work.reuse)
        prepared: list[tuple[Arm, dict[str, Any], Any]] = []
        for arm in arms:
            down = self.work.down.get(arm.model.spec)
            if down is not None:
                prepared.append((arm, self.work.records.not_called(unit, arm, "model_down", down), None))
                continue
            record, messages = self.work.records.prepared(unit, arm, retrieved)
            prepared.append(
                (arm, record, (messages, retrieved.passages or []) if messages is not None else None)
            )
        return prepared
