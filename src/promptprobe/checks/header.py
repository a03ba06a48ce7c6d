"""Header classification: is the protocol header present, absent or misplaced in a raw output?

Works on the exact text the model returned. Nothing here changes that text; the only
normalised copy is the one searched for near misses, and its matches map back to raw spans.
The header check records the classification as a sample's `header` object; its metrics are
the header classes and what the header declared against the case's `expect`.
"""

import re
import unicodedata
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from ..probeset import Case
from .base import Check, Metric, SampleView
from .settings import CheckSettings, HeaderConfig

HEADER_CLASSES = ("present", "absent", "misplaced", "empty")
WHERE_ORDER = ("fenced", "decorated", "leading_whitespace", "trailing", "late_line", "inline")

# Invisible characters a model emits that are not whitespace to str.isspace().
INVISIBLE = frozenset("\ufeff\u200b\u200c\u200d\u2060\u180e\u00ad")
# Markup that can wrap a header on the first line: emphasis, code, quotes, headings, bullets.
DECORATION = frozenset("*_`~>#-+|\"'“”‘’„«»「」『』")
FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})")
OPEN_BRACKETS = "[［【〔〖(（{｛<＜"
ASCII_BRACKETS = "[({<])}>"
CLOSE_BRACKETS = "]］】〕〗)）}｝>＞"


def _blank(chars: str) -> bool:
    return all(c.isspace() or c in INVISIBLE for c in chars)


def _find_markers(text: str, markers: Sequence[str]) -> list[tuple[int, str]]:
    """Non-overlapping marker occurrences in order; at one position the longest marker wins."""
    found = []
    pos = 0
    while True:
        best: tuple[int, str] | None = None
        for marker in markers:
            at = text.find(marker, pos)
            if at < 0:
                continue
            if best is None or (at, -len(marker)) < (best[0], -len(best[1])):
                best = (at, marker)
        if best is None:
            return found
        found.append(best)
        pos = best[0] + len(best[1])


def fenced_spans(text: str) -> list[tuple[int, int]]:
    """Character spans of ``` / ~~~ code blocks, opening line included; unclosed runs to the end."""
    spans = []
    offset = 0
    open_at: int | None = None
    fence = ""
    for line in text.split("\n"):
        match = FENCE.match(line)
        if open_at is None:
            # ```x``` on one line is a code span, not a fence: a backtick fence's info has no backtick.
            if match and not (match.group(1)[0] == "`" and "`" in line[match.end() :]):
                open_at, fence = offset, match.group(1)
        elif match and match.group(1)[0] == fence[0] and len(match.group(1)) >= len(fence):
            if line[match.end() :].strip() == "":
                spans.append((open_at, offset + len(line)))
                open_at = None
        offset += len(line) + 1
    if open_at is not None:
        spans.append((open_at, len(text)))
    return spans


def _where(text: str, at: int, marker: str) -> str:
    if any(start <= at < end for start, end in fenced_spans(text)):
        return "fenced"
    line_start = text.rfind("\n", 0, at) + 1
    before_on_line = text[line_start:at]
    first_line = _blank(text[:line_start])
    if first_line and not _blank(before_on_line):
        prefix = "".join(c for c in before_on_line if not (c.isspace() or c in INVISIBLE))
        if all(c in DECORATION for c in prefix):
            return "decorated"
    if _blank(text[:at]):
        return "leading_whitespace"
    if _blank(text[at + len(marker) :]):
        return "trailing"
    if _blank(before_on_line):
        return "late_line"
    return "inline"


@lru_cache(maxsize=32)
def _near_miss_pattern(markers: tuple[str, ...]) -> re.Pattern[str]:
    """Bracketed look-alikes of each marker: other brackets, case, spaces or hyphens for `_`."""
    alternatives = []
    for marker in markers:
        words = re.findall(r"[^\W_]+", marker)
        if not words:
            continue
        body = r"[\s_\-]*".join(re.escape(w) for w in words)
        alternatives.append(
            rf"[{re.escape(OPEN_BRACKETS)}]{{1,3}}\s*{body}\s*[{re.escape(CLOSE_BRACKETS)}]{{1,3}}"
        )
        if "_" in marker:
            # A bare NO_ANSWER with its brackets dropped.
            alternatives.append(rf"(?<![^\W_]){'_'.join(re.escape(w) for w in words)}(?![^\W_])")
    return re.compile("|".join(alternatives) or r"(?!x)x", re.IGNORECASE)


@lru_cache(maxsize=32)
def _marker_words(markers: tuple[str, ...]) -> tuple[tuple[str, ...], ...]:
    """Each marker's words, case-folded: a near miss of it contains all of them."""
    return tuple(tuple(w.casefold() for w in re.findall(r"[^\W_]+", m)) for m in markers)


