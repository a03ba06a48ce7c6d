"""Comparing two runs' arms (or two arms of one run) on each metric, as one family."""

from pathlib import Path
from typing import Any

from ..counts import CountsTable, build_counts
from ..errors import InputError
from .drift import drift
from .family import adjust, joint_patterns
from .hints import add_hints
from .interim import interim_of, mark_interim_verdicts
from .judge import compare_judge, judged_arms
from .metric import compare_sides
from .pairs import Pair, pair_arms
from .selectors import parse_selector
from .sequential import apply_sequential, stopped_elsewhere
from .settle import finish, settle
from .side import Side, applies_across, arm_names, side_of
from .words import interval_heading


def compare_runs(
    a: str,
    b: str,
    metrics: list[str] | None = None,
    *,
    all_metrics: bool = False,
    alpha: float = 0.05,
    classification: int | None = None,
    top_k: int | None = None,
    hints: bool = True,
    typed: tuple[str, str] | None = None,
) -> dict[str, Any]:
    """Compare two selected arms on each metric; each run directory is read once. Several
    metrics are one family: adjusted p-values decide their verdicts. Two runs of several
    arms compare arm by arm (each arm of A with the arm of the same name in B): every pair and
    metric is then one row of one family, and its sides are named by the runs as `typed`
    (e.g. `latest~1`, `latest`)."""
    run_a, filters_a = parse_selector(a)
    run_b, filters_b = parse_selector(b)
    tables: dict[Path, CountsTable] = {}
    for run in (run_a, run_b):
        key = run.resolve()
        if key not in tables:
            tables[key] = build_counts(run, classification=classification, top_k=top_k)
    counts_a, counts_b = tables[run_a.resolve()], tables[run_b.resolve()]
    return compare_tables(
        a, b, counts_a, counts_b, metrics, all_metrics=all_metrics, alpha=alpha, hints=hints, typed=typed
    )


def compare_tables(
    a: str,
    b: str,
    counts_a: CountsTable,
    counts_b: CountsTable,
    metrics: list[str] | None = None,
    *,
    all_metrics: bool = False,
    alpha: float = 0.05,
    hints: bool = True,
    typed: tuple[str, str] | None = None,
    pairs: list[Pair] | None = None,
) -> dict[str, Any]:
    """`compare_runs` on counts tables already read (`counts_b` is `counts_a` for two arms of one
    run): A and B are `RUN#...` selectors (an arm of each, or two runs compared arm by arm), or
    `pairs` says which arms to compare (the gate: each prompt's two versions on each model)."""
    run_a, filters_a = parse_selector(a)
    run_b, filters_b = parse_selector(b)
    known = {**counts_a.metrics, **counts_b.metrics}  # the built-in ones and both runs' own checks
    names = list(known) if all_metrics else list(dict.fromkeys(metrics or ["header_present"]))
    for metric in names:
        if metric not in known:
            raise InputError(f"unknown metric {metric!r} (known: {', '.join(known)})")
    unpaired: list[str] = []
    if pairs is None:
        pairs, unpaired = pair_arms(run_a, filters_a, counts_a, run_b, filters_b, counts_b)
    results, sides, rows = [], [], []
    for pair in pairs:
        arm_a, arm_b = pair.a, pair.b
        name_a, name_b = arm_names(counts_a, arm_a, counts_b, arm_b)
        if pair.name is not None and counts_a is not counts_b:  # the same arm in two runs
            name_a, name_b = (str(parse_selector(t)[0]) for t in typed) if typed else (run_a.name, run_b.name)
        # A pair found by name is labelled with the selector that picks each of its arms.
        label_a = a if pair.name is None else f"{run_a}#prompt={arm_a.prompt},model={arm_a.model}"
        label_b = b if pair.name is None else f"{run_b}#prompt={arm_b.prompt},model={arm_b.model}"
        for metric in names:
            side_a = side_of(label_a, counts_a, arm_a, metric, name_a)
            side_b = side_of(label_b, counts_b, arm_b, metric, name_b)
            if counts_a is not counts_b:
                side_a, side_b = applies_across(side_a, side_b, counts_a, counts_b, metric)
            if all_metrics and (not side_a.per_case or not side_b.per_case):
                continue  # --all: e.g. no case has `expect`, so declared_correct has no samples
            result = compare_sides(
                side_a, side_b, metric, alpha, hints=False, rule=known[metric], settled=False
            )
            if arm_a is arm_b:  # it can only ever say "can't tell yet", and proves nothing
                result["notes"].append(f"A and B are the same arm ({arm_a.label}): choose two to compare")
            if counts_a is counts_b:
                apply_sequential(counts_a, arm_a, arm_b, result, alpha)
            else:
                result["notes"].extend(stopped_elsewhere(counts_a, counts_b))
            if pair.name is not None:
                result["pair"] = pair.name
                result["notes"].extend(unpaired)
            results.append(result)
            sides.append((side_a, side_b))
            rows.append((counts_a, arm_a, counts_b, arm_b, metric))
    _decide(results, sides, rows, alpha, hints)
    for result in results:
        # Which classification each side's counts come from (None: the run's own).
        result["a"]["classification"] = counts_a.classification
        result["b"]["classification"] = counts_b.classification
    return {
        **mark_interim_verdicts(results, [counts_a] if counts_b is counts_a else [counts_a, counts_b]),
        "results": results,
        "family": len(results),
        "interval_heading": interval_heading(results),  # the interval column's level, said once
        "retrieval_drift": drift(counts_a, counts_b) if counts_a is not counts_b else [],
        "not_compared": unpaired,  # arm by arm: the arms of either run without a partner in the other
        "warnings": [
            *counts_a.warnings,
            *_unfinished(counts_a),
            *((counts_b.warnings + _unfinished(counts_b)) if counts_b is not counts_a else []),
        ],
    }


