"""Comparing two arms: is B (the candidate) different from A (the baseline)?

`verdict` means one thing in every design: `B>A` / `A>B` say which arm's *rate* is reliably
higher, whatever the metric's direction; `worse` says B is reliably worse in the metric's
direction (B's rate lower where higher is better, higher where lower is better). The design
decides the test (promptprobe.stats.verdict): paired when both sides asked the same set of
questions (any order, any repeats), unpaired otherwise; a sequential run's own decision when it
stopped on its rule. The effect shown is B - A measured the way the test compares (within cases
when paired), so its sign is the verdict's direction; Newcombe's interval on the pooled counts
stays beside it, labelled. Several metrics at once get adjusted p-values (Westfall-Young min-P
over relabellings within cases when paired, Holm otherwise: promptprobe.stats.multiplicity),
and the verdicts
(and so the gate) use the adjusted ones. Boschloo's exact p is shown where it is affordable and
never decides.

`settle` says what a result decided: `verdict`, `worse`, `better_arm`, `decided_by`, and the
interval beside the verdict, the test's own at the level the verdict was decided at (under
several metrics alpha·p/p_adjusted, so that it excludes 0 exactly when p_adjusted decides);
`compare_words.describe` then puts every word a reader sees into `words`.
"""

import re
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..checks import METRICS, Metric
from ..counts import ArmCounts, CountsTable, build_counts, resolved_patterns
from ..errors import InputError
from ..jsonio import dumps_pretty
from ..runref import split_selector
from ..stats.effect import DISCORDANT, KT_MIXTURE, discordant_interval
from ..stats.intervals import icc_anova, newcombe
from ..stats.multiplicity import HOLM, Adjusted
from ..stats.multiplicity import adjust as family_adjusted
from ..stats.planning import MAX_REPEATS, paired_repeats, size_plan, unpaired_repeats
from ..stats.sequential_interval import METHOD as STAGEWISE
from ..stats.sequential_interval import Rounds, sequential_interval
from ..stats.tests import boschloo_affordable, boschloo_p, decides
from ..stats.verdict import generalisation, paired_verdict, unpaired_verdict, word
from .compare_words import describe, level, p_text, percent, points
from .pairs import chosen, pair_arms
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
    settled: bool = True,
) -> dict[str, Any]:
    """The compare object for B - A on one metric (`exact=False` skips Boschloo; `hints=False`
    leaves the sample-size hints out, for `add_hints` to add once a family is adjusted; `rule`:
    the metric itself when it is a run's own [[check]]).

    Its verdict uses this metric's own p; `adjust` re-decides a family of them on adjusted p
    (`settled=False` leaves the settling to it, so that no interval is computed twice)."""
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
    failed = _every_sample_failed(sa, sb)
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
        "effect": {"estimate": effect.estimate, "interval": None, "method": effect.method},
        "paired": paired_view,
        "verdict": decision.verdict,
        "higher_is_better": higher,
        "worse": False,
        "better_arm": None,
        "decided_by": None,
        "n_needed_per_arm": None,
        "repeats_needed": None,
        "notes": notes,
        "_sign": effect.sign,
        "_interval_at": decision.interval_at,
        "_failed": failed,
    }
    if settled:
        settle(result, decision.p_value, alpha)
    if hints:
        add_hints(result, a, b, alpha)
    return result


def _every_sample_failed(a: dict[str, Any], b: dict[str, Any]) -> str | None:
    """"A" or "B" when every sample of that arm counted on this metric failed and some of the
    other arm's did not: that arm is worse on the metric whatever the test can tell."""
    a_failed = a["n"] > 0 and a["errors"] == a["n"]
    b_failed = b["n"] > 0 and b["errors"] == b["n"]
    if a_failed == b_failed:
        return None
    return "A" if a_failed else "B"


def better_arm(verdict: str, higher_is_better: bool) -> str | None:
    """"A" or "B": the arm reliably better in the metric's direction (None when undecided)."""
    if verdict == "indistinguishable":
        return None
    return "B" if (verdict == "B>A") == higher_is_better else "A"


