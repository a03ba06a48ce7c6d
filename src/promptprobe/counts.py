"""One streaming pass over a run directory into a counts table: per (arm, case, metric) the
successes, trials and failures, plus per arm its header classes, tokens, cost and latencies,
and per case what the retrieval returned. Report, compare, why and the HTML view all read this
table; none of them reads samples.jsonl itself for counting. Memory does not grow with the
number of samples (latencies are kept as one packed array per arm). Beside the counts, per
(arm, case) how many samples showed each distinct vector of metric outcomes (the joint patterns
a family of metrics is adjusted on, promptprobe.stats.multiplicity): bounded by the distinct
vectors, not the samples.

A failed sample (no output) stays in every denominator it belongs to and counts as that
metric's unfavourable outcome: a miss where higher is better, an event where lower is better.
Which denominators it belongs to is decided without its output: a built-in metric applies by the
case (its `expect`, `must_retrieve`, ...); a user's [[check]] applies to a case when it returned
True or False for some sample of that case with an output, in any arm of the run. A failed sample
on a case where the check returned None for every output is outside that metric, as a passing
sample there would be, so both arms keep the same cases and the design stays paired. When no
sample of the case has an output at all (every one failed, in every arm), nothing says whether
the check applies: the failures count (errors never flatter an arm), the same in every arm.
`check_applies` keeps what each run saw, so that a comparison of two runs decides such a case
with the other run's outputs (promptprobe.comparison).
"""

import gc
import io
import os
import threading
from array import array
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from operator import itemgetter
from pathlib import Path
from typing import Any, Protocol

from . import endpoints
from .checks import METRICS, CheckSettings, Metric, metrics_for
from .checks.judge import judge_failed
from .endpoints import Endpoint
from .engine.cost import PriceMatch, PriceTable, load_prices, run_day, split_usage
from .engine.store import iter_samples, load_manifest, run_state, sample_problem
from .errors import InputError
from .jsonio import content_end, iter_jsonl, loads, nul_tail_warning
from .judgments import JudgmentIndex
from .kept_counts import Malformed, decode, encode
from .models import model_of
from .paths import open_run_file
from .probeset import Case, ProbeSet, parse_probeset
from .stamp import classifications, holds

HEADER_STATES = ("present", "absent", "misplaced", "empty", "errors")


@dataclass
class ArmCounts:
    prompt: str
    model: str
    samples: int = 0
    errors: int = 0
    error_kinds: Counter = field(default_factory=Counter)
    check_errors: Counter = field(default_factory=Counter)  # [[check]] name -> samples it failed on
    judge_errors: Counter = field(default_factory=Counter)  # judged check -> samples a judgment failed on
    judge_cost: float = 0.0  # what judging this arm's outputs cost
    judge_cost_unknown: bool = False  # a judge's price is unknown
    # metric -> case_id -> [successes, trials, failed samples among the trials]
    metrics: dict[str, dict[str, list[int]]] = field(default_factory=dict)
    # user check -> case_id -> failed samples not yet counted (until it is known whether it applies)
    pending: dict[str, dict[str, int]] = field(default_factory=dict)
    headers: dict[str, Counter] = field(default_factory=dict)
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0
    cost_unknown: bool = False
    cache_saved: float = 0.0  # what cache hits saved against the same tokens uncached
    batched: int = 0  # samples sent through a batch API
    latencies: array = field(default_factory=lambda: array("d"))
    spec: str = ""  # the model's spec; `model` is its arm name (the spec unless named NAME=SPEC)
    # case_id -> Counter of outcome vectors over CountsTable.pattern_metrics (1, 0, None: n/a;
    # PENDING: a failed sample's user check until finish() knows whether it applies to the case)
    patterns: dict[str, Counter] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"prompt={self.prompt},model={self.model}"


@dataclass
class CountsTable:
    run: Path
    manifest: dict[str, Any]
    state: str
    probeset: ProbeSet
    settings: CheckSettings
    classification: int | None
    arms: list[ArmCounts]
    # case_id -> Counter of the passage-id tuples its samples got
    snapshots: dict[str, Counter] = field(default_factory=dict)
    empty_retrievals: Counter = field(default_factory=Counter)
    recorded: int = 0
    simulated: bool = False
    warnings: list[str] = field(default_factory=list)
    sequential: list[dict[str, Any]] = field(default_factory=list)
    # user check -> case_id -> True: it returned True/False for some output of the case; False: it
    # returned None for every output; absent: no sample of the case had an output
    check_applies: dict[str, dict[str, bool]] = field(default_factory=dict)
    pattern_metrics: list[str] = field(default_factory=list)  # the order of a pattern's outcomes

    @property
    def cases(self) -> dict[str, Case]:
        return {c.id: c for c in self.probeset.cases}

    @property
    def metrics(self) -> dict[str, Metric]:
        """The built-in metrics and this run's own [[check]]s."""
        return metrics_for(self.settings)

    @property
    def case_order(self) -> list[str]:
        return [c.id for c in self.probeset.cases]

    @property
    def planned(self) -> int | None:
        return (self.manifest.get("counts") or {}).get("planned")

    def arm(self, prompt: str, model: str) -> ArmCounts:
        return next(a for a in self.arms if a.prompt == prompt and a.model == model)


def _overlay(
    run_dir: Path, number: int, on_warning: Callable[[str], None]
) -> tuple[dict[str, Any], Iterator[dict[str, Any]]]:
    path = run_dir / "classifications" / f"{number}.jsonl"
    lines = iter_jsonl(path, on_warning)
    meta = next(lines, None)
    if not meta or "classification" not in meta:
        raise InputError(f"{path}: not a classification file (no header line)")
    return meta, lines


