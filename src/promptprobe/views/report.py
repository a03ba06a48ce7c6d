"""Reports: per arm (prompt x model), each metric's k/n with its Wilson and cluster-adjusted
intervals and its failures, tokens, latency and cost; per case the header counts; what the
retrieval did; and a sequential run's decision."""

from collections import Counter
from pathlib import Path
from typing import Any

from ..comparison.judge import JudgedArms, judged_arms, report_judge
from ..comparison.rates import metric_object
from ..counts import ArmCounts, CountsTable, build_counts, pricing
from ..engine.cost import PriceMatch, price_sentence
from ..jsonio import dumps_pretty
from ..paths import renamed
from ..totals import usage
from .tables import fit_table, table, wrap

LEGEND = {
    "95% Wilson": "95% Wilson: Wilson's score interval with continuity correction for the rate of these "
    "questions (the plain one covers only 87.5% at 4 samples).",
    "DEFF": "DEFF: design effect, 1 + (m-1)·ICC: how much repeating a question inflates the variance "
    "(ICC: how alike the repeats of one question are).",
    "n_eff": "n_eff: effective sample size, n / DEFF: what the samples are worth as independent ones.",
    "95% adjusted": "95% adjusted: an interval for the rate over questions like these that keeps its 95% "
    "coverage however many repeats each question has (Wilson at the effective sample size the ICC's 99% "
    "upper limit allows, t on G-1).",
}


def legend(shown: list[str], fmt: str) -> str:
    """The legend of the columns the table kept, and only those."""
    lines = [text for column, text in LEGEND.items() if column in shown]
    return ("  \n" if fmt == "md" else "\n").join(lines)


def _price(match: PriceMatch) -> dict[str, Any]:
    return {"price": match.price.to_dict() if match.price else None, "cost_unknown": match.reason}


def _arm(arm: ArmCounts, counts: CountsTable, by_tag: bool, judged: JudgedArms) -> dict[str, Any]:
    metrics = {
        name: metric_object(per_case, counts.metrics[name].higher_is_better)
        for name, per_case in arm.metrics.items()
        if per_case
    }
    for judge in counts.settings.judges:  # which judge graded a judged metric, and how far to trust it
        if judge.name in metrics:
            metrics[judge.name]["judge"] = report_judge(judge, counts, arm, metrics[judge.name], judged)
    cases = []
    for case_id in counts.case_order:
        states = arm.headers.get(case_id, Counter())
        n = sum(states.values())
        if n:
            cases.append(
                {
                    "case_id": case_id,
                    "n": n,
                    **{s: states[s] for s in ("present", "absent", "misplaced", "empty", "errors")},
                }
            )
    result: dict[str, Any] = {
        "prompt": arm.prompt,
        "model": arm.model,
        "model_spec": arm.spec,
        "samples": arm.samples,
        "errors": arm.errors,
        "error_kinds": dict(arm.error_kinds),
        "check_errors": dict(arm.check_errors),
        "judge_errors": dict(arm.judge_errors),
        "metrics": metrics,
        "cases": cases,
        "usage": {
            **usage(arm),
            **(
                {"judge_cost_usd": None if arm.judge_cost_unknown else round(arm.judge_cost, 6)}
                if counts.settings.judges
                else {}
            ),
        },
    }
    if by_tag:
        result["by_tag"] = _by_tag(arm, counts)
    return result


def _by_tag(arm: ArmCounts, counts: CountsTable) -> dict[str, dict[str, Any]]:
    """Each metric over the cases carrying each tag (a case with two tags counts in both)."""
    tags: dict[str, list[str]] = {}
    for case in counts.probeset.cases:
        for tag in case.tags or ("(untagged)",):
            tags.setdefault(tag, []).append(case.id)
    grouped = {}
    for tag, case_ids in tags.items():
        grouped[tag] = {
            name: metric_object(
                {c: per_case[c] for c in case_ids if c in per_case}, counts.metrics[name].higher_is_better
            )
            for name, per_case in arm.metrics.items()
            if any(c in per_case for c in case_ids)
        }
    return grouped


