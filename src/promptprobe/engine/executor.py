"""The sample executor: retrieve once per unit, then per arm assemble the messages, call the
model under the retry policy, keep the exact bytes, run the checks and build the record."""

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from ..assemble import AssembleError, Assembler
from ..checks import Check, CheckError, CheckSettings, SampleView, outcomes, run_checks
from ..jsonio import dumps_pretty
from ..probeset import Case
from ..prompts import fill
from ..providers.base import Completion, Provider, ProviderError
from ..redaction import SCRUBBER
from ..retrievers import Passage, RetrievalError, Retriever, snapshot_digest
from .limiter import Cancelled, Limiter
from .plan import Arm, Unit, sample_id
from .retry import Attempted, RetryPolicy, call_with_retries, monotonic_ms
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


class Executor:
    def __init__(
        self,
        store: RunStore,
        retriever: Retriever,
        assemble: Assembler,
        providers: dict[str, Provider],
        limiters: dict[str, Limiter],
        checks: list[Check],
        settings: CheckSettings,
        policy: RetryPolicy,
        cancel: threading.Event,
        variables: dict[str, str] | None = None,
    ) -> None:
        self.store = store
        self.retriever = retriever
        self.assemble = assemble
        self.providers = providers
        self.limiters = limiters
        self.checks = checks
        self.settings = settings
        self.policy = policy
        self.cancel = cancel
        self.variables = variables or {}  # [vars] of the config; a case's own vars win

    # -- retrieval -------------------------------------------------------------------------

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

    def record_retrieval(self, unit: Unit, retrieved: Retrieved, extra: dict[str, Any] | None = None) -> None:
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
                **(extra or {}),
            }
        )

    @staticmethod
    def recorded_retrieval(record: dict[str, Any]) -> Retrieved:
        """A retrieval read back from retrievals.jsonl (resume reuses it: arms stay paired)."""
        passages = [Passage(p["id"], p["text"], p.get("score"), p.get("note")) for p in record["passages"]]
        return Retrieved(passages, None, 0, [], record.get("retrieved_at", ""))

    # -- samples ---------------------------------------------------------------------------

    def base_record(self, unit: Unit, arm: Arm) -> dict[str, Any]:
        return {
            "sample_id": sample_id(unit.case.id, unit.repeat, arm),
            "case_id": unit.case.id,
            "repeat": unit.repeat,
            "prompt": arm.prompt.name,
            "model": arm.model.label,  # the arm's model name (its spec unless named)
            "started_at": utc_now(),
            "latency_ms": None,
            "attempts": 0,
            "attempts_log": [],
            "retrieval": None,
            "response": None,
            "raw": None,
            "header": None,
            "checks": {},
            "error": None,
        }

    @staticmethod
    def retrieval_summary(passages: list[Passage]) -> dict[str, Any]:
        """What a sample record keeps of its retrieval (the passages themselves are in retrievals.jsonl)."""
        return {
            "passage_ids": [p.id for p in passages],
            "scores": [p.score for p in passages],
            "sha256": snapshot_digest(passages),
            "empty": not passages,
        }

    def not_called(self, unit: Unit, arm: Arm, kind: str, message: str) -> dict[str, Any]:
        record = self.base_record(unit, arm)
        record["error"] = {"kind": kind, "message": message, "attempts": 0}
        return record

    def prepared(
        self, unit: Unit, arm: Arm, retrieved: Retrieved
    ) -> tuple[dict[str, Any], list[dict[str, str]] | None]:
        """A sample's record so far and the messages to send; no messages when the record is
        already final (the retrieval failed, or the messages could not be assembled)."""
        record = self.base_record(unit, arm)
        sid = record["sample_id"]
        if retrieved.failed:
            # The calls made for this sample were retrieval calls; the model was never called.
            record["attempts"] = retrieved.attempts
            record["attempts_log"] = retrieved.log
            record["error"] = {
                "kind": "retrieval",
                "message": str(retrieved.error),
                "attempts": retrieved.attempts,
            }
            return record, None
        passages = retrieved.passages or []
        record["retrieval"] = self.retrieval_summary(passages)
        try:
            prompt = fill(arm.prompt.text, {**self.variables, **unit.case.variables})
            messages = self.assemble(prompt, unit.case.question, passages, unit.case.history)
        except AssembleError as exc:
            record["error"] = {"kind": "assemble", "message": str(exc), "attempts": 0}
            return record, None
        self.store.write_bytes(f"raw/{sid}.request.json", dumps_pretty(messages).encode("utf-8"))
        return record, messages

    def sample(self, unit: Unit, arm: Arm, retrieved: Retrieved) -> dict[str, Any] | None:
        """The record of one sample; None when the run was cancelled before it finished."""
        started = time.monotonic()
        record, messages = self.prepared(unit, arm, retrieved)
        if messages is None:
            return record
        passages = retrieved.passages or []
        provider = self.providers[arm.model.spec]
        try:
            completion, attempts, log = call_with_retries(
                lambda: provider.complete(messages, self.cancel),
                self.policy,
                self.cancel,
                self.limiters.get(arm.model.spec),
                retryable_kinds=(ProviderError,),
            )
        except Cancelled:
            return None
        except Attempted as failure:
            if getattr(failure.error, "kind", None) == "cancelled":
                return None  # Ctrl-C cut the call: resume runs it again
            record.update(
                attempts=failure.attempts, attempts_log=failure.log, latency_ms=monotonic_ms(started)
            )
            kind = getattr(failure.error, "kind", "error")
            record["error"] = {"kind": kind, "message": str(failure.error), "attempts": failure.attempts}
            return record
        record.update(attempts=attempts, attempts_log=log, latency_ms=monotonic_ms(started))
        limiter = self.limiters.get(arm.model.spec)
        if limiter is not None:
            limiter.observe(completion.headers)
        self.record_completion(record, completion, unit, passages)
        return record

    def record_completion(
        self, record: dict[str, Any], completion: Completion, unit: Unit, passages: list[Passage]
    ) -> None:
        sid = record["sample_id"]
        body, withheld = SCRUBBER.clean_body(completion.body, completion.text)
        response: dict[str, Any] = {
            "stop_reason": completion.stop_reason,
            "usage": completion.usage,
            "request_id": completion.request_id,
            "model": completion.model,
            "body": self.store.write_bytes(f"raw/{sid}.body", body)["path"] if body is not None else None,
        }
        if withheld:
            response["body_withheld"] = withheld  # the text is kept (scrubbed); the wire bytes are not
        if completion.refusal:
            response["refusal"] = completion.refusal
        if completion.text is None:
            response["content"] = None  # no text at all, as opposed to an empty string
        record["response"] = response
        # The exact bytes the API returned, never stripped or re-encoded.
        text = completion.text or ""
        record["raw"] = self.store.write_bytes(f"raw/{sid}.txt", text.encode("utf-8", "surrogatepass"))
        view = SampleView(
            unit.case, completion.text, [p.to_dict() for p in passages], response, self.settings, {}
        )
        try:
            record["header"], record["checks"] = run_checks(self.checks, view)
        except CheckError as exc:
            record["error"] = {"kind": exc.kind, "message": str(exc), "attempts": record["attempts"]}
            return
        record["outcomes"] = outcomes(record, unit.case, self.settings)
