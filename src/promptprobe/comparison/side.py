"""One arm's side of a comparison: its counts on one metric, and whether two sides are paired."""

from dataclasses import dataclass, replace

from ..counts import ArmCounts, CountsTable


@dataclass(frozen=True)
class Side:
    """One arm's counts for one metric: per case [successes, trials, failures], in case order."""

    label: str
    per_case: dict[str, list[int]]
    questions: dict[str, str] | None = None
    run: str | None = None
    probeset_sha256: str | None = None
    name: str | None = None  # what tells this arm from the other: its prompt and/or model, or run


def is_paired(a: Side, b: Side) -> bool:
    """The same set of case ids with the same questions, in any order; repeats may differ."""
    if set(a.per_case) != set(b.per_case) or not a.per_case:
        return False
    if a.questions is not None and b.questions is not None:
        return all(a.questions.get(c) == b.questions.get(c) for c in a.per_case)
    return True


def side_of(text: str, counts: CountsTable, arm: ArmCounts, metric: str, name: str | None = None) -> Side:
    questions = {c.id: c.question for c in counts.probeset.cases}
    recorded = arm.metrics.get(metric, {})
    per_case = {c: recorded[c] for c in counts.case_order if c in recorded}  # probe-set order
    return Side(text, per_case, questions, str(counts.run), counts.probeset.sha256, name)


def applies_across(
    a: Side, b: Side, counts_a: CountsTable, counts_b: CountsTable, metric: str
) -> tuple[Side, Side]:
    """Two runs: a case where every sample of one run failed (so that run cannot tell whether a
    user's check applies to it) is left out of the check when the other run's outputs say it
    does not apply, as that run left it out: the design stays paired."""
    seen_a = counts_a.check_applies.get(metric)
    seen_b = counts_b.check_applies.get(metric)
    if seen_a is None and seen_b is None:
        return a, b

    def without(side: Side, own: dict[str, bool] | None, other: dict[str, bool] | None) -> Side:
        own, other = own or {}, other or {}
        dropped = [c for c in side.per_case if c not in own and other.get(c) is False]
        if not dropped:
            return side
        kept = {c: cell for c, cell in side.per_case.items() if c not in dropped}
        return replace(side, per_case=kept)

    return without(a, seen_a, seen_b), without(b, seen_b, seen_a)


def arm_names(
    counts_a: CountsTable, arm_a: ArmCounts, counts_b: CountsTable, arm_b: ArmCounts
) -> tuple[str, str]:
    """Each arm named by what differs between the two: the prompt and/or the model, else the run."""
    parts = [key for key in ("prompt", "model") if getattr(arm_a, key) != getattr(arm_b, key)]
    if parts:
        return (
            ", ".join(getattr(arm_a, key) for key in parts),
            ", ".join(getattr(arm_b, key) for key in parts),
        )
    if counts_a.run.resolve() != counts_b.run.resolve():
        return counts_a.run.name, counts_b.run.name
    return "A", "B"
