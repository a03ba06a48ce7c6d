"""One row per sample, for the tools data people already use (pandas, DuckDB, Datasette,
a spreadsheet): `probe export RUN --format jsonl|csv|table`.

Each row says which arm (prompt name, model name and spec, where its calls went and what set
that, as the manifest recorded it), which question (case id, question, tags, repeat), what came
back (the output decoded as UTF-8, undecodable bytes as U+FFFD, beside the sha256 of the exact
bytes; the header class; the error's kind and message) and the outcome of every metric: 1 or 0,
empty where the metric does not apply to the case, and for a failed sample the metric's
unfavourable outcome (as every report counts it), so that a column's mean is the rate the
report shows. The columns are the same for every run (docs/json.md lists them): run id, prompt
sha256 and start time included, and every built-in metric (empty where the run lacks it); the
run's own [[check]]s follow, one column each.

Rows are streamed in the order the samples were recorded: memory does not grow with the run.
In CSV (RFC 4180: rows end in CRLF), every text cell is quoted and one that a spreadsheet would
run as a formula (starting with `=`, `+`, `-`, `@`, a tab or a carriage return) gets a leading
`'`, as OWASP recommends against CSV injection; the JSON lines keep every value as it is.
"""

import csv
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .. import endpoints
from ..checks import METRICS, metrics_for
from ..counts import build_counts, classifications, merged_samples, settings_of
from ..engine.cost import usage_tokens
from ..engine.store import load_manifest
from ..errors import InputError
from ..jsonio import dumps_line, warn
from ..pack import RawReader
from ..probeset import parse_probeset
from .outcomes import outcome
from .show import HEADER_CLASSES, Damage
from .tables import table

FIXED = [
    "run_id",
    "sample_id",
    "arm",
    "prompt",
    "prompt_sha256",
    "model",
    "model_spec",
    "endpoint",
    "endpoint_from",
    "case_id",
    "question",
    "tags",
    "repeat",
    "started_at",
    "header",
    "output",
    "raw_sha256",
    "error_kind",
    "error",
    "latency_ms",
    "input_tokens",
    "output_tokens",
]
# Every built-in metric has its column in every export (empty where the run lacks it): the columns
# are the same whatever the run, and the run's own [[check]]s follow, one column each, by name.
METRIC_COLUMNS = list(METRICS)
COLUMNS = FIXED + METRIC_COLUMNS
# Left out of the terminal table: long text, and what the other columns already say.
NOT_IN_TABLE = {
    "run_id",
    "prompt_sha256",
    "started_at",
    "arm",
    "model_spec",
    "endpoint",
    "endpoint_from",
    "question",
    "tags",
    "output",
    "raw_sha256",
    "error",
    "input_tokens",
    "output_tokens",
}
# OWASP, CSV injection: a cell starting with one of these is a formula to a spreadsheet.
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
TAG_SEPARATOR = "; "


def neutralise(value: Any) -> Any:
    """A CSV cell a spreadsheet will not run: text starting like a formula gets a leading `'`."""
    if isinstance(value, str) and value.startswith(FORMULA_START):
        return "'" + value
    return value


