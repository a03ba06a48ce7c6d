"""`--format html`: one self-contained HTML file (no network, no script) to look at a run or a
comparison: a forest plot per metric (SVG), the verdict in words, a case x arm grid coloured
by rate, the phrases that failing outputs share, and every case's raw outputs side by side.

Model outputs are untrusted text: the template escapes everything (Jinja2 autoescape) and the
only markup around an output is built from escaped pieces (the visible-character rendering and
the highlighted marker).
"""

import re
from pathlib import Path
from typing import Any

from ..counts import CountsTable, build_counts, merged_samples
from .report import build_report, sequential_sentence
from .show import visible

PLOT_WIDTH = 520
ROW_HEIGHT = 26
MAX_OUTPUTS_PER_CELL = 10


def _environment() -> Any:
    from jinja2 import Environment, PackageLoader, select_autoescape

    return Environment(
        loader=PackageLoader("promptprobe.views", "templates"),
        autoescape=select_autoescape(["html", "j2"], default=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )


def _forest(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """An SVG forest plot: per row a mark at the rate, a thick line for Wilson, a thin one adjusted."""
    left, width = 200, PLOT_WIDTH - 220

    def x(value: float) -> float:
        return round(left + value * width, 2)

    marks = []
    for i, row in enumerate(rows):
        y = 20 + i * ROW_HEIGHT
        marks.append(
            {
                **row,
                "y": y,
                "x": x(row["rate"]),
                "wilson_x": [x(row["wilson"][0]), x(row["wilson"][1])],
                "eff_x": [x(row["wilson_eff"][0]), x(row["wilson_eff"][1])],
                "lo": round(100 * row["wilson_eff"][0], 1),
                "hi": round(100 * row["wilson_eff"][1], 1),
                "wlo": round(100 * row["wilson"][0], 1),
                "whi": round(100 * row["wilson"][1], 1),
            }
        )
    ticks = [{"x": x(t / 100), "label": f"{t}%"} for t in range(0, 101, 25)]
    return {
        "marks": marks,
        "ticks": ticks,
        "height": 30 + len(rows) * ROW_HEIGHT,
        "width": PLOT_WIDTH,
        "left": left,
        "right": left + width,
    }


# What visible() writes for an invisible character, and the ASCII label the page draws instead:
# the Unicode control pictures (␍, ␄) are empty boxes in many browsers' default fonts.
INVISIBLE = re.compile(r"␍|␄|→|·+|⟨[^⟩\n]*⟩")
LABELS = {"␍": "CR", "␄": "no newline at end", "→": "TAB"}


def _segments(text: str, markers: tuple[str, ...]) -> list[tuple[str, str]]:
    """The output made visible, cut into (text, kind) pieces for the template to escape: kind
    "marker" (a header marker, highlighted), "inv" (an invisible character's label) or "text"."""
    shown = visible(text)
    pieces: list[tuple[str, str]] = []
    for part, kind in _markers(shown, markers):
        if kind == "marker":
            pieces.append((part, kind))
            continue
        position = 0
        for match in INVISIBLE.finditer(part):
            pieces.append((part[position : match.start()], "text"))
            token = match.group(0)
            label = LABELS.get(token) or (token[1:-1] if token.startswith("⟨") else token)
            pieces.append((label, "inv"))
            position = match.end()
        pieces.append((part[position:], "text"))
    return [p for p in pieces if p[0]]


def _markers(shown: str, markers: tuple[str, ...]) -> list[tuple[str, str]]:
    pieces: list[tuple[str, str]] = []
    position = 0
    while True:
        hits = [(shown.find(m, position), m) for m in markers if shown.find(m, position) >= 0]
        if not hits:
            pieces.append((shown[position:], "text"))
            return pieces
        at, marker = min(hits)
        pieces.append((shown[position:at], "text"))
        pieces.append((marker, "marker"))
        position = at + len(marker)


def _grid(counts: CountsTable, metric: str) -> dict[str, Any]:
    rows = []
    for case in counts.probeset.cases:
        cells = []
        for arm in counts.arms:
            cell = arm.metrics.get(metric, {}).get(case.id)
            if cell is None:
                cells.append(None)
                continue
            k, n, errors = cell
            rate = k / n if n else 0.0
            good = rate if counts.metrics[metric].higher_is_better else 1 - rate
            cells.append(
                {"k": k, "n": n, "errors": errors, "rate": round(100 * rate), "hue": round(120 * good)}
            )
        if any(cells):
            rows.append({"case": case.id, "cells": cells})
    return {"metric": metric, "rows": rows}


def _outputs(counts: CountsTable, arm_keys: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """Per case, per arm: the raw outputs with their header class."""
    markers = counts.settings.header.markers
    by_case: dict[str, dict[tuple[str, str], list[dict[str, Any]]]] = {
        c.id: {key: [] for key in arm_keys} for c in counts.probeset.cases
    }
    for sample in merged_samples(counts.run, counts.classification, lambda message: None):
        key = (sample["prompt"], sample["model"])
        cell = by_case.get(sample["case_id"], {}).get(key)
        if cell is None or len(cell) >= MAX_OUTPUTS_PER_CELL:
            continue
        header = sample.get("header") or {}
        entry: dict[str, Any] = {
            "sample_id": sample["sample_id"],
            "header": "error" if sample.get("error") else header.get("header", "?"),
            "where": header.get("where"),
            "line": header.get("line"),
        }
        if sample.get("raw") is not None:
            text = (counts.run / sample["raw"]["path"]).read_bytes().decode("utf-8", "replace")
            entry["segments"] = _segments(text, markers)
        if sample.get("error"):
            entry["error"] = f"{sample['error']['kind']}: {sample['error']['message']}"
        cell.append(entry)
    cases = []
    for case in counts.probeset.cases:
        columns = [sorted(by_case[case.id][key], key=lambda e: e["sample_id"]) for key in arm_keys]
        if any(columns):
            cases.append({"case": case.id, "question": case.question, "columns": columns})
    return cases


def _arm_label(arm: dict[str, Any], varying: list[str]) -> str:
    """An arm named by what differs between the arms of the run: its prompt and/or its model."""
    return ", ".join(arm[key] for key in varying) or arm["prompt"]


def report_html(counts: CountsTable | str | Path) -> str:
    """The HTML report of a run."""
    from .why import explain

    if not isinstance(counts, CountsTable):
        counts = build_counts(counts)
    report = build_report(counts)
    varying = [k for k in ("prompt", "model") if len({a[k] for a in report["arms"]}) > 1] or ["prompt"]
    plots = []
    for name, rule in counts.metrics.items():
        rows = [
            {"label": _arm_label(arm, varying), **arm["metrics"][name]}
            for arm in report["arms"]
            if name in arm["metrics"]
        ]
        if rows:
            plots.append(
                {
                    "metric": name,
                    "higher_is_better": rule.higher_is_better,
                    "description": rule.description,
                    "plot": _forest(rows),
                }
            )
    summary = _summary(counts, report) if len(report["arms"]) == 2 else None
    whys = []
    for arm in report["arms"]:
        target = f"{counts.run}#prompt={arm['prompt']},model={arm['model']}"
        whys.append({"label": _arm_label(arm, varying), "why": explain(target, "header_present")})
    return (
        _environment()
        .get_template("report.html.j2")
        .render(
            title=f"promptprobe report: {report['probeset']}",
            report=report,
            sequential=sequential_sentence(report["sequential"]) if report.get("sequential") else None,
            plots=plots,
            grids=[
                _grid(counts, name)
                for name in counts.metrics
                if any(a.metrics.get(name) for a in counts.arms)
            ],
            arm_labels=[_arm_label(a, varying) for a in report["arms"]],
            outputs=_outputs(counts, [(a.prompt, a.model) for a in counts.arms]),
            whys=whys,
            comparison=None,
            summary=summary,
        )
    )


def _summary(counts: CountsTable, report: dict[str, Any]) -> dict[str, Any]:
    """A two-arm run's comparison on every metric, one badge each (second arm against the first)."""
    from .compare import compare_runs

    a, b = (f"{counts.run}#prompt={arm['prompt']},model={arm['model']}" for arm in report["arms"])
    results = compare_runs(a, b, all_metrics=True, hints=False)["results"]
    return {
        "a": results[0]["a"]["name"] if results else "A",
        "b": results[0]["b"]["name"] if results else "B",
        "badges": [
            {"kind": result["words"]["kind"], "text": result["words"]["badge"], "metric": result["metric"]}
            for result in results
        ],
    }


def compare_html(a: str, b: str, comparison: dict[str, Any]) -> str:
    """The HTML view of `probe compare`: verdicts in words, forest plots of A and B, and both
    arms' outputs side by side per case."""
    from .compare import parse_selector, select_arm

    results = []
    for result in comparison["results"]:
        rows = [
            {**result["a"], "label": f"A: {result['a']['name']}"},
            {**result["b"], "label": f"B: {result['b']['name']}"},
        ]
        words = result["words"]
        results.append(
            {
                **result,
                "sentence": words["sentence"],
                "generalise": words["generalise"],
                "badge": {"kind": words["kind"], "text": words["badge"]},
                "plot": _forest(rows),
            }
        )
    first = comparison["results"][0] if comparison["results"] else None
    names = (first["a"]["name"], first["b"]["name"]) if first else ("A", "B")
    run_a, _ = parse_selector(a)
    counts_a = build_counts(run_a)
    arm_a = select_arm(a, counts_a)
    run_b, _ = parse_selector(b)
    counts_b = counts_a if run_b.resolve() == run_a.resolve() else build_counts(run_b)
    arm_b = select_arm(b, counts_b)
    outputs_a = {c["case"]: c for c in _outputs(counts_a, [(arm_a.prompt, arm_a.model)])}
    outputs_b = {c["case"]: c for c in _outputs(counts_b, [(arm_b.prompt, arm_b.model)])}
    outputs = [
        {
            "case": case_id,
            "question": outputs_a.get(case_id, outputs_b.get(case_id))["question"],
            "columns": [
                outputs_a.get(case_id, {}).get("columns", [[]])[0],
                outputs_b.get(case_id, {}).get("columns", [[]])[0],
            ],
        }
        for case_id in dict.fromkeys([*outputs_a, *outputs_b])
    ]
    return (
        _environment()
        .get_template("report.html.j2")
        .render(
            title="promptprobe comparison",
            report=None,
            sequential=None,
            plots=[],
            grids=[],
            arm_labels=[f"A: {names[0]}", f"B: {names[1]}"],
            outputs=outputs,
            whys=[],
            comparison={
                "a": a,
                "b": b,
                "name_a": names[0],
                "name_b": names[1],
                "results": results,
                "drift": comparison.get("retrieval_drift") or [],
            },
            summary=None,
        )
    )
