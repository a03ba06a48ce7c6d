"""The run directory: manifest first, samples appended and flushed as they finish, raw bytes.

Everything is written so that a crash at any moment leaves a readable run: the manifest is
replaced atomically, each JSON line goes out in one write and is fsynced, a failed write is
cut back so nothing is torn, and a lock held for the life of the run tells a run still going
from one that was killed. Directories are 0700 and files 0600 unless the run is shared: raw
outputs hold production answers. Every byte written passes through the secret scrubber.
"""

import errno
import fcntl
import hashlib
import os
import secrets
import shutil
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..errors import InputError, StartError
from ..jsonio import content_end, dumps_line, dumps_pretty, iter_jsonl, loads, warn
from ..pack import REQUEST, TEXT, PackWriter, RawReader
from ..paths import is_file, open_in_run, open_run_file, shown
from ..redaction import SCRUBBER

SCHEMA_VERSION = 2
PRIVATE_UMASK = 0o077
LOCK_FILE = ".lock"
# In a copy of a run read from a runs store: whether its writer held the run when it was copied.
STATE_HINT = ".store-state"
RESERVE_FILE = ".reserve"
# Space set aside at the start, given back when the disk fills so the final manifest fits.
MIN_RESERVE = 64 * 1024


class StorageError(StartError):
    """The run directory cannot be written (disk full, permissions): the run stops (exit 3)."""


class StoreClosed(Exception):
    """A worker finished after the run was closed (a cancelled call): its result is dropped."""


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _reason(exc: OSError) -> str:
    if exc.errno == errno.ENOSPC:
        return "the disk is full"
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return "it is not writable"
    if exc.errno == errno.EFBIG:
        return "the file size limit was reached"
    if exc.errno == errno.ENAMETOOLONG:
        return "the name is too long"
    return exc.strerror or str(exc)


def _storage_error(exc: OSError, path: Path) -> StorageError:
    return StorageError(f"cannot write {path}: {_reason(exc)}")


