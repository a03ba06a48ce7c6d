"""`probe runs`: the runs of a runs directory, newest first, as a table that keeps the arms in
view at 100 columns (the id already holds the probe set and the time, so those go first)."""

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..jsonio import dumps_pretty
from ..runref import RunInfo
from .tables import fit_table, table, terminal_width, wrap_cell

HEADERS = ["id", "probe set", "arms", "status", "samples", "errors", "created", "verdict"]
MIN_ARMS_WIDTH = 16
WRAPPED_ARMS = 30  # the arms wrap to this width before other columns are left out
DROPPABLE = ("created", "probe set")
VERDICT_WIDTH = 14  # the verdict folds to this in the plain table


def arms_cell(pairs: Sequence[tuple[str, str]], width: int | None = None) -> str:
    """A run's arms in few words: `a, b x helpdesk` when they are every prompt with every model,
    else each `prompt x model`, separated by `;`. With `width`, folded to it: the prompts, then
    `x` and the models on lines of their own."""
    prompts = list(dict.fromkeys(prompt for prompt, _ in pairs))
    models = list(dict.fromkeys(model for _, model in pairs))
    if pairs and len(pairs) == len(prompts) * len(models):
        parts = [", ".join(prompts), "x " + ", ".join(models)]
    else:
        parts = ["; ".join(f"{prompt} x {model}" for prompt, model in pairs)]
    if width is None or len(" ".join(parts)) <= width:
        return " ".join(parts)
    return "\n".join(wrap_cell(part, width) for part in parts)


def _samples(info: RunInfo) -> str:
    """`72/72`; a sequential run's plan is its cap, which it usually stops well before."""
    if info.planned is None:
        return str(info.samples)
    if info.sequential:
        return f"{info.samples} (cap {info.planned})"
    return f"{info.samples}/{info.planned}"


def _row(info: RunInfo) -> list[Any]:
    return [
        info.id,
        info.probeset,
        arms_cell(info.pairs),
        info.status,
        _samples(info),
        info.errors,
        info.created.replace("T", " ")[:19],
        verdict_cell(info.verdict, VERDICT_WIDTH),
    ]


def verdict_cell(verdict: dict[str, Any] | None, width: int | None = None) -> str:
    """`always-header better` (on the run's first metric, header_present; JSON names it), folded
    to `width`; `-` for a run that is not two arms with samples."""
    if not verdict:
        return "-"
    return verdict["short"] if width is None else wrap_cell(verdict["short"], width)


def with_verdicts(found: list[RunInfo]) -> list[RunInfo]:
    """The runs, each two-arm run with its headline verdict (counted: one pass over its samples);
    a run that cannot be counted keeps none."""
    from dataclasses import replace

    from ..counts import build_counts
    from ..errors import InputError
    from ..paths import RunFileRefused
    from ..runref import damaged
    from .overview import run_headline

    out = []
    for info in found:
        verdict = None
        if len(info.pairs) == 2 and info.samples and not info.problem:
            try:
                verdict = run_headline(build_counts(info.path, on_warning=lambda message: None))
            except RunFileRefused as exc:
                info = damaged(info, exc)  # a file of it a link or a FIFO: listed as damaged
            except InputError:
                verdict = None  # its problems are `probe report`'s to say
        out.append(replace(info, verdict=verdict))
    return out


def runs_view(folder: str | Path | None = None, limit: int | None = None) -> list[RunInfo]:
    """`probe runs`: the runs of a runs directory, newest first, with their headline verdicts."""
    from ..runref import list_runs

    return with_verdicts(list_runs(folder, limit))


def _width(text: str) -> int:
    return max((len(line) for line in text.splitlines()), default=0)


def render_runs(found: list[RunInfo], fmt: str = "table", width: int | None = None) -> str:
    """The runs as JSON (`{"runs": [...]}`), a markdown table, or a plain table no wider than
    the terminal (the verdict folded to 14 columns): the arms wrap (to no less than 30 columns),
    then `created` and `probe set` (both in the id) are left out, then the verdict, then the arms
    wrap further; a long spec breaks after `@` or `/`."""
    if fmt == "json":
        return dumps_pretty({"runs": [info.to_dict() for info in found]})
    rows = [_row(info) for info in found]
    if fmt != "table":
        for row, info in zip(rows, found, strict=True):
            row[-1] = verdict_cell(info.verdict)
        return table(rows, HEADERS, fmt)
    limit = width or terminal_width()
    arms = HEADERS.index("arms")
    natural = max(len(row[arms]) for row in rows)
    choices = (
        HEADERS,
        [h for h in HEADERS if h != "created"],
        [h for h in HEADERS if h not in DROPPABLE],
        [h for h in HEADERS if h not in DROPPABLE and h != "verdict"],  # `probe runs --json` keeps it
    )
    for last, kept in enumerate(choices, 1 - len(choices)):
        columns = [HEADERS.index(name) for name in kept]
        others = [i for i in columns if i != arms]
        rest = _width(plain([[row[i] for i in others] for row in rows], [HEADERS[i] for i in others]))
        room = limit - rest - 2
        if natural <= room or room >= WRAPPED_ARMS or last == 0:
            room = max(MIN_ARMS_WIDTH, min(room, natural))
            fitted = [
                [arms_cell(info.pairs, room) if i == arms else row[i] for i in columns]
                for info, row in zip(found, rows, strict=True)
            ]
            return plain(fitted, kept)
    raise AssertionError("unreachable: the last choice always renders")


def plain(rows: list[list[Any]], headers: Sequence[str]) -> str:
    """A plain table as it is (its cells already folded)."""
    return fit_table(rows, headers, "table", width=10**6)[0]