def merged_samples(
    run_dir: Path,
    number: int | None,
    on_warning: Callable[[str], None],
    samples: Iterator[dict[str, Any]] | None = None,
    judged: bool = True,
) -> Iterator[dict[str, Any]]:
    """The samples (of samples.jsonl, or those given), with header and checks replaced by
    reclassification `number` when given, and (unless not `judged`) the judgments that
    classification counts attached as `judged` (promptprobe.judgments)."""
    samples = iter_samples(run_dir, on_warning) if samples is None else samples
    index = _judgment_index(run_dir, number) if judged else None
    if index is not None:
        samples = (index.attach(sample) for sample in samples)
    if number is None:
        yield from samples
        return
    _, lines = _overlay(run_dir, number, on_warning)
    pending: dict[str, dict[str, Any]] = {}
    for sample in samples:
        # Reclassification streams samples.jsonl in order, so lines usually match one for one.
        override = pending.pop(sample["sample_id"], None)
        while override is None:
            line = next(lines, None)
            if line is None:
                break
            if line["sample_id"] == sample["sample_id"]:
                override = line
            else:
                pending[line["sample_id"]] = line
        if override is not None and sample.get("raw") is not None:
            sample = dict(
                sample,
                header=override.get("header"),
                checks=override.get("checks") or {},
                outcomes=override.get("outcomes"),
            )
            if "error" in override:  # a check's error, or one a fixed check cleared (null)
                sample["error"] = override["error"]
        yield sample


def _judgment_index(run_dir: Path, number: int | None) -> JudgmentIndex | None:
    """The judgments of classification `number`, when its settings have judged checks."""
    if number is None and not (run_dir / "judgments.jsonl").is_file():
        return None  # no judged check has judged anything (the common case: no manifest read)
    return JudgmentIndex.of(run_dir, number, settings_of(run_dir, load_manifest(run_dir), number))


def settings_of(run_dir: Path, manifest: dict[str, Any], number: int | None) -> CheckSettings:
    if number is not None:
        meta, _ = _overlay(run_dir, number, lambda message: None)
        return CheckSettings.from_dict(meta.get("settings"))
    return CheckSettings.from_dict(manifest.get("checks") or {"header": manifest.get("header")})


def arm_specs(manifest: dict[str, Any]) -> dict[str, str]:
    """Each model's spec by its arm name (the spec itself unless named NAME=SPEC)."""
    return {m.get("name") or m["spec"]: m["spec"] for m in manifest.get("models", [])}


def run_probeset(manifest: dict[str, Any]) -> ProbeSet:
    return parse_probeset(manifest["probeset"]["source"].encode("utf-8"), Path(manifest["probeset"]["path"]))


# Above this size a run's samples are counted by one process per core, each over a part of
# the file (byte ranges cut at line ends), and the partial tables are added up.
PARALLEL_BYTES = 48 * 1024 * 1024
MAX_PROCESSES = 4


def build_counts(
    run_dir: str | Path,
    *,
    classification: int | None = None,
    top_k: int | None = None,
    on_warning: Callable[[str], None] | None = None,
    kept: bool = True,
) -> CountsTable:
    """The counts table of a recorded run (the latest reclassification unless one is named): the
    counts it keeps, when they still hold (unless not `kept`), else counted."""
    run_dir = Path(run_dir)
    warnings: list[str] = []
    warn = on_warning or warnings.append
    table = _empty_table(run_dir, classification, top_k)
    if kept and classification is None and top_k is None and _restore(table):
        table.sequential = list(iter_jsonl(run_dir / "sequential.jsonl", warn))
        table.warnings = warnings
        return table
    counter = _Counter(table, {"top_k"} if top_k is not None else set())
    number = table.classification
    samples_path = run_dir / "samples.jsonl"
    size = _data_size(samples_path)
    processes = min(MAX_PROCESSES, os.cpu_count() or 1)
    # Forking is safe only without other threads (a finished run's abandoned workers may hold locks).
    if number is None and size > PARALLEL_BYTES and processes > 1 and threading.active_count() == 1:
        if not _count_in_parallel(counter, samples_path, size, processes, warn):
            table, counter = _start(run_dir, classification, top_k)  # a sample twice: counted in order
            warnings.clear()
            for sample in merged_samples(run_dir, number, warn, judged=False):
                counter.feed(sample, warn)
    else:
        for sample in merged_samples(run_dir, number, warn, judged=False):  # the counter attaches them
            counter.feed(sample, warn)
    counter.finish()
    table.sequential = list(iter_jsonl(run_dir / "sequential.jsonl", warn))
    table.warnings = warnings
    return table


def _data_size(path: Path) -> int:
    """The bytes of a JSON-lines file before any tail of NULs (0 when there is no file)."""
    return _sizes(path)[0]


def _sizes(path: Path) -> tuple[int, int]:
    """A run's JSON-lines file: where its content ends (before a tail of NULs), and its size."""
    try:
        with open_run_file(path.parent, path.name) as handle:
            return content_end(handle), os.fstat(handle.fileno()).st_size
    except OSError:  # no file yet; a link or a FIFO is refused (RunFileRefused), never counted as empty
        return 0, 0


def finished_copy(table: CountsTable) -> CountsTable:
    """A table as build_counts finishes it (no empty cells), copied: its counter goes on adding
    to the original."""
    arms = [
        replace(
            arm,
            error_kinds=Counter(arm.error_kinds),
            judge_errors=Counter(arm.judge_errors),
            metrics={
                name: {case_id: list(cell) for case_id, cell in per_case.items() if cell[1]}
                for name, per_case in arm.metrics.items()
            },
            headers={case_id: Counter(states) for case_id, states in arm.headers.items()},
            latencies=array("d", arm.latencies),
            patterns=resolved_patterns(table, arm),
        )
        for arm in table.arms
    ]
    return replace(
        table,
        arms=arms,
        snapshots={case_id: Counter(found) for case_id, found in table.snapshots.items()},
        empty_retrievals=Counter(table.empty_retrievals),
        warnings=list(table.warnings),
        sequential=list(table.sequential),
    )


# What counting reads of a sample record, each looked up once: a record the engine writes has every
# key (one C call gets them all), an older or hand-made one may lack some (None, as .get gives).
FIELDS = (
    "sample_id", "case_id", "repeat", "prompt", "model", "raw", "header", "error",
    "outcomes", "checks", "latency_ms", "response", "retrieval",
)  # fmt: skip
_ALL_FIELDS = itemgetter(*FIELDS)
_PART_TYPES = (dict, type(None))
_NO_FIELDS = (None,) * len(FIELDS)


