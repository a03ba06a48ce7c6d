"""`probe compare` as text: the table of every compared metric, the sentences, the cases that moved.

Rendering only: the comparison itself (tests, intervals, adjustment, hints and the words) is built
by promptprobe.comparison; this lays out its object for the terminal, markdown and JSON.
"""

from typing import Any

from ..comparison.selectors import parse_selector
from ..comparison.words import interval_heading, is_adjusted, p_text, percent, points
from ..jsonio import dumps_pretty
from ..paths import renamed
from .tables import table, wrap

GREEN, RED, RESET = "\x1b[32m", "\x1b[31m", "\x1b[0m"


def _verdict_cell(result: dict[str, Any], color: bool) -> str:
    words = result["words"]
    if not color or words["tone"] not in ("better", "worse"):  # an interim verdict is never coloured
        return words["verdict"]
    return f"{RED if words['tone'] == 'worse' else GREEN}{words['verdict']}{RESET}"


def _classified(side: dict[str, Any]) -> str:
    number = side.get("classification")
    return f", classification {number} (an offline reclassification)" if number is not None else ""


def render_comparison(
    comparison: dict[str, Any], fmt: str = "table", width: int | None = None, color: bool = False
) -> str:
    """A table of every compared metric, the verdicts in words and the cases that moved.

    `color` marks a verdict red when B got worse and green when it got better (a terminal
    without NO_COLOR only)."""
    if fmt == "json":
        return dumps_pretty(comparison)
    results = comparison["results"]
    if not results:
        return "no metric has samples on both sides"
    # Before the table, so that nobody reads a verdict of a running run without it.
    out = [f"INTERIM: {note}" for note in comparison.get("interim_notes") or []]
    out += [f"FINAL: {note}" for note in comparison.get("final_notes") or []]
    out += [""] if out else []
    out += _arms_lines(results)
    heading = comparison.get("interval_heading") or interval_heading(results)
    out.append(_metrics_table(results, heading, fmt, width, color and fmt == "table"))
    out.append("")
    out += _sentences(results)
    out += _judge_lines(results)
    if len(results) == 1 and results[0].get("paired"):
        out += _moved_lines(results[0]["paired"], fmt, width)
    out += _drift_lines(comparison.get("retrieval_drift") or [])
    out += _notes(comparison, results)
    return wrap("\n".join(out), fmt, width)


def _arms_lines(results: list[dict[str, Any]]) -> list[str]:
    """`A = NAME (where)` and `B = ...`; arm by arm, the runs and the pairs compared."""
    first = results[0]
    if "pair" not in first:
        return [
            f"A = {first['a']['name']} ({renamed(str(first['a']['label']))}){_classified(first['a'])}",
            f"B = {first['b']['name']} ({renamed(str(first['b']['label']))}){_classified(first['b'])}",
            "",
        ]
    run_a, run_b = (renamed(str(parse_selector(first[side]["label"])[0])) for side in ("a", "b"))
    return [
        f"A = {first['a']['name']} ({run_a}){_classified(first['a'])}",
        f"B = {first['b']['name']} ({run_b}){_classified(first['b'])}",
        f"arm by arm: {', '.join(dict.fromkeys(r['pair'] for r in results))} (each arm of A against the "
        "arm of the same name in B)",
        "",
    ]


def _metrics_table(
    results: list[dict[str, Any]], heading: str, fmt: str, width: int | None, color: bool
) -> str:
    """One row per compared metric (per pair, arm by arm); the least needed columns go first."""
    by_pair = "pair" in results[0]
    family = len(results) > 1
    rows = []
    for r in results:
        a, b = r["a"], r["b"]
        cells = r["words"]["cells"]
        rows.append(
            [
                *([r["pair"]] if by_pair else []),
                r["metric"],
                f"{a['k']}/{a['n']}",
                percent(a["rate"]),
                f"{b['k']}/{b['n']}",
                percent(b["rate"]),
                cells["estimate"],
                cells["interval"],
                cells["pooled"],
                p_text(r["p_value"]),
                *([p_text(r["p_adjusted"])] if family else []),
                p_text(r["p_boschloo"]),
                r["design"],
                f"{a['errors']}/{b['errors']}",
                _verdict_cell(r, color),
            ]
        )
    headers = [
        *(["arm"] if by_pair else []),
        "metric",
        "A k/n",
        "A",
        "B k/n",
        "B",
        "B-A (pts)",
        heading,
        "pooled, Newcombe",
        "p",
        *(["p adjusted"] if family else []),
        "Boschloo p",
        "design",
        "failed A/B",
        "verdict",
    ]
    # Least needed first; in a family the adjusted p decides, so the raw one may go too.
    optional = (
        "Boschloo p",
        "pooled, Newcombe",
        "design",
        ("A", "B"),
        "failed A/B",
        *(["p"] if family else []),
        # Below 70 columns: the sentences under the table carry the difference and the p.
        "B-A (pts)",
        "p adjusted" if family else "p",
    )
    return table(rows, headers, fmt, optional=optional, width=width)


