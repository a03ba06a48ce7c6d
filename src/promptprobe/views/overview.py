"""A run at a glance, the one view object that `probe report --format html` and the live viewer's
run page both render (and the viewer serves as JSON): the report (`probe report --json`), each arm
named, the verdicts of a two-arm run (`probe compare --all` of its two arms, in words), and the
case x arm grid of every metric. Side-by-side views of two arms are built here too
(`side_by_side`): the comparison, then each case's outputs of A and B, discordant cases first.

Renderers only lay these out: every number and word a reader sees is in the object.
"""

from typing import Any, Protocol

from ..comparison import compare_tables
from ..counts import ArmCounts, CountsTable
from .outputs import inline_segments, page_of
from .provenance import provenance
from .report import build_report

CASES_PER_PAGE = 10
GROUPS_PER_SIDE = 5


class Samples(Protocol):
    def groups(self, prompt: str, model: str, case_id: str) -> list[dict[str, Any]]: ...


def arm_name(name: str | None, prompt: str, model: str, arms: list[ArmCounts]) -> str:
    """An arm by its name when the run gave it one, else by what tells it from the run's other
    arms: its prompt and/or its model."""
    if name:
        return name
    varying = [k for k in ("prompt", "model") if len({getattr(a, k) for a in arms}) > 1] or ["prompt"]
    return ", ".join({"prompt": prompt, "model": model}[key] for key in varying)


def arms_of(counts: CountsTable) -> list[dict[str, Any]]:
    """Each arm of the run: its number (1, 2, ... as in the manifest), name, prompt and model."""
    named = {(a.get("prompt"), a.get("model")): a for a in counts.manifest.get("arms") or []}
    out = []
    for index, arm in enumerate(counts.arms, 1):
        given = (named.get((arm.prompt, arm.model)) or {}).get("name")
        out.append(
            {
                "index": index,
                "name": arm_name(
                    given if isinstance(given, str) else None, arm.prompt, arm.model, counts.arms
                ),
                "prompt": arm.prompt,
                "model": arm.model,
                "selector": f"prompt={arm.prompt},model={arm.model}",
            }
        )
    return out


def compare_arms(
    counts_a: CountsTable, arm_a: ArmCounts, counts_b: CountsTable, arm_b: ArmCounts, hints: bool = False
) -> dict[str, Any]:
    """`probe compare --all` of two arms (B against A): every metric with samples on both sides,
    one adjusted family, each verdict in words."""
    a = f"{counts_a.run}#prompt={arm_a.prompt},model={arm_a.model}"
    b = f"{counts_b.run}#prompt={arm_b.prompt},model={arm_b.model}"
    comparison = compare_tables(a, b, counts_a, counts_b, all_metrics=True, hints=hints)
    results = comparison["results"]
    return {
        "a": results[0]["a"]["name"] if results else "A",
        "b": results[0]["b"]["name"] if results else "B",
        "interim": comparison["interim"],
        "interim_notes": comparison["interim_notes"],
        "final_notes": comparison["final_notes"],
        "results": results,
        "interval_heading": comparison["interval_heading"],
        "retrieval_drift": comparison["retrieval_drift"],
        "warnings": comparison["warnings"],
    }


def headline(summary: dict[str, Any] | None) -> dict[str, Any] | None:
    """A two-arm run's verdict in a few words: its first metric's (the runs list's column)."""
    if not summary or not summary["results"]:
        return None
    first = summary["results"][0]
    words = first["words"]
    return {
        "metric": first["metric"],
        "verdict": first["verdict"],
        "kind": words["kind"],
        "tone": words["tone"],
        "interim": first["interim"],
        "text": words["badge"],
        "short": words["verdict"],
    }


def run_headline(counts: CountsTable) -> dict[str, Any] | None:
    """The headline verdict of a run of exactly two arms with samples (None otherwise)."""
    if len(counts.arms) != 2 or not counts.recorded:
        return None
    return headline(compare_arms(counts, counts.arms[0], counts, counts.arms[1]))


def grid(counts: CountsTable) -> list[dict[str, Any]]:
    """Per metric, per case, per arm: successes, trials and failed samples (None: no sample)."""
    grids = []
    for name, rule in counts.metrics.items():
        if not any(arm.metrics.get(name) for arm in counts.arms):
            continue
        rows = []
        for case in counts.probeset.cases:
            cells: list[dict[str, Any] | None] = []
            for arm in counts.arms:
                cell = arm.metrics.get(name, {}).get(case.id)
                if cell is None:
                    cells.append(None)
                    continue
                k, n, errors = cell
                rate = k / n if n else 0.0
                good = rate if rule.higher_is_better else 1 - rate
                cells.append(
                    {
                        "k": k,
                        "n": n,
                        "errors": errors,
                        "rate": rate,
                        "good": good,
                        # What a page shows of the cell: its rate, and a hue from red to green
                        # (none for a cell without a sample, which is neither).
                        "shown": f"{round(100 * rate)}%" if n else "no sample",
                        "hue": round(120 * good) if n else None,
                    }
                )
            if any(cells):
                rows.append({"case_id": case.id, "cells": cells})
        grids.append({"metric": name, "higher_is_better": rule.higher_is_better, "rows": rows})
    return grids


