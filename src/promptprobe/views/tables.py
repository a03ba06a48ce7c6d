"""Tables that fit: plain tables respect the terminal width (`COLUMNS`), dropping the columns
that matter least first and then wrapping the widest text; markdown tables are left whole."""

import os
import shutil
import textwrap
from collections.abc import Sequence
from typing import Any


MIN_WIDTH = 40


def terminal_width() -> int:
    columns = os.environ.get("COLUMNS")
    if columns and columns.isdigit():
        return max(MIN_WIDTH, int(columns))
    return max(MIN_WIDTH, shutil.get_terminal_size((100, 24)).columns)


def color_enabled(stream: Any) -> bool:
    """ANSI colour only on a terminal, and never with NO_COLOR set (no-color.org)."""
    return "NO_COLOR" not in os.environ and hasattr(stream, "isatty") and stream.isatty()


def _width(text: str) -> int:
    return max((len(line) for line in text.splitlines()), default=0)


def table(
    rows: Sequence[Sequence[Any]],
    headers: Sequence[str],
    fmt: str = "table",
    *,
    optional: Sequence[str] = (),
    width: int | None = None,
) -> str:
    """`fmt` "md" gives a GitHub table; "table" a plain one no wider than `width`.

    `optional` names the columns that may be dropped to fit, least important first.
    """
    from tabulate import tabulate  # only when a table is printed (not for --format json)

    if fmt == "md":
        return tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True)
    limit = width or terminal_width()
    keep = list(range(len(headers)))

    def render(columns: list[int], maxwidths: list[int] | None = None) -> str:
        body = [[row[i] for i in columns] for row in rows]
        if maxwidths:
            # Wrapped here: tabulate's own maxcolwidths mis-parses cells such as "5,670".
            body = [
                [textwrap.fill(str(cell), width, break_long_words=True) for cell, width in zip(row, maxwidths)]
                for row in body
            ]
        return tabulate(body, headers=[headers[i] for i in columns], tablefmt="simple", disable_numparse=True)

    text = render(keep)
    for name in optional:
        if _width(text) <= limit:
            break
        if name in headers:
            keep.remove(headers.index(name))
            text = render(keep)
    if _width(text) <= limit:
        return text
    # Still too wide: wrap the widest columns until it fits (or they are down to 12 characters).
    widths = [max([len(str(headers[i]))] + [len(str(r[i])) for r in rows]) for i in keep]
    while _width(text) > limit:
        widest = max(range(len(widths)), key=lambda j: widths[j])
        if widths[widest] <= 12:
            break
        widths[widest] = max(12, widths[widest] - max(2, (_width(text) - limit)))
        text = render(keep, list(widths))
    return text
