"""Comparing two arms: is the difference larger than the sample can produce by chance?

Design (DESIGN.md): when both arms ran the same cases with the same repeats (paired), the
question effects cancel in the difference and the verdict uses Newcombe's interval on the raw
counts; otherwise it uses Newcombe's formula over each arm's cluster-adjusted Wilson limits.
"""

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import InputError
from .report import METRIC_NAMES, build_report, metric_from_cases
from .stats import boschloo_p, n_per_arm, newcombe, newcombe_from_limits, t_interval

# Whether a higher rate is the better outcome, for `--fail-if-worse`.
HIGHER_IS_BETTER = {
    "header_present": True,
    "header_absent": False,
    "header_misplaced": False,
    "declared_correct": True,
    "refusal_recall": True,
    "false_refusal": False,
    "retrieval_hit": True,
}


@dataclass(frozen=True)
class Side:
    """One arm's counts for one metric: per case (successes, trials), in case order."""

    label: str
    per_case: dict[str, tuple[int, int]]
    questions: dict[str, str] | None = None
    probeset_sha256: str | None = None
    probeset_cases: int | None = None


def _metric_summary(side: Side) -> dict[str, Any]:
    summary = metric_from_cases(side.per_case)
    summary.pop("per_case")
    return {"label": side.label, **summary, "cases": len(side.per_case)}


def is_paired(a: Side, b: Side) -> bool:
    """Same cases, same questions, same repeats per case."""
    if list(a.per_case) != list(b.per_case):
        return False
    if any(a.per_case[c][1] != b.per_case[c][1] for c in a.per_case):
        return False
    if a.questions is not None and b.questions is not None:
        return all(a.questions.get(c) == b.questions.get(c) for c in a.per_case)
    return True


def compare_sides(a: Side, b: Side, metric: str = "header_present", exact: bool = True) -> dict[str, Any]:
    """DESIGN.md's compare object for A - B; `exact=False` skips Boschloo (for simulations)."""
    sa, sb = _metric_summary(a), _metric_summary(b)
    if not sa["n"] or not sb["n"]:
        raise InputError(
            f"metric {metric}: no samples to compare ({sa['n']} vs {sb['n']}); "
            "declared_correct, refusal_recall and false_refusal need cases with `expect`, "
            "retrieval_hit needs `must_retrieve`"
        )
    diff = sa["rate"] - sb["rate"]
    raw = newcombe(sa["k"], sa["n"], sb["k"], sb["n"])
    eff = newcombe_from_limits(sa["rate"], *sa["wilson_eff"], sb["rate"], *sb["wilson_eff"])
    paired = is_paired(a, b)
    paired_view = None
    if paired:
        cases = []
        for case_id, (ka, na) in a.per_case.items():
            kb, nb = b.per_case[case_id]
            cases.append({"case_id": case_id, "a": [ka, na], "b": [kb, nb], "diff": ka / na - kb / nb})
        diffs = [c["diff"] for c in cases]
        interval = t_interval(diffs)
        paired_view = {
            "cases": cases,
            "mean_diff": sum(diffs) / len(diffs),
            "t_interval": list(interval) if interval else None,
        }
    deciding = raw if paired else eff
    if deciding[0] > 0:
        verdict = "A>B"
    elif deciding[1] < 0:
        verdict = "B>A"
    else:
        verdict = "indistinguishable"
    result = {
        "metric": metric,
        "design": "paired" if paired else "unpaired",
        "a": sa,
        "b": sb,
        "diff": diff,
        "newcombe": list(raw),
        "newcombe_eff": list(eff),
        "p_boschloo": boschloo_p(sa["k"], sa["n"], sb["k"], sb["n"]) if exact else None,
        "paired": paired_view,
        "verdict": verdict,
        "n_needed_per_arm": n_per_arm(sa["rate"], sb["rate"]) if diff != 0 else None,
    }
    notes = []
    if a.probeset_sha256 and b.probeset_sha256 and a.probeset_sha256 != b.probeset_sha256:
        notes.append("the two sides ran different probe sets" + ("" if paired else ": no paired view"))
    elif not paired:
        notes.append("the two sides did not run the same cases with the same repeats: no paired view")
    result["notes"] = notes
    return result


def worse(result: dict[str, Any]) -> bool:
    """B is reliably worse than A for this metric."""
    higher_better = HIGHER_IS_BETTER.get(result["metric"], True)
    return result["verdict"] == ("A>B" if higher_better else "B>A")


# -- selecting arms ------------------------------------------------------------------------


def parse_selector(text: str) -> tuple[Path, dict[str, str]]:
    """`RUN`, `RUN#prompt=NAME`, `RUN#model=SPEC` or `RUN#prompt=NAME,model=SPEC`."""
    run, _, selector = text.partition("#")
    filters: dict[str, str] = {}
    if selector:
        # A model spec may hold commas only after '@' (URLs rarely do); split on ",prompt=" etc.
        parts = []
        for piece in selector.split(","):
            if parts and "=" not in piece.split("@")[0]:
                parts[-1] += "," + piece
            else:
                parts.append(piece)
        for part in parts:
            key, eq, value = part.partition("=")
            if not eq or key not in ("prompt", "model") or not value:
                raise InputError(f"{text}: selector must be prompt=NAME and/or model=SPEC, got {part!r}")
            filters[key] = value
    return Path(run), filters


def _arm_list(report: dict[str, Any]) -> str:
    return "; ".join(f"prompt={a['prompt']},model={a['model']}" for a in report["arms"])