def _near_miss(text: str, markers: Sequence[str]) -> str | None:
    pattern = _near_miss_pattern(tuple(markers))
    words = _marker_words(tuple(markers))
    if text.isascii():
        # Most outputs: look only around each occurrence of a marker's longest word.
        lowered = text.lower()
        starts = []
        for marker_words in words:
            if not marker_words or not all(w in lowered for w in marker_words):
                continue
            anchor = max(marker_words, key=len)
            at = lowered.find(anchor)
            while at >= 0:
                low, high = max(0, at - 40), at + len(anchor) + 40
                window = text[low:high]
                # A near miss has a bracket (or the underscore of a bare NO_ANSWER) beside the word.
                if "_" in window or any(c in window for c in ASCII_BRACKETS):
                    match = pattern.search(text, low, high)
                    if match:
                        starts.append((match.start(), match.group()))
                at = lowered.find(anchor, at + 1)
        return min(starts)[1] if starts else None
    if unicodedata.is_normalized("NFKC", text):
        # Nothing would fold: search the text itself, if a marker's words are in it at all.
        folded = text.casefold()
        if not any(w and all(part in folded for part in w) for w in words):
            return None
        match = pattern.search(text)
        return match.group() if match else None
    # Search a per-character NFKC copy (full-width letters and brackets fold) and map back.
    starts: list[int] = []
    pieces = []
    for index, char in enumerate(text):
        folded = unicodedata.normalize("NFKC", char) if not char.isascii() else char
        pieces.append(folded)
        starts.extend([index] * len(folded))
    folded_text = "".join(pieces)
    starts.append(len(text))
    match = pattern.search(folded_text)
    if match is None:
        return None
    raw_end = starts[match.end() - 1] + 1
    return text[starts[match.start()] : raw_end]


def classify(text: str | None, config: HeaderConfig | None = None) -> dict[str, Any]:
    """Classify the header of one raw output; the keys are the `header` object of docs/runs.md.

    `None` or "" (the model returned no text: a null content, a refusal, a tool call) is
    `empty`, its own state.
    """
    config = config or HeaderConfig()
    if not text:
        return {
            "header": "empty",
            "where": None,
            "line": None,
            "declared": "answer",
            "marker": None,
            "extra_markers": 0,
            "near_miss": None,
        }
    found = _find_markers(text, config.markers)
    if not found:
        return {
            "header": "absent",
            "where": None,
            "line": None,
            "declared": "answer",
            "marker": None,
            "extra_markers": 0,
            "near_miss": _near_miss(text, config.markers),
        }
    at, marker = found[0]
    start = len(text) - len(text.lstrip()) if config.allow_leading_whitespace else 0
    present = at == start
    return {
        "header": "present" if present else "misplaced",
        "where": None if present else _where(text, at, marker),
        "line": text.count("\n", 0, at) + 1,
        # Production's filter reads only the start: a misplaced marker means "answer".
        "declared": "no_answer" if present and marker == config.no_answer else "answer",
        "marker": marker,
        "extra_markers": len(found) - 1,
        "near_miss": None,
    }


# -- the check ------------------------------------------------------------------------------


def header_class(sample: dict[str, Any]) -> str | None:
    """present, absent, misplaced or empty; None for a sample that failed."""
    header = sample.get("header")
    return header["header"] if header else None


def declared_no_answer(sample: dict[str, Any]) -> bool:
    header = sample.get("header")
    return bool(header) and header["declared"] == "no_answer"


def _always(case: Case, settings: CheckSettings) -> bool:
    return True


def _is(header: str) -> Any:
    return lambda sample, case, settings: header_class(sample) == header


class HeaderCheck(Check):
    key = "header"
    metrics = (
        Metric("header_present", True, "the output starts with a header marker", _always, _is("present")),
        Metric("header_absent", False, "no header marker anywhere in the output", _always, _is("absent")),
        Metric(
            "header_misplaced",
            False,
            "a marker is in the output but not at its start",
            _always,
            _is("misplaced"),
        ),
        Metric(
            "declared_correct",
            True,
            "what the header declared matches the case's expect (cases with expect)",
            lambda case, settings: case.expect is not None,
            lambda sample, case, settings: declared_no_answer(sample) == (case.expect == "no_answer"),
        ),
        Metric(
            "refusal_recall",
            True,
            "expect = no_answer and the header declared no_answer",
            lambda case, settings: case.expect == "no_answer",
            lambda sample, case, settings: declared_no_answer(sample),
        ),
        Metric(
            "false_refusal",
            False,
            "expect = answer but the header declared no_answer",
            lambda case, settings: case.expect == "answer",
            lambda sample, case, settings: declared_no_answer(sample),
        ),
    )

    def evaluate(self, view: SampleView) -> dict[str, Any]:
        return classify(view.text, view.settings.header)