def effective_alpha(p_value: float | None, p_adjusted: float | None, alpha: float) -> float:
    """The level a metric was tested at: alpha·p/p_adjusted, at which p decides exactly when
    p_adjusted decides at alpha (alpha itself for one metric). A p of 0 decides at any level:
    its interval is given at alpha/100."""
    if p_value is None or p_adjusted is None or p_adjusted == p_value:
        return alpha
    if p_value <= 0:
        return alpha if p_adjusted <= 0 else alpha / 100
    level = alpha * p_value / p_adjusted
    # Rounding must not make the level disagree with the adjusted decision.
    wanted = decides(p_adjusted, alpha)
    for _ in range(4):
        if decides(p_value, level) == wanted:
            break
        level *= 1 + 1e-12 if wanted else 1 - 1e-12
    return level


def settle(
    result: dict[str, Any], p_adjusted: float | None, alpha: float, verdict: str | None = None
) -> None:
    """What a decided or undecided result says, from its (adjusted) p at alpha, or from a
    `verdict` another rule reached (the sequential rule): verdict, worse, better_arm, decided_by,
    the interval beside the verdict at the level it was decided at, and the words."""
    result["p_adjusted"] = p_adjusted
    higher = result["higher_is_better"]
    sign = _sign(result)
    decided_by = "sequential rule" if verdict is not None else None
    if verdict is None:
        verdict = word(p_adjusted, alpha, sign)
        decided_by = "test" if verdict != "indistinguishable" else None
    if decided_by == "test" and result["design"] == "sequential":
        decided_by = "sequential rule"
    failed = result.get("_failed")
    against = {"A": 1 if higher else -1, "B": -1 if higher else 1}.get(failed or "", 0)
    # An arm that produced nothing is worse on every metric that applies: also where the other arm
    # is at the same extreme (0/15 against 15 failures), or a dead candidate would pass the gate.
    if verdict == "indistinguishable" and failed and sign in (against, 0):
        verdict = "B>A" if against > 0 else "A>B"
        decided_by = f"every sample of {failed} failed"
    result.update(
        verdict=verdict,
        worse=is_worse(verdict, higher),
        better_arm=better_arm(verdict, higher),
        decided_by=decided_by,
    )
    level = effective_alpha(result["p_value"], p_adjusted, alpha)
    interval, why = None, None
    interval_at = result.get("_interval_at")
    if decided_by and decided_by.startswith("every sample"):
        why = f"{decided_by}, so there is no output to compare; the test alone cannot tell"
    elif interval_at is None:
        why = result.get("_no_interval") or "this design's test has no interval"
    else:
        interval = interval_at(level)
        decided = verdict != "indistinguishable"
        if interval is None:
            why = result.get("_no_interval") or "no interval of this test agrees with its verdict here"
        elif (interval[0] > 0 or interval[1] < 0) != decided:
            interval = None
            why = "the interval at this level would contradict the verdict"
    result["effect"].update(
        interval=None if interval is None else list(interval), confidence=1 - level, interval_note=why
    )
    describe(result)


