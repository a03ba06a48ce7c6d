"""`probe plan`: decide the sample size before changing the prompt."""

from typing import Any

from .errors import InputError
from .stats import detectable_difference, gate_block_probability, n_per_arm, repeats_needed


def plan_sample_size(
    p1: float,
    p2: float,
    alpha: float = 0.05,
    power: float = 0.8,
    cases: int | None = None,
    icc: float | None = None,
) -> dict[str, Any]:
    if p1 == p2:
        raise InputError("--p1 and --p2 are equal: there is no difference to detect")
    result: dict[str, Any] = {
        "p1": p1,
        "p2": p2,
        "n_per_arm": n_per_arm(p1, p2, alpha, power),
        "alpha": alpha,
        "power": power,
    }
    if cases is not None and icc is not None:
        result.update(cases=cases, icc=icc, repeats=repeats_needed(result["n_per_arm"], cases, icc))
    return result


def plan_mdd(n: int, p1: float, alpha: float = 0.05, power: float = 0.8) -> dict[str, Any]:
    return {
        "n": n,
        "p1": p1,
        "alpha": alpha,
        "power": power,
        "detectable_difference": detectable_difference(n, p1, alpha, power),
    }


def plan_gate(p: float, k: int) -> dict[str, Any]:
    return {"p": p, "block_probability": {str(i): gate_block_probability(p, i) for i in range(1, k + 1)}}


def render_plan(result: dict[str, Any]) -> str:
    if "block_probability" in result:
        lines = [
            f"a gate that fails a case when any of k runs fails, at {100 * result['p']:.0f}% "
            "per-run success, blocks it:"
        ]
        lines += [f"  k={k}: {100 * v:.1f}%" for k, v in result["block_probability"].items()]
        lines.append(
            "More repeats make such a gate redder, not more reliable: each extra run is one more "
            "chance to fail. Gate on a rate with an interval instead (probe compare "
            "--fail-if-worse), which more repeats make sharper."
        )
        return "\n".join(lines)
    if "detectable_difference" in result:
        d = result["detectable_difference"]
        parts = []
        for name, word in (("down", "drop"), ("up", "rise")):
            if d[name] is None:
                parts.append(f"no {word} is detectable")
            else:
                parts.append(
                    f"a {word} of {abs(100 * d[name]):.1f} points (to {100 * (result['p1'] + d[name]):.1f}%)"
                )
        return (
            f"with {result['n']} samples per arm at {100 * result['p1']:.1f}%, the smallest "
            f"detectable change (alpha {result['alpha']}, power {result['power']}) is " + " or ".join(parts)
        )
    text = (
        f"to tell {100 * result['p1']:.1f}% from {100 * result['p2']:.1f}% you need "
        f"{result['n_per_arm']} samples per arm (two-sided alpha {result['alpha']}, power {result['power']})"
    )
    if "cases" in result:
        if result["repeats"] is None:
            text += (
                f"; {result['cases']} cases at ICC {result['icc']} cannot get there at any number "
                f"of repeats: add cases (at least {int(result['n_per_arm'] * result['icc']) + 1})"
            )
        else:
            text += (
                f"; with {result['cases']} cases at ICC {result['icc']} that is {result['repeats']} "
                f"repeats per case ({result['repeats'] * result['cases']} samples per arm)"
            )
    return text