def _decide(
    results: list[dict[str, Any]], sides: list[tuple[Side, Side]], rows: list[Any], alpha: float, hints: bool
) -> None:
    """Each comparison's verdict, as one family (adjusted when it has several), with its hints."""
    if len(results) > 1:
        adjust(results, alpha, joint_patterns(rows))
    for result in results:
        if "words" not in result:  # one metric: its own p decides
            settle(result, result["p_value"], alpha)
    if hints:
        for result, (side_a, side_b) in zip(results, sides, strict=True):
            add_hints(result, side_a, side_b, alpha)
    _judged(results, rows, alpha)
    for result in results:
        finish(result)


def _judged(results: list[dict[str, Any]], rows: list[Any], alpha: float) -> None:
    """Beside each judged metric's verdict, the judge's reliability (each run's outputs read once)."""
    read: dict[int, Any] = {}
    for result, (counts_a, arm_a, counts_b, arm_b, metric) in zip(results, rows, strict=True):
        if counts_a.settings.judge(metric) is None and counts_b.settings.judge(metric) is None:
            continue
        for counts in (counts_a, counts_b):
            if id(counts) not in read:
                read[id(counts)] = judged_arms(counts)
        sides = ((counts_a, arm_a, read[id(counts_a)]), (counts_b, arm_b, read[id(counts_b)]))
        compare_judge(result, sides, alpha)


def _unfinished(counts: CountsTable) -> list[str]:
    """A run that is not complete is compared on what it has recorded so far: said beside it (a
    run still running says so in its interim note instead)."""
    if counts.state == "complete" or interim_of(counts) is not None:
        return []
    how = "still running" if counts.state == "running" else f"{counts.state}, not complete"
    of = f" of {counts.planned}" if counts.planned else ""
    return [
        f"run {Path(counts.run).name} is {how}: the verdicts are on the {counts.recorded}{of} "
        "samples it has recorded"
    ]
