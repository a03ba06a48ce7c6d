"""One deadline per call, covering everything: connecting, the response headers, the body and
the stream. httpx's own timeouts apply per operation (a server that sends one header byte a
second never trips a 5-second read timeout), so the network layer under the SDKs' and the
retriever's HTTP clients is wrapped: every connect, read and write gets at most the time left
before the calling thread's deadline, and none starts after it.

The deadline is per thread (each worker makes one call at a time); `until(seconds)` sets it for
the duration of a call. The same wrapping serves httpcore2 (the anthropic and openai SDKs'
stack) and httpcore (httpx, used by the HTTP retriever).
"""

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

_LOCAL = threading.local()


def remaining() -> float | None:
    """Seconds left before this thread's deadline (None: no deadline is set)."""
    deadline = getattr(_LOCAL, "deadline", None)
    return None if deadline is None else deadline - time.monotonic()


@contextmanager
def until(seconds: float) -> Iterator[None]:
    """Run the block under a deadline `seconds` from now (nested: the earlier one wins)."""
    previous = getattr(_LOCAL, "deadline", None)
    deadline = time.monotonic() + seconds
    _LOCAL.deadline = deadline if previous is None else min(previous, deadline)
    try:
        yield
    finally:
        _LOCAL.deadline = previous


def _bounded(timeout: float | None, error: Callable[[str], Exception]) -> float | None:
    left = remaining()
    if left is None:
        return timeout
    if left <= 0:
        raise error("the call's deadline passed")
    return left if timeout is None else min(timeout, left)


def backend_for(httpcore: Any) -> Any:
    """A network backend for `httpcore` (or httpcore2) whose every operation obeys the deadline."""

    class DeadlineStream(httpcore.NetworkStream):
        def __init__(self, inner: Any) -> None:
            self.inner = inner
            # The pool asks every idle connection on every request (15 times a call): no frame of ours.
            self.get_extra_info = inner.get_extra_info

        def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
            return self.inner.read(max_bytes, _bounded(timeout, httpcore.ReadTimeout))

        def write(self, buffer: bytes, timeout: float | None = None) -> None:
            self.inner.write(buffer, _bounded(timeout, httpcore.WriteTimeout))

        def close(self) -> None:
            self.inner.close()

        def start_tls(
            self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None
        ) -> Any:
            bounded = _bounded(timeout, httpcore.ConnectTimeout)
            return DeadlineStream(self.inner.start_tls(ssl_context, server_hostname, bounded))

    class DeadlineBackend(httpcore.NetworkBackend):
        def __init__(self) -> None:
            self.inner = httpcore.SyncBackend()

        def connect_tcp(
            self,
            host: str,
            port: int,
            timeout: float | None = None,
            local_address: str | None = None,
            socket_options: Any = None,
        ) -> Any:
            bounded = _bounded(timeout, httpcore.ConnectTimeout)
            return DeadlineStream(self.inner.connect_tcp(host, port, bounded, local_address, socket_options))

        def connect_unix_socket(
            self, path: str, timeout: float | None = None, socket_options: Any = None
        ) -> Any:
            bounded = _bounded(timeout, httpcore.ConnectTimeout)
            return DeadlineStream(self.inner.connect_unix_socket(path, bounded, socket_options))

        def sleep(self, seconds: float) -> None:
            self.inner.sleep(seconds)

    return DeadlineBackend()


def apply(client: Any, httpcore: Any) -> None:
    """Put every transport of an httpx (or httpx2) client, proxies' included, under the deadline.

    The connection pool takes its network backend when it opens a connection, so swapping it on
    a fresh client covers every connection the client will make."""
    transports = [getattr(client, "_transport", None), *getattr(client, "_mounts", {}).values()]
    for transport in transports:
        pool = getattr(transport, "_pool", None)
        if pool is None:
            continue
        if not hasattr(pool, "_network_backend"):
            raise RuntimeError(f"{type(pool).__name__} has no network backend to put under a deadline")
        pool._network_backend = backend_for(httpcore)
