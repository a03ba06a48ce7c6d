"""`probe verify RUN`: is what is on disk what was recorded? Every sample's raw bytes against the
sha256 and byte count its record holds, and against the index line of each blob it points to (and
of its request); every index line against its pack, opened as the readers open it (never through a
link); the records against the manifest's plan (a sample twice, an arm or case the plan does not
have, an id that is not its case, repeat and arm, and a complete run lacking planned samples); the
samples against what the manifest counted when the run ended; the ends of the JSON-lines files (a
torn last line, a tail of NUL bytes); and the counts the run keeps (kept-counts.json) against a
count of its samples. Each problem is one sentence naming the sample (or the file) it is about."""

import hashlib
import os
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from .counts import KEPT_COUNTS, CountsTable, build_counts, kept_form, kept_table
from .engine.store import load_manifest, run_state, sample_problem
from .errors import InputError
from .jsonio import content_end, dumps_pretty, iter_jsonl, loads
from .pack import (
    BODY,
    INDEX,
    LEGACY_SUFFIX,
    RAW_DIR,
    REQUEST,
    TEXT,
    RawReader,
    RawUnreadable,
    _open_confined,
    is_index_entry,
    packs_of,
)
from .paths import RunFileRefused, open_run_file, renamed

SAMPLES = "samples.jsonl"
SUPERSEDED = "superseded.jsonl"
# Written beside samples.jsonl: their tails are checked like its own.
OTHER_LINES = ("retrievals.jsonl", "judgments.jsonl", SUPERSEDED)
# A sample that failed with one of these was never sent: it has no request blob.
NOT_SENT = ("retrieval", "assemble", "model_down")
LISTED = 10  # the terminal lists this many samples with one same problem; JSON lists them all


def _lines(path: Path, problems: list[dict[str, Any]]) -> Iterator[tuple[int, bytes]]:
    """(line number, line) of a JSON-lines file up to its content; its tail's damage noted."""
    try:
        handle = open_run_file(path.parent, path.name)
    except RunFileRefused as exc:  # a link or a FIFO: damage, never read
        problems.append(_problem(None, path.name, exc.reason))
        return
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


@dataclass
class IndexView:
    """What the index says, as the checks of the records need it."""

    lines: int = 0  # whole, well-formed lines
    # (sample id, kind) -> (pack, offset, bytes, sha256) of its latest line, for a sample's own kinds.
    latest: dict[tuple[str, str], tuple[str, int, int, str]] = field(default_factory=dict)
    samples: set[str] = field(default_factory=set)  # every sample id a line names


class BlobCheck:
    """A record's blobs against their recorded byte count and sha256, and against the index."""

    def __init__(self, run_dir: Path, index: IndexView, problems: list[dict[str, Any]]) -> None:
        self.run_dir = run_dir
        self.index = index
        self.problems = problems
        self.reader = RawReader(run_dir)
        self.has_packs = bool(packs_of(run_dir))
        self.blobs = 0

    def check(self, record: dict[str, Any]) -> None:
        self.check_raw(record)
        self.check_request(record)

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
            if "pack" in location:
                self.check_indexed(sid, kind, recorded, str(where))
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

    def check_indexed(self, sid: str, kind: str, recorded: dict[str, Any], where: str) -> None:
        """The index line of a blob the record points to: there, and naming the same bytes."""
        if not self.index.lines:
            return  # no index at all: one problem says so, not one a blob
        indexed = self.index.latest.get((sid, kind))
        if indexed is None:
            self.problems.append(
                _problem(sid, INDEX, f"its {kind} has no line in the index (its record points to {where})")
            )
            return
        named = (recorded.get("pack"), recorded.get("offset"), recorded.get("bytes"), recorded.get("sha256"))
        if named[:3] != indexed[:3]:
            self.problems.append(
                _problem(
                    sid,
                    where,
                    (
                        f"its record names {named[2]} bytes at {named[1]} for its {kind}; the index, "
                        f"{indexed[2]} bytes at {indexed[1]} of {indexed[0]}"
                    ),
                )
            )
        elif isinstance(named[3], str) and named[3] != indexed[3]:
            self.problems.append(
                _problem(sid, where, f"its record and the index give its {kind} different sha256s")
            )

    def check_request(self, record: dict[str, Any]) -> None:
        """A sample sent to its model has its request in the index (a run before packs: its file)."""
        sid = record["sample_id"]
        error = record.get("error") or {}
        if not self.has_packs or not self.index.lines or error.get("kind") in NOT_SENT:
            return
        if (sid, REQUEST) in self.index.latest:
            return
        if os.path.lexists(self.run_dir / RAW_DIR / f"{sid}{LEGACY_SUFFIX[REQUEST]}"):
            return
        self.problems.append(
            _problem(sid, INDEX, "its request has no line in the index (what was sent is lost to readers)")
        )


