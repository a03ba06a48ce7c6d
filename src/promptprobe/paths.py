"""Asking the file system about a path a user named. A path it cannot even look up (a name too
long for it, a NUL byte, a component that is a file) is simply not there: the caller then says
so in one sentence, instead of an OSError traceback from pathlib. A file of a run is opened only
through open_in_run: never through a symbolic link, only a regular file, and never waiting."""

import errno
import os
import re
import stat
from pathlib import Path
from typing import BinaryIO

from .errors import InputError

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


class RunFileRefused(InputError):
    """A file of a run that is a symbolic link or not a regular file: damage, never read."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.reason = reason  # the sentence without the path, for a list that names the file itself


_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISDIR, "a directory"), (stat.S_ISSOCK, "a socket"))
_FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: opening a FIFO for reading waits for a writer; a regular file ignores the flag.
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def open_in_run(run_dir: Path, relative: str) -> int:
    """A read-only descriptor of the run's file `relative` ("samples.jsonl", "raw/index.jsonl"),
    opened without following a symbolic link at any step inside the run and without blocking.
    RunFileRefused (one sentence) when a step is a link or the file is not a regular file; the
    OSError of open otherwise (FileNotFoundError: the run has no such file)."""
    parts = relative.split("/")
    folder: int | None = None
    try:
        for depth, part in enumerate(parts):
            last = depth == len(parts) - 1
            try:
                where = part if folder is not None else run_dir / part
                fd = os.open(where, _FILE if last else _FOLDER, dir_fd=folder)
            except OSError as exc:
                # A link gives ELOOP as the file, ENOTDIR as a folder: lstat tells it from a file.
                step = run_dir.joinpath(*parts[: depth + 1])
                if exc.errno in (errno.ELOOP, errno.ENOTDIR) and os.path.islink(step):
                    raise RunFileRefused(
                        step, "is a symbolic link; a run's files are read only from inside the run"
                    ) from None
                raise
            if folder is not None:
                os.close(folder)
            folder = fd
    except BaseException:
        if folder is not None:
            os.close(folder)
        raise
    assert folder is not None
    mode = os.fstat(folder).st_mode
    if not stat.S_ISREG(mode):
        os.close(folder)
        kind = next((name for test, name in _KINDS if test(mode)), "a device")
        why = "a run's files are read only as regular files"
        raise RunFileRefused(run_dir / relative, f"is {kind}, not a regular file; {why}")
    return folder


def open_run_file(run_dir: Path, relative: str, buffering: int = -1) -> BinaryIO:
    """open_in_run as a binary file object."""
    return os.fdopen(open_in_run(run_dir, relative), "rb", buffering)
