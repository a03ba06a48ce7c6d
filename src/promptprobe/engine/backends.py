"""Which back-end a pass over units goes through: live calls (engine/scheduler.py), or with
--batch the providers' batch APIs (engine/batch.py); both built here from the run's parts."""

from collections.abc import Callable
from typing import Any, Protocol

from .backend import Backend, Pass
from .cost import PriceTable
from .parts import RunParts, accepts_connections
from .retry import RetryPolicy
from .scheduler import Scheduler


class BackendOptions(Protocol):
    """What the back-ends read of a run's options (engine/run.py's RunOptions)."""

    batch: bool
    concurrency: int
    max_cost: float | None
    poll_interval: float
    cancel_batches: bool
    params: Any  # GenerationParams

    def policy(self) -> RetryPolicy: ...


def make_backend(
    work: Pass,
    parts: RunParts,
    options: BackendOptions,
    prices: PriceTable,
    on_batches: Callable[[str], None] | None,
) -> Backend:
    policy = options.policy()
    if not options.batch:
        executor = parts.executor(work.records, policy, work.cancel)
        return Scheduler(
            work,
            executor,
            options.concurrency,
            options.max_cost,
            lambda spec: accepts_connections(parts.providers[spec]),
        )
    # The batch modules load only when a run goes through the batch APIs.
    from .batch import BatchScheduler
    from .batch_work import BatchSettings

    settings = BatchSettings(
        parts.batch_apis,
        policy,
        work.recorder.store.path.name,
        options.concurrency,
        options.poll_interval,
        options.cancel_batches,
        options.max_cost,
        prices,
        options.params.max_tokens,
        on_batches or (lambda text: None),
    )
    return BatchScheduler(work, settings)
