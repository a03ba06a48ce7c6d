"""Asking the file system about a path a user named. A path it cannot even look up (a name too
long for it, a NUL byte, a component that is a file) is simply not there: the caller then says
so in one sentence, instead of an OSError traceback from pathlib."""

import re
from pathlib import Path

# A run of a store is read from its copy on this machine: what probe prints names the run by its
# URL, as the user named it, not by that copy's path (runstore.download.fetch names each copy).
_COPIES: dict[str, str] = {}
_AFTER_NAME = r"(?![A-Za-z0-9._-])"


def is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except (OSError, ValueError):
        return False


def is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False


def name_copy(copy: Path, name: str) -> None:
    """Print `name` (a run's URL) wherever the path of its local copy would be printed."""
    _COPIES[str(copy)] = name


def renamed(text: str) -> str:
    """`text` with the path of each named copy (and of the files in it) given by its name."""
    for copy, name in _COPIES.items():
        if copy in text:
            text = re.sub(re.escape(copy) + _AFTER_NAME, lambda _, name=name: name, text)
    return text


def shown(path: object, longest: int = 80) -> str:
    """A path as a message shows it (a run's copy by its name): a very long one cut, with its
    length said."""
    text = renamed(str(path))
    return text if len(text) <= longest else f"{text[: longest - 30]}... ({len(text)} characters)"


def typed(path: object) -> str:
    """A path inside a command a message tells the user to run: quoted for the shell when it must
    be (a space, a quote, '#'), so that the line can be pasted as it is."""
    import shlex

    return shlex.quote(str(path))
