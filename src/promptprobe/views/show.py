"""Showing recorded samples: raw outputs with invisible characters made visible (the incident
file, which exports them, is views/incident.py)."""

import re
import unicodedata
from pathlib import Path
from typing import Any

from ..counts import classifications, merged_samples
from ..engine.store import load_manifest
from ..errors import InputError
from ..jsonio import dumps_pretty, warn
from ..pack import RawUnreadable, read_raw
from ..paths import renamed
from ..sample_lines import lines_naming
from .provenance import render_provenance

HEADER_CLASSES = ("present", "absent", "misplaced", "empty", "error")
DISPLAY_BYTES = 100_000  # an output longer than this is cut for display (the exact bytes stay whole)
BACKTICKS = re.compile(r"`+")
PRINTABLE_RUN = 256  # visible() looks at a text this many characters at a time
NAMED = {
    "\ufeff": "BOM",
    "\u200b": "ZWSP",
    "\u200c": "ZWNJ",
    "\u200d": "ZWJ",
    "\u2060": "WJ",
    "\u00a0": "NBSP",
    "\u2028": "LSEP",
    "\u2029": "PSEP",
    "\u3000": "IDEOGRAPHIC SPACE",
}


def decoded(raw: bytes) -> str:
    """Raw output bytes as text for visible(): a byte that is not UTF-8 is kept (surrogateescape)
    so that it is named, not replaced."""
    return raw.decode("utf-8", "surrogateescape")


def readable(raw: bytes) -> str:
    """Raw output bytes as text JSON can carry: a byte that is not UTF-8 becomes U+FFFD."""
    return raw.decode("utf-8", "replace")


def visible(text: str, ended: bool = True) -> str:
    """The text with invisible characters spelled out: ␍ for CR, · for trailing spaces,
    ⟨U+FEFF BOM⟩ for format characters, ⟨byte 0xED not UTF-8⟩ for a byte decoded() kept; ␄ marks
    an end of text without a final newline (`ended` False: the text is a cut's start, no ␄)."""
    return "".join(piece for piece, _ in visible_pieces(text, ended))


def _mark(char: str) -> str | None:
    """visible()'s mark for one character, None for a character shown as itself."""
    if char == "\r":
        return "␍"
    if char == "\t":
        return "→"
    if "\udc80" <= char <= "\udcff":  # surrogateescape's stand-in for an undecodable byte
        return f"⟨byte 0x{ord(char) - 0xDC00:02X} not UTF-8⟩"
    if char in NAMED or unicodedata.category(char) in ("Cf", "Cc", "Zl", "Zp", "Co", "Cn"):
        name = NAMED.get(char) or unicodedata.name(char, "")
        return f"⟨U+{ord(char):04X}{' ' + name if name else ''}⟩"
    return None


def visible_pieces(text: str, ended: bool = True) -> list[tuple[str, str]]:
    """visible()'s text cut into (piece, kind) pieces: kind "inv" for a mark visible() wrote for an
    invisible character, "text" for the output's own characters (so a page never takes a `→` or
    `·` the model wrote for a tab or a space). Linear in the text: a run of characters that
    str.isprintable() passes holds no invisible one (every mark is for a non-printable character)."""
    pieces: list[tuple[str, str]] = []
    held: list[str] = []  # text not yet a piece: joined once, never grown a character at a time

    def flush() -> None:
        if held:
            pieces.append(("".join(held), "text"))
            held.clear()

    def mark(piece: str) -> None:
        if piece:
            flush()
            pieces.append((piece, "inv"))

    for number, line in enumerate(text.split("\n")):
        if number:
            held.append("\n")
        carriage = line.endswith("\r")
        core = line[:-1] if carriage else line
        body = core.rstrip(" ")
        for start in range(0, len(body), PRINTABLE_RUN):
            run = body[start : start + PRINTABLE_RUN]
            if run.isprintable():
                held.append(run)
                continue
            for char in run:
                shown = _mark(char)
                if shown is None:
                    held.append(char)
                else:
                    mark(shown)
        mark("·" * (len(core) - len(body)))
        if carriage:
            mark("␍")
    if ended and not text.endswith("\n"):
        mark("␄")
    flush()
    return pieces


def cut_for_display(raw: bytes, limit: int = DISPLAY_BYTES) -> tuple[bytes, bool]:
    """The first `limit` bytes of an output (ending on a whole UTF-8 character), and whether that
    is less than all of it: a page and the terminal show that much, with a mark saying so."""
    if len(raw) <= limit:
        return raw, False
    end = limit
    while end > limit - 3 and 0x80 <= raw[end] < 0xC0:  # not inside a character
        end -= 1
    return raw[:end], True


