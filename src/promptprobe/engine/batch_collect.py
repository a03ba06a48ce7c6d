"""Reading a batch back: its state (looked at under the retry policy), and once it has ended its
results, each handed over once. A download that fails on the way (a 5xx, a cut connection) is
read again from the start under the retry policy, the results handed over already skipped;
one that keeps failing stops the run (exit 3) with the batch still in the ledger, so a resume
collects it without sending anything again. Result lines that name none of the batch's requests
(unreadable, or not this run's) are kept byte for byte in `raw/<batch>.unmatched.jsonl`."""

import contextlib
import re
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from ..errors import StartError
from ..providers.base import ProviderError
from ..providers.batching import BatchResult, BatchState
from .batch_ledger import custom_ids
from .batch_work import BatchSettings
from .limiter import Cancelled
from .retry import Attempted, call_with_retries
from .store import RunStore

UNKNOWN_LOOKS = 20  # looks at a batch whose status the API does not document before the run stops


class BatchCollector:
    """Looks at batches and reads their results for the batch pass."""

    def __init__(self, settings: BatchSettings, store: RunStore, cancel: threading.Event) -> None:
        self.settings = settings
        self.store = store
        self.cancel = cancel
        self.unknown: dict[str, int] = {}  # batch id -> looks at an undocumented status in a row

    def state(self, entry: dict[str, Any]) -> BatchState | None:
        """The batch's state; None when the run was cancelled. Raises StartError when it cannot be
        read, or when its status is one the API does not document UNKNOWN_LOOKS looks in a row (the
        batch stays in the ledger for --resume)."""
        api = self.settings.apis[entry["model"]]
        try:
            state = call_with_retries(
                lambda: api.state(entry["batch"]),
                self.settings.policy,
                self.cancel,
                retryable_kinds=(ProviderError,),
            )[0]
        except Cancelled:
            return None
        except Attempted as failure:
            raise StartError(
                f"batch {entry['batch']} ({entry['model']}): cannot read its state after "
                f"{failure.attempts} attempt(s): {failure.error}"
            ) from None
        if state.known or state.ended:
            self.unknown.pop(entry["batch"], None)
            return state
        looks = self.unknown[entry["batch"]] = self.unknown.get(entry["batch"], 0) + 1
        if looks >= UNKNOWN_LOOKS:
            raise StartError(
                f"batch {entry['batch']} ({entry['model']}): its status {state.status!r} is not one the "
                f"batch API documents, still after {looks} looks"
            )
        return state

    def ours(self, entry: dict[str, Any], state: BatchState) -> bool | None:
        """Whether every result line of a batch found again that names a request names one of the
        entry's, and one at least does (read before any result is used; nothing of it is kept; a
        line naming none, unreadable, decides nothing); None when the run was cancelled."""
        api = self.settings.apis[entry["model"]]
        positions = custom_ids(entry)

        def read() -> bool:
            named = 0
            with contextlib.closing(api.results(entry["batch"], state)) as results:
                for result in results:
                    if result.custom_id and result.custom_id not in positions:
                        return False
                    named += bool(result.custom_id)
            return named > 0

        try:
            policy = self.settings.policy
            return call_with_retries(read, policy, self.cancel, retryable_kinds=(ProviderError,))[0]
        except Cancelled:
            return None
        except Attempted as failure:
            raise StartError(
                f"batch {entry['batch']} ({entry['model']}) ended but its results cannot be read after "
                f"{failure.attempts} attempt(s) to tell whether it is this run's: {failure.error}"
            ) from None

    def results(
        self, entry: dict[str, Any], state: BatchState, take: Callable[[str, BatchResult], None]
    ) -> tuple[set[str], int] | None:
        """Give each of the batch's samples its result once (`take(sample_id, result)`, the first
        result of a sample counting); (the samples that had one, the lines that named none of them),
        or None when the run was cancelled. Raises StartError when the results cannot be read."""
        api = self.settings.apis[entry["model"]]
        positions = custom_ids(entry)
        seen: set[str] = set()
        unmatched: list[bytes] = []

        def read() -> None:
            unmatched.clear()  # a read from the start finds them again
            for result in api.results(entry["batch"], state):
                sid = positions.get(result.custom_id)
                if sid is None:
                    unmatched.append(result.line)
                elif sid not in seen:
                    seen.add(sid)
                    take(sid, result)

        try:
            call_with_retries(read, self.settings.policy, self.cancel, retryable_kinds=(ProviderError,))
        except Cancelled:
            return None
        except Attempted as failure:
            raise StartError(
                f"batch {entry['batch']} ({entry['model']}) ended but its results cannot be read after "
                f"{failure.attempts} attempt(s): {failure.error}"
            ) from None
        if unmatched:
            self.store.write_file(unmatched_file(entry["batch"]), b"\n".join(unmatched) + b"\n")
        return seen, len(unmatched)


def unmatched_file(batch_id: str) -> str:
    """Where the lines of a batch's results that name none of its requests are kept."""
    return f"raw/{re.sub(r'[^A-Za-z0-9_.-]', '_', batch_id)[:120]}.unmatched.jsonl"


def unanswered(entry: dict[str, Any], state: BatchState, unmatched: int) -> ProviderError:
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
    lines = (
        f" ({unmatched} result line(s) named none of its requests: {unmatched_file(entry['batch'])})"
        if unmatched
        else ""
    )
    return ProviderError("batch_missing", f"{where} without a result for this request{lines}", retryable=True)


def seconds_since(stamp: str | None) -> float:
    try:
        then = datetime.fromisoformat((stamp or "").replace("Z", "+00:00"))
    except ValueError:
        return 0.0
    return max(0.0, (datetime.now(UTC) - then).total_seconds())