def fields_of(sample: dict[str, Any]) -> tuple[Any, ...]:
    """The sample's FIELDS, None for a key it lacks."""
    try:
        return _ALL_FIELDS(sample)
    except KeyError:
        return tuple(map(sample.get, FIELDS))


PENDING = -1  # in a pattern: a failed sample's user check, until it is known to apply to the case


def resolved_patterns(table: CountsTable, arm: ArmCounts) -> dict[str, Counter]:
    """An arm's patterns with each failed sample's user checks settled as its counts settle them:
    outside the check (None) where the check returned None for every output of the case, its
    unfavourable outcome otherwise."""
    names = table.pattern_metrics
    out: dict[str, Counter] = {}
    for case_id, seen in arm.patterns.items():
        if not seen:
            continue
        settled: Counter = Counter()
        for pattern, count in seen.items():
            if PENDING in pattern:
                pattern = tuple(
                    value
                    if value != PENDING
                    else (
                        None
                        if table.check_applies.get(names[j], {}).get(case_id) is False
                        else int(not table.metrics[names[j]].higher_is_better)
                    )
                    for j, value in enumerate(pattern)
                )
            settled[pattern] += count
        out[case_id] = settled
    return out


class LineIndex:
    """Where each (prompt, model, case)'s lines lie in samples.jsonl: start and length (12 bytes
    a sample), so that one cell's samples are read without a pass over the file."""

    def __init__(self) -> None:
        self.cells: dict[tuple[str, str, str], tuple[array, array]] = {}

    def add(self, key: tuple[str, str, str], start: int, length: int) -> None:
        cell = self.cells.get(key)
        if cell is None:
            cell = self.cells[key] = (array("q"), array("I"))
        cell[0].append(start)
        cell[1].append(length)

    def lines(self, key: tuple[str, str, str]) -> list[tuple[int, int]]:
        starts, lengths = self.cells.get(key, ((), ()))
        return list(zip(starts, lengths, strict=True))


class Follower(Protocol):
    """What follows a LiveCounts' pass over samples.jsonl: started over with it, given each record
    with where its line lies."""

    def restart(self, table: CountsTable) -> None: ...

    def take(self, record: dict[str, Any], start: int, length: int) -> None: ...


class LiveCounts:
    """A run's counts table kept current while its samples.jsonl grows (the live viewer): each
    `refresh` reads only the whole lines appended since the last, and remembers where each
    (arm, case)'s samples lie in the file, so that one cell's outputs are read without a pass
    over the run. Anything but growth (a rewritten manifest, a new reclassification, a file cut
    back or replaced) starts the count over. A line still being written is left for the next look;
    once the run has stopped, a last line without its newline is torn and ignored with a warning,
    as every reader does."""

    def __init__(self, run_dir: str | Path, follower: "Follower | None" = None) -> None:
        self.run_dir = Path(run_dir)
        # Given every record this counting parses (the viewer's search index), so a record is parsed once.
        self.follower = follower
        self.lock = threading.Lock()
        self.version = 0  # grows whenever the table may have changed
        self._signature: tuple[Any, ...] | None = None
        self._table: CountsTable | None = None
        self._counter: _Counter | None = None
        self._snapshot: CountsTable | None = None
        self._lines = _AppendedLines(self.run_dir / "samples.jsonl")
        self._left = 0
        self._fed_warnings: list[str] = []
        self._last: tuple[CountsTable, int] | None = None  # the last table handed out, with its bytes left
        self._index = LineIndex()

    def refresh(self, budget: int | None = None) -> CountsTable:
        """The table as the run stands now (the same object while nothing changed); `budget`: read
        at most about that many bytes this time (`left` then says how many wait)."""
        return self.look(budget)[0]

    def look(self, budget: int | None = None, wait: bool = True) -> tuple[CountsTable, int]:
        """`refresh`, with the bytes still to count behind that very table (0: it is whole).
        `wait=False`: while another thread is counting, the table it counted last, at once."""
        last = self._last
        if not self.lock.acquire(blocking=wait or last is None):
            assert last is not None
            return last
        try:
            signature = _signature(self.run_dir)
            if signature != self._signature or self._table is None:
                self._reset()
                self._signature = signature
            try:
                grew = self._read(budget)
            except BaseException:
                self._signature = None  # the next look starts over
                raise
            if grew or self._snapshot is None:
                self._snapshot = finished_copy(self._table)
                self.version += 1
            self._last = (self._snapshot, self._left)
            return self._last
        finally:
            self.lock.release()

    def offsets(self, prompt: str, model: str, case_id: str) -> list[tuple[int, int]]:
        """Where the lines of one (arm, case)'s samples start in samples.jsonl and their lengths,
        in file order."""
        with self.lock:
            return self._index.lines((prompt, model, case_id))

    @property
    def counted(self) -> int:
        """Bytes of samples.jsonl counted so far."""
        return self._lines.offset

    @property
    def left(self) -> int:
        """Bytes of samples.jsonl there were still to count at the last look (0: all of it)."""
        return self._left

    def _reset(self) -> None:
        self._table, self._counter = _start(self.run_dir, None, None)
        self._snapshot = None
        self._lines = _AppendedLines(self.run_dir / "samples.jsonl")
        self._left = 0
        self._index = LineIndex()
        self._fed_warnings = []  # what feeding said (a sample of no arm): kept across looks
        if self.follower is not None:
            self.follower.restart(self._table)

    def _read(self, budget: int | None) -> bool:
        """Count what was appended (at most about `budget` bytes of it); True when anything
        (samples, rounds, state) changed."""
        table, counter = self._table, self._counter
        assert table is not None and counter is not None
        path = self.run_dir / "samples.jsonl"
        size, whole_size = _sizes(path)  # a NUL tail is never read
        offset = self._lines.offset
        # Cut back (a resume repaired a torn tail), or a reclassified run that grew (its overlay is
        # read in step with the samples, from the start): count it over.
        if size < offset or (table.classification is not None and size > offset > 0):
            self._reset()
            table, counter = self._table, self._counter
            assert table is not None and counter is not None
        state = run_state(self.run_dir, table.manifest)
        changed = state != table.state
        table.state = state
        warnings: list[str] = []
        rest = b""
        lines = self._lines
        if size > lines.offset:
            changed = True
            whole = budget is None or table.classification is not None or size - lines.offset <= budget
            with open_run_file(self.run_dir, "samples.jsonl") as handle:
                handle.seek(lines.offset)
                self._feed(handle, size - lines.offset if whole else budget, table.classification, True)
                if whole:
                    rest = handle.read(size - lines.offset)
            if rest.strip() and state != "running":
                try:
                    loads(rest)  # a whole record that only lacks its newline counts
                except ValueError:
                    warnings.append(
                        f"{path}: the last line (line {lines.count + 1}) is torn (cut off mid-write) "
                        "and is ignored"
                    )
                else:
                    self._feed(io.BytesIO(rest + b"\n"), len(rest) + 1, table.classification, False)
                    lines.offset -= 1  # the newline added here is not in the file
        if size < whole_size and state != "running":
            warnings.append(nul_tail_warning(path, size, whole_size))
        counter.flush()
        self._left = max(0, size - lines.offset - len(rest))
        table.sequential = list(iter_jsonl(self.run_dir / "sequential.jsonl", warnings.append))
        warnings = self._fed_warnings + warnings
        if warnings != table.warnings:
            changed = True
            table.warnings = warnings
        return changed

    def _feed(self, handle: Any, size: int, number: int | None, in_file: bool) -> None:
        """Count the whole lines among the next `size` bytes of `handle` (streamed: memory stays
        flat); `in_file`: the lines are the file's as they are (not a last line given its newline)."""
        counter = self._counter
        assert counter is not None
        warnings = self._fed_warnings
        lines = self._lines
        samples = lines.read(handle, size)
        if number is not None:
            samples = merged_samples(self.run_dir, number, warnings.append, samples, judged=False)
        # A reclassified run's records are merged with its overlay: the follower reads those itself.
        follower = self.follower if number is None and in_file else None
        feed, add = counter.feed, self._index.add
        for sample in samples:
            if follower is not None:
                follower.take(sample, lines.start, lines.length)
            if feed(sample, warnings.append):  # a sample twice is shown once, as it is counted
                add((sample["prompt"], sample["model"], sample["case_id"]), lines.start, lines.length)


