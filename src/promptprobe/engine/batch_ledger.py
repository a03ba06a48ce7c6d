"""`batches.jsonl`, the ledger of a batch run: one entry per batch, written before the batch is
created (what identifies the submission: its label, its custom ids, OpenAI's input file) and
again as soon as the provider has given it an id, before anything waits on it; rewritten whole
(atomically) as batches end. The last line of an entry is its state."""

import time
from collections import Counter
from typing import Any

from ..jsonio import dumps_line, iter_jsonl
from ..providers.batching import BatchState, Submission
from .store import RunStore

LEDGER = "batches.jsonl"
CREATING = "creating"  # recorded before the create call; no batch id yet
NOT_CREATED = "not_created"  # the create call made no batch (looked for on resume, not found)


def entry_key(entry: dict[str, Any]) -> str:
    return entry.get("submission") or entry["batch"]


class BatchLedger:
    """The run's batches: which samples each carries, whether it has been created, ended, collected."""

    def __init__(self, store: RunStore) -> None:
        self.store = store
        entries: dict[str, dict[str, Any]] = {}
        for entry in iter_jsonl(store.path / LEDGER):
            entries[entry_key(entry)] = entry  # the last line of an entry is its state
        self.entries = list(entries.values())

    def add(self, entry: dict[str, Any]) -> None:
        self.entries.append(entry)
        self.store.append(LEDGER, entry)

    def created(self, entry: dict[str, Any], batch_id: str, **fields: Any) -> None:
        """The provider gave the batch its id: appended at once (one fsynced line)."""
        entry.update(batch=batch_id, status="submitted", **fields)
        self.store.append(LEDGER, entry)

    def update(self, entry: dict[str, Any], **fields: Any) -> None:
        entry.update(fields)
        self.store.replace_file(LEDGER, b"".join(dumps_line(e) for e in self.entries))

    def uncollected(self) -> list[dict[str, Any]]:
        """Batches created and not yet collected."""
        return [e for e in self.entries if e.get("batch") and not e.get("collected")]

    def unsettled(self) -> list[dict[str, Any]]:
        """Submissions recorded whose create call never said whether it made a batch."""
        return [e for e in self.entries if not e.get("batch") and e.get("status") == CREATING]

    def known(self) -> set[str]:
        """The batches accounted for: the run's, and those found again that proved another's."""
        return {e.get("batch") or e["foreign"] for e in self.entries if e.get("batch") or e.get("foreign")}

    def foreign(self, entry: dict[str, Any]) -> None:
        """A batch found again proved another's: the entry made none (never collected, cancelled
        or counted here); its id is kept so that it is never taken again."""
        self.update(entry, batch=None, foreign=entry["batch"], status=NOT_CREATED, confirmed=None)

    def submissions(self) -> Counter:
        """How many batches each sample id has been sent in."""
        return Counter(sid for entry in self.entries if entry.get("batch") for sid in entry["samples"])

    def progress(self, states: dict[str, BatchState], first_submitted: float | None) -> str:
        """The progress line's account: batches ended, requests done, the expected wait (a batch
        found again that may be another run's is not counted until its results say it is ours)."""
        entries = [e for e in self.entries if e.get("batch") and e.get("confirmed") is not False]
        candidates = sum(1 for e in self.entries if e.get("batch") and e.get("confirmed") is False)
        ours = {e["batch"] for e in entries}
        total = sum(len(e["samples"]) for e in entries)
        ended = sum(1 for e in entries if e.get("collected"))
        done = sum(len(e["samples"]) for e in entries if e.get("collected")) + sum(
            s.done for batch, s in states.items() if not s.ended and batch in ours
        )
        text = f"batches: {ended}/{len(entries)} ended, {done:,}/{total:,} requests done"
        if candidates:
            text += f" (and {candidates} found again, this run's only if their results say so)"
        if first_submitted is not None and 0 < done < total:
            elapsed = time.monotonic() - first_submitted
            left = round(elapsed * (total - done) / done)
            text += f", expected wait about {left // 3600}:{left % 3600 // 60:02d}:{left % 60:02d}"
        elif done < total:
            text += ", results within the providers' 24 h window"
        return text


def submission_of(entry: dict[str, Any]) -> Submission:
    """What identifies an entry's batch before it has an id, as the ledger recorded it."""
    return Submission(entry["submission"], len(entry["samples"]), entry["at"], entry.get("input_file"))


def custom_ids(entry: dict[str, Any]) -> dict[str, str]:
    """custom_id -> sample id for an entry's requests (runs before `ids` used pN alone)."""
    prefix = entry.get("ids", "")
    return {f"{prefix}p{i}": sid for i, sid in enumerate(entry["samples"])}
