"""The incident file, `probe export RUN [--case ID|--sample ID|--header CLASS] [--arm SELECTOR]`
(markdown or JSON), and the viewer's download of it: what a person pastes into a write-up.

Per case: the question, what was expected of it, the passages the retrieval returned (their text,
each distinct snapshot once with the repeats that got it); per arm (only the chosen one with
`--arm`): the metrics its samples failed, and its outputs grouped by identical bytes, each group
once with how many samples returned it and their ids, its header class, the metrics it fails, the
output with invisible characters shown and its exact bytes (base64); and the run's provenance
(views/provenance.py). One view object; markdown is one rendering of it, JSON the object itself.
"""

import base64
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..comparison.selectors import select_arm
from ..counts import CountsTable, build_counts
from ..errors import InputError
from ..jsonio import dumps_pretty, iter_jsonl
from ..paths import renamed
from .outcomes import failed, outcome
from .outputs import read_bytes
from .overview import arms_of
from .provenance import provenance
from .show import _fence, decoded, latest_classification, readable, select_samples, visible

MISSING = "the raw output is missing, damaged or not the sample's own (probe verify lists the damage)"
EXPECTED = {
    "answer": "an answer: the answer header first",
    "no_answer": "a refusal: the no-answer header first",
    None: "not stated (the case has no `expect`)",
}


def chosen_arm(run_dir: Path, counts: CountsTable, selector: str | None) -> int | None:
    """The arm number `--arm` names: `N` (as numbered in the manifest), or `prompt=NAME`,
    `model=NAME` or both, as compare's selectors (None: every arm)."""
    if selector is None:
        return None
    if selector.isdigit():
        if not 1 <= int(selector) <= len(counts.arms):
            raise InputError(f"--arm {selector}: the run has arms 1 to {len(counts.arms)}")
        return int(selector)
    arm = select_arm(f"{run_dir}#{selector}", counts)
    return counts.arms.index(arm) + 1


def _snapshots(run_dir: Path, case_ids: set[str]) -> dict[str, list[dict[str, Any]]]:
    """Per case, each distinct set of passages its repeats got (texts included), once."""
    found: dict[str, dict[tuple[Any, ...], dict[str, Any]]] = {}
    for record in iter_jsonl(run_dir / "retrievals.jsonl"):
        if record.get("case_id") not in case_ids:
            continue
        passages = record.get("passages") or []
        key = (record.get("error"), *((p.get("id"), p.get("text"), p.get("score")) for p in passages))
        snapshot = found.setdefault(record["case_id"], {}).setdefault(
            key, {"repeats": [], "passages": passages, "error": record.get("error")}
        )
        if record["repeat"] not in snapshot["repeats"]:
            snapshot["repeats"].append(record["repeat"])
    return {case_id: list(snapshots.values()) for case_id, snapshots in found.items()}


def _group_key(record: Mapping[str, Any]) -> tuple[str, ...]:
    error = record.get("error")
    if error:
        return ("error", str(error.get("kind")), str(error.get("message")))
    return (
        "output",
        str((record.get("raw") or {}).get("sha256")),
        str((record.get("header") or {}).get("header")),
    )


def _groups(run_dir: Path, records: list[dict[str, Any]], fails: list[list[str]]) -> list[dict[str, Any]]:
    """Records grouped by identical output (or identical error), most frequent first."""
    groups: dict[tuple[str, ...], dict[str, Any]] = {}
    for record, failing in zip(records, fails, strict=True):
        group = groups.get(_group_key(record))
        if group is None:
            group = groups[_group_key(record)] = _new_group(run_dir, record, failing)
        group["count"] += 1
        group["sample_ids"].append(record["sample_id"])
        group["samples"].append(record)
    return sorted(groups.values(), key=lambda g: -g["count"])


def _new_group(run_dir: Path, record: dict[str, Any], failing: list[str]) -> dict[str, Any]:
    error = record.get("error")
    raw = None if error else read_bytes(run_dir, record)
    return {
        "count": 0,
        "sample_ids": [],
        "header": None if error else record.get("header"),
        "error": error,
        "sha256": None if error else (record.get("raw") or {}).get("sha256"),
        "bytes": None if error else (record.get("raw") or {}).get("bytes"),
        "failed_metrics": failing,
        "raw_text": readable(raw) if raw is not None else None,
        "visible": visible(decoded(raw)) if raw is not None else None,
        "raw_base64": base64.b64encode(raw).decode("ascii") if raw is not None else None,
        "missing": None if error or raw is not None else MISSING,
        "samples": [],
    }


