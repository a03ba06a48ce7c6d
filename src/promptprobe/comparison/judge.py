"""How far to trust a judged metric, beside it: the grader's reliability (promptprobe.stats.judge)
measured on a run's judged outputs (promptprobe.judged), in numbers and in words.

- Report, per arm and judged metric (the metric's `judge` object): `agreement` of repeated
  judgments of one output (share alike and Fleiss' kappa with intervals, the outputs judged twice
  or more, the sample ids of those judged both ways); `labels`, the judge's sensitivity and
  specificity against this arm's hand labels; `corrected`, the Rogan-Gladen rate beside the judged
  one. The correction pools the hand labels of every arm of the run (more labels, a tighter
  interval): it assumes the judge errs alike on every arm, which the bias test of a comparison
  checks.
- Compare, beside the verdict (which tests the judged rates, unchanged): the effect corrected for
  the judge's errors (the comparison's own interval at 1 - level/2 over Youden's J at 1 - level/2,
  the labels of A and B pooled), each arm's sensitivity and specificity, and a warning when they
  differ between A and B (Fisher's exact test, Holm over the two).
A figure the data cannot give is None with its `reason`; `words` holds every sentence a reader
sees, so the terminal, the HTML and the viewer say the same.
"""

from pathlib import Path
from typing import Any

from ..checks.settings import JudgeConfig
from ..counts import ArmCounts, CountsTable
from ..judged import JudgedArm, judged_samples
from ..stats.judge import (
    Accuracy,
    Agreement,
    Estimate,
    accuracy,
    agreement,
    bias,
    corrected_effect,
    corrected_rate,
)
from .words import in_points, level, p_text, points

CONFIDENCE = 0.95
SPLIT_LISTED = 20  # sample ids said in words; the JSON lists them all

JudgedArms = dict[tuple[str, str, str], JudgedArm]


def judged_arms(counts: CountsTable) -> JudgedArms:
    """Each arm's judged outputs per judged check, by (prompt, model, check); {} without judges."""
    if not counts.settings.judges:
        return {}
    arms = judged_samples(counts.run, classification=counts.classification)
    return {(a.prompt, a.model, a.check): a for a in arms}


def judge_object(judge: JudgeConfig, manifest: dict[str, Any]) -> dict[str, Any]:
    """A judged metric's judge: its model (as the run resolved it), judgments per output, rubric."""
    recorded = next((j["model"] for j in manifest.get("judges") or [] if j.get("check") == judge.name), None)
    configured = (manifest.get("checks") or {}).get("judges") or []
    asked = next((j["model"] for j in configured if j["name"] == judge.name), None)
    # The model the run resolved, unless `probe judge --model` asked another for this layer.
    model = judge.model
    if recorded and asked == judge.model:
        model = recorded.get("name") or recorded.get("spec")
    return {
        "model": model,
        "repeats": judge.repeats,
        "rubric": judge.rubric,
        "rubric_sha256": judge.rubric_sha256,
    }


def _pairs(arm: JudgedArm | None) -> list[tuple[bool, bool]]:
    """(judged outcome, hand label) of each labelled output: a failed judgment is a judged fail."""
    if arm is None:
        return []
    return [(s.outcome, s.labelled) for s in arm.samples if s.labelled is not None]


def _no_labels(judge: JudgeConfig, whose: str) -> str:
    if not judge.labels_file:
        return "no hand labels: the check names no labels_file (probe label collects them)"
    if not Path(judge.labels_file).exists():
        return f"no hand labels: {judge.labels_file} does not exist yet (probe label writes it)"
    return f"no hand label in {judge.labels_file} for {whose} outputs (probe label collects them)"


def _accuracy_object(acc: Accuracy, no_labels: str) -> dict[str, Any]:
    out = acc.to_dict()
    if not acc.n:  # say why there is no figure, rather than that no output was labelled pass
        out["sensitivity"] = out["specificity"] = Estimate(None, None, no_labels).to_dict()
    return out


def _agreement_object(found: Agreement, arm: JudgedArm | None) -> dict[str, Any]:
    ids = [] if arm is None else [arm.samples[i].sample_id for i in found.split]
    return {**found.to_dict(), "split_samples": ids}


# -- words ------------------------------------------------------------------------------------


def _pct(value: float) -> str:
    return f"{100 * value:.1f}%"


def _share(e: dict[str, Any]) -> str:
    """`91.7% (95% CI 61.5-99.8%)`, or why there is no figure or no interval."""
    if e["estimate"] is None:
        return f"none ({e.get('reason')})"
    if e["interval"] is None:
        return f"{_pct(e['estimate'])} ({e.get('reason')})"
    lo, hi = e["interval"]
    text = f"{_pct(e['estimate'])} ({level(CONFIDENCE)} CI {100 * lo:.1f}-{100 * hi:.1f}%)"
    return f"{text}; {e['reason']}" if e.get("reason") else text


