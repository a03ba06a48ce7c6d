"""Reports: per arm (prompt x model), each metric's k/n with its Wilson and cluster-adjusted
intervals, and per case the header counts a prompt engineer reads first."""

import json
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tabulate import tabulate

from .probeset import parse_probeset
from .stats import clustered_rate
from .store import load_run

# metric -> (is the sample in the denominator?, is it a success?) given (sample, case, no_answer)
Rule = Callable[[dict[str, Any], Any, str], bool]


def _header(sample: dict[str, Any]) -> str | None:
    return sample["header"]["header"] if sample.get("header") else None


def _declared_no_answer(sample: dict[str, Any], no_answer: str) -> bool:
    return bool(sample.get("header")) and sample["header"]["declared"] == no_answer


def _hit(sample: dict[str, Any], case: Any) -> bool:
    ids = set((sample.get("retrieval") or {}).get("passage_ids") or [])
    return bool(sample.get("retrieval")) and set(case.must_retrieve) <= ids


METRICS: dict[str, tuple[Rule, Rule]] = {
    "header_present": (lambda s, c, na: True, lambda s, c, na: _header(s) == "present"),
    "header_absent": (lambda s, c, na: True, lambda s, c, na: _header(s) == "absent"),
    "header_misplaced": (lambda s, c, na: True, lambda s, c, na: _header(s) == "misplaced"),
    "declared_correct": (
        lambda s, c, na: c.expect is not None,
        lambda s, c, na: bool(s.get("header")) and _declared_no_answer(s, na) == (c.expect == "no_answer"),
    ),
    "refusal_recall": (lambda s, c, na: c.expect == "no_answer", lambda s, c, na: _declared_no_answer(s, na)),
    "false_refusal": (lambda s, c, na: c.expect == "answer", lambda s, c, na: _declared_no_answer(s, na)),
    "retrieval_hit": (lambda s, c, na: bool(c.must_retrieve), lambda s, c, na: _hit(s, c)),
}
METRIC_NAMES = tuple(METRICS)


def metric_from_cases(per_case: dict[str, tuple[int, int]], confidence: float = 0.95) -> dict[str, Any]:
    """DESIGN.md's metric object from per-case (successes, trials)."""
    result = clustered_rate([k for k, _ in per_case.values()], [n for _, n in per_case.values()], confidence)
    return {
        "k": result.k,
        "n": result.n,
        "rate": result.rate,
        "wilson": list(result.wilson),
        "deff": result.deff,
        "n_eff": result.n_eff,
        "wilson_eff": list(result.wilson_eff),
        "per_case": {case: [k, n] for case, (k, n) in per_case.items()},
    }


def arm_report(
    samples: list[dict[str, Any]], cases: dict[str, Any], no_answer: str, case_order: list[str]
) -> dict[str, Any]:
    by_case: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for sample in samples:
        by_case[sample["case_id"]].append(sample)
    ordered = [c for c in case_order if c in by_case]
    metrics = {}
    for name, (included, success) in METRICS.items():
        per_case = {}
        for case_id in ordered:
            case = cases[case_id]
            chosen = [s for s in by_case[case_id] if included(s, case, no_answer)]
            if chosen:
                per_case[case_id] = (sum(success(s, case, no_answer) for s in chosen), len(chosen))
        if per_case or name != "retrieval_hit":
            metrics[name] = metric_from_cases(per_case)
    case_rows = []
    for case_id in ordered:
        counts = Counter(_header(s) or "errors" for s in by_case[case_id])
        case_rows.append(
            {
                "case_id": case_id,
                "n": len(by_case[case_id]),
                "present": counts["present"],
                "absent": counts["absent"],
                "misplaced": counts["misplaced"],
                "errors": counts["errors"],
            }
        )
    errors = [s["error"] for s in samples if s.get("error")]
    return {
        "samples": len(samples),
        "errors": len(errors),
        "error_kinds": dict(Counter(e["kind"] for e in errors)),
        "metrics": metrics,
        "cases": case_rows,
    }


