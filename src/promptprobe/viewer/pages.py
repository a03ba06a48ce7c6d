"""The viewer's pages, one view object each (served as HTML, and as JSON at the same URL plus
`.json`): the runs, a run (views/overview.py, as `probe report -o report.html` renders it), one
case's outputs, two arms side by side, why, and the incident file and raw bytes to download.

Each builder returns plain data; the templates only lay it out. What a page cannot read (a torn
line, a manifest without its arms) it says in `problems`, beside whatever it could.
"""

import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

from ..counts import ArmCounts, CountsTable
from ..errors import InputError
from ..pack import RawUnreadable, read_raw
from ..views.judged_groups import judged_groups
from ..views.outputs import GROUPS_PER_PAGE, LOG, SAMPLE_ID, Indexed, groups_of, inline_segments, page_of
from ..views.overview import arms_of, compare_arms, headline, run_overview, side_by_side
from ..views.provenance import provenance
from ..views.search import SearchIndex, check_filters, search_view
from ..views.why import explain_scored, phrases, scored_samples
from .runs import RunsDir, manifest_line

GROUPS_PER_SIDE = 10


class NotFound(Exception):
    """No such run, case, arm or sample (the page answers 404 and says which)."""


class Memo:
    """The last few view objects, each kept while the counts it came from stand unchanged."""

    def __init__(self, size: int = 16) -> None:
        self.size = size
        self.items: OrderedDict[Any, Any] = OrderedDict()
        self.lock = threading.Lock()

    def get(self, key: Any, make: Any) -> Any:
        with self.lock:
            if key in self.items:
                self.items.move_to_end(key)
                return self.items[key]
        value = make()
        with self.lock:
            self.items[key] = value
            while len(self.items) > self.size:
                self.items.popitem(last=False)
        return value


MEMO = Memo()


def overview_of(counts: CountsTable) -> dict[str, Any]:
    # Keyed by the table object itself: LiveCounts hands out the same one until the run changes.
    return MEMO.get(("overview", counts.run, id(counts)), lambda: (counts, run_overview(counts)))[1]


_PARTIAL: dict[Path, tuple[CountsTable, dict[str, Any]]] = {}


def _partial_overview(counts: CountsTable) -> dict[str, Any]:
    """The overview of a run counted in part (the last one per run only: it is soon outdated)."""
    known = _PARTIAL.get(counts.run)
    if known is None or known[0] is not counts:
        known = _PARTIAL[counts.run] = (counts, run_overview(counts, verdicts=False))
    return known[1]


def run_line(counts: CountsTable) -> dict[str, Any]:
    """A run's line of the runs page, from its counts (the run page's own numbers)."""
    overview = overview_of(counts)
    report = overview["report"]
    return {
        "id": counts.run.name,
        "probeset": report["probeset"],
        "status": report["status"],
        "samples": report["recorded"],
        "planned": report["planned"],
        "errors": sum(arm["errors"] for arm in report["arms"]),
        "created": str(counts.manifest.get("created") or ""),
        "arms": [{"index": a["index"], "name": a["name"]} for a in overview["arms"]],
        "verdict": headline(overview["verdicts"]),
        "problems": list(report["warnings"]),
    }


RUNS_PAGE_WAIT = 0.5  # seconds the runs page spends counting runs itself; the rest, the background


def runs_page(runs: RunsDir) -> dict[str, Any]:
    # With nothing counting in the background, this page counts every run itself.
    deadline = time.monotonic() + RUNS_PAGE_WAIT if runs.background else float("inf")
    lines = [runs.line(run_id, wait=time.monotonic() < deadline) for run_id in runs.ids()]
    lines.sort(key=lambda line: (line.get("created") or "", line["id"]), reverse=True)
    return {"runs_dir": runs.shown, "runs": lines}


def _counted(runs: RunsDir, run_id: str) -> tuple[Any, CountsTable]:
    path = runs.path_of(run_id)
    if path is None:
        raise NotFound(f"no run {run_id!r} in this runs directory")
    return runs.counts(run_id)


