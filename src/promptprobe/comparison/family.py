"""Several metrics compared as one family: adjusted p-values (Westfall-Young min-P or Holm)."""

from collections import Counter
from typing import Any

from ..counts import ArmCounts, CountsTable, resolved_patterns
from ..stats.multiplicity import HOLM, Adjusted
from ..stats.multiplicity import adjust as family_adjusted
from .settle import settle

# Per case: how many of A's and of B's samples showed each vector of outcomes.
Patterns = list[tuple[Counter, Counter]]


def adjust(results: list[dict[str, Any]], alpha: float, patterns: Patterns | None = None) -> None:
    """`p_adjusted` across the metrics compared together, and verdicts decided on it: Westfall-Young
    min-P over relabellings within cases when every result is paired and the joint outcome patterns
    are given (one pair of pattern counts per case, over the results in order), else Holm."""
    if len(results) < 2:
        return
    family = _family(results, patterns)
    for result, p in zip(results, family.p_adjusted, strict=True):
        before = result["verdict"]
        result["adjustment"] = family.method
        result["effect"]["adjusted_for"] = len(results)
        settle(result, p, alpha)
        if result["verdict"] == "indistinguishable" != before:  # the adjustment undid a decision
            result["notes"].append(
                f"{result['metric']}: {before} on its own p = {result['p_value']:.3g}, but not "
                f"after {family.method} adjustment over the {len(results)} metrics compared "
                f"(adjusted p = {p:.3g})"
            )
        if family.reason:
            result["notes"].append(f"the metrics are adjusted by Holm: {family.reason}")


def _family(results: list[dict[str, Any]], patterns: Patterns | None) -> Adjusted:
    raw = [r["p_value"] for r in results]
    if patterns is not None and not all(r["design"] == "paired" for r in results):
        reason = (
            "relabelling samples within cases needs the same cases on both sides, which an unpaired or "
            "sequential comparison does not have"
        )
        return Adjusted(family_adjusted(raw).p_adjusted, HOLM, reason=reason)
    family = family_adjusted(raw, patterns)
    pairs = zip(family.raw or raw, raw, strict=True)
    if any(abs(x - y) > 1e-9 * max(x, y) + 1e-15 for x, y in pairs):
        # The patterns must give the very p-values the counts gave (a case left out of a user's check
        # across two runs is not in the patterns); if not, Holm on the counts'.
        reason = "the outcome patterns did not match the counts"
        return Adjusted(family_adjusted(raw).p_adjusted, HOLM, reason=reason)
    return family


def joint_patterns(
    rows: list[tuple[CountsTable, ArmCounts, CountsTable, ArmCounts, str]],
) -> Patterns:
    """The joint outcome patterns of a family whose rows are (table A, arm A, table B, arm B,
    metric): per case both arms asked, each arm's counts of outcome vectors over the rows (None
    where a row's metric is outside a sample, or the sample belongs to another pair of arms). Rows
    of different pairs of arms share no samples, so their cases are listed apart."""
    out: Patterns = []
    groups: dict[tuple[int, int], list[int]] = {}
    for index, (_, arm_a, _, arm_b, _) in enumerate(rows):
        groups.setdefault((id(arm_a), id(arm_b)), []).append(index)
    for members in groups.values():
        counts_a, arm_a, counts_b, arm_b, _ = rows[members[0]]
        patterns_a = resolved_patterns(counts_a, arm_a)
        patterns_b = resolved_patterns(counts_b, arm_b)

        for case_id in counts_a.case_order:
            if case_id in patterns_a and case_id in patterns_b:
                out.append(
                    (
                        _project(rows, members, counts_a, patterns_a[case_id]),
                        _project(rows, members, counts_b, patterns_b[case_id]),
                    )
                )
    return out


def _project(rows: list[Any], members: list[int], table: CountsTable, seen: Counter) -> Counter:
    """A (case, arm)'s patterns over its table's metrics, as vectors over the family's rows."""
    where = {
        i: table.pattern_metrics.index(rows[i][4]) if rows[i][4] in table.pattern_metrics else None
        for i in members
    }
    found: Counter = Counter()
    for pattern, count in seen.items():
        vector: list[int | None] = [None] * len(rows)
        for i, j in where.items():
            vector[i] = None if j is None else pattern[j]
        found[tuple(vector)] += count
    return found
