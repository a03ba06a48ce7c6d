"""Comparing two arms: is B (the candidate) different from A (the baseline)?

Differences are B - A, so `B>A` sits beside a positive difference. The design decides the
test (see promptprobe.stats.verdict): paired when both sides asked the same set of questions
(any order, any repeats), unpaired otherwise; a sequential run's own decision when it stopped
on its rule. Newcombe's interval on the pooled counts is the effect size shown beside it;
Boschloo's exact p is shown where it is affordable and never decides.
"""

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..checks import METRICS
from ..counts import ArmCounts, CountsTable, build_counts
from ..errors import InputError
from ..jsonio import dumps_pretty
from ..stats.intervals import icc_anova, newcombe
from ..stats.planning import MAX_REPEATS, n_per_arm, paired_repeats, unpaired_repeats
from ..stats.tests import boschloo_affordable, boschloo_p
from ..stats.verdict import generalisation, paired_verdict, unpaired_verdict
from .report import metric_object
from .tables import table, wrap

HINT_TRIALS = 400  # simulated probes behind the repeats hint of an indistinguishable verdict


@dataclass(frozen=True)
class Side:
    """One arm's counts for one metric: per case [successes, trials, failures], in case order."""

    label: str
    per_case: dict[str, list[int]]
    questions: dict[str, str] | None = None
    run: str | None = None
    probeset_sha256: str | None = None


def is_paired(a: Side, b: Side) -> bool:
    """The same set of case ids with the same questions, in any order; repeats may differ."""
    if set(a.per_case) != set(b.per_case) or not a.per_case:
        return False
    if a.questions is not None and b.questions is not None:
        return all(a.questions.get(c) == b.questions.get(c) for c in a.per_case)
    return True


def _summary(side: Side, metric: str) -> dict[str, Any]:
    return {
        "label": side.label,
        **metric_object(side.per_case, METRICS[metric].higher_is_better),
        "cases": len(side.per_case),
    }


def compare_sides(
    a: Side, b: Side, metric: str = "header_present", alpha: float = 0.05, exact: bool = True
) -> dict[str, Any]:
    """The compare object for B - A on one metric (`exact=False` skips Boschloo)."""
    higher = METRICS[metric].higher_is_better
    sa, sb = _summary(a, metric), _summary(b, metric)
    if not sa["n"] or not sb["n"]:
        raise InputError(
            f"metric {metric}: no samples to compare ({sa['n']} vs {sb['n']}); "
            f"it counts only {METRICS[metric].description}"
        )
    diff = sb["rate"] - sa["rate"]
    paired = is_paired(a, b)
    notes: list[str] = []
    paired_view = None
    if paired:
        order = list(a.per_case)
        counts_a = [(a.per_case[c][0], a.per_case[c][1]) for c in order]
        counts_b = [(b.per_case[c][0], b.per_case[c][1]) for c in order]
        decision = paired_verdict(counts_a, counts_b, alpha)
        general = generalisation(counts_a, counts_b, alpha)
        paired_view = {
            "cases": [
                {"case_id": c, "a": list(ka), "b": list(kb), "diff": kb[0] / kb[1] - ka[0] / ka[1]}
                for c, ka, kb in zip(order, counts_a, counts_b, strict=True)
            ],
            "mean_diff": general.mean_diff,
            "interval": list(general.interval) if general.interval else None,
            "p_value": general.p_value,
            "test": "sign test over the cases that moved",
            "moved": general.up + general.down,
            "up": general.up,
            "down": general.down,
            "likely": general.likely,
        }
    else:
        decision = unpaired_verdict(
            [(c[0], c[1]) for c in a.per_case.values()], [(c[0], c[1]) for c in b.per_case.values()], alpha
        )
        if a.probeset_sha256 and b.probeset_sha256 and a.probeset_sha256 != b.probeset_sha256:
            notes.append("the two sides ran different probe sets: no paired view")
        else:
            notes.append("the two sides did not ask the same questions: no paired view")
    verdict = decision.verdict
    if sa["errors"] or sb["errors"]:
        notes.append(
            f"failed samples: A {sa['errors']} of {sa['n']}, B {sb['errors']} of {sb['n']}; each counts as "
            f"{'a miss' if higher else 'an event'} for {metric} (errors never flatter an arm)"
        )
    affordable = boschloo_affordable(sa["n"], sb["n"])
    if exact and not affordable:
        notes.append(
            "Boschloo's exact p is not computed at this size (it grows with n²); the verdict never used it"
        )
    result: dict[str, Any] = {
        "metric": metric,
        "design": "paired" if paired else "unpaired",
        "a": sa,
        "b": sb,
        "diff": diff,
        "newcombe": list(newcombe(sb["k"], sb["n"], sa["k"], sa["n"])),
        "p_boschloo": boschloo_p(sb["k"], sb["n"], sa["k"], sa["n"]) if exact else None,
        "test": decision.test,
        "p_value": decision.p_value,
        "paired": paired_view,
        "verdict": verdict,
        "higher_is_better": higher,
        "worse": verdict == ("A>B" if higher else "B>A"),
        "n_needed_per_arm": n_per_arm(sa["rate"], sb["rate"]) if diff != 0 else None,
        "repeats_needed": None,
        "notes": notes,
    }
    if verdict == "indistinguishable" and diff != 0 and exact:
        result["repeats_needed"] = _repeats_hint(a, b, sa["rate"], sb["rate"], alpha)
    return result


