"""Tables that fit: plain tables respect the terminal width (`COLUMNS`), dropping the columns
that matter least first and then wrapping the widest text; markdown tables are left whole."""

import os
import shutil
import sys
import textwrap
from collections.abc import Sequence
from typing import Any

MIN_WIDTH = 40


def counted(n: int, noun: str) -> str:
    """"1 case", "3 cases": a count with its noun in the right number."""
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"


def terminal_width() -> int:
    """COLUMNS when set; else the terminal's width when stdout is one; else 100 (a pipe, a log)."""
    columns = os.environ.get("COLUMNS")
    if columns and columns.isdigit():
        return max(MIN_WIDTH, int(columns))
    if sys.stdout.isatty():
        return max(MIN_WIDTH, shutil.get_terminal_size((100, 24)).columns)
    return 100


def color_enabled(stream: Any) -> bool:
    """ANSI colour only on a terminal, and never with NO_COLOR set (no-color.org)."""
    return "NO_COLOR" not in os.environ and hasattr(stream, "isatty") and stream.isatty()


def display_width(line: str) -> int:
    """Columns a line takes on a terminal: a CJK character takes two (tabulate pads by this too)."""
    from wcwidth import wcswidth

    width = wcswidth(line)
    return width if width >= 0 else len(line)  # a control character: counted as one


def _width(text: str) -> int:
    return max((display_width(line) for line in text.splitlines()), default=0)


def wrap(text: str, fmt: str = "table", width: int | None = None) -> str:
    """Prose lines folded to the terminal width (left whole for markdown and piped JSON)."""
    if fmt != "table":
        return text
    limit = width or terminal_width()
    # Table rows (columns padded by two spaces or more) are already fitted: leave them. A word
    # longer than the line (a path) is never cut: it overflows rather than breaks.
    return "\n".join(
        textwrap.fill(line, limit, subsequent_indent="  ", break_on_hyphens=False, break_long_words=False)
        if len(line) > limit and "  " not in line
        else line
        for line in text.split("\n")
    )


WRAP_FIRST = ("prompt", "model", "case", "phrase", "examples")  # long free text wraps before numbers do


def table(
    rows: Sequence[Sequence[Any]],
    headers: Sequence[str],
    fmt: str = "table",
    *,
    optional: Sequence[str | tuple[str, ...]] = (),
    wrap_first: Sequence[str] = WRAP_FIRST,
    width: int | None = None,
) -> str:
    """`fmt` "md" gives a GitHub table; "table" a plain one no wider than `width`.

    `optional` names the columns that may be dropped to fit, least important first; a tuple
    of names is dropped together."""
    return fit_table(rows, headers, fmt, optional=optional, wrap_first=wrap_first, width=width)[0]


def fit_table(
    rows: Sequence[Sequence[Any]],
    headers: Sequence[str],
    fmt: str = "table",
    *,
    optional: Sequence[str | tuple[str, ...]] = (),
    wrap_first: Sequence[str] = WRAP_FIRST,
    width: int | None = None,
) -> tuple[str, list[str]]:
    """The table and the headers it kept. Cells wrap between words only: a word is never cut
    (a table that cannot fit otherwise stays wider than the terminal)."""
    from tabulate import tabulate  # only when a table is printed (not for --format json)

    if fmt == "md":
        return tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True), list(headers)
    limit = width or terminal_width()
    keep = list(range(len(headers)))

    def render(columns: list[int], maxwidths: list[int] | None = None) -> str:
        body = [[row[i] for i in columns] for row in rows]
        heads = [headers[i] for i in columns]
        if maxwidths:
            # Wrapped here: tabulate's own maxcolwidths mis-parses cells such as "5,670".
            body = [
                [
                    textwrap.fill(str(cell), width, break_long_words=False, break_on_hyphens=False)
                    for cell, width in zip(row, maxwidths, strict=True)
                ]
                for row in body
            ]
            heads = [
                textwrap.fill(head, width, break_long_words=False)
                for head, width in zip(heads, maxwidths, strict=True)
            ]
        return tabulate(body, headers=heads, tablefmt="simple", disable_numparse=True)

    text = render(keep)
    for group in optional:
        if _width(text) <= limit:
            break
        for name in (group,) if isinstance(group, str) else group:
            if name in headers and headers.index(name) in keep:
                keep.remove(headers.index(name))
        text = render(keep)
    if _width(text) <= limit:
        return text, [headers[i] for i in keep]
    # Still too wide: wrap the widest columns until it fits, those named in `wrap_first` before
    # the others, none narrower than its longest word (header or cell).
    widths = [max([len(str(headers[i]))] + [len(str(r[i])) for r in rows]) for i in keep]
    floors = [
        max(4, *(len(word) for value in [headers[i], *(r[i] for r in rows)] for word in str(value).split()))
        for i in keep
    ]
    first = [j for j, i in enumerate(keep) if headers[i] in wrap_first]
    for candidates in (first, list(range(len(keep)))):
        while _width(text) > limit:
            open_columns = [j for j in candidates if widths[j] > floors[j]]
            if not open_columns:
                break
            widest = max(open_columns, key=lambda j: widths[j] - floors[j])
            widths[widest] = max(floors[widest], widths[widest] - max(1, _width(text) - limit))
            text = render(keep, list(widths))
    return text, [headers[i] for i in keep]


BREAK_AFTER = "@,/:"  # in this order: before an endpoint's URL first


def _pieces(word: str, width: int) -> list[str]:
    """A word longer than `width` in pieces that fit, each ending after `@`, `,`, `/` or `:` (the
    first of these found in the second half of the line), else cut at the width."""
    pieces = []
    while len(word) > width:
        found = (word.rfind(c, width // 2, width) for c in BREAK_AFTER)
        cut = next((i + 1 for i in found if i >= 0), width)
        pieces.append(word[:cut])
        word = word[cut:]
    return [*pieces, word] if word else pieces


def wrap_cell(text: str, width: int) -> str:
    """A cell folded to `width`: between words where it can; a word longer than the line (a model
    spec with its URL) is broken inside, so a long name cannot push a column off the screen."""
    lines: list[str] = []
    line = ""
    for word in text.split():
        if len(word) <= width:
            if line and len(line) + 1 + len(word) <= width:
                line += " " + word
            else:
                lines += [line] if line else []
                line = word
            continue
        room = width - len(line) - 1
        if line and room >= max(8, width // 3):  # the long word starts on this line
            first = _pieces(word, room)[0]
            line, word = f"{line} {first}", word[len(first) :]
        lines += [line] if line else []
        *whole, line = _pieces(word, width)
        lines += whole
    if line:
        lines.append(line)
    return "\n".join(lines)