def retrieval_view(counts: CountsTable) -> dict[str, Any]:
    """Per case: distinct snapshots within the run, empty retrievals, expected-source hit rates;
    and paraphrases (same must_retrieve, different question) whose hit rates differ."""
    cases = []
    hit_rates: dict[str, float] = {}
    # Without retrieval (kind "none") every retrieval is empty by design: nothing to point out.
    retrieves = ((counts.manifest.get("target") or {}).get("retrieval") or {}).get("kind") != "none"
    for case in counts.probeset.cases:
        snapshots = counts.snapshots.get(case.id, Counter())
        hits = [arm.metrics["retrieval_hit"].get(case.id) for arm in counts.arms]
        hits = [h for h in hits if h]
        row: dict[str, Any] = {
            "case_id": case.id,
            "snapshots": len(snapshots),
            "empty": counts.empty_retrievals.get(case.id, 0) if retrieves else 0,
        }
        if case.must_retrieve and hits:
            k, n = sum(h[0] for h in hits), sum(h[1] for h in hits)
            row["retrieval_hit"] = [k, n]
            hit_rates[case.id] = k / n if n else 0.0
        cases.append(row)
    groups: dict[tuple[str, ...], list[str]] = {}
    for case in counts.probeset.cases:
        if case.must_retrieve and case.id in hit_rates:
            groups.setdefault(tuple(sorted(case.must_retrieve)), []).append(case.id)
    paraphrases = [
        {
            "must_retrieve": list(expected),
            "cases": [
                {"case_id": c, "question": counts.cases[c].question, "hit_rate": hit_rates[c]}
                for c in case_ids
            ],
        }
        for expected, case_ids in groups.items()
        if len(case_ids) > 1 and len({round(hit_rates[c], 9) for c in case_ids}) > 1
    ]
    return {
        "cases": cases,
        "changed_within_run": [c["case_id"] for c in cases if c["snapshots"] > 1],
        "paraphrases": paraphrases,
    }


def sequential_view(counts: CountsTable) -> dict[str, Any] | None:
    rule = counts.manifest.get("sequential")
    if not rule:
        return None
    rounds = counts.sequential
    last = rounds[-1] if rounds else {}
    decision = last.get("decision")
    # The decision in words, by B's name and the metric's direction (as compare says it).
    metric = counts.metrics.get(rule.get("metric", ""))
    words = None
    if last.get("stop") and decision in ("A>B", "B>A") and metric and rule.get("terms") == "rate":
        name_b = _short_arm_names(rule.get("a"), rule.get("b"))[1] or "B"
        words = f"{name_b} {'better' if (decision == 'B>A') == metric.higher_is_better else 'worse'}"
    return {
        "rule": rule,
        "rounds": len(rounds),
        "max_rounds": rule.get("max_rounds"),
        "decision": decision,
        "words": words,
        "stopped": bool(last.get("stop")),
        # The exact boundary: the lead, the lead that decides, the stage-wise p.
        "discordant": last.get("discordant_total"),
        "lead": last.get("lead"),
        "lead_needed": last.get("lead_needed"),
        # Before its rule has stopped no p-value is valid (compare says 1 too); an old run has none.
        "p_value": last.get("p_value") if last.get("stop") or "p_value" not in last else 1.0,
        "alpha_budget": last.get("alpha_budget"),
        # The mixture e-value of earlier runs (None on runs under the exact boundary).
        "e_value": last.get("e_value"),
        "threshold": rule.get("threshold"),
    }


