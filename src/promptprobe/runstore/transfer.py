"""`probe push` and `probe pull`: a finished run copied between a disk and a store, every file
checked by sha256 (push reads each object back; pull checks each file against the index)."""

import hashlib
import itertools
import os
import shutil
from pathlib import Path
from typing import Any

import orjson

from ..engine.store import load_manifest, run_state
from ..errors import InputError
from ..paths import typed
from .download import CHUNK_BYTES, check_run_id, materialize, read_index
from .index import INDEX, dump_index, file_sha256, index_session, local_files
from .lease import Lease, holder_live, new_session
from .remote import Store
from .upload import copy_aside

FINISHED = ("complete", "interrupted", "failed")
BATCH_BYTES = 64 * 1024 * 1024


def _refuse_unfinished(where: str, state: str, resume: str) -> None:
    if state not in FINISHED:
        raise InputError(
            f"{where}: the run is {state}, not finished; only a finished run is copied "
            f"(probe run --resume {resume} finishes it)"
        )


def push(run_dir: Path, store: Store) -> tuple[str, bool]:
    """Copy a finished run into the store under its own id; (its URL, whether anything was
    copied: False when the store holds the same run already)."""
    manifest = load_manifest(run_dir)
    _refuse_unfinished(str(run_dir), run_state(run_dir, manifest), typed(run_dir))
    run_id = check_run_id(store, run_dir.name)
    files = {rel: (info.st_size, file_sha256(run_dir / rel)) for rel, info in local_files(run_dir).items()}
    entries = {
        rel: {"size": size, "sha256": sha, "parts": [[rel, size]]} for rel, (size, sha) in files.items()
    }
    lease = Lease(store, run_id)
    lease.acquire()
    try:
        found = read_index(store, run_id)
        if found is not None:
            same = {k: (v["size"], v["sha256"]) for k, v in found[1].items()} == files
            if same and all(v["parts"] == [(k, v["size"])] for k, v in found[1].items()):
                return store.run_url(run_id), False
            # The same run not yet whole at its own keys (its writer stopped while it wrote them)
            # is made so; a different one is replaced only if it is this run, unfinished.
            if not same and not _unfinished_copy_of(store, run_id, manifest):
                raise InputError(
                    f"{store.run_url(run_id)}: the store holds a different run of that id already; "
                    "nothing was changed"
                )
            _set_aside(store, run_id, found, files)
        order = sorted(rel for rel in files if rel != "manifest.json") + ["manifest.json"]
        _upload(store, run_id, run_dir, order, files)
        store.pipe_many({store.key(run_id, INDEX): dump_index(entries, new_session())})
        store.remove(store.find(store.key(run_id, ".store/parts")))  # an unfinished copy's parts
    finally:
        lease.release()
    return store.run_url(run_id), True


def _set_aside(
    store: Store, run_id: str, found: tuple[bytes, dict[str, Any]], files: dict[str, tuple[int, str]]
) -> None:
    """Before a push writes over the store's unfinished copy: each object at a file's own key that
    its index names and the push rewrites is copied to a part first, and an index naming the
    copies put in its place, so that a push stopped halfway leaves that copy readable (and a
    second push finds it as it was)."""
    session = new_session()
    entries = {k: {**v, "parts": [list(p) for p in v["parts"]]} for k, v in found[1].items()}
    rewritten = [k for k, v in entries.items() if k in files and files[k] != (v["size"], v["sha256"])]
    if copy_aside(store, run_id, session, itertools.count(1), {k: entries[k]["parts"] for k in rewritten}):
        store.pipe_many({store.key(run_id, INDEX): dump_index(entries, index_session(found[0]) or session)})


