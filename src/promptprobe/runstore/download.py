"""Reading a run from a store: its index first, then the objects the index names, each file
checked against the sha256 the index records before it is used. A copy already downloaded is
brought up to date by what changed (the new parts of a file being appended, a file replaced); a
file that does not match is fetched again with a fresh index (a writer may have moved on), and
refused when it still does not match."""

import hashlib
import os
import secrets
import shutil
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import orjson

from ..engine.store import STATE_HINT
from ..errors import InputError
from ..paths import name_copy
from .cache import private_dir, state_dir
from .index import INDEX, parse_index
from .lease import Lease, holder_live, pid_alive
from .remote import RUN_ID, Store, StoreError, run_ids

ATTEMPTS = 4  # fresh indexes tried before a file that does not match is called damaged
RETRY_WAIT = 0.5  # seconds before the second try, doubled after (a writer between two uploads)
BATCH_BYTES = 64 * 1024 * 1024  # objects fetched at once
STREAM_BYTES = 16 * 1024 * 1024  # a part this large is streamed to disk, never held whole
CHUNK_BYTES = 32 * 1024 * 1024  # what a streamed part or a kept prefix is read by


class Mismatch(Exception):
    """A file assembled from the store does not match its index."""

    def __init__(self, relative: str) -> None:
        super().__init__(relative)
        self.relative = relative


def check_run_id(store: Store, run_id: str) -> str:
    if not RUN_ID.fullmatch(run_id) or run_id in (".", ".."):
        raise InputError(f"{store.url}/{run_id}: not a run id")
    return run_id


def read_index(store: Store, run_id: str) -> tuple[bytes, dict[str, dict[str, Any]]] | None:
    data = store.cat(store.key(run_id, INDEX))
    if data is None:
        return None
    return data, parse_index(data, store.run_url(run_id))


def _write(path: Path, data: bytes) -> None:
    """A file replaced whole (0600), so a reader beside never sees half of it."""
    _replace_with(path, [data])


