"""The runner: plans case x repeat x prompt x model, retrieves once per (case, repeat), calls
each arm with one retry policy, and records every sample the moment it finishes."""

import json
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential_jitter

from . import __version__
from .assemble import AssembleError, Assembler, default_messages, production_assembler
from .config import TargetConfig
from .errors import InputError, StartError
from .header import classify
from .models import ModelSpec
from .probeset import Case, ProbeSet
from .prompts import PromptVersion
from .providers import GenerationParams, Provider, ProviderError, make_provider
from .retrieval import Passage, RetrievalError, Retriever, make_retriever, redact, snapshot_digest
from .store import SCHEMA_VERSION, RunStore, utc_now

T = TypeVar("T")
# A model whose first calls all fail to connect after retries is down, not flaky.
UNREACHABLE_LIMIT = 3


@dataclass(frozen=True)
class Arm:
    index: int
    prompt: PromptVersion
    model: ModelSpec

    def to_dict(self) -> dict[str, Any]:
        return {"arm": self.index, "prompt": self.prompt.name, "model": self.model.spec}


@dataclass
class RunOptions:
    repeats: int | None = None  # None: the config's, else the probe set's
    params: GenerationParams = field(default_factory=GenerationParams)
    concurrency: int = 8
    max_attempts: int = 4
    backoff_initial: float = 1.0
    backoff_max: float = 60.0
    runs_dir: Path = Path("runs")
    seed: int | None = None
    sleep: Callable[[float], None] = time.sleep  # tests record waits instead of sleeping


@dataclass
class RunOutcome:
    path: Path
    planned: int
    recorded: int
    errors: int
    status: str


@dataclass
class RetrievalResult:
    passages: list[Passage] | None
    error: RetrievalError | None
    attempts: int


class Attempted(Exception):
    """A call that failed after `attempts` tries; wraps the last error."""

    def __init__(self, error: Exception, attempts: int) -> None:
        super().__init__(str(error))
        self.error = error
        self.attempts = attempts


def _retryable(exc: BaseException) -> bool:
    return bool(getattr(exc, "retryable", False))


def call_with_retries(call: Callable[[], T], options: RunOptions) -> tuple[T, int]:
    """Run `call` under the one retry policy; returns (result, attempts) or raises Attempted."""
    backoff = wait_exponential_jitter(
        multiplier=options.backoff_initial, max=options.backoff_max, jitter=options.backoff_initial
    )

    def wait(state: Any) -> float:
        error = state.outcome.exception() if state.outcome else None
        retry_after = getattr(error, "retry_after", None)
        if retry_after is not None:  # the server said when; do as it says, within our cap
            return min(retry_after, options.backoff_max)
        return backoff(state)

    attempts = 0

    def attempt() -> T:
        nonlocal attempts
        attempts += 1
        return call()

    retrying = Retrying(
        stop=stop_after_attempt(options.max_attempts),
        wait=wait,
        retry=retry_if_exception(_retryable),
        sleep=options.sleep,
        reraise=True,
    )
    try:
        return retrying(attempt), attempts
    except (ProviderError, RetrievalError, AssembleError) as exc:
        raise Attempted(exc, attempts) from exc


def plan_arms(prompts: Sequence[PromptVersion], models: Sequence[ModelSpec]) -> list[Arm]:
    names = [p.name for p in prompts]
    duplicate = next((n for n in names if names.count(n) > 1), None)
    if duplicate:
        raise InputError(f"two prompt files are both named {duplicate!r}: rename one")
    specs = [m.spec for m in models]
    if len(set(specs)) != len(specs):
        raise InputError("the same model is given twice")
    return [Arm(i, p, m) for i, (p, m) in enumerate(((p, m) for p in prompts for m in models), 1)]


def sample_id(case: Case, repeat: int, arm: Arm) -> str:
    return f"{case.id}.r{repeat}.a{arm.index}"


