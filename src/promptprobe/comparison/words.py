"""The words of a compare result: what a reader is told, built once into the result itself.

The terminal table, the sentences under it, the JSON, the HTML verdict boxes, the notebook view
and the live viewer all show `result["words"]`, so none of them phrases a verdict or formats an
interval of its own. The verdict is said by the candidate's (B's) name in the metric's direction:
"always-header better", "always-header worse", or "can't tell yet". The interval beside it is the
test's own, at the level the verdict was decided at; Newcombe's interval on the pooled counts is
said beside it as descriptive.
"""

from typing import Any

CANT_TELL = "can't tell yet"


def points(value: float) -> str:
    """B - A in whole points with a sign, always a number: a value that is not 0 but would read
    +0 or -0 gets one decimal, and its sign says which side of 0 it lies on (+0.4; -0.0 is just
    below 0); exactly 0 is +0."""
    if value == 0:
        return "+0"
    shown = f"{100 * value:+.0f}"
    return f"{100 * value:+.1f}" if shown in ("+0", "-0") else shown


def in_points(value: float) -> str:
    """`+12 points`, `-1 point`."""
    shown = points(value)
    return f"{shown} point" if shown in ("+1", "-1") else f"{shown} points"


def percent(value: float) -> str:
    return f"{100 * value:.1f}%"


def level(confidence: float) -> str:
    """95% as "95%", 1 - 0.05/3 as "98.3%": as many decimals as it takes not to read as 100%."""
    for decimals in range(1, 8):
        text = f"{100 * confidence:.{decimals}f}".rstrip("0").rstrip(".")
        if float(text) < 100 or confidence >= 1:
            return f"{text}%"
    return f"{100 * confidence}%"


