"""Importing production's own code (`module:function`), with the current directory first on the
import path, so a probe run from the project's root calls what production calls."""

import importlib
import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from .errors import InputError

_printing = threading.Lock()
_inside = 0  # production calls under way (several threads call it at once)
_stdout: Any = None  # sys.stdout as it was before the first of them


@contextmanager
def _prints_to_stderr() -> Iterator[None]:
    """sys.stdout is stderr while any production call runs: what production prints (its debug
    lines) must not land in `--format json` output. Counted, because the calls overlap in threads."""
    global _inside, _stdout
    with _printing:
        if _inside == 0:
            _stdout, sys.stdout = sys.stdout, sys.stderr
        _inside += 1
    try:
        yield
    finally:
        with _printing:
            _inside -= 1
            if _inside == 0:
                sys.stdout, _stdout = _stdout, None


def import_function(reference: str, what: str) -> Callable[..., Any]:
    """Import `module:function`; every way this can fail is an InputError naming `what`."""
    module_name, _, attribute = reference.partition(":")
    if not module_name or not attribute:
        raise InputError(f'{what} {reference!r}: expected "module:function"')
    cwd = os.getcwd()
    if sys.path[:1] != [cwd]:
        sys.path.insert(0, cwd)
    try:
        with _prints_to_stderr():
            module = importlib.import_module(module_name)
    except ImportError as exc:
        raise InputError(f"{what} {reference!r}: cannot import {module_name!r} ({exc})") from None
    except SyntaxError as exc:
        raise InputError(
            f"{what} {reference!r}: {exc.filename or module_name}, line {exc.lineno}: "
            f"syntax error ({exc.msg})"
        ) from None
    except SystemExit as exc:
        raise InputError(
            f"{what} {reference!r}: importing {module_name!r} called sys.exit({exc.code})"
        ) from None
    except Exception as exc:  # production code may raise anything while importing
        raise InputError(
            f"{what} {reference!r}: importing {module_name!r} raised {type(exc).__name__}: {exc}"
        ) from None
    function: Any = module
    for part in attribute.split("."):
        function = getattr(function, part, None)
        if function is None:
            raise InputError(f"{what} {reference!r}: {module_name!r} has no {attribute!r}")
    if not callable(function):
        raise InputError(f"{what} {reference!r}: not callable")
    return function


class ProductionExit(Exception):
    """Production code called sys.exit while being called: the probe cannot go on (exit 2)."""


def call_production(function: Callable[..., Any], reference: str, what: str, *args: Any) -> Any:
    """Call production code; sys.exit inside it becomes an InputError instead of ending the probe,
    and what it prints goes to stderr."""
    try:
        with _prints_to_stderr():
            return function(*args)
    except SystemExit as exc:
        raise InputError(f"{what} {reference!r} called sys.exit({exc.code}) while probing") from None


def code_fingerprint(references: list[str]) -> str:
    """The sha256 of the references and the source files of their modules: a change in
    production's code is a reason to classify a run again."""
    import hashlib
    import importlib.util

    digest = hashlib.sha256()
    cwd = os.getcwd()
    if sys.path[:1] != [cwd]:
        sys.path.insert(0, cwd)
    for reference in sorted(references):
        digest.update(reference.encode())
        module = reference.partition(":")[0]
        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            continue  # not importable now: the reference alone identifies it
        origin = getattr(spec, "origin", None) if spec else None
        if origin and os.path.isfile(origin):
            with open(origin, "rb") as handle:
                digest.update(handle.read())
    return digest.hexdigest()
