"""`probe verify RUN`: is what is on disk what was recorded? Every sample's raw bytes against the
sha256 and byte count its record holds, every index line against its pack, the records against
the manifest's plan (a sample twice, an arm or case the plan does not have, an id that is not its
case, repeat and arm), the ends of the files (a torn last line, a tail of NUL bytes), and the
counts the run keeps (kept-counts.json) against a count of its samples. Each problem is one
sentence naming the sample (or the file) it is about."""

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from .counts import KEPT_COUNTS, CountsTable, build_counts, kept_form, kept_table
from .engine.store import load_manifest, run_state, sample_problem
from .errors import InputError
from .jsonio import content_end, dumps_pretty, loads
from .pack import BODY, INDEX, TEXT, RawReader, RawUnreadable, is_index_entry, iter_index, packs_of
from .paths import renamed

SAMPLES = "samples.jsonl"


def _lines(path: Path, problems: list[dict[str, Any]]) -> Iterator[tuple[int, bytes]]:
    """(line number, line) of a JSON-lines file up to its content; its tail's damage noted."""
    try:
        handle = open(path, "rb")
    except OSError:
        return
    with handle:
        end, size = content_end(handle), os.fstat(handle.fileno()).st_size
        position, number = 0, 0
        while position < end:
            line = handle.readline(end - position)
            position += len(line)
            number += 1
            if not line.endswith(b"\n"):
                problems.append(_problem(None, path.name, f"line {number} is torn (cut off mid-write)"))
                break
            yield number, line
    if end < size:
        problems.append(
            _problem(None, path.name, f"ends in {size - end} NUL bytes (a crash or power loss wrote over it)")
        )


def _problem(sample_id: str | None, file: str, problem: str) -> dict[str, Any]:
    return {"sample_id": sample_id, "file": file, "problem": problem}


