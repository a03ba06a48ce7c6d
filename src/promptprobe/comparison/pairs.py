"""Which arms `probe compare A B` compares: one against one, or two runs' arms paired by name.

When A and B are two runs, each arm of A is compared with the arm of the same name in B (one row
per pair, one family).

An arm's name is what tells it apart in its run: its prompt, its model, or both. Arms pair on
the full name (prompt and model) when that pairs the most; otherwise on the prompt alone or the
model alone (two runs of the same prompts on different models pair by prompt). When nothing
pairs, the error lists the `RUN#prompt=NAME` forms that select one arm each.
"""

from dataclasses import dataclass
from pathlib import Path

from ..counts import ArmCounts, CountsTable
from ..errors import InputError

KEYS = (("prompt", "model"), ("prompt",), ("model",))


@dataclass(frozen=True)
class Pair:
    a: ArmCounts
    b: ArmCounts
    name: str | None = None  # the name both arms answer to; None: one arm chosen on each side


def matches(arm: ArmCounts, key: str, value: str) -> bool:
    """`model=` takes the model's name or its spec."""
    return getattr(arm, key) == value or (key == "model" and arm.spec == value)


def chosen(filters: dict[str, str], counts: CountsTable) -> list[ArmCounts]:
    return [a for a in counts.arms if all(matches(a, k, v) for k, v in filters.items())]


def selector(arm: ArmCounts, counts: CountsTable) -> str:
    """The shortest `prompt=NAME` / `model=NAME` / both that selects this arm in its run."""
    for key in KEYS[1:]:
        if [getattr(a, key[0]) for a in counts.arms].count(getattr(arm, key[0])) == 1:
            return f"{key[0]}={getattr(arm, key[0])}"
    return f"prompt={arm.prompt},model={arm.model}"


def forms(run: Path, counts: CountsTable) -> str:
    """Every arm of a run as a selector to type, quoted for the shell."""
    return ", ".join(f"'{run}#{selector(arm, counts)}'" for arm in counts.arms)


def _key_values(arm: ArmCounts, key: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(getattr(arm, k) for k in key)


def _by_key(arms: list[ArmCounts], key: tuple[str, ...]) -> dict[tuple[str, ...], ArmCounts] | None:
    """The arms by their values of `key`, or None when two arms share them (the key cannot name them)."""
    found = {_key_values(arm, key): arm for arm in arms}
    return found if len(found) == len(arms) else None


def pair_arms(
    run_a: Path,
    filters_a: dict[str, str],
    counts_a: CountsTable,
    run_b: Path,
    filters_b: dict[str, str],
    counts_b: CountsTable,
) -> tuple[list[Pair], list[str]]:
    """The pairs to compare, and notes on arms that found no partner."""
    arms_a, arms_b = chosen(filters_a, counts_a), chosen(filters_b, counts_b)
    sides = ((arms_a, run_a, filters_a, counts_a), (arms_b, run_b, filters_b, counts_b))
    for arms, run, filters, counts in sides:
        if not arms:
            given = ",".join(f"{k}={v}" for k, v in filters.items())
            raise InputError(f"{run}#{given}: matches no arm; the run has: {forms(run, counts)}")
    if len(arms_a) == 1 and len(arms_b) == 1:
        return [Pair(arms_a[0], arms_b[0])], []
    if counts_a.run.resolve() == counts_b.run.resolve():
        many, run, filters = (arms_a, run_a, filters_a) if len(arms_a) > 1 else (arms_b, run_b, filters_b)
        given = "#" + ",".join(f"{k}={v}" for k, v in filters.items()) if filters else ""
        raise InputError(
            f"{run}{given}: matches {len(many)} arms, and both sides are this run: choose one arm for "
            f"each side, from {forms(run_a, counts_a)}"
        )
    best: tuple[tuple[str, ...], list[Pair]] = (KEYS[0], [])
    for key in KEYS:
        side_a, side_b = _by_key(arms_a, key), _by_key(arms_b, key)
        if side_a is None or side_b is None:
            continue
        pairs = [Pair(arm, side_b[values]) for values, arm in side_a.items() if values in side_b]
        if len(pairs) > len(best[1]):
            best = (key, pairs)
    key, pairs = best
    if not pairs:
        raise InputError(
            f"{run_a} and {run_b}: no arm of one has the same name as an arm of the other, so there "
            f"is nothing to pair; compare two arms by name, one of {forms(run_a, counts_a)} with one of "
            f"{forms(run_b, counts_b)}"
        )
    # Each pair is called by what differs between the paired arms of A (the prompt, usually).
    shown = [k for k in key if len({getattr(p.a, k) for p in pairs}) > 1] or [key[0]]
    named = [Pair(p.a, p.b, " x ".join(getattr(p.a, k) for k in shown)) for p in pairs]
    paired_a, paired_b = {id(p.a) for p in pairs}, {id(p.b) for p in pairs}
    notes = [
        f"not compared: {side}'s arm {selector(arm, counts)} has no arm of the same name in {other}"
        for side, other, arms, paired, counts in (
            ("A", "B", arms_a, paired_a, counts_a),
            ("B", "A", arms_b, paired_b, counts_b),
        )
        for arm in arms
        if id(arm) not in paired
    ]
    return named, notes
