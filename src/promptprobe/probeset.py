"""Probe sets: the questions a probe asks, loaded from `probes/NAME.toml` and validated."""

import hashlib
import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import InputError
from .tomlfile import check_keys, parse_toml, read_input

CASE_ID = re.compile(r"[A-Za-z0-9._-]+")
EXPECT_VALUES = ("answer", "no_answer")
TOP_KEYS = {"name", "description", "repeats", "case"}
CASE_KEYS = {"id", "question", "expect", "tags", "must_retrieve", "history"}
TURN_KEYS = {"role", "content"}


@dataclass(frozen=True)
class Case:
    id: str
    question: str
    expect: str | None = None
    tags: tuple[str, ...] = ()
    must_retrieve: tuple[str, ...] = ()
    history: tuple[dict[str, str], ...] = ()


@dataclass(frozen=True)
class ProbeSet:
    name: str
    path: Path
    sha256: str
    source: bytes = field(repr=False)
    cases: tuple[Case, ...]
    repeats: int = 3
    description: str = ""


def question_key(question: str) -> str:
    """The form two questions are compared in: NFKC, case-folded, whitespace collapsed."""
    return " ".join(unicodedata.normalize("NFKC", question).casefold().split())


def _string_list(value: Any, where: str, key: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InputError(f"{where}: '{key}' must be a list of strings")
    return tuple(value)


def _history(value: Any, where: str) -> tuple[dict[str, str], ...]:
    if not isinstance(value, list):
        raise InputError(f"{where}: 'history' must be a list of {{ role, content }} tables")
    turns = []
    for number, turn in enumerate(value, 1):
        turn_where = f"{where}, history turn {number}"
        if not isinstance(turn, dict):
            raise InputError(f"{turn_where}: must be a table {{ role, content }}")
        check_keys(turn, TURN_KEYS, turn_where)
        if turn.get("role") not in ("user", "assistant"):
            raise InputError(f'{turn_where}: \'role\' must be "user" or "assistant"')
        if not isinstance(turn.get("content"), str):
            raise InputError(f"{turn_where}: 'content' must be a string")
        turns.append({"role": turn["role"], "content": turn["content"]})
    return tuple(turns)


def _case(raw: Any, index: int, path: Path) -> Case:
    label = f"{path}: case {index}"
    if not isinstance(raw, dict):
        raise InputError(f"{label}: each [[case]] must be a table")
    if isinstance(raw.get("id"), str):
        label = f"{path}: case '{raw['id']}'"
    check_keys(raw, CASE_KEYS, label)
    case_id = raw.get("id")
    if case_id is None:
        raise InputError(f"{label}: missing 'id'")
    if not isinstance(case_id, str) or not CASE_ID.fullmatch(case_id):
        raise InputError(f"{label}: 'id' must match [A-Za-z0-9._-]+, got {case_id!r}")
    question = raw.get("question")
    if question is None:
        raise InputError(f"{label}: missing 'question'")
    if not isinstance(question, str) or not question.strip():
        raise InputError(f"{label}: 'question' must be a non-empty string")
    expect = raw.get("expect")
    if expect is not None and expect not in EXPECT_VALUES:
        raise InputError(f'{label}: \'expect\' must be "answer" or "no_answer", got {expect!r}')
    return Case(
        id=case_id,
        question=question,
        expect=expect,
        tags=_string_list(raw.get("tags", []), label, "tags"),
        must_retrieve=_string_list(raw.get("must_retrieve", []), label, "must_retrieve"),
        history=_history(raw.get("history", []), label),
    )


def _refuse_duplicates(cases: list[Case], path: Path) -> None:
    ids: dict[str, int] = {}
    questions: dict[str, Case] = {}
    for index, case in enumerate(cases, 1):
        if case.id in ids:
            raise InputError(f"{path}: duplicate case id '{case.id}' (cases {ids[case.id]} and {index})")
        ids[case.id] = index
        key = question_key(case.question)
        first = questions.get(key)
        if first is not None:
            same = (
                "the same question"
                if first.question == case.question
                else ("the same question after normalisation")
            )
            raise InputError(f"{path}: cases '{first.id}' and '{case.id}' ask {same}: {case.question!r}")
        questions[key] = case


def parse_probeset(source: bytes, path: Path) -> ProbeSet:
    """Validate the bytes of a probe set; `path` is used for names and messages."""
    data = parse_toml(source, path)
    check_keys(data, TOP_KEYS, str(path))
    name = data.get("name", path.stem)
    if not isinstance(name, str) or not name:
        raise InputError(f"{path}: 'name' must be a non-empty string")
    description = data.get("description", "")
    if not isinstance(description, str):
        raise InputError(f"{path}: 'description' must be a string")
    repeats = data.get("repeats", 3)
    if not isinstance(repeats, int) or isinstance(repeats, bool) or repeats < 1:
        raise InputError(f"{path}: 'repeats' must be a whole number of at least 1")
    raw_cases = data.get("case")
    if raw_cases is None:
        raise InputError(f"{path}: no [[case]] tables: a probe set needs at least one case")
    if not isinstance(raw_cases, list):
        raise InputError(f"{path}: 'case' must be an array of tables ([[case]])")
    cases = [_case(raw, index, path) for index, raw in enumerate(raw_cases, 1)]
    _refuse_duplicates(cases, path)
    return ProbeSet(
        name=name,
        path=path,
        sha256=hashlib.sha256(source).hexdigest(),
        source=source,
        cases=tuple(cases),
        repeats=repeats,
        description=description,
    )


def load_probeset(path: str | Path) -> ProbeSet:
    """Load and validate a probe set file; every problem is an InputError naming the file."""
    path = Path(path)
    source = read_input(path, "probe set file")
    return parse_probeset(source, path)
