"""Search and filters over a run's samples (the viewer's search page): text over the questions and
the outputs (and a failed sample's error), failing only (on one metric, or on any), header class,
tag, metric and arm; the matching samples grouped by identical output per (case, arm), with counts.

A run is indexed once, then only what is appended: per sample a few small numbers (arm, case,
header class, which metrics apply and which it fails) and which distinct output it returned; each
distinct output (by sha256) is read once, through the run's raw reader, and kept case-folded.
A search then scans the distinct outputs for the words and the samples for the filters.
"""

import gc
import os
import threading
from array import array
from collections.abc import Iterable
from operator import itemgetter
from pathlib import Path
from typing import Any

import numpy as np

from ..counts import CountsTable, merged_samples
from ..jsonio import loads
from ..pack import read_many
from ..paths import open_in_run, open_run_file
from .outcomes import failed, outcome
from .outputs import LOG, SAMPLE_IDS_PER_GROUP, inline_segments, read_bytes, with_text
from .show import HEADER_CLASSES

RESULTS_PER_PAGE = 20
STATES = {state: at for at, state in enumerate(HEADER_CLASSES)}


def fold(text: str) -> str:
    """Text as a search compares it: case-folded."""
    return text.casefold()


class DistinctOutputs:
    """Each distinct output (or error) of a run, case-folded for search, and where to re-read the
    record it was first seen in."""

    def __init__(self, run: Path) -> None:
        self.run = run
        self.texts: list[str] = []  # each distinct output (or error), case-folded
        self.unread: list[tuple[int, dict[str, Any]]] = []  # outputs of packs still to read: (text, raw)
        # Where the record each distinct output was first seen in lies in samples.jsonl (start,
        # length; -1: kept whole in `kept`, a reclassified run's): a result re-reads it to show it.
        self.first_start = array("q")
        self.first_length = array("I")
        self.kept: dict[int, dict[str, Any]] = {}
        self.known: dict[tuple[str, ...], int] = {}

    def add(self, record: dict[str, Any], line: tuple[int, int] | None) -> int:
        """The number of the record's distinct output (or error), added when new."""
        error = record.get("error")
        header = record.get("header") or {}
        if error:
            key: tuple[str, ...] = ("error", str(error.get("kind")), str(error.get("message")))
        else:
            key = ("output", str((record.get("raw") or {}).get("sha256")), str(header.get("header")))
        found = self.known.get(key)
        if found is not None:
            return found
        at = self.known[key] = len(self.texts)
        raw = record.get("raw")
        if error:
            self.texts.append(fold(f"{error.get('kind')}: {error.get('message')}"))
        elif isinstance(raw, dict) and "pack" in raw:
            self.texts.append("")  # read with the others of this update, in one pass over the packs
            self.unread.append((at, raw))
        else:  # a run written before packs: one file per output
            data = read_bytes(self.run, record)
            self.texts.append(fold(data.decode("utf-8", "replace")) if data is not None else "")
        if line is not None:
            self.first_start.append(line[0])
            self.first_length.append(line[1])
        else:
            self.first_start.append(-1)
            self.first_length.append(0)
            self.kept[at] = record
        return at

    def read_unread(self) -> None:
        """The outputs this update found, read from the packs in large blocks, decoded once each;
        not checked against their sha256 (`probe verify` is for that; a page that shows one does)."""
        unread, self.unread = self.unread, []
        found = read_many(self.run, [raw for _, raw in unread])
        texts = self.texts
        for (at, raw), data in zip(unread, found, strict=True):
            if data is None:
                LOG.warning(
                    "%s: the output at %s offset %s cannot be read for search",
                    self.run,
                    raw.get("pack"),
                    raw.get("offset"),
                )
            else:
                texts[at] = data.decode("utf-8", "replace").casefold()  # fold(), inline: once per output

    def first(self, output: int) -> dict[str, Any]:
        """The record a distinct output was first seen in (re-read at its place in samples.jsonl)."""
        start = self.first_start[output]
        if start < 0:
            return self.kept[output]
        fd = open_in_run(self.run, "samples.jsonl")
        try:
            return loads(os.pread(fd, self.first_length[output], start))
        finally:
            os.close(fd)