def run_page(runs: RunsDir, run_id: str) -> dict[str, Any]:
    path = runs.path_of(run_id)
    if path is None:
        raise NotFound(f"no run {run_id!r} in this runs directory")
    try:
        _, counts, left = runs.look(run_id)
    except InputError as exc:
        line = manifest_line(path)
        return {"id": run_id, "unreadable": line, "problems": [*line["problems"], str(exc)]}
    if left:
        # A large run not counted yet: what is counted so far, said to be so, and no verdict
        # until every sample is in; the page follows the count as it goes on.
        samples = path / "samples.jsonl"
        size = max(samples.stat().st_size if samples.is_file() else 0, left)
        overview = _partial_overview(counts)
        return {
            **overview,
            "counting": {
                "read_bytes": size - left,
                "of_bytes": size,
                "percent": round(100 * (size - left) / size),
            },
            "problems": list(counts.warnings),
        }
    _PARTIAL.pop(counts.run, None)
    return {**overview_of(counts), "counting": None, "problems": list(counts.warnings)}


def _arm(counts: CountsTable, index: int | None) -> ArmCounts:
    if index is None or not 1 <= index <= len(counts.arms):
        raise NotFound(f"no arm {index} in run {counts.run.name} (it has {len(counts.arms)})")
    return counts.arms[index - 1]


def case_page(runs: RunsDir, run_id: str, case_id: str, arm: int | None, page: int) -> dict[str, Any]:
    """One case: its question, each arm's counts on every metric, and its outputs grouped by
    identical text (one arm's, page by page, or every arm's side by side)."""
    live, counts = _counted(runs, run_id)
    case = counts.cases.get(case_id)
    if case is None:
        raise NotFound(f"no case {case_id!r} in run {run_id}")
    key = ("case", run_id, case_id, arm, page, id(counts))
    return MEMO.get(key, lambda: (counts, _case_view(live, counts, run_id, case, arm, page)))[1]


def _case_view(
    live: Any, counts: CountsTable, run_id: str, case: Any, arm: int | None, page: int
) -> dict[str, Any]:
    case_id = case.id
    arms = arms_of(counts)
    chosen = [_arm(counts, arm)] if arm is not None else counts.arms
    samples = Indexed(live, counts)
    markers = counts.settings.header.markers
    sides = []
    for entry, arm_counts in zip(arms, counts.arms, strict=True):
        if arm_counts not in chosen:
            continue
        groups = samples.groups(arm_counts.prompt, arm_counts.model, case_id)
        per_page = GROUPS_PER_PAGE if arm is not None else GROUPS_PER_SIDE
        outputs = page_of(counts.run, groups, markers, page if arm is not None else 1, per_page)
        judged_groups(counts.run, counts.settings, counts.classification, outputs["groups"])
        metrics = {
            name: {"k": cell[0], "n": cell[1], "errors": cell[2]}
            for name, per_case in arm_counts.metrics.items()
            if (cell := per_case.get(case_id))
        }
        sides.append({"arm": entry, "metrics": metrics, "outputs": outputs})
    names = {a["index"]: a["name"] for a in arms}
    shown = [arm] if arm is not None else list(names)
    return {
        "run": run_id,
        "provenance": provenance(counts, shown, names),
        "case": {
            "case_id": case.id,
            "question": case.question,
            "question_segments": inline_segments(case.question),
            "tags": list(case.tags),
            "expect": case.expect,
        },
        "arms": arms,
        "arm": arm,
        "sides": sides,
        "problems": list(counts.warnings),
    }


def parse_side(text: str | None) -> tuple[str, int] | None:
    """`RUN_ID:N` (the run's N-th arm)."""
    if not text or ":" not in text:
        return None
    run_id, _, number = text.rpartition(":")
    return (run_id, int(number)) if number.isdigit() else None


