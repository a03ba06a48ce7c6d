"""`probe check`: the files users write, checked without calling anything: the target config
(probe.toml: every problem at once, with the key meant for a near miss), probe sets (schema,
duplicates) and prompt versions (placeholders and the variables they need)."""

from pathlib import Path
from typing import Any

from .errors import InputError

TARGET = "target config"
PROBESET = "probe set"
PROMPT = "prompt"


def looks_like_target(path: Path) -> bool:
    """Whether a .toml file is a target config (probe.toml) rather than a probe set: it is named
    probe.toml, or it has a table of the target's and no [[case]]."""
    from .config import TOP_KEYS
    from .tomlfile import parse_toml

    if path.name == "probe.toml":
        return True
    try:
        data = parse_toml(path.read_bytes(), path)
    except (InputError, OSError):
        return False  # unreadable: checked (and reported) as what its suffix says
    return "case" not in data and bool(set(data) & (TOP_KEYS - {"check"}))


def check_files(paths: list[Path], config_path: Path | None = None) -> list[dict[str, Any]]:
    """One result per file: `ok`, and its problems, each naming the file (and case or line).

    The target config is `config_path`, a .toml file that is one (see looks_like_target), or
    ./probe.toml when there is one; it is checked as a file of its own. Another `.toml` file is a
    probe set, any other a prompt; prompts are checked against the variables of the config
    (`[vars]`) and of the probe sets given with them."""
    from .probeset import ProbeSetInvalid, load_probeset
    from .prompts import check_prompts, load_prompt

    targets = [p for p in paths if p.suffix.lower() == ".toml" and looks_like_target(p)]
    if config_path is not None:
        targets.insert(0, config_path)
    elif not targets and Path("probe.toml").is_file():
        targets.append(Path("probe.toml"))
    results: list[dict[str, Any]] = []
    variables: dict[str, str] = {}
    for path in dict.fromkeys(targets):
        result, found = _check_target(path)
        results.append(result)
        variables = {**found, **variables}  # --config first: its variables win
    probesets = []
    prompts = []
    for path in paths:
        if path in targets:
            continue
        if path.suffix.lower() == ".toml":
            try:
                probeset = load_probeset(path)
            except ProbeSetInvalid as exc:
                results.append({"path": str(path), "kind": PROBESET, "ok": False, "problems": exc.problems})
                continue
            except InputError as exc:
                results.append({"path": str(path), "kind": PROBESET, "ok": False, "problems": [str(exc)]})
                continue
            probesets.append(probeset)
            results.append(
                {
                    "path": str(path),
                    "kind": PROBESET,
                    "ok": True,
                    "name": probeset.name,
                    "cases": len(probeset.cases),
                    "repeats": probeset.repeats,
                }
            )
        else:
            try:
                prompts.append((load_prompt(path), len(results)))
            except InputError as exc:
                results.append({"path": str(path), "kind": PROMPT, "ok": False, "problems": [str(exc)]})
                continue
            results.append({"path": str(path), "kind": PROMPT, "ok": True, "name": prompts[-1][0].name})
    cases = [case for probeset in probesets for case in probeset.cases]
    for prompt, index in prompts:
        problems = check_prompts([prompt], cases, variables)
        if problems:
            results[index] = dict(results[index], ok=False, problems=problems)
    return results


def _check_target(path: Path) -> tuple[dict[str, Any], dict[str, str]]:
    """A target config's result, and its prompt variables (none when it is invalid)."""
    from .config import ConfigInvalid, load_config

    try:
        config = load_config(path)
    except ConfigInvalid as exc:
        # Its [vars] that are sound still check the prompts: no second error for the same typo.
        return {"path": str(path), "kind": TARGET, "ok": False, "problems": exc.problems}, sound_vars(path)
    except InputError as exc:
        return {"path": str(path), "kind": TARGET, "ok": False, "problems": [str(exc)]}, {}
    summary = {
        "retrieval": config.retrieval.get("kind", "none") if config.retrieval_given else None,
        "models": [m.spec for m in config.run.models],
        "checks": [c.name for c in config.checks.user],
    }
    return {"path": str(path), "kind": TARGET, "ok": True, **summary}, config.vars


def sound_vars(path: Path) -> dict[str, str]:
    """The prompt variables of a config that has problems elsewhere (those that are sound)."""
    from .config import prompt_variables
    from .tomlfile import parse_toml

    try:
        table = parse_toml(path.read_bytes(), path).get("vars")
    except (InputError, OSError):
        return {}
    return prompt_variables(table) if isinstance(table, dict) else {}


def describe(result: dict[str, Any]) -> str:
    """The `ok:` line of one file that passed."""
    if result["kind"] == PROBESET:
        return f"ok: {result['name']} ({result['cases']} cases, {result['repeats']} repeats)"
    if result["kind"] == TARGET:
        retrieval = f'retrieval "{result["retrieval"]}"' if result["retrieval"] else "no [retrieval]"
        count = len(result["models"])
        models = f"{count} model{'s' * (count != 1)} in [run]"
        return f"ok: target config {result['path']} ({retrieval}, {models})"
    return f"ok: prompt {result['name']} ({result['path']})"
