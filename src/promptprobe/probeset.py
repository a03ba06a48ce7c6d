"""Probe sets: the questions a probe asks, loaded from `probes/NAME.toml` and validated.

Validation reports every problem of a file at once (each naming the file and the case), so
that a user fixes a probe set in one pass.
"""

import hashlib
import json
import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import names
from .errors import InputError
from .tomlfile import parse_toml, read_input, unknown_keys

EXPECT_VALUES = ("answer", "no_answer")
TOP_KEYS = {"name", "description", "repeats", "case"}
CASE_KEYS = {
    "id",
    "question",
    "expect",
    "tags",
    "must_retrieve",
    "history",
    "contains",
    "not_contains",
    "regex",
    "ignore_case",
    "vars",
    "data",
}
TURN_KEYS = {"role", "content"}


@dataclass(frozen=True)
class Case:
    id: str
    question: str
    expect: str | None = None
    tags: tuple[str, ...] = ()
    must_retrieve: tuple[str, ...] = ()
    history: tuple[dict[str, str], ...] = ()
    contains: tuple[str, ...] = ()
    not_contains: tuple[str, ...] = ()
    regex: tuple[str, ...] = ()
    ignore_case: bool = False
    vars: tuple[tuple[str, str], ...] = ()  # values of {{NAME}} in prompts for this case
    data_json: str = "{}"  # the case's own `data = {...}` table for user checks, as JSON (hashable)

    @property
    def variables(self) -> dict[str, str]:
        return dict(self.vars)

    @property
    def data(self) -> dict[str, Any]:
        return json.loads(self.data_json)

    def to_dict(self) -> dict[str, Any]:
        """The case as a user check sees it."""
        return {
            "id": self.id,
            "question": self.question,
            "expect": self.expect,
            "tags": list(self.tags),
            "must_retrieve": list(self.must_retrieve),
            "history": [dict(turn) for turn in self.history],
            "vars": self.variables,
            "data": self.data,
        }


@dataclass(frozen=True)
class ProbeSet:
    name: str
    path: Path
    sha256: str
    source: bytes = field(repr=False)
    cases: tuple[Case, ...]
    repeats: int = 3
    description: str = ""
    repeats_given: bool = False  # the file says `repeats` (else 3 is the default)


class ProbeSetInvalid(InputError):
    """Every problem found in one probe set file, one line each."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


def question_key(question: str) -> str:
    """The form two questions are compared in: NFKC, case-folded, whitespace collapsed."""
    return " ".join(unicodedata.normalize("NFKC", question).casefold().split())


class _Problems:
    def __init__(self) -> None:
        self.items: list[str] = []

    def add(self, message: str) -> None:
        self.items.append(message)


def _string_list(value: Any, where: str, key: str, problems: _Problems) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        problems.add(f"{where}: '{key}' must be a list of strings")
        return ()
    return tuple(value)


def _history(value: Any, where: str, problems: _Problems) -> tuple[dict[str, str], ...]:
    if not isinstance(value, list):
        problems.add(f"{where}: 'history' must be a list of {{ role, content }} tables")
        return ()
    turns = []
    for number, turn in enumerate(value, 1):
        turn_where = f"{where}, history turn {number}"
        if not isinstance(turn, dict):
            problems.add(f"{turn_where}: must be a table {{ role, content }}")
            continue
        bad_keys = unknown_keys(turn, TURN_KEYS, turn_where)
        if bad_keys:
            problems.add(bad_keys)
        if turn.get("role") not in ("user", "assistant"):
            problems.add(f'{turn_where}: \'role\' must be "user" or "assistant"')
        elif not isinstance(turn.get("content"), str):
            problems.add(f"{turn_where}: 'content' must be a string")
        else:
            turns.append({"role": turn["role"], "content": turn["content"]})
    return tuple(turns)


def _regexes(patterns: tuple[str, ...], ignore_case: bool, where: str, problems: _Problems) -> None:
    for pattern in patterns:
        try:
            re.compile(pattern, re.IGNORECASE if ignore_case else 0)
        except re.error as exc:
            problems.add(f"{where}: regex {pattern!r} is not a valid regular expression ({exc})")


def _case(raw: Any, index: int, path: Path, problems: _Problems) -> Case | None:
    label = f"{path}: case {index}"
    if not isinstance(raw, dict):
        problems.add(f"{label}: each [[case]] must be a table")
        return None
    if isinstance(raw.get("id"), str):
        label = f"{path}: case '{raw['id']}'"
    bad_keys = unknown_keys(raw, CASE_KEYS, label)
    if bad_keys:
        problems.add(bad_keys)
    case_id = raw.get("id")
    if case_id is None:
        problems.add(f"{label}: missing 'id'")
    elif id_problem := names.problem(case_id, "'id'", names.CASE_ID_MAX):
        problems.add(f"{label}: {id_problem}")
    question = raw.get("question")
    if question is None:
        problems.add(f"{label}: missing 'question'")
    elif not isinstance(question, str) or not question.strip():
        problems.add(f"{label}: 'question' must be a non-empty string")
    expect = raw.get("expect")
    if expect is not None and expect not in EXPECT_VALUES:
        problems.add(f'{label}: \'expect\' must be "answer" or "no_answer", got {expect!r}')
    ignore_case = raw.get("ignore_case", False)
    if not isinstance(ignore_case, bool):
        problems.add(f"{label}: 'ignore_case' must be true or false")
        ignore_case = False
    lists: dict[str, tuple[str, ...]] = {
        key: _string_list(raw.get(key, []), label, key, problems)
        for key in ("tags", "must_retrieve", "contains", "not_contains", "regex")
    }
    _regexes(lists["regex"], ignore_case, label, problems)
    history = _history(raw.get("history", []), label, problems)
    variables = _case_vars(raw.get("vars", {}), label, problems)
    data = _case_data(raw.get("data", {}), label, problems)
    if not isinstance(case_id, str) or not isinstance(question, str) or not question.strip():
        return None
    # A case with other problems still takes part in the duplicate check: every problem at once.
    return Case(
        id=case_id,
        question=question,
        expect=expect,
        history=history,
        ignore_case=ignore_case,
        vars=variables,
        data_json=data,
        **lists,
    )


def _case_data(raw: Any, label: str, problems: "_Problems") -> str:
    """A case's `data` table as JSON; TOML dates and times become ISO text."""
    if not isinstance(raw, dict):
        problems.add(f"{label}: 'data' must be a table, e.g. data = {{ price = 20, currency = \"USD\" }}")
        return "{}"
    return json.dumps(raw, default=lambda value: value.isoformat(), sort_keys=True, ensure_ascii=False)


