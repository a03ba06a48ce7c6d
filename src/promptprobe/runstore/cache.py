"""Where this machine keeps its copies of a store's runs: under the user's cache directory
($XDG_CACHE_HOME, else ~/.cache)/promptprobe, 0700, one folder per store. `read/` holds the copies
readers download (verified by sha256); `work/` the working copies of runs this machine writes,
which are never overwritten by a download."""

import hashlib
import os
from pathlib import Path

from .remote import Store


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "promptprobe"


def private_dir(path: Path) -> Path:
    """Make `path` (and the folders above it up to the cache root) 0700."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    root = cache_root()
    for folder in [path, *path.parents]:
        if folder == root.parent:
            break
        try:
            os.chmod(folder, 0o700)
        except OSError:
            break
    return path


def _tag(store: Store) -> str:
    # The folder name shows the bucket; the hash tells stores with one bucket apart.
    return f"{store.bucket}-{hashlib.sha256(store.url.encode()).hexdigest()[:12]}"


def read_dir(store: Store) -> Path:
    return private_dir(cache_root() / "read" / _tag(store))


def work_dir(store: Store) -> Path:
    return private_dir(cache_root() / "work" / _tag(store))


def state_dir(folder: Path) -> Path:
    """Beside the copies: the index each copy matches (never inside a run, so never uploaded)."""
    return private_dir(folder / ".index")


def origin_of(path: Path) -> str | None:
    """The store URL a working copy belongs to (None: the path is not one)."""
    marker = path.parent / ".index" / f"{path.name}.origin"
    try:
        return marker.read_text().strip() or None
    except OSError:
        return None


def mark_origin(path: Path, store: Store) -> None:
    (state_dir(path.parent) / f"{path.name}.origin").write_text(store.url + "\n")


def mark_session(path: Path, session: str) -> None:
    """Beside a working copy: the writer session whose index the store holds now (so a resume here
    knows the copy is the store's latest, and more)."""
    (state_dir(path.parent) / f"{path.name}.session").write_text(session)


def session_of(path: Path) -> str | None:
    try:
        return (path.parent / ".index" / f"{path.name}.session").read_text().strip() or None
    except OSError:
        return None
