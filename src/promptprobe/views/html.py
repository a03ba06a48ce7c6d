"""`--format html`: one self-contained HTML file (no network, no script) to look at a run or a
comparison. It renders the same view objects as the live viewer (`probe view`) with the same
template pieces (templates/_macros.j2): the run overview (views/overview.py: report, verdicts in
words, case x arm grid), a forest plot per metric (SVG), the phrases failing outputs share, and
every case's outputs side by side, identical outputs grouped with their counts.

Model outputs are untrusted text: the templates escape everything (Jinja2 autoescape) and the
only markup around an output is built from escaped pieces (views/outputs.py).
"""

from pathlib import Path
from typing import Any

from ..counts import CountsTable, build_counts
from .outputs import Scanned, inline_segments, page_of
from .overview import arm_name, run_overview, side_by_side
from .report import sequential_sentence

PLOT_WIDTH = 520
ROW_HEIGHT = 36
LABEL_CHARS = 64  # what fits above a bar at 12 px in PLOT_WIDTH; longer labels lose their middle
GROUPS_PER_CELL = 10


def environment() -> Any:
    """The Jinja2 environment of every page: autoescaped, templates from the package."""
    from jinja2 import Environment, PackageLoader, select_autoescape

    return Environment(
        loader=PackageLoader("promptprobe.views", "templates"),
        autoescape=select_autoescape(["html", "j2"], default=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )


def shorten(label: str, limit: int = LABEL_CHARS) -> str:
    """A label that fits: its start and end kept, its middle replaced by an ellipsis."""
    if len(label) <= limit:
        return label
    keep = limit - 1
    return label[: keep - keep // 3] + "…" + label[len(label) - keep // 3 :]


def forest(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """An SVG forest plot: per row its label above a mark at the rate, a thick line for Wilson and
    a thin one for the adjusted interval; labels start at the left edge, so none is cut off."""
    left, right = 16, PLOT_WIDTH - 20
    width = right - left

    def x(value: float) -> float:
        return round(left + value * width, 2)

    marks = []
    for i, row in enumerate(rows):
        y = 30 + i * ROW_HEIGHT
        marks.append(
            {
                **row,
                "short": shorten(row["label"]),
                "y": y,
                "x": x(row["rate"]),
                "wilson_x": [x(row["wilson"][0]), x(row["wilson"][1])],
                "eff_x": [x(row["wilson_eff"][0]), x(row["wilson_eff"][1])],
                "lo": round(100 * row["wilson_eff"][0], 1),
                "hi": round(100 * row["wilson_eff"][1], 1),
                "wlo": round(100 * row["wilson"][0], 1),
                "whi": round(100 * row["wilson"][1], 1),
                "percent": round(100 * row["rate"], 1),
            }
        )
    ticks = [
        {"x": x(t / 100), "label": f"{t}%", "anchor": {0: "start", 100: "end"}.get(t, "middle")}
        for t in range(0, 101, 25)
    ]
    return {
        "marks": marks,
        "ticks": ticks,
        "height": 24 + len(rows) * ROW_HEIGHT,
        "width": PLOT_WIDTH,
        "left": left,
        "right": right,
    }


def plots_of(overview: dict[str, Any]) -> list[dict[str, Any]]:
    """A forest plot per metric, one row per arm, from the overview's report."""
    plots = []
    names = {(a["prompt"], a["model"]): a["name"] for a in overview["arms"]}
    for name, rule in overview["metrics"].items():
        rows = [
            {"label": names[(arm["prompt"], arm["model"])], **arm["metrics"][name]}
            for arm in overview["report"]["arms"]
            if name in arm["metrics"]
        ]
        if rows:
            plots.append(
                {
                    "metric": name,
                    "higher_is_better": rule["higher_is_better"],
                    "description": rule["description"],
                    "plot": forest(rows),
                }
            )
    return plots


def report_html(counts: CountsTable | str | Path) -> str:
    """The HTML report of a run."""
    from .why import explain

    if not isinstance(counts, CountsTable):
        counts = build_counts(counts)
    overview = run_overview(counts)
    report = overview["report"]
    whys = [
        explain(f"{counts.run}#{arm['selector']}", "header_present", counts=counts)
        for arm in overview["arms"]
    ]
    for why, arm in zip(whys, overview["arms"], strict=True):
        why["arm"] = arm["name"]
    samples = Scanned(counts)
    markers = counts.settings.header.markers
    cases = []
    for case in counts.probeset.cases:
        sides = [
            page_of(
                counts.run,
                samples.groups(a.prompt, a.model, case.id),
                markers,
                1,
                GROUPS_PER_CELL,
            )
            for a in counts.arms
        ]
        if any(side["samples"] for side in sides):
            cases.append(
                {
                    "case_id": case.id,
                    "question": case.question,
                    "question_segments": inline_segments(case.question),
                    "sides": sides,
                }
            )
    return (
        environment()
        .get_template("report.html.j2")
        .render(
            title=f"promptprobe report: {report['probeset']}",
            overview=overview,
            sequential=sequential_sentence(report["sequential"]) if report.get("sequential") else None,
            plots=plots_of(overview),
            whys=whys,
            cases=cases,
            names=[arm["name"] for arm in overview["arms"]],
            comparison=None,
        )
    )


def compare_html(a: str, b: str, comparison: dict[str, Any]) -> str:
    """The HTML view of `probe compare`: verdicts in words, forest plots of A and B, and both
    arms' outputs side by side per case, discordant cases first."""
    from ..comparison.selectors import parse_selector, select_arm
    from ..comparison.words import interval_heading

    run_a, _ = parse_selector(a)
    counts_a = build_counts(run_a)
    run_b, _ = parse_selector(b)
    counts_b = counts_a if run_b.resolve() == run_a.resolve() else build_counts(run_b)
    arm_a, arm_b = select_arm(a, counts_a), select_arm(b, counts_b)
    results = comparison["results"]
    summary = {
        "a": results[0]["a"]["name"] if results else arm_name(None, arm_a.prompt, arm_a.model, counts_a.arms),
        "b": results[0]["b"]["name"] if results else arm_name(None, arm_b.prompt, arm_b.model, counts_b.arms),
        "results": results,
        "interval_heading": comparison.get("interval_heading") or interval_heading(results),
        "retrieval_drift": comparison.get("retrieval_drift") or [],
        "warnings": comparison.get("warnings") or [],
    }
    samples_a = Scanned(counts_a)
    samples_b = samples_a if counts_b is counts_a else Scanned(counts_b)
    metric = results[0]["metric"] if results else "header_present"
    view = side_by_side(
        counts_a, arm_a, samples_a, counts_b, arm_b, samples_b, metric,
        per_page=None, groups_per_side=GROUPS_PER_CELL, summary=summary,
    )  # fmt: skip
    for result in view["verdicts"]["results"]:
        result["plot"] = forest(
            [
                {**result["a"], "label": f"A: {result['a']['name']}"},
                {**result["b"], "label": f"B: {result['b']['name']}"},
            ]
        )
    view["a"]["selector"], view["b"]["selector"] = a, b
    cases = [dict(case, sides=[case["a"], case["b"]]) for case in view["cases"]]
    return (
        environment()
        .get_template("report.html.j2")
        .render(
            title="promptprobe comparison",
            overview=None,
            sequential=None,
            plots=[],
            whys=[],
            cases=cases,
            names=[f"A: {view['a']['name']}", f"B: {view['b']['name']}"],
            comparison=view,
        )
    )