def _signature(run_dir: Path) -> tuple[Any, ...]:
    """What changes when a run's files change other than by growing: the manifest, the
    reclassifications, samples.jsonl replaced."""

    def stat(name: str) -> tuple[int, int, int] | None:
        try:
            info = os.stat(run_dir / name)
        except OSError:
            return None
        return info.st_ino, info.st_size, info.st_mtime_ns

    samples = stat("samples.jsonl")
    # Judgments are attached to samples as they are counted: new ones mean counting again.
    judged = stat("judgments.jsonl")
    return (stat("manifest.json"), tuple(classifications(run_dir)), samples and samples[0], judged)


class _AppendedLines:
    """The JSON lines of a growing file, read on from where the last read stopped (always a line
    end): how far it has read, how many lines, and where the line of the record it gave last lies.
    A line still being written (no newline yet) is left for the next read."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0  # bytes read
        self.count = 0  # lines read
        self.start = self.length = 0  # the line of the record given last

    def read(self, handle: Any, size: int) -> Iterator[dict[str, Any]]:
        """The records among the next `size` bytes of `handle` (at `offset`), streamed."""
        position, end = self.offset, self.offset + size
        for line in handle:  # may run past `end` into lines appended meanwhile: as well
            if line[-1:] != b"\n":
                handle.seek(position)  # a line still being written: for the next look
                break
            self.count += 1
            self.start, self.length, position = position, len(line), position + len(line)
            self.offset = position
            if line.strip():
                try:
                    record = loads(line)
                except ValueError:
                    raise InputError(f"{self.path}: line {self.count} is not valid JSON") from None
                problem = sample_problem(record)
                if problem is not None:
                    raise InputError(f"{self.path}: line {self.count} {problem}")
                yield record
            if position >= end:
                break


def _empty_table(run_dir: Path, classification: int | None, top_k: int | None) -> CountsTable:
    """An empty counts table of a run (its manifest, probe set and settings read), shaped to its
    arms, cases and metrics."""
    manifest = load_manifest(run_dir)
    numbers = classifications(run_dir)
    if classification is not None and classification not in numbers:
        known = ", ".join(map(str, numbers)) or "none"
        raise InputError(f"{run_dir}: no classification {classification} (this run has: {known})")
    number = classification if classification is not None else (numbers[-1] if numbers else None)
    settings = settings_of(run_dir, manifest, number).with_top_k(top_k)
    probeset = run_probeset(manifest)
    table = CountsTable(run_dir, manifest, run_state(run_dir, manifest), probeset, settings, number, [])
    spec_of = arm_specs(manifest)
    table.arms = [
        ArmCounts(a["prompt"], a["model"], spec=spec_of.get(a["model"], a["model"])) for a in manifest["arms"]
    ]
    table.pattern_metrics = list(table.metrics)
    for arm in table.arms:
        arm.metrics = {name: {} for name in table.metrics}
        arm.headers = {case_id: Counter() for case_id in table.cases}
        arm.patterns = {case_id: Counter() for case_id in table.cases}
    return table


def _start(run_dir: Path, classification: int | None, top_k: int | None) -> tuple[CountsTable, "_Counter"]:
    """An empty counts table of a run and its counter."""
    table = _empty_table(run_dir, classification, top_k)
    return table, _Counter(table, {"top_k"} if top_k is not None else set())


def kept_form(table: CountsTable) -> dict[str, Any]:
    """A finished table's counts as kept-counts.json keeps them (promptprobe.kept_counts)."""
    return encode(_partial(table))


KEPT_COUNTS = "kept-counts.json"  # a finished run's counts, kept at its end (promptprobe.totals)
KEPT_LIMIT = 64 * 1024 * 1024  # a kept file beyond this is not the one a run keeps: counted instead