def _arm_view(
    run_dir: Path, counts: CountsTable, entry: dict[str, Any], records: list[dict[str, Any]]
) -> dict[str, Any]:
    """One arm's samples of one case: the metrics they failed and their outputs grouped."""
    fails, tally = [], {}
    for record in records:
        case = counts.cases.get(record["case_id"])
        failing = []
        for name, metric in counts.metrics.items():
            value = outcome(name, metric, record, case, counts.settings, counts.check_applies)
            if value is None:
                continue
            cell = tally.setdefault(name, [0, 0])
            cell[1] += 1
            if failed(metric, value):
                cell[0] += 1
                failing.append(name)
        fails.append(failing)
    return {
        "arm": entry["index"],
        "name": entry["name"],
        "samples": len(records),
        "failed_metrics": [
            {"metric": name, "failed": k, "of": n, "higher_is_better": counts.metrics[name].higher_is_better}
            for name, (k, n) in tally.items()
            if k
        ],
        "groups": _groups(run_dir, records, fails),
    }


def incident(
    run_dir: Path,
    sample: str | None = None,
    case: str | None = None,
    header: str | None = None,
    arm: str | None = None,
) -> dict[str, Any]:
    """The incident view object of the chosen samples (every sample of the run by default)."""
    counts = build_counts(run_dir)
    number = chosen_arm(run_dir, counts, arm)
    _, records = select_samples(run_dir, sample, case, header)
    entries = arms_of(counts)
    index = {(a["prompt"], a["model"]): a for a in entries}
    wanted = [entries[number - 1]] if number else entries
    passages = _snapshots(run_dir, {r["case_id"] for r in records})
    cases = []
    for case_id in counts.case_order:
        mine = [r for r in records if r["case_id"] == case_id]
        if not mine:
            continue
        spec = counts.cases[case_id]
        arms = []
        for entry in wanted:
            own = [r for r in mine if index.get((r["prompt"], r["model"])) is entry]
            if own:
                arms.append(_arm_view(run_dir, counts, entry, own))
        if arms:
            cases.append(
                {
                    "case_id": case_id,
                    "question": spec.question,
                    "expect": spec.expect,
                    "expected": EXPECTED.get(spec.expect, spec.expect),
                    "tags": list(spec.tags),
                    "must_retrieve": list(spec.must_retrieve or []),
                    "passages": passages.get(case_id, []),
                    "arms": arms,
                }
            )
    names = {a["index"]: a["name"] for a in entries}
    return {
        "run": renamed(str(run_dir)),
        "probeset": counts.probeset.name,
        "tool_version": counts.manifest.get("tool_version"),
        "classification": latest_classification(run_dir),
        "arm": number,
        "provenance": provenance(counts, [a["index"] for a in wanted], names),
        "samples": sum(a["samples"] for c in cases for a in c["arms"]),
        "cases": cases,
    }


# -- markdown ---------------------------------------------------------------------------------


def _fenced(text: str, kind: str = "text") -> list[str]:
    fence = _fence(text)
    return [fence + kind, text, fence]


def _quoted(text: str) -> list[str]:
    return [
        "> " + line if line else ">" for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    ]


def _passages_md(snapshots: list[dict[str, Any]]) -> list[str]:
    if not snapshots:
        return ["No retrieval was recorded for this case."]
    out: list[str] = []
    for snapshot in snapshots:
        who = (
            "Every repeat" if len(snapshots) == 1 else "Repeat(s) " + ", ".join(map(str, snapshot["repeats"]))
        )
        if snapshot.get("error"):
            out += [f"{who}: retrieval failed: {snapshot['error']}", ""]
            continue
        if not snapshot["passages"]:
            out += [f"{who}: nothing was retrieved.", ""]
            continue
        out += [f"{who} got {len(snapshot['passages'])} passage(s):", ""]
        for i, passage in enumerate(snapshot["passages"], 1):
            score = f" (score {passage['score']})" if passage.get("score") is not None else ""
            out += [f"**{i}. `{passage.get('id')}`**{score}", ""]
            out += _fenced(str(passage.get("text") or "")) + [""]
    return out


def _group_title(number: int, group: dict[str, Any], of: int) -> str:
    head = f"#### Output {number}: {group['count']} of {of} sample(s), "
    if group["error"]:
        error = group["error"]
        return (
            head
            + f"error {error.get('kind')}: {error.get('message')} (after {error.get('attempts')} attempts)"
        )
    header = group["header"] or {}
    where = f", {header['where']} on line {header['line']}" if header.get("where") else ""
    return head + f"header {header.get('header')}{where}, {group['bytes']} bytes, sha256 {group['sha256']}"


