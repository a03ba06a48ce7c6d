"""A unit's retrieval: fetched once under the retry policy, shared by every arm, written to
retrievals.jsonl, and read back from it when a resumed run reuses it (so arms stay paired)."""

import threading
from dataclasses import dataclass, field
from typing import Any

from ..probeset import Case
from ..retrievers import Passage, RetrievalError, Retriever, snapshot_digest
from .plan import Unit
from .retry import Attempted, RetryPolicy, call_with_retries
from .store import RunStore, utc_now


@dataclass
class Retrieved:
    """One unit's retrieval, shared by every arm: its passages, or why there are none."""

    passages: list[Passage] | None
    error: RetrievalError | None
    attempts: int
    log: list[dict[str, Any]] = field(default_factory=list)
    started_at: str = ""

    @property
    def failed(self) -> bool:
        return self.passages is None


class Retrieval:
    """Retrieves a case's passages under the retry policy and records what came back."""

    def __init__(
        self, store: RunStore | None, retriever: Retriever, policy: RetryPolicy, cancel: threading.Event
    ) -> None:
        self.store = store  # None for the preflight retrieval, which writes nothing
        self.retriever = retriever
        self.policy = policy
        self.cancel = cancel

    def retrieve(self, case: Case) -> Retrieved:
        """Raises Cancelled when the run is cancelled before or between attempts."""
        started = utc_now()
        try:
            passages, attempts, log = call_with_retries(
                lambda: self.retriever.retrieve(case.question, case.history),
                self.policy,
                self.cancel,
                retryable_kinds=(RetrievalError,),
            )
        except Attempted as failure:
            assert isinstance(failure.error, RetrievalError)
            return Retrieved(None, failure.error, failure.attempts, failure.log, started)
        return Retrieved(passages, None, attempts, log, started)

    def record(self, unit: Unit, retrieved: Retrieved) -> None:
        assert self.store is not None
        passages = retrieved.passages or []
        self.store.append_retrieval(
            {
                "case_id": unit.case.id,
                "repeat": unit.repeat,
                "retrieved_at": retrieved.started_at,
                "retriever": self.retriever.description,
                "attempts": retrieved.attempts,
                "attempts_log": retrieved.log,
                "passages": [p.to_dict() for p in passages],
                "empty": retrieved.passages == [],
                "sha256": snapshot_digest(passages) if retrieved.passages is not None else None,
                "error": str(retrieved.error) if retrieved.error else None,
            }
        )

    def fetch(self, unit: Unit, reuse: dict[tuple[str, int], Retrieved]) -> Retrieved:
        """The unit's retrieval: the one kept for it (a resume, the preflight), else a new one,
        recorded. Raises Cancelled."""
        retrieved = reuse.pop((unit.case.id, unit.repeat), None)
        if retrieved is None:
            retrieved = self.retrieve(unit.case)
            self.record(unit, retrieved)
        return retrieved


def recorded_retrieval(record: dict[str, Any]) -> Retrieved:
    """A retrieval read back from retrievals.jsonl (resume reuses it: arms stay paired)."""
    passages = [Passage(p["id"], p["text"], p.get("score"), p.get("note")) for p in record["passages"]]
    return Retrieved(passages, None, 0, [], record.get("retrieved_at", ""))