class Verifier:
    """Checks one run; `problems` and `notes` fill as it goes."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.manifest = load_manifest(run_dir)
        self.reader = RawReader(run_dir)
        self.problems: list[dict[str, Any]] = []
        self.notes: list[str] = []
        self.samples = 0
        self.blobs = 0
        arms = self.manifest["arms"]
        self.arms = {(a.get("prompt"), a.get("model")): a.get("arm") for a in arms if isinstance(a, dict)}
        self.cases = set(self.manifest["probeset"].get("cases") or [])
        repeats = self.manifest.get("repeats")
        self.repeats = repeats if type(repeats) is int else None

    def run(self) -> dict[str, Any]:
        # Where the index says each sample's text and body lie (the latest line wins, as for readers).
        self.indexed = {
            (e["sample_id"], e["kind"]): (e["pack"], e["offset"], e["bytes"])
            for e in iter_index(self.run_dir)
            if e["kind"] in (TEXT, BODY)
        }
        self.check_samples()
        check_index(self.run_dir, self.problems, self.notes)
        check_kept(self.run_dir, self.problems, self.notes)
        state = run_state(self.run_dir, self.manifest)
        planned = (self.manifest.get("counts") or {}).get("planned")
        if isinstance(planned, int) and self.samples < planned:
            self.notes.append(
                f"{self.samples} of {planned} planned samples are recorded (the run is {state})"
            )
        return {
            "run": renamed(str(self.run_dir)),
            "ok": not self.problems,
            "state": state,
            "samples": self.samples,
            "blobs": self.blobs,
            "problems": self.problems,
            "notes": self.notes,
        }

    def check_samples(self) -> None:
        seen: dict[str, int] = {}
        for number, line in _lines(self.run_dir / SAMPLES, self.problems):
            if not line.strip():
                continue
            try:
                record = loads(line)
            except ValueError:
                self.problems.append(_problem(None, SAMPLES, f"line {number} is not valid JSON"))
                continue
            problem = sample_problem(record)
            if problem is not None:
                self.problems.append(_problem(None, SAMPLES, f"line {number} {problem}"))
                continue
            sid = record["sample_id"]
            self.samples += 1
            self.check_plan(record, number)
            if sid in seen:
                self.problems.append(
                    _problem(
                        sid, SAMPLES, f"line {number} records this sample again (first on line {seen[sid]})"
                    )
                )
                continue
            seen[sid] = number
            self.check_raw(record)

    def check_plan(self, record: dict[str, Any], number: int) -> None:
        sid = record["sample_id"]
        arm = self.arms.get((record["prompt"], record["model"]))
        if arm is None:
            self.problems.append(
                _problem(
                    sid,
                    SAMPLES,
                    f"line {number}: prompt {record['prompt']!r} with model {record['model']!r} "
                    "is no arm of the plan",
                )
            )
        if self.cases and record["case_id"] not in self.cases:
            self.problems.append(
                _problem(sid, SAMPLES, f"line {number}: case {record['case_id']!r} is not in the plan")
            )
        if self.repeats is not None and not 1 <= record["repeat"] <= self.repeats:
            self.problems.append(
                _problem(
                    sid,
                    SAMPLES,
                    (f"line {number}: repeat {record['repeat']} is outside the plan's 1..{self.repeats}"),
                )
            )
        expected = f"{record['case_id']}.r{record['repeat']}.a{arm}"
        if arm is not None and sid != expected:
            self.problems.append(
                _problem(sid, SAMPLES, f"line {number}: the id is out of place (its sample is {expected})")
            )

    def check_raw(self, record: dict[str, Any]) -> None:
        sid = record["sample_id"]
        wanted = [TEXT] if record.get("raw") else []
        if (record.get("response") or {}).get("body"):
            wanted.append(BODY)
        for kind in wanted:
            location = self.reader.location(record, kind) or {}
            where = location.get("pack") or location.get("path") or "raw/"
            try:
                data = self.reader.read(record, kind, check=False)
            except RawUnreadable as exc:
                self.problems.append(_problem(sid, str(where), f"its {kind} bytes cannot be read: {exc}"))
                continue
            self.blobs += 1
            recorded = record["raw"] if kind == TEXT else location
            indexed = self.indexed.get((sid, kind))
            if "pack" in location and indexed is not None:
                named = (location.get("pack"), location.get("offset"), location.get("bytes"))
                if named != indexed:
                    self.problems.append(
                        _problem(
                            sid,
                            str(where),
                            (
                                f"its record names {named[2]} bytes at {named[1]} for its {kind}; the index, "
                                f"{indexed[2]} bytes at {indexed[1]} of {indexed[0]}"
                            ),
                        )
                    )
            if isinstance(recorded.get("bytes"), int) and recorded["bytes"] != len(data):
                self.problems.append(
                    _problem(
                        sid,
                        str(where),
                        (f"its {kind} is {len(data)} bytes where the record says {recorded['bytes']}"),
                    )
                )
            digest = recorded.get("sha256")
            if kind == TEXT and not isinstance(digest, str):
                self.problems.append(_problem(sid, str(where), "its record holds no sha256 of its output"))
            elif isinstance(digest, str) and hashlib.sha256(data).hexdigest() != digest:
                self.problems.append(
                    _problem(sid, str(where), f"its {kind} bytes do not match their recorded sha256")
                )


def check_index(run_dir: Path, problems: list[dict[str, Any]], notes: list[str]) -> None:
    """Every index line against its pack: the pack there, long enough, its bytes as the sha256 says."""
    packs = packs_of(run_dir)
    if not packs:
        return
    sizes = {name: os.path.getsize(run_dir / name) for name in packs}
    ends = dict.fromkeys(packs, 0)
    whole = 0
    for number, line in _lines(run_dir / INDEX, problems):
        whole = number
        try:
            entry = loads(line)
        except ValueError:
            problems.append(_problem(None, INDEX, f"line {number} is not valid JSON"))
            continue
        if not is_index_entry(entry):
            problems.append(_problem(None, INDEX, f"line {number} is not an index line"))
            continue
        _check_blob(run_dir, entry, number, sizes, problems)
        if entry["pack"] in ends:
            ends[entry["pack"]] = max(ends[entry["pack"]], entry["offset"] + entry["bytes"])
    if not whole:
        problems.append(_problem(None, INDEX, "the run has packs but no index"))
    for name in packs:
        if sizes[name] > ends[name]:
            notes.append(
                f"{name}: its last {sizes[name] - ends[name]} bytes are named by no index line "
                "(what a sample in flight wrote when the run stopped)"
            )


def check_kept(run_dir: Path, problems: list[dict[str, Any]], notes: list[str]) -> None:
    """The counts the run keeps, when readers would use them, against a count of samples.jsonl."""
    if not (run_dir / KEPT_COUNTS).exists():
        return
    kept = kept_table(run_dir)
    if kept is None:
        notes.append(f"{KEPT_COUNTS} no longer describes the run (readers count samples.jsonl instead)")
        return
    try:
        counted = build_counts(run_dir, kept=False, on_warning=lambda message: None)
    except InputError:
        counted = None  # a line no reader can count: named among the samples' problems already
    if counted is None or _canonical(kept) != _canonical(counted):
        problems.append(
            _problem(
                None,
                KEPT_COUNTS,
                "its counts are not what samples.jsonl counts to (delete it to count again)",
            )
        )


def _canonical(table: CountsTable) -> bytes:
    return orjson.dumps(kept_form(table), option=orjson.OPT_SORT_KEYS)


def _check_blob(
    run_dir: Path, entry: dict[str, Any], number: int, sizes: dict[str, int], problems: list[dict[str, Any]]
) -> None:
    name, sid = entry["pack"], entry["sample_id"]
    if name not in sizes:
        problems.append(_problem(sid, INDEX, f"line {number} names {name}, which is not there"))
        return
    if entry["offset"] + entry["bytes"] > sizes[name]:
        problems.append(
            _problem(
                sid,
                INDEX,
                f"line {number}: its {entry['kind']} lies past the end of {name} (the pack is cut short)",
            )
        )
        return
    with open(run_dir / name, "rb") as handle:
        data = os.pread(handle.fileno(), entry["bytes"], entry["offset"])
    if hashlib.sha256(data).hexdigest() != entry.get("sha256"):
        problems.append(
            _problem(
                sid,
                INDEX,
                (f"line {number}: its {entry['kind']} bytes in {name} do not match the index's sha256"),
            )
        )


def verify_run(run_dir: str | Path) -> dict[str, Any]:
    """What `probe verify` finds: `ok`, `problems` (sample_id, file, problem), `notes`."""
    return Verifier(Path(run_dir)).run()


def describe(result: dict[str, Any]) -> str:
    """The terminal form: one line a problem, then one sentence on the whole."""
    lines = [
        (f"{p['sample_id']}: " if p["sample_id"] else "") + f"{p['file']}: {p['problem']}"
        for p in result["problems"]
    ]
    lines += [f"note: {note}" for note in result["notes"]]
    if result["ok"]:
        lines.append(
            f"{result['run']}: {result['samples']} samples and {result['blobs']} raw blobs hold as recorded"
        )
    else:
        lines.append(f"{result['run']}: {len(result['problems'])} problem(s) found")
    return "\n".join(lines)


def as_json(result: dict[str, Any]) -> str:
    return dumps_pretty(result)
