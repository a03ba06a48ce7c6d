"""Message assembly: the default builder, or production's own `[assemble] function`."""

from collections.abc import Callable, Sequence
from typing import Any

from .errors import InputError
from .production import call_production, import_function
from .prompts import render_prompt
from .retrievers import Passage

Assembler = Callable[[str, str, Sequence[Passage], Sequence[dict[str, str]]], list[dict[str, str]]]


class AssembleError(Exception):
    """The production builder failed or returned something that is not a message list."""


def default_messages(
    prompt: str, question: str, passages: Sequence[Passage], history: Sequence[dict[str, str]]
) -> list[dict[str, str]]:
    """System = rendered prompt, then the case's earlier turns, then the question."""
    system = render_prompt(prompt, [p.to_dict() for p in passages])
    return [
        {"role": "system", "content": system},
        *(dict(t) for t in history),
        {"role": "user", "content": question},
    ]


def production_assembler(reference: str) -> Assembler:
    """Wrap production's f(prompt, question, passages, history) -> messages, checking its output."""
    function = import_function(reference, "[assemble] function")

    def assemble(
        prompt: str, question: str, passages: Sequence[Passage], history: Sequence[dict[str, str]]
    ) -> list[dict[str, str]]:
        try:
            messages: Any = call_production(
                function,
                reference,
                "[assemble] function",
                prompt,
                question,
                [p.to_dict() for p in passages],
                [dict(t) for t in history],
            )
        except InputError:
            raise  # it called sys.exit: the probe cannot go on
        except Exception as exc:  # production code may raise anything; it is this sample's error
            raise AssembleError(f"[assemble] {reference}: {type(exc).__name__}: {exc}") from exc
        if not isinstance(messages, list) or not all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
            for m in messages
        ):
            raise AssembleError(f"[assemble] {reference}: must return a list of {{role, content}} dicts")
        return messages

    return assemble
