"""Prompt versions: a system prompt file, identified by its name and the sha256 of its bytes."""

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import names
from .errors import InputError
from .tomlfile import read_input

PLACEHOLDER = "{{sources}}"


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


def render_prompt(prompt: PromptVersion | str, passages: Sequence[dict[str, Any]]) -> str:
    """Put the passages where `{{sources}}` stands, or after a blank line when it is absent.

    Only the placeholder is replaced; every other byte of the prompt is kept as written.
    """
    text = prompt.text if isinstance(prompt, PromptVersion) else prompt
    sources = format_sources(passages)
    if PLACEHOLDER in text:
        return text.replace(PLACEHOLDER, sources)
    if not passages:
        return text
    separator = "" if text.endswith("\n\n") else ("\n" if text.endswith("\n") else "\n\n")
    return text + separator + sources
