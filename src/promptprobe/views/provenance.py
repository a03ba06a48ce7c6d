"""Where a run's outputs come from, one view object for every page that shows outputs (`probe
show`, the incident file, the HTML report, the viewer): the probe set and its sha256, when the
run started and finished, its parameters, and per arm the prompt (its text and sha256), the model
(name and spec), the endpoint its calls went to and what set it, and its tokens, cost and latency.

Everything is read from the run's manifest and the copies it keeps, and the counts table; the
renderers only lay it out.
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import endpoints
from ..counts import CountsTable
from ..probeset import ProbeSet
from ..totals import ArmTotals

SHOWN_PARAMETERS = ("max_tokens", "temperature", "seed", "stream", "timeout", "batch", "cache")


def _prompt_text(run_dir: Path, prompt: dict[str, Any]) -> str | None:
    """The run's own copy of a prompt version (None when it is not there or not text)."""
    copy = prompt.get("copy")
    if not isinstance(copy, str):
        return None
    root = run_dir.resolve()
    path = (root / copy).resolve()
    if not path.is_relative_to(root) or not path.is_file():
        return None
    return path.read_bytes().decode("utf-8", "replace")


def arm_provenance(
    run_dir: Path, manifest: dict[str, Any], totals: ArmTotals, index: int, name: str | None = None
) -> dict[str, Any]:
    """One arm (1-based, as in the manifest): prompt, model, endpoint, tokens, cost, latency."""
    prompt = next((p for p in manifest.get("prompts") or [] if p.get("name") == totals.prompt), {})
    went = endpoints.of_run(manifest).get(totals.spec)
    return {
        "index": index,
        "name": name or f"{totals.prompt} x {totals.model}",
        "prompt": {
            "name": totals.prompt,
            "sha256": prompt.get("sha256"),
            "text": _prompt_text(run_dir, prompt),
        },
        "model": {"name": totals.model, "spec": totals.spec},
        "endpoint": {"url": went.url, "from": went.source} if went else None,
        "samples": totals.samples,
        "errors": totals.errors,
        "usage": totals.usage,
    }


def provenance(
    counts: CountsTable, arms: list[int] | None = None, names: dict[int, str] | None = None
) -> dict[str, Any]:
    """The run's provenance, with the arms numbered in `arms` (every arm when None)."""
    chosen = arms if arms is not None else list(range(1, len(counts.arms) + 1))
    source = RunSource(Path(counts.run), counts.manifest, counts.state, counts.probeset)
    return provenance_of(source, [(i, ArmTotals.of(counts.arms[i - 1])) for i in chosen], names)


@dataclass(frozen=True)
class RunSource:
    """What the provenance reads of a run besides its arms' totals."""

    run_dir: Path
    manifest: dict[str, Any]
    state: str  # the manifest's status, or `killed` (engine.store.run_state)
    probeset: ProbeSet


def provenance_of(
    source: RunSource, arms: list[tuple[int, ArmTotals]], names: dict[int, str] | None = None
) -> dict[str, Any]:
    """The provenance of a run with the given arms, each its number and its totals."""
    manifest = source.manifest
    parameters = manifest.get("parameters") or {}
    probeset = manifest.get("probeset") or {}
    view = {
        "run": source.run_dir.name,
        "status": source.state,
        "started": manifest.get("created"),
        "finished": manifest.get("finished"),
        "tool_version": manifest.get("tool_version"),
        "probeset": {
            "name": source.probeset.name,
            "path": probeset.get("path"),
            "sha256": source.probeset.sha256,
        },
        "parameters": {
            "repeats": manifest.get("repeats"),
            **{key: parameters.get(key) for key in SHOWN_PARAMETERS if key in parameters},
        },
        "arms": [
            arm_provenance(source.run_dir, manifest, totals, i, (names or {}).get(i)) for i, totals in arms
        ],
    }
    # The words every rendering shows, made once here (terminal, markdown, HTML alike).
    view["summary"] = summary_line(view)
    view["parameters_text"] = parameters_text(view)
    for arm in view["arms"]:
        arm["lines"] = arm_lines(arm)
    return view


def _money(value: float | None) -> str:
    return "cost unknown" if value is None else f"${value:.4f}"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f} ms"


def parameters_text(view: dict[str, Any]) -> str:
    """`repeats 3, max_tokens 1024, temperature default, ...` (None: the provider's default)."""
    return ", ".join(
        f"{key} {'default' if value is None else value}" for key, value in view["parameters"].items()
    )


def arm_lines(arm: dict[str, Any]) -> list[str]:
    """One arm's provenance as the terminal and markdown say it, one fact a line."""
    endpoint = arm["endpoint"]
    went = f"{endpoint['url'] or 'unknown'} (from {endpoint['from']})" if endpoint else "not recorded"
    use = arm["usage"]
    latency = use["latency_ms"]
    spec = arm["model"]["spec"]
    model = arm["model"]["name"] + (f" ({spec})" if spec and spec != arm["model"]["name"] else "")
    return [
        f"prompt {arm['prompt']['name']} (sha256 {arm['prompt']['sha256']})",
        f"model {model}",
        f"endpoint {went}",
        f"in the whole run: {arm['samples']} samples, {arm['errors']} failed; "
        f"tokens {use['input_tokens']} in, {use['output_tokens']} out; {_money(use['cost_usd'])}; "
        f"latency median {_ms(latency['median'])}, p90 {_ms(latency['p90'])}",
    ]


def summary_line(view: dict[str, Any]) -> str:
    probeset = view["probeset"]
    return (
        f"run {view['run']} ({view['status']}): probe set {probeset['name']} (sha256 {probeset['sha256']}), "
        f"started {view['started']}, finished {view['finished'] or '-'}"
    )


def prompt_text_lines(arm: dict[str, Any]) -> list[str]:
    """The arm's prompt text as the terminal shows it under its `prompt NAME (sha256 ...)` line:
    every line indented (an indented block in markdown too), or why it is not there."""
    text = arm["prompt"]["text"]
    if text is None:
        return ["(the run keeps no copy of this prompt's text)"]
    return [f"    {line}" if line else "" for line in text.splitlines()] or ["    (empty)"]


def render_provenance(view: dict[str, Any]) -> str:
    """The provenance as plain text, each arm's prompt text indented under its prompt line."""
    lines = [view["summary"], f"parameters: {view['parameters_text']}"]
    for arm in view["arms"]:
        lines.append(f"arm {arm['index']} {arm['name']}:")
        prompt, *rest = arm["lines"]
        lines += [f"  {prompt}", "", *prompt_text_lines(arm), "", *[f"  {line}" for line in rest]]
    return "\n".join(lines)
