"""A run stopped on its sequential rule: the rule's decision, its evidence and its interval."""

import re
from pathlib import Path
from typing import Any

from ..counts import ArmCounts, CountsTable
from ..stats.effect import KT_MIXTURE, discordant_interval
from ..stats.sequential_effect import METHOD, boundary_test, sequential_effect
from .settle import effect_sign, settle


def _flip(decision: str) -> str:
    return {"A>B": "B>A", "B>A": "A>B"}.get(decision, decision)


def stopped_elsewhere(*tables: CountsTable) -> list[str]:
    """Across runs, an arm from a run its sequential rule stopped has a sample size that depended on
    its own outcomes (against another arm): a fixed-n test on it is approximate, and says so."""
    return [
        f"run {Path(t.run).name} stopped on its sequential rule (--until-decided): its sample size "
        "depended on its outcomes, so this fixed-n test on it is approximate"
        for t in tables
        if t.manifest.get("sequential") and t.sequential
    ]


def apply_sequential(
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
    sign = {"B>A": 1, "A>B": -1}.get(decision, effect_sign(result))
    if decision != "indistinguishable" and sign != effect_sign(result):
        result["notes"].append(
            "the samples counted here differ from the rounds the sequential rule decided on (a round was "
            "re-run on resume); the verdict is the rule's"
        )
    interval_at, estimate, method = _sequential_interval(rule, lines, legacy, swapped, decision, p_value)
    result["effect"] = {"estimate": estimate, "interval": None, "method": method, "adjusted_for": None}
    result.update(
        design="sequential",
        _sign=sign,
        _interval_at=interval_at,
        _no_interval="no interval of the rounds agrees with the rule's verdict here",
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
    """(interval_at, the estimate, its method) of a sequential run: the rounds' betting confidence
    sequence (valid at whatever round the run stopped), made to agree with the rule's verdict; the
    decided end, where the sequence reaches 0, from the rule's own test inverted (the exact
    boundary's stage-wise test, or for a run recorded under the earlier mixture e-value that
    mixture's confidence sequence)."""
    last = lines[-1]
    totals = [_b_higher(line, legacy, swapped) for line in lines]
    cumulative = [2 * higher - discordant for higher, discordant in totals]
    leads = [now - before for now, before in zip(cumulative, [0, *cumulative[:-1]], strict=True)]
    pairs = [line.get("pairs") or 0 for line in lines]
    stopped = bool(last.get("stop"))
    if "lead" in last:
        test: Any = boundary_test(
            [line.get("discordant") or 0 for line in lines],
            [line.get("lead_needed") for line in lines],
            cumulative[-1],
            sum(pairs),
            p_value,
        )
    else:
        first = rule.get("min_rounds", 1)
        counted = [t for t, line in zip(totals, lines, strict=True) if line.get("round", 0) >= first]
        mixture = _mixture(rule.get("mixture"))

        def test(level: float, _: str) -> tuple[float, float] | None:
            found = discordant_interval(counted, sum(pairs), level, mixture) if counted else None
            return found[1] if found else None

    def interval_at(level: float) -> tuple[float, float] | None:
        # A run stopped by hand is undecided (p = 1); the sequence is valid at that round too.
        return sequential_effect(leads, pairs, p_value if stopped else 1.0, level, test)[1]

    estimate = sequential_effect(leads, pairs, 1.0, 0.05)[0]
    return interval_at, estimate, METHOD


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
