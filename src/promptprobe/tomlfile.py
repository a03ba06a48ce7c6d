"""Reading TOML files users write, with errors that name the file and the line."""

import difflib
import tomllib
from pathlib import Path
from typing import Any

from .errors import InputError


def read_input(path: Path, what: str = "file") -> bytes:
    """The bytes of a file the user named; a missing or unreadable one is an InputError."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise InputError(f"{path}: no such {what}") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory, not a {what}") from None
    except OSError as exc:
        shown = str(path) if len(str(path)) <= 80 else str(path)[:77] + "..."
        raise InputError(f"{shown}: cannot read ({exc.strerror})") from None


def parse_toml(data: bytes, path: Path) -> dict[str, Any]:
    try:
        # A byte order mark (Windows editors write one) is not TOML, but it is not the user's mistake.
        text = data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not valid UTF-8 (byte {exc.start})") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        # tomllib's message ends with "(at line N, column M)": the user needs that.
        raise InputError(f"{path}: TOML syntax error: {exc}") from None
    except RecursionError:
        # tomllib recurses once per level of nested arrays and inline tables.
        raise InputError(f"{path}: arrays or tables nested too deeply to read") from None


def unknown_keys(table: dict[str, Any], allowed: set[str], where: str) -> str | None:
    """The message for keys not in `allowed` (None when there are none)."""
    unknown = sorted(set(table) - allowed, key=str)
    if not unknown:
        return None
    names = ", ".join(f"{k!r}{did_you_mean(k, allowed)}" for k in unknown)
    expected = ", ".join(sorted(allowed))
    return f"{where}: unknown key {names} (expected one of: {expected})"


def did_you_mean(word: object, choices: set[str]) -> str:
    """` (did you mean 'x'?)` for the closest of `choices` to a mistyped key, else ''."""
    close = difflib.get_close_matches(str(word), sorted(choices), n=1, cutoff=0.7)
    return f" (did you mean {close[0]!r}?)" if close else ""


def check_keys(table: dict[str, Any], allowed: set[str], where: str) -> None:
    """Refuse unknown keys so that a typo is never silently ignored."""
    message = unknown_keys(table, allowed, where)
    if message:
        raise InputError(message)