class SampleColumns:
    """Per sample of a run, the few numbers the filters need: arm, case, header class, which
    distinct output, which metrics apply and which it fails (worked out once per case and set of
    recorded outcomes)."""

    def __init__(self, counts: CountsTable) -> None:
        self.counts = counts  # the table whose settings decide the outcomes (the newest given)
        self.metric_names = list(counts.metrics)
        self.case_ids = counts.case_order
        self.case_index = {c: i for i, c in enumerate(self.case_ids)}
        self.arm_index = {(a.prompt, a.model): i for i, a in enumerate(counts.arms)}
        self.sample_ids: list[str] = []
        self.arm = array("h")
        self.case = array("i")
        self.state = array("b")
        self.output = array("i")  # index into the distinct outputs
        self.fails: list[int] = []  # bit i: fails metric i
        self.applies: list[int] = []  # bit i: metric i applies
        self.applicable = self._applicable(counts)
        # A sample whose outcomes were recorded with it (every metric that applies) has the bits
        # of any other sample of its case with the same recorded outcomes: worked out once.
        self.memo: dict[tuple[Any, ...], tuple[int, int]] = {}

    def _applicable(self, counts: CountsTable) -> dict[str, Any]:
        """Per case: the metrics that apply (bit, name, metric), and a getter of their recorded
        outcomes as one value (KeyError: one is not recorded). Which apply depends on the case only."""
        applicable = {}
        for case_id, case in counts.cases.items():
            metrics = [
                (1 << bit, name, counts.metrics[name])
                for bit, name in enumerate(self.metric_names)
                if counts.metrics[name].applies(case, counts.settings)
            ]
            names = [name for _, name, _ in metrics]
            applicable[case_id] = (metrics, itemgetter(*names) if names else (lambda recorded: ()))
        return applicable

    def add(self, record: dict[str, Any], outputs: DistinctOutputs, line: tuple[int, int] | None) -> None:
        """One record's numbers (of no arm or case of the run: left out)."""
        arm = self.arm_index.get((record.get("prompt"), record.get("model")))
        case_id = record.get("case_id")
        case_at = self.case_index.get(case_id)
        if arm is None or case_at is None or "sample_id" not in record:
            return
        error = record.get("error")
        metrics, recorded_of = self.applicable[case_id]
        try:
            key: Any = (case_id, not error, recorded_of(record.get("outcomes")))
            bits = self.memo.get(key)
        except (KeyError, TypeError):  # not every outcome recorded (or not as a value): work out
            key = bits = None
        if bits is None:
            bits = self._bits(record, metrics)
            if key is not None:
                self.memo[key] = bits
        state = "error" if error else (record.get("header") or {}).get("header")
        self.sample_ids.append(record["sample_id"])
        self.arm.append(arm)
        self.case.append(case_at)
        self.state.append(STATES.get(state, -1))
        self.output.append(outputs.add(record, line))
        self.fails.append(bits[0])
        self.applies.append(bits[1])

    def _bits(self, record: dict[str, Any], metrics: list[tuple[int, str, Any]]) -> tuple[int, int]:
        """(which metrics the sample fails, which apply to it), one bit a metric."""
        counts = self.counts
        case = counts.cases[record["case_id"]]
        fails = applies = 0
        for bit, name, metric in metrics:
            value = outcome(name, metric, record, case, counts.settings, counts.check_applies)
            if value is not None:
                applies |= bit
                if failed(metric, value):
                    fails |= bit
        return fails, applies


