"""`probe plan --sequential`: how many rounds `--until-decided` takes, by simulation of the same
rule with a fixed seed, beside the cap it would use and the fixed paired plan."""

from typing import Any

from ..stats.planning import paired_repeats
from ..stats.sequential import simulate_rounds

TRIALS = 2000


def plan_sequential(
    p1: float,
    p2: float,
    cases: int,
    icc: float = 0.5,
    alpha: float = 0.05,
    power: float = 0.8,
    min_rounds: int = 2,
) -> dict[str, Any]:
    import numpy as np

    from ..engine.sequential import default_max_rounds

    cap, fixed_cap_basis = default_max_rounds(cases, alpha)
    fixed = paired_repeats(p1, p2, cases, icc, alpha, power).repeats if p1 != p2 else None
    stops, _ = simulate_rounds(p1, p2, cases, icc, alpha, min_rounds, cap, TRIALS)
    rounds = np.where(stops > 0, stops, cap)
    return {
        "p1": p1,
        "p2": p2,
        "cases": cases,
        "icc": icc,
        "alpha": alpha,
        "max_rounds": cap,
        "rounds": {
            "mean": float(rounds.mean()),
            "median": float(np.median(rounds)),
            "p80": float(np.percentile(rounds, 80)),
        },
        "decided_share": float((stops > 0).mean()),
        "fixed_rounds": fixed,
        "trials": TRIALS,
    }


def render_sequential_plan(result: dict[str, Any]) -> str:
    r = result["rounds"]
    cases = result["cases"]
    lines = [
        f"--until-decided at {100 * result['p1']:.0f}% vs {100 * result['p2']:.0f}% with {cases} cases "
        f"(ICC {result['icc']:g}, alpha {result['alpha']:g}), simulated {result['trials']} times:",
        f"  rounds to a decision: mean {r['mean']:.1f}, median {r['median']:.0f}, 80th percentile "
        f"{r['p80']:.0f} (a round is {cases} samples per arm)",
        f"  decided before the cap of {result['max_rounds']} rounds: {100 * result['decided_share']:.0f}%",
    ]
    if result["fixed_rounds"]:
        lines.append(
            f"  a fixed paired plan with 80% power: {result['fixed_rounds']} repeats "
            f"({result['fixed_rounds'] * cases} samples per arm)"
        )
    return "\n".join(lines)
