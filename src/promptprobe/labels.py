"""Hand labels of a judged check: a CSV file a person writes (`probe label`, or a spreadsheet
from `probe label --template`), against which the judge's sensitivity and specificity are
measured.

The file has a header row and, per row, `sample_id` or `sha256` (of the output's raw bytes; the
same output text labelled once for every sample that has it), and `label`: `pass` or `fail`
(the check's own label words, e.g. GROUNDED / UNGROUNDED, are read too, in any case). Other
columns (case_id, prompt, model, note, ...) are kept and ignored. A sample is labelled by its
own id first, else by its output's sha256; when a key is labelled twice the last row wins (a
person who changes their mind appends the new label). An empty label cell means unlabelled.
Anything else is one sentence naming the file and line (exit 2)."""

import csv
import io
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from .errors import InputError
from .tomlfile import read_input

KEYS = ("sample_id", "sha256")
HEADER = ("sample_id", "sha256", "case_id", "prompt", "model", "label")


@dataclass(frozen=True)
class HandLabels:
    """The labels of one file: by sample id and by output sha256."""

    by_sample: dict[str, str]
    by_sha256: dict[str, str]
    rows: int

    def of(self, sample_id: str, sha256: str | None) -> str | None:
        """ "pass", "fail" or None for a sample (its id first, then its output's sha256)."""
        found = self.by_sample.get(sample_id)
        if found is None and sha256:
            found = self.by_sha256.get(sha256)
        return found


NONE = HandLabels({}, {}, 0)


def _label(text: str, pass_label: str, fail_label: str) -> str | None:
    word = text.strip().lower()
    if word in ("pass", pass_label.lower()):
        return "pass"
    if word in ("fail", fail_label.lower()):
        return "fail"
    return None


def read_labels(path: str | Path | None, pass_label: str = "pass", fail_label: str = "fail") -> HandLabels:
    """The hand labels in `path` (NONE when no file is named or it does not exist yet)."""
    if path is None or not Path(path).exists():
        return NONE
    path = Path(path)
    data = read_input(path, "labels file")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not valid UTF-8 (byte {exc.start})") from None
    reader = csv.DictReader(io.StringIO(text, newline=""))
    columns = [c.strip() for c in reader.fieldnames or []]
    if "label" not in columns or not any(k in columns for k in KEYS):
        raise InputError(
            f"{path}: line 1 must be a header row naming `label` and `sample_id` or `sha256` "
            f"(it has: {', '.join(columns) or 'nothing'})"
        )
    by_sample: dict[str, str] = {}
    by_sha256: dict[str, str] = {}
    rows = 0
    for row in reader:
        row = {(k or "").strip(): (v or "") for k, v in row.items()}
        line = reader.line_num
        cell = row.get("label", "")
        if not cell.strip():
            continue  # not labelled yet (a template row)
        label = _label(cell, pass_label, fail_label)
        if label is None:
            raise InputError(
                f"{path}:{line}: label {cell.strip()!r} is neither pass nor fail "
                f"({pass_label} / {fail_label} are read too)"
            )
        sample_id, sha256 = row.get("sample_id", "").strip(), row.get("sha256", "").strip().lower()
        if not sample_id and not sha256:
            raise InputError(f"{path}:{line}: the row names neither a sample_id nor a sha256")
        if sample_id:
            by_sample[sample_id] = label
        if sha256:
            by_sha256[sha256] = label
        rows += 1
    return HandLabels(by_sample, by_sha256, rows)


def append_label(path: str | Path, row: dict[str, str]) -> None:
    """Add one labelled row to the labels file (made, with its header row, when it is new)."""
    path = Path(path)
    new = not path.exists() or path.stat().st_size == 0
    if new:
        path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    with open(fd, "a", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=HEADER, extrasaction="ignore")
        if new:
            writer.writeheader()
        writer.writerow({key: row.get(key, "") for key in HEADER})
        handle.flush()
        os.fsync(handle.fileno())


def template(rows: Iterable[dict[str, str]]) -> str:
    """A labels file to fill in a spreadsheet: every judged output, its label cell empty."""
    out = io.StringIO(newline="")
    writer = csv.DictWriter(out, fieldnames=HEADER, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({**{key: _neutral(row.get(key, "")) for key in HEADER}, "label": ""})
    return out.getvalue()


def _neutral(value: str) -> str:
    """A cell a spreadsheet would run as a formula is written as text."""
    return "'" + value if value[:1] in ("=", "+", "-", "@", "\t", "\r") else value