def _repeats_hint(a: Side, b: Side, rate_a: float, rate_b: float, alpha: float) -> dict[str, Any]:
    """Repeats of this probe set for 80% power at the observed difference, by design."""
    cases = len(a.per_case)
    iccs = [
        icc_anova([c[0] for c in s.per_case.values()], [c[1] for c in s.per_case.values()]) for s in (a, b)
    ]
    icc = sum(iccs) / 2
    ran = min(sum(c[1] for c in s.per_case.values()) for s in (a, b)) / cases
    # A run that already has MAX_REPEATS per case and cannot tell them apart needs more than that.
    paired = (
        paired_repeats(rate_a, rate_b, cases, icc, alpha, trials=HINT_TRIALS) if ran < MAX_REPEATS else None
    )
    unpaired = unpaired_repeats(rate_a, rate_b, cases, icc, alpha)
    return {
        "cases": cases,
        "icc": icc,
        "paired": paired.repeats if paired else None,
        "paired_power": paired.power if paired else None,
        "unpaired": unpaired.repeats,
        "unpaired_cases_needed": unpaired.cases_needed,
    }


# -- selecting arms ------------------------------------------------------------------------


def parse_selector(text: str) -> tuple[Path, dict[str, str]]:
    """`RUN`, `RUN#prompt=NAME`, `RUN#model=SPEC` or `RUN#prompt=NAME,model=SPEC`."""
    run, _, selector = text.partition("#")
    filters: dict[str, str] = {}
    if selector:
        # A model spec may hold commas only after '@' (URLs rarely do); split on ",prompt=" etc.
        parts: list[str] = []
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


def select_arm(text: str, counts: CountsTable) -> ArmCounts:
    _, filters = parse_selector(text)
    arms = [a for a in counts.arms if all(getattr(a, k) == v for k, v in filters.items())]
    if len(arms) != 1:
        problem = "matches no arm" if not arms else f"matches {len(arms)} arms"
        listing = "; ".join(a.label for a in counts.arms)
        raise InputError(f"{text}: {problem}; the run has: {listing}")
    return arms[0]


def side_of(text: str, counts: CountsTable, arm: ArmCounts, metric: str) -> Side:
    questions = {c.id: c.question for c in counts.probeset.cases}
    recorded = arm.metrics.get(metric, {})
    per_case = {c: recorded[c] for c in counts.case_order if c in recorded}  # probe-set order
    return Side(text, per_case, questions, str(counts.run), counts.probeset.sha256)


def drift(a: CountsTable, b: CountsTable) -> list[dict[str, Any]]:
    """Cases whose most frequent retrieval snapshot differs between two runs."""
    changes = []
    for case_id in a.case_order:
        snap_a, snap_b = a.snapshots.get(case_id), b.snapshots.get(case_id)
        if not snap_a or not snap_b:
            continue
        ids_a = list(Counter(snap_a).most_common(1)[0][0])
        ids_b = list(Counter(snap_b).most_common(1)[0][0])
        if ids_a == ids_b:
            continue
        moved = [
            {"id": i, "from": ids_a.index(i) + 1, "to": ids_b.index(i) + 1}
            for i in ids_a
            if i in ids_b and ids_a.index(i) != ids_b.index(i)
        ]
        changes.append(
            {
                "case_id": case_id,
                "added": [i for i in ids_b if i not in ids_a],
                "dropped": [i for i in ids_a if i not in ids_b],
                "moved": moved,
            }
        )
    return changes