def kept_table(run_dir: Path) -> CountsTable | None:
    """The run's counts as it keeps them, when they still hold (None: a reader counts the run)."""
    table = _empty_table(run_dir, None, None)
    return table if _restore(table) else None


def _restore(table: CountsTable) -> bool:
    """Fill an empty table from the counts its run keeps, when they were counted from the run as
    it stands and are well formed (False: the run must be counted)."""
    if table.classification is not None:
        return False
    try:  # never through a link: what a run keeps is a file of its own
        with os.fdopen(
            os.open(table.run / KEPT_COUNTS, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK), "rb"
        ) as handle:
            kept = (
                loads(handle.read(KEPT_LIMIT + 1))
                if os.fstat(handle.fileno()).st_size <= KEPT_LIMIT
                else None
            )
    except (OSError, ValueError):  # none kept (an older run), not a file, or not JSON: counted
        return False
    if not isinstance(kept, dict) or not holds(kept.get("stamp"), table.run, table.manifest):
        return False
    try:
        part = decode(
            kept.get("counts"), len(table.arms), set(table.cases), set(table.metrics), len(table.metrics)
        )
    except Malformed:
        return False
    _add_partial(table, part)
    for arm in table.arms:
        arm.patterns = resolved_patterns(table, arm)  # as finish() leaves them: the cases seen only
    return True


class _Counter:
    """Adds samples into a counts table (in one process, or a part of the file in each)."""

    def __init__(self, table: CountsTable, overridden: set[str]) -> None:
        self.table = table
        manifest, settings = table.manifest, table.settings
        cases = table.cases
        # Which metrics apply depends on the case and the settings only: work it out once per case.
        applicable: dict[str, list[tuple[str, Metric]]] = {
            case_id: [(name, m) for name, m in table.metrics.items() if m.applies(case, settings)]
            for case_id, case in cases.items()
        }
        self.judgments = JudgmentIndex.of(table.run, table.classification, settings)
        price_of = _pricer(load_prices(manifest.get("prices") or {}, day=run_day(manifest)), manifest)
        self.duplicates = 0  # samples seen again (a hand-edited or damaged file): not counted twice
        self.slots = {
            (arm.prompt, arm.model, case_id): _Slot(
                arm,
                case,
                applicable[case_id],
                price_of(arm.model),
                overridden,
                table.pattern_metrics,
                table.snapshots,
            )
            for arm in table.arms
            for case_id, case in cases.items()
        }

    def feed(self, sample: dict[str, Any], warn: Callable[[str], None]) -> bool:
        """Count a sample; False when it is not counted (of no arm or case, or seen already)."""
        return self.feed_fields(sample, fields_of(sample), warn)

    def feed_fields(
        self, sample: dict[str, Any], fields: tuple[Any, ...], warn: Callable[[str], None]
    ) -> bool:
        """`feed`, the sample's FIELDS read already (`fields_of`)."""
        sample_id, case_id, repeat, prompt, model, _, _, _, _, _, _, _, retrieval = fields
        table = self.table
        slot = self.slots.get((prompt, model, case_id))
        if slot is None:
            warn(f"{table.run}: sample {sample_id} belongs to no arm or case of the manifest; ignored")
            return False
        if slot.repeats.seen_before(repeat):
            self.duplicates += 1
            if self.duplicates == 1:
                warn(
                    f"{table.run}: sample {sample_id} is in samples.jsonl more than once: each "
                    "sample is counted once (probe verify lists every duplicate)"
                )
            return False
        table.recorded += 1
        if self.judgments is not None:
            sample = self.judgments.attach(sample)
            cost = self.judgments.cost_of(sample_id)
            slot.arm.judge_cost += cost or 0.0
            slot.arm.judge_cost_unknown = slot.arm.judge_cost_unknown or cost is None
        response = slot.count(sample, fields, table.settings, table.check_applies)
        if retrieval is not None:
            ids = retrieval.get("passage_ids") or ()
            passages = slot.passages
            if passages.same and ids == passages.ids:  # the common case: what the last sample got
                passages.same += 1
            else:
                passages.start(ids)
            if not ids:
                table.empty_retrievals[slot.case.id] += 1
        if not table.simulated:
            table.simulated = "SIMULATED" in ((response or {}).get("model") or "")
        return True

    def flush(self) -> None:
        """Every tallied sample added into the table's cells (before the table is read)."""
        applies = self.table.check_applies
        for slot in self.slots.values():
            if slot.tally or slot.passages.same:
                slot.flush(applies)

    def finish(self) -> None:
        self.flush()
        table = self.table
        for arm in table.arms:
            for name, per_case in arm.pending.items():
                lower_is_better = not table.metrics[name].higher_is_better
                seen = table.check_applies.get(name, {})
                for case_id, failed in per_case.items():
                    if seen.get(case_id) is False:
                        continue  # the check does not apply to this case: outside the metric
                    cell = arm.metrics[name].setdefault(case_id, [0, 0, 0])
                    cell[0] += failed * lower_is_better
                    cell[1] += failed
                    cell[2] += failed
            arm.pending = {}
            for per_case in arm.metrics.values():
                for case_id in [c for c, cell in per_case.items() if cell[1] == 0]:
                    del per_case[case_id]  # no sample of this arm for this case
            arm.patterns = resolved_patterns(table, arm)


def _partial(table: CountsTable) -> dict[str, Any]:
    """What one process counted into its table, in a form the parent adds up (_add_partial)."""
    return {
        "recorded": table.recorded,
        "simulated": table.simulated,
        "snapshots": table.snapshots,
        "empty": table.empty_retrievals,
        "check_applies": table.check_applies,
        "pending": [arm.pending for arm in table.arms],
        "patterns": [arm.patterns for arm in table.arms],
        "arms": [
            (
                arm.samples,
                arm.errors,
                arm.error_kinds,
                arm.metrics,
                arm.headers,
                arm.input_tokens,
                arm.output_tokens,
                arm.cost,
                arm.cost_unknown,
                arm.latencies,
                arm.cache_saved,
                arm.batched,
                arm.check_errors,
                arm.judge_errors,
                arm.judge_cost,
                arm.judge_cost_unknown,
            )
            for arm in table.arms
        ],
    }


