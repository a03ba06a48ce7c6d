"""User code in worker processes: your `[[check]]` functions run here, away from the run.

A thread cannot be stopped, and code running in the probe's own process can end it
(`raise KeyboardInterrupt`, `sys.exit`), hang it, or print into `probe run --json`. So each
function is called in a worker process of its own interpreter, one call at a time, under a time
limit: a worker that does not answer in time is killed and a new one started for the next call.
Whatever the function does (raises anything, hangs, prints, exits, returns something else than
True, False or None) comes back as an `Outcome` with a message: that call's error, never the run's.

Workers import the functions exactly as the probe would (the current directory first on the
import path, then the probe's own path), ignore Ctrl-C (the probe decides what an interrupt
means, and kills them), have their output captured instead of inheriting the terminal, and exit
when the probe is gone. The sample goes to them as plain data (pickled) and is handed to the
function read-only. Calls from several threads use several workers, started as needed.
"""

import atexit
import contextlib
import io
import json
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from .errors import InputError
from .redaction import SCRUBBER

HEADER = struct.Struct("!Q")  # the length of each message, before its pickled bytes
START_SECONDS = 120.0  # importing the functions (a cold import of a large library can be slow)
CAPTURED_LIMIT = 500  # characters of a function's printed output kept with its error
MESSAGE_LIMIT = 1000  # characters of an exception's message kept
STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}
LOG_READ = 64 * 1024  # bytes of a dead worker's stderr read, scrubbed, then cut to its last line
SPARE_WAIT = 0.05  # seconds a call waits for a busy worker before another is started


@dataclass(frozen=True)
class Outcome:
    """What one call gave: `value` (True, False or None), or `error` (a message) when it failed."""

    value: bool | None = None
    error: str | None = None


def frozen(value: Any) -> Any:
    """A read-only copy: mappings behind MappingProxyType, lists as tuples."""
    if isinstance(value, Mapping):
        return MappingProxyType({key: frozen(item) for key, item in value.items()})
    if isinstance(value, list | tuple):
        return tuple(frozen(item) for item in value)
    return value


# -- the worker's side --------------------------------------------------------------------------


def _send(stream: Any, message: Any) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(HEADER.pack(len(data)) + data)
    stream.flush()


def _receive(stream: Any) -> Any:
    head = stream.read(HEADER.size)
    if len(head) < HEADER.size:
        return None  # the probe closed the pipe: time to go
    (size,) = HEADER.unpack(head)
    data = stream.read(size)
    return pickle.loads(data) if len(data) == size else None


def _where_it_raised(exc: BaseException) -> str:
    """`, at FILE line N` for the innermost frame outside this module (the user's code)."""
    frame = None
    trace = exc.__traceback__
    while trace is not None:
        if trace.tb_frame.f_code.co_filename != __file__:
            frame = trace
        trace = trace.tb_next
    if frame is None:
        return ""
    return f" (at {os.path.basename(frame.tb_frame.f_code.co_filename)}, line {frame.tb_lineno})"


def _described(exc: BaseException) -> str:
    """`KeyError: 'price'`; an exception whose message cannot be read is still named."""
    try:
        said = SCRUBBER.text(str(exc))  # scrubbed before the cut, so no cut keeps part of a key
    except BaseException:  # its __str__ raised too: the type is what can be said
        said = "(its message could not be read)"
    if len(said) > MESSAGE_LIMIT:
        said = said[:MESSAGE_LIMIT] + "..."
    return f"{type(exc).__name__}: {said}" if said else type(exc).__name__


def _call(function: Any, sample: Any) -> Outcome:
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
            result = function(sample)
    except SystemExit as exc:
        outcome = Outcome(error=f"called sys.exit({exc.code!r})")
    except BaseException as exc:  # anything user code raises is this call's error, KeyboardInterrupt too
        outcome = Outcome(error=f"raised {_described(exc)}{_where_it_raised(exc)}")
    else:
        if result is None or type(result) is bool:
            return Outcome(value=result)
        outcome = Outcome(error=f"returned {type(result).__name__}; a check returns True, False or None")
    text = SCRUBBER.text(printed.getvalue()).strip()
    if text:
        shown = text if len(text) <= CAPTURED_LIMIT else "..." + text[-CAPTURED_LIMIT:]
        outcome = Outcome(error=f"{outcome.error}; it printed: {shown}")
    return outcome


def _learn(secrets: Any) -> None:
    """Scrub what the probe scrubs: its secrets come with each message (never on the command line)."""
    for value, name in (secrets or {}).items():
        SCRUBBER.add(name, value)


