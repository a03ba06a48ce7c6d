"""`probe check`: the files users write, checked without calling anything: probe sets (schema,
duplicates) and prompt versions (placeholders and the variables they need)."""

from pathlib import Path
from typing import Any

from .errors import InputError


def check_files(paths: list[Path], config_path: Path | None = None) -> list[dict[str, Any]]:
    """One result per file: `ok`, and its problems, each naming the file (and case or line).

    A `.toml` file is a probe set, any other a prompt; prompts are checked against the
    variables of the config (`[vars]`) and of the probe sets given with them."""
    from .config import load_config
    from .probeset import ProbeSetInvalid, load_probeset
    from .prompts import check_prompts, load_prompt

    results: list[dict[str, Any]] = []
    probesets = []
    prompts = []
    for path in paths:
        if path.suffix.lower() == ".toml":
            try:
                probeset = load_probeset(path)
            except ProbeSetInvalid as exc:
                results.append(
                    {"path": str(path), "kind": "probe set", "ok": False, "problems": exc.problems}
                )
                continue
            except InputError as exc:
                results.append({"path": str(path), "kind": "probe set", "ok": False, "problems": [str(exc)]})
                continue
            probesets.append(probeset)
            results.append(
                {
                    "path": str(path),
                    "kind": "probe set",
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
                results.append({"path": str(path), "kind": "prompt", "ok": False, "problems": [str(exc)]})
                continue
            results.append({"path": str(path), "kind": "prompt", "ok": True, "name": prompts[-1][0].name})
    if prompts:
        variables = load_config(config_path).vars if config_path or Path("probe.toml").is_file() else {}
        cases = [case for probeset in probesets for case in probeset.cases]
        for prompt, index in prompts:
            problems = check_prompts([prompt], cases, variables)
            if problems:
                results[index] = dict(results[index], ok=False, problems=problems)
    return results