def _add_partial(table: CountsTable, part: dict[str, Any]) -> None:
    """Add what a counting process counted (_partial) into the table."""
    table.recorded += part["recorded"]
    table.simulated = table.simulated or part["simulated"]
    for case_id, snapshots in part["snapshots"].items():
        table.snapshots.setdefault(case_id, Counter()).update(snapshots)
    table.empty_retrievals.update(part["empty"])
    for name, per_case in part["check_applies"].items():
        mine = table.check_applies.setdefault(name, {})
        for case_id, applies in per_case.items():
            mine[case_id] = mine.get(case_id, False) or applies
    for arm, patterns in zip(table.arms, part["patterns"], strict=True):
        for case_id, seen in patterns.items():
            arm.patterns[case_id].update(seen)
    for arm, pending in zip(table.arms, part["pending"], strict=True):
        for name, per_case in pending.items():
            for case_id, failed in per_case.items():
                counted = arm.pending.setdefault(name, {})
                counted[case_id] = counted.get(case_id, 0) + failed
    for arm, (
        samples,
        errors,
        kinds,
        metrics,
        headers,
        tokens_in,
        tokens_out,
        cost,
        unknown,
        latencies,
        saved,
        batched,
        check_errors,
        judge_errors,
        judge_cost,
        judge_cost_unknown,
    ) in zip(table.arms, part["arms"], strict=True):
        arm.samples += samples
        arm.errors += errors
        arm.error_kinds.update(kinds)
        for name, per_case in metrics.items():
            for case_id, cell in per_case.items():
                mine = arm.metrics[name].setdefault(case_id, [0, 0, 0])
                for i in range(3):
                    mine[i] += cell[i]
        for case_id, states in headers.items():
            arm.headers[case_id].update(states)
        arm.input_tokens += tokens_in
        arm.output_tokens += tokens_out
        arm.cost += cost
        arm.cost_unknown = arm.cost_unknown or unknown
        arm.latencies.extend(latencies)
        arm.cache_saved += saved
        arm.batched += batched
        arm.check_errors.update(check_errors)
        arm.judge_errors.update(judge_errors)
        arm.judge_cost += judge_cost
        arm.judge_cost_unknown = arm.judge_cost_unknown or judge_cost_unknown


