"""Citations: outputs that cite passages as [n] (pattern configurable in `[citations]`).

Citations whose number lies outside 1..N (N = passages given) are stripped, repeatedly, since
stripping can join what is left into a new citation (`[1[99]]` becomes `[1]`); the counts come
from a scan of the cleaned text, not from the first scan. Not citations: matches inside code
(``` / ~~~ blocks and `inline code`) and markdown links (`[1](https://...)`). The default
pattern matches only ASCII brackets and single numbers, as production's own regex would: a
range `[1-3]` or full-width `［1］` is not a citation.
"""

import re
from typing import Any

from ..probeset import Case
from .base import Check, Metric, SampleView, details
from .header import fenced_spans
from .settings import CheckSettings

INLINE_CODE = re.compile(r"(`+)(?!`).+?(?<!`)\1", re.DOTALL)


def _code_spans(text: str) -> list[tuple[int, int]]:
    """Fenced code blocks and `inline code`: a number there is not a citation."""
    return fenced_spans(text) + [m.span() for m in INLINE_CODE.finditer(text)]


def _citations(text: str, pattern: re.Pattern[str]) -> list[tuple[int, int, int]]:
    """(start, end, number) of each citation outside code and links."""
    code = _code_spans(text)
    found = []
    for match in pattern.finditer(text):
        start, end = match.span()
        if any(a <= start < b for a, b in code) or text.startswith("(", end):
            continue
        try:
            number = int(match.group(1))
        except (TypeError, ValueError):
            continue  # the group did not capture a number: not a citation
        found.append((start, end, number))
    return found


def scan(text: str, passages: int, pattern: str) -> dict[str, Any]:
    """Strip invalid citations until none is left, then count from the cleaned text."""
    compiled = re.compile(pattern)
    stripped: list[str] = []
    cleaned = text
    while True:
        invalid = [(s, e) for s, e, n in _citations(cleaned, compiled) if not 1 <= n <= passages]
        if not invalid:
            break
        for start, end in reversed(invalid):
            stripped.append(cleaned[start:end])
            cleaned = cleaned[:start] + cleaned[end:]
    valid = sorted({n for _, _, n in _citations(cleaned, compiled)})
    return {
        "passages": passages,
        "valid": valid,
        "cited_source_count": len(valid),
        "stripped_citation_count": len(stripped),
        "stripped": stripped[:20],
    }


def _applies(case: Case, settings: CheckSettings) -> bool:
    return settings.citations is not None and case.expect != "no_answer"


def _counts(sample: dict[str, Any]) -> tuple[int, int]:
    found = details(sample, "citations")
    return found.get("cited_source_count", 0), found.get("stripped_citation_count", 0)


class CitationsCheck(Check):
    key = "citations"
    metrics = (
        Metric(
            "citation_valid_only",
            True,
            "cites at least one passage and no number outside 1..N (cases not expecting no_answer)",
            _applies,
            lambda sample, case, settings: _counts(sample)[0] > 0 and _counts(sample)[1] == 0,
        ),
        Metric(
            "citation_invalid",
            False,
            "cites a number outside 1..N",
            _applies,
            lambda sample, case, settings: _counts(sample)[1] > 0,
        ),
        Metric(
            "citation_none",
            False,
            "cites no passage after invalid citations are stripped",
            _applies,
            lambda sample, case, settings: _counts(sample)[0] == 0,
        ),
    )

    def __init__(self, settings: CheckSettings) -> None:
        assert settings.citations is not None
        self.pattern = settings.citations.pattern

    @classmethod
    def active(cls, settings: CheckSettings) -> bool:
        return settings.citations is not None

    def evaluate(self, view: SampleView) -> dict[str, Any]:
        return scan(view.text or "", len(view.passages), self.pattern)
