"""Outputs grouped by identical bytes: the repeats of one case that came back the same are shown
once, with how many times, their header class and their sha256 (identical bytes: identical
sha256, so a group is found without reading a file). Failed samples group by their error.

Each group carries the output made visible (`probe show`'s rendering: CR, tabs, trailing spaces,
format characters and a missing final newline spelled out) cut into pieces for a template to
escape, with the header markers marked. Model outputs are untrusted text: nothing here is markup.
"""

import logging
import os
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from ..counts import CountsTable, LiveCounts, merged_samples
from ..jsonio import iter_jsonl, loads
from ..pack import RawUnreadable, read_raw
from ..paths import open_in_run
from .show import cut_for_display, cut_mark, decoded, readable, visible_pieces

LOG = logging.getLogger("promptprobe.viewer")

GROUPS_PER_PAGE = 20
SAMPLE_IDS_PER_GROUP = 50
SAMPLE_ID = re.compile(r"[A-Za-z0-9._-]{1,200}")

# The ASCII label a page draws for a mark visible() writes: the Unicode control pictures (␍, ␄) are
# empty boxes in many browsers' default fonts.
LABELS = {"␍": "CR", "␄": "no newline at end", "→": "TAB"}


def segments(text: str, markers: Iterable[str], ended: bool = True) -> list[tuple[str, str]]:
    """The output made visible, cut into (text, kind) pieces: kind "marker" (a header marker),
    "inv" (an invisible character's label) or "text" (`ended` False: the start of a cut output)."""
    pieces: list[tuple[str, str]] = []
    for piece, kind in visible_pieces(text, ended):
        if kind == "inv":
            label = LABELS.get(piece) or (piece[1:-1] if piece.startswith("⟨") else piece)
            pieces.append((label, "inv"))
        else:
            pieces.extend(_markers(piece, tuple(markers)))
    return [p for p in pieces if p[0]]


def inline_segments(text: str) -> list[tuple[str, str]]:
    """A line a person wrote (a question) cut like an output's pieces: its invisible characters
    named (an RTL override would otherwise reverse what a reader sees), no end-of-text mark."""
    pieces = segments(text + "\n", ())
    last, kind = pieces[-1]
    return pieces[:-1] + [(last[:-1], kind)] if last[:-1] else pieces[:-1]


def _markers(shown: str, markers: tuple[str, ...]) -> list[tuple[str, str]]:
    found = [m for m in markers if m]
    if not found:
        return [(shown, "text")]
    pieces: list[tuple[str, str]] = []
    position = 0
    # One pass: leftmost first, the shorter marker where two start at one place (as before).
    pattern = re.compile("|".join(re.escape(m) for m in sorted(found, key=len)))
    for hit in pattern.finditer(shown):
        pieces.append((shown[position : hit.start()], "text"))
        pieces.append((hit.group(), "marker"))
        position = hit.end()
    pieces.append((shown[position:], "text"))
    return pieces


def slim(sample: dict[str, Any]) -> dict[str, Any]:
    """What the outputs of a sample need: its id, raw file, header and error."""
    return {
        "sample_id": sample["sample_id"],
        "raw": sample.get("raw"),
        "header": sample.get("header"),
        "error": sample.get("error"),
    }


def read_bytes(run_dir: Path, record: dict[str, Any] | None) -> bytes | None:
    """A sample's output bytes by its id (pack or raw/<sample_id>.txt), None when they cannot be
    read as recorded (missing, damaged, or a path that names another file: logged in one line)."""
    if not record or not record.get("raw"):
        return None
    try:
        return read_raw(run_dir, record)
    except RawUnreadable as exc:
        LOG.warning("%s", exc)
        return None


class Scanned:
    """Every sample of a run read in one pass and grouped per (arm, case) as it comes (the static
    report: one file with every output in it; memory grows with distinct outputs, not samples)."""

    def __init__(self, counts: CountsTable) -> None:
        self.by_cell: dict[tuple[str, str, str], Grouper] = {}
        for sample in merged_samples(counts.run, counts.classification, lambda message: None):
            key = (sample["prompt"], sample["model"], sample["case_id"])
            grouper = self.by_cell.get(key)
            if grouper is None:
                grouper = self.by_cell[key] = Grouper()
            grouper.add(sample)

    def groups(self, prompt: str, model: str, case_id: str) -> list[dict[str, Any]]:
        grouper = self.by_cell.get((prompt, model, case_id))
        return grouper.groups() if grouper is not None else []


class Indexed:
    """The samples of one (arm, case) read at the offsets a LiveCounts remembers (the viewer: no
    pass over the run per page), with the run's reclassification applied."""

    def __init__(self, live: LiveCounts, counts: CountsTable) -> None:
        self.live = live
        self.counts = counts

    def groups(self, prompt: str, model: str, case_id: str) -> list[dict[str, Any]]:
        return groups_of(self.records(prompt, model, case_id))

    def records(self, prompt: str, model: str, case_id: str) -> list[dict[str, Any]]:
        found = []
        # Each line read exactly (pread): the cell's lines lie scattered over a large file.
        fd = open_in_run(self.counts.run, "samples.jsonl")
        try:
            for offset, length in self.live.offsets(prompt, model, case_id):
                found.append(slim(loads(os.pread(fd, length, offset))))
        finally:
            os.close(fd)
        if self.counts.classification is not None:
            found = _overlaid(self.counts.run, self.counts.classification, found)
        return found


