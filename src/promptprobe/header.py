"""Header classification: is the protocol header present, absent or misplaced in a raw output?

Works on the exact text the model returned. Nothing here changes that text; the only
normalised copy is the one searched for near misses, and its matches map back to raw spans.
"""

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .errors import InputError

DEFAULT_MARKERS = ("[[ANSWER]]", "[[NO_ANSWER]]")
DEFAULT_NO_ANSWER = "[[NO_ANSWER]]"
WHERE_ORDER = ("fenced", "decorated", "leading_whitespace", "trailing", "late_line", "inline")

# Invisible characters a model emits that are not whitespace to str.isspace().
INVISIBLE = frozenset("\ufeff\u200b\u200c\u200d\u2060\u180e\u00ad")
# Markup that can wrap a header on the first line: emphasis, code, quotes, headings, bullets.
DECORATION = frozenset("*_`~>#-+|\"'“”‘’„«»「」『』")
FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})")
OPEN_BRACKETS = "[［【〔〖(（{｛<＜"
CLOSE_BRACKETS = "]］】〕〗)）}｝>＞"


@dataclass(frozen=True)
class HeaderConfig:
    markers: tuple[str, ...] = DEFAULT_MARKERS
    no_answer: str = DEFAULT_NO_ANSWER
    allow_leading_whitespace: bool = False

    def __post_init__(self) -> None:
        if not self.markers or any(not isinstance(m, str) or not m for m in self.markers):
            raise InputError("header markers must be a non-empty list of non-empty strings")
        if self.no_answer not in self.markers:
            raise InputError(
                f"header no_answer {self.no_answer!r} is not one of the markers {list(self.markers)}"
            )

    def to_dict(self) -> dict[str, Any]:
        return {
            "markers": list(self.markers),
            "no_answer": self.no_answer,
            "allow_leading_whitespace": self.allow_leading_whitespace,
        }


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


def _fenced_spans(text: str) -> list[tuple[int, int]]:
    """Character spans of ``` / ~~~ code blocks, opening line included; unclosed runs to the end."""
    spans = []
    offset = 0
    open_at: int | None = None
    fence = ""
    for line in text.split("\n"):
        match = FENCE.match(line)
        if open_at is None:
            if match:
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
    if any(start <= at < end for start, end in _fenced_spans(text)):
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


def _near_miss_pattern(markers: Sequence[str]) -> re.Pattern[str]:
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


def _near_miss(text: str, markers: Sequence[str]) -> str | None:
    # Search a per-character NFKC copy (full-width letters and brackets fold) and map back.
    starts: list[int] = []
    pieces = []
    for index, char in enumerate(text):
        folded = unicodedata.normalize("NFKC", char)
        pieces.append(folded)
        starts.extend([index] * len(folded))
    folded_text = "".join(pieces)
    starts.append(len(text))
    match = _near_miss_pattern(markers).search(folded_text)
    if match is None:
        return None
    raw_end = starts[match.end() - 1] + 1
    return text[starts[match.start()] : raw_end]


def classify(text: str, config: HeaderConfig | None = None) -> dict[str, Any]:
    """Classify the header of one raw output; the keys are DESIGN.md's `header` object."""
    config = config or HeaderConfig()
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
        "declared": marker if present else "answer",
        "marker": marker,
        "extra_markers": len(found) - 1,
        "near_miss": None,
    }