def _watch_parent(parent: int) -> None:
    """Exit when the probe is gone (killed outright), even while a function hangs."""
    while True:
        time.sleep(0.5)
        if os.getppid() != parent:
            os._exit(1)


def serve(parent: int, functions_named: Sequence[tuple[str, str]]) -> None:
    """The worker's loop: import the functions (`module:function`, and what to call it in a
    message), then answer calls until the pipe closes."""
    # Ctrl-C is the probe's to act on; a SIGTERM sent to the probe's group while this worker
    # was starting (its signals blocked) is dropped, one sent to it later ends it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
    requests = os.fdopen(os.dup(0), "rb")
    replies = os.fdopen(os.dup(1), "wb")
    quiet = os.open(os.devnull, os.O_RDWR)
    os.dup2(quiet, 0)
    os.dup2(quiet, 1)  # output written below Python's sys.stdout goes nowhere, not into the protocol
    sys.stdin = open(os.devnull)  # noqa: SIM115  # a function that reads input gets none
    from .production import import_function

    _learn(_receive(requests))
    functions: list[Any] = []
    problems: list[str | None] = []
    printed = io.StringIO()
    for reference, label in functions_named:
        try:
            with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
                functions.append(import_function(reference, label))
            problems.append(None)
        except InputError as exc:
            functions.append(None)
            problems.append(str(exc))
        except BaseException as exc:  # importing user code may raise anything, KeyboardInterrupt too
            functions.append(None)
            problems.append(f"{label} {reference!r}: importing it raised {_described(exc)}")
    _send(replies, problems)
    while True:
        request = _receive(requests)
        if request is None:
            return
        index, data, secrets = request
        _learn(secrets)
        sample = frozen(pickle.loads(data))
        _send(replies, _call(functions[index], sample))


# -- the probe's side ---------------------------------------------------------------------------


class WorkerGone(Exception):
    """The worker died, or did not answer in time (it has been killed)."""


class Worker:
    """One worker process: a call at a time, answered within a time limit or killed."""

    def __init__(self, functions_named: list[tuple[str, str]]) -> None:
        cwd = os.getcwd()
        # Imported as production code is: the current directory first, then the probe's own path.
        path = sys.path if sys.path[:1] == [cwd] else [cwd, *sys.path]
        boot = (
            "import json, sys; sys.path[:] = json.loads(sys.argv[1]); "
            "from promptprobe.sandbox import serve; serve(int(sys.argv[2]), json.loads(sys.argv[3]))"
        )
        self.log = tempfile.TemporaryFile()  # the worker's stderr, read when it dies unexpectedly
        # Until it has its own session the worker is in the probe's process group, where a Ctrl-C
        # would kill it: it starts with the signals blocked (a child inherits the mask of the
        # thread that starts it) and drops any that came in once it ignores them.
        named = json.dumps(functions_named)
        command = [sys.executable, "-c", boot, json.dumps(path), str(os.getpid()), named]
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            self.process = subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self.log,
                start_new_session=True,  # a Ctrl-C at the terminal reaches the probe only
                close_fds=True,
            )
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        assert self.process.stdin is not None and self.process.stdout is not None
        self.requests = self.process.stdin
        self.replies = self.process.stdout.fileno()

    def _write(self, message: Any) -> None:
        data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        self.requests.write(HEADER.pack(len(data)) + data)
        self.requests.flush()

    def started(self, limit: float) -> list[str | None]:
        """Each function's import problem (None: imported), once the worker is ready."""
        late = f"did not finish importing within {limit:g} s"
        try:
            self._write(SCRUBBER.known())  # its import errors are scrubbed before they are cut
        except OSError:
            raise WorkerGone(self._died("while it started")) from None
        problems = self._answer(limit, "importing the functions", late)
        assert isinstance(problems, list)
        return problems

    def call(self, index: int, data: bytes, timeout: float) -> Outcome:
        try:
            self._write((index, data, SCRUBBER.known()))
        except OSError:
            raise WorkerGone(self._died("before it was called")) from None
        late = f"did not return within {timeout:g} s (its timeout); stopped"
        outcome = self._answer(timeout, "the call", late)
        assert isinstance(outcome, Outcome)
        return outcome

    def _read(self, size: int, deadline: float, what: str, late: str) -> bytes:
        data = b""
        while len(data) < size:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.replies], [], [], left)[0]:
                self.stop()
                raise WorkerGone(late)
            chunk = os.read(self.replies, size - len(data))
            if not chunk:
                raise WorkerGone(self._died(f"during {what}"))
            data += chunk
        return data

    def _answer(self, limit: float, what: str, late: str) -> Any:
        """The worker's next message, within `limit` seconds (else it is stopped: `late` says so)."""
        deadline = time.monotonic() + limit
        (size,) = HEADER.unpack(self._read(HEADER.size, deadline, what, late))
        return pickle.loads(self._read(size, deadline, what, late))

    def _died(self, when: str) -> str:
        self.stop()
        code = self.process.wait()
        how = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
        self.log.seek(max(0, self.log.seek(0, os.SEEK_END) - LOG_READ))
        # Scrubbed before the cut to its last 300 characters, so the cut keeps no part of a key.
        tail = SCRUBBER.text(self.log.read().decode("utf-8", "replace"))[-300:].strip().splitlines()
        last = f": {tail[-1]}" if tail else ""
        return f"its process ended {when} ({how}){last}"

    def stop(self) -> None:
        """Kill the process (safe from another thread: its pipes stay open for the caller)."""
        if self.process.poll() is None:
            with contextlib.suppress(OSError):
                self.process.kill()

    def kill(self) -> None:
        """Kill the process and release its pipes (only from the thread using the worker)."""
        self.stop()
        self.process.wait()
        for stream in (self.process.stdin, self.process.stdout, self.log):
            with contextlib.suppress(OSError):
                stream.close()  # type: ignore[union-attr]