def cut_mark(shown: int, size: int, where: str) -> str:
    """The sentence after an output cut for display."""
    return f"⟨cut for display: the first {shown:,} of {size:,} bytes are shown; the whole output: {where}⟩"


def latest_classification(run_dir: Path) -> int | None:
    """The reclassification report and compare use (None: the run's own classification)."""
    numbers = classifications(run_dir)
    return numbers[-1] if numbers else None


def select_samples(
    run_dir: Path, sample: str | None = None, case: str | None = None, header: str | None = None
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The manifest and the chosen samples, with the header, checks and errors of the latest
    classification, as report and compare count them."""
    manifest = load_manifest(run_dir)
    if header is not None and header not in HEADER_CLASSES:
        raise InputError(f"--header must be one of {', '.join(HEADER_CLASSES)}, got {header!r}")
    chosen = []
    seen = Damage(run_dir, manifest)
    number = latest_classification(run_dir)
    records = merged_samples(run_dir, number, warn)
    if sample and number is None:
        records = lines_naming(run_dir / "samples.jsonl", sample) or records
    for record in records:
        if not seen.fine(record):
            continue
        state = "error" if record.get("error") else (record.get("header") or {}).get("header")
        if sample and record["sample_id"] != sample:
            continue
        if case and record["case_id"] != case:
            continue
        if header and state != header:
            continue
        chosen.append(record)
    # Plan order (case, repeat, arm), not the order the samples happened to finish in.
    case_order = {c: i for i, c in enumerate(manifest["probeset"].get("cases", []))}
    arm_order = {(a["prompt"], a["model"]): a["arm"] for a in manifest.get("arms", [])}
    chosen.sort(
        key=lambda r: (
            case_order.get(r["case_id"], 0),
            r["repeat"],
            arm_order.get((r["prompt"], r["model"]), 0),
        )
    )
    if (sample or case) and not chosen and not header:
        what = f"sample {sample!r}" if sample else f"case {case!r}"
        raise InputError(f"{run_dir}: no {what} in this run")
    return manifest, chosen


class Damage:
    """What a reader of samples sees cheaply of a damaged run: a sample recorded twice, or of an
    arm the plan does not have. Each is left out, with one warning per kind (as report counts).
    A sample is its (arm, case, repeat): one bit each, so memory stays flat over a large run."""

    def __init__(self, run_dir: Path, manifest: dict[str, Any]) -> None:
        self.run_dir = run_dir
        self.arms = {(a.get("prompt"), a.get("model")) for a in manifest["arms"] if isinstance(a, dict)}
        self.seen: dict[tuple[str, str, str], bytearray] = {}
        self.odd: set[tuple[str, str, str, int]] = set()  # repeats too large for a bitmap
        self.said: set[str] = set()

    def fine(self, record: dict[str, Any]) -> bool:
        arm = (record["prompt"], record["model"])
        if arm not in self.arms:
            self._say("unplanned", f"sample {record['sample_id']} is of no arm of the manifest; left out")
            return False
        if self._again((*arm, record["case_id"]), record["repeat"]):
            self._say("twice", f"sample {record['sample_id']} is in samples.jsonl more than once; shown once")
            return False
        return True

    def _again(self, key: tuple[str, str, str], repeat: int) -> bool:
        if not 0 <= repeat < 1 << 24:
            if (*key, repeat) in self.odd:
                return True
            self.odd.add((*key, repeat))
            return False
        bits = self.seen.setdefault(key, bytearray())
        byte, bit = repeat >> 3, 1 << (repeat & 7)
        if byte >= len(bits):
            bits.extend(bytes(byte + 1 - len(bits)))
        if bits[byte] & bit:
            return True
        bits[byte] |= bit
        return False

    def _say(self, kind: str, message: str) -> None:
        if kind not in self.said:
            self.said.add(kind)
            warn(f"{self.run_dir}: {message} (probe verify lists the damage)")


def _raw(run_dir: Path, record: dict[str, Any]) -> bytes | None:
    """The sample's output bytes; None (why saved in the record) when unreadable."""
    if not record.get("raw"):
        return None
    try:
        return read_raw(run_dir, record)
    except RawUnreadable as exc:
        record["_unreadable"] = str(exc)
        return None


def _warn_unreadable(records: list[dict[str, Any]]) -> None:
    """One warning for the outputs that cannot be shown: a damaged pack is one cause, not one per sample."""
    unreadable = [r["_unreadable"] for r in records if r.get("_unreadable")]
    if len(unreadable) == 1:
        warn(unreadable[0])
    elif unreadable:
        warn(f"{unreadable[0]}; {len(unreadable)} samples' outputs cannot be shown (probe verify lists each)")


def _shown(run_dir: Path, record: dict[str, Any], raw: bytes) -> str:
    """A sample's output made visible; a long one cut for display, with a mark saying where the
    whole of it is."""
    data, cut = cut_for_display(raw)
    if not cut:
        return visible(decoded(data))
    where = f"probe export {run_dir} --sample {record['sample_id']} (its exact bytes)"
    return visible(decoded(data), ended=False) + "\n" + cut_mark(len(data), len(raw), where)


def _title(record: dict[str, Any]) -> str:
    if record.get("error"):
        state = f"error ({record['error']['kind']})"
    else:
        h = record["header"]
        state = h["header"] + (f", {h['where']} on line {h['line']}" if h["where"] else "")
    return (
        f"{record['sample_id']}  case {record['case_id']}  prompt {record['prompt']}  "
        f"model {record['model']}  header {state}"
    )


def show(
    run_dir: Path,
    sample: str | None = None,
    case: str | None = None,
    header: str | None = None,
    fmt: str = "table",
) -> str:
    """Raw outputs with invisible characters made visible, one block per sample (`table`), as
    markdown (`md`, each output in a fence) or as JSON (`json`, the visible and the exact text)."""
    _, chosen = select_samples(run_dir, sample, case, header)
    items = []
    for record in chosen:
        raw = _raw(run_dir, record)
        items.append((record, raw))
    _warn_unreadable(chosen)
    source = shown_provenance(run_dir, chosen)
    if fmt == "json":
        return dumps_pretty(
            {
                "run": renamed(str(run_dir)),
                "provenance": source,
                "classification": latest_classification(run_dir),
                "samples": [
                    {
                        "sample_id": record["sample_id"],
                        "title": _title(record),
                        "header": ((record.get("header") or {}).get("header")),
                        "error": record.get("error"),
                        "visible": _shown(run_dir, record, raw) if raw is not None else None,
                        "text": readable(raw) if raw is not None else None,
                        **({"judged": record["judged"]} if record.get("judged") else {}),
                    }
                    for record, raw in items
                ],
            }
        )
    blocks = []
    for record, raw in items:
        if raw is None and not record.get("error"):
            body = f"(output not shown: {record.get('_unreadable') or 'no output recorded'})"
        elif raw is None:
            body = f"error: {record['error']['message']} (after {record['error']['attempts']} attempts)"
        else:
            body = _shown(run_dir, record, raw)
        judged = "; ".join(
            f"{name} {', '.join(label or 'failed' for label in labels)}"
            for name, labels in (record.get("judged") or {}).items()
        )
        if judged:  # what the judges said (their replies: judgments.jsonl, the viewer)
            body += f"\njudged: {judged}"
        if fmt == "md":
            fence = _fence(body)
            blocks.append(f"### {_title(record)}\n\n{fence}text\n{body}\n{fence}")
        else:
            blocks.append(f"== {_title(record)}\n{body}")
    number = latest_classification(run_dir)
    if number is not None and blocks:  # say which classification the header states come from
        blocks.insert(0, f"headers as classification {number} (an offline reclassification) has them")
    if blocks:
        text = render_provenance(source)
        blocks.append("## Provenance\n\n" + text if fmt == "md" else "== provenance\n" + text)
    return "\n\n".join(blocks) if blocks else "no sample matches"


def shown_provenance(run_dir: Path, records: list[dict[str, Any]]) -> dict[str, Any]:
    """The provenance of the arms the shown samples belong to (every arm when none is shown): from
    the totals the run's manifest keeps when they still hold (promptprobe.totals), else counted."""
    from ..counts import build_counts, run_probeset
    from ..engine.store import run_state
    from ..totals import kept_totals
    from .provenance import RunSource, provenance, provenance_of

    pairs = {(r["prompt"], r["model"]) for r in records}
    manifest = load_manifest(run_dir)
    totals = kept_totals(run_dir, manifest)
    if totals is None:
        counts = build_counts(run_dir)
        arms = [i for i, arm in enumerate(counts.arms, 1) if (arm.prompt, arm.model) in pairs]
        return provenance(counts, arms or None)
    chosen = [(i, arm) for i, arm in enumerate(totals, 1) if (arm.prompt, arm.model) in pairs]
    source = RunSource(run_dir, manifest, run_state(run_dir, manifest), run_probeset(manifest))
    return provenance_of(source, chosen or list(enumerate(totals, 1)))


def _fence(text: str) -> str:
    """A code fence longer than any run of backticks in the text."""
    longest = max((len(run) for run in BACKTICKS.findall(text)), default=0)
    return "`" * max(3, longest + 1)
