"""Choosing arms: `RUN#prompt=NAME,model=SPEC` selectors, parsed and matched to one arm."""

from pathlib import Path

from ..counts import ArmCounts, CountsTable
from ..errors import InputError
from ..runref import split_selector
from .pairs import chosen


def parse_selector(text: str) -> tuple[Path, dict[str, str]]:
    """`RUN`, `RUN#prompt=NAME`, `RUN#model=SPEC` or `RUN#prompt=NAME,model=SPEC`."""
    run, selector = split_selector(text)
    filters: dict[str, str] = {}
    if selector:
        # A model spec may hold commas only after '@' (URLs rarely do); split on ",prompt=" etc.
        parts: list[str] = []
        for piece in selector.split(","):
            if parts and "=" not in piece.split("@")[0]:
                parts[-1] += "," + piece
            else:
                parts.append(piece)
        for part in parts:
            key, eq, value = part.partition("=")
            if not eq or key not in ("prompt", "model") or not value:
                raise InputError(f"{text}: selector must be prompt=NAME and/or model=SPEC, got {part!r}")
            if key in filters:
                # The last one would silently win: an arm has one prompt and one model.
                raise InputError(f"{text}: {key}= is given twice; an arm has one {key}, so give it once")
            filters[key] = value
    return Path(run), filters


def select_arm(text: str, counts: CountsTable) -> ArmCounts:
    _, filters = parse_selector(text)
    arms = chosen(filters, counts)
    if len(arms) != 1:
        problem = "matches no arm" if not arms else f"matches {len(arms)} arms"
        listing = "; ".join(a.label for a in counts.arms)
        raise InputError(f"{text}: {problem}; the run has: {listing}")
    return arms[0]