class PlanCheck:
    """The records against the manifest's plan: each record's arm, case, repeat and id, and, once
    all are read, whether the run holds what it planned and what it counted."""

    def __init__(
        self, run_dir: Path, manifest: dict[str, Any], problems: list[dict[str, Any]], notes: list[str]
    ) -> None:
        self.run_dir = run_dir
        self.manifest = manifest
        self.problems = problems
        self.notes = notes
        self.present: Counter[str] = Counter()  # per arm: distinct samples of the plan's cases
        arms = manifest["arms"]
        self.arms = {(a.get("prompt"), a.get("model")): a.get("arm") for a in arms if isinstance(a, dict)}
        self.cases = set(manifest["probeset"].get("cases") or [])
        repeats = manifest.get("repeats")
        self.repeats = repeats if type(repeats) is int else None

    def count(self, record: dict[str, Any], arm: Any) -> None:
        """A sample's first record, of the plan's arm `arm` (None: of no arm)."""
        if arm is not None and (not self.cases or record["case_id"] in self.cases):
            self.present[arm] += 1

    def check(self, record: dict[str, Any], number: int) -> Any:
        """The record against the plan; its arm (None when it is of no arm)."""
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
        return arm

    def check_recorded(self, seen: dict[str, int], state: str) -> None:
        """Fewer samples than the manifest counted when the run ended (or at its last resume)."""
        counts = self.manifest.get("counts") or {}
        recorded = counts.get("recorded")
        present = len(seen)
        if type(recorded) is int and recorded > present and (present == 0 or state != "failed"):
            how = "is missing" if not (self.run_dir / SAMPLES).exists() else f"holds {present} samples"
            self.problems.append(
                _problem(
                    None,
                    SAMPLES,
                    f"{how}, but the manifest counts {recorded} recorded (samples were lost)",
                )
            )
        for arm in _kept_arm_totals(self.manifest):
            number = self.arms.get((arm["prompt"], arm["model"]))
            if number is not None and arm["samples"] > self.present[number]:
                self.problems.append(
                    _problem(
                        None,
                        SAMPLES,
                        (
                            f"arm {number} has {self.present[number]} samples, fewer than the "
                            f"{arm['samples']} the manifest's totals counted when the run ended"
                        ),
                    )
                )

    def check_planned(self, seen: dict[str, int], state: str) -> None:
        """A complete run holds every planned sample (a sequential one, every round its rule ran);
        a run that ended otherwise may lack some: a note."""
        planned = (self.manifest.get("counts") or {}).get("planned")
        rounds, why = self.repeats, ""
        if "sequential" in self.manifest and rounds is not None:
            rounds, why = _sequential_rounds(self.run_dir, rounds)
        if state != "complete" or rounds is None or not self.cases:
            if isinstance(planned, int) and len(seen) < planned:
                self.notes.append(
                    f"{len(seen)} of {planned} planned samples are recorded (the run is {state})"
                )
            return
        if why:
            self.notes.append(why)
        arms = sorted((a for a in self.arms.values() if a is not None), key=str)
        order = self.manifest["probeset"].get("cases") or []
        for case in order:
            for repeat in range(1, rounds + 1):
                for arm in arms:
                    sid = f"{case}.r{repeat}.a{arm}"
                    if sid not in seen:
                        self.problems.append(
                            _problem(sid, SAMPLES, "planned but not recorded, and the run is complete")
                        )


