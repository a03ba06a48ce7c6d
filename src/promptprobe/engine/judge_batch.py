"""Judging through the batch APIs (--batch): once a pass has recorded its outputs, the judgments
still to make go out as a second batch phase, one batch per judge model (within its limits),
each written to `judge_batches.jsonl` with the judgments it carries before anything waits on it.

Waiting is cut by Ctrl-C: the batches are left running at the provider (detached) and `--resume`
awaits and collects them before sending anything new, so no judgment is bought twice. A result
that failed in a way worth retrying is not recorded and goes out again in the next batch, up to
--max-attempts batches; then it is recorded failed (the output's failure on that metric).
`--max-cost` is checked before each batch goes out."""

import hashlib
import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from ..jsonio import dumps_pretty, iter_jsonl
from ..providers.base import ProviderError
from ..providers.batching import BatchAPI, BatchLimits, Submission, chunked
from .judging import Due, JudgeCalls, JudgeInputs, JudgeRecorder, add_judge_cost
from .limiter import Cancelled
from .retry import Attempted, call_with_retries
from .store import utc_now

LEDGER = "judge_batches.jsonl"
CHUNK = 10_000


class BatchJudging:
    """Submits, awaits and collects judge batches; `detached` lists batches left running."""

    def __init__(
        self,
        calls: JudgeCalls,
        inputs: JudgeInputs,
        recorder: JudgeRecorder,
        apis: dict[str, BatchAPI],
        poll_interval: float,
    ) -> None:
        self.calls = calls
        self.inputs = inputs
        self.recorder = recorder
        self.apis = apis
        self.poll_interval = poll_interval
        prefix = f"classifications/{recorder.layer}." if recorder.layer is not None else ""
        self.ledger = f"{prefix}{LEDGER}"
        self.detached: list[str] = []
        self.stopped_by: str | None = None

    def _retried(self, call: Callable[[], Any]) -> Any:
        return call_with_retries(
            call, self.calls.policy, self.calls.cancel, retryable_kinds=(ProviderError,)
        )[0]

    def open_batches(self) -> list[dict[str, Any]]:
        return open_batches(self.recorder.store.path / self.ledger)

    def run(self, dues_of: Callable[[], Iterable[Due]]) -> None:
        for attempt in range(1, self.calls.policy.max_attempts + 1):
            due = {d.key: d for d in dues_of()}
            for entry in self.open_batches():  # a resume collects what was sent before
                if not self.collect(entry, due, last=attempt == self.calls.policy.max_attempts):
                    return
            due = {d.key: d for d in dues_of()}
            if not due or self.calls.cancel.is_set():
                return
            for entry in self.submit(list(due.values())):
                if not self.collect(entry, due, last=attempt == self.calls.policy.max_attempts):
                    return
            if self.stopped_by:
                return

    def submit(self, dues: list[Due]) -> list[dict[str, Any]]:
        """Send `dues` in batches per judge model; the ledger entries made."""
        entries = []
        by_spec: dict[str, list[Due]] = {}
        for due in dues:
            by_spec.setdefault(due.judge.model.spec, []).append(due)
        for spec, group in by_spec.items():
            api = self.apis[spec]
            items = []
            for position, due in enumerate(group):
                body = json.dumps(api.body(self.inputs.messages(due))).encode("utf-8")
                items.append((f"j{len(self.open_batches())}-{position}", body, len(body), due))
            limits = BatchLimits(min(api.limits.requests, CHUNK), api.limits.bytes)
            lookup = {cid: (body, due) for cid, body, _, due in items}
            for chunk in chunked([(cid, body, size) for cid, body, size, _ in items], limits):
                if self.calls.max_cost is not None and self.calls.tally.cost >= self.calls.max_cost:
                    self.stopped_by = "max_cost"
                    return entries
                entry = self._create(
                    api, spec, [(cid, lookup[cid][0], lookup[cid][1]) for cid, _, _ in chunk]
                )
                if entry is None:
                    return entries
                entries.append(entry)
        return entries

    def _create(self, api: BatchAPI, spec: str, chunk: list[tuple[str, bytes, Due]]) -> dict[str, Any] | None:
        label = f"{self.recorder.store.path.name}-judge-{utc_now()}"
        requests = [(cid, body) for cid, body, _ in chunk]
        items = {}
        for cid, body, due in chunk:
            ref = self.recorder.write(due, "request", dumps_pretty(json.loads(body)).encode("utf-8"))
            items[cid] = [*due.key, ref]
        try:
            submission = self._retried(
                lambda: api.upload(Submission(label, len(requests), utc_now()), requests)
            )
            batch_id = self._retried(lambda: api.create(submission))
        except (Cancelled, Attempted) as exc:
            if isinstance(exc, Attempted):
                for cid, _, due in chunk:  # the judgments could not be sent: recorded failed
                    line = self.recorder.line(due, items[cid][3], "batch")
                    self.recorder.failed(line, "batch_create", str(exc.error), exc.attempts)
                    self.recorder.record(line)
            return None
        entry = {"batch": batch_id, "model": spec, "items": items, "submitted": utc_now()}
        self.recorder.store.append(self.ledger, entry)
        return entry

    def collect(self, entry: dict[str, Any], due: dict[tuple[str, str, int], Due], last: bool) -> bool:
        """Await one batch and record its results; False when the wait was cancelled (detached)."""
        api = self.apis[entry["model"]]
        batch_id = entry["batch"]
        try:
            while True:
                state = self._retried(lambda: api.state(batch_id))
                if state.ended:
                    break
                if self.calls.cancel.wait(self.poll_interval):
                    raise Cancelled
            results = list(self._retried(lambda: list(api.results(batch_id, state))))
        except Cancelled:
            self.detached.append(batch_id)
            return False
        except Attempted as failure:
            results = []
            state_error = str(failure.error)
        else:
            state_error = state.error
        seen = set()
        for result in results:
            item = entry["items"].get(result.custom_id)
            if item is None:
                continue
            key = (item[0], item[1], int(item[2]))
            seen.add(result.custom_id)
            if key in due:
                self._record(due[key], item[3], result, last)
        for cid, item in entry["items"].items():
            key = (item[0], item[1], int(item[2]))
            if cid not in seen and key in due and last:
                line = self.recorder.line(due[key], item[3], "batch")
                self.recorder.failed(
                    line, "batch_missing", state_error or "the batch returned no result for it", 1
                )
                self._write(due[key], line)
        self.recorder.store.append(self.ledger, {"batch": batch_id, "collected": True, "at": utc_now()})
        return True

    def _record(self, due: Due, request: dict[str, Any], result: Any, last: bool) -> None:
        line = result_line(self.recorder, due, request, result, last)
        if line is not None:
            self._write(due, line)

    def _write(self, due: Due, line: dict[str, Any]) -> None:
        self.recorder.record(line)
        add_judge_cost(self.calls.tally, self.calls.prices, due.judge.model, line)


def open_batches(ledger: Path) -> list[dict[str, Any]]:
    """The ledger's batches whose results were not collected yet."""
    entries: dict[str, dict[str, Any]] = {}
    for line in iter_jsonl(ledger, lambda message: None):
        if line.get("collected"):
            entries.pop(line.get("batch"), None)
        elif line.get("batch"):
            entries[line["batch"]] = line
    return list(entries.values())


def result_line(
    recorder: JudgeRecorder, due: Due, request: dict[str, Any], result: Any, last: bool
) -> dict[str, Any] | None:
    """The judgment a batch result makes (None: a failure worth retrying, sent again)."""
    line = recorder.line(due, request, "batch")
    line["batch_line_sha256"] = hashlib.sha256(result.line).hexdigest()
    if result.completion is not None:
        line["attempts"] = 1
        recorder.replied(line, due, result.completion)
    elif getattr(result.error, "retryable", False) and not last:
        return None
    else:
        error = result.error
        recorder.failed(line, getattr(error, "kind", "error"), str(error), 1)
    return line