class SearchIndex:
    """The samples of one run, as the filters and the text search need them (`columns`, and the
    distinct `outputs`): read by `update`, or given record by record by the run's counting pass
    (`take`, as its follower)."""

    def __init__(self, run: Path) -> None:
        self.run = Path(run)
        self.lock = threading.RLock()
        self.counts: CountsTable | None = None
        self.offset = 0
        self.detached = False  # no longer kept by the viewer: what the counting gives is dropped

    def _start(self, counts: CountsTable) -> None:
        self.counts = counts
        self.columns = SampleColumns(counts)
        self.outputs = DistinctOutputs(self.run)
        self.line: tuple[int, int] | None = None  # the line of the record being indexed
        self.offset = 0
        self.classification = counts.classification
        self.built: tuple[int, int] | None = None  # a reclassified run: (classification, size) indexed

    def restart(self, counts: CountsTable) -> None:
        """The run's counting starts over (from its first line): so does the index."""
        with self.lock:
            self._start(counts)

    def take(self, record: dict[str, Any], start: int, length: int) -> None:
        """A record the run's counting has just parsed, its line at `start`: indexed when it is the
        next line (not one `update` has read already; a reclassified run's index reads itself)."""
        if self.detached:
            return
        with self.lock:
            if self.counts is None or self.classification is not None or start != self.offset:
                return
            self.offset = start + length
            self.line = (start, length)
            self.columns.add(record, self.outputs, self.line)

    def update(self, counts: CountsTable, limit: int | None = None, wait: bool = True) -> int:
        """Index what was appended since the last update, at most `limit` samples of it this time
        (from the start when the run's counts were started over: a reclassification, a file
        replaced or cut back); the bytes of samples.jsonl still to index (0: all of it).
        `wait=False`: while another thread is indexing, nothing more, at once."""
        path = self.run / "samples.jsonl"
        if not self.lock.acquire(blocking=wait):
            return max(0, (path.stat().st_size if path.is_file() else 0) - self.offset)
        collecting = gc.isenabled()
        # The records read are dropped at once and hold no cycles: collecting while 100,000 of
        # them go by costs a third of the time (the same pause as providers' imports).
        gc.disable()
        try:
            size = path.stat().st_size if path.is_file() else 0
            if self.counts is None:
                self._start(counts)
            if counts.classification is not None:
                # A reclassified run is read whole (its overlay follows samples.jsonl line by
                # line), and again only when the file has changed.
                if self.built != (counts.classification, size):
                    self._start(counts)
                    self.line = None  # merged records: no line of their own to re-read
                    self._feed(merged_samples(self.run, counts.classification, lambda message: None))
                    self.outputs.read_unread()
                    self.built = (counts.classification, size)
                self.counts = self.columns.counts = counts
                return 0
            started_over = counts.case_order != self.columns.case_ids or size < self.offset
            if self.classification is not None or started_over:
                self._start(counts)
            self.counts = self.columns.counts = counts
            if size > self.offset:
                with open_run_file(self.run, "samples.jsonl") as handle:
                    handle.seek(self.offset)
                    self._feed(self._lines(handle, limit))
            self.outputs.read_unread()  # what this update read, and what the counting gave since the last
            return max(0, size - self.offset)
        finally:
            if collecting:
                gc.enable()
            self.lock.release()

    def _lines(self, handle: Any, limit: int | None) -> Iterable[dict[str, Any]]:
        given = 0
        for line in handle:
            if not line.endswith(b"\n") or (limit is not None and given >= limit):
                break  # still being written, or enough for this time: for the next update
            start = self.offset
            self.offset += len(line)
            if line.strip():
                try:
                    record = loads(line)
                except ValueError:
                    continue  # the counts say which line is damaged; a search skips it
                given += 1
                self.line = (start, len(line))
                yield record

    def _feed(self, records: Iterable[dict[str, Any]]) -> None:
        for record in records:
            self.columns.add(record, self.outputs, self.line)

    @property
    def texts(self) -> list[str]:
        return self.outputs.texts

    def first(self, output: int) -> dict[str, Any]:
        return self.outputs.first(output)


