"""Retrievers, one module each, and their registry: `kind` in `[retrieval]` names one.

Built-in kinds register exactly like a third-party one would (`register("kind", factory)`);
the modules are imported only when their kind is used (the local one loads bm25s).
"""

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..endpoints import scrub_url
from ..errors import InputError
from .base import SECRET_NAME, NoRetriever, Passage, RetrievalError, Retriever, snapshot_digest

Factory = Callable[[dict[str, Any], Path | None], Retriever]
REGISTRY: dict[str, Factory] = {}


def register(kind: str, factory: Factory) -> None:
    REGISTRY[kind] = factory


def _lazy(module: str, name: str, takes_base_dir: bool = False) -> Factory:
    def factory(config: dict[str, Any], base_dir: Path | None) -> Retriever:
        cls = getattr(importlib.import_module(f".{module}", __name__), name)
        return cls(config, base_dir) if takes_base_dir else cls(config)

    return factory


register("none", lambda config, base_dir: NoRetriever())
register("http", _lazy("http", "HttpRetriever"))
register("python", _lazy("python", "PythonRetriever"))
register("local", _lazy("local", "LocalRetriever", takes_base_dir=True))


def make_retriever(config: dict[str, Any], base_dir: Path | None = None) -> Retriever:
    """Build the retriever a target config describes."""
    kind = config.get("kind", "none")
    if kind not in REGISTRY:
        raise InputError(f"[retrieval] kind {kind!r} is not known (known: {', '.join(REGISTRY)})")
    return REGISTRY[kind](config, base_dir)


def redact(value: Any) -> Any:
    """A copy of a config with anything secret-looking removed, for the manifest."""
    if isinstance(value, dict):
        return {
            k: "[removed]" if SECRET_NAME.search(str(k))
            else scrub_url(v) if k == "url" and isinstance(v, str)  # its password and query values
            else redact(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [redact(v) for v in value]
    return value


__all__ = [
    "Passage",
    "REGISTRY",
    "RetrievalError",
    "Retriever",
    "make_retriever",
    "redact",
    "register",
    "snapshot_digest",
]
