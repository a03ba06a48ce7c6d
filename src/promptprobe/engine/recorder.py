"""Where every finished sample goes, whichever back-end made it: counted in the run's tally,
priced (batch samples at the batch rate), shown, and appended to samples.jsonl, one fsynced
write per sample or, for a batch's results, per group."""

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .cost import Price, PriceTable, split_usage
from .plan import Arm
from .store import RunStore


@dataclass
class Tally:
    recorded: int = 0
    errors: int = 0
    cost: float = 0.0
    cost_known: bool = True


class Recorder:
    """Records finished samples; `group` records are written together (1: each at once)."""

    def __init__(
        self,
        store: RunStore,
        prices: PriceTable | None,
        tally: Tally,
        on_record: Callable[[dict[str, Any]], None] | None = None,
        group: int = 1,
    ) -> None:
        self.store = store
        self.prices = prices
        self.tally = tally
        self.on_record = on_record or (lambda record: None)
        self.group = group
        self.buffer: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.price_of: dict[str, Price | None] = {}  # by model spec
        if group <= 1:
            store.start_writer(self._lost)  # workers hand records over; one thread writes them

    def record(self, record: dict[str, Any], arm: Arm) -> None:
        """A finished record: written (now, or with its group), counted, priced and shown. A
        record the store refuses (StoreClosed: the run is being finished) is not counted."""
        if self.group <= 1:
            self.store.append_sample(record)
        with self.lock:
            self.tally.recorded += 1
            self.tally.errors += bool(record.get("error"))
            self._add_cost(arm, record)
            self.on_record(record)
            if self.group > 1:
                self.buffer.append(record)
                if len(self.buffer) >= self.group:
                    self._flush()

    def flush(self) -> None:
        """What was recorded is on disk (a write that failed is raised here)."""
        if self.group <= 1:
            self.store.flush_writes()
            return
        with self.lock:
            self._flush()

    def _lost(self, records: list[dict[str, Any]]) -> None:
        """Records a failed write did not keep are not counted (the run stops on the failure)."""
        with self.lock:
            self.tally.recorded -= len(records)
            self.tally.errors -= sum(bool(r.get("error")) for r in records)

    def _flush(self) -> None:
        if self.buffer:
            buffer, self.buffer = self.buffer, []
            self.store.append_many("samples.jsonl", buffer)

    def _add_cost(self, arm: Arm, record: dict[str, Any]) -> None:
        if not _usage(record):
            return
        spec = arm.model.spec
        if spec not in self.price_of:  # looked up once a model: a lookup resolves its endpoint
            self.price_of[spec] = self.prices.lookup(arm.model) if self.prices else None
        add_priced(self.tally, self.price_of[spec], record)


def _usage(record: dict[str, Any]) -> Any:
    return (record.get("response") or {}).get("usage")


def add_cost(tally: Tally, prices: PriceTable | None, arm: Arm, record: dict[str, Any]) -> None:
    """Count what a recorded sample cost in the tally (its usage at its arm's model's price)."""
    if _usage(record):
        add_priced(tally, prices.lookup(arm.model) if prices else None, record)


def add_priced(tally: Tally, price: Price | None, record: dict[str, Any]) -> None:
    """Count a recorded sample's usage at `price` (None: unknown, and so is the run's cost)."""
    usage = _usage(record)
    if not usage:
        return
    if price is None:
        tally.cost_known = False
        return
    tally.cost += price.cost_of(split_usage(usage), batch=record.get("via") == "batch")
