"""`probe plan --sequential`: what `--until-decided` costs at given rates, by simulating the run's
own rule (stats.sequential, the same code a run decides with) with a fixed seed: the cap
`--detect` gives it, the mean samples to the stop and the power, each with its Monte Carlo error,
beside the fixed paired plan of the same power."""

import math
from typing import Any

from ..stats.planning import paired_repeats
from ..stats.sequential import SEQUENTIAL_TRIALS, rounds_for_power, simulate_rounds
from .tables import counted

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
) -> dict[str, Any]:
    import numpy as np

    cap = rounds_for_power(detect, cases, alpha, 0.8, min_rounds)
    max_rounds = cap.rounds or cap.limit
    trials = SEQUENTIAL_TRIALS
    stops, directions = simulate_rounds(p1, p2, cases, icc, alpha, min_rounds, max_rounds, trials)
    rounds = np.where(stops > 0, stops, max_rounds)
    samples = rounds * cases  # per arm
    right = (stops > 0) & (directions == np.sign(p2 - p1)) if p1 != p2 else np.zeros(trials, dtype=bool)
    wrong = (stops > 0) & ~right
    achieved = float(right.mean())
    decided = float((stops > 0).mean())
    fixed = same_power = None
    if p1 != p2:
        fixed = paired_repeats(p1, p2, cases, icc, alpha, power).repeats
        if achieved >= 0.5:  # a plan's power lies in [0.5, 1)
            level = min(MAX_FIXED_POWER, achieved)
            same_power = {"power": level, "rounds": paired_repeats(p1, p2, cases, icc, alpha, level).repeats}
    return {
        "p1": p1,
        "p2": p2,
        "cases": cases,
        "icc": icc,
        "alpha": alpha,
        "detect": detect,
        "max_rounds": max_rounds,
        "cap_reached": cap.rounds is not None,
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
        "fixed_rounds": fixed,
        "fixed_power": power,  # the power `fixed_rounds` is for (--power)
        "fixed_same_power": same_power,
        "trials": trials,
    }


def render_sequential_plan(result: dict[str, Any]) -> str:
    from .tables import wrap

    r, samples = result["rounds"], result["samples_per_arm"]
    cases, cap = result["cases"], result["max_rounds"]
    rates = f"{100 * result['p1']:.0f}% vs {100 * result['p2']:.0f}%"
    lines = [
        f"--until-decided at {rates} with {counted(cases, 'case')} (ICC {result['icc']:g}, "
        f"alpha {result['alpha']:g}), "
        f"simulated {result['trials']} times with the run's own rule:",
        f"- samples per arm to the stop: mean {samples['mean']:.0f} (±{samples['mean_error']:.0f}), median "
        f"{samples['median']:.0f}, 90th percentile {samples['p90']:.0f} (rounds: mean {r['mean']:.1f}; "
        f"a round asks {'the case' if cases == 1 else f'each of the {cases} cases'} once per arm)",
    ]
    cap_words = f"the cap of {cap} rounds (--detect {100 * result['detect']:g})"
    if result["power"] is None:
        lines.append(
            f"- equal rates: a false alarm (a decision either way) within {cap_words} in "
            f"{100 * result['decided_share']:.1f}% (±{100 * result['decided_share_error']:.1f}) of runs (the "
            f"rule keeps it at most alpha, {result['alpha']:g}; the ± is the simulation's error)"
        )
    else:
        wrong = 100 * result["wrong_direction_share"]
        lines.append(
            f"- power (decided the right way within {cap_words}): {100 * result['power']:.1f}% "
            f"(±{100 * result['power_error']:.1f}); the wrong way: {wrong:.1f}%"
        )
    if not result["cap_reached"]:
        lines.append(
            f"- --detect {100 * result['detect']:g} would need more than {cap} rounds for 80% power; "
            "the simulation stopped there"
        )
    same = result["fixed_same_power"]
    if same and same["rounds"]:
        fixed = same["rounds"] * cases
        lines.append(
            f"- a fixed paired plan with the same power ({100 * same['power']:.0f}%): "
            f"{counted(same['rounds'], 'repeat')} ({counted(fixed, 'sample')} per arm; "
            f"the sequential mean is {samples['mean'] / fixed:.2f}x that)"
        )
    if result["fixed_rounds"]:
        lines.append(
            f"- a fixed paired plan with {100 * result.get('fixed_power', 0.8):g}% power: "
            f"{counted(result['fixed_rounds'], 'repeat')} "
            f"({counted(result['fixed_rounds'] * cases, 'sample')} per arm)"
        )
    return wrap("\n".join(lines))
