"""Sending a batch run's requests: in batches within the provider's limits and what --max-cost
allows, each recorded in the ledger before its create call (with what identifies it) and again
with its id, before anything waits on it.

A create call that fails is retried with backoff up to --max-attempts, looking first for a batch
the failed call may have made; when it cannot be created the run stops (exit 3) and says why.
A resume first settles every create a killed process left unanswered: the batch it made is
found (the batch list) and awaited, or the requests go out again.

Where batches carry no marker of the run (Anthropic), a create answered with an error made
nothing and is not looked for; a batch found again after a lost answer is a candidate
(`confirmed: false` in the ledger) whose results are used only once their custom ids prove it
the run's own (engine/batch_results.py)."""

import hashlib
import threading
import time
from collections.abc import Callable
from typing import Any

from ..errors import StartError
from ..providers.base import ProviderError
from ..providers.batching import BatchAPI, BatchLimits, Submission, answered_error, chunked
from .batch_ledger import CREATING, NOT_CREATED, BatchLedger, submission_of
from .batch_work import BatchSettings, Pending
from .cost import Tokens, estimate_tokens
from .limiter import Cancelled
from .recorder import Tally
from .retry import Attempted, call_with_retries
from .store import utc_now

# Batches of at most this many requests, within every provider's limit: each goes out as soon as
# it is full, so requests are never all held at once, and results come back in pieces.
SUBMIT_CHUNK = 10_000


def ids_prefix(label: str) -> str:
    """The custom ids' prefix of a submission: its requests are found again by it."""
    return hashlib.sha256(label.encode()).hexdigest()[:10] + "-"


class BatchCreator:
    """Creates one batch at a time, each in the ledger before its create call and with its id
    after; settles the creates a killed process left unanswered."""

    def __init__(self, settings: BatchSettings, ledger: BatchLedger, cancel: threading.Event) -> None:
        self.settings = settings
        self.ledger = ledger
        self.cancel = cancel

    def _retried(self, call: Callable[[], Any], what: str) -> Any:
        """A batch API call under the retry policy; StartError (the run stops) when it keeps failing."""
        try:
            return call_with_retries(
                call, self.settings.policy, self.cancel, retryable_kinds=(ProviderError,)
            )[0]
        except Attempted as failure:
            raise StartError(f"{what} after {failure.attempts} attempt(s): {failure.error}") from None

    def settle(self) -> None:
        """Every submission whose create call never answered (a process killed inside it): the batch
        it made is found and awaited, or it is marked not created and its requests go out again."""
        for entry in self.ledger.unsettled():
            api = self.settings.apis[entry["model"]]
            submission = submission_of(entry)
            try:
                found = self._retried(
                    lambda api=api, submission=submission: api.find(submission, self.ledger.known()),
                    f"model {entry['model']}: cannot look for the batch a killed run was creating",
                )
            except Cancelled:
                return  # left as it is: the next resume looks again
            if found:
                self.ledger.created(entry, found, submitted=entry["at"], **found_again(api))
            else:
                self.ledger.update(entry, status=NOT_CREATED)

    def create(self, api: BatchAPI, spec: str, pendings: list[Pending], bodies: list[bytes]) -> bool:
        """Upload and create one batch of `pendings` (their bodies), in the ledger before the create
        call and with its id after; False when the run was cancelled on the way."""
        label = f"{self.settings.label}-{len(self.ledger.entries) + 1}"
        prefix = ids_prefix(label)
        requests = [(f"{prefix}p{position}", body) for position, body in enumerate(bodies)]
        try:
            submission = self._retried(
                lambda: api.upload(Submission(label, len(requests), utc_now()), requests),
                f"model {spec}: could not upload a batch's {len(requests)} requests",
            )
        except Cancelled:
            return False
        entry = {
            "submission": label,
            "ids": prefix,
            "input_file": submission.input_file,
            "at": submission.at,
            "batch": None,
            "provider": pendings[0].arm.model.provider,
            "model": spec,
            "samples": [p.sample_id for p in pendings],
            "submitted": None,
            "status": CREATING,
            "ended": None,
            "collected": False,
            "retries": 0,
        }
        self.ledger.add(entry)  # before the create call: a resume can look for what it made
        made = self._create(api, spec, submission, entry)
        if made is None:
            return False
        batch_id, found = made
        self.ledger.created(entry, batch_id, submitted=utc_now(), **(found_again(api) if found else {}))
        return True

    def _create(
        self, api: BatchAPI, spec: str, submission: Submission, entry: dict[str, Any]
    ) -> tuple[str, bool] | None:
        """The new batch's id and whether it was found again rather than made; None when cancelled.
        A retry first looks for a batch the failed call may have made (a timeout or a 5xx can come
        after the provider accepted it), unless the API has no marker and the call was answered
        with an error."""
        tried = 0
        lost = False  # the last create call's answer never came (or could not be read)
        found_id: str | None = None

        def attempt() -> str:
            nonlocal tried, lost, found_id
            if tried and (api.marked or lost):
                found_id = api.find(submission, self.ledger.known())
                if found_id:
                    return found_id
            tried += 1
            try:
                return api.create(submission)
            except ProviderError as exc:
                lost = not answered_error(exc)
                raise

        try:
            batch_id, _, log = call_with_retries(
                attempt, self.settings.policy, self.cancel, retryable_kinds=(ProviderError,)
            )
        except Cancelled:
            if not tried:
                self.ledger.update(entry, status=NOT_CREATED)  # no create call was made
            return None  # else it stays `creating`: a resume looks for what the call made
        except Attempted as failure:
            found = self._last_look(api, submission, entry, failure, api.marked or lost)
            if found is None:
                raise StartError(
                    f"model {spec}: could not create a batch after {failure.attempts} attempt(s) "
                    f"({failure.error}); its {submission.count} requests were not sent"
                ) from None
            entry["retries"] = failure.attempts
            return found, True
        entry["retries"] = len(log)
        return batch_id, batch_id == found_id

    def _last_look(
        self, api: BatchAPI, submission: Submission, entry: dict[str, Any], failure: Attempted, look: bool
    ) -> str | None:
        """The batch the last failed create call made after all, if any (`look` False: the call was
        answered with an error, so it made none). When the list cannot be read either, the entry
        stays `creating` and a resume looks again."""
        try:
            found = api.find(submission, self.ledger.known()) if look else None
        except ProviderError:
            return None
        if found is None:
            self.ledger.update(entry, status=NOT_CREATED, error=str(failure.error))
        return found


