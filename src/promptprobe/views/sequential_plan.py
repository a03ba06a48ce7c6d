"""`probe plan --sequential`: how many samples `--until-decided` takes to a decision, by simulating
the same rule with a fixed seed, with the cap `--detect` gives it and the fixed paired plan."""

from typing import Any

from ..stats.planning import paired_repeats
from ..stats.sequential import KT, SEQUENTIAL_TRIALS, rounds_for_power, simulate_rounds


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

    cap = rounds_for_power(detect, cases, alpha, 0.8, min_rounds, KT)
    max_rounds = cap.rounds or cap.limit
    fixed = paired_repeats(p1, p2, cases, icc, alpha, power).repeats if p1 != p2 else None
    stops, directions = simulate_rounds(p1, p2, cases, icc, alpha, min_rounds, max_rounds, SEQUENTIAL_TRIALS)
    rounds = np.where(stops > 0, stops, max_rounds)
    samples = rounds * cases  # per arm
    wrong = (directions != 0) & (directions != np.sign(p2 - p1)) if p1 != p2 else directions != 0
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
            "median": float(np.median(samples)),
            "p90": float(np.percentile(samples, 90)),
        },
        "decided_share": float((stops > 0).mean()),
        "wrong_direction_share": float(wrong.mean()),
        "fixed_rounds": fixed,
        "trials": SEQUENTIAL_TRIALS,
    }


def render_sequential_plan(result: dict[str, Any]) -> str:
    r, samples = result["rounds"], result["samples_per_arm"]
    cases = result["cases"]
    cap = result["max_rounds"]
    lines = [
        f"--until-decided at {100 * result['p1']:.0f}% vs {100 * result['p2']:.0f}% with {cases} cases "
        f"(ICC {result['icc']:g}, alpha {result['alpha']:g}), simulated {result['trials']} times:",
        f"  samples per arm to a decision: median {samples['median']:.0f}, 90th percentile "
        f"{samples['p90']:.0f} (rounds: median {r['median']:.0f}, 90th percentile {r['p90']:.0f}; a round "
        f"asks each of the {cases} cases once per arm)",
        f"  decided within the cap of {cap} rounds (--detect {100 * result['detect']:g}): "
        f"{100 * result['decided_share']:.0f}%",
    ]
    if not result["cap_reached"]:
        lines.append(
            f"  --detect {100 * result['detect']:g} would need more than {cap} rounds for 80% power; "
            "the simulation stopped there"
        )
    if result["fixed_rounds"]:
        lines.append(
            f"  a fixed paired plan with 80% power: {result['fixed_rounds']} repeats "
            f"({result['fixed_rounds'] * cases} samples per arm)"
        )
    return "\n".join(lines)
