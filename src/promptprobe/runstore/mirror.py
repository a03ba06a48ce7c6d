"""The runs of a store as `probe view` reads them: copies in the read cache, brought up to date
when a page asks (a running run every RUNNING_EVERY seconds at most, a finished one every
FINISHED_EVERY), so the viewer's own readers work on them unchanged."""

import threading
import time
from pathlib import Path

import orjson

from ..errors import InputError
from ..jsonio import warn
from .cache import read_dir
from .download import fetch
from .remote import Store, StoreError, run_ids

LIST_EVERY = 5.0
RUNNING_EVERY = 2.0
FINISHED_EVERY = 30.0


class Mirror:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.root: Path = read_dir(store)
        self.lock = threading.Lock()
        self.looked: dict[str, tuple[float, bool]] = {}  # run id -> (when, whether it was running)
        self.listed = float("-inf")

    def refresh_ids(self) -> None:
        """Copy the runs the store holds now (each as often as refresh allows)."""
        now = time.monotonic()
        if now - self.listed < LIST_EVERY:
            return
        self.listed = now
        try:
            ids = run_ids(self.store)
        except StoreError as exc:
            warn(f"probe view: {exc}; showing the copies made before")
            return
        for run_id in ids:
            self.refresh(run_id)

    def refresh(self, run_id: str) -> None:
        with self.lock:
            when, running = self.looked.get(run_id, (float("-inf"), True))
            if time.monotonic() - when < (RUNNING_EVERY if running else FINISHED_EVERY):
                return
            try:
                path = fetch(self.store, run_id)
                running = _running(path)
            except (InputError, StoreError) as exc:
                warn(f"probe view: {self.store.run_url(run_id)}: {exc}")
            self.looked[run_id] = (time.monotonic(), running)


def _running(path: Path) -> bool:
    try:
        manifest = orjson.loads((path / "manifest.json").read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return True
    return not isinstance(manifest, dict) or manifest.get("status") == "running"
