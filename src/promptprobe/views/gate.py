"""`probe gate`'s output: the gate's view object (`GateResult.to_dict()`) as a terminal table or as
markdown (the job summary and the pull-request comment). Every word comes from the view object."""

from typing import Any

from .tables import table

HEADERS = {
    "prompt": "prompt",
    "model": "model",
    "metric": "metric",
    "baseline": "baseline",
    "candidate": "candidate",
    "change": "change (B - A, interval)",
    "verdict": "verdict",
}
# A long table shows these rows; the others (can't tell yet) fold under a details tag.
SHOWN_KINDS = ("worse", "better")
SHORT_TABLE = 8  # up to this many rows the comment shows them all


def _cells(row: dict[str, str], columns: list[str]) -> list[str]:
    verdict = f"**{row['verdict']}**" if row["kind"] == "worse" else row["verdict"]
    values = {**row, "verdict": verdict}
    return [values[c] for c in columns]


def _columns(data: dict[str, Any]) -> list[str]:
    """The prompt and model columns only when the gate has more than one of each."""
    rows = data["rows"]
    return [c for c in HEADERS if c not in ("prompt", "model") or len({row[c] for row in rows}) > 1]


def _headers(columns: list[str]) -> list[str]:
    return [HEADERS[c] for c in columns]


def render_gate(data: dict[str, Any], fmt: str = "table") -> str:
    """The whole gate: every row (a pair and metric), then the prompts not gated and the summary."""
    if fmt == "md":
        return render_markdown(data)
    out = []
    if data["rows"]:
        columns = _columns(data)
        out.append(
            table(
                [_plain(row, columns) for row in data["rows"]],
                _headers(columns),
                fmt,
                optional=(HEADERS["change"],),
            )
        )
        out.append("")
    out.extend(data["notes"])
    if data["run"]:
        out.append(f"run: {data['run']}")
    out.append(f"gate: {data['summary']}")
    return "\n".join(out)


def _plain(row: dict[str, str], columns: list[str]) -> list[str]:
    return [row[c] for c in columns]


def render_markdown(data: dict[str, Any], link: str | None = None) -> str:
    """The short form a pull request shows: a heading, the decided rows, the rest folded, the
    prompts not gated, the summary and (on a runner) where the run's artifact is."""
    ref = data["baseline_ref"]
    out = [f"### promptprobe gate: {data['verdict']}", ""]
    gated = [f"`{p['path']}`" for p in data["prompts"] if p["status"] == "gated"]
    if gated:
        models = len(data["models"])
        on = f", on {models} models" if models > 1 else f", on {data['models'][0]}" if models else ""
        out.append(
            f"{', '.join(gated)} as at `{ref}` (baseline) against this change (candidate){on}; "
            f"probe set `{data['probeset']}`."
        )
        out.append("")
    rows = data["rows"]
    if rows:
        columns = _columns(data)
        headers = _headers(columns)
        short = len(rows) <= SHORT_TABLE
        shown = [row for row in rows if short or row["kind"] in SHOWN_KINDS]
        folded = [row for row in rows if row not in shown]
        if shown:
            out.extend([table([_cells(r, columns) for r in shown], headers, "md"), ""])
        if folded:
            summary = f"can't tell yet on {len(folded)} of {len(rows)} comparisons"
            out.extend(
                [
                    f"<details><summary>{summary}</summary>",
                    "",
                    table([_cells(r, columns) for r in folded], headers, "md"),
                    "",
                    "</details>",
                    "",
                ]
            )
    out.extend(f"- {line}" for line in data["notes"])
    if data["notes"]:
        out.append("")
    out.append(data["summary"][0].upper() + data["summary"][1:] + ".")
    if link:
        out.extend(["", link])
    return "\n".join(out) + "\n"
