"""One writer per run in a store: a lease object made with a conditional write.

The lease is `<run>/.store/lease.<generation>`, created with If-None-Match: * so that of two
processes reaching for one generation exactly one gets it. Its holder renews it (writes it again
with a later `expires`) at every checkpoint and checks that no later generation exists: a holder
that finds one has lost the run and stops. A lease is free when it is released, expired (LEASE
seconds after its last renewal, by the clocks of the machines involved), or held by a process of
this same host that no longer exists (a killed writer: no need to wait for the expiry). Taking a
free lease is creating the next generation, so two processes taking over cannot both win.
"""

import os
import re
import secrets
import socket
import time
from datetime import UTC, datetime
from typing import Any

import orjson

from ..errors import StartError
from .remote import Store, StoreError

LEASE_SECONDS = 30.0
LEASE_NAME = re.compile(r"lease\.(\d{8})")


class LeaseLost(StoreError):
    """Another process took the run over (this one's lease had expired): it stops writing."""


def _stamp(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _seconds(stamp: str) -> float:
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except (ValueError, AttributeError):
        return 0.0


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def holder_live(holder: dict[str, Any], now: float | None = None) -> bool:
    """Whether a lease still keeps others out (see the module's docstring)."""
    if holder.get("released"):
        return False
    if (now or time.time()) >= _seconds(str(holder.get("expires") or "")):
        return False
    pid = holder.get("pid")
    if holder.get("host") == socket.gethostname() and isinstance(pid, int) and pid != os.getpid():
        return pid_alive(pid)
    return True


def holder_words(url: str, holder: dict[str, Any]) -> str:
    return (
        f"{url}: another probe process (pid {holder.get('pid')} on {holder.get('host')}) is writing "
        f"this run; its lease ends at {holder.get('expires')} unless it is renewed, so only one "
        "process writes a run"
    )


class Lease:
    """This process's claim on one run of a store."""

    def __init__(self, store: Store, run_id: str) -> None:
        self.store = store
        self.run_id = run_id
        self.folder = store.key(run_id, ".store")
        self.generation: int | None = None
        self.acquired = ""

    def _key(self, generation: int) -> str:
        return f"{self.folder}/lease.{generation:08d}"

    def _record(self, released: bool = False) -> bytes:
        now = time.time()
        record = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "acquired": self.acquired or _stamp(now),
            "renewed": _stamp(now),
            "expires": _stamp(now + LEASE_SECONDS),
            "released": released,
        }
        return orjson.dumps(record)

    def current(self) -> tuple[int, dict[str, Any]] | None:
        """The latest generation and what its holder wrote (None: the run never had a writer)."""
        generations = [
            int(match.group(1))
            for entry in self.store.listing(self.folder)
            if (match := LEASE_NAME.fullmatch(entry["name"].rpartition("/")[2]))
        ]
        if not generations:
            return None
        latest = max(generations)
        data = self.store.cat(self._key(latest))
        try:
            holder = orjson.loads(data) if data else {}
        except orjson.JSONDecodeError:
            holder = {}
        return latest, holder if isinstance(holder, dict) else {}

    def acquire(self) -> None:
        """Hold the run, or StartError (exit 3) naming the process that holds it."""
        found = self.current()
        if found is not None and holder_live(found[1]):
            raise StartError(holder_words(self.store.run_url(self.run_id), found[1]))
        generation = (found[0] if found else 0) + 1
        self.acquired = _stamp(time.time())
        if not self.store.create(self._key(generation), self._record()):
            winner = self.current()
            raise StartError(holder_words(self.store.run_url(self.run_id), winner[1] if winner else {}))
        self.generation = generation

    def renew(self) -> None:
        """Keep the run for another LEASE_SECONDS; LeaseLost when another process took it."""
        if self.generation is None:
            return
        found = self.current()
        if found is None or found[0] != self.generation:
            holder = found[1] if found else {}
            raise LeaseLost(
                f"{self.store.run_url(self.run_id)}: another process (pid {holder.get('pid')} on "
                f"{holder.get('host')}) took this run over after this one's lease lapsed; this one "
                "stops writing to it"
            )
        self.store.pipe_many({self._key(self.generation): self._record()})

    def release(self) -> None:
        if self.generation is not None:
            self.store.pipe_many({self._key(self.generation): self._record(released=True)})
            self.generation = None


def new_session() -> str:
    return secrets.token_hex(6)