def _case_vars(raw: Any, label: str, problems: "_Problems") -> tuple[tuple[str, str], ...]:
    if not isinstance(raw, dict):
        problems.add(f"{label}: 'vars' must be a table of NAME = \"text\"")
        return ()
    found = []
    for name, value in raw.items():
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) or name == "sources":
            problems.add(
                f"{label}: vars: {name!r} cannot be a variable name (letters, digits and _; not sources)"
            )
        elif isinstance(value, bool) or not isinstance(value, str | int | float):
            problems.add(f"{label}: vars: {name} must be text, got {value!r}")
        else:
            found.append((name, str(value)))
    return tuple(sorted(found))


def _duplicates(cases: list[Case], indexes: list[int], path: Path, problems: _Problems) -> None:
    ids: dict[str, int] = {}
    questions: dict[str, Case] = {}
    for index, case in zip(indexes, cases, strict=True):
        if case.id in ids:
            problems.add(f"{path}: duplicate case id '{case.id}' (cases {ids[case.id]} and {index})")
        else:
            ids[case.id] = index
        key = question_key(case.question)
        first = questions.get(key)
        if first is not None:
            same = (
                "the same question"
                if first.question == case.question
                else "the same question after normalisation"
            )
            problems.add(f"{path}: cases '{first.id}' and '{case.id}' ask {same}: {case.question!r}")
        else:
            questions[key] = case


def _top(
    data: dict[str, Any],
    key: str,
    check: Callable[[Any], bool],
    message: str,
    default: Any,
    problems: _Problems,
) -> Any:
    value = data.get(key, default)
    if not check(value):
        problems.add(message)
        return default
    return value


def parse_probeset(source: bytes, path: Path) -> ProbeSet:
    """Validate the bytes of a probe set; `path` is used for names and messages."""
    data = parse_toml(source, path)
    problems = _Problems()
    bad_keys = unknown_keys(data, TOP_KEYS, str(path))
    if bad_keys:
        problems.add(bad_keys)
    name = data.get("name", path.stem)
    name_problem = names.problem(name, "the probe set's name" if "name" in data else "the file name")
    if name_problem:
        hint = "" if "name" in data else ' (set name = "..." in the file)'
        problems.add(f"{path}: {name_problem}{hint}")
    description = _top(
        data,
        "description",
        lambda v: isinstance(v, str),
        f"{path}: 'description' must be a string",
        "",
        problems,
    )
    repeats = _top(
        data,
        "repeats",
        lambda v: isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 1_000_000,
        f"{path}: 'repeats' must be a whole number from 1 to 1,000,000",
        3,
        problems,
    )
    raw_cases = data.get("case")
    cases: list[Case] = []
    indexes: list[int] = []
    if raw_cases is None or raw_cases == []:
        problems.add(f"{path}: no [[case]] tables: a probe set needs at least one case")
    elif not isinstance(raw_cases, list):
        problems.add(f"{path}: 'case' must be an array of tables ([[case]])")
    else:
        for index, raw in enumerate(raw_cases, 1):
            case = _case(raw, index, path, problems)
            if case is not None:
                cases.append(case)
                indexes.append(index)
        _duplicates(cases, indexes, path, problems)
    if problems.items:
        raise ProbeSetInvalid(problems.items)
    return ProbeSet(
        name=name,
        path=path,
        sha256=hashlib.sha256(source).hexdigest(),
        source=source,
        cases=tuple(cases),
        repeats=repeats,
        description=description,
        repeats_given="repeats" in data,
    )


def load_probeset(path: str | Path) -> ProbeSet:
    """Load and validate a probe set file; every problem is an InputError naming the file."""
    path = Path(path)
    source = read_input(path, "probe set file")
    probeset = parse_probeset(source, path)
    _case_only_twins(probeset)
    return probeset


def _case_only_twins(probeset: ProbeSet) -> None:
    """Refuse case ids that differ only in case: they name a sample's raw files, one file on macOS
    and Windows. Checked on the file a user writes, not on recorded copies (older runs stay readable)."""
    first: dict[str, str] = {}
    problems = []
    for case in probeset.cases:
        twin = first.setdefault(case.id.lower(), case.id)
        if twin != case.id:
            problems.append(
                f"{probeset.path}: case ids '{twin}' and '{case.id}' differ only in case, so their raw "
                "files would overwrite each other on macOS and Windows; rename one"
            )
    if problems:
        raise ProbeSetInvalid(problems)
