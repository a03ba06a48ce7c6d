"""Strict JSON for every file and every `--format json` output (orjson: fast, and NaN or
infinity become null instead of the bare `NaN` that other JSON readers refuse).

Readers of JSON-lines files stream them, and ignore a torn last line (a crash mid-write)
with a warning instead of refusing the whole run. Each is a run's file: opened as
paths.open_in_run opens one (never through a link, only a regular file, never waiting).
"""

import errno
import os
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson

from .errors import InputError
from .paths import open_run_file

SURROGATE = re.compile("[\ud800-\udfff]")


def dumps_line(value: Any) -> bytes:
    """One compact JSON line, newline included."""
    return _dumps(value, orjson.OPT_APPEND_NEWLINE)


def dumps_pretty(value: Any) -> str:
    return _dumps(value, orjson.OPT_INDENT_2).decode("utf-8")


def _dumps(value: Any, option: int) -> bytes:
    try:
        return orjson.dumps(value, option=option)
    except orjson.JSONEncodeError as exc:
        if "surrogates" not in str(exc):
            raise
    # A lone surrogate (a reply's "\ud800", an undecodable byte read back) is no UTF-8: U+FFFD.
    return orjson.dumps(without_surrogates(value), option=option)


def without_surrogates(value: Any) -> Any:
    """A copy of `value` whose strings have each lone surrogate replaced by U+FFFD."""
    if isinstance(value, str):
        return SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {without_surrogates(k): without_surrogates(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [without_surrogates(v) for v in value]
    return value


# orjson's own function, not a wrapper: readers call it once per line of a million-line file.
loads: Callable[[bytes | bytearray | memoryview | str], Any] = orjson.loads


def warn(message: str) -> None:
    from .paths import renamed
    from .redaction import SCRUBBER
    from .terminal import neutralised

    # Printed like every line probe prints (cli.say): scrubbed, control characters spelled out.
    print(neutralised(SCRUBBER.text(f"warning: {renamed(message)}")), file=sys.stderr)


CHUNK = 1 << 20


def content_end(handle: Any) -> int:
    """Where a file's content ends before a tail of NUL bytes (a power loss after the size grew,
    or `truncate -s +N`): a hole at the end is skipped without reading it, NULs written out are
    read back a chunk at a time, so this is quick and takes little memory whatever the tail."""
    fd = handle.fileno()
    end = os.fstat(fd).st_size
    was = os.lseek(fd, 0, os.SEEK_CUR)  # SEEK_DATA moves the offset the handle relies on
    try:
        # The last data segment's end: a sparse tail reads as NULs and need not be read.
        data_end, position = 0, 0
        while position < end:
            try:
                start = os.lseek(fd, position, os.SEEK_DATA)
            except OSError as exc:
                if exc.errno != errno.ENXIO:
                    raise
                break  # nothing but a hole from `position` on
            position = data_end = os.lseek(fd, start, os.SEEK_HOLE)
        end = min(end, data_end)
    except OSError:
        pass  # a file system without SEEK_DATA: the NULs are read instead
    finally:
        os.lseek(fd, was, os.SEEK_SET)
    size = 4096  # the common case: the last byte is a newline
    while end > 0:
        size = min(end, size)
        kept = os.pread(fd, size, end - size).rstrip(b"\0")
        if kept:
            return end - size + len(kept)
        end, size = end - size, CHUNK
    return 0


def nul_tail_warning(path: Path, end: int, size: int) -> str:
    return (
        f"{path}: its last {size - end} bytes are NUL (written over by a crash or a power loss) "
        "and are ignored; probe run --resume cuts them"
    )


def _lines(handle: Any, end: int) -> Iterator[bytes]:
    """The lines of `handle` up to byte `end` (the last may lack its newline)."""
    position = 0
    while position < end:
        line = handle.readline(end - position)
        if not line:
            return
        position += len(line)
        yield line


def iter_jsonl(
    path: Path,
    on_warning: Callable[[str], None] = warn,
    check: Callable[[Any], str | None] | None = None,
) -> Iterator[dict[str, Any]]:
    """Records of a JSON-lines file in order; a torn last line is skipped with a warning.
    `check` says what is wrong with a record that is JSON but not what the file holds (None: fine)."""
    try:
        handle = open_run_file(path.parent, path.name)
    except (FileNotFoundError, NotADirectoryError):
        return
    parse = orjson.loads

    def loads(line: bytes) -> Any:
        record = parse(line)
        problem = check(record) if check is not None else None
        if problem is not None:
            raise InputError(f"{path}: line {number} {problem}")
        return record

    with handle:
        previous: bytes | None = None
        number = 0
        end, size = content_end(handle), os.fstat(handle.fileno()).st_size
        if end < size:
            on_warning(nul_tail_warning(path, end, size))
        for line in handle if end == size else _lines(handle, end):
            if previous is not None:
                try:
                    yield loads(previous)
                except orjson.JSONDecodeError:
                    if previous.strip():
                        # Lines are written whole and fsynced: a bad line inside means an edited file.
                        raise InputError(f"{path}: line {number} is not valid JSON") from None
            number += 1
            previous = line
        if previous is not None and previous.strip():
            try:
                yield loads(previous)
            except orjson.JSONDecodeError:
                if previous.endswith(b"\n"):
                    raise InputError(f"{path}: line {number} is not valid JSON") from None
                on_warning(
                    f"{path}: the last line (line {number}) is torn (cut off mid-write) and is ignored"
                )


def read_jsonl(path: Path, on_warning: Callable[[str], None] = warn) -> list[dict[str, Any]]:
    return [record for record in iter_jsonl(path, on_warning) if record is not None]
