"""One sample's outcome on one metric, as every report counts it: 1 (the event: a header present,
a refusal, ...), 0, or None where the metric does not apply. A failed sample (no output) takes the
metric's unfavourable outcome, except on a user's check that returned None for every output of
its case (outside that metric, as a passing sample there would be). The row export, the incident
file and the viewer's search all read outcomes through here, so "failed" means one thing."""

from collections.abc import Mapping
from typing import Any

from ..checks import CheckSettings, Metric
from ..probeset import Case


def outcome(
    name: str,
    metric: Metric,
    record: Mapping[str, Any],
    case: Case | None,
    settings: CheckSettings,
    check_applies: Mapping[str, Mapping[str, bool]],
) -> int | None:
    """The sample's outcome on metric `name` (1, 0 or None: does not apply)."""
    if case is None or not metric.applies(case, settings):
        return None
    if record.get("error"):
        if check_applies.get(name, {}).get(record["case_id"]) is False:
            return None  # a check that returned None for every output of this case
        return 0 if metric.higher_is_better else 1
    recorded = record.get("outcomes") or {}
    if name in recorded:
        return int(bool(recorded[name]))
    found = metric.outcome(record, case, settings)  # None: a check that does not apply
    return None if found is None else int(bool(found))


def failed(metric: Metric, value: int | None) -> bool:
    """Whether an outcome is the metric's unfavourable one (a miss, or an event to avoid)."""
    return value is not None and bool(value) != metric.higher_is_better