def found_again(api: BatchAPI) -> dict[str, Any]:
    """The ledger's fields for a batch found again rather than made: without a marker of the run,
    a candidate until its results' custom ids confirm it."""
    return {"found_again": True} if api.marked else {"found_again": True, "confirmed": False}


class BatchSubmitter:
    """Sends one model's requests in batches within its limits and what --max-cost allows;
    `sent` counts each sample's batches."""

    def __init__(self, settings: BatchSettings, ledger: BatchLedger, cancel: threading.Event, tally: Tally):
        self.settings = settings
        self.ledger = ledger
        self.cancel = cancel
        self.tally = tally
        self.creator = BatchCreator(settings, ledger, cancel)
        self.sent = ledger.submissions()
        self.committed = 0.0  # the most the batches submitted so far can cost
        self.first_submitted: float | None = None
        self.held_back = False  # --max-cost kept a batch back: nothing more goes out

    def settle(self) -> None:
        """Settle what a killed process left being created (BatchCreator.settle), then count again."""
        self.creator.settle()
        self.sent.clear()
        self.sent.update(self.ledger.submissions())

    def submit(
        self, spec: str, items: list[tuple[Pending, bytes]], sent: Callable[[list[Pending]], None]
    ) -> None:
        """Send (sample, body as JSON bytes) items in batches; `sent` is told each batch's samples
        once it has an id. Raises StartError when a batch cannot be uploaded or created."""
        api = self.settings.apis[spec]
        sized = [(str(index), body, len(body)) for index, (_, body) in enumerate(items)]
        by_index = {str(i): pending for i, (pending, _) in enumerate(items)}
        limits = BatchLimits(min(api.limits.requests, SUBMIT_CHUNK), api.limits.bytes)
        for chunk in chunked(sized, limits):
            if self.cancel.is_set() or self.held_back:
                return
            if self.settings.max_cost is not None:
                chunk = self._within_cost(chunk, by_index)
                if not chunk:
                    self.held_back = True
                    return
            pendings = [by_index[index] for index, _, _ in chunk]
            if not self.creator.create(api, spec, pendings, [body for _, body, _ in chunk]):
                return  # cancelled
            for pending in pendings:
                self.sent[pending.sample_id] += 1
            self.first_submitted = self.first_submitted or time.monotonic()
            sent(pendings)

    def _within_cost(self, chunk: list[tuple[str, Any, int]], by_index: dict[str, Pending]) -> list[Any]:
        """The part of a chunk whose most possible cost still fits under --max-cost."""
        assert self.settings.max_cost is not None
        kept = []
        for item in chunk:
            most = self._most_cost(by_index[item[0]], item[1])
            if self.tally.cost + self.committed + most > self.settings.max_cost:
                break
            self.committed += most
            kept.append(item)
        return kept

    def _most_cost(self, pending: Pending, body: bytes) -> float:
        prices = self.settings.prices
        price = prices.lookup(pending.arm.model) if prices else None
        if price is None:
            return 0.0
        tokens = Tokens(estimate_tokens(body.decode("utf-8", "replace")), 0, 0, self.settings.max_tokens)
        return price.cost_of(tokens, batch=True)
