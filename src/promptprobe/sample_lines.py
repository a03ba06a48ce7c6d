"""One sample's lines in samples.jsonl, found by searching the file's bytes for its id instead of
parsing every line (`probe show --sample` on a million-sample run). The file is mapped a window at
a time, so memory stays small whatever its size; a large file is searched in two halves, one by a
forked process, on a machine with a second core. Every line the id's bytes are found in is parsed,
and kept when its record is that sample's; anything the search cannot vouch for (a line that is not
JSON, a last line without its end) is left to the careful reader, which reads every line.
"""

import mmap
import os
import threading
from array import array
from pathlib import Path
from typing import Any

from .jsonio import dumps_line, loads
from .paths import open_run_file

SEARCH_WINDOW = 16 << 20  # the bytes of the file mapped at a time
LINE_STEP = 1 << 16  # read at a time looking for a line's ends
PARALLEL_SEARCH = 64 << 20  # a file at least this large is searched in two halves at once


def lines_naming(path: Path, sample_id: str) -> list[dict[str, Any]] | None:
    """The records of one sample, in file order; None when the search cannot tell (the careful
    reader decides)."""
    needle = b'"sample_id":' + dumps_line(sample_id).rstrip(b"\n")
    found = []
    try:
        path = Path(path)  # a caller may name it as text
        with open_run_file(path.parent, path.name) as handle:
            fd = handle.fileno()
            done = 0  # where the last line read ends: a second place in the same line is skipped
            for at in _places(fd, os.fstat(fd).st_size, needle):
                if at < done:
                    continue
                line = _line_around(fd, at)
                if line is None:
                    return None  # a last line without its end
                start, done = line
                record = loads(os.pread(fd, done - start, start))
                if isinstance(record, dict) and record.get("sample_id") == sample_id:
                    found.append(record)
    except (OSError, ValueError):
        return None  # a line that is not JSON
    return found or None


def _places(fd: int, size: int, needle: bytes) -> list[int]:
    """Every place `needle` starts in the file, in order: a large file's second half searched by a
    forked process meanwhile (forking is safe without other threads)."""
    if size < PARALLEL_SEARCH or (os.cpu_count() or 1) < 2 or threading.active_count() > 1:
        return _search(fd, size, needle, 0, size)
    middle = size // 2
    receive, send = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the second half's places as 8-byte integers, then gone at once
        status = 1
        try:
            os.close(receive)
            with open(send, "wb") as pipe:
                pipe.write(array("q", _search(fd, size, needle, middle, size)).tobytes())
            status = 0
        finally:
            os._exit(status)
    os.close(send)
    try:
        first = _search(fd, size, needle, 0, middle)
        with open(receive, "rb") as pipe:
            data = pipe.read()
    finally:
        _, status = os.waitpid(pid, 0)
    if status != 0:  # the child failed: its half searched here
        return first + _search(fd, size, needle, middle, size)
    second = array("q")
    second.frombytes(data)
    return first + second.tolist()


def _search(fd: int, size: int, needle: bytes, start: int, stop: int) -> list[int]:
    """The places in [start, stop) where `needle` starts (it may end beyond `stop`), one mapped
    window at a time; windows overlap by the needle's length. The search is for the needle without
    its last byte (the id's closing quote, common in JSON: a rare last byte lets it skip further),
    and each place found is checked for that byte."""
    places: list[int] = []
    head, last = needle[:-1], needle[-1]
    while start < stop:
        base = start - start % mmap.ALLOCATIONGRANULARITY
        end = min(start + SEARCH_WINDOW, stop)  # places searched here: [start, end)
        length = min(end - base + len(needle) - 1, size - base)
        # A head found here starts before `end` and leaves room for the last byte after it.
        limit = min(end - base + len(head) - 1, length - 1)
        with mmap.mmap(fd, length, access=mmap.ACCESS_READ, offset=base) as data:
            at = data.find(head, start - base, limit)
            while at >= 0:
                if data[at + len(head)] == last:
                    places.append(base + at)
                at = data.find(head, at + 1, limit)
        start = end
    return places


def _line_around(fd: int, at: int) -> tuple[int, int] | None:
    """Where the line holding byte `at` starts and where its newline is (None: it has none)."""
    start = at
    while start > 0:
        step = min(LINE_STEP, start)
        cut = os.pread(fd, step, start - step).rfind(b"\n")
        if cut >= 0:
            start = start - step + cut + 1
            break
        start -= step
    end = at
    while True:
        chunk = os.pread(fd, LINE_STEP, end)
        if not chunk:
            return None
        cut = chunk.find(b"\n")
        if cut >= 0:
            return start, end + cut
        end += len(chunk)
