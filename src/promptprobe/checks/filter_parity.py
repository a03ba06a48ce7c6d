"""Production filter parity: run production's own post-filter on each raw output and record
what the visitor saw and the status production would have logged.

`[filter] function = "myapp.stream:filter_reply"` is called as f(raw_text) and returns
{"text": str, "status": str} or a (text, status) tuple. A filter that raises makes that
sample an error (kind `filter`).
"""

from typing import Any

from ..errors import InputError
from ..probeset import Case
from ..production import call_production, import_function
from .base import Check, CheckError, Metric, SampleView, details
from .settings import CheckSettings


def _active(case: Case, settings: CheckSettings) -> bool:
    return settings.filter is not None


class FilterCheck(Check):
    key = "filter"
    metrics = (
        Metric(
            "status_correct",
            True,
            "the status production's filter logged matches the case's expect (cases with expect)",
            lambda case, settings: settings.filter is not None and case.expect is not None,
            lambda sample, case, settings: details(sample, "filter").get("declared") == case.expect,
        ),
        Metric(
            "marker_leaked",
            False,
            "a header marker is still in the text production's filter showed the visitor",
            _active,
            lambda sample, case, settings: bool(details(sample, "filter").get("marker_leaked")),
        ),
    )

    def __init__(self, settings: CheckSettings) -> None:
        assert settings.filter is not None
        self.reference = settings.filter.function
        self.function = import_function(self.reference, "[filter] function")

    @classmethod
    def active(cls, settings: CheckSettings) -> bool:
        return settings.filter is not None

    def evaluate(self, view: SampleView) -> dict[str, Any]:
        assert view.settings.filter is not None
        try:
            result = call_production(self.function, self.reference, "[filter] function", view.text or "")
        except InputError:
            raise
        except Exception as exc:  # production code may raise anything; it is this sample's error
            raise CheckError("filter", f"[filter] {self.reference}: {type(exc).__name__}: {exc}") from exc
        if isinstance(result, dict):
            text, status = result.get("text"), result.get("status")
        elif isinstance(result, tuple | list) and len(result) == 2:
            text, status = result
        else:
            raise CheckError(
                "filter", f"[filter] {self.reference}: must return {{'text', 'status'}} or (text, status)"
            )
        if not isinstance(text, str) or not isinstance(status, str):
            raise CheckError("filter", f"[filter] {self.reference}: 'text' and 'status' must be strings")
        markers = view.settings.header.markers
        return {
            "text": text,
            "status": status,
            "declared": "no_answer" if status == view.settings.filter.no_answer_status else "answer",
            "marker_leaked": any(marker in text for marker in markers),
        }