class Runner:
    def __init__(
        self,
        probeset: ProbeSet,
        prompts: Sequence[PromptVersion],
        models: Sequence[ModelSpec],
        config: TargetConfig,
        options: RunOptions,
        on_sample: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        if not prompts:
            raise InputError("no prompt: give --prompt FILE")
        if not models:
            raise InputError("no model: give --model SPEC or list [run] models in probe.toml")
        self.probeset = probeset
        self.config = config
        self.options = options
        self.repeats = options.repeats or probeset.repeats
        self.arms = plan_arms(prompts, models)
        self.on_sample = on_sample or (lambda record: None)
        # Every key is checked before any call is made.
        self.providers: dict[str, Provider] = {}
        for model in models:
            self.providers[model.spec] = make_provider(model, options.params)
        base_dir = config.path.parent if config.path else Path.cwd()
        self.retriever: Retriever = make_retriever(config.retrieval, base_dir)
        self.assemble: Assembler = (
            production_assembler(config.assemble_function) if config.assemble_function else default_messages
        )
        self.store: RunStore | None = None
        self.lock = threading.Lock()
        self.abort: StartError | None = None
        self.model_health: dict[str, dict[str, int]] = {}
        self.counts = {
            "planned": len(probeset.cases) * self.repeats * len(self.arms),
            "recorded": 0,
            "errors": 0,
        }

    # -- retrieval -------------------------------------------------------------------------

    def _retrieve(self, case: Case) -> RetrievalResult:
        try:
            passages, attempts = call_with_retries(
                lambda: self.retriever.retrieve(case.question, case.history), self.options
            )
        except Attempted as failure:
            assert isinstance(failure.error, RetrievalError)
            return RetrievalResult(None, failure.error, failure.attempts)
        return RetrievalResult(passages, None, attempts)

    def _record_retrieval(self, case: Case, repeat: int, result: RetrievalResult, started: str) -> None:
        assert self.store is not None
        passages = result.passages or []
        self.store.append_retrieval(
            {
                "case_id": case.id,
                "repeat": repeat,
                "retrieved_at": started,
                "retriever": self.retriever.description,
                "attempts": result.attempts,
                "passages": [p.to_dict() for p in passages],
                "sha256": snapshot_digest(passages) if result.passages is not None else None,
                "error": str(result.error) if result.error else None,
            }
        )

    # -- samples ---------------------------------------------------------------------------

    def _sample(self, case: Case, repeat: int, arm: Arm, retrieval: RetrievalResult) -> dict[str, Any]:
        assert self.store is not None
        sid = sample_id(case, repeat, arm)
        record: dict[str, Any] = {
            "sample_id": sid,
            "case_id": case.id,
            "repeat": repeat,
            "prompt": arm.prompt.name,
            "model": arm.model.spec,
            "started_at": utc_now(),
            "latency_ms": None,
            "attempts": 0,
            "retrieval": None,
            "response": None,
            "raw": None,
            "header": None,
            "error": None,
        }
        if retrieval.passages is None:
            record["error"] = {
                "kind": "retrieval",
                "message": str(retrieval.error),
                "attempts": retrieval.attempts,
            }
            return record
        passages = retrieval.passages
        record["retrieval"] = {
            "passage_ids": [p.id for p in passages],
            "scores": [p.score for p in passages],
            "sha256": snapshot_digest(passages),
        }
        started = time.monotonic()
        try:
            messages = self.assemble(arm.prompt.text, case.question, passages, case.history)
            self.store.write_bytes(f"raw/{sid}.request.json", _json_bytes(messages))
            provider = self.providers[arm.model.spec]
            completion, attempts = call_with_retries(lambda: provider.complete(messages), self.options)
        except AssembleError as exc:
            record["error"] = {"kind": "assemble", "message": str(exc), "attempts": 0}
            return record
        except Attempted as failure:
            kind = getattr(failure.error, "kind", "error")
            record.update(attempts=failure.attempts, latency_ms=round((time.monotonic() - started) * 1000))
            record["error"] = {"kind": kind, "message": str(failure.error), "attempts": failure.attempts}
            return record
        except Exception as exc:  # an SDK or production-code surprise: this sample's error
            record["latency_ms"] = round((time.monotonic() - started) * 1000)
            record["error"] = {"kind": "unexpected", "message": f"{type(exc).__name__}: {exc}", "attempts": 1}
            return record
        record["latency_ms"] = round((time.monotonic() - started) * 1000)
        record["attempts"] = attempts
        record["response"] = {
            "stop_reason": completion.stop_reason,
            "usage": completion.usage,
            "request_id": completion.request_id,
            "model": completion.model,
            "body": self.store.write_bytes(f"raw/{sid}.body", completion.body)["path"],
        }
        # The exact bytes the API returned, never stripped or re-encoded.
        record["raw"] = self.store.write_bytes(
            f"raw/{sid}.txt", completion.text.encode("utf-8", "surrogatepass")
        )
        record["header"] = classify(completion.text, self.config.header)
        return record

    def _run_sample(self, case: Case, repeat: int, arm: Arm, retrieval: RetrievalResult) -> None:
        if self.abort is not None:
            return  # the model is down: do not queue more calls against it
        record = self._sample(case, repeat, arm, retrieval)
        assert self.store is not None
        self.store.append_sample(record)
        with self.lock:
            self.counts["recorded"] += 1
            if record["error"]:
                self.counts["errors"] += 1
            self._watch_model(arm.model, record)
            self.on_sample(record)

    def _watch_model(self, model: ModelSpec, record: dict[str, Any]) -> None:
        """Stop the run when a model's first calls all fail to connect: the target is down."""
        seen = self.model_health.setdefault(model.spec, {"ok": 0, "unreachable": 0})
        error = record["error"]
        if error is None:
            seen["ok"] += 1
        elif error["kind"] == "connection":
            seen["unreachable"] += 1
        if seen["ok"] == 0 and seen["unreachable"] >= UNREACHABLE_LIMIT and self.abort is None:
            where = self.store.path if self.store else "the run directory"
            self.abort = StartError(
                f"{error['message']}: the model looks down (its first {seen['unreachable']} samples "
                f"could not connect after retries); the samples recorded so far are in {where}"
            )

    # -- the run ---------------------------------------------------------------------------

    def manifest(self, status: str, created: str, finished: str | None) -> dict[str, Any]:
        params = self.options.params
        return {
            "schema_version": SCHEMA_VERSION,
            "tool": "promptprobe",
            "tool_version": __version__,
            "created": created,
            "finished": finished,
            "status": status,
            "probeset": {
                "name": self.probeset.name,
                "path": str(self.probeset.path),
                "sha256": self.probeset.sha256,
                "copy": "probeset.toml",
                "source": self.probeset.source.decode("utf-8"),
                "cases": [c.id for c in self.probeset.cases],
            },
            "prompts": [
                {
                    "name": p.name,
                    "path": str(p.path),
                    "sha256": p.sha256,
                    "copy": f"prompts/{p.name}{p.path.suffix}",
                }
                for p in dict.fromkeys(a.prompt for a in self.arms)
            ],
            "models": [m.to_dict() for m in dict.fromkeys(a.model for a in self.arms)],
            "arms": [a.to_dict() for a in self.arms],
            "parameters": {
                "max_tokens": params.max_tokens,
                "temperature": params.temperature,
                "seed": params.seed,
                "stream": params.stream,
                "timeout": params.timeout,
                "concurrency": self.options.concurrency,
                "max_attempts": self.options.max_attempts,
            },
            "target": {
                "config": str(self.config.path) if self.config.path else None,
                "retrieval": redact(self.config.retrieval),
                "assemble": self.config.assemble_function,
            },
            "header": self.config.header.to_dict(),
            "repeats": self.repeats,
            "seed": self.options.seed,
            "counts": dict(self.counts),
        }

    def run(self) -> RunOutcome:
        plan = [(case, repeat) for case in self.probeset.cases for repeat in range(1, self.repeats + 1)]
        # Retrieve the first question before creating anything: a target that is down stops here.
        first_started = utc_now()
        first = self._retrieve(plan[0][0])
        if first.error is not None and first.error.unreachable:
            self.close()
            raise StartError(f"{first.error}; nothing was run")
        created = utc_now()
        self.store = RunStore.create(self.options.runs_dir, self.probeset.name)
        self.store.write_bytes("probeset.toml", self.probeset.source)
        for arm in self.arms:
            self.store.write_bytes(f"prompts/{arm.prompt.name}{arm.prompt.path.suffix}", arm.prompt.source)
        self.store.write_manifest(self.manifest("running", created, None))
        status = "failed"
        try:
            with ThreadPoolExecutor(max_workers=self.options.concurrency) as pool:
                retrievals: dict[tuple[str, int], RetrievalResult] = {(plan[0][0].id, 1): first}
                self._record_retrieval(plan[0][0], 1, first, first_started)

                def retrieve(item: tuple[Case, int]) -> None:
                    started = utc_now()
                    result = self._retrieve(item[0])
                    retrievals[(item[0].id, item[1])] = result
                    self._record_retrieval(item[0], item[1], result, started)

                list(pool.map(retrieve, plan[1:]))
                tasks = [(case, repeat, arm) for case, repeat in plan for arm in self.arms]
                futures = [pool.submit(self._run_sample, c, r, a, retrievals[(c.id, r)]) for c, r, a in tasks]
                try:
                    for future in as_completed(futures):
                        future.result()
                except BaseException:
                    pool.shutdown(wait=False, cancel_futures=True)
                    raise
            if self.abort is not None:
                raise self.abort
            status = "complete"
        except KeyboardInterrupt:
            status = "interrupted"
            raise
        finally:
            self.store.write_manifest(self.manifest(status, created, utc_now()))
            self.close()
        return RunOutcome(
            self.store.path, self.counts["planned"], self.counts["recorded"], self.counts["errors"], status
        )

    def close(self) -> None:
        self.retriever.close()
        for provider in self.providers.values():
            provider.close()


def _json_bytes(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, indent=2).encode("utf-8")


def run_probe(
    probeset: ProbeSet,
    prompts: Sequence[PromptVersion],
    models: Sequence[ModelSpec],
    config: TargetConfig,
    options: RunOptions,
    on_sample: Callable[[dict[str, Any]], None] | None = None,
) -> RunOutcome:
    """Run every case x repeat x prompt x model and record it; see DESIGN.md for the layout."""
    return Runner(probeset, prompts, models, config, options, on_sample).run()
