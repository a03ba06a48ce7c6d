"""A judged check's table in probe.toml ([[check]] kind = "judge"): its keys, its rubric file
(read and checked like a prompt's placeholders) and its labels. See checks/judge.py for what the
judge is sent and how its reply is read."""

import re
from pathlib import Path
from typing import Any

from .checks.judge import rubric_problems
from .checks.settings import JudgeConfig
from .errors import InputError
from .tomlfile import read_input, unknown_keys

JUDGE_KEYS = {"name", "kind", "model", "rubric", "labels", "repeats", "labels_file", "description"}
LABEL_KEYS = {"pass", "fail"}
MAX_REPEATS = 25  # judgments per output


def check_name_problem(name: Any, label: str, found: list[Any]) -> str | None:
    """Why `name` cannot name a [[check]] (None when it can)."""
    from .checks import METRICS

    if not isinstance(name, str) or not re.fullmatch(r"[a-z][a-z0-9_]{0,63}", name):
        return f"{label}: 'name' must be lower-case letters, digits and _ (a metric name), got {name!r}"
    if name in METRICS:
        return f"{label}: {name} is a built-in metric; give your check another name"
    if any(c.name == name for c in found):
        return f"{label}: two checks are called {name}"
    return None


def _labels(value: Any, label: str, problems: list[str]) -> tuple[str, str]:
    if not isinstance(value, dict):
        problems.append(
            f'{label}: \'labels\' must be a table such as {{ pass = "GROUNDED", fail = "UNGROUNDED" }}'
        )
        return "PASS", "FAIL"
    message = unknown_keys(value, LABEL_KEYS, f"{label} labels")
    if message:
        problems.append(message)
    found = []
    for key in ("pass", "fail"):
        text = value.get(key)
        if not isinstance(text, str) or not text.strip() or "\n" in text or text != text.strip():
            problems.append(
                f"{label}: labels.{key} must be one line of text without surrounding spaces, got {text!r}"
            )
            text = key.upper()
        found.append(text)
    if found[0] == found[1]:
        problems.append(
            f"{label}: labels.pass and labels.fail are both {found[0]!r}; a reply could not tell them apart"
        )
    return found[0], found[1]


def read_rubric(path: Path, where: str) -> str:
    """A rubric file's text (UTF-8); InputError naming `where` when it cannot be read."""
    data = read_input(path, "rubric file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{where}: {path} is not valid UTF-8 (byte {exc.start})") from None


def judge_check(index: int, table: dict[str, Any], where: str, found: list[Any], base: Path) -> JudgeConfig:
    """One [[check]] kind = "judge" table; every problem of it at once (InputError, one per line)."""
    label = f"{where} [[check]] {table.get('name', index)!r}"
    problems: list[str] = []
    message = unknown_keys(table, JUDGE_KEYS, label)
    if message:
        problems.append(message)
    name = table.get("name")
    problem = check_name_problem(name, label, found)
    if problem:
        problems.append(problem)
    model = table.get("model")
    if not isinstance(model, str) or not model.strip():
        problems.append(
            f"{label}: 'model' must be a model spec such as \"openai:gpt-4.1-mini\", or a model's NAME"
        )
    rubric = table.get("rubric")
    text = ""
    if not isinstance(rubric, str) or not rubric:
        problems.append(
            f"{label}: 'rubric' must name a file (with {{question}} {{output}} {{passages}} {{expect}})"
        )
    else:
        path = Path(rubric) if Path(rubric).is_absolute() else base / rubric
        try:
            text = read_rubric(path, label)
        except InputError as exc:
            problems.append(f"{label}: rubric {exc}")
        else:
            problems += rubric_problems(text, rubric)
    pass_label, fail_label = _labels(table.get("labels"), label, problems)
    repeats = table.get("repeats", 1)
    if isinstance(repeats, bool) or not isinstance(repeats, int) or not 1 <= repeats <= MAX_REPEATS:
        problems.append(f"{label}: 'repeats' must be a whole number from 1 to {MAX_REPEATS}, got {repeats!r}")
        repeats = 1
    labels_file = table.get("labels_file")
    if labels_file is not None and (not isinstance(labels_file, str) or not labels_file):
        problems.append(f"{label}: 'labels_file' must name a CSV file, got {labels_file!r}")
    elif isinstance(labels_file, str) and not Path(labels_file).is_absolute():
        labels_file = str(base / labels_file)
    description = table.get("description", "")
    if not isinstance(description, str):
        problems.append(f"{label}: 'description' must be text")
    if problems:
        raise InputError("\n".join(problems))
    return JudgeConfig(
        name,
        model.strip(),
        rubric,
        text,
        pass_label,
        fail_label,
        repeats,
        labels_file,
        description,  # type: ignore[union-attr,arg-type]
    )
