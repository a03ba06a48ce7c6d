"""The production retrieval function itself: f(question, history) -> list of dicts."""

from collections.abc import Sequence
from typing import Any

from ..errors import InputError
from ..production import call_production, import_function
from .base import Passage, RetrievalError, Retriever, passages_from


class PythonRetriever(Retriever):
    def __init__(self, config: dict[str, Any]) -> None:
        self.reference = config["function"]
        self.function = import_function(self.reference, "[retrieval] function")
        self.fields = (config.get("id", "id"), config.get("text", "text"), config.get("score", "score"))
        self.description = f"python {self.reference}"

    def retrieve(self, question: str, history: Sequence[dict[str, str]]) -> list[Passage]:
        try:
            items = call_production(
                self.function, self.reference, "[retrieval] function", question, [dict(t) for t in history]
            )
        except InputError:
            raise  # it called sys.exit: the probe cannot go on
        except Exception as exc:  # production code may raise anything; it is this sample's error
            raise RetrievalError(f"retrieval {self.reference}: {type(exc).__name__}: {exc}") from exc
        return passages_from(
            list(items) if isinstance(items, tuple) else items,
            *self.fields,
            where=f"retrieval {self.reference}",
        )