def build_report(counts: CountsTable | str | Path, by_tag: bool = False) -> dict[str, Any]:
    """The report of a recorded run, in the JSON shape of docs/json.md."""
    if not isinstance(counts, CountsTable):
        counts = build_counts(counts)
    judged = judged_arms(counts)
    return {
        "run": renamed(str(counts.run)),
        "probeset": counts.probeset.name,
        "probeset_sha256": counts.probeset.sha256,
        "status": counts.state,
        "planned": counts.planned,
        "recorded": counts.recorded,
        "simulated": counts.simulated,
        "classification": counts.classification,
        "checks": counts.settings.to_dict(),
        "arms": [_arm(arm, counts, by_tag, judged) for arm in counts.arms],
        "models": [
            {"model": model, "endpoint": endpoint.to_dict(), **_price(match)}
            for model, (endpoint, match) in pricing(counts.manifest).items()
        ],
        "retrieval": retrieval_view(counts),
        "sequential": sequential_view(counts),
        "warnings": counts.warnings,
    }


# -- text -----------------------------------------------------------------------------------


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _interval(bounds: list[float]) -> str:
    return f"{100 * bounds[0]:.1f}-{100 * bounds[1]:.1f}%"


def _cost(value: float | None) -> str:
    return "cost unknown" if value is None else f"${value:.4f}"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f} ms"


def _short_arm_names(a: str | None, b: str | None) -> tuple[str | None, str | None]:
    """`prompt=x,model=m` and `prompt=y,model=m` read as `x` and `y`: only what differs is named."""
    if not a or not b:
        return a, b
    parts_a = dict(part.split("=", 1) for part in a.split(",", 1) if "=" in part)
    parts_b = dict(part.split("=", 1) for part in b.split(",", 1) if "=" in part)
    differing = [key for key in ("prompt", "model") if parts_a.get(key) != parts_b.get(key)]
    if len(differing) != 1:
        return a, b
    return parts_a.get(differing[0]), parts_b.get(differing[0])


def _evidence(view: dict[str, Any]) -> str:
    """`B leads by 12 of 12 discordant pairs (decides at 11); p = 0.000488` (or an old run's e)."""
    if view.get("lead") is None:
        e, threshold = view.get("e_value"), view.get("threshold")
        if e is None:
            return "no round finished"
        return f"e = {e:.3g} {'>=' if threshold is not None and e >= threshold else '<'} {threshold:g}"
    lead, pairs, needed = view["lead"], view["discordant"], view["lead_needed"]
    ahead = f"B leads by {lead}" if lead > 0 else (f"A leads by {-lead}" if lead < 0 else "no lead")
    bound = f"decides at {needed}" if needed else "no lead could decide yet"
    return f"{ahead} of {pairs} discordant pairs ({bound}); p = {view['p_value']:.3g}"


def sequential_sentence(view: dict[str, Any]) -> str:
    """`sequential on METRIC: B>A (B's rate is higher), decided at round 2 (cap 18 rounds); B leads
    by 12 of 12 discordant pairs (decides at 11); p = ...`."""
    rounds, cap = view["rounds"], view["max_rounds"]
    rule = view.get("rule") or {}
    decision = view["decision"] or "undecided"
    evidence = _evidence(view)
    where = f"sequential on {rule['metric']}" if rule.get("metric") else "sequential"
    if view["stopped"] and decision != "indistinguishable":
        names = _short_arm_names(rule.get("a"), rule.get("b"))
        higher = names[1] if decision == "B>A" else names[0]
        named = f" ({higher}'s rate is higher)" if higher and rule.get("terms") == "rate" else ""
        said = f"{view['words']}: " if view.get("words") else ""
        return f"{where}: {said}{decision}{named}, decided at round {rounds} (cap {cap} rounds); {evidence}"
    if view["stopped"]:
        return f"{where}: indistinguishable at the cap of {cap} rounds; {evidence}"
    return f"{where}: {rounds} of at most {cap} rounds so far, not decided ({evidence})"


