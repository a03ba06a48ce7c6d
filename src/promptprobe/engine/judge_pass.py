"""The judging phase of a run: after a pass over units has recorded its outputs, every output
not judged yet is judged (live, or with --batch through the judge model's batch API: a second
batch phase once the outputs are in). A sequential run judges after each round, so its rule
decides on judged outcomes as well."""

from typing import Any

from .judge_batch import BatchJudging
from .judging import JudgeCalls, JudgeInputs, JudgeRecorder, LiveJudging, due_judgments


def judge_calls(run: Any) -> JudgeCalls:
    """The run's providers, limiters, policy, tally and caps, for its judges' calls."""
    parts = run.parts
    return JudgeCalls(
        parts.providers,
        parts.limiters,
        run.options.policy(),
        run.cancel_event,
        run.tally,
        run.prices,
        run.options.judge_concurrency or run.options.concurrency,
        run.options.max_cost,
        {j.model.spec: run.down_models[j.model.spec] for j in run.judges if j.model.spec in run.down_models},
    )


def judge_outputs(run: Any, backend: Any) -> str | None:
    """Judge what the run recorded and has not judged; what stopped it (max_cost), else None."""
    store = run.store
    cases = {c.id: c for c in run.plan.cases}
    calls = judge_calls(run)
    inputs = JudgeInputs(store.path, cases)
    recorder = JudgeRecorder(store)
    if run.options.batch:
        batches = BatchJudging(calls, inputs, recorder, run.parts.batch_apis, run.options.poll_interval)
        batches.run(lambda: sorted(due_judgments(store.path, run.judges, cases), key=lambda due: due.key))
        backend.detached.extend(batches.detached)
        run.detached.extend(batches.detached)
        return batches.stopped_by
    live = LiveJudging(calls, inputs, recorder)
    # In sample order, whatever order the outputs were recorded in (one at a time: the same order each run).
    live.run(sorted(due_judgments(store.path, run.judges, cases), key=lambda due: due.key))
    return live.stopped_by
