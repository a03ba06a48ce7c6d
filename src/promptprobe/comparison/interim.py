"""Whether a comparison's verdicts are final: a fixed-size run still running is compared on what
it has so far, and its design is only valid at its end, so every verdict of it is interim (said
first, flagged `"interim": true`, coloured as neither better nor worse); a sequential run's
verdict is final once its rule has stopped, and says so. Decided here once, for every view."""

from pathlib import Path
from typing import Any

from ..counts import CountsTable
from .words import mark_interim


def _stopped(counts: CountsTable) -> dict[str, Any] | None:
    """A sequential run's last round, when its rule stopped there (None otherwise)."""
    if not counts.manifest.get("sequential") or not counts.sequential:
        return None
    last = counts.sequential[-1]
    return last if last.get("stop") else None


def interim_of(counts: CountsTable) -> dict[str, Any] | None:
    """A run whose verdicts are not final yet: a fixed-size run still running (its design is only
    valid at its end), or a sequential one whose rule has not stopped; None for any other."""
    if counts.state != "running" or _stopped(counts) is not None:
        return None
    name = Path(counts.run).name
    if counts.manifest.get("sequential"):
        counted = f"{counts.recorded} samples, {len(counts.sequential)} rounds"
        why = "its sequential rule has not stopped, and only its stop decides"
    else:
        of = f" of {counts.planned}" if counts.planned else ""
        counted = f"{counts.recorded}{of} samples"
        why = "a fixed-size design is only valid at its end"
    note = f"run {name} is still running ({counted} counted); {why}: no verdict of it is final"
    return {"run": name, "counted": counted, "note": note}


def final_of(counts: CountsTable) -> str | None:
    """A sequential run whose rule stopped: its verdict is final, said so."""
    last = _stopped(counts)
    if last is None:
        return None
    return (
        f"run {Path(counts.run).name}'s sequential rule stopped at round {len(counts.sequential)} "
        f"({last.get('decision') or 'undecided'}); that decision stands, and more samples would not change it"
    )


def mark_interim_verdicts(results: list[dict[str, Any]], tables: list[CountsTable]) -> dict[str, Any]:
    """Flag every result of the comparison of these runs' arms (interim when any run is), and the
    comparison's own keys: `interim`, `interim_notes`, `final_notes`."""
    interim = [found for counts in tables if (found := interim_of(counts)) is not None]
    for result in results:
        result["interim"] = bool(interim)
        if interim:
            mark_interim(result, "; ".join(i["counted"] for i in interim))
    return {
        "interim": bool(interim),
        "interim_notes": [i["note"] for i in interim],
        "final_notes": [note for counts in tables if (note := final_of(counts)) is not None],
    }
