"""manifest.json: what a run is (its probe set, prompts, models, arms, parameters, target,
checks, code, prices, seed) and how far it got (status, counts, resumes), as written at its
start, at its end, and at every resume; and the new run directory it is first written to."""

import os
import shutil
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from ..checks import CheckSettings
from ..config import TargetConfig
from ..endpoints import model_record
from ..probeset import ProbeSet
from ..production import code_fingerprint
from ..prompts import PromptVersion
from ..retrievers import redact
from ..version import __version__
from .plan import Plan
from .store import SCHEMA_VERSION, RunStore, StorageError


class ManifestSource(Protocol):
    """What the manifest reads of a run (engine/run.py's ProbeRun has it all)."""

    probeset: ProbeSet
    config: TargetConfig
    options: Any  # RunOptions
    settings: CheckSettings
    plan: Plan
    seed: int
    created: str
    resumes: list[dict[str, Any]]
    extra_manifest: dict[str, Any]
    prices: Any  # cost.PriceTable


def run_manifest(
    run: ManifestSource,
    status: str,
    finished: str | None,
    counts: dict[str, int],
    stopped_by: str | None = None,
) -> dict[str, Any]:
    params = run.options.params
    probeset = run.probeset
    config = run.config
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": "promptprobe",
        "tool_version": __version__,
        "created": run.created,
        "finished": finished,
        "status": status,
        "stopped_by": stopped_by,
        "pid": os.getpid(),
        "probeset": {
            "name": probeset.name,
            "path": str(probeset.path),
            "sha256": probeset.sha256,
            "copy": "probeset.toml",
            "source": probeset.source.decode("utf-8"),
            "cases": [c.id for c in probeset.cases],
        },
        "prompts": [
            {"name": p.name, "path": str(p.path), "sha256": p.sha256, "copy": prompt_copy(p)}
            for p in dict.fromkeys(a.prompt for a in run.plan.arms)
        ],
        "models": [model_record(m) for m in dict.fromkeys(a.model for a in run.plan.arms)],
        "arms": [a.to_dict() for a in run.plan.arms],
        "parameters": {
            "max_tokens": params.max_tokens,
            "temperature": params.temperature,
            "seed": params.seed,
            "stream": params.stream,
            "timeout": params.timeout,
            "concurrency": run.options.concurrency,
            "max_attempts": run.options.max_attempts,
            "max_retry_wait": run.options.max_retry_wait,
            "rpm": run.options.rpm,
            "max_cost": run.options.max_cost,
            "batch": run.options.batch,
            "cache": params.cache,
        },
        "target": {
            "config": str(config.path) if config.path else None,
            "config_sha256": config.sha256,
            "retrieval": redact(config.retrieval),
            "assemble": config.assemble_function,
        },
        "vars": config.vars,
        "header": run.settings.header.to_dict(),
        "checks": run.settings.to_dict(),
        "code": code_fingerprint(run.settings.functions()),
        "prices": config.prices,
        # Each model's price as this run was priced: the row, its source and date, or why none.
        "model_prices": [
            _price_record(m.spec, run.prices.match(m)) for m in dict.fromkeys(a.model for a in run.plan.arms)
        ],
        "settings": getattr(run, "provenance", {}),
        "repeats": run.plan.repeats,
        "seed": run.seed,
        "counts": counts,
        "resumes": run.resumes,
        **(
            {"judges": [{"check": j.config.name, "model": model_record(j.model)} for j in run.judges]}
            if getattr(run, "judges", None)
            else {}
        ),
        **run.extra_manifest,
    }


def _price_record(spec: str, match: Any) -> dict[str, Any]:
    price = match.price.to_dict() if match.price is not None else None
    return {"model": spec, "price": price, "cost_unknown": match.reason}


def prompt_copy(prompt: PromptVersion) -> str:
    """Where a run keeps its copy of a prompt version."""
    return f"prompts/{prompt.name}{prompt.path.suffix}"


def create_run_directory(
    runs_dir: Any, umask: int, probeset: ProbeSet, prompts: Iterable[PromptVersion], manifest: dict[str, Any]
) -> RunStore:
    """A new run directory holding exact copies of the probe set and the prompt versions, and the
    `running` manifest; nothing is left behind when making it fails."""
    from ..runstore import new_run

    store = new_run(runs_dir, probeset.name, umask)
    try:
        store.reserve(2 * len(str(manifest)))
        store.write_file("probeset.toml", probeset.source)
        for prompt in prompts:
            store.write_file(prompt_copy(prompt), prompt.source)
        store.write_manifest(manifest)
    except BaseException:
        # Nothing was recorded yet: leave no half-made run directory behind.
        store.release()
        shutil.rmtree(store.path, ignore_errors=True)
        raise
    return store


def close_run_directory(
    store: RunStore, manifest_of: Callable[[], dict[str, Any]], failed: bool
) -> dict[str, int]:
    """Write the manifest a run ends with (its counts taken once no sample can be written any
    more) and release the run; the counts it holds. A full disk still has room for it (the
    reserve is given back first); a failed run whose manifest cannot be written keeps its
    `running` one, and readers show it killed."""
    store.close_writes()
    store.give_back_reserve()
    try:
        manifest = manifest_of()
        try:
            store.write_manifest(manifest)
        except StorageError:
            if not failed:
                raise
    finally:
        store.release()
    return manifest["counts"]
