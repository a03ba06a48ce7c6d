"""The smallest drop and rise n samples per arm detect (`probe plan --n N --p1 X`)."""

from ..stats.planning import EXACT_SAMPLES, EXACT_TEST, NORMAL_TEST, detectable_difference
from .inputs import check_flags
from .view import PlanView


def plan_mdd(n: int, p1: float, alpha: float = 0.05, power: float = 0.8) -> PlanView:
    """Exact power of the exact test up to EXACT_SAMPLES per arm, Fleiss's approximation above;
    `shown["to"]` holds the rate each detectable change reaches."""
    check_flags(p1=p1, alpha=alpha, power=power)
    difference = detectable_difference(n, p1, alpha, power)
    test = NORMAL_TEST if n > EXACT_SAMPLES else EXACT_TEST
    data = {
        "n": n,
        "p1": p1,
        "alpha": alpha,
        "power": power,
        "detectable_difference": difference,
        "test": test,
    }
    reached = {name: None if d is None else p1 + d for name, d in difference.items()}
    return PlanView("detectable", data, {"to": reached, "exact": test == EXACT_TEST})
