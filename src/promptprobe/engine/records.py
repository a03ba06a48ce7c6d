"""Sample records, the same whichever back-end answered: the record's frame, the messages that
were sent (kept in the run's pack as the sample's `request`), and a reply turned into its exact bytes, its
header classification, its checks and its outcomes."""

from typing import Any

from ..assemble import AssembleError, Assembler
from ..checks import Check, CheckError, CheckSettings, SampleView, outcomes, run_checks
from ..jsonio import dumps_pretty
from ..pack import BODY, REQUEST, TEXT
from ..prompts import fill
from ..providers.base import Completion
from ..redaction import SCRUBBER
from ..retrievers import Passage, snapshot_digest
from .plan import Arm, Unit, sample_id
from .retrieval import Retrieved
from .store import RunStore, utc_now


class SampleRecords:
    """Builds sample records and writes the files they point to (requests, bodies, outputs)."""

    def __init__(
        self,
        store: RunStore,
        assemble: Assembler,
        checks: list[Check],
        settings: CheckSettings,
        variables: dict[str, str] | None = None,
    ) -> None:
        self.store = store
        self.assemble = assemble
        self.checks = checks
        self.settings = settings
        self.variables = variables or {}  # [vars] of the config; a case's own vars win

    def base(self, unit: Unit, arm: Arm) -> dict[str, Any]:
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
        record = self.base(unit, arm)
        record["error"] = {"kind": kind, "message": message, "attempts": 0}
        return record

    def prepared(
        self, unit: Unit, arm: Arm, retrieved: Retrieved
    ) -> tuple[dict[str, Any], list[dict[str, str]] | None]:
        """A sample's record so far and the messages to send; no messages when the record is
        already final (the retrieval failed, or the messages could not be assembled)."""
        record = self.base(unit, arm)
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
        self.store.write_bytes(sid, REQUEST, dumps_pretty(messages).encode("utf-8"))
        return record, messages

    def completed(
        self, record: dict[str, Any], completion: Completion, unit: Unit, passages: list[Passage]
    ) -> None:
        """Fill the record from a reply: its bytes, its classification, its checks."""
        sid = record["sample_id"]
        body, withheld = SCRUBBER.clean_body(completion.body, completion.text)
        response: dict[str, Any] = {
            "stop_reason": completion.stop_reason,
            "usage": completion.usage,
            "request_id": completion.request_id,
            "model": completion.model,
            "body": self.store.write_bytes(sid, BODY, body) if body is not None else None,
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
        record["raw"] = self.store.write_bytes(sid, TEXT, text.encode("utf-8", "surrogatepass"))
        view = SampleView(
            unit.case, completion.text, [p.to_dict() for p in passages], response, self.settings, {}
        )
        try:
            record["header"], record["checks"] = run_checks(self.checks, view)
        except CheckError as exc:
            record["error"] = {"kind": exc.kind, "message": str(exc), "attempts": record["attempts"]}
            return
        record["outcomes"] = outcomes(record, unit.case, self.settings)
