"""Where runs live: a runs directory on disk, or a runs store in S3 (`s3://BUCKET/PREFIX`).
Every decision about a run's location goes through here: which runs directory a command uses
(`--runs-dir`, else $PROBE_RUNS_DIR, else probe.toml's `[run] runs_dir`, else ./runs), where a new
run is written, which process may write a run, and the local copy a reader of a store reads.

A run in a store is written to a working copy on this machine and sent up at checkpoints
(writer.py, upload.py); readers download it into a cache, checked by sha256 (download.py); one
writer per run is kept by a lease object made with a conditional write (lease.py). See
docs/runs.md, "Runs in a store".
"""

import atexit
import os
from pathlib import Path
from typing import Any

from ..engine.store import PRIVATE_UMASK, RunStore, load_manifest, new_run_directory
from ..errors import InputError
from .cache import mark_origin, origin_of, session_of, work_dir
from .download import fetch, fetch_for_listing, materialize, read_index, remove_copy
from .index import index_session
from .lease import Lease
from .remote import Store, StoreError, is_store

ENV = "PROBE_RUNS_DIR"
Location = Path | Store
_CLAIMED: dict[Path, tuple[Store, Lease, dict[str, Any]]] = {}
_ENDS_SENT: set[Path] = set()  # working copies whose end a claim sent up (their writer could not)


def location(given: Any = None, configured: str | None = None, base: Path | None = None) -> Location:
    """The runs directory or store: the one given, else $PROBE_RUNS_DIR, else `configured` (a
    config's [run] runs_dir, relative to `base`), else ./probe.toml's, else ./runs."""
    if isinstance(given, Store):
        return given
    if configured is None and not given and not os.environ.get(ENV):
        configured, base = _probe_toml_runs_dir()
    for value, relative_to in ((given, None), (os.environ.get(ENV), None), (configured, base)):
        if value:
            text = os.fspath(value)
            if is_store(text):
                return Store.parse(text)
            path = Path(text)
            return relative_to / path if relative_to is not None and not path.is_absolute() else path
    return Path("runs")


def _probe_toml_runs_dir() -> tuple[str | None, Path | None]:
    """[run] runs_dir of ./probe.toml, read alone (a command that only reads runs needs no more)."""
    import tomllib

    path = Path("probe.toml")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None, None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None, None  # `probe check` and `probe run` say what is wrong with it
    run = data.get("run")
    value = run.get("runs_dir") if isinstance(run, dict) else None
    return (value, Path.cwd()) if isinstance(value, str) and value else (None, None)


# -- writing ---------------------------------------------------------------------------------


def new_run(runs_dir: Location, probeset_name: str, umask: int) -> RunStore:
    """A new run, held by this process: a directory under `runs_dir`, or a working copy of a new
    run in the store (its lease taken before anything is written)."""
    if not isinstance(runs_dir, Store):
        return RunStore.create(Path(runs_dir), probeset_name, umask)
    from .writer import SyncedRunStore

    store = runs_dir

    def synced(path: Path, _umask: int) -> RunStore:
        return SyncedRunStore(path, PRIVATE_UMASK, store)

    run = new_run_directory(synced, work_dir(store), probeset_name, PRIVATE_UMASK)  # type: ignore[arg-type]
    mark_origin(run.path, store)
    return run


def claim(store: Store, run_id: str) -> Path:
    """Take the run's lease for this process (StartError, exit 3, when another holds it) and make
    the working copy current: kept when the store's index was written from it (its writer, on
    this machine, was killed or could not send its end: nothing it wrote is lost), else
    downloaded."""
    lease = Lease(store, run_id)
    found = read_index(store, run_id)
    if found is None:
        raise InputError(f"{store.run_url(run_id)}: no such run in the store")
    lease.acquire()
    atexit.register(_release_unused, lease)
    try:
        found = read_index(store, run_id) or found  # as it is now that no one else writes it
        files = found[1]
        work = work_dir(store) / run_id
        session = index_session(found[0])
        if not (work.is_dir() and session is not None and session_of(work) == session):
            remove_copy(work)
            materialize(store, run_id, work)
        mark_origin(work, store)
    except BaseException:
        lease.release()
        raise
    _CLAIMED[work.resolve()] = (store, lease, files)
    if _end_not_sent(store, run_id, work, files):
        send_up(work)  # its writer finished here and was stopped before the store had its end
        _ENDS_SENT.add(work.resolve())
    return work


def _end_not_sent(store: Store, run_id: str, work: Path, files: dict[str, Any]) -> bool:
    """Whether a working copy kept by a claim holds a finished run that the store's index has
    still running (its writer was killed, or lost the store, while sending its end)."""
    import hashlib

    import orjson

    try:
        if load_manifest(work).get("status") == "running":
            return False
    except InputError:
        return False
    entry = files.get("manifest.json")
    if entry is None:
        return False
    got = store.cat_many([store.key(run_id, key) for key, _ in entry["parts"]])
    data = b"".join(got.get(store.key(run_id, key)) or b"" for key, _ in entry["parts"])
    if hashlib.sha256(data).hexdigest() != entry["sha256"]:
        return False  # not read as the index says: the resume goes on as for any run
    try:
        theirs = orjson.loads(data)
    except orjson.JSONDecodeError:
        return False
    return isinstance(theirs, dict) and theirs.get("status") == "running"


def end_sent(path: Path) -> bool:
    """Whether claiming this run sent up the end its writer had not (see `claim`), which left it
    complete with no failed sample: nothing is left to resume."""
    if path.resolve() not in _ENDS_SENT:
        return False
    manifest = load_manifest(path)
    return manifest.get("status") == "complete" and not (manifest.get("counts") or {}).get("errors")


def _release_unused(lease: Lease) -> None:
    """At exit: a lease still held (a resume refused before it started) is given back."""
    if lease.generation is not None:
        try:
            lease.release()
        except StoreError:
            return  # it lapses by itself within LEASE_SECONDS


def release_claims() -> None:
    """Give back the runs claimed but not opened (a resume refused after the claim)."""
    while _CLAIMED:
        _, lease, _ = _CLAIMED.popitem()[1]
        _release_unused(lease)


def open_run(path: Path) -> RunStore:
    """An existing run to resume, held by this process: a working copy of a run in a store
    (claimed now if it was not already) sends what it writes up; any other directory is local."""
    key = path.resolve()
    if key not in _CLAIMED and (origin := origin_of(path)) is not None:
        claim(Store.parse(origin), path.name)
    if key not in _CLAIMED:
        return RunStore.open(path)
    from .writer import SyncedRunStore

    store, lease, files = _CLAIMED.pop(key)
    run = SyncedRunStore(path, PRIVATE_UMASK, store, lease)
    run.acquire()
    run.uploader.adopt(files)
    return run


def send_up(path: Path) -> None:
    """After a command wrote into a run claimed from a store (`probe classify`): send what changed
    up, the index last, and give the run back. Nothing for a run on disk."""
    if path.resolve() not in _CLAIMED:
        return
    run = open_run(path)
    try:
        run.sync(final=True)  # type: ignore[attr-defined]
    finally:
        run.release()


__all__ = [
    "ENV",
    "Location",
    "Store",
    "StoreError",
    "claim",
    "end_sent",
    "fetch",
    "fetch_for_listing",
    "is_store",
    "location",
    "new_run",
    "open_run",
    "release_claims",
    "send_up",
]