def _replace_with(path: Path, pieces: Iterable[bytes], expect: dict[str, Any] | None = None) -> None:
    """Write `pieces` to a temporary file beside `path` (its name is this process's own: two
    processes updating one copy never write into one file) and put it in place, or, when it does
    not hold the size and sha256 `expect` names, remove it and raise Mismatch."""
    private_dir(path.parent)
    temp = path.with_name(f"{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    digest, size = hashlib.sha256(), 0
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for piece in pieces:
            digest.update(piece)
            size += len(piece)
            view = memoryview(piece)
            while view:
                view = view[os.write(fd, view) :]
    except BaseException:
        os.close(fd)
        temp.unlink(missing_ok=True)
        raise
    os.close(fd)
    if expect is not None and (size != expect["size"] or digest.hexdigest() != expect["sha256"]):
        temp.unlink(missing_ok=True)
        raise Mismatch(path.name)
    os.replace(temp, path)


def replacing_order(relative: str) -> tuple[int, str]:
    """The order a copy's files are replaced in, so that a reader of the copy meanwhile never
    finds a line pointing to bytes not there yet, nor a manifest ahead of its samples: the packs
    and every other file, then the lines that point into the packs (raw/index.jsonl,
    samples.jsonl, retrievals.jsonl), then those that name samples (classifications, judgments),
    the manifest last."""
    if relative == "manifest.json":
        return 3, relative
    if relative.endswith(".jsonl"):
        return (1 if "/" not in relative or relative.startswith("raw/") else 2), relative
    return 0, relative


def _plan(
    dest: Path, files: dict[str, dict[str, Any]], known: dict[str, dict[str, Any]]
) -> list[tuple[str, int, list[tuple[str, int]]]]:
    """What to fetch: (file, bytes kept from the copy, parts to fetch) for each file that changed,
    in the order the copy's files are replaced in (`replacing_order`)."""
    todo = []
    for relative in sorted(files, key=replacing_order):
        entry = files[relative]
        old = known.get(relative)
        try:
            have = os.lstat(dest / relative).st_size if not os.path.islink(dest / relative) else -1
        except OSError:
            have = -1
        if old and old["sha256"] == entry["sha256"] and have == entry["size"]:
            continue
        parts = entry["parts"]
        if old and have == old["size"] and [tuple(p) for p in old["parts"]] == parts[: len(old["parts"])]:
            todo.append((relative, have, parts[len(old["parts"]) :]))  # a file being appended
        else:
            todo.append((relative, 0, parts))
    return todo


def _fetch_files(
    store: Store, run_id: str, dest: Path, files: dict[str, dict[str, Any]], todo: list[Any]
) -> None:
    """Fetch the parts in batches (a large part streamed, never held whole), assemble each file
    on disk, check its sha256, then put it in place."""
    batch: list[Any] = []
    size = 0
    for item in todo + [None]:
        if item is not None:
            batch.append(item)
            size += sum(part_size for _, part_size in item[2] if part_size < STREAM_BYTES)
            if size < BATCH_BYTES:
                continue
        small = [key for _, _, parts in batch for key, part_size in parts if part_size < STREAM_BYTES]
        got = store.cat_many([store.key(run_id, key) for key in small])
        for relative, kept, parts in batch:
            try:
                pieces = _pieces(store, run_id, dest / relative, kept, parts, got)
                _replace_with(dest / relative, pieces, files[relative])
            except Mismatch:
                raise Mismatch(relative) from None
        batch, size = [], 0


def _pieces(
    store: Store, run_id: str, path: Path, kept: int, parts: list[Any], got: dict[str, bytes | None]
) -> Iterator[bytes]:
    """A file's bytes in order: the first `kept` bytes of the copy's own, then each part (fetched
    already, or streamed from the store); Mismatch when a part is not there."""
    if kept:
        with open(path, "rb") as handle:
            while kept > 0:
                chunk = handle.read(min(kept, CHUNK_BYTES))
                if not chunk:
                    return  # shorter than the copy said: the size check refuses it
                kept -= len(chunk)
                yield chunk
    for key, part_size in parts:
        full = store.key(run_id, key)
        if part_size < STREAM_BYTES:
            data = got.get(full)
            if data is None:
                raise Mismatch(key)
            yield data
            continue
        try:
            yield from store.chunks(full, CHUNK_BYTES)
        except FileNotFoundError:
            raise Mismatch(key) from None


def _known(dest: Path) -> dict[str, dict[str, Any]]:
    try:
        data = (state_dir(dest.parent) / f"{dest.name}.json").read_bytes()
        known = orjson.loads(data)
        return known if isinstance(known, dict) else {}
    except (OSError, orjson.JSONDecodeError):
        return {}


def materialize(
    store: Store,
    run_id: str,
    dest: Path,
    only: set[str] | None = None,
    remember: bool = True,
    index: bytes | None = None,
) -> dict[str, Any]:
    """Make `dest` hold the run as the store's index says (or only the files in `only`); returns
    the files of the index it matched. InputError when a file does not match its sha256.
    `remember`: keep beside `dest` what it now matches, so the next call fetches only changes;
    `index`: the index as just read (a fresh one is read after a mismatch)."""
    check_run_id(store, run_id)
    for attempt in range(ATTEMPTS):
        if attempt:
            time.sleep(RETRY_WAIT * 2 ** (attempt - 1))
        if index is not None and attempt == 0:
            files = parse_index(index, store.run_url(run_id))
        else:
            found = read_index(store, run_id)
            if found is None:
                raise InputError(f"{store.run_url(run_id)}: no such run in the store (no {INDEX})")
            files = found[1]
        wanted = {k: v for k, v in files.items() if only is None or k in only}
        known = _known(dest) if remember else {}
        private_dir(dest)
        try:
            _fetch_files(store, run_id, dest, wanted, _plan(dest, wanted, known))
        except Mismatch as exc:
            last = exc.relative
            continue
        if only is None:
            _prune(dest, files)
        known.update(wanted)
        if only is None:
            known = dict(files)
        if remember:
            (state_dir(dest.parent) / f"{dest.name}.json").write_bytes(orjson.dumps(known))
        return files
    raise InputError(
        f"{store.run_url(run_id)}/{last}: does not match the sha256 the run's index records "
        "(the object was changed or damaged); it was not used"
    )


def _prune(dest: Path, files: dict[str, Any]) -> None:
    """Remove what the copy holds and the run no longer does (a file replaced by resume)."""
    for directory, _, names in os.walk(dest):
        for name in names:
            path = Path(directory) / name
            relative = path.relative_to(dest).as_posix()
            if relative not in files and name != STATE_HINT and not _being_written(name):
                path.unlink(missing_ok=True)


def _being_written(name: str) -> bool:
    """Whether a file is the temporary file of another live process replacing a file (`_write`)."""
    parts = name.split(".")
    if len(parts) < 4 or parts[-1] != "tmp" or not parts[-3].isdigit():
        return False
    pid = int(parts[-3])
    return pid != os.getpid() and pid_alive(pid)


def write_state(store: Store, run_id: str, dest: Path) -> str | None:
    """For a copy whose manifest says running: whether its writer still holds the run, as
    engine/store.run_state will read it (`running` or `killed`)."""
    hint = dest / STATE_HINT
    try:
        status = orjson.loads((dest / "manifest.json").read_bytes()).get("status")
    except (OSError, orjson.JSONDecodeError, AttributeError):
        status = None
    if status != "running":
        hint.unlink(missing_ok=True)
        return None
    holder = Lease(store, run_id).current()
    state = "running" if holder is not None and holder_live(holder[1]) else "killed"
    if not hint.is_file() or hint.read_text() != state:
        _write(hint, state.encode())
    return state


def fetch(store: Store, run_id: str, dest: Path | None = None, manifest_only: bool = False) -> Path:
    """The run copied (or brought up to date) under the read cache, or at `dest`."""
    from .cache import read_dir

    path = dest or read_dir(store) / check_run_id(store, run_id)
    if dest is None:
        name_copy(path, store.run_url(run_id))
    materialize(store, run_id, path, {"manifest.json"} if manifest_only else None)
    write_state(store, run_id, path)
    return path


def fetch_for_listing(store: Store) -> list[Path]:
    """Every run of the store with its manifest in the read cache (a running run's whole copy, so
    that its samples can be counted); runs that cannot be read are left out with a warning."""
    from ..jsonio import warn
    from .cache import read_dir

    folder = read_dir(store)
    paths = []
    ids = run_ids(store)
    indexes = store.cat_many([store.key(run_id, INDEX) for run_id in ids])  # at once
    for run_id in ids:
        path = folder / run_id
        name_copy(path, store.run_url(run_id))
        index = indexes[store.key(run_id, INDEX)]
        if index is None:
            continue  # a run being created (its lease is there, its files not yet), or no run
        try:
            materialize(store, run_id, path, {"manifest.json"}, index=index)
            if write_state(store, run_id, path) is not None:
                materialize(store, run_id, path, index=index)  # running: its samples are counted
        except (InputError, StoreError) as exc:
            warn(f"{store.run_url(run_id)}: left out ({exc})")
            continue
        paths.append(path)
    return paths


def remove_copy(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
    (path.parent / ".index" / f"{path.name}.json").unlink(missing_ok=True)
    (path.parent / ".index" / f"{path.name}.session").unlink(missing_ok=True)
