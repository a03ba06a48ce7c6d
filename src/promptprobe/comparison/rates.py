"""One arm's rate on one metric, with its Wilson (continuity-corrected) and cluster-adjusted intervals
(report and compare)."""

from typing import Any

from ..stats.intervals import clustered_rate


def metric_object(
    per_case: dict[str, list[int]], higher_is_better: bool, confidence: float = 0.95
) -> dict[str, Any]:
    """The report's metric object from per-case [successes, trials, failures]."""
    cells = list(per_case.values())
    result = clustered_rate([c[0] for c in cells], [c[1] for c in cells], confidence)
    return {
        "k": result.k,
        "n": result.n,
        "errors": sum(c[2] for c in cells),
        "rate": result.rate,
        "wilson": list(result.wilson),
        "deff": result.deff,
        "n_eff": result.n_eff,
        "wilson_eff": list(result.wilson_eff),
        "higher_is_better": higher_is_better,
    }