def compare_page(
    runs: RunsDir, a: str | None, b: str | None, metric: str | None, page: int
) -> dict[str, Any]:
    """Any two arms of one run or two: what can be chosen, and when both are chosen, the
    side-by-side view object (verdicts, then per case both arms' outputs, discordant first)."""
    choices = [
        {"value": f"{line['id']}:{arm['index']}", "label": f"{line['id']} · {arm['name']}"}
        for line in runs_page(runs)["runs"]
        for arm in line.get("arms") or []
    ]
    view: dict[str, Any] = {"choices": choices, "a": a, "b": b, "metric": metric or "header_present"}
    side_a, side_b = parse_side(a), parse_side(b)
    if side_a is None or side_b is None:
        view["comparison"] = None
        return view
    live_a, counts_a = _counted(runs, side_a[0])
    live_b, counts_b = (live_a, counts_a) if side_b[0] == side_a[0] else _counted(runs, side_b[0])
    arm_a, arm_b = _arm(counts_a, side_a[1]), _arm(counts_b, side_b[1])
    for counts in (counts_a, counts_b):
        # Ordered by a metric it does not have, every case would read as a tie: say so instead.
        if view["metric"] not in counts.metrics:
            known = ", ".join(counts.metrics)
            raise NotFound(f"no metric {view['metric']!r} in run {Path(counts.run).name} (known: {known})")
    # The verdicts (with their sample-size hints, a short simulation) once per pair of tables;
    # each page of cases then only reads outputs.
    summary = MEMO.get(
        ("verdicts", a, b, id(counts_a), id(counts_b)),
        lambda: (counts_a, counts_b, compare_arms(counts_a, arm_a, counts_b, arm_b, hints=True)),
    )[2]
    # A page polled while nothing changed is not read again (the key holds the tables' identity).
    view["comparison"] = MEMO.get(
        ("compare", a, b, view["metric"], page, id(counts_a), id(counts_b)),
        lambda: (counts_a, counts_b, side_by_side(
            counts_a, arm_a, Indexed(live_a, counts_a), counts_b, arm_b, Indexed(live_b, counts_b),
            view["metric"], page, groups_per_side=GROUPS_PER_SIDE, summary=summary,
        )),
    )[2]  # fmt: skip
    view["provenance"] = [
        provenance(counts, [number], {number: side["name"]})
        for counts, number, side in (
            (counts_a, side_a[1], view["comparison"]["a"]),
            (counts_b, side_b[1], view["comparison"]["b"]),
        )
    ]
    view["problems"] = list(counts_a.warnings) + (list(counts_b.warnings) if counts_b is not counts_a else [])
    return view


def why_page(
    runs: RunsDir, run_id: str, arm: int | None, metric: str | None, phrase: str | None, page: int
) -> dict[str, Any]:
    """The phrases an arm's failing outputs share, and those outputs grouped (only those that
    contain `phrase`, when one is chosen)."""
    _, counts = _counted(runs, run_id)
    arms = arms_of(counts)
    index = arm or 1
    chosen = _arm(counts, index)
    metric = metric or "header_present"
    if metric not in counts.metrics:
        raise NotFound(f"no metric {metric!r} in run {run_id} (known: {', '.join(counts.metrics)})")

    def build() -> tuple[Any, dict[str, Any], list[dict[str, Any]], dict[str, str]]:
        scored = list(scored_samples(counts, chosen, metric))
        why = explain_scored(scored, metric, arms[index - 1]["name"])
        failing = [sample for sample, good, _ in scored if not good]
        return counts, why, groups_of(failing), {}

    _, why, groups, _ = MEMO.get(("why", run_id, index, metric, id(counts)), build)
    wanted = (phrase or "").strip()

    def contains(group: dict[str, Any]) -> bool:  # the phrase as why cuts it (folded words)
        return group["text"] is not None and wanted in phrases(group["text"])

    keep = contains if wanted else None
    return {
        "run": run_id,
        "provenance": provenance(counts, [index], {index: arms[index - 1]["name"]}),
        "arms": arms,
        "arm": index,
        "metric": metric,
        "metrics": list(counts.metrics),
        "why": why,
        "phrase": phrase or None,
        "failing_outputs": page_of(counts.run, groups, counts.settings.header.markers, page, keep=keep),
        "problems": list(counts.warnings),
    }


MAX_INDEXED = 4  # runs whose search index is kept at once
# Samples a search page indexes itself before it answers (waiting for the background's chunk
# first): a 100,000-sample run's whole index is built in about a second (benchmarks/viewer.py);
# a larger run answers from what is indexed and says so. The background indexes as many at a time.
PAGE_INDEX_SAMPLES = 200_000
INDEX_CHUNK = 20_000
_INDEXES: OrderedDict[Path, SearchIndex] = OrderedDict()
_INDEXES_LOCK = threading.Lock()


def _index_of(counts: CountsTable, limit: int | None, wait: bool = True) -> tuple[SearchIndex, int]:
    """The run's search index, brought up to the counts by at most `limit` more samples (built on
    first use; `wait=False`: none while the background is at it), and the bytes of
    samples.jsonl it has still to read."""
    with _INDEXES_LOCK:
        index = _INDEXES.get(counts.run)
        if index is None:
            index = _keep(SearchIndex(counts.run))
        _INDEXES.move_to_end(counts.run)
    return index, index.update(counts, limit, wait)