def _unfinished_copy_of(store: Store, run_id: str, manifest: dict[str, Any]) -> bool:
    """Whether the store holds this same run unfinished (its writer could not send its end): the
    finished run pushed from disk then takes its place. The manifest is the one the store's index
    names, checked by sha256 (an earlier push stopped halfway may have written another)."""
    found = read_index(store, run_id)
    entry = found[1].get("manifest.json") if found else None
    if entry is None:
        return False
    got = store.cat_many([store.key(run_id, key) for key, _ in entry["parts"]])
    data = b"".join(got.get(store.key(run_id, key)) or b"" for key, _ in entry["parts"])
    if hashlib.sha256(data).hexdigest() != entry["sha256"]:
        return False
    try:
        theirs = orjson.loads(data) if data else {}
    except orjson.JSONDecodeError:
        return False
    return (
        isinstance(theirs, dict)
        and theirs.get("status") == "running"
        and theirs.get("created") == manifest.get("created")
        and theirs.get("seed") == manifest.get("seed")
    )


def _upload(
    store: Store, run_id: str, run_dir: Path, order: list[str], files: dict[str, tuple[int, str]]
) -> None:
    """Upload in batches, each object read back and checked against the file's sha256."""
    batch: dict[str, bytes] = {}
    size = 0
    for relative in order + [""]:
        if relative:
            path = run_dir / relative
            if files[relative][0] >= BATCH_BYTES:
                store.put_file(str(path), store.key(run_id, relative))
                _check_streamed(store, run_id, relative, files[relative][1])
                continue
            data = path.read_bytes()
            if hashlib.sha256(data).hexdigest() != files[relative][1]:
                raise InputError(
                    f"{path}: changed while it was being pushed; nothing is complete in the store"
                )
            batch[store.key(run_id, relative)] = data
            size += len(data)
            if size < BATCH_BYTES and relative != "manifest.json":
                continue
        store.pipe_many(batch)
        _check(store, run_id, [key[len(store.key(run_id)) + 1 :] for key in batch], files)
        batch, size = {}, 0


def _check(store: Store, run_id: str, relatives: list[str], files: dict[str, tuple[int, str]]) -> None:
    got = store.cat_many([store.key(run_id, rel) for rel in relatives])
    for relative in relatives:
        data = got.get(store.key(run_id, relative))
        if data is None or hashlib.sha256(data).hexdigest() != files[relative][1]:
            raise _not_as_sent(store, run_id, relative)


def _check_streamed(store: Store, run_id: str, relative: str, sha256: str) -> None:
    """A large object read back a chunk at a time (never held whole) and checked."""
    digest = hashlib.sha256()
    try:
        for chunk in store.chunks(store.key(run_id, relative), CHUNK_BYTES):
            digest.update(chunk)
    except FileNotFoundError:
        raise _not_as_sent(store, run_id, relative) from None
    if digest.hexdigest() != sha256:
        raise _not_as_sent(store, run_id, relative)


def _not_as_sent(store: Store, run_id: str, relative: str) -> InputError:
    return InputError(
        f"{store.run_url(run_id)}/{relative}: the object read back does not match the file's "
        "sha256; the run is not complete in the store (push it again)"
    )


def pull(store: Store, run_id: str, runs_dir: Path) -> Path:
    """Copy a finished run of the store into `runs_dir/<run id>`, every file checked by sha256."""
    check_run_id(store, run_id)
    dest = runs_dir / run_id
    if dest.exists():
        raise InputError(f"{dest}: exists already; nothing was changed (pull into another folder)")
    temp = runs_dir / f".{run_id}.pulling"
    shutil.rmtree(temp, ignore_errors=True)
    runs_dir.mkdir(parents=True, exist_ok=True)
    try:
        materialize(store, run_id, temp, {"manifest.json"}, remember=False)
        manifest = load_manifest(temp)
        if manifest.get("status") not in FINISHED:
            holder = Lease(store, run_id).current()
            live = manifest.get("status") == "running" and holder is not None and holder_live(holder[1])
            state = (
                "running"
                if live
                else "killed"
                if manifest.get("status") == "running"
                else str(manifest.get("status"))
            )
            _refuse_unfinished(store.run_url(run_id), state, store.run_url(run_id))
        materialize(store, run_id, temp, remember=False)
        os.chmod(temp, 0o700)
        os.replace(temp, dest)
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    return dest
