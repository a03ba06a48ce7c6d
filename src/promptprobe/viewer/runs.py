"""The runs directory as the viewer reads it: run ids checked before they touch the disk (no
traversal, symlinks resolved, nothing outside the runs directory), each run's counts kept
current incrementally (LiveCounts, a bounded number of runs at a time), and each run's line of
the runs page (status, samples, errors, headline verdict) remembered until its files change.

A run that cannot be read whole still has a line: what could be read, and why the rest could not.
"""

import os
import re
import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..counts import CountsTable, Follower, LiveCounts
from ..engine.store import STATE_HINT, load_manifest, run_state
from ..errors import InputError
from ..paths import open_run_file

RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,200}")
MAX_LIVE = 12  # runs whose counts are kept in memory at once (latencies and offsets: 20 bytes a sample)
# Below this a run is counted while the runs page waits; above, in the background.
SYNC_BYTES = 8 * 1024 * 1024
# What one look counts of a large run: the background's (some 8,000 samples, a few tenths of a
# second), and a page's own when nothing else is counting it.
CHUNK = 8 * 1024 * 1024
PAGE_CHUNK = 4 * 1024 * 1024


def files_signature(path: Path) -> tuple[Any, ...]:
    """What changes when a run's files do (manifest, samples, sequential rounds, reclassifications)."""
    out: list[Any] = []
    names = ("manifest.json", "samples.jsonl", "sequential.jsonl", "classifications", ".lock", STATE_HINT)
    for name in names:
        try:
            info = os.stat(path / name)
        except OSError:
            out.append(None)
            continue
        out.append((info.st_ino, info.st_size, info.st_mtime_ns))
    out.append(_writer_alive(path))
    return tuple(out)


def _writer_alive(path: Path) -> bool:
    """Whether the process named in the run's lock file still exists: a run killed mid-write
    changes no file, yet its status changes (from running to killed)."""
    try:
        with open_run_file(path, ".lock") as handle:  # a FIFO there must not hold the page
            pid = int(handle.read(64).strip() or 0)
    except (OSError, ValueError, InputError):  # a damaged lock is said by run_state
        return False
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)  # signal 0: only asks whether it exists
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process, alive
    return True


