"""Comparing two arms: is B (the candidate) different from A (the baseline)?

`verdict` means one thing in every design: `B>A` / `A>B` say which arm's *rate* is reliably
higher, whatever the metric's direction; `worse` says B is reliably worse in the metric's
direction (B's rate lower where higher is better, higher where lower is better). The design
decides the test (promptprobe.stats.verdict): paired when both sides asked the same set of
questions (any order, any repeats), unpaired otherwise; a sequential run's own decision when it
stopped on its rule. The effect shown is B - A measured the way the test compares (within cases
when paired), so its sign is the verdict's direction; Newcombe's interval on the pooled counts
stays beside it, labelled. Several metrics at once get adjusted p-values (Westfall-Young min-P
over relabellings within cases when paired, Holm otherwise: promptprobe.stats.multiplicity), and
the verdicts (and so the gate) use the adjusted ones. Boschloo's exact p is shown where it is affordable and
never decides.
"""

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..checks import METRICS, Metric
from ..counts import ArmCounts, CountsTable, build_counts
from ..errors import InputError
from ..jsonio import dumps_pretty
from ..stats.intervals import icc_anova, newcombe
from ..stats.multiplicity import HOLM, Adjusted
from ..stats.multiplicity import adjust as family_adjusted
from ..stats.planning import MAX_REPEATS, paired_repeats, size_plan, unpaired_repeats
from ..stats.tests import boschloo_affordable, boschloo_p
from ..stats.verdict import generalisation, paired_verdict, unpaired_verdict, word
from .report import metric_object
from .tables import table, wrap

# The hint that comes with an indistinguishable verdict is a quick simulation, capped so that a
# comparison stays well under a second: fewer simulated probes than `probe plan` uses.
HINT_TRIALS = 200
HINT_RESAMPLES = 1000
HINT_MAX_SAMPLES = 2_000
HINT_EXACT_SAMPLES = (
    300  # above, the hint's samples per arm is Fleiss's approximation (as plan's above 20,000)
)
HINT_MAX_CASES = 0  # the hint does not search for the cases an unpaired design needs (probe plan does)
# "about": to 10% above 10, and the search's own estimate stands (no confirming simulation).
HINT_PRECISION = {"tolerance": 0.1, "exact_below": 10, "confirm": False}


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


def _summary(side: Side, rule: Metric) -> dict[str, Any]:
    return {
        "label": side.label,
        "name": side.name or side.label,
        **metric_object(side.per_case, rule.higher_is_better),
        "cases": len(side.per_case),
    }


def compare_sides(
    a: Side,
    b: Side,
    metric: str = "header_present",
    alpha: float = 0.05,
    exact: bool = True,
    hints: bool = True,
    rule: Metric | None = None,
) -> dict[str, Any]:
    """The compare object for B - A on one metric (`exact=False` skips Boschloo; `hints=False`
    leaves the sample-size hints out, for `add_hints` to add once a family is adjusted; `rule`:
    the metric itself when it is a run's own [[check]]).

    Its verdict uses this metric's own p; `adjust` re-decides a family of them on adjusted p."""
    rule = rule or METRICS[metric]
    higher = rule.higher_is_better
    sa, sb = _summary(a, rule), _summary(b, rule)
    if not sa["n"] or not sb["n"]:
        raise InputError(
            f"metric {metric}: no samples to compare ({sa['n']} vs {sb['n']}); "
            f"it counts only {rule.description}"
        )
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
    effect = decision.effect
    if effect.sign and (sb["rate"] - sa["rate"]) * effect.sign < 0:
        notes.append(
            "the pooled rates point the other way than the comparison within cases (Simpson's paradox: "
            "repeats differ between cases); the verdict and the effect compare within cases"
        )
    result = {
        "metric": metric,
        "design": "paired" if paired else "unpaired",
        "a": sa,
        "b": sb,
        "diff": sb["rate"] - sa["rate"],
        "newcombe": list(newcombe(sb["k"], sb["n"], sa["k"], sa["n"])),
        "p_boschloo": boschloo_p(sb["k"], sb["n"], sa["k"], sa["n"]) if exact else None,
        "test": decision.test,
        "p_value": decision.p_value,
        "p_adjusted": decision.p_value,
        "effect": effect.to_dict(),
        "paired": paired_view,
        "verdict": decision.verdict,
        "higher_is_better": higher,
        "worse": is_worse(decision.verdict, higher),
        "n_needed_per_arm": None,
        "repeats_needed": None,
        "notes": notes,
    }
    if hints:
        add_hints(result, a, b, alpha)
    return result