def render_report(report: dict[str, Any], fmt: str = "table", width: int | None = None) -> str:
    """The report as text: `table` (plain, fits the terminal), `md` (GitHub markdown) or `json`."""
    if fmt == "json":
        return dumps_pretty(report)
    out = _run_lines(report)
    # A column that is the same for every arm is said once above the table instead.
    arm_columns = [(key, {arm[key] for arm in report["arms"]}) for key in ("prompt", "model")]
    out += [f"{key}: {next(iter(values))}" for key, values in arm_columns if len(values) == 1]
    varying = [key for key, values in arm_columns if len(values) > 1]
    out += _rates_lines(report, varying, fmt, width)
    out += _judge_lines(report, varying)
    out += _usage_lines(report, varying, fmt, width)
    for arm in report["arms"]:
        out += _arm_lines(arm, varying, fmt, width)
    out += _retrieval_lines(report["retrieval"])
    return wrap("\n".join(out), fmt, width)


def _run_lines(report: dict[str, Any]) -> list[str]:
    """Which run, how far it got, and what to know before reading its numbers."""
    if report.get("sequential"):
        samples = f"{report['recorded']} samples (at most {report['planned']} if it ran to its cap)"
    else:
        samples = f"{report['recorded']} of {report['planned']} samples"
    out = [f"run {report['run']}", f"probe set {report['probeset']}, status {report['status']}, {samples}"]
    if report.get("classification") is not None:
        out.append(f"classification {report['classification']} (an offline reclassification)")
    if report.get("simulated"):
        out.append("NOTE: the model in this run is SIMULATED (the built-in demo server), not a real model.")
    out += [f"warning: {warning}" for warning in report.get("warnings") or []]
    if report.get("sequential"):
        out.append(sequential_sentence(report["sequential"]))
    return out


def _rates_lines(report: dict[str, Any], varying: list[str], fmt: str, width: int | None) -> list[str]:
    """Each arm's metrics with their intervals, and the legend of the columns shown."""
    rows = [
        [
            *(arm[key] for key in varying),
            name,
            f"{m['k']}/{m['n']}",
            _pct(m["rate"]),
            _interval(m["wilson"]),
            f"{m['deff']:.2f}",
            f"{m['n_eff']:.1f}",
            _interval(m["wilson_eff"]),
            m["errors"],
        ]
        for arm in report["arms"]
        for name, m in arm["metrics"].items()
    ]
    headers = [*varying, "metric", "k/n", "rate", "95% Wilson", "DEFF", "n_eff", "95% adjusted", "errors"]
    text, shown = fit_table(
        rows, headers, fmt, optional=("n_eff", "DEFF", "95% Wilson", "rate", "errors"), width=width
    )
    return ["", text, "", legend(shown, fmt)]


def _judge_lines(report: dict[str, Any], varying: list[str]) -> list[str]:
    """How far to trust each judged metric, per arm: the words of its `judge` object."""
    out = []
    for arm in report["arms"]:
        label = ", ".join(str(arm[key]) for key in varying) or arm["prompt"]
        for name, metric in arm["metrics"].items():
            if "words" in metric.get("judge", {}):
                out += ["", f"{name} ({label}), how far to trust its judge:"]
                out += [f"- {line}" for line in metric["judge"]["words"]]
    return out


def _usage_lines(report: dict[str, Any], varying: list[str], fmt: str, width: int | None) -> list[str]:
    """Samples, tokens, cost and latency per arm, then each model's price and the batch note."""
    cached = any((arm["usage"].get("cache_saved_usd") or 0) > 0 for arm in report["arms"])
    rows = [
        [
            *(arm[key] for key in varying),
            arm["samples"],
            arm["errors"],
            f"{arm['usage']['input_tokens']:,}",
            f"{arm['usage']['output_tokens']:,}",
            _cost(arm["usage"]["cost_usd"]),
            *([_cost(arm["usage"].get("cache_saved_usd"))] if cached else []),
            _ms(arm["usage"]["latency_ms"]["median"]),
            _ms(arm["usage"]["latency_ms"]["p90"]),
        ]
        for arm in report["arms"]
    ]
    headers = [
        *varying,
        "samples",
        "errors",
        "tokens in",
        "tokens out",
        "cost",
        *(["caching saved"] if cached else []),
        "latency median",
        "latency p90",
    ]
    optional = ("latency p90", "latency median", ("tokens in", "tokens out"))
    out = ["", table(rows, headers, fmt, optional=optional, width=width)]
    out += [
        price_sentence(m["model"], m["endpoint"], m["price"], m["cost_unknown"])
        for m in report.get("models", [])
    ]
    judged = [arm for arm in report["arms"] if "judge_cost_usd" in arm["usage"]]
    if judged:
        names = [" ".join(str(arm[key]) for key in varying) or arm["prompt"] for arm in judged]
        spent = ", ".join(
            f"{name} {_cost(arm['usage']['judge_cost_usd'])}" for name, arm in zip(names, judged, strict=True)
        )
        out.append(f"judging the outputs cost (not in the cost column): {spent}")
    batched = sum(arm["usage"].get("batch_samples") or 0 for arm in report["arms"])
    if batched:
        out.append(
            f"{batched} samples went through a batch API: priced at the batch rate; their latency is "
            "from submission to the batch's end"
        )
    return out


