"""What a Python caller passes to the public API, checked before anything is done: a bad
argument of any type is the InputError the CLI turns into exit 2, naming the argument and what
it takes (`detect=-5: must be a number in (0, 100] (points)`), never a TypeError or an
AttributeError from inside. The ranges are the CLI's flags' (limits.py for the run's numbers).
"""

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .errors import InputError
from .limits import WHOLE, argument_problem

PATH_MAX = 4096  # longer than any file system takes: refused here, not by the OS mid-way


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def path(name: str, value: Any, optional: bool = False) -> Path | None:
    """A file or directory path: text or a path object, not empty, no NUL, a sane length."""
    if value is None and optional:
        return None
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str):
        raise InputError(f"{name}={_shown(value)}: must be a path (a str or a pathlib.Path)")
    if not value or "\0" in value or len(value) > PATH_MAX:
        raise InputError(f"{name}={_shown(value)}: not a usable path")
    return Path(value)


def runs_location(name: str, value: Any) -> Any:
    """A runs directory (a path) or a runs store (`s3://BUCKET/PREFIX`, kept as text); None stays None."""
    from .runstore.remote import is_store

    if isinstance(value, str) and is_store(value):
        return value
    return path(name, value, optional=True)


def reference(name: str, value: Any) -> str:
    """A run reference (a run directory, its id or a prefix, `latest`), with an optional
    `#prompt=...` selector for compare."""
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str):
        raise InputError(
            f"{name}={_shown(value)}: must be a run reference (a run directory, its id, or latest)"
        )
    if not value or "\0" in value or len(value) > PATH_MAX:
        raise InputError(f"{name}={_shown(value)}: not a run reference")
    return value


def items(name: str, value: Any, what: str, optional: bool = False) -> list[str]:
    """A list of text items (one text alone is a list of one); paths count as text."""
    if value is None and optional:
        return []
    if isinstance(value, str | os.PathLike):
        value = [value]
    if not isinstance(value, Sequence) or isinstance(value, bytes):
        raise InputError(f"{name}={_shown(value)}: must be a list of {what}")
    found = []
    for item in value:
        if isinstance(item, os.PathLike):
            item = os.fspath(item)
        if not isinstance(item, str) or not item or "\0" in item or len(item) > PATH_MAX:
            raise InputError(f"{name}: {_shown(item)} is not one of {what}")
        found.append(item)
    return found


def flag(name: str, value: Any, optional: bool = False) -> bool | None:
    """True or False (None too when `optional`: the config's own setting)."""
    if value is None and optional:
        return None
    if not isinstance(value, bool):
        allowed = "True, False or None" if optional else "True or False"
        raise InputError(f"{name}={_shown(value)}: must be {allowed}")
    return value


def number(
    name: str,
    value: Any,
    low: float,
    high: float = math.inf,
    *,
    low_open: bool = False,
    high_open: bool = False,
    unit: str = "",
    optional: bool = False,
) -> float | None:
    """A finite number in [low, high] (either end open when said)."""
    if value is None and optional:
        return None
    inside = (
        not isinstance(value, bool)
        and isinstance(value, int | float)
        and math.isfinite(value)
        and (value > low if low_open else value >= low)
        and (value < high if high_open else value <= high)
    )
    if not inside:
        left = "(" if low_open else "["
        right = ")" if high_open or high == math.inf else "]"
        span = f"{left}{low:g}, {'inf' if high == math.inf else f'{high:g}'}{right}"
        raise InputError(f"{name}={_shown(value)}: must be a number in {span}{f' ({unit})' if unit else ''}")
    return value


def run_number(name: str, value: Any) -> float | int | None:
    """A number the CLI's `probe run` flags and probe.toml's [run] take (limits.py); a count
    given as a whole float (`repeats=3.0`) comes back as the int the engine counts with."""
    problem = argument_problem(name, value)
    if problem:
        raise InputError(problem)
    if value is not None and name in WHOLE:
        return int(value)
    return value


def metric_names(name: str, value: Any) -> list[str]:
    """One metric name, or a list of them."""
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, Sequence) or isinstance(names, bytes) or not names:
        raise InputError(f"{name}={_shown(value)}: must be a metric name or a list of them")
    for item in names:
        if not isinstance(item, str) or not item:
            raise InputError(f"{name}: {_shown(item)} is not a metric name")
    return list(names)


def count(name: str, value: Any, optional: bool = True) -> int | None:
    """A whole number of at least 1."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(f"{name}={_shown(value)}: must be a whole number, at least 1")
    return value