def load_side(text: str, metric: str) -> tuple[Side, dict[str, Any]]:
    """The arm a selector names, as a Side for `metric`, plus its run's report."""
    run_dir, filters = parse_selector(text)
    report = build_report(run_dir)
    arms = [a for a in report["arms"] if all(a[k] == v for k, v in filters.items())]
    if len(arms) != 1:
        problem = "matches no arm" if not arms else f"matches {len(arms)} arms"
        raise InputError(f"{text}: {problem}; the run has: {_arm_list(report)}")
    (arm,) = arms
    recorded = arm["metrics"].get(metric, {"per_case": {}})
    per_case = {c: (k, n) for c, (k, n) in recorded["per_case"].items()}
    side = Side(
        label=text,
        per_case=per_case,
        questions=report["questions"],
        probeset_sha256=report["probeset_sha256"],
        probeset_cases=len(report["questions"]),
    )
    return side, report


def compare_runs(a: str, b: str, metrics: list[str]) -> list[dict[str, Any]]:
    """Compare two selected arms on each metric."""
    for metric in metrics:
        if metric not in METRIC_NAMES:
            raise InputError(f"unknown metric {metric!r} (known: {', '.join(METRIC_NAMES)})")
    results = []
    for metric in metrics:
        side_a, _ = load_side(a, metric)
        side_b, _ = load_side(b, metric)
        empty = not side_a.per_case or not side_b.per_case
        if empty and len(metrics) > 1:
            continue  # --all: e.g. no case has `expect`, so declared_correct has no samples
        results.append(compare_sides(side_a, side_b, metric))
    return results


# -- words ---------------------------------------------------------------------------------


def _points(value: float) -> str:
    return f"{100 * value:+.0f}"


def sentence(result: dict[str, Any], cases: int | None = None) -> str:
    """The verdict in words a prompt engineer acts on."""
    a, b = result["a"], result["b"]
    interval = result["newcombe"] if result["design"] == "paired" else result["newcombe_eff"]
    counts = f"{a['k']}/{a['n']} vs {b['k']}/{b['n']}"
    ci = f"95% CI {_points(interval[0])} to {_points(interval[1])}"
    text = f"{result['verdict']}: {counts} (difference {_points(result['diff'])} points, {ci})"
    if result["verdict"] != "indistinguishable":
        where = "on these questions" if result["design"] == "paired" else "beyond question-to-question spread"
        return text + f"; the difference is larger than this sample produces by chance ({where})"
    needed = result["n_needed_per_arm"]
    if needed is None:
        return text + "; the observed rates are equal, so there is no difference to size a probe for"
    text += (
        f"; to detect a {abs(100 * result['diff']):.0f}-point difference you need about "
        f"{needed} samples per arm"
    )
    if cases:
        text += (
            f" ({math.ceil(needed / cases)} repeats of this {cases}-case probe set, "
            "more if its cases are clustered)"
        )
    return text


def generalise_sentence(result: dict[str, Any]) -> str | None:
    paired = result.get("paired")
    if not paired or paired["t_interval"] is None:
        return None
    lo, hi = paired["t_interval"]
    g = len(paired["cases"])
    span = (
        f"mean per-case difference {_points(paired['mean_diff'])} points, "
        f"95% t interval {_points(lo)} to {_points(hi)} over {g} cases"
    )
    if lo > 0 or hi < 0:
        return f"would it generalise: likely; {span} excludes 0, so other questions like these would move too"
    return (
        f"would it generalise: not shown; {span} includes 0, so the change may be specific to these questions"
    )


def _pct(value: float) -> str:
    return f"{100 * value:.1f}%"


def render_comparison(results: list[dict[str, Any]]) -> str:
    """A table of every compared metric, then the verdicts in words and the cases that moved."""
    from tabulate import tabulate

    first = results[0]
    out = [f"A = {first['a']['label']}", f"B = {first['b']['label']}", ""]
    rows = []
    for r in results:
        a, b = r["a"], r["b"]
        deciding = "newcombe" if r["design"] == "paired" else "newcombe_eff"
        rows.append(
            [
                r["metric"],
                f"{a['k']}/{a['n']}",
                _pct(a["rate"]),
                f"{b['k']}/{b['n']}",
                _pct(b["rate"]),
                f"{_points(r['diff'])}",
                f"{_points(r[deciding][0])} to {_points(r[deciding][1])}",
                f"{r['p_boschloo']:.3g}" if r["p_boschloo"] is not None else "-",
                r["design"],
                r["verdict"],
            ]
        )
    out.append(
        tabulate(
            rows,
            headers=[
                "metric",
                "A k/n",
                "A",
                "B k/n",
                "B",
                "diff (pts)",
                "95% CI (pts)",
                "Boschloo p",
                "design",
                "verdict",
            ],
        )
    )
    out.append("")
    cases = first["a"]["cases"]  # "N repeats of this C-case probe set" uses side A's cases
    for r in results:
        prefix = f"{r['metric']}: " if len(results) > 1 else ""
        out.append(prefix + sentence(r, cases))
        generalise = generalise_sentence(r)
        if generalise:
            out.append(prefix + generalise)
    if len(results) == 1 and first.get("paired"):
        moved = [c for c in first["paired"]["cases"] if c["diff"] != 0]
        out.append("")
        if moved:
            out.append(f"cases that moved ({len(moved)} of {len(first['paired']['cases'])}):")
            out.append(
                tabulate(
                    [
                        [
                            c["case_id"],
                            f"{c['a'][0]}/{c['a'][1]}",
                            f"{c['b'][0]}/{c['b'][1]}",
                            _points(c["diff"]),
                        ]
                        for c in moved
                    ],
                    headers=["case", "A", "B", "diff (pts)"],
                )
            )
        else:
            out.append("no case moved")
    for note in first.get("notes", []):
        out.append(f"note: {note}")
    return "\n".join(out)
