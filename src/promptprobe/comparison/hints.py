"""The hint beside an undecided verdict: what it would take to tell the two rates apart."""

from typing import Any

from ..stats.intervals import icc_anova
from ..stats.planning import MAX_REPEATS, paired_repeats, size_plan, unpaired_repeats
from .side import Side
from .words import describe

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

