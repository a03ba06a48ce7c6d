"""Prompt versions: a system prompt file, identified by its name and the sha256 of its bytes, and
the placeholders in it.

`{{sources}}` stands for the numbered passages; `{{NAME}}` for any other name is a variable, from
`[vars]` in probe.toml or a case's `vars` (the case wins). Anything that looks like a placeholder
but is not one (`{{ sources }}`, `{sources}`, `{{Sources}}`, unbalanced braces) and a placeholder
that names no variable are problems that name the file, the line and the likely intended
placeholder (`template_problems`), reported by `probe check` and before `probe run` calls anything.
"""

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import names
from .errors import InputError
from .tomlfile import read_input

PLACEHOLDER = "{{sources}}"
SOURCES = "sources"
VARIABLE = re.compile(r"\{\{([A-Za-z_][A-Za-z0-9_]*)\}\}")
# Shapes that look like a placeholder but are not one.
SPACED = re.compile(r"\{\{(\s*)([A-Za-z_][A-Za-z0-9_]*)(\s*)\}\}")
SINGLE = re.compile(r"(?<!\{)\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}(?!\})")
HALF_OPEN = re.compile(
    r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}(?!\})|(?<!\{)\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}"
)
UNCLOSED = re.compile(
    r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*$|\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*[^}\sA-Za-z0-9_]"
)


@dataclass(frozen=True)
class PromptVersion:
    name: str
    path: Path
    source: bytes = field(repr=False)
    sha256: str = ""

    @property
    def text(self) -> str:
        return self.source.decode("utf-8")


NAME = re.compile(r"[^=/\\]+")  # what may stand before `=` in NAME=PATH


def prompt_from_bytes(name: str, path: Path, source: bytes) -> PromptVersion:
    problem = names.problem(name, "prompt name")
    if problem:
        raise InputError(f"{path}: {problem}; give one with --prompt NAME={path}")
    try:
        source.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: prompt is not valid UTF-8 (byte {exc.start})") from None
    return PromptVersion(name, path, source, hashlib.sha256(source).hexdigest())


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except OSError:
        return False  # a name too long to be a file is not one


def load_prompt(argument: str | Path) -> PromptVersion:
    """Read a prompt file as exact bytes. `NAME=PATH` names the version; otherwise the name is
    the file stem (so two files called prompt.md in different folders need a NAME)."""
    text = str(argument)
    name, eq, rest = text.partition("=")
    if eq and NAME.fullmatch(name) and not _exists(Path(text)):
        path = Path(rest)
    else:
        name, path = Path(text).stem, Path(text)
    source = read_input(path, "prompt file")
    return prompt_from_bytes(name, path, source)


def format_sources(passages: Sequence[dict[str, Any]]) -> str:
    """Numbered passages, one block each: `[1] text`."""
    return "\n\n".join(f"[{i}] {p['text']}" for i, p in enumerate(passages, 1))


def fill(text: str, variables: Mapping[str, str]) -> str:
    """Every `{{NAME}}` with a value in `variables` replaced by it (`{{sources}}` is left)."""
    if not variables:
        return text
    return VARIABLE.sub(
        lambda m: variables.get(m.group(1), m.group(0)) if m.group(1) != SOURCES else m.group(0), text
    )


def render_prompt(
    prompt: PromptVersion | str,
    passages: Sequence[dict[str, Any]],
    variables: Mapping[str, str] | None = None,
) -> str:
    """Variables filled in, then the passages where `{{sources}}` stands, or after a blank line
    when it is absent.

    Only placeholders are replaced; every other byte of the prompt is kept as written.
    """
    text = prompt.text if isinstance(prompt, PromptVersion) else prompt
    text = fill(text, variables or {})
    sources = format_sources(passages)
    if PLACEHOLDER in text:
        return text.replace(PLACEHOLDER, sources)
    if not passages:
        return text
    separator = "" if text.endswith("\n\n") else ("\n" if text.endswith("\n") else "\n\n")
    return text + separator + sources


def _closest(name: str, known: set[str]) -> str | None:
    import difflib

    lowered = {k.lower(): k for k in known}
    if name.lower() in lowered:
        return lowered[name.lower()]
    match = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.75)
    return match[0] if match else None


def template_problems(text: str, where: str, known: set[str]) -> list[str]:
    """What in a prompt looks like a placeholder but is not one, or names no variable; each
    problem names `where`, the line and the likely intended placeholder."""
    known = set(known) | {SOURCES}
    problems = []
    for number, line in enumerate(text.splitlines(), 1):
        at = f"{where}:{number}"
        for match in SPACED.finditer(line):
            if match.group(1) or match.group(3):
                problems.append(
                    f"{at}: {match.group(0)} has spaces inside the braces and would be sent as written; "
                    f"write {{{{{match.group(2)}}}}}"
                )
        for match in VARIABLE.finditer(line):
            name = match.group(1)
            if name in known:
                continue
            guess = _closest(name, known)
            hint = f"; did you mean {{{{{guess}}}}}?" if guess else ""
            problems.append(
                f"{at}: {{{{{name}}}}} names no variable (known: {', '.join(sorted(known))}){hint}"
            )
        for match in HALF_OPEN.finditer(line):
            name = match.group(1) or match.group(2)
            problems.append(f"{at}: {match.group(0)} has unbalanced braces; write {{{{{name}}}}}")
        for match in SINGLE.finditer(line):
            name = match.group(1)
            guess = name if name in known else _closest(name, known)
            if guess and (name in known or name.lower() == guess.lower()):
                shown = match.group(0)
                problems.append(
                    f"{at}: {shown} has single braces and would be sent as written; write {{{{{guess}}}}}"
                )
        for match in UNCLOSED.finditer(line):
            name = match.group(1) or match.group(2)
            problems.append(f"{at}: {{{{{name}... is never closed; write {{{{{name}}}}}")
    return problems


def variables_used(text: str) -> set[str]:
    """The variable names a prompt's placeholders use (`sources` aside)."""
    return {m.group(1) for m in VARIABLE.finditer(text)} - {SOURCES}


def check_prompts(
    prompts: Sequence[PromptVersion], cases: Sequence[Any], variables: Mapping[str, str]
) -> list[str]:
    """Every problem of these prompts' placeholders for these cases: shapes that are not
    placeholders, names no variable defines, and variables some case has no value for."""
    defined = set(variables) | {name for case in cases for name in case.variables}
    problems = []
    for prompt in prompts:
        where = str(prompt.path)
        problems += template_problems(prompt.text, where, defined)
        for name in sorted(variables_used(prompt.text) & defined):
            missing = [case.id for case in cases if name not in variables and name not in case.variables]
            if missing:
                shown = ", ".join(missing[:5]) + (" ..." if len(missing) > 5 else "")
                problems.append(
                    f"{where}: {{{{{name}}}}} has no value for case {shown} (give it in [vars] of probe.toml "
                    "or the case's vars)"
                )
    return problems
