"""pytest helpers: gate a test on a comparison the way `probe compare --fail-if-worse` gates CI.

from promptprobe.testing import assert_not_worse

def test_the_new_prompt_is_not_worse(probe_run):
    assert_not_worse(f"{probe_run}#prompt=old", f"{probe_run}#prompt=new", metric="refusal_recall")
"""

from collections.abc import Sequence
from pathlib import Path

from . import arguments
from .api import Comparison, compare


def assert_not_worse(
    baseline: str,
    candidate: str,
    metric: str | Sequence[str] = "header_present",
    *,
    alpha: float = 0.05,
    all_metrics: bool = False,
    runs_dir: str | Path | None = None,
) -> Comparison:
    """Fail (AssertionError) when the candidate is reliably worse than the baseline on the metric
    (several metrics: at the adjusted p), with the `FAIL:` sentence of `probe compare
    --fail-if-worse`; return the comparison otherwise."""
    arguments.reference("baseline", baseline)
    arguments.reference("candidate", candidate)
    comparison = compare(baseline, candidate, metric, alpha=alpha, all_metrics=all_metrics, runs_dir=runs_dir)
    failures = comparison.failures()
    if failures:
        raise AssertionError("\n".join(failures))
    return comparison


__all__ = ["assert_not_worse"]
