"""`probe judge RUN --check NAME`: grade a run's recorded outputs again, with the same judge or
another rubric, model or number of repeats, as a new classification layer. The target is
never called: the outputs, questions and passages come from the run directory.

The judgments go to `classifications/N.judgments.jsonl` (requests and replies through the run
store, as in a run) while `classifications/N.judging.json` says what they were asked with; only
when every output is judged is `classifications/N.jsonl` written (the layer: the settings with
the new judge, the samples' header and checks as the layer it is based on had them, and the
judgments file it counts; the other judged checks' judgments are carried over). Report, compare,
show and export then count it. Interrupted (Ctrl-C, --max-cost), no layer is written; the same
command again judges only what is missing, never buying a judgment twice."""

import json
import os
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

from .checks.judge import rubric_problems
from .checks.settings import CheckSettings, JudgeConfig
from .counts import classifications, merged_samples, settings_of
from .engine.cost import load_prices, refuse_unknown, run_day
from .engine.judging import Judge, JudgeCalls, JudgeInputs, JudgeRecorder, LiveJudging, due_judgments
from .engine.limiter import Limiter
from .engine.recorder import Tally
from .engine.retry import RetryPolicy
from .engine.store import RunStore, load_manifest, utc_now
from .errors import InputError
from .judge_config import MAX_REPEATS, read_rubric
from .judged import judge_config
from .judgments import iter_judgments, judgments_source, layer_judgments
from .models import model_of
from .probeset import parse_probeset
from .providers import make_provider, parse_spec, protect_keys
from .providers.base import GenerationParams
from .version import __version__


def new_judge(
    config: JudgeConfig, rubric: Path | None, model: str | None, repeats: int | None, cases: list[Any]
) -> JudgeConfig:
    """The judged check with what the command changes; InputError on a bad rubric or repeats."""
    if repeats is not None and not 1 <= repeats <= MAX_REPEATS:
        raise InputError(f"--repeats must be from 1 to {MAX_REPEATS}, got {repeats}")
    if rubric is not None:
        text = read_rubric(rubric, "--rubric")
        missing = [c.id for c in cases if not c.expect]
        problems = rubric_problems(text, str(rubric), missing if "{expect}" in text else ())
        if problems:
            raise InputError("\n".join(problems))
        config = replace(config, rubric=str(rubric), rubric_text=text)
    return replace(config, model=model or config.model, repeats=repeats or config.repeats)


def judge_model(manifest: dict[str, Any], config: JudgeConfig, given: str | None) -> Any:
    """The judge's model: the one the run recorded for this check, a model of the run by NAME,
    or a spec."""
    if given is None:
        for recorded in manifest.get("judges") or []:
            if recorded.get("check") == config.name:
                return model_of(recorded["model"])
    wanted = given or config.model
    for recorded in manifest.get("models") or []:
        if wanted in (recorded.get("name"), recorded.get("spec")):
            return model_of(recorded)
    return parse_spec(wanted)


def _calls(
    manifest: dict[str, Any], model: Any, cancel: threading.Event, max_cost: float | None
) -> JudgeCalls:
    parameters = manifest.get("parameters") or {}
    params = GenerationParams(
        max_tokens=parameters.get("max_tokens", 1024), timeout=parameters.get("timeout", 120.0)
    )
    prices = load_prices(manifest.get("prices") or {}, day=run_day(manifest))
    if max_cost is not None:
        refuse_unknown(prices, [model])
    provider = make_provider(model, params)
    policy = RetryPolicy(parameters.get("max_attempts", 6), 1.0, parameters.get("max_retry_wait", 60.0))
    limiter = Limiter(parameters.get("rpm") or 0.0, max_wait=policy.max_retry_wait)
    return JudgeCalls(
        {model.spec: provider},
        {model.spec: limiter},
        policy,
        cancel,
        Tally(),
        prices,
        parameters.get("concurrency", 8),
        max_cost,
    )


