"""Checks: each turns a recorded sample into details and yes/no metrics (one module each).

The registry here is the one place metrics are listed: report, compare, the gate, sequential
runs and the HTML view read names and directions from `metrics_for(settings)`, the built-in
`METRICS` and the run's own `[[check]]`s. A new check registers here (or through `register`)
and needs no change anywhere else.
"""

from collections.abc import Iterable
from typing import Any

from ..probeset import Case
from .assertions import AssertionsCheck
from .base import Check, CheckError, Metric, SampleView
from .citations import CitationsCheck
from .filter_parity import FilterCheck
from .header import HeaderCheck
from .judge import judge_metric
from .retrieval import RetrievalCheck
from .settings import (
    CheckSettings,
    CitationConfig,
    FilterConfig,
    HeaderConfig,
    JudgeConfig,
    UserCheckConfig,
)
from .user import UserCheck, user_metric

CHECK_TYPES: list[type[Check]] = []
METRICS: dict[str, Metric] = {}


def register(check_type: type[Check]) -> type[Check]:
    """Add a check and its metrics to the registry; metric names must be unique."""
    for metric in check_type.metrics:
        if metric.name in METRICS:
            raise ValueError(f"metric {metric.name!r} is registered twice")
        METRICS[metric.name] = metric
    CHECK_TYPES.append(check_type)
    return check_type


for _check in (HeaderCheck, FilterCheck, CitationsCheck, RetrievalCheck, AssertionsCheck):
    register(_check)


def metric_names() -> tuple[str, ...]:
    return tuple(METRICS)


def metrics_for(settings: CheckSettings | None) -> dict[str, Metric]:
    """The built-in metrics, then the user's own checks of these settings (a run's, or a config's),
    then the judged ones."""
    if settings is None or not (settings.user or settings.judges):
        return METRICS
    return {
        **METRICS,
        **{c.name: user_metric(c) for c in settings.user},
        **{c.name: judge_metric(c) for c in settings.judges},
    }


def build_checks(settings: CheckSettings) -> list[Check]:
    """The active checks for these settings, in registry order (the filter before the rest), and
    the user's own last (they may read what the others found)."""
    checks = [check_type(settings) for check_type in CHECK_TYPES if check_type.active(settings)]
    if UserCheck.active(settings):
        checks.append(UserCheck(settings))
    return checks


def outcomes(sample: dict[str, Any], case: Case, settings: CheckSettings) -> dict[str, bool]:
    """Each applicable metric's outcome for a sample that has an output (recorded with it, so
    that counting a large run reads them instead of re-deriving them). A user check that said
    "does not apply" (None) for this sample has no outcome; a judged check has none here either
    (its judgments come later and are read when counting)."""
    found = {}
    judged = {j.name for j in settings.judges}
    for name, metric in metrics_for(settings).items():
        if name in judged:
            continue
        if metric.applies(case, settings):
            outcome = metric.outcome(sample, case, settings)
            if outcome is not None or name in METRICS:  # only a user's check may not apply
                found[name] = bool(outcome)
    return found


def run_checks(checks: Iterable[Check], view: SampleView) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """(the header object, the other checks' details) for one sample; CheckError on failure."""
    header = None
    found: dict[str, Any] = {}
    for check in checks:
        seen = {**found, "header": header} if header is not None else found
        entries = check.entries(
            SampleView(view.case, view.text, view.passages, view.response, view.settings, seen)
        )
        if "header" in entries:
            header = entries.pop("header")
        found.update(entries)
    return header, found


def close_checks(checks: Iterable[Check]) -> None:
    """Release what the checks hold (the worker processes of your own checks)."""
    for check in checks:
        check.close()


__all__ = [
    "CHECK_TYPES",
    "JudgeConfig",
    "METRICS",
    "Check",
    "CheckError",
    "CheckSettings",
    "CitationConfig",
    "FilterConfig",
    "HeaderConfig",
    "Metric",
    "SampleView",
    "UserCheckConfig",
    "build_checks",
    "close_checks",
    "metric_names",
    "metrics_for",
    "outcomes",
    "register",
    "run_checks",
]