def p_text(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def metric_label(result: dict[str, Any]) -> str:
    return result["metric"] + ("" if result["higher_is_better"] else " (lower is better)")


def verdict_words(result: dict[str, Any]) -> str:
    """`NAME better`, `NAME worse` (NAME: the candidate B), or `can't tell yet`."""
    if result["verdict"] == "indistinguishable":
        return CANT_TELL
    return f"{result['b']['name']} {'worse' if result['worse'] else 'better'}"


def is_adjusted(result: dict[str, Any]) -> bool:
    """Whether the interval beside the verdict is at a level of its own (a family's adjusted row)."""
    effect = result["effect"]
    return abs(effect["confidence"] - effect["stated_confidence"]) > 1e-12


def interval_words(result: dict[str, Any]) -> str:
    """`95% CI +55 to +90` (`, adjusted for 13 comparisons` in a family whose adjustment moved its
    level: the exact level is the JSON's `effect.confidence`), or why no interval stands there."""
    effect = result["effect"]
    if effect["interval"] is None:
        return f"no interval beside this verdict: {effect['interval_note']}"
    lo, hi = effect["interval"]
    text = f"{level(effect['stated_confidence'])} CI {points(lo)} to {points(hi)}"
    if is_adjusted(result):
        text += f", adjusted for {effect['adjusted_for']} comparisons"
    return text


def interval_heading(results: list[dict[str, Any]]) -> str:
    """The heading of a table's interval column: one level, `adjusted` when a row's is."""
    stated = level(results[0]["effect"]["stated_confidence"]) if results else "95%"
    return f"{stated} CI (pts)" + (", adjusted" if any(is_adjusted(r) for r in results) else "")


def descriptive_words(result: dict[str, Any]) -> str:
    lo, hi = result["newcombe"]
    return f"pooled {points(result['diff'])}, Newcombe 95% {points(lo)} to {points(hi)} (descriptive)"


def _p_words(result: dict[str, Any]) -> str:
    text = f"{result['test']} p = {p_text(result['p_value'])}"
    adjusted = result.get("p_adjusted")
    if adjusted is not None and result["p_value"] is not None and adjusted != result["p_value"]:
        text += f", {result.get('adjustment') or 'Holm'}-adjusted {p_text(adjusted)}"
    return text


def sentence(result: dict[str, Any]) -> str:
    """The verdict in words a prompt engineer acts on: which arm, better or worse, by how much."""
    a, b = result["a"], result["b"]
    within = {"paired": " within cases", "sequential": " over the rounds' pairs"}.get(
        result["design"], " (mean of cases)"
    )
    effect = result["effect"]
    text = (
        f"{verdict_words(result)} on {metric_label(result)}: {a['name']} {a['k']}/{a['n']}, "
        f"{b['name']} {b['k']}/{b['n']} (B - A = {in_points(effect['estimate'])}{within}, "
        f"{interval_words(result)}; {descriptive_words(result)}); {_p_words(result)}"
    )
    decided_by = result.get("decided_by")
    if decided_by == "sequential rule":
        return text + ": decided by the sequential rule (valid however often it was checked)"
    if decided_by == "test":
        where = "on these questions" if result["design"] == "paired" else "beyond question-to-question spread"
        return text + f": larger than this sample produces by chance ({where})"
    if decided_by:
        return text + f": decided because {decided_by}, not by the test"
    if result["design"] == "sequential":
        # Undecided and not at its cap: stopped by hand, so more rounds (not a new plan) settle it.
        return text + ": not decided; the run stopped before its rule did (probe run --resume continues it)"
    hint = result.get("repeats_needed")
    if hint is None:
        if result["a"]["rate"] == result["b"]["rate"]:
            return text + "; the observed rates are equal, so there is no difference to size a probe for"
        return text
    return text + hint_words(effect["estimate"], hint)


def hint_words(estimate: float, hint: dict[str, Any]) -> str:
    """`; to detect an 8-point difference you need about 133 repeats of these 8 cases (...)`: the
    difference printed beside the verdict, and `probe plan`'s figure for the design the data have."""
    whole = int(f"{abs(100 * estimate):.0f}")  # as the estimate beside it is printed
    article = "an" if whole in (8, 11, 18) or 80 <= whole <= 89 else "a"  # said "an eight", "an eleven"
    cases, cases_b = hint["cases"], hint["cases_b"]
    if hint["design"] == "paired":
        these = "this case" if cases == 1 else f"these {cases} cases"
    elif cases == cases_b:
        these = f"these {cases} cases a side"
    else:
        these = f"these {cases} cases on A's side and {cases_b} on B's"
    if hint["repeats"]:
        power = f"{100 * hint['power']:.0f}% power simulated"
        need = f"about {hint['repeats']} repeats of {these} ({hint['design']}, {power})"
    elif hint["design"] == "paired":
        need = f"more than {hint['limit']} repeats of {these} (paired)"
    elif not hint["reachable"]:
        need = f"more cases: with {these} the case permutation test cannot reach alpha (unpaired)"
    else:
        need = f"more cases: no number of repeats of {these} gets there (unpaired)"
    return f"; to detect {article} {whole}-point difference you need {need}; {hint['plan']} says more"


def generalise_sentence(result: dict[str, Any]) -> str | None:
    paired = result.get("paired")
    if not paired:
        return None
    g = len(paired["cases"])
    moved = f"{paired['moved']} of {g} cases moved ({paired['up']} towards B, {paired['down']} towards A)"
    span = f"mean per-case difference {in_points(paired['mean_diff'])}"
    if paired["interval"]:
        lo, hi = paired["interval"]
        span += f", {level(result['effect']['stated_confidence'])} interval {points(lo)} to {points(hi)}"
    if paired["likely"]:
        return (
            f"would it generalise: likely; {moved}, sign test p = {paired['p_value']:.3g}; {span}: "
            "other questions like these would move too"
        )
    if paired["moved"] < 5:
        return f"would it generalise: not shown; {moved}: at least 5 must move before it can be said; {span}"
    return (
        f"would it generalise: not shown; {moved}, sign test p = {paired['p_value']:.3g}; {span}: the change "
        "may be specific to these questions"
    )


def failure_line(result: dict[str, Any]) -> str:
    """The `FAIL:` line of --fail-if-worse: which metric got worse, by how much, how sure."""
    direction = "higher is better" if result["higher_is_better"] else "lower is better"
    a, b = result["a"], result["b"]
    where = f" ({result['pair']})" if result.get("pair") else ""
    return (
        f"FAIL: {result['metric']}{where} got worse: {a['name']} {percent(a['rate'])} -> {b['name']} "
        f"{percent(b['rate'])} ({in_points(result['effect']['estimate'])}, {interval_words(result)}; "
        f"{direction}; {_p_words(result)})"
    )


def describe(result: dict[str, Any]) -> None:
    """Put every word a reader sees of this result into `result["words"]`."""
    kind = "same" if result["verdict"] == "indistinguishable" else ("worse" if result["worse"] else "better")
    effect = result["effect"]
    headline = f"{verdict_words(result)} on {metric_label(result)}"
    result["words"] = {
        "verdict": verdict_words(result),
        "kind": kind,
        "headline": headline,
        "interval": interval_words(result),
        "descriptive": descriptive_words(result),
        "sentence": sentence(result),
        "generalise": generalise_sentence(result),
        "badge": f"{headline}: {in_points(effect['estimate'])}, {interval_words(result)}",
        "tone": kind,  # how a page colours it: `interim` (no colour) while a run is not final
        "failure": failure_line(result) if result["worse"] else None,
        "cells": {  # the table's columns
            "estimate": points(effect["estimate"]),
            "interval": "-" if effect["interval"] is None else "..".join(map(points, effect["interval"])),
            "pooled": f"{points(result['diff'])} ({'..'.join(map(points, result['newcombe']))})",
        },
    }


def mark_interim(result: dict[str, Any], counted: str) -> None:
    """A verdict of a run that is not final yet (`counted`: e.g. `33 of 720 samples`): flagged, its
    words saying so first, and coloured as neither better nor worse."""
    words = result["words"]
    result["interim"] = True
    words["tone"] = "interim"
    words["verdict"] = f"{words['verdict']} (interim)"
    words["badge"] = f"interim, {counted}: {words['badge']}"
    words["sentence"] = f"Interim ({counted}; not a result until the run ends): {words['sentence']}"
