"""manifest.json: what a run is (its probe set, prompts, models, arms, parameters, target,
checks, code, prices, seed) and how far it got (status, counts, resumes), as written at its
start, at its end, and at every resume."""

import os
from typing import TYPE_CHECKING, Any

from ..endpoints import model_record
from ..production import code_fingerprint
from ..prompts import PromptVersion
from ..retrievers import redact
from ..version import __version__
from .store import SCHEMA_VERSION

if TYPE_CHECKING:
    from .run import ProbeRun


def run_manifest(
    run: "ProbeRun", status: str, finished: str | None, counts: dict[str, int], stopped_by: str | None = None
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
        "settings": getattr(run, "provenance", {}),
        "repeats": run.plan.repeats,
        "seed": run.seed,
        "counts": counts,
        "resumes": run.resumes,
        **run.extra_manifest,
    }


def prompt_copy(prompt: PromptVersion) -> str:
    """Where a run keeps its copy of a prompt version."""
    return f"prompts/{prompt.name}{prompt.path.suffix}"