def is_worse(verdict: str, higher_is_better: bool) -> bool:
    """B is reliably worse in the metric's direction."""
    return verdict == ("A>B" if higher_is_better else "B>A")


def _sign(result: dict[str, Any]) -> int:
    """The direction a verdict may take: the effect's exact sign (a sequential decision's own)."""
    if "_sign" in result:
        return result["_sign"]
    estimate = result["effect"]["estimate"]
    return (estimate > 0) - (estimate < 0)


# Per case: how many of A's and of B's samples showed each vector of outcomes.
Patterns = list[tuple[Counter, Counter]]


def adjust(results: list[dict[str, Any]], alpha: float, patterns: Patterns | None = None) -> None:
    """`p_adjusted` across the metrics compared together, and verdicts decided on it: Westfall-Young
    min-P over relabellings within cases when every metric is paired and the joint outcome patterns
    are given (one pair of pattern counts per case, over these metrics in order), else Holm."""
    if len(results) < 2:
        return
    family = _family(results, patterns)
    for result, p in zip(results, family.p_adjusted, strict=True):
        result["p_adjusted"] = p
        result["adjustment"] = family.method
        verdict = word(p, alpha, _sign(result))
        if verdict != result["verdict"]:
            result["notes"].append(
                f"{result['metric']}: {result['verdict']} on its own p = {result['p_value']:.3g}, but not "
                f"after {family.method} adjustment over the {len(results)} metrics compared "
                f"(adjusted p = {p:.3g})"
            )
        if family.reason:
            result["notes"].append(f"the metrics are adjusted by Holm: {family.reason}")
        result["verdict"] = verdict
        result["worse"] = is_worse(verdict, result["higher_is_better"])


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
        # The patterns must give the very p-values the counts gave; if not, Holm on the counts'.
        reason = "the outcome patterns did not match the counts"
        return Adjusted(family_adjusted(raw).p_adjusted, HOLM, reason=reason)
    return family


def joint_patterns(
    counts_a: CountsTable, arm_a: ArmCounts, counts_b: CountsTable, arm_b: ArmCounts, metrics: list[str]
) -> Patterns:
    """Per case both arms asked: each arm's counts of outcome vectors over `metrics` (None where a
    metric is outside a sample, or not a metric of that run)."""

    def project(table: CountsTable, seen: Counter) -> Counter:
        where = [table.pattern_metrics.index(m) if m in table.pattern_metrics else None for m in metrics]
        out: Counter = Counter()
        for pattern, count in seen.items():
            out[tuple(None if i is None else pattern[i] for i in where)] += count
        return out

    cases = [c for c in counts_a.case_order if c in arm_a.patterns and c in arm_b.patterns]
    return [(project(counts_a, arm_a.patterns[c]), project(counts_b, arm_b.patterns[c])) for c in cases]


def add_hints(result: dict[str, Any], a: Side, b: Side, alpha: float) -> None:
    """An indistinguishable verdict comes with what it would take to tell the rates apart."""
    rate_a, rate_b = result["a"]["rate"], result["b"]["rate"]
    if result["verdict"] != "indistinguishable" or rate_a == rate_b:
        return
    plan = size_plan(
        rate_a,
        rate_b,
        alpha,
        max_samples=HINT_MAX_SAMPLES,
        tolerance=0.1,
        exact_below=10,
        exact_samples=HINT_EXACT_SAMPLES,
    )
    result["n_needed_per_arm"] = plan.n
    result["repeats_needed"] = _repeats_hint(a, b, rate_a, rate_b, alpha)