def build_report(run_dir: str | Path) -> dict[str, Any]:
    """The report of a recorded run, in DESIGN.md's JSON shape."""
    run_dir = Path(run_dir)
    manifest, samples = load_run(run_dir)
    probeset = parse_probeset(
        manifest["probeset"]["source"].encode("utf-8"), Path(manifest["probeset"]["path"])
    )
    cases = {c.id: c for c in probeset.cases}
    case_order = [c.id for c in probeset.cases]
    no_answer = manifest["header"]["no_answer"]
    arms = []
    for arm in manifest["arms"]:
        arm_samples = [s for s in samples if s["prompt"] == arm["prompt"] and s["model"] == arm["model"]]
        arms.append(
            {
                "prompt": arm["prompt"],
                "model": arm["model"],
                **arm_report(arm_samples, cases, no_answer, case_order),
            }
        )
    planned = manifest.get("counts", {}).get("planned")
    return {
        "run": str(run_dir),
        "probeset": manifest["probeset"]["name"],
        "probeset_sha256": manifest["probeset"]["sha256"],
        "questions": {c.id: c.question for c in probeset.cases},
        "status": manifest["status"],
        "planned": planned,
        "recorded": len(samples),
        # Said by the server itself: the demo's model names itself SIMULATED in every reply.
        "simulated": any("SIMULATED" in ((s.get("response") or {}).get("model") or "") for s in samples),
        "arms": arms,
    }


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _interval(bounds: list[float]) -> str:
    return f"{100 * bounds[0]:.1f}-{100 * bounds[1]:.1f}%"


def render_report(report: dict[str, Any], fmt: str = "table") -> str:
    """The report as text: `table` (plain), `md` (GitHub markdown) or `json`."""
    if fmt == "json":
        return json.dumps(public_report(report), ensure_ascii=False, indent=2)
    tablefmt = "github" if fmt == "md" else "simple"
    out = [
        f"run {report['run']}  probe set {report['probeset']}  status {report['status']}  "
        f"samples {report['recorded']}/{report['planned']}"
    ]
    if report.get("simulated"):
        out.append("NOTE: the model in this run is SIMULATED (the built-in demo server), not a real model.")
    # A column that is the same for every arm is said once above the table instead.
    prompts = {arm["prompt"] for arm in report["arms"]}
    models = {arm["model"] for arm in report["arms"]}
    arm_columns = [(key, values) for key, values in (("prompt", prompts), ("model", models))]
    for key, values in arm_columns:
        if len(values) == 1:
            out.append(f"{key}: {next(iter(values))}")
    varying = [key for key, values in arm_columns if len(values) > 1]
    rows = []
    for arm in report["arms"]:
        for name, m in arm["metrics"].items():
            rows.append(
                [
                    *(arm[key] for key in varying),
                    name,
                    f"{m['k']}/{m['n']}",
                    _pct(m["rate"]),
                    _interval(m["wilson"]),
                    f"{m['deff']:.2f}",
                    f"{m['n_eff']:.1f}",
                    _interval(m["wilson_eff"]),
                    arm["errors"],
                ]
            )
    out.append("")
    out.append(
        tabulate(
            rows,
            headers=[
                *varying,
                "metric",
                "k/n",
                "rate",
                "95% Wilson",
                "DEFF",
                "n_eff",
                "95% adjusted",
                "errors",
            ],
            tablefmt=tablefmt,
            disable_numparse=True,
        )
    )
    for arm in report["arms"]:
        out.append("")
        label = ", ".join(f"{key} {arm[key]}" for key in varying) or f"prompt {arm['prompt']}"
        out.append(f"per case ({label}):")
        out.append(
            tabulate(
                [
                    [c["case_id"], c["n"], c["present"], c["misplaced"], c["absent"], c["errors"]]
                    for c in arm["cases"]
                ],
                headers=["case", "n", "present", "misplaced", "absent", "errors"],
                tablefmt=tablefmt,
            )
        )
        if arm["errors"]:
            kinds = ", ".join(f"{n} {kind}" for kind, n in sorted(arm["error_kinds"].items()))
            out.append(
                f"{arm['errors']} of {arm['samples']} samples failed after retries ({kinds}); "
                "they stay in every denominator. See samples.jsonl for each message."
            )
    return "\n".join(out)


def public_report(report: dict[str, Any]) -> dict[str, Any]:
    """The JSON form: DESIGN.md's keys (per-case metric counts kept out for brevity)."""
    copy = json.loads(json.dumps(report))
    copy.pop("questions", None)
    for arm in copy["arms"]:
        for metric in arm["metrics"].values():
            metric.pop("per_case", None)
    return copy
