"""The names that become file names in a run directory: prompt versions, probe sets and case ids.

A safe name starts with a letter or a digit and holds only letters, digits, `.`, `_` and `-`;
prompt and probe-set names are at most 64 characters, case ids at most 100 (a sample's files are
named `CASE.rREPEAT.aARM.request.json`, well inside a file system's 255 bytes).
"""

import re

SAFE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
NAME_MAX = 64
CASE_ID_MAX = 100
RULE = "must start with a letter or a digit and hold only letters, digits, '.', '_' and '-'"


def problem(value: object, what: str, longest: int = NAME_MAX) -> str | None:
    """Why `value` is not a safe name (None when it is one)."""
    if not isinstance(value, str) or not SAFE.fullmatch(value):
        shown = value if not isinstance(value, str) or len(value) <= 80 else value[:77] + "..."
        return f"{what} {shown!r} {RULE} (at most {longest} characters)"
    if len(value) > longest:
        return f"{what} {value[:40]!r}... is {len(value)} characters long; at most {longest} are allowed"
    return None
