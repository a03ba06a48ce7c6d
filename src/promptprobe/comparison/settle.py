"""What a result decided: verdict, worse, better arm, and the interval at the level it was decided at."""

from typing import Any

from ..stats.tests import decides
from ..stats.verdict import word
from .words import describe


def better_arm(verdict: str, higher_is_better: bool) -> str | None:
    """ "A" or "B": the arm reliably better in the metric's direction (None when undecided)."""
    if verdict == "indistinguishable":
        return None
    return "B" if (verdict == "B>A") == higher_is_better else "A"


def effective_alpha(p_value: float | None, p_adjusted: float | None, alpha: float) -> float:
    """The level a metric was tested at: alpha·p/p_adjusted, at which p decides exactly when
    p_adjusted decides at alpha (alpha itself for one metric). A p of 0 decides at any level:
    its interval is given at alpha/100."""
    if p_value is None or p_adjusted is None or p_adjusted == p_value:
        return alpha
    if p_value <= 0:
        return alpha if p_adjusted <= 0 else alpha / 100
    level = alpha * p_value / p_adjusted
    # Rounding must not make the level disagree with the adjusted decision.
    wanted = decides(p_adjusted, alpha)
    for _ in range(4):
        if decides(p_value, level) == wanted:
            break
        level *= 1 + 1e-12 if wanted else 1 - 1e-12
    return level


def settle(
    result: dict[str, Any], p_adjusted: float | None, alpha: float, verdict: str | None = None
) -> None:
    """What a decided or undecided result says, from its (adjusted) p at alpha, or from a
    `verdict` another rule reached (the sequential rule): verdict, worse, better_arm, decided_by,
    the interval beside the verdict at the level it was decided at, and the words."""
    result["p_adjusted"] = p_adjusted
    higher = result["higher_is_better"]
    sign = effect_sign(result)
    decided_by = "sequential rule" if verdict is not None else None
    if verdict is None:
        verdict = word(p_adjusted, alpha, sign)
        decided_by = "test" if verdict != "indistinguishable" else None
    if decided_by == "test" and result["design"] == "sequential":
        decided_by = "sequential rule"
    failed = result.get("_failed")
    against = {"A": 1 if higher else -1, "B": -1 if higher else 1}.get(failed or "", 0)
    # An arm that produced nothing is worse on every metric that applies: also where the other arm
    # is at the same extreme (0/15 against 15 failures), or a dead candidate would pass the gate.
    if verdict == "indistinguishable" and failed and sign in (against, 0):
        verdict = "B>A" if against > 0 else "A>B"
        decided_by = f"every sample of {failed} failed"
    result.update(
        verdict=verdict,
        worse=is_worse(verdict, higher),
        better_arm=better_arm(verdict, higher),
        decided_by=decided_by,
    )
    level = effective_alpha(result["p_value"], p_adjusted, alpha)
    interval, why = None, None
    interval_at = result.get("_interval_at")
    if decided_by and decided_by.startswith("every sample"):
        why = f"{decided_by}, so there is no output to compare; the test alone cannot tell"
    elif interval_at is None:
        why = result.get("_no_interval") or "this design's test has no interval"
    else:
        interval = interval_at(level)
        decided = verdict != "indistinguishable"
        if interval is None:
            why = result.get("_no_interval") or "no interval of this test agrees with its verdict here"
        elif (interval[0] > 0 or interval[1] < 0) != decided:
            interval = None
            why = "the interval at this level would contradict the verdict"
    result["effect"].update(
        interval=None if interval is None else list(interval),
        confidence=1 - level,
        stated_confidence=1 - alpha,
        interval_note=why,
    )
    describe(result)


def finish(result: dict[str, Any]) -> dict[str, Any]:
    """Drop what only the building of a result needed (before it is shown or written)."""
    for key in [k for k in result if k.startswith("_")]:
        del result[key]
    return result


def is_worse(verdict: str, higher_is_better: bool) -> bool:
    """B is reliably worse in the metric's direction."""
    return verdict == ("A>B" if higher_is_better else "B>A")


def effect_sign(result: dict[str, Any]) -> int:
    """The direction a verdict may take: the effect's exact sign (a sequential decision's own)."""
    if "_sign" in result:
        return result["_sign"]
    estimate = result["effect"]["estimate"]
    return (estimate > 0) - (estimate < 0)
