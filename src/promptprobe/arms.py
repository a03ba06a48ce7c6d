"""A run's arms by the selectors that name them: the two `probe compare RUN` compares, and the
comparisons a run of several prompts or models ends with.

An arm is selected by its prompt's name when the run has one model, by its model's name when it
has one prompt, and by both otherwise (`RUN#prompt=NAME,model=NAME`). A run of two or more
prompts ends with each prompt against the first, model by model; a run of one prompt and several
models, each model against the first. Each comparison is what `probe compare A B --all` says,
one line a metric, with that command beside it.
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import InputError
from .paths import typed


def _arms(run: Path) -> list[tuple[str, str]]:
    from .runref import _info

    info = _info(run)
    if info is None:
        raise InputError(f"{run}: not a readable run")
    if info.problem:
        raise InputError(info.problem)  # a file of it a link or not a regular file
    return list(info.pairs)


def selector(run: Path, arm: tuple[str, str], arms: list[tuple[str, str]]) -> str:
    """`RUN#prompt=NAME`, `RUN#model=NAME` or both: the shortest that names this arm alone."""
    prompts = {p for p, _ in arms}
    models = {m for _, m in arms}
    if len(models) == 1:
        return f"{run}#prompt={arm[0]}"
    if len(prompts) == 1:
        return f"{run}#model={arm[1]}"
    return f"{run}#prompt={arm[0]},model={arm[1]}"


def two_arms(run: Path) -> tuple[str, str]:
    """`probe compare RUN`: the run's two arms as A and B (in the run's order), or an InputError
    that lists the selectors to choose from."""
    arms = _arms(run)
    if len(arms) == 2:
        return selector(run, arms[0], arms), selector(run, arms[1], arms)
    if len(arms) < 2:
        raise InputError(
            f"{run} has one arm, so there is nothing in it to compare: give two runs, probe compare RUN1 RUN2"
        )
    listing = "\n".join(f"  {typed(selector(run, arm, arms))}" for arm in arms)
    raise InputError(f"{run} has {len(arms)} arms: choose two, as probe compare A B, from:\n{listing}")


@dataclass(frozen=True)
class EndComparison:
    """One pair a run ends with: the command that shows more, and one line a metric."""

    a: str
    b: str
    command: str
    lines: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {"a": self.a, "b": self.b, "command": self.command, "lines": self.lines}


def end_pairs(run: Path) -> list[tuple[str, str]]:
    """Which arms a finished run compares: each prompt against the first on each model, or (one
    prompt) each model against the first."""
    arms = _arms(run)
    prompts = list(dict.fromkeys(p for p, _ in arms))
    models = list(dict.fromkeys(m for _, m in arms))
    pairs = []
    if len(prompts) > 1:
        for model in models:
            for prompt in prompts[1:]:
                pairs.append(((prompts[0], model), (prompt, model)))
    else:
        for model in models[1:]:
            pairs.append(((prompts[0], models[0]), (prompts[0], model)))
    present = set(arms)
    return [
        (selector(run, a, arms), selector(run, b, arms)) for a, b in pairs if a in present and b in present
    ]


def end_comparisons(run: Path) -> list[EndComparison]:
    """Each pair of `end_pairs`, compared as `probe compare A B --all` compares it."""
    from .comparison import compare_runs

    arms = _arms(run)
    found = []
    for a, b in end_pairs(run):
        data = compare_runs(a, b, all_metrics=True, hints=False)
        lines = [r["words"]["badge"] for r in data["results"]]
        lines += data["warnings"]
        if len(arms) == 2:
            command = f"probe compare {typed(run)} --all"
        else:
            command = f"probe compare {typed(a)} {typed(b)} --all"
        found.append(EndComparison(a, b, command, lines))
    return found


def render_end(comparisons: list[EndComparison]) -> str:
    """The comparisons in words, each under the command that shows its table, intervals and p."""
    out = []
    for comparison in comparisons:
        out.append("")
        out.append(f"{_name(comparison.b)} (B) against {_name(comparison.a)} (A), every metric:")
        out.extend(f"  {line}" for line in comparison.lines)
        out.append(f"  more: {comparison.command}")
    return "\n".join(out)


def _name(selector: str) -> str:
    """`RUN#prompt=v2,model=mini` as `v2 on mini`."""
    arm = selector.rpartition("#")[2]
    return arm.replace("prompt=", "").replace(",model=", " on ").replace("model=", "")