def _case_text(index: SearchIndex, at: int) -> str:
    case_id = index.columns.case_ids[at]
    return fold(case_id + "\n" + index.counts.cases[case_id].question)


def _column(values: array) -> np.ndarray:
    """A copy of one of the index's columns (a view would stop the array from growing)."""
    return np.frombuffer(values, dtype=np.dtype(values.typecode)).copy()


def _flags(values: list[int], bit: int) -> np.ndarray:
    """Per sample: whether its bits have `bit` (any bit when 0)."""
    if bit:
        return np.fromiter((value & bit != 0 for value in values), dtype=bool, count=len(values))
    return np.fromiter((value != 0 for value in values), dtype=bool, count=len(values))


def matching(index: SearchIndex, filters: dict[str, Any]) -> np.ndarray:
    """The positions of the samples that pass every filter, in recorded order (the caller
    holds the lock); the filters are applied to whole columns at once."""
    words = fold(filters.get("q") or "").strip()
    cases = np.ones(len(index.columns.case_ids), dtype=bool)
    if filters.get("tag"):
        tag = filters["tag"]
        cases[:] = [tag in index.counts.cases[case_id].tags for case_id in index.columns.case_ids]
    case = _column(index.columns.case)
    keep = cases[case]
    if filters.get("arm") is not None:
        keep &= _column(index.columns.arm) == filters["arm"] - 1
    if filters.get("header"):
        keep &= _column(index.columns.state) == HEADER_CLASSES.index(filters["header"])
    bit = (1 << index.columns.metric_names.index(filters["metric"])) if filters.get("metric") else 0
    if bit:
        keep &= _flags(index.columns.applies, bit)
    if filters.get("failing"):
        keep &= _flags(index.columns.fails, bit)
    if words:
        questions = np.array(
            [bool(cases[i]) and words in _case_text(index, i) for i in range(len(index.columns.case_ids))],
            dtype=bool,
        )
        texts = np.fromiter((words in text for text in index.texts), dtype=bool, count=len(index.texts))
        keep &= texts[_column(index.columns.output)] | questions[case]
    return np.flatnonzero(keep)


def _dims(index: SearchIndex) -> tuple[int, int, int]:
    return max(1, len(index.columns.case_ids)), max(1, len(index.columns.arm_index)), max(1, len(index.texts))


def _group_keys(index: SearchIndex, positions: np.ndarray) -> np.ndarray:
    """Each matching sample's (case, arm, identical output) as one number, ordered as the tuple."""
    found = index.columns
    columns = tuple(_column(values)[positions] for values in (found.case, found.arm, found.output))
    return np.ravel_multi_index(columns, _dims(index))


def grouped(index: SearchIndex, positions: np.ndarray) -> list[tuple[tuple[int, int, int], int]]:
    """The matching samples counted by (case, arm, identical output), in probe-set order, then
    arm, then most frequent first (then in the order first matched)."""
    found, first, counted = np.unique(_group_keys(index, positions), return_index=True, return_counts=True)
    case, arm, output = np.unravel_index(found, _dims(index))
    order = np.lexsort((first, -counted, arm, case))  # the last key sorts first
    return [
        ((c, a, o), n)
        for c, a, o, n in zip(
            *(column[order].tolist() for column in (case, arm, output, counted)), strict=True
        )
    ]


def _sample_ids(
    index: SearchIndex, positions: np.ndarray, keys: set[tuple[int, int, int]]
) -> dict[Any, list[str]]:
    """The first sample ids of each of the groups shown (the others are only counted)."""
    found: dict[tuple[int, int, int], list[str]] = {key: [] for key in keys}
    if not keys:
        return found
    wanted = np.ravel_multi_index(tuple(np.array(column) for column in zip(*keys, strict=True)), _dims(index))
    for i in positions[np.isin(_group_keys(index, positions), wanted)].tolist():
        ids = found[(index.columns.case[i], index.columns.arm[i], index.columns.output[i])]
        if len(ids) < SAMPLE_IDS_PER_GROUP:
            ids.append(index.columns.sample_ids[i])
    return found