def _kappa(e: dict[str, Any]) -> str:
    """`0.61 (95% CI 0.32 to 0.85)`, or why there is no figure or no interval."""
    if e["estimate"] is None:
        return f"none ({e.get('reason')})"
    if e["interval"] is None:
        return f"{e['estimate']:.2f} ({e.get('reason')})"
    lo, hi = e["interval"]
    return f"{e['estimate']:.2f} ({level(CONFIDENCE)} CI {lo:.2f} to {hi:.2f})"


def accuracy_words(labels: dict[str, Any]) -> str:
    """`against 20 hand labels (12 pass, 8 fail): sensitivity 91.7% (...), specificity ...`."""
    if not labels["n"]:
        return f"sensitivity and specificity: not measured, {labels['sensitivity']['reason']}"
    kinds = f"{labels['labelled_pass']} pass, {labels['labelled_fail']} fail"
    return (
        f"against {labels['n']} hand labels ({kinds}): "
        f"sensitivity {_share(labels['sensitivity'])}, specificity {_share(labels['specificity'])}"
    )


def _report_words(view: dict[str, Any], rate: float) -> list[str]:
    found, corrected = view["agreement"], view["corrected"]
    times = "1 judgment" if view["repeats"] == 1 else f"{view['repeats']} judgments"
    words = [f"judged by {view['model']}, {times} an output"]
    if found["outputs"]:
        words += [
            f"agreement: {found['unanimous']} of {found['outputs']} outputs judged alike every time, "
            f"{_share(found['share'])}; Fleiss' kappa {_kappa(found['kappa'])}"
        ]
    else:
        words.append(f"agreement: not measured, {found['share']['reason']}")
    split = found["split_samples"]
    if split:
        left = len(split) - SPLIT_LISTED
        more = f" and {left} more (every id is in the JSON)" if left > 0 else ""
        words.append(f"judgments split on {len(split)} outputs: {', '.join(split[:SPLIT_LISTED])}{more}")
    words.append(accuracy_words(view["labels"]))
    if corrected["estimate"] is None:
        words.append(f"no corrected rate: {corrected['reason']}")
    else:
        words.append(
            f"corrected for the judge's errors (Rogan-Gladen, the {corrected['labels']} hand labels of every "
            f"arm pooled): {_share(corrected)}, beside the judged {_pct(rate)}"
        )
    return words


# -- the report -------------------------------------------------------------------------------


def report_judge(
    judge: JudgeConfig, counts: CountsTable, arm: ArmCounts, metric: dict[str, Any], judged: JudgedArms
) -> dict[str, Any]:
    """The `judge` object of one arm's judged metric: model, repeats, agreement, labels, corrected."""
    mine = judged.get((arm.prompt, arm.model, judge.name))
    found = agreement([s.votes for s in mine.samples] if mine else [], CONFIDENCE)
    own = accuracy(_pairs(mine), CONFIDENCE)
    every = [p for (_, _, check), other in judged.items() if check == judge.name for p in _pairs(other)]
    pooled = accuracy(every, CONFIDENCE)
    others = accuracy(
        [
            p
            for key, other in judged.items()
            if key[2] == judge.name and other is not mine
            for p in _pairs(other)
        ],
        CONFIDENCE,
    )
    # The pooled labels assume the judge errs alike on every arm: this arm's against the others'.
    tested = bias(others, own).to_dict()
    corrected = corrected_rate(metric["rate"], metric["n_eff"], pooled, CONFIDENCE).to_dict()
    if not pooled.n:
        corrected["reason"] = _no_labels(judge, "any arm's")
    view = {
        **judge_object(judge, counts.manifest),
        "agreement": _agreement_object(found, mine),
        "labels": _accuracy_object(own, _no_labels(judge, "this arm's")),
        "corrected": {**corrected, "judged": metric["rate"], "labels": pooled.n},
        "bias": tested,
    }
    view["words"] = _report_words(view, metric["rate"])
    if tested["biased"]:
        warning = _bias_warning(tested, others, own, ("the other arms'", "this arm's"))
        view["words"].append(
            f"warning: {warning}; the corrected rate, which pools every arm's labels, assumes not"
        )
    return view


# -- the comparison ---------------------------------------------------------------------------