def _sequential_note(counts: CountsTable, arm_a: ArmCounts, arm_b: ArmCounts, result: dict[str, Any]) -> None:
    """On a run that stopped on the sequential rule, that rule decides its metric."""
    rule = counts.manifest.get("sequential")
    if not rule or not counts.sequential:
        return
    labels = {arm_a.label, arm_b.label}
    if labels != {rule["a"], rule["b"]}:
        return
    if result["metric"] != rule["metric"]:
        result["notes"].append(
            f"this run stopped on the sequential rule for {rule['metric']}; its fixed-n tests of "
            f"{result['metric']} are shown as usual"
        )
        return
    last = counts.sequential[-1]
    decision = last.get("decision") or "indistinguishable"
    if arm_a.label != rule["a"]:  # the user put the arms the other way round
        decision = {"A>B": "B>A", "B>A": "A>B"}.get(decision, decision)
    result["design"] = "sequential"
    result["verdict"] = decision
    result["test"] = "sequential e-value on discordant pairs (anytime-valid)"
    result["p_value"] = None
    result["e_value"] = last.get("e_value")
    result["worse"] = decision == ("A>B" if result["higher_is_better"] else "B>A")
    result["notes"].append(
        f"the verdict is the sequential decision after round {last.get('round')} "
        f"(e = {last.get('e_value', 0):.3g}, "
        f"threshold {rule['threshold']:g}); fixed-n tests after optional stopping are not valid and are "
        "shown for reference only"
    )


def compare_runs(
    a: str,
    b: str,
    metrics: list[str] | None = None,
    *,
    all_metrics: bool = False,
    alpha: float = 0.05,
    classification: int | None = None,
    top_k: int | None = None,
) -> dict[str, Any]:
    """Compare two selected arms on each metric; each run directory is read once."""
    names = list(METRICS) if all_metrics else (metrics or ["header_present"])
    for metric in names:
        if metric not in METRICS:
            raise InputError(f"unknown metric {metric!r} (known: {', '.join(METRICS)})")
    run_a, _ = parse_selector(a)
    run_b, _ = parse_selector(b)
    tables: dict[Path, CountsTable] = {}
    for run in (run_a, run_b):
        key = run.resolve()
        if key not in tables:
            tables[key] = build_counts(run, classification=classification, top_k=top_k)
    counts_a, counts_b = tables[run_a.resolve()], tables[run_b.resolve()]
    arm_a, arm_b = select_arm(a, counts_a), select_arm(b, counts_b)
    results = []
    for metric in names:
        side_a, side_b = side_of(a, counts_a, arm_a, metric), side_of(b, counts_b, arm_b, metric)
        if all_metrics and (not side_a.per_case or not side_b.per_case):
            continue  # --all: e.g. no case has `expect`, so declared_correct has no samples
        result = compare_sides(side_a, side_b, metric, alpha)
        if counts_a is counts_b:
            _sequential_note(counts_a, arm_a, arm_b, result)
        results.append(result)
    return {
        "results": results,
        "retrieval_drift": drift(counts_a, counts_b) if counts_a is not counts_b else [],
        "warnings": counts_a.warnings + (counts_b.warnings if counts_b is not counts_a else []),
    }


# -- words ---------------------------------------------------------------------------------


def _points(value: float) -> str:
    return f"{100 * value:+.0f}"


def sentence(result: dict[str, Any]) -> str:
    """The verdict in words a prompt engineer acts on."""
    a, b = result["a"], result["b"]
    lo, hi = result["newcombe"]
    counts = f"A {a['k']}/{a['n']} vs B {b['k']}/{b['n']}"
    text = (
        f"{result['verdict']}: {counts} (B - A = {_points(result['diff'])} points, "
        f"95% CI {_points(lo)} to {_points(hi)})"
    )
    if result["design"] == "sequential":
        return text + "; decided by the sequential rule (valid however often it was checked)"
    if result["verdict"] != "indistinguishable":
        where = "on these questions" if result["design"] == "paired" else "beyond question-to-question spread"
        return text + (
            f"; {result['test']} p = {result['p_value']:.3g}: larger than this sample "
            f"produces by chance ({where})"
        )
    text += f"; {result['test']} p = {result['p_value']:.3g}"
    hint = result.get("repeats_needed")
    if result["n_needed_per_arm"] is None or hint is None:
        return text + "; the observed rates are equal, so there is no difference to size a probe for"
    size = abs(100 * result["diff"])
    paired = (
        f"{hint['paired']} repeats of these {hint['cases']} cases (paired, about "
        f"{100 * hint['paired_power']:.0f}% power)"
        if hint["paired"]
        else f"more than 200 repeats of these {hint['cases']} cases (paired)"
    )
    unpaired = (
        f"{hint['unpaired']} repeats"
        if hint["unpaired"]
        else f"no number of repeats: at least {hint['unpaired_cases_needed']} cases a side"
    )
    return text + f"; to detect a {size:.0f}-point difference you need about {paired}; unpaired: {unpaired}"