def _shown(
    index: SearchIndex,
    key: tuple[int, int, int],
    count: int,
    sample_ids: list[str],
    arms: list[dict[str, Any]],
    markers: Iterable[str],
) -> dict[str, Any]:
    """One result group as a page shows it: its case, arm, count and output (read and made visible)."""
    case_at, arm_at, output = key
    first = index.first(output)
    error = first.get("error")
    header = first.get("header") or {}
    raw = first.get("raw") or {}
    case_id = index.columns.case_ids[case_at]
    shaped = {
        "count": count,
        "header": "error" if error else header.get("header", "?"),
        "where": None if error else header.get("where"),
        "line": None if error else header.get("line"),
        "sha256": None if error else raw.get("sha256"),
        "bytes": None if error else raw.get("bytes"),
        "error": f"{error.get('kind')}: {error.get('message')}" if error else None,
        "sample_ids": sample_ids,
        "_raw": None if error else {"sample_id": first["sample_id"], "raw": first.get("raw")},
    }
    question = index.counts.cases[case_id].question
    return {
        "case_id": case_id,
        "question": question,
        "question_segments": inline_segments(question),
        "arm": arms[arm_at],
        "group": with_text(index.run, shaped, markers),
    }


def search_view(
    index: SearchIndex, arms: list[dict[str, Any]], filters: dict[str, Any], page: int = 1
) -> dict[str, Any]:
    """The search page's view object: the filters, what they can be, and one page of results."""
    with index.lock:  # one state of the index for the whole page
        counts = index.counts
        positions = matching(index, filters)
        groups = grouped(index, positions)
        pages = max(1, -(-len(groups) // RESULTS_PER_PAGE))
        page = min(max(1, page), pages)
        markers = counts.settings.header.markers
        shown = groups[(page - 1) * RESULTS_PER_PAGE : page * RESULTS_PER_PAGE]
        ids = _sample_ids(index, positions, {key for key, _ in shown})
        results = [_shown(index, key, count, ids[key], arms, markers) for key, count in shown]
    return {
        "run": Path(counts.run).name,
        "arms": arms,
        "filters": filters,
        "choices": {
            "headers": list(HEADER_CLASSES),
            "tags": sorted({tag for case in counts.probeset.cases for tag in case.tags}),
            "metrics": index.columns.metric_names,
        },
        "indexed": {"samples": len(index.columns.sample_ids), "distinct_outputs": len(index.texts)},
        "matched": {"samples": int(len(positions)), "groups": len(groups)},
        "page": page,
        "pages": pages,
        "results": results,
        "problems": list(counts.warnings),
    }


def check_filters(counts: CountsTable, raw: dict[str, str | None], arms: int) -> dict[str, Any]:
    """The filters of a search from a query string, checked (ValueError names the bad one)."""
    filters: dict[str, Any] = {
        "q": (raw.get("q") or "").strip() or None,
        "failing": raw.get("failing") in ("1", "true", "on", "yes"),
        "header": raw.get("header") or None,
        "tag": raw.get("tag") or None,
        "metric": raw.get("metric") or None,
        "arm": None,
    }
    if filters["header"] is not None and filters["header"] not in HEADER_CLASSES:
        raise ValueError(f"header must be one of {', '.join(HEADER_CLASSES)}, got {filters['header']!r}")
    if filters["metric"] is not None and filters["metric"] not in counts.metrics:
        raise ValueError(f"no metric {filters['metric']!r} in this run (known: {', '.join(counts.metrics)})")
    if raw.get("arm"):
        if not str(raw["arm"]).isdigit() or not 1 <= int(raw["arm"]) <= arms:
            raise ValueError(f"arm must be a number from 1 to {arms}, got {raw['arm']!r}")
        filters["arm"] = int(raw["arm"])
    return filters
