"""Assertions a case pins on its output: `contains`, `not_contains`, `regex` (lists), checked on
the exact output text, case-sensitive unless the case says `ignore_case = true`."""

import re
from typing import Any

from ..probeset import Case
from .base import Check, Metric, SampleView, details
from .settings import CheckSettings


def has_assertions(case: Case) -> bool:
    return bool(case.contains or case.not_contains or case.regex)


def evaluate_assertions(case: Case, text: str) -> dict[str, Any]:
    flags = re.IGNORECASE if case.ignore_case else 0
    folded = text.casefold() if case.ignore_case else text

    def present(needle: str) -> bool:
        return (needle.casefold() if case.ignore_case else needle) in folded

    failed = []
    failed += [{"kind": "contains", "value": v} for v in case.contains if not present(v)]
    failed += [{"kind": "not_contains", "value": v} for v in case.not_contains if present(v)]
    failed += [{"kind": "regex", "value": v} for v in case.regex if not re.search(v, text, flags)]
    total = len(case.contains) + len(case.not_contains) + len(case.regex)
    return {"checked": total, "failed": failed}


def _applies(case: Case, settings: CheckSettings) -> bool:
    return has_assertions(case)


class AssertionsCheck(Check):
    key = "assertions"
    metrics = (
        Metric(
            "assertions_pass",
            True,
            "every contains / not_contains / regex assertion of the case holds (cases with assertions)",
            _applies,
            lambda sample, case, settings: not details(sample, "assertions").get("failed", [True]),
        ),
    )

    def evaluate(self, view: SampleView) -> dict[str, Any] | None:
        if not has_assertions(view.case):
            return None
        return evaluate_assertions(view.case, view.text or "")
