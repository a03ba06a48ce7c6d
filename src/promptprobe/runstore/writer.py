"""A run written to a store: the engine writes its working copy on this machine's disk exactly as
it writes any run directory (crash-safe, fsynced), and this store sends it up at checkpoints:
at every manifest write (start, resume, end) and every SYNC_SECONDS in between, when it also
renews the run's lease. A run killed between checkpoints has its newest samples in the working
copy, which a resume on this machine sends up; a resume elsewhere runs them again."""

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..engine.store import RunStore, StorageError
from ..jsonio import warn
from .lease import Lease, LeaseLost, new_session
from .remote import Store, StoreError
from .upload import Uploader

SYNC_SECONDS = float(os.environ.get("PROBE_STORE_SYNC_SECONDS") or 2.0)


class SyncedRunStore(RunStore):
    """A RunStore whose directory is the working copy of a run in a store."""

    def __init__(self, path: Path, umask: int, store: Store, lease: Lease | None = None) -> None:
        super().__init__(path, umask)
        self.store = store
        self.lease = lease or Lease(store, path.name)
        self.uploader = Uploader(store, path.name, path, self.lease, new_session())
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None
        self.fatal: StoreError | None = None
        self.warned = False  # the store was out of reach at the last checkpoint (said once)
        self.finished = False

    @contextmanager
    def between_writes(self) -> Iterator[None]:
        """Hold off new appends while the checkpoint takes the files' sizes, so that each is at
        the end of whole lines (and the bytes they point to)."""
        commits = getattr(self, "commits", None)
        if commits is None:
            with self.lock:
                yield
            return
        with commits.lock:
            while commits.committing:
                commits.lock.wait()
            yield

    @property
    def where(self) -> str:
        return self.store.run_url(self.path.name)

    def acquire(self) -> None:
        super().acquire()
        if self.lease.generation is None:
            try:
                self.lease.acquire()
            except BaseException:
                super().release()
                raise
        self.thread = threading.Thread(target=self._loop, name="probe-store-sync", daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while not self.stop.wait(SYNC_SECONDS):
            try:
                self.uploader.checkpoint(self.between_writes)
            except LeaseLost as exc:
                self.fatal = exc
                return
            except StoreError as exc:  # the store is out of reach a moment: the next checkpoint retries
                if not self.warned:
                    warn(f"{exc}; the run goes on and is sent up at the next checkpoint")
                self.warned = True
            else:
                self.warned = False

    def sync(self, final: bool) -> None:
        if self.fatal is not None:
            raise self.fatal
        try:
            self.uploader.checkpoint(self.between_writes, final)
        except LeaseLost as exc:
            raise StorageError(str(exc)) from None
        except StoreError as exc:
            then = f"probe push {self.path} {self.store}" if final else f"probe run --resume {self.path}"
            kept = f"the run is kept on this machine in {self.path} ({then} sends it up)"
            raise StorageError(f"{exc}; {kept}") from None
        self.finished = final

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        super().write_manifest(manifest)
        self.sync(final=manifest.get("status") != "running")

    def discard(self) -> None:
        super().discard()
        try:
            self.store.remove(self.store.find(self.store.key(self.path.name)))
        except StoreError as exc:
            warn(f"{exc}; {self.where} holds a run that recorded nothing")

    def append_many(self, name: str, records: list[dict[str, Any]]) -> None:
        if self.fatal is not None:
            raise StorageError(str(self.fatal))
        super().append_many(name, records)

    def release(self) -> None:
        self.stop.set()
        if self.thread is not None and self.thread is not threading.current_thread():
            self.thread.join()
        self.thread = None
        try:
            if not self.finished and self.fatal is None and self.lease.generation is not None:
                try:
                    self.uploader.checkpoint(self.between_writes)
                except StoreError as exc:
                    warn(f"{exc}; the samples since the last checkpoint are in {self.path}")
            if self.fatal is None:
                self.lease.release()
        except StoreError as exc:
            warn(f"{exc}; the run's lease lapses by itself within a minute")
        finally:
            super().release()