def judge_run(
    run_dir: Path,
    check: str,
    rubric: Path | None = None,
    model: str | None = None,
    repeats: int | None = None,
    max_cost: float | None = None,
    cancel: threading.Event | None = None,
) -> dict[str, Any]:
    """Judge every recorded output again as classification layer N; what was done (see the
    module's docstring). Raises InputError (bad flags, no such check), StartError (no key)."""
    manifest = load_manifest(run_dir)
    numbers = classifications(run_dir)
    previous = numbers[-1] if numbers else None
    settings = settings_of(run_dir, manifest, previous)
    probeset = parse_probeset(
        manifest["probeset"]["source"].encode("utf-8"), Path(manifest["probeset"]["path"])
    )
    config = new_judge(judge_config(settings, check, run_dir), rubric, model, repeats, list(probeset.cases))
    spec = judge_model(manifest, config, model)
    protect_keys([model_of(m) for m in manifest.get("models") or []] + [spec])
    number = (numbers[-1] + 1) if numbers else 1
    new_settings = replace(settings, judges=tuple(config if j.name == check else j for j in settings.judges))
    store = RunStore.open(run_dir)  # one process at a time: a run still going is refused
    try:
        (run_dir / "classifications").mkdir(mode=store.dir_mode, exist_ok=True)
        _settle_sidecar(store, number, config, spec)
        calls = _calls(manifest, spec, cancel or threading.Event(), max_cost)
        cases = {c.id: c for c in probeset.cases}
        source = layer_judgments(number)
        judging = LiveJudging(calls, JudgeInputs(run_dir, cases), JudgeRecorder(store, source, number))
        judge = Judge(config, spec)
        samples = merged_samples(run_dir, previous, lambda message: None)
        try:
            judging.run(due_judgments(run_dir, [judge], cases, source, samples))
        finally:
            for provider in calls.providers.values():
                provider.close()
        done = not calls.cancel.is_set() and judging.stopped_by is None
        if done:
            _write_layer(store, number, previous, new_settings, check, settings)
    finally:
        store.release()
    labels = [line.get("label") for line in iter_judgments(run_dir, source) if line.get("check") == check]
    return {
        "run": str(run_dir),
        "check": check,
        "classification": number if done else None,
        "based_on": previous,
        "judged": judging.judged,
        "judgments": len(labels),
        "failed": sum(label is None for label in labels),
        "model": spec.label,
        "repeats": config.repeats,
        "rubric_sha256": config.rubric_sha256,
        "stopped_by": judging.stopped_by or ("cancelled" if calls.cancel.is_set() else None),
        "cost_usd": calls.tally.cost if calls.tally.cost_known else None,
    }


def _settle_sidecar(store: RunStore, number: int, config: JudgeConfig, spec: Any) -> None:
    """Record what layer `number`'s judgments are asked with; judgments an interrupted command
    made with other settings are set aside (kept, renamed), never mixed in."""
    wanted = {"judge": config.to_dict(), "model": spec.spec}
    sidecar = store.path / "classifications" / f"{number}.judging.json"
    judgments = store.path / layer_judgments(number)
    if sidecar.exists() and json.loads(sidecar.read_text(encoding="utf-8")) != wanted and judgments.exists():
        stamp = utc_now().replace(":", "")
        os.replace(judgments, judgments.with_name(f"{number}.judgments.set-aside-{stamp}.jsonl"))
    store.replace_file(f"classifications/{number}.judging.json", json.dumps(wanted).encode("utf-8"))


def _write_layer(
    store: RunStore,
    number: int,
    previous: int | None,
    settings: CheckSettings,
    check: str,
    old: CheckSettings,
) -> None:
    """Layer `number`: the new settings, the based-on layer's header and checks per sample, and
    the other judged checks' judgments carried over into its judgments file."""
    from .classifying import code_fingerprint

    run_dir, source = store.path, layer_judgments(number)
    others = {j.name for j in old.judges} - {check}
    carried = [
        line
        for line in iter_judgments(run_dir, judgments_source(run_dir, previous))
        if line["check"] in others
    ]
    if carried:
        store.append_many(source, carried)
    lines: list[dict[str, Any]] = [
        {
            "classification": number,
            "created": utc_now(),
            "settings": settings.to_dict(),
            "based_on": previous,
            "code": code_fingerprint(settings),
            "tool_version": __version__,
            "judgments": source,
            "judged": check,
        }
    ]
    for sample in merged_samples(run_dir, previous, lambda message: None):
        if sample.get("raw") is not None:
            lines.append(
                {
                    "sample_id": sample["sample_id"],
                    "header": sample.get("header"),
                    "checks": sample.get("checks") or {},
                    "outcomes": sample.get("outcomes"),
                    "error": sample.get("error"),
                }
            )
    store.append_many(f"classifications/{number}.jsonl", lines)
