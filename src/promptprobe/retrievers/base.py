"""The retriever interface: how a question reaches the production retrieval path.

Every retriever implements `retrieve(question, history) -> list[Passage]` and raises
RetrievalError when it cannot: the runner then records the sample as an error and never
calls the model without context. An empty list is a real answer (nothing matched), recorded
as an empty retrieval.
"""

import hashlib
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..jsonio import SURROGATE

# Names credentials go under: any key (Ocp-Apim-Subscription-Key), any auth (X-Auth), ...
SECRET_NAME = re.compile(r"auth|key|token|secret|passw|cookie|credential|signature|session", re.IGNORECASE)


@dataclass(frozen=True)
class Passage:
    id: str
    text: str
    score: float | None = None
    note: str | None = None  # what had to change to record it (a NaN score became null)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"id": self.id, "text": self.text, "score": self.score}
        if self.note:
            data["note"] = self.note
        return data


class RetrievalError(Exception):
    """Retrieval failed; `retryable` for connection errors, timeouts and 5xx replies."""

    def __init__(
        self,
        message: str,
        retryable: bool = False,
        unreachable: bool = False,
        status: int | None = None,
        body: bytes | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.unreachable = unreachable
        self.status = status
        self.body = body
        self.retry_after = retry_after  # seconds the server asked for (Retry-After), else None
        self.kind = "retrieval"


class Retriever:
    """One retrieval path. Subclasses implement `retrieve`."""

    description = "retriever"

    def retrieve(self, question: str, history: Sequence[dict[str, str]]) -> list[Passage]:
        raise NotImplementedError

    def close(self) -> None:
        """Release connections; the default holds none."""


def snapshot_digest(passages: Sequence[Passage]) -> str:
    """sha256 over the passage texts in order, each length-prefixed so boundaries count."""
    digest = hashlib.sha256()
    for passage in passages:
        data = passage.text.encode("utf-8", "surrogatepass")
        digest.update(len(data).to_bytes(8, "big") + data)
    return digest.hexdigest()


def passages_from(items: Any, id_field: str, text_field: str, score_field: str, where: str) -> list[Passage]:
    """Passages from a production reply. A NaN or infinite score becomes null, and a lone
    surrogate U+FFFD, with a note: run files are strict UTF-8 JSON."""
    if not isinstance(items, list):
        raise RetrievalError(f"{where}: expected a list of passages, got {type(items).__name__}")
    passages = []
    for number, item in enumerate(items, 1):
        if not isinstance(item, dict) or text_field not in item or id_field not in item:
            raise RetrievalError(f"{where}: passage {number} lacks the '{id_field}' or '{text_field}' field")
        text = item[text_field]
        if not isinstance(text, str):
            raise RetrievalError(f"{where}: passage {number} '{text_field}' is not a string")
        score = item.get(score_field)
        if score is not None and (isinstance(score, bool) or not isinstance(score, int | float)):
            raise RetrievalError(f"{where}: passage {number} '{score_field}' is not a number: {score!r}")
        notes = []
        if score is not None and not math.isfinite(score):
            notes.append(f"the retriever gave score {score}; recorded as null")
            score = None
        if SURROGATE.search(text):
            # Not UTF-8, so not recordable: the text sent is the text recorded, U+FFFD for each.
            text = SURROGATE.sub("\ufffd", text)
            notes.append("its text held a lone surrogate (not UTF-8); sent and recorded as U+FFFD")
        passage_id = SURROGATE.sub("\ufffd", str(item[id_field]))
        score = float(score) if score is not None else None
        passages.append(Passage(passage_id, text, score, "; ".join(notes) or None))
    return passages


class NoRetriever(Retriever):
    """No retrieval: the prompt gets no passages (for systems without RAG)."""

    description = "none"

    def retrieve(self, question: str, history: Sequence[dict[str, str]]) -> list[Passage]:
        return []