def _cell(value: Any) -> str:
    if value is None:
        return "-"  # an attachment never says "None"
    # CommonMark ends a line at LF, CR or CRLF: any of them would end the table row.
    return str(value).replace("|", "\\|").replace("\r\n", " ").replace("\r", " ").replace("\n", " ")


def _samples_table(records: list[dict[str, Any]]) -> list[str]:
    """Each sample of a group: when it started, how long it took, its attempts and what the
    provider said of it (request id, reported model, stop reason)."""
    out = ["| sample | started | latency | attempts | request id | provider-reported model | stop reason |"]
    out.append("|---|---|---|---|---|---|---|")
    for record in records:
        response = record.get("response") or {}
        latency = f"{record['latency_ms']} ms" if record.get("latency_ms") is not None else None
        cells = [record["sample_id"], record.get("started_at"), latency, record.get("attempts"),
                 response.get("request_id"), response.get("model"), response.get("stop_reason")]  # fmt: skip
        out.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return out


def _arm_md(arm: dict[str, Any], provenance_arm: dict[str, Any] | None) -> list[str]:
    out = [f"### Arm {arm['arm']}: {arm['name']}", ""]
    if provenance_arm is not None:
        out += [f"- {line}" for line in provenance_arm["lines"]] + [""]
        text = provenance_arm["prompt"]["text"]
        if text is not None:
            out += ["<details><summary>Prompt text</summary>", ""] + _fenced(text) + ["", "</details>", ""]
    if arm["failed_metrics"]:
        failing = "; ".join(f"{m['metric']} {m['failed']} of {m['of']}" for m in arm["failed_metrics"])
        out += [f"Failed metrics (samples failing of those it applies to): {failing}.", ""]
    else:
        out += ["No metric failed on these samples.", ""]
    for number, group in enumerate(arm["groups"], 1):
        out += [_group_title(number, group, arm["samples"]), ""]
        out += ["Samples: " + ", ".join(f"`{s}`" for s in group["sample_ids"]), ""]
        out += _samples_table(group["samples"]) + [""]
        if group["failed_metrics"]:
            out += ["Fails: " + ", ".join(group["failed_metrics"]), ""]
        if group["missing"]:
            out += [f"Output not shown: {group['missing']}.", ""]
        if group["visible"] is not None:
            out += ["Output with invisible characters shown:", ""] + _fenced(group["visible"]) + [""]
            out += ["Exact bytes (base64):", ""] + _fenced(group["raw_base64"], "") + [""]
    return out


def render_incident(view: dict[str, Any]) -> str:
    """The incident file as markdown."""
    source = view["provenance"]
    out = [
        f"# promptprobe incident: {view['probeset']}",
        "",
        f"{source['summary'][0].upper()}{source['summary'][1:]}; promptprobe {view['tool_version']}. "
        f"{view['samples']} sample(s).",
        "",
        f"Parameters: {source['parameters_text']}.",
    ]
    if view["classification"] is not None:
        out += [
            "",
            f"Headers and checks as classification {view['classification']} "
            "(an offline reclassification) has them.",
        ]
    by_arm = {a["index"]: a for a in source["arms"]}
    for case in view["cases"]:
        out += ["", f"## Case `{case['case_id']}`", "", "Question:", "", *_quoted(case["question"]), ""]
        out += [f"Expected: {case['expected']}."]
        if case["tags"]:
            out += ["", "Tags: " + ", ".join(case["tags"]) + "."]
        if case["must_retrieve"]:
            out += ["", "Must retrieve: " + ", ".join(f"`{p}`" for p in case["must_retrieve"]) + "."]
        out += ["", "### Passages", "", *_passages_md(case["passages"])]
        for arm in case["arms"]:
            out += _arm_md(arm, by_arm.get(arm["arm"]))
    if not view["cases"]:
        out += ["", "No sample matches."]
    return "\n".join(out).rstrip("\n") + "\n"


def export(
    run_dir: Path,
    sample: str | None = None,
    case: str | None = None,
    header: str | None = None,
    fmt: str = "md",
    arm: str | None = None,
) -> str:
    """`probe export RUN` as markdown or JSON."""
    view = incident(run_dir, sample, case, header, arm)
    return dumps_pretty(view) if fmt == "json" else render_incident(view)
