"""The hint beside an undecided verdict: what it would take to tell the two rates apart."""

from typing import Any

from ..stats.intervals import icc_anova
from ..stats.planning import design_plan, size_plan
from .side import Side
from .words import describe

# The hint asks `probe plan`'s planner with fewer probes and permutations and a coarser search, so
# that a comparison stays near a second; it confirms its pick on fresh probes as the plan does, so
# the two agree within the hint's Monte Carlo error (tests/test_compare.py checks four designs).
HINT_TRIALS = 200
HINT_RESAMPLES = 1000
HINT_TOLERANCE = 0.1  # "about": to 10% above 10 repeats
HINT_EXACT_BELOW = 10
HINT_MAX_SAMPLES = 2_000
HINT_EXACT_SAMPLES = (
    300  # above, the hint's samples per arm is Fleiss's approximation (as plan's above 20,000)
)


def add_hints(result: dict[str, Any], a: Side, b: Side, alpha: float) -> None:
    """An indistinguishable verdict comes with what it would take to tell the rates apart."""
    rate_a, rate_b = result["a"]["rate"], result["b"]["rate"]
    if result["verdict"] != "indistinguishable" or rate_a == rate_b or result["design"] == "sequential":
        return  # a sequential run that has not decided goes on with more rounds, not a new plan
    hint = repeats_hint(a, b, result["effect"]["estimate"], result["design"] == "paired", alpha)
    if hint is None:
        return
    plan = size_plan(
        hint["p1"],
        hint["p2"],
        alpha,
        max_samples=HINT_MAX_SAMPLES,
        tolerance=0.1,
        exact_below=10,
        exact_samples=HINT_EXACT_SAMPLES,
    )
    result["n_needed_per_arm"] = plan.n
    result["repeats_needed"] = hint
    describe(result)


def _mean_rate(side: Side) -> float:
    rates = [c[0] / c[1] for c in side.per_case.values() if c[1]]
    return sum(rates) / len(rates)


def repeats_hint(a: Side, b: Side, estimate: float, paired: bool, alpha: float) -> dict[str, Any] | None:
    """The repeats `probe plan`'s planner gives the design these data have, at the difference
    printed beside the verdict (`estimate`, from A's mean per-case rate) and the ICC the data
    show, rounded as the `probe plan` command the hint quotes takes them (that command gives the
    precise figure). None when the difference rounds to nothing."""
    p1 = round(_mean_rate(a), 3)
    p2 = round(min(1.0, max(0.0, p1 + estimate)), 3)
    if p1 == p2:
        return None
    iccs = [
        icc_anova([c[0] for c in s.per_case.values()], [c[1] for c in s.per_case.values()]) for s in (a, b)
    ]
    icc = round(sum(iccs) / 2, 2)
    cases, cases_b = len(a.per_case), len(b.per_case)
    plan = design_plan(
        p1,
        p2,
        cases,
        icc,
        alpha,
        paired=paired,
        cases_b=cases_b,
        search_cases=False,
        trials=HINT_TRIALS,
        resamples=HINT_RESAMPLES,
        tolerance=HINT_TOLERANCE,
        exact_below=HINT_EXACT_BELOW,
    )
    command = f"probe plan --p1 {p1:g} --p2 {p2:g} --cases {cases} --icc {icc:g}"
    if not paired and cases_b != cases:
        command += f" --cases-b {cases_b}"
    if alpha != 0.05:
        command += f" --alpha {alpha:g}"
    hint: dict[str, Any] = {
        "design": "paired" if paired else "unpaired",
        "p1": p1,
        "p2": p2,
        "cases": cases,
        "cases_b": cases_b,
        "icc": icc,
        "repeats": plan.repeats,
        "power": plan.power,
        "trials": HINT_TRIALS,
        "plan": command,
    }
    if paired:
        hint["limit"] = plan.limit
    else:
        hint.update(smallest_p=plan.smallest_p, reachable=plan.reachable)
    return hint
