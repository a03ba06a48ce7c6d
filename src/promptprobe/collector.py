"""The garbage collector around start-up. Imports and set-up make long-lived objects (modules,
classes, an SDK's types, its client) and next to no garbage, yet the collector walks them again
and again while they are made: 30-50 ms of a `probe run`'s start on a small machine, and more
for the openai SDK's import. So the `probe` command starts with the collector paused, and what
start-up made is frozen (never walked again) when the collector resumes."""

import gc
from collections.abc import Iterator
from contextlib import contextmanager

_held = False  # paused by hold(), until release()


def hold() -> None:
    """Pause the collector for a command's start-up, until `release`."""
    global _held
    if gc.isenabled():
        gc.disable()
        _held = True


def release() -> None:
    """Start-up is over: freeze what it made and let the collector run (a no-op unless held)."""
    global _held
    if _held:
        _held = False
        gc.freeze()
        gc.enable()


@contextmanager
def paused() -> Iterator[None]:
    """Build long-lived objects with the collector paused, then freeze them."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()