def _keep(index: SearchIndex) -> SearchIndex:
    """Keep a run's index (in place of any before it), dropping the least recently used beyond
    MAX_INDEXED (the caller holds _INDEXES_LOCK)."""
    before = _INDEXES.pop(index.run, None)
    if before is not None:
        before.detached = True
    _INDEXES[index.run] = index
    while len(_INDEXES) > MAX_INDEXED:
        _INDEXES.popitem(last=False)[1].detached = True
    return index


def search_follower(runs: RunsDir, run_id: str, path: Path) -> SearchIndex | None:
    """For one of the newest runs, a search index that its counting feeds (each record parsed once,
    so its first search only reads the outputs): kept as the run's index."""
    if run_id not in runs.ids()[:MAX_INDEXED]:
        return None
    with _INDEXES_LOCK:
        return _keep(SearchIndex(path))


def index_newest(runs: RunsDir) -> None:
    """Index the newest runs for search (the background's, after counting them), so that a
    search finds every output without waiting for them to be read."""
    for run_id in runs.ids()[:MAX_INDEXED]:
        if run_id not in runs.summaries:
            continue  # not counted yet
        try:
            _, counts = runs.counts(run_id)
            while _index_of(counts, INDEX_CHUNK)[1]:
                pass
        except (InputError, OSError):
            continue  # a run that cannot be counted says why on its own page and line


def search_page(runs: RunsDir, run_id: str, params: dict[str, str | None], page: int) -> dict[str, Any]:
    """A run's samples that match a text search and filters, grouped by identical output."""
    _, counts = _counted(runs, run_id)
    try:
        filters = check_filters(counts, params, len(counts.arms))
    except ValueError as exc:
        raise InputError(str(exc)) from None
    arms = arms_of(counts)
    index, left = _index_of(counts, PAGE_INDEX_SAMPLES)
    view = search_view(index, arms, filters, page)
    size = index.offset + left
    # Not all read yet: the results are of what is, said to be so; the page follows the index.
    view["indexing"] = (
        {"read_bytes": index.offset, "of_bytes": size, "percent": 100 * index.offset // size}
        if left
        else None
    )
    view["live"] = bool(left) or counts.state == "running"
    names = {a["index"]: a["name"] for a in arms}
    view["provenance"] = provenance(counts, [filters["arm"]] if filters["arm"] else list(names), names)
    return view


def incident(runs: RunsDir, run_id: str, case_id: str, fmt: str) -> str:
    """`probe export RUN --case ID` (markdown or JSON): the incident attachment of one case."""
    from ..redaction import SCRUBBER
    from ..views.incident import export

    path = runs.path_of(run_id)
    if path is None:
        raise NotFound(f"no run {run_id!r} in this runs directory")
    try:
        # The runs directory as given, as `probe export RUN` from here would name it (the JSON says
        # the run's path): not the resolved absolute path of this machine's folders.
        text = export(runs.root / path.name, case=case_id, fmt=fmt)
    except InputError as exc:
        raise NotFound(str(exc)) from None
    return SCRUBBER.text(text)  # as `probe export -o FILE` writes it


def raw_bytes(
    runs: RunsDir, run_id: str, sample_id: str, arm: int | None, case_id: str | None
) -> tuple[bytes, dict]:
    """The exact bytes of one sample's output, and its record's raw entry (path, sha256, bytes)."""
    from ..jsonio import iter_jsonl

    if not SAMPLE_ID.fullmatch(sample_id):
        raise NotFound(f"no sample {sample_id!r}")
    live, counts = _counted(runs, run_id)
    if arm is not None and case_id is not None:
        records = Indexed(live, counts).records(_arm(counts, arm).prompt, _arm(counts, arm).model, case_id)
    else:
        records = iter_jsonl(counts.run / "samples.jsonl", lambda message: None)
    for record in records:
        if record.get("sample_id") == sample_id and record.get("raw"):
            try:
                return read_raw(Path(counts.run), record), record["raw"]
            except RawUnreadable as exc:
                LOG.warning("refused: %s", exc)  # one line: what was asked, and why it is not served
                raise NotFound(f"sample {sample_id}: its output cannot be served as recorded") from None
    raise NotFound(f"no output of sample {sample_id!r} in run {run_id}")
