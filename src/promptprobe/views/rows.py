"""One row per sample, for the tools data people already use (pandas, DuckDB, Datasette):
`probe export RUN --format jsonl|csv|table`.

Each row: sample, arm, prompt, model, case, repeat, header, error kind, latency, input and
output tokens, and one column per metric with its outcome: 1 or 0, empty where the metric does
not apply to the case, and for a failed sample the metric's unfavourable outcome (as every
report counts it), so that a column's mean is the rate the report shows.
"""

import csv
import io
from pathlib import Path
from typing import Any

from .. import endpoints
from ..checks import metrics_for
from ..counts import merged_samples, settings_of
from ..engine.cost import usage_tokens
from ..engine.store import load_manifest
from ..jsonio import dumps_line
from ..probeset import parse_probeset
from .show import select_samples
from .tables import table

FIXED = [
    "sample_id",
    "arm",
    "prompt",
    "model",
    "endpoint",
    "case_id",
    "repeat",
    "header",
    "error_kind",
    "latency_ms",
    "input_tokens",
    "output_tokens",
]


def sample_rows(
    run_dir: Path, sample: str | None = None, case: str | None = None, header: str | None = None
) -> tuple[list[str], list[dict[str, Any]]]:
    """(columns, rows) of the selected samples, with the latest reclassification applied."""
    from ..counts import classifications

    manifest = load_manifest(run_dir)
    probeset = parse_probeset(
        manifest["probeset"]["source"].encode("utf-8"), Path(manifest["probeset"]["path"])
    )
    cases = {c.id: c for c in probeset.cases}
    numbers = classifications(run_dir)
    number = numbers[-1] if numbers else None
    settings = settings_of(run_dir, manifest, number)
    metrics = metrics_for(settings)
    applicable = [name for name, m in metrics.items() if any(m.applies(c, settings) for c in cases.values())]
    _, chosen = select_samples(run_dir, sample, case, header)
    wanted = {record["sample_id"] for record in chosen}
    arms = {(a["prompt"], a["model"]): a.get("arm") for a in manifest["arms"]}
    went = endpoints.of_run(manifest)
    rows = []
    for record in merged_samples(run_dir, number, lambda message: None):
        if record["sample_id"] not in wanted:
            continue
        case_obj = cases.get(record["case_id"])
        error = record.get("error")
        usage = (record.get("response") or {}).get("usage") or {}
        tokens_in, tokens_out = usage_tokens(usage) if usage else (None, None)
        row: dict[str, Any] = {
            "sample_id": record["sample_id"],
            "arm": arms.get((record["prompt"], record["model"])),
            "prompt": record["prompt"],
            "model": record["model"],
            "endpoint": went[record["model"]].url if record["model"] in went else None,
            "case_id": record["case_id"],
            "repeat": record["repeat"],
            "header": (record.get("header") or {}).get("header") if not error else "error",
            "error_kind": error["kind"] if error else None,
            "latency_ms": record.get("latency_ms"),
            "input_tokens": tokens_in,
            "output_tokens": tokens_out,
        }
        outcomes = record.get("outcomes") or {}
        for name in applicable:
            metric = metrics[name]
            if case_obj is None or not metric.applies(case_obj, settings):
                row[name] = None
            elif error:
                row[name] = 0 if metric.higher_is_better else 1
            elif name in outcomes:
                row[name] = int(bool(outcomes[name]))
            else:
                outcome = metric.outcome(record, case_obj, settings)  # None: a check that does not apply
                row[name] = None if outcome is None else int(bool(outcome))
        rows.append(row)
    return FIXED + applicable, rows


def render_rows(
    run_dir: Path, fmt: str, sample: str | None = None, case: str | None = None, header: str | None = None
) -> str:
    columns, rows = sample_rows(run_dir, sample, case, header)
    if fmt == "jsonl":
        return "".join(dumps_line(row).decode("utf-8") for row in rows)
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=columns, lineterminator="\n")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: "" if v is None else v for k, v in row.items()})
        return out.getvalue()
    shown = [c for c in columns if c not in ("arm", "model", "input_tokens", "output_tokens")]
    body = [["-" if row[c] is None else row[c] for c in shown] for row in rows]
    return table(body, shown, "table") + "\n"
