"""Asking the file system about a path a user named. A path it cannot even look up (a name too
long for it, a NUL byte, a component that is a file) is simply not there: the caller then says
so in one sentence, instead of an OSError traceback from pathlib."""

from pathlib import Path


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


def shown(path: object, longest: int = 80) -> str:
    """A path as a message shows it: a very long one cut, with its length said."""
    text = str(path)
    return text if len(text) <= longest else f"{text[: longest - 30]}... ({len(text)} characters)"


def typed(path: object) -> str:
    """A path inside a command a message tells the user to run: quoted for the shell when it must
    be (a space, a quote, '#'), so that the line can be pasted as it is."""
    import shlex

    return shlex.quote(str(path))