class Sandbox:
    """Calls `module:function` references in worker processes, each call under its time limit.

    Building it starts one worker and imports every function there: a function that cannot be
    imported is an InputError now, before anything is run. `labels` say what each function is
    in a message (`[[check]] quotes_price: function`)."""

    def __init__(
        self, references: Sequence[str], labels: Sequence[str], start_limit: float = START_SECONDS
    ) -> None:
        self.functions_named = list(zip(references, labels, strict=True))
        self.start_limit = start_limit
        self.lock = threading.Condition()  # a worker given back wakes a caller waiting for one
        self.idle: list[Worker] = []
        self.workers: set[Worker] = set()
        self.closed = False
        worker = self._start()
        try:
            problems = worker.started(self.start_limit)
        except WorkerGone as exc:
            self._discard(worker)
            named = ", ".join(f"{label} {reference!r}" for reference, label in self.functions_named)
            raise InputError(f"{named}: {exc}") from None
        found = [problem for problem in problems if problem]
        if found:
            self._discard(worker)
            raise InputError("; ".join(found))
        self.idle.append(worker)
        _OPEN.add(self)

    def _start(self) -> Worker:
        worker = Worker(self.functions_named)
        with self.lock:
            self.workers.add(worker)
        return worker

    def _discard(self, worker: Worker) -> None:
        worker.kill()
        with self.lock:
            self.workers.discard(worker)

    def _take(self) -> Worker | None:
        with self.lock:
            # A worker busy with a quick call is free again in a moment: wait that long before
            # starting another (a start costs a new interpreter), not longer (a check may hang).
            self.lock.wait_for(lambda: self.idle or self.closed, timeout=SPARE_WAIT)
            if self.closed:
                return None
            if self.idle:
                return self.idle.pop()
        worker = self._start()
        try:
            problems = worker.started(self.start_limit)
        except WorkerGone:
            self._discard(worker)
            raise
        if any(problems):
            self._discard(worker)
            raise WorkerGone(next(p for p in problems if p))
        return worker

    def call(self, index: int, data: bytes, timeout: float) -> Outcome:
        """Call function `index` with the pickled sample `data`; its Outcome, never an exception."""
        try:
            worker = self._take()
        except WorkerGone as exc:
            return Outcome(error=f"could not start its process: {exc}")
        if worker is None:
            return Outcome(error="not called: the run was closing")
        try:
            outcome = worker.call(index, data, timeout)
        except WorkerGone as exc:
            self._discard(worker)
            return Outcome(error=str(exc))
        with self.lock:
            if self.closed:
                worker.kill()
            else:
                self.idle.append(worker)
                self.lock.notify()
        return outcome

    def close(self) -> None:
        """Stop every worker (a call in flight comes back as an error)."""
        with self.lock:
            self.closed = True
            self.lock.notify_all()
            idle, busy = self.idle, [w for w in self.workers if w not in self.idle]
            self.workers, self.idle = set(), []
        for worker in idle:
            worker.kill()
        for worker in busy:
            worker.stop()  # its caller sees the pipe close and releases it


_OPEN: "weakref.WeakSet[Sandbox]" = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    """Workers never outlive the probe (a Python API user may not close what a run opened)."""
    for sandbox in list(_OPEN):
        sandbox.close()