def _overlaid(run_dir: Path, number: int, found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The samples with reclassification `number`'s header and error (one pass over its file)."""
    wanted = {s["sample_id"]: s for s in found if s.get("raw") is not None}
    path = run_dir / "classifications" / f"{number}.jsonl"
    lines: Iterator[dict[str, Any]] = iter_jsonl(path, lambda message: None)
    next(lines, None)  # its header line
    for line in lines:
        sample = wanted.get(line.get("sample_id"))
        if sample is not None:
            sample["header"] = line.get("header")
            if "error" in line:
                sample["error"] = line["error"]
    return found


def _key(sample: dict[str, Any]) -> tuple[str, ...]:
    error = sample.get("error")
    if error:
        return ("error", str(error.get("kind")), str(error.get("message")))
    raw = sample.get("raw") or {}
    header = sample.get("header") or {}
    return ("output", str(raw.get("sha256")), str(header.get("header")))


class Grouper:
    """Samples grouped by identical output (or identical error) as they are added."""

    def __init__(self) -> None:
        self.by_key: dict[tuple[str, ...], dict[str, Any]] = {}

    def add(self, sample: dict[str, Any]) -> None:
        key = _key(sample)
        group = self.by_key.get(key)
        if group is None:
            error = sample.get("error")
            header = sample.get("header") or {}
            raw = sample.get("raw") or {}
            group = self.by_key[key] = {
                "count": 0,
                "header": "error" if error else header.get("header", "?"),
                "where": None if error else header.get("where"),
                "line": None if error else header.get("line"),
                "sha256": None if error else raw.get("sha256"),
                "bytes": None if error else raw.get("bytes"),
                "error": f"{error.get('kind')}: {error.get('message')}" if error else None,
                "sample_ids": [],
                "_raw": None if error else {"sample_id": sample["sample_id"], "raw": sample.get("raw")},
            }
        group["count"] += 1
        if len(group["sample_ids"]) < SAMPLE_IDS_PER_GROUP:
            group["sample_ids"].append(sample["sample_id"])

    def groups(self) -> list[dict[str, Any]]:
        """Most frequent first; among equals, first seen first."""
        return sorted(self.by_key.values(), key=lambda g: -g["count"])


def groups_of(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Records grouped by identical output (or identical error), most frequent first."""
    grouper = Grouper()
    for sample in records:
        grouper.add(sample)
    return grouper.groups()


def with_text(run_dir: Path, group: dict[str, Any], markers: Iterable[str]) -> dict[str, Any]:
    """A group with its output read (once for the group) and made visible; a long one cut for
    display (`cut`: bytes shown and in all; the raw download has every byte)."""
    raw = group.get("_raw")
    out = {k: v for k, v in group.items() if k != "_raw"}
    out["cut"] = None
    if group["error"] is None:
        whole = read_bytes(run_dir, raw)
        data, cut = cut_for_display(whole) if whole is not None else (None, False)
        # JSON carries U+FFFD for a byte that is not UTF-8; the segments name the byte itself.
        out["text"] = readable(data) if data is not None else None
        out["segments"] = segments(decoded(data), markers, not cut) if data is not None else []
        if data is not None and whole is not None and cut:
            out["cut"] = {"shown": len(data), "bytes": len(whole)}
            out["segments"].append(("\n", "text"))
            out["segments"].append((cut_mark(len(data), len(whole), "the exact bytes")[1:-1], "inv"))
        if data is None:
            out["missing"] = "the raw output is missing, damaged or not the sample's own (see probe verify)"
    else:
        out["text"], out["segments"] = None, []
    return out


def page_of(
    run_dir: Path,
    groups: list[dict[str, Any]],
    markers: Iterable[str],
    page: int = 1,
    per_page: int = GROUPS_PER_PAGE,
    keep: Callable[[dict[str, Any]], bool] | None = None,
) -> dict[str, Any]:
    """One page of groups, read; `keep` filters the read groups first (every group is read then)."""
    markers = tuple(markers)
    if keep is not None:
        groups = [g for g in (with_text(run_dir, g, markers) for g in groups) if keep(g)]
    pages = max(1, -(-len(groups) // per_page))
    page = min(max(1, page), pages)
    shown = groups[(page - 1) * per_page : page * per_page]
    if keep is None:
        shown = [with_text(run_dir, g, markers) for g in shown]
    return {
        "samples": sum(g["count"] for g in groups),
        "total_groups": len(groups),
        "page": page,
        "pages": pages,
        "per_page": per_page,
        "groups": shown,
    }