def _line_ranges(path: Path, size: int, parts: int) -> list[tuple[int, int]]:
    """Byte ranges covering the file, each starting at a line start."""
    cuts = [0]
    with open_run_file(path.parent, path.name) as handle:
        for i in range(1, parts):
            handle.seek(size * i // parts)
            handle.readline()  # to the end of the line this byte falls in
            cuts.append(max(handle.tell(), cuts[-1]))
    cuts.append(size)
    return [(a, b) for a, b in zip(cuts, cuts[1:], strict=False) if b > a]


READ_BUFFER = 1 << 17  # a counting process's reads: 8 KB (the default) meant a system call per 8 lines


def _count_range(
    counter: _Counter, path: Path, start: int, end: int, last: bool
) -> tuple[dict[str, Any], list[str], list[tuple[Any, list[int]]]]:
    """Count the lines that start within [start, end), streaming them (ranges start at line
    starts: only the last range's last line can lack its newline, or run on into a NUL tail)."""
    warnings: list[str] = []
    feed, warn = counter.feed_fields, warnings.append
    with open_run_file(path.parent, path.name, READ_BUFFER) as handle:
        handle.seek(start)
        position = start
        for line in handle:  # the file's own line iterator: the cheapest way through a million lines
            line_start, position = position, position + len(line)
            if position > end:
                line = line[: end - line_start]
            if line and not line.isspace():
                try:
                    sample = loads(line)
                except ValueError:
                    if last and position >= end and not line.endswith(b"\n"):
                        warnings.append(f"{path}: the last line is torn (cut off mid-write) and is ignored")
                        break
                    raise InputError(f"{path}: the line at byte {line_start} is not valid JSON") from None
                try:
                    fields = _ALL_FIELDS(sample)
                except (KeyError, TypeError):  # a key missing, or not an object: as sample_problem judges
                    fields = _NO_FIELDS
                # The exact types the engine writes: sample_problem finds nothing wrong (else it says).
                if not (
                    type(fields[0]) is str
                    and type(fields[1]) is str
                    and type(fields[2]) is int
                    and type(fields[3]) is str
                    and type(fields[4]) is str
                    and type(fields[5]) in _PART_TYPES
                    and type(fields[6]) in _PART_TYPES
                    and type(fields[7]) in _PART_TYPES
                ):
                    problem = sample_problem(sample)
                    if problem is not None:
                        raise InputError(f"{path}: the line at byte {line_start} {problem}")
                    fields = fields_of(sample)
                feed(sample, fields, warn)
            if position >= end:
                break
    counter.flush()
    slots = counter.slots.items()
    seen = [(key, bytes(slot.repeats.bits), slot.repeats.odd) for key, slot in slots if slot.repeats]
    return _partial(counter.table), warnings, seen


def _count_in_parallel(
    counter: _Counter, path: Path, size: int, processes: int, warn: Callable[[str], None]
) -> bool:
    """Count in parts; False when one sample is in two parts (the caller then counts in order)."""
    import multiprocessing

    ranges = _line_ranges(path, size, processes)
    context = multiprocessing.get_context("fork")  # each child starts from this counter, unpickled
    children = []
    twice = False
    for index, (start, end) in enumerate(ranges):
        receive, send = context.Pipe(duplex=False)
        child = context.Process(
            target=_child, args=(send, counter, path, start, end, index == len(ranges) - 1)
        )
        child.start()
        send.close()
        children.append((child, receive))
    for child, receive in children:
        try:
            outcome, payload = receive.recv()
        except EOFError:
            outcome, payload = "error", f"{path}: a counting process stopped without an answer"
        child.join()
        if outcome == "error":
            raise InputError(payload)
        part, warnings, seen = payload
        _add_partial(counter.table, part)
        for message in warnings:
            warn(message)
        for key, repeats, odd in seen:
            twice = counter.slots[key].repeats.merge(repeats, odd) or twice
    return not twice


def _child(send: Any, counter: _Counter, path: Path, start: int, end: int, last: bool) -> None:
    # A parsed line holds no reference cycle (refcounting frees it): the cycle collector's passes
    # would only cost time (~8% of a count), and touch every inherited object (copying its page).
    gc.disable()
    try:
        send.send(("ok", _count_range(counter, path, start, end, last)))
    except InputError as exc:
        send.send(("error", str(exc)))
    finally:
        send.close()


def _pricer(prices: PriceTable, manifest: dict[str, Any]) -> Callable[[str], Any]:
    matches = pricing(manifest, prices)
    spec_of = arm_specs(manifest)

    def price_of(model: str) -> Any:
        spec = spec_of.get(model, model)
        return matches[spec][1].price if spec in matches else None

    return price_of


def pricing(
    manifest: dict[str, Any], prices: PriceTable | None = None
) -> dict[str, tuple[Endpoint, PriceMatch]]:
    """Each model of a run: where its calls went (as recorded) and its price there, or why none."""
    prices = prices or load_prices(manifest.get("prices") or {}, day=run_day(manifest))
    went = endpoints.of_run(manifest)
    return {
        m["spec"]: (went[m["spec"]], prices.match(model_of(m), went[m["spec"]]))
        for m in manifest.get("models", [])
    }


def _add_outcomes(
    cells: list[tuple[Any, ...]],
    hits: tuple[Any, ...],
    n: int,
    applies: dict[str, dict[str, bool]],
    case_id: str,
    width: int,
) -> tuple[int | None, ...]:
    """Add `n` samples with these outcomes (one a cell) into the cells; their pattern (None where a
    metric is outside them). A user's check that said None does not apply to them."""
    pattern: list[int | None] = [None] * width
    for (cell, _, name, *_, index), hit in zip(cells, hits, strict=True):
        if name not in METRICS:
            seen = applies.setdefault(name, {})
            seen[case_id] = seen.get(case_id, False) or hit is not None
            if hit is None:
                continue
        cell[1] += n
        if hit:
            cell[0] += n
        pattern[index] = 1 if hit else 0
    return tuple(pattern)


class _Repeats:
    """The repeats of one (arm, case) counted already, a byte each (a bit cost more to test and
    set than memory it saves): a sample is counted once."""

    LIMIT = 1 << 21  # repeats from here on (or below 0) are kept in a set: at most 2 MB of marks

    def __init__(self) -> None:
        self.bits = bytearray()  # 1 at each repeat counted
        self.odd: set[int] = set()  # repeats beyond the marks

    def __bool__(self) -> bool:
        return bool(self.bits) or bool(self.odd)

    def seen_before(self, repeat: int) -> bool:
        """True when this repeat was counted already; else it is marked counted."""
        marks = self.bits
        if 0 <= repeat < len(marks):
            if marks[repeat]:
                return True
            marks[repeat] = 1
            return False
        if not 0 <= repeat < self.LIMIT:
            if repeat in self.odd:
                return True
            self.odd.add(repeat)
            return False
        marks.extend(bytes(min(max(repeat + 1, 2 * len(marks)), self.LIMIT) - len(marks)))
        marks[repeat] = 1
        return False

    def merge(self, bits: bytes, odd: set[int]) -> bool:
        """Add what another process counted; True when a repeat was counted by both."""
        mine, theirs = int.from_bytes(self.bits, "little"), int.from_bytes(bits, "little")
        both = bool(mine & theirs) or bool(self.odd & odd)
        self.bits = bytearray((mine | theirs).to_bytes(max(len(self.bits), len(bits)), "little"))
        self.odd |= odd
        return both


class _Tally:
    """Samples of one (arm, case) tallied by their header class and recorded outcomes, where those
    alone decide their part in the cells and their pattern (every metric keeps its recorded
    outcome: no setting changed for this report): each distinct set is added once (`_Slot.flush`),
    not one by one."""

    def __init__(self, cells: list[tuple[Any, ...]]) -> None:
        names = [name for _, _, name, *_ in cells]
        self.recorded_of: Callable[[dict[str, Any]], tuple[Any, ...]] | None = None
        if all(derive is None for _, _, _, derive, *_ in cells):
            if len(names) > 1:
                self.recorded_of = itemgetter(*names)
            else:  # itemgetter of one name gives the value, not a tuple
                self.recorded_of = lambda recorded: tuple(recorded[name] for name in names)
        self.tallied: dict[tuple[Any, ...], int] = {}

    def __bool__(self) -> bool:
        return bool(self.tallied)

    def took(self, header: str, recorded: Any) -> bool:
        """Tally a sample by its header class and its recorded outcomes, one a cell, when those
        alone decide its part; False (nothing tallied) when they do not."""
        if self.recorded_of is None or recorded is None:
            return False
        try:
            key = (header, self.recorded_of(recorded))
            self.tallied[key] = self.tallied.get(key, 0) + 1
        except (KeyError, TypeError):  # an outcome not recorded, or not a plain value: worked out
            return False
        return True

    def drain(self) -> list[tuple[tuple[str, tuple[Any, ...]], int]]:
        """The tallied header classes and outcomes with their counts, the tally emptied."""
        tallied, self.tallied = self.tallied, {}
        return list(tallied.items())


class _Passages:
    """The passage ids one (arm, case)'s samples got, counted into the case's snapshots (shared by
    its arms). A run of samples that got the same ids, the common case, is added at once; each
    key is entered at its first sample, so the snapshots keep the order ids were first seen in."""

    def __init__(self, case_id: str, snapshots: dict[str, Counter]) -> None:
        self.case_id = case_id
        self.snapshots = snapshots
        self.snapshot: Counter | None = None  # the case's, once one of its samples got passages
        self.ids: Any = None  # the last sample's passage ids, as recorded
        self.key: tuple[Any, ...] = ()
        self.same = 0  # samples that got `ids`, not yet added into the snapshot

    def start(self, ids: Any) -> None:
        """A sample whose ids are not the last one's (or the first since a flush)."""
        if self.same:
            self.flush()
        snapshot = self.snapshot
        if snapshot is None:
            snapshot = self.snapshot = self.snapshots.setdefault(self.case_id, Counter())
        key = tuple(ids)
        if key not in snapshot:
            snapshot[key] = 0
        self.ids, self.key, self.same = ids, key, 1

    def flush(self) -> None:
        assert self.snapshot is not None
        self.snapshot[self.key] += self.same
        self.same = 0


class _Slot:
    """One (arm, case): where its samples are counted, with the metrics that apply to the case."""

    def _judge_errors(self, sample: dict[str, Any], settings: CheckSettings) -> None:
        """A judged check some judgment of this output failed on: an error of that metric only
        (its outcome is already the unfavourable one, checks/judge.py)."""
        for cell, _, name, *_ in self.cells:
            config = settings.judge(name)
            if config is not None and judge_failed(sample, config):
                cell[2] += 1
                self.arm.judge_errors[name] += 1

    def __init__(
        self,
        arm: ArmCounts,
        case: Case,
        metrics: list[tuple[str, Metric]],
        price: Any,
        overridden: set[str],
        order: list[str],
        snapshots: dict[str, Counter],
    ) -> None:
        self.arm = arm
        self.case = case
        self.headers = arm.headers[case.id]
        self.patterns = arm.patterns[case.id]
        self.width = len(order)
        self.price = price
        self.cost = price.cost if price is not None else None  # bound once: called for every sample
        self.add_latency = arm.latencies.append
        self.cells = []
        self.repeats = _Repeats()
        self.passages = _Passages(case.id, snapshots)
        for name, metric in metrics:
            cell = arm.metrics[name].setdefault(case.id, [0, 0, 0])
            # The recorded outcome stands unless a setting it depends on is changed for this report.
            derive = metric.outcome if overridden.intersection(metric.recompute_on) else None
            index = order.index(name)  # where its outcome sits in a pattern
            self.cells.append((cell, metric.higher_is_better, name, derive, metric.outcome, index))
        self.tally = _Tally(self.cells)

    def flush(self, applies: dict[str, dict[str, bool]]) -> None:
        """Add the tallied samples into the header classes, the cells and the patterns, and the
        last passage ids' samples into the case's snapshots."""
        for (header, outcomes), n in self.tally.drain():
            self.headers[header] += n
            self.patterns[_add_outcomes(self.cells, outcomes, n, applies, self.case.id, self.width)] += n
        if self.passages.same:
            self.passages.flush()

    def _hit(
        self, sample: dict[str, Any], recorded: Any, settings: CheckSettings, cell: tuple[Any, ...]
    ) -> Any:
        """The sample's outcome on one cell's metric: as recorded, or derived (changed settings, or
        a run recorded before outcomes were kept)."""
        _, _, name, derive, outcome, _ = cell
        if derive is not None or recorded is None or name not in recorded:
            return (derive or outcome)(sample, self.case, settings)
        return recorded[name]

    def _count_failed(self, error: dict[str, Any]) -> None:
        """A sample that failed (no output): its outcome on every metric it belongs to."""
        arm = self.arm
        # This sample's outcome on every metric (None where it is outside the metric): its pattern.
        pattern: list[int | None] = [None] * self.width
        arm.errors += 1
        arm.error_kinds[error["kind"]] += 1
        self.headers["errors"] += 1
        for cell, higher_is_better, name, *_, index in self.cells:
            if name not in METRICS:
                # A user's check: whether it applies to this case is known once every sample is read.
                pending = arm.pending.setdefault(name, {})
                pending[self.case.id] = pending.get(self.case.id, 0) + 1
                pattern[index] = PENDING
                continue
            cell[1] += 1
            cell[2] += 1
            # Errors never flatter an arm: a miss where higher is better, an event where lower is.
            if not higher_is_better:
                cell[0] += 1
            pattern[index] = 0 if higher_is_better else 1
        self.patterns[tuple(pattern)] += 1

    def count(
        self,
        sample: dict[str, Any],
        fields: tuple[Any, ...],
        settings: CheckSettings,
        applies: dict[str, dict[str, bool]],
    ) -> Any:
        """Count a sample (its FIELDS read already) into its arm and case; its response (what the
        table's simulated flag reads)."""
        _, _, _, _, _, _, header, error, recorded, checks, latency, response, _ = fields
        arm = self.arm
        arm.samples += 1
        if error:
            self._count_failed(error)
        else:
            state = header["header"] if header else "errors"
            failed_checks = (checks or {}).get("user_errors")
            if failed_checks or not self.tally.took(state, recorded):
                self.headers[state] += 1
                hits = tuple(self._hit(sample, recorded, settings, cell) for cell in self.cells)
                self.patterns[_add_outcomes(self.cells, hits, 1, applies, self.case.id, self.width)] += 1
            if failed_checks:
                # A check of yours that failed on this sample: an error of that metric only.
                for cell, _, name, *_ in self.cells:
                    if name in failed_checks:
                        cell[2] += 1
                        arm.check_errors[name] += 1
            if settings.judges:
                self._judge_errors(sample, settings)
            if latency is not None:
                self.add_latency(latency)
        usage = response.get("usage") if response else None
        batched = sample.get("via") == "batch"
        if batched:
            arm.batched += 1
        if usage:
            if (
                "prompt_tokens" in usage
                and "completion_tokens" in usage
                and not batched
                and not usage.get("prompt_tokens_details")
            ):  # the common OpenAI shape, fast
                tokens_in, tokens_out = usage["prompt_tokens"] or 0, usage["completion_tokens"] or 0
                arm.input_tokens += tokens_in
                arm.output_tokens += tokens_out
                if self.cost is None:
                    arm.cost_unknown = True
                else:
                    arm.cost += self.cost(tokens_in, tokens_out)
                return response
            tokens = split_usage(usage)
            arm.input_tokens += tokens.input + tokens.cache_read + tokens.cache_write
            arm.output_tokens += tokens.output
            if self.price is None:
                arm.cost_unknown = True
            else:
                cost = self.price.cost_of(tokens, batched)
                arm.cost += cost
                arm.cache_saved += self.price.without_cache(tokens, batched) - cost
        return response