class RunsDir:
    """Read-only access to one runs directory, shared by every request of the viewer."""

    def __init__(
        self,
        root: Any,
        summarize: Callable[[CountsTable], dict[str, Any]],
        background: bool = False,
        follower_for: Callable[["RunsDir", str, Path], Follower | None] | None = None,
    ) -> None:
        from ..runstore import Store, is_store
        from ..runstore.mirror import Mirror

        root = Store.parse(root) if isinstance(root, str) and is_store(root) else root
        # A runs store is read through its copies in the cache, brought up to date as pages ask.
        self.mirror = Mirror(root) if isinstance(root, Store) else None
        self.root = self.mirror.root if self.mirror else Path(root)
        self.shown = str(root)
        self.background = background  # whether a thread counts runs besides the pages
        self.summarize = summarize
        self.follower_for = follower_for  # what follows a run's counting, if anything (search)
        self.lock = threading.Lock()
        self.live: OrderedDict[str, LiveCounts] = OrderedDict()
        self.summaries: dict[str, tuple[tuple[Any, ...], dict[str, Any]]] = {}
        self.busy: set[str] = set()

    # -- ids and paths -----------------------------------------------------------------------

    def path_of(self, run_id: str) -> Path | None:
        """The run directory of an id, or None: not an id, not there, or outside the runs directory."""
        if not RUN_ID.fullmatch(run_id) or run_id in (".", ".."):
            return None
        if self.mirror is not None:
            self.mirror.refresh(run_id)
        try:
            root = self.root.resolve(strict=True)
            path = (root / run_id).resolve(strict=True)
        except OSError:
            return None
        if path.parent != root or not path.is_dir():
            return None  # a symlink out of the runs directory, or a file
        return path

    def ids(self) -> list[str]:
        """Every directory of the runs directory that could be a run, by name."""
        if self.mirror is not None:
            self.mirror.refresh_ids()
        try:
            children = list(self.root.iterdir())
        except OSError:
            return []
        return sorted(
            (c.name for c in children if RUN_ID.fullmatch(c.name) and self.path_of(c.name) is not None),
            reverse=True,
        )

    # -- counts --------------------------------------------------------------------------------

    def counts(self, run_id: str) -> tuple[LiveCounts, CountsTable]:
        """A run's live counts and its whole table as it stands now (InputError: cannot be
        counted). A large run is counted in chunks, so a page asking meanwhile (`look`) gets what
        is counted so far."""
        live = self._live(run_id)
        while True:
            table, left = live.look(CHUNK)
            if not left:
                return live, table

    def look(self, run_id: str) -> tuple[LiveCounts, CountsTable, int]:
        """A run's table after at most one more (small) chunk is counted, or as last counted while
        another thread counts it, and the bytes still to count: a page never waits for a count."""
        live = self._live(run_id)
        table, left = live.look(PAGE_CHUNK, wait=False)
        return live, table, left

    def _live(self, run_id: str) -> LiveCounts:
        path = self.path_of(run_id)
        if path is None:
            raise InputError(f"{run_id}: no such run")
        with self.lock:
            live = self.live.get(run_id)
            if live is None or live.run_dir != path:
                follower = self.follower_for(self, run_id, path) if self.follower_for else None
                live = self.live[run_id] = LiveCounts(path, follower)
            self.live.move_to_end(run_id)
            while len(self.live) > MAX_LIVE:
                self.live.popitem(last=False)
        return live

    # -- the runs page -------------------------------------------------------------------------

    def line(self, run_id: str, wait: bool) -> dict[str, Any]:
        """A run's line of the runs page. With `wait`, a run with little left to count is counted
        now; one with much left (or being counted by another request) shows what its manifest or
        its last count said, marked `counting`, until the background has counted it."""
        path = self.path_of(run_id)
        if path is None:
            return {"id": run_id, "problems": ["not a readable run directory"]}
        signature = files_signature(path)
        known = self.summaries.get(run_id)
        if known is not None and known[0] == signature:
            return known[1]
        samples = path / "samples.jsonl"
        size = samples.stat().st_size if samples.is_file() else 0
        live = self.live.get(run_id)
        left = size - (live.counted if live is not None else 0)
        if wait and left < SYNC_BYTES:
            summary = self.summarize_now(run_id, signature)
            if summary is not None:
                return summary
        shown = dict(known[1]) if known is not None else manifest_line(path)
        shown["counting"] = True
        return shown

    def summarize_now(self, run_id: str, signature: tuple[Any, ...] | None = None) -> dict[str, Any] | None:
        """Count a run and remember its line; None when another thread is at it already."""
        path = self.path_of(run_id)
        if path is None:
            return {"id": run_id, "problems": ["not a readable run directory"]}
        with self.lock:
            if run_id in self.busy:
                return None
            self.busy.add(run_id)
        try:
            signature = signature or files_signature(path)
            try:
                _, counts = self.counts(run_id)
                summary = self.summarize(counts)
            except (InputError, OSError) as exc:  # damaged, or removed while being read
                summary = dict(manifest_line(path))
                summary.setdefault("problems", []).append(str(exc))
            self.summaries[run_id] = (signature, summary)
            return summary
        finally:
            with self.lock:
                self.busy.discard(run_id)

    def warm(self) -> None:
        """Count every run whose line is out of date, newest first (the background's one pass)."""
        for run_id in self.ids():
            path = self.path_of(run_id)
            if path is None:
                continue
            known = self.summaries.get(run_id)
            if known is None or known[0] != files_signature(path):
                self.summarize_now(run_id)


def manifest_line(path: Path) -> dict[str, Any]:
    """What the manifest alone says of a run (its counts as written at its start or end)."""
    line: dict[str, Any] = {"id": path.name, "problems": []}
    if not (path / "manifest.json").is_file():
        line["problems"].append("no manifest.json (yet): not a run, or one that is starting")
        return line
    try:
        manifest = load_manifest(path)
    except InputError as exc:
        line["problems"].append(str(exc))
        return line
    counts = manifest.get("counts") or {}
    line.update(
        probeset=str(manifest["probeset"].get("name") or "?"),
        status=run_state(path, manifest),
        samples=counts.get("recorded"),
        planned=counts.get("planned"),
        errors=counts.get("errors"),
        created=str(manifest.get("created") or ""),
        arms=[
            {"index": i, "name": str(a.get("name") or f"{a.get('prompt')} x {a.get('model')}")}
            for i, a in enumerate(manifest["arms"], 1)
            if isinstance(a, dict)
        ],
    )
    return line