def _repeats_hint(a: Side, b: Side, rate_a: float, rate_b: float, alpha: float) -> dict[str, Any]:
    """Repeats of this probe set for 80% power at the observed difference, by design (a quick
    simulation of each design's own test)."""
    cases = len(a.per_case)
    iccs = [
        icc_anova([c[0] for c in s.per_case.values()], [c[1] for c in s.per_case.values()]) for s in (a, b)
    ]
    icc = sum(iccs) / 2
    ran = min(sum(c[1] for c in s.per_case.values()) for s in (a, b)) / cases
    # A run that already has MAX_REPEATS per case and cannot tell them apart needs more than that.
    paired = (
        paired_repeats(rate_a, rate_b, cases, icc, alpha, trials=HINT_TRIALS, **HINT_PRECISION)
        if ran < MAX_REPEATS
        else None
    )
    unpaired = unpaired_repeats(
        rate_a,
        rate_b,
        cases,
        icc,
        alpha,
        trials=HINT_TRIALS,
        resamples=HINT_RESAMPLES,
        max_cases=HINT_MAX_CASES,
        **HINT_PRECISION,
    )
    return {
        "cases": cases,
        "icc": icc,
        "paired": paired.repeats if paired else None,
        "paired_power": paired.power if paired else None,
        "paired_limit": MAX_REPEATS,
        "unpaired": unpaired.repeats,
        "unpaired_cases_needed": unpaired.cases_needed,
        "unpaired_smallest_p": unpaired.smallest_p,
        "trials": HINT_TRIALS,
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


def side_of(text: str, counts: CountsTable, arm: ArmCounts, metric: str, name: str | None = None) -> Side:
    questions = {c.id: c.question for c in counts.probeset.cases}
    recorded = arm.metrics.get(metric, {})
    per_case = {c: recorded[c] for c in counts.case_order if c in recorded}  # probe-set order
    return Side(text, per_case, questions, str(counts.run), counts.probeset.sha256, name)


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


def _flip(decision: str) -> str:
    return {"A>B": "B>A", "B>A": "A>B"}.get(decision, decision)


def _apply_sequential(
    counts: CountsTable, arm_a: ArmCounts, arm_b: ArmCounts, result: dict[str, Any]
) -> None:
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
    lines = counts.sequential
    last = lines[-1]
    decision = (last.get("decision") if last.get("stop") else None) or "indistinguishable"
    if rule.get("terms") != "rate" and not result["higher_is_better"]:
        # Runs recorded before 0.2 named the arm that did well; verdicts name the higher rate.
        decision = _flip(decision)
    if arm_a.label != rule["a"]:  # the user put the arms the other way round
        decision = _flip(decision)
    p_value, test, evidence = _sequential_evidence(rule, lines)
    sign = {"B>A": 1, "A>B": -1}.get(decision, _sign(result))
    if decision != "indistinguishable" and sign != _sign(result):
        result["notes"].append(
            "the samples counted here differ from the rounds the sequential rule decided on (a round was "
            "re-run on resume); the verdict is the rule's"
        )
    result.update(
        design="sequential",
        verdict=decision,
        _sign=sign,
        test=test,
        p_value=p_value,
        p_adjusted=p_value,
        e_value=last.get("e_value"),
        worse=is_worse(decision, result["higher_is_better"]),
    )
    result["notes"].append(
        f"the verdict is the sequential decision after round {last.get('round')} ({evidence}, valid however "
        "often it was checked); fixed-n tests after optional stopping are not valid and are shown for "
        "reference only"
    )


def _sequential_evidence(rule: dict[str, Any], lines: list[dict[str, Any]]) -> tuple[float, str, str]:
    """(p, the test's name, what it saw) of a sequential run: the exact boundary's stage-wise p
    where the run stopped, or an earlier run's 1 / the largest mixture e-value."""
    last = lines[-1]
    if "lead" not in last:
        looks = [line for line in lines if line.get("round", 0) >= rule.get("min_rounds", 1)]
        e_max = max((line.get("e_value") or 0.0 for line in looks), default=0.0)
        p_value = min(1.0, 1 / e_max) if e_max > 0 else 1.0
        said = f"e = {last.get('e_value', 0):.3g}, threshold {rule['threshold']:g}; p = 1/e = {p_value:.3g}"
        return p_value, "sequential e-value on discordant pairs (anytime-valid)", said
    test = "exact sequential boundary on discordant pairs (alpha spent over the rounds to the cap)"
    lead = abs(last["lead"])
    needed = last.get("lead_needed")
    said = (
        f"the leading arm was ahead by {lead} of {last['discordant_total']} discordant pairs, "
        + (f"the boundary there {needed}" if needed else "no boundary yet")
    )
    if not last.get("stop"):
        # Stopped by hand before the rule stopped it: no p-value is valid yet; 1 decides nothing.
        return 1.0, test, said + "; the run stopped before its rule did, so p is shown as 1"
    return last["p_value"], test, said + f"; stage-wise exact p = {last['p_value']:.3g}"


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
) -> dict[str, Any]:
    """Compare two selected arms on each metric; each run directory is read once. Several
    metrics are one family: adjusted p-values decide their verdicts."""
    run_a, _ = parse_selector(a)
    run_b, _ = parse_selector(b)
    tables: dict[Path, CountsTable] = {}
    for run in (run_a, run_b):
        key = run.resolve()
        if key not in tables:
            tables[key] = build_counts(run, classification=classification, top_k=top_k)
    counts_a, counts_b = tables[run_a.resolve()], tables[run_b.resolve()]
    known = {**counts_a.metrics, **counts_b.metrics}  # the built-in ones and both runs' own checks
    names = list(known) if all_metrics else list(dict.fromkeys(metrics or ["header_present"]))
    for metric in names:
        if metric not in known:
            raise InputError(f"unknown metric {metric!r} (known: {', '.join(known)})")
    arm_a, arm_b = select_arm(a, counts_a), select_arm(b, counts_b)
    name_a, name_b = arm_names(counts_a, arm_a, counts_b, arm_b)
    results, sides = [], []
    for metric in names:
        side_a = side_of(a, counts_a, arm_a, metric, name_a)
        side_b = side_of(b, counts_b, arm_b, metric, name_b)
        if all_metrics and (not side_a.per_case or not side_b.per_case):
            continue  # --all: e.g. no case has `expect`, so declared_correct has no samples
        result = compare_sides(side_a, side_b, metric, alpha, hints=False, rule=known[metric])
        if counts_a is counts_b:
            _apply_sequential(counts_a, arm_a, arm_b, result)
        results.append(result)
        sides.append((side_a, side_b))
    adjust(results, alpha, joint_patterns(counts_a, arm_a, counts_b, arm_b, [r["metric"] for r in results]))
    if hints:
        for result, (side_a, side_b) in zip(results, sides, strict=True):
            add_hints(result, side_a, side_b, alpha)
    for result in results:
        result.pop("_sign", None)
    return {
        "results": results,
        "family": len(results),
        "retrieval_drift": drift(counts_a, counts_b) if counts_a is not counts_b else [],
        "warnings": counts_a.warnings + (counts_b.warnings if counts_b is not counts_a else []),
    }