class RunLock:
    """The run's lock file: one process at a time works on a run (flock, with its pid inside)."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.handle: Any = None

    def acquire(self, file_mode: int) -> None:
        lock_path = self.run_dir / LOCK_FILE
        try:
            handle = open(os.open(lock_path, os.O_RDWR | os.O_CREAT, file_mode), "r+")
        except OSError as exc:
            raise _storage_error(exc, lock_path) from None
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = handle.read().strip()
            handle.close()
            raise InputError(
                f"{self.run_dir}: another probe process{f' (pid {owner})' if owner else ''} "
                "is working on this run"
            ) from None
        try:
            handle.seek(0)
            handle.truncate()
            handle.write(str(os.getpid()))
            handle.flush()
        except OSError as exc:
            handle.close()
            raise _storage_error(exc, lock_path) from None
        self.handle = handle

    def release(self) -> None:
        if self.handle is not None:
            self.handle.close()  # closing drops the flock
            self.handle = None


class GroupCommit:
    """Appends JSON lines for many writer threads: one thread at a time syncs the packs, then
    writes and fsyncs every line queued meanwhile, file by file; the others wait for it. A
    caller returns once its lines are on disk, after the pack bytes they point to."""

    def __init__(self, path: Path, packs: PackWriter, file_mode: int) -> None:
        self.path = path
        self.packs = packs
        self.file_mode = file_mode
        self.lock = threading.Condition()
        self.closed = False
        self.pending: list[tuple[str, bytes]] = []
        self.queued = 0  # tickets handed out
        self.done = 0  # tickets whose lines are written
        self.committing = False
        self.failures: dict[int, StorageError] = {}

    def append(self, items: list[tuple[str, bytes]]) -> None:
        """Write `items` ((file name, lines) each), with whatever other callers queue meanwhile."""
        with self.lock:
            if self.closed:
                raise StoreClosed(items[0][0] if items else "")
            self.pending.extend(items)
            ticket = self.queued = self.queued + 1
            while self.committing and self.done < ticket:
                self.lock.wait()
            if self.done >= ticket:
                failure = self.failures.pop(ticket, None)
                if failure is not None:
                    raise failure
                return
            self.committing = True
            batch, self.pending = self.pending, []
            first, last = self.done + 1, self.queued
        failure = None
        try:
            self._commit(batch)
        except StorageError as exc:
            failure = exc
        finally:
            with self.lock:
                self.committing = False
                self.done = last
                if failure is not None:
                    self.failures.update((t, failure) for t in range(first, last + 1) if t != ticket)
                self.lock.notify_all()
        if failure is not None:
            raise failure

    def _commit(self, batch: list[tuple[str, bytes]]) -> None:
        try:
            self.packs.sync()
        except OSError as exc:
            raise _storage_error(exc, self.path / "raw") from None
        by_name: dict[str, list[bytes]] = {}
        for name, data in batch:
            by_name.setdefault(name, []).append(data)
        for name, pieces in by_name.items():
            _append_synced(self.path / name, b"".join(pieces), self.file_mode)


# How long the writer gathers lines before a group commit, and how many make it commit at once:
# a kill loses at most what was gathered (the samples in flight, which --resume runs again).
WRITER_LINGER = 0.02
GROUP_LINES = 256


class BackgroundWriter:
    """Writes a live run's lines on a thread of its own, everything queued meanwhile in one group
    commit: a worker hands its record over and goes on to its next call instead of waiting for
    the disk (the fsyncs and the writes hold no worker). A write that fails is raised to the next
    caller and at `flush`; the records it lost are handed to `on_lost` (no longer counted)."""

    def __init__(
        self,
        commits: GroupCommit,
        on_lost: Callable[[list[dict[str, Any]]], None],
        linger: float = WRITER_LINGER,
    ) -> None:
        self.commits = commits
        self.on_lost = on_lost
        self.linger = linger
        self.cond = threading.Condition()
        self.queue: list[tuple[str, bytes, dict[str, Any] | None]] = []
        self.error: StorageError | None = None
        self.busy = False
        self.idle = False  # the writer waits for a first line to write
        self.hurry = False  # a flush or stop waits: write what is queued without lingering
        self.stopping = False
        self.thread = threading.Thread(target=self._run, name="probe-writer", daemon=True)
        self.thread.start()

    def put(self, name: str, data: bytes, record: dict[str, Any] | None) -> None:
        with self.cond:
            if self.error is not None:
                raise self.error
            if self.stopping:
                raise StoreClosed(name)
            self.queue.append((name, data, record))
            if self.idle:  # only a writer waiting for work is woken; one lingering gathers on
                self.cond.notify_all()

    def _run(self) -> None:
        while True:
            with self.cond:
                self.idle = True
                while not self.queue and not self.stopping:
                    self.cond.wait()
                self.idle = False
                if not self.queue:
                    return
                # Lines keep coming while calls return: gathering them a moment makes one commit
                # (its fsyncs, its wake-ups) serve many samples instead of one or two.
                if not (self.stopping or self.hurry) and len(self.queue) < GROUP_LINES:
                    self.cond.wait(self.linger)
                batch, self.queue = self.queue, []
                self.busy = True
            try:
                self.commits.append([(name, data) for name, data, _ in batch])
            except (StorageError, StoreClosed) as exc:
                with self.cond:
                    self.error = self.error or (exc if isinstance(exc, StorageError) else None)
                self.on_lost([record for _, _, record in batch if record is not None])
            finally:
                with self.cond:
                    self.busy = False
                    self.cond.notify_all()

    def flush(self) -> None:
        """Wait until everything handed over is written; raise the failure if one happened."""
        with self.cond:
            self.hurry = True
            self.cond.notify_all()
            while self.queue or self.busy:
                self.cond.wait()
            self.hurry = False
            if self.error is not None:
                raise self.error

    def stop(self) -> None:
        with self.cond:
            self.stopping = True
            self.cond.notify_all()
        self.thread.join()


class RunStore:
    """Writes one run directory."""

    def __init__(self, path: Path, umask: int = PRIVATE_UMASK) -> None:
        self.path = path
        self.umask = umask
        self.run_lock = RunLock(path)  # between processes
        self.closed = False
        self.packs = PackWriter(path, self.file_mode)
        self.commits = GroupCommit(path, self.packs, self.file_mode)
        self.writer: BackgroundWriter | None = None

    @property
    def file_mode(self) -> int:
        return 0o666 & ~self.umask

    @property
    def dir_mode(self) -> int:
        return 0o777 & ~self.umask

    @classmethod
    def create(cls, runs_dir: Path, probeset_name: str, umask: int = PRIVATE_UMASK) -> "RunStore":
        """A new run directory under `runs_dir` (new_run_directory), held by this process."""
        return new_run_directory(cls, runs_dir, probeset_name, umask)

    @classmethod
    def open(cls, path: Path) -> "RunStore":
        """An existing run, to be resumed: its own permissions are kept."""
        mode = os.stat(path).st_mode & 0o777
        store = cls(path, 0o777 & ~mode)
        store.acquire()
        return store

    # -- the lock --------------------------------------------------------------------------

    def acquire(self) -> None:
        """Hold the run's lock for as long as this process works on it."""
        self.run_lock.acquire(self.file_mode)

    def release(self) -> None:
        if self.writer is not None:
            self.writer.stop()
        self.packs.close()
        self.run_lock.release()

    # -- writes ----------------------------------------------------------------------------

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        self.replace_file("manifest.json", dumps_pretty(manifest).encode("utf-8") + b"\n")

    def replace_file(self, name: str, data: bytes) -> None:
        """Write beside and rename, so a crash or a full disk never leaves half a file."""
        temp = self.path / f"{name}.tmp"
        _write_whole(self.file_mode, temp, SCRUBBER.bytes(data), sync=True)
        try:
            os.replace(temp, self.path / name)
        except OSError as exc:
            temp.unlink(missing_ok=True)
            raise _storage_error(exc, self.path / name) from None

    def reserve(self, size: int) -> None:
        """Set space aside now, so that a full disk later still leaves room for the manifest."""
        _write_whole(self.file_mode, self.path / RESERVE_FILE, b"\0" * max(MIN_RESERVE, size), sync=True)

    def give_back_reserve(self) -> None:
        (self.path / RESERVE_FILE).unlink(missing_ok=True)

    def discard(self) -> None:
        """Remove the run: it stopped before recording anything worth keeping."""
        shutil.rmtree(self.path, ignore_errors=True)

    def close_writes(self) -> None:
        """From now on sample writes are refused (StoreClosed): the run is being finished."""
        if self.writer is not None:
            self.writer.stop()  # what was handed over is written first
        with self.commits.lock:
            self.closed = self.commits.closed = True

    def write_file(self, relative: str, data: bytes) -> dict[str, Any]:
        """A whole file of the run (a probe set or prompt copy), scrubbed of secrets; its path,
        sha256 and size."""
        if self.closed:
            raise StoreClosed(relative)
        data = SCRUBBER.bytes(data)
        _write_whole(self.file_mode, self.path / relative, data, sync=False)
        return {"path": relative, "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}

    def write_bytes(self, sample_id: str, kind: str, data: bytes) -> dict[str, Any]:
        """A sample's blob of `kind` (txt, body, request, or a writer's own), scrubbed of secrets and
        appended to the run's pack; its location {pack, offset, bytes, sha256}. It is durable once
        a record written after it is (append_many syncs the packs first)."""
        if self.closed:
            raise StoreClosed(sample_id)
        data = SCRUBBER.bytes(data)
        try:
            return self.packs.append(sample_id, kind, data)
        except OSError as exc:
            raise _storage_error(exc, self.path / (self.packs.name or "raw")) from None

    def read_bytes(self, sample_id: str, kind: str) -> bytes:
        """A blob this run wrote for a sample (a batch's request, to send it again)."""
        if kind == REQUEST:
            placed = self.packs.placed(sample_id)
            if placed is not None:
                return placed  # appended since the last sync: not in its pack yet
        found = self.packs.written.get(sample_id) if kind == REQUEST else None
        if found is None:
            return RawReader(self.path).read({"sample_id": sample_id}, kind)
        location = {"pack": found[0], "offset": found[1], "bytes": found[2]}
        return RawReader(self.path).read({"sample_id": sample_id, "raw": location}, TEXT)

    def append(self, name: str, record: dict[str, Any]) -> None:
        """One JSON line, written whole and fsynced; on failure the file is cut back to before it."""
        self.append_many(name, [record])

    def append_many(self, name: str, records: list[dict[str, Any]]) -> None:
        """Lines written whole and fsynced, after the pack bytes they point to; concurrent callers
        share one commit (one fsync a file for all their lines). On failure each file is cut back."""
        data = b"".join(SCRUBBER.bytes(dumps_line(record)) for record in records)
        if self.writer is not None:
            self.writer.put(name, data, records[0] if name == "samples.jsonl" and len(records) == 1 else None)
        else:
            self.commits.append([(name, data)])

    def start_writer(self, on_lost: Callable[[list[dict[str, Any]]], None]) -> None:
        previous = self.writer
        if previous is not None:  # a sequential run's next round: the last round's lines first
            previous.stop()
            if previous.error is not None:
                raise previous.error
        self.writer = BackgroundWriter(self.commits, on_lost)  # lines written by a thread of their own

    def flush_writes(self) -> None:
        """Everything handed to the writer is on disk (a failure is raised here)."""
        if self.writer is not None:
            self.writer.flush()

    def append_sample(self, record: dict[str, Any]) -> None:
        self.append("samples.jsonl", record)

    def append_retrieval(self, record: dict[str, Any]) -> None:
        self.append("retrievals.jsonl", record)

    # -- recovery --------------------------------------------------------------------------

    def repair_tail(self, name: str) -> bool:
        """Cut a torn last line off a JSON-lines file before appending to it; True if cut."""
        return repair_tail(self.path / name)


def _write_whole(file_mode: int, path: Path, data: bytes, sync: bool) -> None:
    """Create `path` holding exactly `data`; on failure nothing is left there."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, file_mode)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        path.unlink(missing_ok=True)
        raise _storage_error(exc, path) from None


def _append_synced(path: Path, data: bytes, file_mode: int) -> None:
    """Append `data` in whole writes and fsync; on failure the file is cut back to before it."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, file_mode)
    except OSError as exc:
        raise _storage_error(exc, path) from None
    try:
        size = os.fstat(fd).st_size
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                if written <= 0:
                    raise OSError(errno.ENOSPC, "short write")
                view = view[written:]
            os.fsync(fd)
        except OSError as exc:
            os.ftruncate(fd, size)
            raise _storage_error(exc, path) from None
    finally:
        os.close(fd)


def new_run_directory(
    store_class: type[RunStore], runs_dir: Path, probeset_name: str, umask: int
) -> RunStore:
    """Make `<runs_dir>/<UTC stamp>-<probe set>-<6 hex>/` with its raw/ and prompts/ folders at the
    run's permissions and take its lock; a run that cannot start leaves nothing behind."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    safe_name = "".join(c if c.isalnum() or c in "._-" else "-" for c in probeset_name)
    path = runs_dir / f"{stamp}-{safe_name}-{secrets.token_hex(3)}"
    store = store_class(path, umask)
    try:
        runs_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StartError(
            f"--runs-dir {runs_dir}: cannot create a run directory there ({_reason(exc)})"
        ) from None
    try:
        for folder in (path, path / "raw", path / "prompts"):
            folder.mkdir(mode=store.dir_mode)
            os.chmod(folder, store.dir_mode)  # mkdir's mode is filtered by the process umask
        store.acquire()
    except BaseException as exc:
        # A run that could not start leaves nothing behind (a full disk, a read-only folder).
        store.release()
        shutil.rmtree(path, ignore_errors=True)
        if isinstance(exc, OSError):
            raise StartError(
                f"--runs-dir {runs_dir}: cannot create a run directory there ({_reason(exc)})"
            ) from None
        raise
    return store


def run_state(path: Path, manifest: dict[str, Any]) -> str:
    """The manifest's status, or `killed` for a run marked running whose process is gone."""
    status = manifest.get("status", "unknown")
    if status != "running":
        return status
    if is_file(path / STATE_HINT):
        return "running" if (path / STATE_HINT).read_text().strip() == "running" else "killed"
    lock_path = path / LOCK_FILE
    if not lock_path.exists():
        return "killed"
    try:
        with open_run_file(path, LOCK_FILE) as handle:  # a FIFO there must not make a reader wait
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return "running"
    except OSError:
        return "running"  # cannot tell: say what the manifest says
    return "killed"


STARTING_FILES = ("manifest.json.tmp", RESERVE_FILE, LOCK_FILE)


def started_only(run_dir: Path) -> list[str]:
    """The files a run directory's creation leaves before its manifest exists ([] when none, or
    when it has a manifest)."""
    if is_file(run_dir / "manifest.json"):
        return []
    return [name for name in STARTING_FILES if is_file(run_dir / name)]


def starting_state(run_dir: Path) -> str:
    """A directory with no manifest yet: `starting` while its creator holds the lock, else
    `incomplete` (killed while it was being created)."""
    return "starting" if lock_held(run_dir) else "incomplete"


def lock_held(run_dir: Path) -> bool:
    try:
        with open_run_file(run_dir, LOCK_FILE) as handle:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    return False


# What every reader of a run needs from its manifest, and the shape each must have.
MANIFEST_NEEDS: dict[str, type] = {"probeset": dict, "prompts": list, "models": list, "arms": list}
PROBESET_NEEDS = ("source", "path", "sha256", "copy")


def load_manifest(run_dir: Path) -> dict[str, Any]:
    manifest_path = run_dir / "manifest.json"
    data: bytes | None = None
    try:
        with open_run_file(run_dir, "manifest.json") as handle:
            data = handle.read()
    except (OSError, ValueError):  # none there (ValueError: a name with a NUL byte)
        data = None  # a link or a FIFO is refused (RunFileRefused), not taken for no run
    if data is None:
        left = started_only(run_dir)
        if left:
            raise InputError(
                f"{shown(run_dir)}: a run stopped while its directory was being created (no manifest.json; "
                f"{', '.join(left)} left): nothing was recorded, so there is nothing to resume or read; "
                "start the run again (this directory can be deleted)"
            )
        raise InputError(f"{shown(run_dir)}: not a run directory (no manifest.json)")
    try:
        manifest = loads(data)
    except ValueError as exc:
        raise InputError(f"{manifest_path}: not valid JSON ({exc})") from None
    if not isinstance(manifest, dict):
        raise InputError(f"{run_dir}: not a readable run: manifest.json is not a JSON object")
    for key, kind in MANIFEST_NEEDS.items():
        if not isinstance(manifest.get(key), kind):
            raise InputError(f"{run_dir}: not a readable run: manifest.json lacks {key}")
    missing = [k for k in PROBESET_NEEDS if not isinstance(manifest["probeset"].get(k), str)]
    if missing:
        raise InputError(
            f"{run_dir}: not a readable run: manifest.json's probeset lacks {', '.join(missing)}"
        )
    return manifest


# What every reader of a sample record takes for granted: who it is, and the shape of what it holds.
SAMPLE_NEEDS: dict[str, type] = {"sample_id": str, "case_id": str, "repeat": int, "prompt": str, "model": str}
SAMPLE_PARTS = ("raw", "header", "error")  # each an object, or null (or left out) when there is none


_PART_TYPES = (dict, type(None))


def sample_problem(record: Any) -> str | None:
    """Why a JSON line of samples.jsonl is not a sample record (None when it is one)."""
    if type(record) is dict:
        # The common case in one expression: readers check every line of a million-sample run.
        get = record.get
        if (
            type(get("sample_id")) is str
            and type(get("case_id")) is str
            and type(get("repeat")) is int
            and type(get("prompt")) is str
            and type(get("model")) is str
            and type(get("raw")) in _PART_TYPES
            and type(get("header")) in _PART_TYPES
            and type(get("error")) in _PART_TYPES
        ):
            return None
    if not isinstance(record, dict):
        return "is not a sample record (not a JSON object)"
    wrong = [key for key, kind in SAMPLE_NEEDS.items() if not isinstance(record.get(key), kind)]
    wrong += [key for key in SAMPLE_PARTS if not isinstance(record.get(key), dict | None)]
    if wrong:
        return f"is not a sample record ({', '.join(wrong)} missing or of the wrong type)"
    return None


def iter_samples(run_dir: Path, on_warning: Any = warn) -> Iterator[dict[str, Any]]:
    """The samples of a run in file order (resume never leaves two records for one id)."""
    yield from iter_jsonl(run_dir / "samples.jsonl", on_warning, sample_problem)


def load_run(run_dir: str | Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The manifest and the samples of a recorded run (for small runs and tests)."""
    run_dir = Path(run_dir)
    return load_manifest(run_dir), list(iter_samples(run_dir))


def repair_tail(path: Path) -> bool:
    """Cut a torn last line off a JSON-lines file before appending to it; True if cut."""
    try:
        os.close(open_in_run(path.parent, path.name))  # a link or a FIFO is refused, never written to
    except FileNotFoundError:
        return False
    with open(path, "rb+") as handle:
        size = content_end(handle)
        if size < os.fstat(handle.fileno()).st_size:
            handle.truncate(size)  # a tail of NULs (a power loss) goes first
        handle.seek(0, os.SEEK_END)
        size = handle.tell()
        if size == 0:
            return False
        handle.seek(max(0, size - 1))
        if handle.read(1) == b"\n":
            return False
        # Find the start of the last line.
        chunk = min(size, 1 << 20)
        handle.seek(size - chunk)
        tail = handle.read(chunk)
        start = size - chunk + tail.rfind(b"\n") + 1 if b"\n" in tail else 0
        handle.seek(start)
        last = handle.read()
        try:
            loads(last)
        except ValueError:
            handle.truncate(start)
            return True
        handle.write(b"\n")  # a whole record that only lacks its newline
        return False