def run_overview(counts: CountsTable, verdicts: bool = True) -> dict[str, Any]:
    """The run page: report, arms, verdicts (two arms; `verdicts=False`: none yet), grid."""
    report = build_report(counts)
    arms = arms_of(counts)
    summary = None
    if verdicts and len(counts.arms) == 2 and counts.recorded:
        summary = compare_arms(counts, counts.arms[0], counts, counts.arms[1])
    return {
        "id": counts.run.name,
        "report": report,
        "arms": arms,
        "cases": [{"case_id": c.id, "question": c.question} for c in counts.probeset.cases],
        "verdicts": summary,
        "grid": grid(counts),
        "provenance": provenance(counts, names={a["index"]: a["name"] for a in arms}),
        "metrics": {
            name: {"higher_is_better": rule.higher_is_better, "description": rule.description}
            for name, rule in counts.metrics.items()
        },
    }


def discordant_order(result: dict[str, Any] | None, case_ids: list[str]) -> list[dict[str, Any]]:
    """The cases, those where A fails and B passes first (B better on the metric, most first), then
    the reverse, then the rest in probe-set order; each with its side ("b", "a" or None)."""
    per_case = {c["case_id"]: c for c in ((result or {}).get("paired") or {}).get("cases", [])}
    higher = (result or {}).get("higher_is_better", True)
    rows = []
    for position, case_id in enumerate(case_ids):
        moved = per_case.get(case_id)
        better = 0.0 if moved is None else (moved["diff"] if higher else -moved["diff"])
        side = "b" if better > 0 else ("a" if better < 0 else None)
        rank = 0 if side == "b" else (1 if side == "a" else 2)
        rows.append((rank, -abs(better), position, case_id, side, moved))
    rows.sort()
    return [{"case_id": case_id, "better": side, "counts": moved} for _, _, _, case_id, side, moved in rows]


def side_by_side(
    counts_a: CountsTable,
    arm_a: ArmCounts,
    samples_a: Samples,
    counts_b: CountsTable,
    arm_b: ArmCounts,
    samples_b: Samples,
    metric: str = "header_present",
    page: int = 1,
    per_page: int | None = CASES_PER_PAGE,
    groups_per_side: int | None = GROUPS_PER_SIDE,
    hints: bool = True,
    summary: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Two arms (of one run or two): the verdict table, then per case A's and B's outputs
    grouped by identical text, discordant cases first on `metric` (A fails and B passes, then the
    reverse). `per_page` None: every case on one page; `groups_per_side` None: every group;
    `summary`: the verdicts when already compared (else every metric, as `verdicts`)."""
    summary = summary or compare_arms(counts_a, arm_a, counts_b, arm_b, hints=hints)
    chosen = next((r for r in summary["results"] if r["metric"] == metric), None)
    questions_a = {c.id: c.question for c in counts_a.probeset.cases}
    questions_b = {c.id: c.question for c in counts_b.probeset.cases}
    case_ids = list(dict.fromkeys([*questions_a, *questions_b]))
    ordered = discordant_order(chosen, case_ids)
    pages = 1 if per_page is None else max(1, -(-len(ordered) // per_page))
    page = min(max(1, page), pages)
    shown = ordered if per_page is None else ordered[(page - 1) * per_page : page * per_page]
    size = groups_per_side or 10**9
    markers_a = counts_a.settings.header.markers
    markers_b = counts_b.settings.header.markers
    cases = []
    for row in shown:
        case_id = row["case_id"]
        side_a = page_of(
            counts_a.run, samples_a.groups(arm_a.prompt, arm_a.model, case_id), markers_a, 1, size
        )
        side_b = page_of(
            counts_b.run, samples_b.groups(arm_b.prompt, arm_b.model, case_id), markers_b, 1, size
        )
        question = questions_a.get(case_id, questions_b.get(case_id))
        cases.append(
            {
                **row,
                "question": question,
                "question_segments": inline_segments(question) if question is not None else [],
                "a": side_a,
                "b": side_b,
            }
        )
    return {
        "a": {
            "run": counts_a.run.name,
            "arm": counts_a.arms.index(arm_a) + 1,
            "name": summary["a"],
            "prompt": arm_a.prompt,
            "model": arm_a.model,
        },
        "b": {
            "run": counts_b.run.name,
            "arm": counts_b.arms.index(arm_b) + 1,
            "name": summary["b"],
            "prompt": arm_b.prompt,
            "model": arm_b.model,
        },
        "metric": metric,
        "metrics": [r["metric"] for r in summary["results"]],
        "verdicts": summary,
        "discordant": {
            "b_better": sum(1 for r in ordered if r["better"] == "b"),
            "a_better": sum(1 for r in ordered if r["better"] == "a"),
        },
        "page": page,
        "pages": pages,
        "cases": cases,
    }