# -- words ---------------------------------------------------------------------------------


def _points(value: float) -> str:
    return f"{100 * value:+.0f}"


def _p(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def judgement(result: dict[str, Any]) -> str:
    """`NAME_B is better than NAME_A on METRIC` (or worse), or that they cannot be told apart."""
    a, b = result["a"]["name"], result["b"]["name"]
    metric = result["metric"] + ("" if result["higher_is_better"] else " (lower is better)")
    if result["verdict"] == "indistinguishable":
        return f"{b} and {a} cannot be told apart on {metric}"
    return f"{b} is {'worse' if result['worse'] else 'better'} than {a} on {metric}"


def badge(result: dict[str, Any]) -> dict[str, str]:
    """The verdict of one metric in a line: `always-header is better than exception-only on
    header_present: +72 points, 95% CI +53 to +84`, and its kind (better, worse, same)."""
    effect = result["effect"]
    lo, hi = effect["interval"]
    kind = "same" if result["verdict"] == "indistinguishable" else ("worse" if result["worse"] else "better")
    text = f"{judgement(result)}: {_points(effect['estimate'])} points, 95% CI {_points(lo)} to {_points(hi)}"
    return {"kind": kind, "text": text}


def effect_words(result: dict[str, Any]) -> str:
    effect = result["effect"]
    lo, hi = effect["interval"]
    within = {"paired": " within cases", "sequential": " within cases"}.get(
        result["design"], " (mean of cases)"
    )
    text = f"B - A = {_points(effect['estimate'])} points{within}, 95% CI {_points(lo)} to {_points(hi)}"
    pooled_lo, pooled_hi = result["newcombe"]
    if result["design"] != "unpaired" or abs(effect["estimate"] - result["diff"]) > 0.005:
        text += f"; pooled {_points(result['diff'])}, Newcombe {_points(pooled_lo)} to {_points(pooled_hi)}"
    return text


def sentence(result: dict[str, Any]) -> str:
    """The verdict in words a prompt engineer acts on: which arm, better or worse, by how much."""
    a, b = result["a"], result["b"]
    counts = f"{a['name']} {a['k']}/{a['n']}, {b['name']} {b['k']}/{b['n']}"
    text = f"{result['verdict']}: {judgement(result)}: {counts} ({effect_words(result)})"
    adjusted = result.get("p_adjusted")
    p_text = f"{result['test']} p = {_p(result['p_value'])}"
    if adjusted is not None and result["p_value"] is not None and adjusted != result["p_value"]:
        p_text += f", {result.get('adjustment') or 'Holm'}-adjusted {_p(adjusted)}"
    if result["design"] == "sequential":
        return text + f"; {p_text}: decided by the sequential rule (valid however often it was checked)"
    if result["verdict"] != "indistinguishable":
        where = "on these questions" if result["design"] == "paired" else "beyond question-to-question spread"
        return text + f"; {p_text}: larger than this sample produces by chance ({where})"
    text += f"; {p_text}"
    hint = result.get("repeats_needed")
    if hint is None:
        if result["a"]["rate"] == result["b"]["rate"]:
            return text + "; the observed rates are equal, so there is no difference to size a probe for"
        return text
    size = abs(100 * (result["b"]["rate"] - result["a"]["rate"]))
    paired = (
        f"about {hint['paired']} repeats of these {hint['cases']} cases (paired, "
        f"{100 * hint['paired_power']:.0f}% power simulated)"
        if hint["paired"]
        else f"more than {hint['paired_limit']} repeats of these {hint['cases']} cases (paired)"
    )
    if hint["unpaired"]:
        unpaired = f"about {hint['unpaired']} repeats"
    elif hint["unpaired_cases_needed"]:
        unpaired = f"no number of repeats: at least {hint['unpaired_cases_needed']} cases a side"
    else:
        unpaired = f"no number of repeats of {hint['cases']} cases (probe plan --cases says how many)"
    return text + f"; to detect a {size:.0f}-point difference you need {paired}; unpaired: {unpaired}"


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
    out = [
        f"A = {first['a']['name']} ({first['a']['label']})",
        f"B = {first['b']['name']} ({first['b']['label']})",
        "",
    ]
    family = len(results) > 1
    rows = []
    for r in results:
        a, b = r["a"], r["b"]
        effect = r["effect"]
        rows.append(
            [
                r["metric"],
                f"{a['k']}/{a['n']}",
                _pct(a["rate"]),
                f"{b['k']}/{b['n']}",
                _pct(b["rate"]),
                _points(effect["estimate"]),
                f"{_points(effect['interval'][0])}..{_points(effect['interval'][1])}",
                f"{_points(r['diff'])} ({_points(r['newcombe'][0])}..{_points(r['newcombe'][1])})",
                _p(r["p_value"]),
                *([_p(r["p_adjusted"])] if family else []),
                _p(r["p_boschloo"]),
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
    out.append(table(rows, headers, fmt, optional=optional, width=width))
    out.append("")
    for r in results:
        prefix = f"{r['metric']}: " if family else ""
        out.append(prefix + sentence(r))
        generalise = generalise_sentence(r)
        if generalise:
            out.append(prefix + generalise)
    if family:
        method = first.get("adjustment") or "Holm"
        how = (
            "Westfall-Young min-P over relabellings of each case's samples, which counts metrics that read "
            "the same outputs once"
            if method != "Holm"
            else "Holm"
        )
        out.append(
            f"p adjusted: p-values adjusted for comparing {len(results)} metrics at once ({how}); the "
            "verdicts and --fail-if-worse use them, so the chance of any false alarm stays at alpha"
        )
    if not family and first.get("paired"):
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
    """The `FAIL:` line of --fail-if-worse: which metric got worse, by how much, how sure."""
    direction = "higher is better" if result["higher_is_better"] else "lower is better"
    effect = result["effect"]
    lo, hi = effect["interval"]
    p_text = f"{result['test']} p = {_p(result['p_value'])}"
    if result.get("p_adjusted") is not None and result["p_adjusted"] != result["p_value"]:
        p_text += f", {result.get('adjustment') or 'Holm'}-adjusted {_p(result['p_adjusted'])}"
    return (
        f"FAIL: {result['metric']} got worse: {result['a']['name']} {_pct(result['a']['rate'])} -> "
        f"{result['b']['name']} {_pct(result['b']['rate'])} ({_points(effect['estimate'])} points, 95% CI "
        f"{_points(lo)} to {_points(hi)}; {direction}; {p_text})"
    )