class Verifier:
    """Checks one run; `problems` and `notes` fill as it goes."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.manifest = load_manifest(run_dir)
        self.problems: list[dict[str, Any]] = []
        self.notes: list[str] = []
        self.samples = 0
        self.seen: dict[str, int] = {}  # sample id -> its first line
        self.superseded: set[str] = set()
        self.plan = PlanCheck(run_dir, self.manifest, self.problems, self.notes)

    def run(self) -> dict[str, Any]:
        index_problems: list[dict[str, Any]] = []
        self.index = check_index(self.run_dir, index_problems, self.notes)
        self.blob_check = BlobCheck(self.run_dir, self.index, self.problems)
        self.check_samples()
        for name in OTHER_LINES:
            for _, line in _lines(self.run_dir / name, self.problems):
                if name == SUPERSEDED:
                    self.superseded.add(_sample_id(line))
        self.problems += index_problems
        check_kept(self.run_dir, self.problems, self.notes)
        state = run_state(self.run_dir, self.manifest)
        self.plan.check_recorded(self.seen, state)
        self.plan.check_planned(self.seen, state)
        self.note_unrecorded()
        return {
            "run": renamed(str(self.run_dir)),
            "ok": not self.problems,
            "state": state,
            "samples": self.samples,
            "blobs": self.blob_check.blobs,
            "problems": self.problems,
            "notes": self.notes,
        }

    def check_samples(self) -> None:
        seen = self.seen
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
            arm = self.plan.check(record, number)
            if sid in seen:
                self.problems.append(
                    _problem(
                        sid, SAMPLES, f"line {number} records this sample again (first on line {seen[sid]})"
                    )
                )
                continue
            seen[sid] = number
            self.plan.count(record, arm)
            self.blob_check.check(record)

    def note_unrecorded(self) -> None:
        """Index lines of samples no record holds: in flight when a run stopped (a resume ran
        them again under new lines) or never finished; their bytes are no damage."""
        stray = sorted(self.index.samples - self.seen.keys() - self.superseded)
        if stray:
            listed = ", ".join(stray[:LISTED]) + (
                f" and {len(stray) - LISTED} more" if len(stray) > LISTED else ""
            )
            self.notes.append(
                f"{INDEX}: {len(stray)} sample(s) have blobs but no record ({listed}): "
                "samples in flight when the run stopped"
            )


def _sample_id(line: bytes) -> str | None:
    try:
        record = loads(line)
    except ValueError:
        return None
    return record.get("sample_id") if isinstance(record, dict) else None


def _kept_arm_totals(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """The per-arm totals the manifest keeps (whatever their stamp: they count what the run ended with)."""
    totals = manifest.get("totals")
    arms = totals.get("arms") if isinstance(totals, dict) else None
    if not isinstance(arms, list):
        return []
    return [a for a in arms if isinstance(a, dict) and type(a.get("samples")) is int]


def _sequential_rounds(run_dir: Path, cap: int) -> tuple[int | None, str]:
    """The rounds a complete sequential run ran (None: its ledger does not say), and a note."""
    lines = list(iter_jsonl(run_dir / "sequential.jsonl", lambda message: None))
    if lines and lines[-1].get("stop") and type(lines[-1].get("round")) is int:
        last = min(lines[-1]["round"], cap)
        if last < cap:
            return (
                last,
                f"the sequential rule stopped at round {last} of {cap}: the later rounds were not run",
            )
        return last, ""
    if len(lines) == cap:
        return cap, ""
    return None, ""


def check_index(run_dir: Path, problems: list[dict[str, Any]], notes: list[str]) -> IndexView:
    """Every index line against its pack: the pack there, long enough, its bytes as the sha256 says.
    Packs are opened as the readers open them: in raw/, never through a link, regular files only."""
    view = IndexView()
    packs = packs_of(run_dir)
    if not packs:
        return view
    fds, refused = _open_packs(run_dir, packs, problems)
    try:
        sizes = {name: os.fstat(fd).st_size for name, fd in fds.items()}
        ends = dict.fromkeys(fds, 0)
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
            _take(view, entry)
            if entry["pack"] in refused:
                continue  # the pack's own problem says it
            _check_blob(fds, entry, number, sizes, problems)
            if entry["pack"] in ends:
                ends[entry["pack"]] = max(ends[entry["pack"]], entry["offset"] + entry["bytes"])
    finally:
        for fd in fds.values():
            os.close(fd)
    if not whole:
        problems.append(_problem(None, INDEX, "the run has packs but no index"))
    for name in fds:
        if sizes[name] > ends[name]:
            notes.append(
                f"{name}: its last {sizes[name] - ends[name]} bytes are named by no index line "
                "(what a sample in flight wrote when the run stopped)"
            )
    return view


def _take(view: IndexView, entry: dict[str, Any]) -> None:
    """An index line into the view (the latest line of a sample's kind wins, as for readers)."""
    view.lines += 1
    sid = sys.intern(entry["sample_id"])
    view.samples.add(sid)
    if entry["kind"] in (TEXT, BODY, REQUEST):
        kind, pack = sys.intern(entry["kind"]), sys.intern(entry["pack"])
        view.latest[(sid, kind)] = (pack, entry["offset"], entry["bytes"], entry.get("sha256"))


def _open_packs(
    run_dir: Path, packs: list[str], problems: list[dict[str, Any]]
) -> tuple[dict[str, int], set[str]]:
    """A descriptor of each pack that is a regular file of raw/; the others, each a problem."""
    root = run_dir.resolve()
    fds: dict[str, int] = {}
    refused: set[str] = set()
    for name in packs:
        try:
            fds[name] = _open_confined(root, name)
        except RawUnreadable as exc:
            refused.add(name)
            why = str(exc).removeprefix(f"{root / name}: ")
            problems.append(
                _problem(None, name, f"{why}: a pack must be a regular file of the run's raw/ folder")
            )
    return fds, refused


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
    fds: dict[str, int],
    entry: dict[str, Any],
    number: int,
    sizes: dict[str, int],
    problems: list[dict[str, Any]],
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
    data = os.pread(fds[name], entry["bytes"], entry["offset"])
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
    """The terminal form: one line a problem (the first LISTED samples of one same problem, then
    how many more: a run lacking a million samples stays readable), then one sentence on the whole."""
    shared = Counter((p["file"], p["problem"]) for p in result["problems"] if p["sample_id"])
    shown: Counter[tuple[str, str]] = Counter()
    lines = []
    for p in result["problems"]:
        key = (p["file"], p["problem"])
        if p["sample_id"]:
            shown[key] += 1
            if shown[key] > LISTED:
                continue
        lines.append((f"{p['sample_id']}: " if p["sample_id"] else "") + f"{p['file']}: {p['problem']}")
        if p["sample_id"] and shown[key] == LISTED and shared[key] > LISTED:
            lines.append(
                f"... and {shared[key] - LISTED} more samples: {p['file']}: {p['problem']} "
                "(--format json lists every one)"
            )
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
