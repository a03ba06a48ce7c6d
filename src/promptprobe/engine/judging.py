"""Judging recorded outputs: the judged checks' calls, made after a pass over units has recorded
its outputs (and offline by `probe judge`).

Each judgment is a recorded call like a model call: the request as sent and the raw reply
written through the run store (with their sha256), the reply's body kept, retried under the
run's policy (tenacity), paced by the judge endpoint's rate limiter (shared with an arm on the
same endpoint), `concurrency` at a time, priced into the run's tally and stopped by
`--max-cost`. A judgment is recorded once: a resume, or a second look, judges only the
(sample, check, index) that have no line yet. A call that failed after its retries, or a reply
that is not exactly one label, is recorded with `label` null: that output's failure on the
metric, never a pass (checks/judge.py)."""

import threading
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..checks.judge import judge_messages, parse_reply
from ..checks.settings import JudgeConfig
from ..errors import InputError
from ..jsonio import dumps_pretty, iter_jsonl
from ..judgments import RUN_JUDGMENTS, latest_judgments
from ..models import ModelSpec
from ..pack import read_raw
from ..probeset import Case
from ..providers.base import Completion, Provider, ProviderError
from ..redaction import SCRUBBER
from .cost import PriceTable, split_usage
from .limiter import Cancelled, Limiter
from .recorder import Tally
from .retry import Attempted, RetryPolicy, call_with_retries
from .store import RunStore, iter_samples, utc_now


@dataclass(frozen=True)
class Judge:
    """A judged check with the model that grades it."""

    config: JudgeConfig
    model: ModelSpec


@dataclass(frozen=True)
class Due:
    """One judgment to make: output `sample_id`, check, index (1..repeats)."""

    sample: dict[str, Any]
    judge: Judge
    index: int

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.sample["sample_id"], self.judge.config.name, self.index)


def resolve_judges(settings: Any, models: Iterable[ModelSpec], config: Any) -> list[Judge]:
    """Each judged check with its model: a NAME of the run's models (its arms' names first, then
    [run] models), or a spec."""
    by_label = {m.label: m for m in models}
    judges = []
    for judge in settings.judges:
        model = by_label.get(judge.model) or config.models_for([judge.model])[0]
        judges.append(Judge(judge, model))
    return judges


class JudgeInputs:
    """What a rubric is filled with, read from the run directory: the case's question and
    expect, the exact output text, the passages its retrieval returned."""

    def __init__(self, run_dir: Path, cases: dict[str, Case]) -> None:
        self.run_dir = run_dir
        self.cases = cases
        self.passages: dict[tuple[str, int], list[dict[str, Any]]] = {}
        for record in iter_jsonl(run_dir / "retrievals.jsonl", lambda message: None):
            if record.get("error") is None:
                self.passages[(record["case_id"], record["repeat"])] = record.get("passages") or []

    def messages(self, due: Due) -> list[dict[str, str]]:
        sample = due.sample
        case = self.cases[sample["case_id"]]
        output = read_output(self.run_dir, sample)
        passages = self.passages.get((case.id, sample["repeat"]), [])
        return judge_messages(due.judge.config, case.question, output, passages, case.expect)


def read_output(run_dir: Path, sample: dict[str, Any]) -> str:
    """A sample's output text as the judge sees it (its exact bytes, undecodable ones replaced)."""
    return read_raw(run_dir, sample).decode("utf-8", "replace")


def due_judgments(
    run_dir: Path,
    judges: list[Judge],
    cases: dict[str, Case],
    source: str = RUN_JUDGMENTS,
    samples: Iterable[dict[str, Any]] | None = None,
) -> Iterator[Due]:
    """The judgments not made yet of every output recorded (a failed sample has none to judge)."""
    done = set(latest_judgments(run_dir, source))
    for sample in iter_samples(run_dir) if samples is None else samples:
        if sample.get("error") or sample.get("raw") is None or sample["case_id"] not in cases:
            continue
        for judge in judges:
            for index in range(1, judge.config.repeats + 1):
                due = Due(sample, judge, index)
                if due.key not in done:
                    yield due


@dataclass
class JudgeCalls:
    """The judge models' providers and limiters, with the run's policy, tally and caps."""

    providers: dict[str, Provider]
    limiters: dict[str, Limiter]
    policy: RetryPolicy
    cancel: threading.Event
    tally: Tally
    prices: PriceTable
    concurrency: int = 8
    max_cost: float | None = None
    down: dict[str, str] = field(default_factory=dict)  # judge spec -> why it is not called