def _arm_lines(arm: dict[str, Any], varying: list[str], fmt: str, width: int | None) -> list[str]:
    """One arm's header counts per case, its failures, and its metrics by tag."""
    label = ", ".join(f"{key} {arm[key]}" for key in varying) or f"prompt {arm['prompt']}"
    show_empty = any(c["empty"] for c in arm["cases"])
    columns = ["present", "misplaced", "absent", *(["empty"] if show_empty else []), "errors"]
    rows = [[c["case_id"], c["n"], *(c[column] for column in columns)] for c in arm["cases"]]
    out = ["", f"per case ({label}):", table(rows, ["case", "n", *columns], fmt, width=width)]
    if arm["errors"]:
        kinds = ", ".join(f"{n} {kind}" for kind, n in sorted(arm["error_kinds"].items()))
        out.append(
            f"{arm['errors']} of {arm['samples']} samples failed after retries ({kinds}); "
            "they stay in every denominator as that metric's unfavourable outcome. "
            "See samples.jsonl for each message."
        )
    for name, n in sorted((arm.get("check_errors") or {}).items()):
        out.append(
            f"your check {name} failed on {n} of {arm['samples']} samples; each counts as its "
            "unfavourable outcome (checks.user_errors in samples.jsonl holds each message)."
        )
    for name, n in sorted((arm.get("judge_errors") or {}).items()):
        out.append(
            f"the judge of {name} failed or gave no readable label on {n} of {arm['samples']} samples; "
            "each counts as a fail (judgments.jsonl holds each reply and message)."
        )
    if arm.get("by_tag"):
        tag_rows = [
            [tag, name, f"{m['k']}/{m['n']}", _pct(m["rate"]), _interval(m["wilson_eff"]), m["errors"]]
            for tag, metrics in arm["by_tag"].items()
            for name, m in metrics.items()
        ]
        headers = ["tag", "metric", "k/n", "rate", "95% adjusted", "errors"]
        out += ["", f"by tag ({label}):", table(tag_rows, headers, fmt, width=width)]
    return out


def _retrieval_lines(view: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    changed = view["changed_within_run"]
    if changed:
        lines += [
            "",
            f"retrieval: repeats of {len(changed)} case(s) got different passages within this run: "
            + ", ".join(changed),
        ]
    empty = [c for c in view["cases"] if c["empty"]]
    if empty:
        lines += [
            "",
            "retrieval: empty results (nothing retrieved) for "
            + ", ".join(f"{c['case_id']} ({c['empty']})" for c in empty),
        ]
    hits = [c for c in view["cases"] if "retrieval_hit" in c]
    if hits:
        lines += [
            "",
            "expected sources per case (retrieval_hit): "
            + ", ".join(f"{c['case_id']} {c['retrieval_hit'][0]}/{c['retrieval_hit'][1]}" for c in hits),
        ]
    for group in view["paraphrases"]:
        lines += ["", f"paraphrases expecting {', '.join(group['must_retrieve'])} differ in retrieval_hit:"]
        lines += [f"  {c['case_id']}: {100 * c['hit_rate']:.0f}%  {c['question']}" for c in group["cases"]]
    return lines
