"""promptprobe: probe a retrieval-augmented chat system's prompt versions and models.

The public API is what this module exports (`__all__`): `run`, `load`, `report`, `compare` and
`plan`, the objects they return, and the two errors they raise; `promptprobe.testing` has the
pytest helper. Everything else is internal. Importing the package is cheap: the API loads
when first used.
"""

from typing import Any

from .version import __version__

__all__ = [
    "Comparison",
    "InputError",
    "Plan",
    "Report",
    "Run",
    "RunResult",
    "StartError",
    "__version__",
    "compare",
    "load",
    "plan",
    "report",
    "run",
]


def __getattr__(name: str) -> Any:
    if name in ("InputError", "StartError"):
        from . import errors

        return getattr(errors, name)
    if name in __all__:
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module 'promptprobe' has no attribute {name!r}")