class JudgeRecorder:
    """Writes judgments: the request, the reply and its body through the store, one line each."""

    def __init__(self, store: RunStore, source: str = RUN_JUDGMENTS, layer: int | None = None) -> None:
        self.store = store
        self.source = source
        self.layer = layer

    def kind(self, due: Due, part: str) -> str:
        """The raw kind of one part (txt, body, request) of a judgment, stored under its sample's id:
        `judge.CHECK.K.PART`, or `judge.cN.CHECK.K.PART` for classification N's."""
        layer = f"c{self.layer}." if self.layer is not None else ""
        return f"judge.{layer}{due.judge.config.name}.{due.index}.{part}"

    def write(self, due: Due, part: str, data: bytes) -> dict[str, Any]:
        """A part's bytes into the run's pack through the store; its location (with its sample id)."""
        sid = due.sample["sample_id"]
        return {"sample_id": sid, **self.store.write_bytes(sid, self.kind(due, part), data)}

    def request(self, due: Due, messages: list[dict[str, str]]) -> dict[str, Any]:
        return self.write(due, "request", dumps_pretty(messages).encode("utf-8"))

    def line(self, due: Due, request: dict[str, Any] | None, via: str) -> dict[str, Any]:
        return {
            "sample_id": due.sample["sample_id"],
            "check": due.judge.config.name,
            "index": due.index,
            "layer": self.layer,
            "model": due.judge.model.spec,
            "rubric_sha256": due.judge.config.rubric_sha256,
            "label": None,
            "request": request,
            "reply": None,
            "response": None,
            "attempts": 0,
            "attempts_log": [],
            "error": None,
            "via": via,
            "judged_at": utc_now(),
        }

    def replied(self, line: dict[str, Any], due: Due, completion: Completion) -> None:
        """Fill a judgment from the judge's reply: its exact bytes, its body, its label."""
        body, withheld = SCRUBBER.clean_body(completion.body, completion.text)
        line["response"] = {
            "stop_reason": completion.stop_reason,
            "usage": completion.usage,
            "request_id": completion.request_id,
            "model": completion.model,
            "body": self.write(due, "body", body) if body is not None else None,
            **({"body_withheld": withheld} if withheld else {}),
        }
        text = completion.text or ""
        line["reply"] = self.write(due, "txt", text.encode("utf-8", "surrogatepass"))
        config = due.judge.config
        line["label"] = parse_reply(completion.text, config.pass_label, config.fail_label)
        if line["label"] is None:
            line["error"] = {
                "kind": "judge_unreadable",
                "message": f"the judge's reply does not end with a line that is exactly "
                f"{config.pass_label!r} or {config.fail_label!r}",
                "attempts": line["attempts"],
            }

    def failed(self, line: dict[str, Any], kind: str, message: str, attempts: int) -> None:
        line["error"] = {"kind": kind, "message": message, "attempts": attempts}

    def record(self, line: dict[str, Any]) -> None:
        """The judgment's line, after the bytes it points to (the store syncs the packs first)."""
        self.store.append(self.source, line)


def add_judge_cost(tally: Tally, prices: PriceTable, model: ModelSpec, line: dict[str, Any]) -> None:
    """Count what a judgment cost in the run's tally (at its judge model's price)."""
    usage = (line.get("response") or {}).get("usage")
    if not usage:
        return
    price = prices.lookup(model)
    if price is None:
        tally.cost_known = False
        return
    tally.cost += price.cost_of(split_usage(usage), batch=line.get("via") == "batch")


class LiveJudging:
    """Live judge calls, `concurrency` at a time; `stopped_by` says when --max-cost stopped it."""

    def __init__(self, calls: JudgeCalls, inputs: JudgeInputs, recorder: JudgeRecorder) -> None:
        self.calls = calls
        self.inputs = inputs
        self.recorder = recorder
        self.lock = threading.Lock()
        self.stopped_by: str | None = None
        self.judged = 0

    def run(self, dues: Iterable[Due]) -> None:
        iterator = iter(dues)

        def next_due() -> Due | None:
            with self.lock:
                if self.calls.cancel.is_set() or self.stopped_by:
                    return None
                if self.calls.max_cost is not None and self.calls.tally.cost >= self.calls.max_cost:
                    self.stopped_by = "max_cost"
                    return None
                return next(iterator, None)

        def worker() -> None:
            while (due := next_due()) is not None:
                self.judge(due)

        with ThreadPoolExecutor(max_workers=max(1, self.calls.concurrency)) as pool:
            futures = [pool.submit(worker) for _ in range(max(1, self.calls.concurrency))]
            try:
                for future in futures:
                    future.result()
            except BaseException:
                self.calls.cancel.set()  # Ctrl-C or a bug: no new judgment starts, calls in flight end
                raise

    def judge(self, due: Due) -> None:
        """Make one judgment and record it (nothing is recorded when the run was cancelled)."""
        calls, spec = self.calls, due.judge.model.spec
        try:
            messages = self.inputs.messages(due)
        except (OSError, KeyError, ValueError, InputError) as exc:  # the output cannot be read back
            line = self.recorder.line(due, None, "live")
            self.recorder.failed(line, "judge_input", f"cannot build the judge's request: {exc}", 0)
            self._write(due, line)
            return
        line = self.recorder.line(due, self.recorder.request(due, messages), "live")
        if spec in calls.down:
            self.recorder.failed(line, "model_down", calls.down[spec], 0)
            self._write(due, line)
            return
        provider, limiter = calls.providers[spec], calls.limiters.get(spec)
        try:
            completion, attempts, log = call_with_retries(
                lambda: provider.complete(messages, calls.cancel),
                calls.policy,
                calls.cancel,
                limiter,
                retryable_kinds=(ProviderError,),
            )
        except Cancelled:
            return
        except Attempted as failure:
            if getattr(failure.error, "kind", None) == "cancelled":
                return  # Ctrl-C cut the call: a resume judges it
            line.update(attempts=failure.attempts, attempts_log=failure.log)
            self.recorder.failed(
                line, getattr(failure.error, "kind", "error"), str(failure.error), failure.attempts
            )
            self._write(due, line)
            return
        line.update(attempts=attempts, attempts_log=log)
        if limiter is not None:
            limiter.observe(completion.headers)
        self.recorder.replied(line, due, completion)
        self._write(due, line)

    def _write(self, due: Due, line: dict[str, Any]) -> None:
        self.recorder.record(line)
        with self.lock:
            self.judged += 1
            add_judge_cost(self.calls.tally, self.calls.prices, due.judge.model, line)