class SampleRows:
    """The columns of a run's export and its rows, read in one streaming pass."""

    def __init__(
        self,
        run_dir: Path,
        sample: str | None = None,
        case: str | None = None,
        header: str | None = None,
        arm: str | None = None,
    ) -> None:
        manifest = self.manifest = load_manifest(run_dir)
        probeset = parse_probeset(
            manifest["probeset"]["source"].encode("utf-8"), Path(manifest["probeset"]["path"])
        )
        self.reader = RawReader(run_dir)
        self.run_dir = run_dir
        self.cases = {c.id: c for c in probeset.cases}
        if header is not None and header not in HEADER_CLASSES:
            raise InputError(f"--header must be one of {', '.join(HEADER_CLASSES)}, got {header!r}")
        if case is not None and case not in self.cases:
            raise InputError(f"{run_dir}: no case {case!r} in this run")
        self.sample, self.case, self.header = sample, case, header
        numbers = classifications(run_dir)
        self.number = numbers[-1] if numbers else None
        self.settings = settings_of(run_dir, manifest, self.number)
        self.metrics = metrics_for(self.settings)
        self.user_checks = [name for name in self.metrics if name not in METRICS]
        self.columns = COLUMNS + self.user_checks
        self.run_id = run_dir.name
        self.prompt_sha256 = {p["name"]: p.get("sha256") for p in manifest.get("prompts") or []}
        self.arms = {(a["prompt"], a["model"]): a.get("arm") for a in manifest["arms"]}
        self.specs = {m.get("name") or m["spec"]: m["spec"] for m in manifest.get("models", [])}
        self.went = endpoints.of_run(manifest)  # by spec: where each model's calls went, as recorded
        # Where a user's check applies is told by its outputs (the counts' rule for failed samples).
        counts = build_counts(run_dir) if self.settings.user or arm is not None else None
        self.check_applies = counts.check_applies if counts is not None and self.settings.user else {}
        self.arm = None
        if counts is not None and arm is not None:
            from .incident import chosen_arm

            picked = counts.arms[(chosen_arm(run_dir, counts, arm) or 1) - 1]
            self.arm = (picked.prompt, picked.model)

    def _wanted(self, record: dict[str, Any]) -> bool:
        if self.sample and record["sample_id"] != self.sample:
            return False
        if self.case and record["case_id"] != self.case:
            return False
        if self.arm is not None and (record["prompt"], record["model"]) != self.arm:
            return False
        state = "error" if record.get("error") else (record.get("header") or {}).get("header")
        return not self.header or state == self.header

    def _output(self, record: dict[str, Any]) -> tuple[str | None, str | None]:
        raw = record.get("raw")
        if not raw:
            return None, None
        data = self.reader.read(record)  # RawUnreadable: one sentence naming the sample
        return data.decode("utf-8", "replace"), raw.get("sha256")

    def __iter__(self) -> Iterator[dict[str, Any]]:
        found = False
        damage = Damage(self.run_dir, self.manifest)
        # Warned on stderr as every reader does: stdout holds only the rows.
        for record in merged_samples(self.run_dir, self.number, warn):
            if not self._wanted(record) or not damage.fine(record):
                continue
            found = True
            yield self.row(record)
        if self.sample and not found and not self.header:
            raise InputError(f"{self.run_dir}: no sample {self.sample!r} in this run")

    def row(self, record: dict[str, Any]) -> dict[str, Any]:
        case = self.cases.get(record["case_id"])
        error = record.get("error")
        usage = (record.get("response") or {}).get("usage") or {}
        tokens_in, tokens_out = usage_tokens(usage) if usage else (None, None)
        spec = self.specs.get(record["model"], record["model"])
        went = self.went.get(spec)
        output, sha256 = self._output(record)
        row: dict[str, Any] = {
            "run_id": self.run_id,
            "sample_id": record["sample_id"],
            "arm": self.arms.get((record["prompt"], record["model"])),
            "prompt": record["prompt"],
            "prompt_sha256": self.prompt_sha256.get(record["prompt"]),
            "model": record["model"],
            "model_spec": spec,
            "endpoint": went.url if went else None,
            "endpoint_from": went.source if went else None,
            "case_id": record["case_id"],
            "question": case.question if case else None,
            "tags": list(case.tags) if case else [],
            "repeat": record["repeat"],
            "started_at": record.get("started_at"),
            "header": (record.get("header") or {}).get("header") if not error else "error",
            "output": output,
            "raw_sha256": sha256,
            "error_kind": error["kind"] if error else None,
            "error": error.get("message") if error else None,
            "latency_ms": record.get("latency_ms"),
            "input_tokens": tokens_in,
            "output_tokens": tokens_out,
        }
        for name in METRIC_COLUMNS:
            metric = self.metrics.get(name)
            row[name] = None if metric is None else self._outcome(name, record, case)
        for name in self.user_checks:
            row[name] = self._outcome(name, record, case)
        return row


    def _outcome(self, name: str, record: dict[str, Any], case: Any) -> int | None:
        return outcome(name, self.metrics[name], record, case, self.settings, self.check_applies)


class _CsvLines:
    """One CSV line at a time (RFC 4180: CRLF between rows), every text cell quoted, as OWASP
    recommends beside the leading `'`; a CR or LF inside an output stays inside its cell."""

    def __init__(self, quoting: int = csv.QUOTE_NONNUMERIC) -> None:
        self.buffer = io.StringIO()
        self.writer = csv.writer(self.buffer, lineterminator="\r\n", quoting=quoting)

    def __call__(self, values: list[Any]) -> str:
        self.buffer.seek(0)
        self.buffer.truncate()
        self.writer.writerow(values)
        return self.buffer.getvalue()


def csv_cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, list):
        value = TAG_SEPARATOR.join(value)
    return neutralise(value)


def iter_rows(
    run_dir: Path,
    fmt: str,
    sample: str | None = None,
    case: str | None = None,
    header: str | None = None,
    arm: str | None = None,
) -> Iterator[str]:
    """The export as pieces of text, one row at a time (`jsonl`, `csv`), or the terminal table
    (`table`: the short columns). Nothing is yielded before the first row is found, so a
    selection that matches nothing fails before anything is written."""
    rows = SampleRows(run_dir, sample, case, header, arm)
    if fmt == "table":
        shown = [c for c in rows.columns if c not in NOT_IN_TABLE]
        body = [["-" if row[c] is None else row[c] for c in shown] for row in rows]
        yield table(body, shown, "table") + "\n"
        return
    line = _CsvLines()
    head = _CsvLines(csv.QUOTE_MINIMAL)(rows.columns) if fmt == "csv" else ""  # names: nothing to quote
    for row in rows:
        if fmt == "jsonl":
            yield dumps_line(row).decode("utf-8")
        else:
            yield head + line([csv_cell(row[c]) for c in rows.columns])
            head = ""
    if head:
        yield head  # no sample matched: the columns alone
