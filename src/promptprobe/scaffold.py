"""`probe init [DIR]`: a starting point in someone else's repository: a commented probe.toml,
a probe set and a prompt that `probe check` accepts and `probe run --dry-run` plans.

The files are package data (promptprobe/starter/), copied byte for byte. Nothing is overwritten
unless asked (`force`): an existing file is refused, and then no file is written at all.
"""

import os
from importlib import resources
from pathlib import Path

from .errors import InputError

FILES = ("probe.toml", "probes/example.toml", "prompts/assistant.md")


def init_project(directory: str | Path = ".", force: bool = False) -> list[Path]:
    """Write the starter files into `directory` (created when missing); the paths written."""
    root = Path(directory)
    if root.exists() and not root.is_dir():
        raise InputError(f"{root}: not a directory")
    targets = [root / name for name in FILES]
    existing = [str(path) for path in targets if path.exists()]
    if existing and not force:
        raise InputError(
            f"{', '.join(existing)} already exist{'s' if len(existing) == 1 else ''}: probe init writes "
            "nothing over a file of yours (--force overwrites)"
        )
    starter = resources.files("promptprobe") / "starter"
    for name, path in zip(FILES, targets, strict=True):
        data = starter.joinpath(name).read_bytes()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
        except OSError as exc:
            raise InputError(f"{path}: cannot write ({exc.strerror})") from None
    return targets
