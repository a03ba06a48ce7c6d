"""One metric compared between two arms: the test its design takes, the effect and the notes."""

from typing import Any

from ..checks import METRICS, Metric
from ..errors import InputError
from ..stats.intervals import newcombe
from ..stats.tests import boschloo_affordable, boschloo_p
from ..stats.verdict import generalisation, paired_verdict, unpaired_verdict
from .hints import add_hints
from .rates import metric_object
from .settle import settle
from .side import Side, is_paired


def _summary(side: Side, rule: Metric) -> dict[str, Any]:
    return {
        "label": side.label,
        "name": side.name or side.label,
        **metric_object(side.per_case, rule.higher_is_better),
        "cases": len(side.per_case),
    }


def compare_sides(
    a: Side,
    b: Side,
    metric: str = "header_present",
    alpha: float = 0.05,
    exact: bool = True,
    hints: bool = True,
    rule: Metric | None = None,
    settled: bool = True,
) -> dict[str, Any]:
    """The compare object for B - A on one metric (`exact=False` skips Boschloo; `hints=False`
    leaves the sample-size hints out, for `add_hints` to add once a family is adjusted; `rule`:
    the metric itself when it is a run's own [[check]]).

    Its verdict uses this metric's own p; `adjust` re-decides a family of them on adjusted p
    (`settled=False` leaves the settling to it, so that no interval is computed twice)."""
    rule = rule or METRICS[metric]
    higher = rule.higher_is_better
    sa, sb = _summary(a, rule), _summary(b, rule)
    if not sa["n"] or not sb["n"]:
        raise InputError(
            f"metric {metric}: no samples to compare ({sa['n']} vs {sb['n']}); "
            f"it counts only {rule.description}"
        )
    paired = is_paired(a, b)
    decision, paired_view, notes = _decide(a, b, alpha, paired)
    effect = decision.effect
    failed = _every_sample_failed(sa, sb)
    notes += _caveats(sa, sb, metric, higher, exact, effect.sign)
    result = {
        "metric": metric,
        "design": "paired" if paired else "unpaired",
        "a": sa,
        "b": sb,
        "diff": sb["rate"] - sa["rate"],
        "newcombe": list(newcombe(sb["k"], sb["n"], sa["k"], sa["n"])),
        "p_boschloo": boschloo_p(sb["k"], sb["n"], sa["k"], sa["n"]) if exact else None,
        "test": decision.test,
        "p_value": decision.p_value,
        "p_adjusted": decision.p_value,
        "effect": {
            "estimate": effect.estimate,
            "interval": None,
            "method": effect.method,
            "adjusted_for": None,
        },
        "paired": paired_view,
        "verdict": decision.verdict,
        "higher_is_better": higher,
        "worse": False,
        "better_arm": None,
        "decided_by": None,
        "n_needed_per_arm": None,
        "repeats_needed": None,
        "notes": notes,
        "_sign": effect.sign,
        "_interval_at": decision.interval_at,
        "_failed": failed,
    }
    if settled:
        settle(result, decision.p_value, alpha)
    if hints:
        add_hints(result, a, b, alpha)
    return result


def _decide(a: Side, b: Side, alpha: float, paired: bool) -> tuple[Any, dict[str, Any] | None, list[str]]:
    """The design's test (paired: with the per-case view and the generalisation line)."""
    if not paired:
        decision = unpaired_verdict(
            [(c[0], c[1]) for c in a.per_case.values()], [(c[0], c[1]) for c in b.per_case.values()], alpha
        )
        if a.probeset_sha256 and b.probeset_sha256 and a.probeset_sha256 != b.probeset_sha256:
            return decision, None, ["the two sides ran different probe sets: no paired view"]
        return decision, None, ["the two sides did not ask the same questions: no paired view"]
    order = list(a.per_case)
    counts_a = [(a.per_case[c][0], a.per_case[c][1]) for c in order]
    counts_b = [(b.per_case[c][0], b.per_case[c][1]) for c in order]
    general = generalisation(counts_a, counts_b, alpha)
    paired_view = {
        "cases": [
            {"case_id": c, "a": list(ka), "b": list(kb), "diff": kb[0] / kb[1] - ka[0] / ka[1]}
            for c, ka, kb in zip(order, counts_a, counts_b, strict=True)
        ],
        "mean_diff": general.mean_diff,
        "interval": list(general.interval) if general.interval else None,
        "p_value": general.p_value,
        "test": "sign test over the cases that moved",
        "moved": general.up + general.down,
        "up": general.up,
        "down": general.down,
        "likely": general.likely,
    }
    return paired_verdict(counts_a, counts_b, alpha), paired_view, []


def _caveats(sa: dict[str, Any], sb: dict[str, Any], metric: str, higher: bool, exact: bool,
             sign: int) -> list[str]:
    """What a reader must know beside the verdict: failed samples, a skipped Boschloo, Simpson."""
    notes = []
    if sa["errors"] or sb["errors"]:
        notes.append(
            f"failed samples: A {sa['errors']} of {sa['n']}, B {sb['errors']} of {sb['n']}; each counts as "
            f"{'a miss' if higher else 'an event'} for {metric} (errors never flatter an arm)"
        )
    if exact and not boschloo_affordable(sa["n"], sb["n"]):
        notes.append(
            "Boschloo's exact p is not computed at this size (it grows with n²); the verdict never used it"
        )
    if sign and (sb["rate"] - sa["rate"]) * sign < 0:
        notes.append(
            "the pooled rates point the other way than the comparison within cases (Simpson's paradox: "
            "repeats differ between cases); the verdict and the effect compare within cases"
        )
    return notes


def _every_sample_failed(a: dict[str, Any], b: dict[str, Any]) -> str | None:
    """ "A" or "B" when every sample of that arm counted on this metric failed and some of the
    other arm's did not: that arm is worse on the metric whatever the test can tell."""
    a_failed = a["n"] > 0 and a["errors"] == a["n"]
    b_failed = b["n"] > 0 and b["errors"] == b["n"]
    if a_failed == b_failed:
        return None
    return "A" if a_failed else "B"
