"""What `--until-decided` costs at given rates (`probe plan --sequential`): the run's own rule
(stats.sequential, the same code a run decides with) simulated with a fixed seed: the cap
`--detect` gives it, the mean samples to the stop and the power, each with its Monte Carlo error,
beside the fixed paired plan of the same power."""

import math
from typing import Any

from ..stats.planning import paired_repeats
from ..stats.sequential import SEQUENTIAL_TRIALS, rounds_for_power, simulate_rounds
from .view import PlanView

# A fixed plan for more power than this is not searched (it needs many repeats to gain little).
MAX_FIXED_POWER = 0.99


def plan_sequential(
    p1: float,
    p2: float,
    cases: int,
    icc: float = 0.5,
    alpha: float = 0.05,
    power: float = 0.8,
    min_rounds: int = 2,
    detect: float = 0.15,
) -> PlanView:
    cap = rounds_for_power(detect, cases, alpha, 0.8, min_rounds)
    max_rounds = cap.rounds or cap.limit
    simulated = _simulate(p1, p2, cases, icc, alpha, min_rounds, max_rounds)
    fixed, same_power = _fixed_plans(p1, p2, cases, icc, alpha, power, simulated["achieved"])
    data = {
        "p1": p1,
        "p2": p2,
        "cases": cases,
        "icc": icc,
        "alpha": alpha,
        "detect": detect,
        "max_rounds": max_rounds,
        "cap_reached": cap.rounds is not None,
        **simulated["figures"],
        "fixed_rounds": fixed,
        "fixed_power": power,  # the power `fixed_rounds` is for (--power)
        "fixed_same_power": same_power,
        "trials": SEQUENTIAL_TRIALS,
    }
    return PlanView("sequential", data, _shown(data))


def _simulate(
    p1: float, p2: float, cases: int, icc: float, alpha: float, min_rounds: int, max_rounds: int
) -> dict[str, Any]:
    """The rounds and samples to the stop, the power and the share decided, over the trials."""
    import numpy as np

    trials = SEQUENTIAL_TRIALS
    stops, directions = simulate_rounds(p1, p2, cases, icc, alpha, min_rounds, max_rounds, trials)
    rounds = np.where(stops > 0, stops, max_rounds)
    samples = rounds * cases  # per arm
    right = (stops > 0) & (directions == np.sign(p2 - p1)) if p1 != p2 else np.zeros(trials, dtype=bool)
    wrong = (stops > 0) & ~right
    achieved = float(right.mean())
    decided = float((stops > 0).mean())
    figures = {
        "rounds": {
            "mean": float(rounds.mean()),
            "median": float(np.median(rounds)),
            "p90": float(np.percentile(rounds, 90)),
        },
        "samples_per_arm": {
            "mean": float(samples.mean()),
            "mean_error": float(1.96 * samples.std() / math.sqrt(trials)),
            "median": float(np.median(samples)),
            "p90": float(np.percentile(samples, 90)),
        },
        "power": achieved if p1 != p2 else None,
        "power_error": float(1.96 * math.sqrt(achieved * (1 - achieved) / trials)) if p1 != p2 else None,
        "decided_share": decided,
        "decided_share_error": float(1.96 * math.sqrt(decided * (1 - decided) / trials)),
        "wrong_direction_share": float(wrong.mean()),
    }
    return {"achieved": achieved, "figures": figures}


def _fixed_plans(
    p1: float, p2: float, cases: int, icc: float, alpha: float, power: float, achieved: float
) -> tuple[int | None, dict[str, Any] | None]:
    """The fixed paired plan's repeats for `power`, and for the power the rule achieved."""
    if p1 == p2:
        return None, None
    fixed = paired_repeats(p1, p2, cases, icc, alpha, power).repeats
    if achieved < 0.5:  # a plan's power lies in [0.5, 1)
        return fixed, None
    level = min(MAX_FIXED_POWER, achieved)
    return fixed, {"power": level, "rounds": paired_repeats(p1, p2, cases, icc, alpha, level).repeats}


def _shown(data: dict[str, Any]) -> dict[str, Any]:
    """The samples per arm of each fixed plan, and the sequential mean as a multiple of the one of
    the same power."""
    cases, same, fixed = data["cases"], data["fixed_same_power"], data["fixed_rounds"]
    shown: dict[str, Any] = {"fixed_samples": fixed * cases if fixed else None}
    if same and same["rounds"]:
        shown["same_power_samples"] = same["rounds"] * cases
        shown["same_power_ratio"] = data["samples_per_arm"]["mean"] / shown["same_power_samples"]
    return shown