def _bias_warning(
    b: dict[str, Any], base: Accuracy, this: Accuracy, names: tuple[str, str] = ("A's", "B's")
) -> str:
    """`the judge grades B's outputs differently from A's (sensitivity 95.0% on A's, 70.0% on B's...`."""
    use_se = b["p_specificity"] is None or (
        b["p_sensitivity"] is not None and b["p_sensitivity"] <= b["p_specificity"]
    )
    what = "sensitivity" if use_se else "specificity"
    on_base, on_this = (
        (base.sensitivity, this.sensitivity) if use_se else (base.specificity, this.specificity)
    )
    labels = (
        f"{base.n} labels an arm"
        if base.n == this.n
        else f"{base.n} labels of {names[0]}, {this.n} of {names[1]}"
    )
    base_name, this_name = names
    figures = f"{what} {_pct(on_base.estimate)} on {base_name}, {_pct(on_this.estimate)} on {this_name}"
    return (
        f"the judge grades {this_name} outputs differently from {base_name} ({figures}, "
        f"p = {p_text(b['p_adjusted'])} on {labels}, Holm over sensitivity and specificity): "
        "the difference may be the judge's"
    )


def _effect_words(result: dict[str, Any], corrected: dict[str, Any], biased: bool) -> str:
    if corrected["estimate"] is None:
        return f"no corrected effect: {corrected['reason']}"
    lo, hi = corrected["interval"]
    interval = f"{level(corrected['confidence'])} CI {points(lo)} to {points(hi)}"
    text = (
        f"corrected for the judge's errors (Rogan-Gladen, the {corrected['labels']} hand labels of A and B "
        f"pooled): B - A = {in_points(corrected['estimate'])} ({interval}: the judged effect's "
        f"{level(corrected['judged_confidence'])} interval over Youden's J's), beside the judged "
        f"{in_points(result['effect']['estimate'])}"
    )
    text = f"{text}; {corrected['reason']}" if corrected.get("reason") else text
    return text + (
        "; it assumes the judge errs alike on A and B, which the warning below doubts" if biased else ""
    )


def _corrected(result: dict[str, Any], pooled: Accuracy, judge: JudgeConfig) -> dict[str, Any]:
    """B - A corrected by Youden's J, from the comparison's own interval at 1 - level/2."""
    confidence = result["effect"]["confidence"]
    half = (1 - confidence) / 2
    interval_at = result.get("_interval_at")
    judged = interval_at(half) if interval_at is not None else None
    base = {"confidence": confidence, "judged_confidence": 1 - half, "judged_interval": judged,
            "labels": pooled.n}  # fmt: skip
    if not pooled.n:
        return {**Estimate(None, None, _no_labels(judge, "A's or B's")).to_dict(), **base}
    if judged is None:
        why = result["effect"].get("interval_note") or "the comparison has no interval"
        return {**Estimate(None, None, f"no interval of the judged effect: {why}").to_dict(), **base}
    estimate = corrected_effect(result["effect"]["estimate"], judged, pooled, confidence)
    return {**estimate.to_dict(), **base, "judged_interval": list(judged)}


def compare_judge(
    result: dict[str, Any],
    sides: tuple[tuple[CountsTable, ArmCounts, JudgedArms], tuple[CountsTable, ArmCounts, JudgedArms]],
    alpha: float,
) -> None:
    """Beside a judged metric's verdict: each arm's reliability (`a.judge`, `b.judge`, as the report
    has them) and the comparison's `judge`: pooled labels, corrected effect, bias test, warning."""
    metric = result["metric"]
    judges = [counts.settings.judge(metric) for counts, _, _ in sides]
    if judges == [None, None]:
        return
    own = []
    for key, judge, (counts, arm, judged) in zip(("a", "b"), judges, sides, strict=True):
        own.append(_pairs(judged.get((arm.prompt, arm.model, metric)) if judge else None))
        if judge is not None:
            result[key]["judge"] = report_judge(judge, counts, arm, result[key], judged)
    judge, counts = next((j, side[0]) for j, side in zip(judges[::-1], sides[::-1], strict=True) if j)
    acc_a, acc_b = accuracy(own[0], CONFIDENCE), accuracy(own[1], CONFIDENCE)
    pooled = accuracy(own[0] + own[1], CONFIDENCE)
    tested = bias(acc_a, acc_b, alpha).to_dict()
    corrected = _corrected(result, pooled, judge)
    words = [f"{metric} is judged: the verdict tests the judged rates; what the judge's errors do to them:"]
    for side in ("a", "b"):
        if "judge" in result[side]:
            labels = result[side]["judge"]["labels"]
            words.append(f"{side.upper()} ({result[side]['name']}): {accuracy_words(labels)}")
    words.append(_effect_words(result, corrected, tested["biased"]))
    result["judge"] = {
        **judge_object(judge, counts.manifest),
        "labels": _accuracy_object(pooled, _no_labels(judge, "A's or B's")),
        "corrected": corrected,
        "bias": tested,
        "warning": _bias_warning(tested, acc_a, acc_b) if tested["biased"] else None,
        "words": words,
    }