def finish(result: dict[str, Any]) -> dict[str, Any]:
    """Drop what only the building of a result needed (before it is shown or written)."""
    for key in [k for k in result if k.startswith("_")]:
        del result[key]
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
    min-P over relabellings within cases when every result is paired and the joint outcome patterns
    are given (one pair of pattern counts per case, over the results in order), else Holm."""
    if len(results) < 2:
        return
    family = _family(results, patterns)
    for result, p in zip(results, family.p_adjusted, strict=True):
        before = result["verdict"]
        result["adjustment"] = family.method
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
    describe(result)


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
    run, selector = split_selector(text)
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
            if key in filters:
                # The last one would silently win: an arm has one prompt and one model.
                raise InputError(f"{text}: {key}= is given twice; an arm has one {key}, so give it once")
            filters[key] = value
    return Path(run), filters


def select_arm(text: str, counts: CountsTable) -> ArmCounts:
    _, filters = parse_selector(text)
    arms = chosen(filters, counts)
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


def _applies_across(
    a: Side, b: Side, counts_a: CountsTable, counts_b: CountsTable, metric: str
) -> tuple[Side, Side]:
    """Two runs: a case where every sample of one run failed (so that run cannot tell whether a
    user's check applies to it) is left out of the check when the other run's outputs say it
    does not apply, as that run left it out: the design stays paired."""
    seen_a = counts_a.check_applies.get(metric)
    seen_b = counts_b.check_applies.get(metric)
    if seen_a is None and seen_b is None:
        return a, b

    def without(side: Side, own: dict[str, bool] | None, other: dict[str, bool] | None) -> Side:
        own, other = own or {}, other or {}
        dropped = [c for c in side.per_case if c not in own and other.get(c) is False]
        if not dropped:
            return side
        kept = {c: cell for c, cell in side.per_case.items() if c not in dropped}
        return replace(side, per_case=kept)

    return without(a, seen_a, seen_b), without(b, seen_b, seen_a)


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


def _stopped_elsewhere(*tables: CountsTable) -> list[str]:
    """Across runs, an arm from a run its sequential rule stopped has a sample size that depended on
    its own outcomes (against another arm): a fixed-n test on it is approximate, and says so."""
    return [
        f"run {Path(t.run).name} stopped on its sequential rule (--until-decided): its sample size "
        "depended on its outcomes, so this fixed-n test on it is approximate"
        for t in tables
        if t.manifest.get("sequential") and t.sequential
    ]


def _apply_sequential(
    counts: CountsTable, arm_a: ArmCounts, arm_b: ArmCounts, result: dict[str, Any], alpha: float
) -> None:
    """On a run that stopped on the sequential rule, that rule decides its metric."""
    rule = counts.manifest.get("sequential")
    if not rule or not counts.sequential:
        return
    labels = {arm_a.label, arm_b.label}
    if labels != {rule["a"], rule["b"]}:
        return
    if result["metric"] != rule["metric"]:
        # One sentence for every other metric, so that `--all` says it once.
        result["notes"].append(
            f"this run stopped on the sequential rule for {rule['metric']}; the other metrics' fixed-n "
            "tests are shown as usual (they were not what decided when to stop)"
        )
        return
    lines = counts.sequential
    last = lines[-1]
    decision = (last.get("decision") if last.get("stop") else None) or "indistinguishable"
    legacy = rule.get("terms") != "rate" and not result["higher_is_better"]
    swapped = arm_a.label != rule["a"]  # the user put the arms the other way round
    if legacy:
        # Runs recorded before 0.2 named the arm that did well; verdicts name the higher rate.
        decision = _flip(decision)
    if swapped:
        decision = _flip(decision)
    p_value, test, evidence = _sequential_evidence(rule, lines)
    sign = {"B>A": 1, "A>B": -1}.get(decision, _sign(result))
    if decision != "indistinguishable" and sign != _sign(result):
        result["notes"].append(
            "the samples counted here differ from the rounds the sequential rule decided on (a round was "
            "re-run on resume); the verdict is the rule's"
        )
    interval_at, estimate, method = _sequential_interval(rule, lines, legacy, swapped, decision, p_value)
    result["effect"] = {"estimate": estimate, "interval": None, "method": method}
    result.update(
        design="sequential",
        _sign=sign,
        _interval_at=interval_at,
        _no_interval=(
            "the run stopped before its rule did, so the rule's test has no interval yet"
            if not last.get("stop")
            else "the rounds disagree about the discordant pairs' share (probability at most alpha)"
        ),
        test=test,
        p_value=p_value,
        e_value=last.get("e_value"),
    )
    # Only a rule that stopped decides; a run stopped by hand before it is undecided (p = 1).
    settle(result, p_value, alpha, verdict=decision if last.get("stop") else None)
    result["notes"].append(
        f"the verdict is the sequential decision after round {last.get('round')} ({evidence}, valid however "
        "often it was checked); fixed-n tests after optional stopping are not valid and are shown for "
        "reference only"
    )


def _sequential_interval(
    rule: dict[str, Any],
    lines: list[dict[str, Any]],
    legacy: bool,
    swapped: bool,
    decision: str,
    p_value: float,
) -> tuple[Any, float, str]:
    """(interval_at, the estimate, its method) of a sequential run: the exact boundary's stage-wise
    test inverted, or for a run recorded under the earlier mixture e-value its confidence sequence."""
    last = lines[-1]
    if "lead" in last:
        rounds = Rounds(
            [line.get("discordant") or 0 for line in lines],
            [line.get("lead_needed") for line in lines],
            -last["lead"] if swapped else last["lead"],
            sum(line.get("pairs") or 0 for line in lines),
        )
        decided = decision if decision in ("A>B", "B>A") else None
        found = sequential_interval(rounds, p_value, 0.05, decided) if last.get("stop") else None

        def interval_at(level: float) -> tuple[float, float] | None:
            if not last.get("stop"):
                return None
            at_level = decided if decides(p_value, level) else None
            return sequential_interval(rounds, p_value, level, at_level)[1]

        estimate = found[0] if found else sequential_interval(rounds, 1.0, 0.05, None)[0]
        return interval_at, estimate, STAGEWISE
    counted = [line for line in lines if line.get("round", 0) >= rule.get("min_rounds", 1)]
    totals = [_b_higher(line, legacy, swapped) for line in counted]
    pairs = sum(line.get("pairs") or 0 for line in lines)
    mixture = _mixture(rule.get("mixture"))
    found_cs = discordant_interval(totals, pairs, 0.05, mixture) if totals else None

    def sequence_at(level: float) -> tuple[float, float] | None:
        answer = discordant_interval(totals, pairs, level, mixture) if totals else None
        return answer[1] if answer else None

    return sequence_at, (found_cs[0] if found_cs else 0.0), DISCORDANT


def _b_higher(line: dict[str, Any], legacy: bool, swapped: bool) -> tuple[int, int]:
    """(discordant pairs where B's outcome is the success, discordant pairs) after a round."""
    discordant = line.get("discordant_total") or 0
    if "b_higher_total" in line:
        higher = line["b_higher_total"]
    else:  # recorded before pairs were counted by rate: favour_b counted B doing well
        higher = line.get("favour_b_total") or 0
        higher = discordant - higher if legacy else higher
    return (discordant - higher if swapped else higher), discordant


def _mixture(text: Any) -> float:
    """The Beta(a, a) mixture of a run's rule ("Beta(0.5, 0.5)"); the Krichevsky-Trofimov one when unsaid."""
    match = re.match(r"Beta\(([0-9.]+),", str(text or ""))
    return float(match.group(1)) if match else KT_MIXTURE


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
    said = f"the leading arm was ahead by {lead} of {last['discordant_total']} discordant pairs, " + (
        f"the boundary there {needed}" if needed else "no boundary yet"
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
) -> dict[str, Any]:
    """`compare_runs` on counts tables already read (`counts_b` is `counts_a` for two arms of one
    run): A and B are `RUN#...` selectors (an arm of each, or two runs compared arm by arm)."""
    run_a, filters_a = parse_selector(a)
    run_b, filters_b = parse_selector(b)
    known = {**counts_a.metrics, **counts_b.metrics}  # the built-in ones and both runs' own checks
    names = list(known) if all_metrics else list(dict.fromkeys(metrics or ["header_present"]))
    for metric in names:
        if metric not in known:
            raise InputError(f"unknown metric {metric!r} (known: {', '.join(known)})")
    pairs, unpaired = pair_arms(run_a, filters_a, counts_a, run_b, filters_b, counts_b)
    results, sides, rows = [], [], []
    for pair in pairs:
        arm_a, arm_b = pair.a, pair.b
        name_a, name_b = arm_names(counts_a, arm_a, counts_b, arm_b)
        if pair.name is not None:  # the same arm in two runs: the runs tell them apart
            name_a, name_b = (str(parse_selector(t)[0]) for t in typed) if typed else (run_a.name, run_b.name)
        # A pair found by name is labelled with the selector that picks each of its arms.
        label_a = a if pair.name is None else f"{run_a}#prompt={arm_a.prompt},model={arm_a.model}"
        label_b = b if pair.name is None else f"{run_b}#prompt={arm_b.prompt},model={arm_b.model}"
        for metric in names:
            side_a = side_of(label_a, counts_a, arm_a, metric, name_a)
            side_b = side_of(label_b, counts_b, arm_b, metric, name_b)
            if counts_a is not counts_b:
                side_a, side_b = _applies_across(side_a, side_b, counts_a, counts_b, metric)
            if all_metrics and (not side_a.per_case or not side_b.per_case):
                continue  # --all: e.g. no case has `expect`, so declared_correct has no samples
            result = compare_sides(
                side_a, side_b, metric, alpha, hints=False, rule=known[metric], settled=False
            )
            if arm_a is arm_b:  # it can only ever say "can't tell yet", and proves nothing
                result["notes"].append(f"A and B are the same arm ({arm_a.label}): choose two to compare")
            if counts_a is counts_b:
                _apply_sequential(counts_a, arm_a, arm_b, result, alpha)
            else:
                result["notes"].extend(_stopped_elsewhere(counts_a, counts_b))
            if pair.name is not None:
                result["pair"] = pair.name
                result["notes"].extend(unpaired)
            results.append(result)
            sides.append((side_a, side_b))
            rows.append((counts_a, arm_a, counts_b, arm_b, metric))
    if len(results) > 1:
        adjust(results, alpha, joint_patterns(rows))
    for result in results:
        if "words" not in result:  # one metric: its own p decides
            settle(result, result["p_value"], alpha)
    if hints:
        for result, (side_a, side_b) in zip(results, sides, strict=True):
            add_hints(result, side_a, side_b, alpha)
    for result in results:
        finish(result)
        # Which classification each side's counts come from (None: the run's own).
        result["a"]["classification"] = counts_a.classification
        result["b"]["classification"] = counts_b.classification
    return {
        "results": results,
        "family": len(results),
        "retrieval_drift": drift(counts_a, counts_b) if counts_a is not counts_b else [],
        "not_compared": unpaired,  # arm by arm: the arms of either run without a partner in the other
        "warnings": [
            *counts_a.warnings,
            *_unfinished(counts_a),
            *((counts_b.warnings + _unfinished(counts_b)) if counts_b is not counts_a else []),
        ],
    }


def _unfinished(counts: CountsTable) -> list[str]:
    """A run that is not complete is compared on what it has recorded so far: said beside it."""
    if counts.state == "complete":
        return []
    how = "still running" if counts.state == "running" else f"{counts.state}, not complete"
    of = f" of {counts.planned}" if counts.planned else ""
    return [
        f"run {Path(counts.run).name} is {how}: the verdicts are on the {counts.recorded}{of} "
        "samples it has recorded"
    ]


# -- the terminal table --------------------------------------------------------------------


GREEN, RED, RESET = "\x1b[32m", "\x1b[31m", "\x1b[0m"


def _verdict_cell(result: dict[str, Any], color: bool) -> str:
    words = result["words"]
    if not color or words["kind"] == "same":
        return words["verdict"]
    return f"{RED if words['kind'] == 'worse' else GREEN}{words['verdict']}{RESET}"


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
    first = results[0]
    by_pair = "pair" in first  # two runs compared arm by arm
    if by_pair:
        out = [
            f"A = {first['a']['name']} ({parse_selector(first['a']['label'])[0]}){_classified(first['a'])}",
            f"B = {first['b']['name']} ({parse_selector(first['b']['label'])[0]}){_classified(first['b'])}",
            f"arm by arm: {', '.join(dict.fromkeys(r['pair'] for r in results))} (each arm of A against the "
            "arm of the same name in B)",
            "",
        ]
    else:
        out = [
            f"A = {first['a']['name']} ({first['a']['label']}){_classified(first['a'])}",
            f"B = {first['b']['name']} ({first['b']['label']}){_classified(first['b'])}",
            "",
        ]
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
                _verdict_cell(r, color and fmt == "table"),
            ]
        )
    levels = {r["effect"]["confidence"] for r in results}
    headers = [
        *(["arm"] if by_pair else []),
        "metric",
        "A k/n",
        "A",
        "B k/n",
        "B",
        "B-A (pts)",
        f"{level(levels.pop())} CI (pts)" if len(levels) == 1 else "CI (pts)",
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
        prefix = f"{r['pair']}: " if by_pair else ""
        out.append(prefix + r["words"]["sentence"])
        if r["words"]["generalise"]:
            out.append(prefix + (f"{r['metric']}: " if family else "") + r["words"]["generalise"])
    out.append(
        "CI: the test's own interval for B - A, at the level the verdict was decided at (it excludes 0 "
        "exactly when the verdict is decided); pooled, Newcombe: descriptive, not the test's"
        + (" (under several metrics: alpha x p / p adjusted)" if family else "")
    )
    if family:
        method = first.get("adjustment") or "Holm"
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
                            points(c["diff"]),
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
    # Arm by arm, a pair's note names its pair; the arms left without a partner are the family's.
    family = set(comparison.get("not_compared") or [])
    for note in dict.fromkeys(
        f"{r['pair']}: {n}" if by_pair and n not in family else n for r in results for n in r.get("notes", [])
    ):
        out.append(f"note: {note}")
    for warning in comparison.get("warnings") or []:
        out.append(f"warning: {warning}")
    return wrap("\n".join(out), fmt, width)


def failure_line(result: dict[str, Any]) -> str:
    """The `FAIL:` line of --fail-if-worse (built with the result's words)."""
    return result["words"]["failure"]