def generalise_sentence(result: dict[str, Any]) -> str | None:
    paired = result.get("paired")
    if not paired:
        return None
    g = len(paired["cases"])
    moved = f"{paired['moved']} of {g} cases moved ({paired['up']} towards B, {paired['down']} towards A)"
    span = f"mean per-case difference {_points(paired['mean_diff'])} points"
    if paired["interval"]:
        lo, hi = paired["interval"]
        span += f", 95% interval {_points(lo)} to {_points(hi)}"
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


def _pct(value: float) -> str:
    return f"{100 * value:.1f}%"


GREEN, RED, RESET = "\x1b[32m", "\x1b[31m", "\x1b[0m"


def _verdict_cell(result: dict[str, Any], color: bool) -> str:
    if not color or result["verdict"] == "indistinguishable":
        return result["verdict"]
    return f"{RED if result['worse'] else GREEN}{result['verdict']}{RESET}"


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
    first = results[0]
    out = [f"A = {first['a']['label']}", f"B = {first['b']['label']}", ""]
    rows = []
    for r in results:
        a, b = r["a"], r["b"]
        rows.append(
            [
                r["metric"],
                f"{a['k']}/{a['n']}",
                _pct(a["rate"]),
                f"{b['k']}/{b['n']}",
                _pct(b["rate"]),
                _points(r["diff"]),
                f"{_points(r['newcombe'][0])} to {_points(r['newcombe'][1])}",
                "-" if r["p_value"] is None else f"{r['p_value']:.3g}",
                "-" if r["p_boschloo"] is None else f"{r['p_boschloo']:.3g}",
                r["design"],
                f"{a['errors']}/{b['errors']}",
                _verdict_cell(r, color and fmt == "table"),
            ]
        )
    headers = [
        "metric",
        "A k/n",
        "A",
        "B k/n",
        "B",
        "B-A (pts)",
        "95% CI (pts)",
        "p",
        "Boschloo p",
        "design",
        "failed A/B",
        "verdict",
    ]
    optional = ("Boschloo p", "design", ("A", "B"), "failed A/B")
    out.append(table(rows, headers, fmt, optional=optional, width=width))
    out.append("")
    for r in results:
        prefix = f"{r['metric']}: " if len(results) > 1 else ""
        out.append(prefix + sentence(r))
        generalise = generalise_sentence(r)
        if generalise:
            out.append(prefix + generalise)
    if len(results) == 1 and first.get("paired"):
        moved = [c for c in first["paired"]["cases"] if c["diff"] != 0]
        out.append("")
        if moved:
            out.append(f"cases that moved ({len(moved)} of {len(first['paired']['cases'])}):")
            out.append(
                table(
                    [
                        [
                            c["case_id"],
                            f"{c['a'][0]}/{c['a'][1]}",
                            f"{c['b'][0]}/{c['b'][1]}",
                            _points(c["diff"]),
                        ]
                        for c in moved
                    ],
                    ["case", "A", "B", "B-A (pts)"],
                    fmt,
                    width=width,
                )
            )
        else:
            out.append("no case moved")
    for change in comparison.get("retrieval_drift") or []:
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
    for note in dict.fromkeys(n for r in results for n in r.get("notes", [])):
        out.append(f"note: {note}")
    for warning in comparison.get("warnings") or []:
        out.append(f"warning: {warning}")
    return wrap("\n".join(out), fmt, width)


def failure_line(result: dict[str, Any]) -> str:
    """The `FAIL:` line of --fail-if-worse."""
    direction = "higher is better" if result["higher_is_better"] else "lower is better"
    return (
        f"FAIL: {result['metric']} got worse: A {_pct(result['a']['rate'])} -> B {_pct(result['b']['rate'])} "
        f"({_points(result['diff'])} points, 95% CI {_points(result['newcombe'][0])} to "
        f"{_points(result['newcombe'][1])}; {direction}; {result['test']} p = "
        + ("-" if result["p_value"] is None else f"{result['p_value']:.3g}")
        + ")"
    )
