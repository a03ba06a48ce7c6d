"""`probe plan`: a plan's view object (promptprobe.planning builds it) laid out as text or JSON."""

from typing import Any

from ..jsonio import dumps_pretty
from ..planning import PlanView
from .tables import counted


def render_plan(view: PlanView, fmt: str = "table") -> str:
    """A plan as text (or JSON): whichever of the four plans `view` is."""
    if fmt == "json":
        return dumps_pretty(view.data)
    if view.kind == "sequential":
        from .sequential_plan import render_sequential_plan

        return render_sequential_plan(view)
    if view.kind == "gate":
        return _gate_text(view.data)
    if view.kind == "detectable":
        return _detectable_text(view)
    text = _samples_text(view)
    if "cases" in view.data:
        text += _paired_text(view) + _unpaired_text(view)
        if view.shown["icc_between"]:
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


def _detectable_text(view: PlanView) -> str:
    """The smallest drop and rise n samples per arm detect."""
    result, reached = view.data, view.shown["to"]
    d = result["detectable_difference"]
    parts = []
    for name, word in (("down", "drop"), ("up", "rise")):
        if d[name] is None:
            parts.append(f"no {word} is detectable")
        else:
            parts.append(f"a {word} of {abs(100 * d[name]):.1f} points (to {100 * reached[name]:.1f}%)")
    how = "" if view.shown["exact"] else f"; {result['test']}"
    return (
        f"with {counted(result['n'], 'sample')} per arm at {100 * result['p1']:.1f}%, the smallest "
        f"detectable change (alpha {result['alpha']:g}, power {result['power']:g}{how}) is "
        + " or ".join(parts)
    )


def _samples_text(view: PlanView) -> str:
    """Samples per arm for one question asked n times per arm."""
    result = view.data
    if result["n_per_arm"] is None:
        return (
            f"to tell {100 * result['p1']:.1f}% from {100 * result['p2']:.1f}% one question needs more than "
            f"{view.shown['max_samples']:,} samples per arm"
        )
    how = (
        f"exact power {100 * result['n_per_arm_power']:.1f}% of the exact test"
        if result["n_per_arm_power"] is not None
        else f"{result['test']}"
    )
    return (
        f"to tell {100 * result['p1']:.1f}% from {100 * result['p2']:.1f}% with one question asked n "
        f"times per arm you need {result['n_per_arm']:,} samples per arm ({how}; two-sided alpha "
        f"{result['alpha']:g}, power {result['power']:g})"
    )


def _paired_text(view: PlanView) -> str:
    """Repeats of the same cases under both versions (none when the sides differ)."""
    result = view.data
    cases, icc = result["cases"], result["icc"]
    where = f"the same {counted(cases, 'case')} under both versions, as one probe run asks them"
    if "cases_b" in result:
        return "\npaired: none (the two sides ask different numbers of cases)"
    if result["repeats"] is None:
        return (
            f"\npaired ({where}) at ICC {icc:g}: more than {view.shown['max_repeats']} repeats per case "
            f"(simulated power at {view.shown['max_repeats']}: {100 * result['paired_power']:.0f}%)"
        )
    return (
        f"\npaired ({where}) at ICC {icc:g}: {counted(result['repeats'], 'repeat')} per case "
        f"({view.shown['paired_samples']} samples per arm; "
        f"simulated power {100 * result['paired_power']:.0f}%)"
    )


def _unpaired_text(view: PlanView) -> str:
    """Repeats of different questions per version, or the cases a side it needs instead."""
    result = view.data
    cases, icc = result["cases"], result["icc"]
    unequal = "cases_b" in result
    sides = f"{cases} and {result['cases_b']} cases" if unequal else f"{cases} a side"
    unpaired = f"\nunpaired (different questions per version, {sides})"
    needed = result["unpaired_cases_needed"]
    needed_text = (
        f"it needs at least {needed} cases a side"
        if needed
        else f"it needs more than {view.shown['max_cases']:,} cases a side"
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
