"""`probe plan`: decide the sample size before changing the prompt.

Every input is checked here (finite; rates in [0, 1]; alpha in (0, 0.5]; power in [0.5, 1);
ICC in [0, 1]) and a bad one is an InputError naming the flag.
"""

import math
from typing import Any

from ..errors import InputError
from ..jsonio import dumps_pretty
from ..stats.planning import (
    EXACT_SAMPLES,
    EXACT_TEST,
    MAX_SAMPLES,
    NORMAL_TEST,
    design_plan,
    detectable_difference,
    gate_block_probability,
    size_plan,
    validate,
)
from .tables import counted


def _check(name: str, value: float | None, low: float, high: float, **kwargs: bool) -> None:
    if value is None:
        return
    try:
        validate(name, value, low, high, **kwargs)
    except ValueError as exc:
        raise InputError(f"--{exc}") from None


def check_flags(
    p1: float | None = None,
    p2: float | None = None,
    alpha: float = 0.05,
    power: float = 0.8,
    icc: float | None = None,
    p: float | None = None,
) -> None:
    _check("p1", p1, 0, 1)
    _check("p2", p2, 0, 1)
    _check("p", p, 0, 1)
    _check("icc", icc, 0, 1)
    _check("alpha", alpha, 0, 0.5, low_open=True)
    _check("power", power, 0.5, 1, high_open=True)


def plan_sample_size(
    p1: float,
    p2: float,
    alpha: float = 0.05,
    power: float = 0.8,
    cases: int | None = None,
    icc: float | None = None,
    cases_b: int | None = None,
) -> dict[str, Any]:
    """Every figure is the power of the test the verdict uses: exact for one question asked n
    times per arm, simulated for a probe set of `cases` cases (paired and unpaired; `cases_b`:
    B's cases of an unpaired design whose sides differ, which has no paired figure)."""
    check_flags(p1, p2, alpha, power, icc)
    if p1 == p2:
        raise InputError("--p1 and --p2 are equal: there is no difference to detect")
    size = size_plan(p1, p2, alpha, power)
    result: dict[str, Any] = {
        "p1": p1,
        "p2": p2,
        "n_per_arm": size.n,
        "n_per_arm_power": size.power,
        "test": size.test,
        "alpha": alpha,
        "power": power,
    }
    if cases is not None and icc is not None:
        sides_differ = cases_b is not None and cases_b != cases
        paired = None if sides_differ else design_plan(p1, p2, cases, icc, alpha, power, paired=True)
        unpaired = design_plan(p1, p2, cases, icc, alpha, power, paired=False, cases_b=cases_b)
        result.update(
            cases=cases,
            **({"cases_b": cases_b} if sides_differ else {}),
            icc=icc,
            repeats=paired.repeats if paired else None,
            paired_power=paired.power if paired else None,
            repeats_unpaired=unpaired.repeats,
            unpaired_power=unpaired.power,
            unpaired_cases_needed=unpaired.cases_needed,
            unpaired_cases_needed_power=unpaired.cases_power,
            unpaired_smallest_p=unpaired.smallest_p,
            unpaired_reachable=unpaired.reachable,
        )
    return result


def plan_mdd(n: int, p1: float, alpha: float = 0.05, power: float = 0.8) -> dict[str, Any]:
    check_flags(p1=p1, alpha=alpha, power=power)
    return {
        "n": n,
        "p1": p1,
        "alpha": alpha,
        "power": power,
        "detectable_difference": detectable_difference(n, p1, alpha, power),
        "test": NORMAL_TEST if n > EXACT_SAMPLES else EXACT_TEST,
    }


def plan_gate(p: float, k: int) -> dict[str, Any]:
    check_flags(p=p)
    return {"p": p, "block_probability": {str(i): gate_block_probability(p, i) for i in range(1, k + 1)}}


def render_plan(result: dict[str, Any], fmt: str = "table") -> str:
    """A plan as text (or JSON): whichever of the four plans `result` is."""
    if fmt == "json":
        return dumps_pretty(result)
    if "rounds" in result:
        from .sequential_plan import render_sequential_plan

        return render_sequential_plan(result)
    if "block_probability" in result:
        return _gate_text(result)
    if "detectable_difference" in result:
        return _detectable_text(result)
    text = _samples_text(result)
    if "cases" in result:
        text += _paired_text(result) + _unpaired_text(result)
        icc = result["icc"]
        if math.isfinite(icc) and 0 < icc < 1:
            text += (
                "\nthe ICC is how alike repeats of one question are; `probe report` shows the DEFF a run had"
            )
    return text