def _sentences(results: list[dict[str, Any]]) -> list[str]:
    """Each verdict's sentence (and whether it would generalise), then what CI and p adjusted mean."""
    by_pair = "pair" in results[0]
    family = len(results) > 1
    out = []
    for r in results:
        prefix = f"{r['pair']}: " if by_pair else ""
        out.append(prefix + r["words"]["sentence"])
        if r["words"]["generalise"]:
            out.append(prefix + (f"{r['metric']}: " if family else "") + r["words"]["generalise"])
    out.append(
        "CI: B - A on these questions (it covers the difference and excludes 0 exactly when the verdict "
        "is decided); pooled, Newcombe: descriptive, not the test's"
        + (
            "; adjusted: each row's interval is at the level its adjusted p decides at (alpha x p / "
            "p adjusted; the JSON's effect.confidence)"
            if any(is_adjusted(r) for r in results)
            else ""
        )
    )
    if family:
        method = results[0].get("adjustment") or "Holm"
        how = (
            "Westfall-Young min-P over relabellings of each case's samples, which counts metrics that "
            "read the same outputs once"
            if method != "Holm"
            else "Holm"
        )
        out.append(
            f"p adjusted: p-values adjusted for comparing {len(results)} {'rows' if by_pair else 'metrics'} "
            f"at once ({how}); the verdicts and --fail-if-worse use them, so the chance of any false alarm "
            "stays at alpha"
        )
    return out


def _judge_lines(results: list[dict[str, Any]]) -> list[str]:
    """Beside a judged metric's verdict: the judge's errors and what they do to the effect."""
    out = []
    for r in results:
        judge = r.get("judge")
        if not judge:
            continue
        prefix = f"{r['pair']}: " if "pair" in r else ""
        out += ["", *(prefix + line for line in judge["words"])]
        if judge["warning"]:
            out.append(f"warning: {prefix}{judge['warning']}")
    return out


def _moved_lines(paired: dict[str, Any], fmt: str, width: int | None) -> list[str]:
    """One metric, paired: the cases whose rate moved between A and B."""
    moved = [c for c in paired["cases"] if c["diff"] != 0]
    if not moved:
        return ["", "no case moved"]
    rows = [
        [c["case_id"], f"{c['a'][0]}/{c['a'][1]}", f"{c['b'][0]}/{c['b'][1]}", points(c["diff"])]
        for c in moved
    ]
    return [
        "",
        f"cases that moved ({len(moved)} of {len(paired['cases'])}):",
        table(rows, ["case", "A", "B", "B-A (pts)"], fmt, width=width),
    ]


def _drift_lines(drift: list[dict[str, Any]]) -> list[str]:
    """Each case that got different passages in B's run than in A's."""
    out = []
    for change in drift:
        parts = []
        if change["added"]:
            parts.append("added " + ", ".join(change["added"]))
        if change["dropped"]:
            parts.append("dropped " + ", ".join(change["dropped"]))
        if change["moved"]:
            parts.append("moved " + ", ".join(f"{m['id']} {m['from']}→{m['to']}" for m in change["moved"]))
        out.append(
            f"retrieval drift: {change['case_id']} got different passages in B's run: {'; '.join(parts)}"
        )
    return out


def _notes(comparison: dict[str, Any], results: list[dict[str, Any]]) -> list[str]:
    """Every note once, then the warnings."""
    by_pair = "pair" in results[0]
    # Arm by arm, a pair's note names its pair; the arms left without a partner are the family's.
    unpaired = set(comparison.get("not_compared") or [])
    notes = dict.fromkeys(
        f"{r['pair']}: {n}" if by_pair and n not in unpaired else n
        for r in results
        for n in r.get("notes", [])
    )
    return (
        [f"note: {note}" for note in notes]
        + [f"warning: {warning}" for warning in comparison.get("warnings") or []]
        + [f"warning: interim: {note}" for note in comparison.get("interim_notes") or []]
    )


def failure_line(result: dict[str, Any]) -> str:
    """The `FAIL:` line of --fail-if-worse (built with the result's words)."""
    return result["words"]["failure"]
