"""The viewer's uvicorn server, stopped the way every probe command stops.

uvicorn catches SIGINT and SIGTERM whatever their disposition and, once shut down, raises the
signal again for the handler it found. A viewer started with Ctrl-C ignored (`nohup probe view
&`, a background job) must keep ignoring it, and the command, not a signal raised again, says
`interrupted` and exits 128 + the signal, as `probe run` does.
"""

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

import uvicorn

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class ViewerServer(uvicorn.Server):
    """uvicorn's server; `stopped_by` is the signal that stopped it (None: it was not stopped)."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.stopped_by: int | None = None

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield  # signals reach only the main thread (a viewer served from a test's thread)
            return
        caught = [sig for sig in STOP_SIGNALS if signal.getsignal(sig) is not signal.SIG_IGN]
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in caught}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.stopped_by is None:
            self.stopped_by = sig
        super().handle_exit(sig, frame)  # a second Ctrl-C forces the exit, as uvicorn's does