def _gate_text(result: dict[str, Any]) -> str:
    """An any-of-k gate's chance of blocking a case, k = 1..K."""
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


def _detectable_text(result: dict[str, Any]) -> str:
    """The smallest drop and rise n samples per arm detect."""
    d = result["detectable_difference"]
    parts = []
    for name, word in (("down", "drop"), ("up", "rise")):
        if d[name] is None:
            parts.append(f"no {word} is detectable")
        else:
            parts.append(
                f"a {word} of {abs(100 * d[name]):.1f} points (to {100 * (result['p1'] + d[name]):.1f}%)"
            )
    how = "" if result["test"] == EXACT_TEST else f"; {result['test']}"
    return (
        f"with {counted(result['n'], 'sample')} per arm at {100 * result['p1']:.1f}%, the smallest "
        f"detectable change (alpha {result['alpha']:g}, power {result['power']:g}{how}) is "
        + " or ".join(parts)
    )


def _samples_text(result: dict[str, Any]) -> str:
    """Samples per arm for one question asked n times per arm."""
    if result["n_per_arm"] is None:
        text = (
            f"to tell {100 * result['p1']:.1f}% from {100 * result['p2']:.1f}% one question needs more than "
            f"{MAX_SAMPLES:,} samples per arm"
        )
    else:
        how = (
            f"exact power {100 * result['n_per_arm_power']:.1f}% of the exact test"
            if result["n_per_arm_power"] is not None
            else f"{result['test']}"
        )
        text = (
            f"to tell {100 * result['p1']:.1f}% from {100 * result['p2']:.1f}% with one question asked n "
            f"times per arm you need {result['n_per_arm']:,} samples per arm ({how}; two-sided alpha "
            f"{result['alpha']:g}, power {result['power']:g})"
        )
    return text


def _paired_text(result: dict[str, Any]) -> str:
    """Repeats of the same cases under both versions (none when the sides differ)."""
    cases, icc = result["cases"], result["icc"]
    where = f"the same {counted(cases, 'case')} under both versions, as one probe run asks them"
    if "cases_b" in result:
        return "\npaired: none (the two sides ask different numbers of cases)"
    if result["repeats"] is None:
        return (
            f"\npaired ({where}) at ICC {icc:g}: more than 200 repeats per case "
            f"(simulated power at 200: {100 * result['paired_power']:.0f}%)"
        )
    return (
        f"\npaired ({where}) at ICC {icc:g}: {counted(result['repeats'], 'repeat')} per case "
        f"({result['repeats'] * cases} samples per arm; "
        f"simulated power {100 * result['paired_power']:.0f}%)"
    )


def _unpaired_text(result: dict[str, Any]) -> str:
    """Repeats of different questions per version, or the cases a side it needs instead."""
    cases, icc = result["cases"], result["icc"]
    unequal = "cases_b" in result
    sides = f"{cases} and {result['cases_b']} cases" if unequal else f"{cases} a side"
    unpaired = f"\nunpaired (different questions per version, {sides})"
    needed = result["unpaired_cases_needed"]
    needed_text = (
        f"it needs at least {needed} cases a side" if needed else "it needs more than 2,000 cases a side"
    )
    if not result["unpaired_reachable"]:
        each = sides if unequal else f"{counted(cases, 'case')} a side"
        return (
            f"{unpaired}: cannot reach alpha {result['alpha']:g} at all: the smallest p the case "
            f"permutation test can give with {each} is {result['unpaired_smallest_p']:.3g}; {needed_text}"
        )
    if result["repeats_unpaired"] is None:
        if icc >= 1:
            reason = "at ICC 1 every repeat of a question gives the same outcome, so repeats do not help"
        else:
            reason = (
                f"even unlimited repeats reach only {100 * result['unpaired_power']:.0f}% power "
                f"at ICC {icc:g}"
            )
        return f"{unpaired}: no number of repeats gets there: {reason}; {needed_text}"
    return (
        f"{unpaired}: {counted(result['repeats_unpaired'], 'repeat')} per case "
        f"(simulated power {100 * result['unpaired_power']:.0f}%)"
    )
