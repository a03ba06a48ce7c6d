"""A probe run from start to finish: check every key and import before any call, write the
manifest first, let the scheduler work through the plan, and finish the manifest whatever
happened (complete, interrupted, failed). `resume_run` finishes a run from its own manifest.
"""

import hashlib
import os
import random
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .. import endpoints
from ..checks import CheckSettings
from ..checks.judge import expect_problems
from ..config import Precedence, RunSettings, TargetConfig, load_config, settle_repeats
from ..errors import InputError, ProbeError
from ..jsonio import iter_jsonl, loads
from ..judgments import iter_judgments
from ..models import ModelSpec, model_of
from ..pack import INDEX
from ..paths import open_run_file, typed
from ..probeset import ProbeSet, parse_probeset
from ..prompts import PromptVersion, check_prompts, prompt_from_bytes
from ..providers import refuse_batch
from ..providers.base import GenerationParams
from .backend import Backend, Pass
from .backends import make_backend
from .cost import PriceTable, load_prices, refuse_unknown
from .judge_pass import judge_outputs
from .judging import add_judge_cost, resolve_judges
from .manifest import close_run_directory, create_run_directory, run_manifest
from .parts import RunParts
from .plan import Arm, Plan, Unit, make_arms, sample_id
from .preflight import preflight
from .recorder import Recorder, Tally, add_cost
from .retrieval import Retrieved, recorded_retrieval
from .retry import RetryPolicy
from .store import PRIVATE_UMASK, RunStore, load_manifest, run_state, utc_now

LARGE_PLAN = 100_000  # model calls above which a run asks for --yes
WRITE_GROUP = 500  # batch results written (and fsynced) together


@dataclass
class RunOptions:
    repeats: int | None = None  # None: the probe set's, else the config's [run], else 3
    params: GenerationParams = field(default_factory=GenerationParams)
    concurrency: int = 8
    max_attempts: int = 6
    backoff_initial: float = 1.0
    max_retry_wait: float = 60.0
    rpm: float = 0.0
    runs_dir: Any = Path("runs")  # a folder, or a runs store in S3 (runstore.Store)
    seed: int | None = None  # orders the plan; random (and recorded) when not given
    sleep: Callable[[float], None] | None = None  # tests record retry waits instead of sleeping
    umask: int = PRIVATE_UMASK
    max_cost: float | None = None
    top_k: int | None = None
    yes: bool = False  # run a plan larger than LARGE_PLAN calls
    batch: bool = False  # send the calls through the providers' batch APIs
    poll_interval: float = 30.0  # seconds between looks at a batch in progress
    cancel_batches: bool = False  # (resume) cancel the batches still running, submit nothing new
    judge_concurrency: int | None = None  # judge calls at a time (None: concurrency); 1 judges in a set order
    settings: dict[str, dict[str, Any]] = field(default_factory=dict)  # {name: {value, from}}

    def policy(self) -> RetryPolicy:
        return RetryPolicy(self.max_attempts, self.backoff_initial, self.max_retry_wait, self.sleep)


def options_from(
    settings: RunSettings,
    runs_dir: Any,
    *,
    repeats: int | None = None,
    max_tokens: int | None = None,
    temperature: float | None = None,
    seed: int | None = None,
    stream: bool | None = None,
    timeout: float | None = None,
    cache: bool | None = None,
    concurrency: int | None = None,
    max_attempts: int | None = None,
    max_retry_wait: float | None = None,
    rpm: float | None = None,
    batch: bool | None = None,
    poll_interval: float | None = None,
    max_cost: float | None = None,
    top_k: int | None = None,
    share: bool = False,
    yes: bool = False,
    precedence: Precedence | None = None,
) -> RunOptions:
    """How a run calls, by one precedence (config.Precedence): a value given here (not None)
    wins over the probe set's own (repeats), which wins over the config's [run], which wins over
    the defaults. `settings` on the options records each value and where it came from."""
    order = precedence or Precedence(settings)
    record: dict[str, dict[str, Any]] = {}

    def chosen(name: str, value: Any, default: Any = None) -> Any:
        value, source = order.choose(name, value, default)
        record[name] = {"value": value, "from": source}
        return value

    params = GenerationParams(
        max_tokens=chosen("max_tokens", max_tokens),
        temperature=chosen("temperature", temperature),
        seed=chosen("seed", seed),
        stream=chosen("stream", stream),
        timeout=chosen("timeout", timeout),
        cache=chosen("cache", cache),
    )
    umask = chosen("umask", 0o022 if share else None, PRIVATE_UMASK)
    record["umask"]["value"] = f"{umask:03o}"
    return RunOptions(
        repeats=chosen("repeats", repeats),
        params=params,
        concurrency=chosen("concurrency", concurrency),
        max_attempts=chosen("max_attempts", max_attempts),
        max_retry_wait=chosen("max_retry_wait", max_retry_wait),
        rpm=chosen("rpm", rpm),
        runs_dir=runs_dir,
        seed=params.seed,
        umask=umask,
        max_cost=max_cost,
        top_k=top_k,
        yes=yes,
        batch=chosen("batch", batch),
        poll_interval=poll_interval if poll_interval is not None else RunOptions.poll_interval,
        settings=record,
    )


@dataclass
class RunOutcome:
    path: Path
    planned: int
    recorded: int
    errors: int
    status: str
    stopped_by: str | None = None
    cost: float | None = None  # None when a model's price is unknown
    detached: list[str] = field(default_factory=list)  # batch ids still running at the provider


def make_plan(
    probeset: ProbeSet,
    prompts: Sequence[PromptVersion],
    models: Sequence[ModelSpec],
    config: TargetConfig,
    options: RunOptions,
) -> tuple[Plan, dict[str, dict[str, Any]]]:
    """What a run will ask, in which order, and where each setting came from; InputError when the
    prompts cannot be filled for the cases, or the plan is larger than LARGE_PLAN calls without --yes."""
    problems = check_prompts(prompts, probeset.cases, config.vars)
    for judge in config.checks.judges:
        problems += expect_problems(judge, probeset.cases)
    if problems:
        raise InputError("\n".join(problems))
    if options.batch:
        refuse_batch(models)
    arms = make_arms(prompts, models)
    seed = options.seed if options.seed is not None else random.SystemRandom().randrange(2**32)
    repeats, provenance = settle_repeats(config, probeset, options.repeats, options.settings)
    plan = Plan(probeset.cases, tuple(arms), repeats, seed)
    if plan.samples > LARGE_PLAN and not options.yes:
        raise InputError(
            f"this plan makes {plan.samples:,} model calls ({len(probeset.cases)} cases x "
            f"{repeats} repeats x {len(arms)} arms); add --yes to run it, or --dry-run to price it"
        )
    return plan, provenance


def stopped_early(abort: BaseException, store: RunStore, keep: bool, nothing: bool) -> BaseException:
    """Why a run stopped early, and what became of its directory (removed when it holds nothing
    to keep or resume; a run in a store leaves nothing there either)."""
    path = store.path
    if keep:
        return type(abort)(f"{abort}; what was sent is kept: probe run --resume {typed(path)} collects it")
    if nothing:
        store.discard()
        return type(abort)(f"{abort}; nothing was recorded, so no run directory was kept")
    return type(abort)(f"{abort}; the samples recorded so far are in {path}")


class ProbeRun:
    """One run being executed. Build it (keys are checked and production code imported here,
    before any call), then `execute()`; `cancel()` from another thread or a signal handler."""

    def __init__(
        self,
        probeset: ProbeSet,
        prompts: Sequence[PromptVersion],
        models: Sequence[ModelSpec],
        config: TargetConfig,
        options: RunOptions,
        on_record: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.probeset = probeset
        self.config = config
        self.options = options
        self.settings: CheckSettings = config.checks.with_top_k(options.top_k)
        # Where each setting came from (options_from says it for the others): the manifest keeps it.
        self.plan, self.provenance = make_plan(probeset, prompts, models, config, options)
        self.seed = self.plan.seed
        self.on_record = on_record
        self.cancel_event = threading.Event()
        self.prices: PriceTable = load_prices(config.prices)
        self.judges = resolve_judges(self.settings, models, config)
        if options.max_cost is not None:
            refuse_unknown(self.prices, [*models, *(j.model for j in self.judges)])
        self.parts = RunParts(list(models), config, self.settings, options, [j.model for j in self.judges])
        self.store: RunStore | None = None
        self.skip: Callable[[str], bool] = lambda sid: False
        self.reuse: dict[tuple[str, int], Retrieved] = {}
        self.tally = Tally()
        self.created = ""
        self.resumes: list[dict[str, Any]] = []
        self.extra_manifest: dict[str, Any] = {}
        self.down_models: dict[str, str] = {}  # model spec -> why it is not called
        self.on_start: Callable[[Path], None] | None = None  # told the run directory once it exists
        self.on_batches: Callable[[str], None] | None = None  # told how the batches are doing
        self.detached: list[str] = []

    def manifest(
        self, status: str, finished: str | None, counts: dict[str, int], stopped_by: str | None = None
    ) -> dict[str, Any]:
        return run_manifest(self, status, finished, counts, stopped_by)

    def counts(self) -> dict[str, int]:
        return {"planned": self.plan.samples, "recorded": self.tally.recorded, "errors": self.tally.errors}

    def cancel(self) -> None:
        """Stop: no new call starts; waits and streams in flight end at once."""
        self.cancel_event.set()

    # -- opening ---------------------------------------------------------------------------

    def open(self) -> None:
        """Check the target, then create the run directory (a resumed run opens its own)."""
        try:
            first, self.down_models = preflight(
                self.parts, self.plan, self.options.policy(), self.cancel_event
            )
            self.created = utc_now()
            self.store = create_run_directory(
                self.options.runs_dir,
                self.options.umask,
                self.probeset,
                [arm.prompt for arm in self.plan.arms],
                self.manifest("running", None, self.counts()),
            )
        except BaseException:
            self.close()
            raise
        if self.on_start is not None:
            self.on_start(self.store.path)
        if not first.failed:
            # A failure here had the short preflight policy: the back-end retries it in full.
            unit = Unit(self.plan.case_order(1)[0], 1)
            self.reuse[(unit.case.id, unit.repeat)] = first
            self.parts.retrieval(self.store, self.options.policy(), self.cancel_event).record(unit, first)

    # -- running ---------------------------------------------------------------------------

    def backend(self) -> Backend:
        """The back-end for one pass over units (a sequential run makes one per round)."""
        store, policy, cancel = self.store, self.options.policy(), self.cancel_event
        assert store is not None
        group = WRITE_GROUP if self.options.batch else 1
        recorder = Recorder(store, self.prices, self.tally, self.on_record, group)
        records = self.parts.records(store, self.settings, self.config.vars)
        retrieval = self.parts.retrieval(store, policy, cancel)
        work = Pass(self.plan, retrieval, records, recorder, cancel, self.skip, self.reuse, self.down_models)
        return make_backend(work, self.parts, self.options, self.prices, self.on_batches)

    def run_units(self, units: Iterable[Unit]) -> Backend:
        """Work through `units` (the run must be open); the back-end says how the pass ended."""
        backend = self.backend()
        try:
            backend.run(units)
        except BaseException:
            self.cancel()
            self.finish("interrupted", None)
            raise
        self.detached = list(backend.detached)
        finished = backend.abort is None and not backend.stopped_by and not self.cancel_event.is_set()
        if self.judges and finished:
            stopped = judge_outputs(self, backend)
            backend.stopped_by = backend.stopped_by or stopped
        return backend

    def execute(self) -> RunOutcome:
        """Run the plan and finish the manifest; raises the reason a run stopped early."""
        self.open()
        return self.conclude(self.run_units(self.plan.units()))

    # -- finishing -------------------------------------------------------------------------

    def conclude(self, backend: Backend) -> RunOutcome:
        if backend.abort is not None:
            self.finish("failed", None)
            assert self.store is not None
            nothing = self.counts()["recorded"] == 0 and not self.resumes
            raise stopped_early(backend.abort, self.store, backend.keep, nothing)
        status = "interrupted" if self.cancel_event.is_set() or backend.stopped_by else "complete"
        return self.finish(status, backend.stopped_by)

    def finish(self, status: str, stopped_by: str | None) -> RunOutcome:
        assert self.store is not None
        try:
            counts = close_run_directory(
                self.store,
                lambda: self.manifest(status, utc_now(), self.counts(), stopped_by),
                status == "failed",
            )
        finally:
            self.close()
        cost = self.tally.cost if self.tally.cost_known else None
        return RunOutcome(
            self.store.path,
            counts["planned"],
            counts["recorded"],
            counts["errors"],
            status,
            stopped_by,
            cost,
            list(self.detached),
        )

    def close(self) -> None:
        parts = getattr(self, "parts", None)  # absent when building them failed
        if parts is not None:
            parts.close()


def run_probe(
    probeset: ProbeSet,
    prompts: Sequence[PromptVersion],
    models: Sequence[ModelSpec],
    config: TargetConfig,
    options: RunOptions,
    on_record: Callable[[dict[str, Any]], None] | None = None,
) -> RunOutcome:
    """Run every case x repeat x prompt x model and record it; see docs/runs.md for the layout."""
    return ProbeRun(probeset, prompts, models, config, options, on_record).execute()


# -- resume ---------------------------------------------------------------------------------


class ResumedRun(ProbeRun):
    """A run finished from its own manifest: exactly the samples missing or errored are run."""

    def __init__(self, path: Path, manifest: dict[str, Any], options: RunOptions, **kwargs: Any) -> None:
        self.path = path
        self.previous = manifest
        super().__init__(**kwargs, options=options)
        self.created = manifest["created"]
        self.resumes = list(manifest.get("resumes") or [])
        self.extra_manifest = {k: manifest[k] for k in ("sequential",) if k in manifest}
        self.kept = 0
        self.kept_errors = 0
        self.changes: dict[str, dict[str, Any]] = {}
        # A failed sample kept as recorded, not re-run (a sequential round the rule has looked at).
        self.keep_failed: Callable[[dict[str, Any]], bool] = lambda record: False

    def prepare(self) -> tuple[set[str], dict[tuple[str, int], Retrieved]]:
        """Open the run, cut torn lines, set errored samples aside; what is done, what to reuse."""
        from ..runstore import open_run

        store = open_run(self.path)
        self.store = store
        for name in ("samples.jsonl", "retrievals.jsonl", INDEX):
            store.repair_tail(name)
        done: set[str] = set()
        kept_lines: list[bytes] = []
        superseded: list[bytes] = []
        samples_path = self.path / "samples.jsonl"
        arms = {(arm.prompt.name, arm.model.label): arm for arm in self.plan.arms}
        for record in iter_jsonl(self.path / "superseded.jsonl"):  # set aside by earlier resumes
            self.spent(arms, record)
        judge_models = {j.config.name: j.model for j in self.judges}
        for line in iter_judgments(self.path):  # judgments bought before: --max-cost counts them
            if line.get("check") in judge_models:
                add_judge_cost(self.tally, self.prices, judge_models[line["check"]], line)
        if samples_path.is_file():
            with open_run_file(self.path, "samples.jsonl") as handle:
                for line in handle:
                    if not line.strip():
                        continue
                    record = loads(line)
                    self.spent(arms, record)
                    settled = bool(record.get("error")) and self.keep_failed(record)
                    if (record.get("error") and not settled) or record["sample_id"] in done:
                        superseded.append(line if line.endswith(b"\n") else line + b"\n")
                    else:
                        done.add(record["sample_id"])
                        self.kept_errors += settled
                        kept_lines.append(line if line.endswith(b"\n") else line + b"\n")
        if superseded:
            # Earlier attempts are kept in superseded.jsonl; samples.jsonl keeps one record per id.
            for line in superseded:
                store.append("superseded.jsonl", loads(line))
            store.replace_file("samples.jsonl", b"".join(kept_lines))
        self.kept = len(done)
        missing_units = {
            (unit.case.id, unit.repeat)
            for unit in self.plan.units()
            if any(sample_id(unit.case.id, unit.repeat, a) not in done for a in self.plan.arms)
        }
        reuse: dict[tuple[str, int], Retrieved] = {}
        for record in iter_jsonl(self.path / "retrievals.jsonl"):
            key = (record["case_id"], record["repeat"])
            if key in missing_units and record.get("error") is None:
                reuse[key] = recorded_retrieval(record)
        self.resumes.append(
            {
                "at": utc_now(),
                "pid": os.getpid(),
                "kept": len(done),
                "set_aside": len(superseded),
                **({"changed": self.changes} if self.changes else {}),
            }
        )
        manifest = self.manifest("running", None, self.counts())
        store.write_manifest(manifest)
        store.reserve(2 * len(str(manifest)))
        if self.on_start is not None:
            self.on_start(store.path)
        return done, reuse

    def spent(self, arms: dict[tuple[Any, Any], Arm], record: dict[str, Any]) -> None:
        """Count what a sample recorded before this resume cost: --max-cost caps the whole run."""
        arm = arms.get((record.get("prompt"), record.get("model")))
        if arm is not None:
            add_cost(self.tally, self.prices, arm, record)

    def counts(self) -> dict[str, int]:
        return {
            "planned": self.plan.samples,
            "recorded": self.kept + self.tally.recorded,
            "errors": self.kept_errors + self.tally.errors,
        }

    def open(self) -> None:
        done, self.reuse = self.prepare()
        self.skip = done.__contains__


def _verified(path: Path, relative: str, sha256: str, what: str) -> bytes:
    try:
        with open_run_file(path, relative) as handle:  # a link or a FIFO is refused, never read
            data = handle.read()
    except OSError as exc:
        raise InputError(f"{path / relative}: cannot read the {what} copy ({exc.strerror})") from None
    if hashlib.sha256(data).hexdigest() != sha256:
        raise InputError(f"{path / relative}: the {what} copy does not match its sha256 in the manifest")
    return data


# What a resumed run may change: how it calls, not what it measures.
RESUME_CHANGEABLE = ("concurrency", "rpm", "timeout", "max_attempts", "max_retry_wait", "max_cost")


def resume_run(
    path: str | Path,
    options: RunOptions | None = None,
    on_record: Callable[[dict[str, Any]], None] | None = None,
    prompts: Sequence[PromptVersion] | None = None,
    models: Sequence[ModelSpec] | None = None,
    probeset: ProbeSet | None = None,
    changes: dict[str, Any] | None = None,
) -> ResumedRun:
    """A run to finish from its manifest. Prompts, models or a probe set given here must be the
    ones the run used (same sha256 / specs), else it is refused. `changes` may set any of
    RESUME_CHANGEABLE; they are used from now on and recorded in the manifest's `resumes`."""
    path = Path(path)
    manifest = load_manifest(path)
    for key in ("created", "counts", "repeats", "seed"):
        if key not in manifest:
            raise InputError(f"{path}: not a resumable run: manifest.json lacks {key}")
    try:
        return _resume(path, manifest, options, on_record, prompts, models, probeset, changes)
    except (KeyError, TypeError, AttributeError) as exc:
        raise InputError(
            f"{path}: not a resumable run: manifest.json is damaged ({type(exc).__name__}: {exc})"
        ) from None


def _resume(
    path: Path,
    manifest: dict[str, Any],
    options: RunOptions | None,
    on_record: Callable[[dict[str, Any]], None] | None,
    prompts: Sequence[PromptVersion] | None,
    models: Sequence[ModelSpec] | None,
    probeset: ProbeSet | None,
    changes: dict[str, Any] | None,
) -> ResumedRun:
    state = run_state(path, manifest)
    if state == "running":
        raise InputError(f"{path}: the run is still going (pid {manifest.get('pid')}); nothing to resume")
    if state == "complete" and manifest["counts"].get("errors", 0) == 0:
        recorded = sum(1 for _ in iter_jsonl(path / "samples.jsonl"))
        if recorded >= manifest["counts"]["planned"]:
            raise InputError(f"{path}: the run is complete with no failed samples; nothing to resume")
    recorded_probeset = parse_probeset(
        _verified(path, manifest["probeset"]["copy"], manifest["probeset"]["sha256"], "probe set"),
        Path(manifest["probeset"]["path"]),
    )
    if probeset is not None and probeset.sha256 != recorded_probeset.sha256:
        raise InputError(f"{probeset.path}: differs from the probe set this run used (sha256 changed)")
    recorded_prompts = [
        prompt_from_bytes(p["name"], Path(p["path"]), _verified(path, p["copy"], p["sha256"], "prompt"))
        for p in manifest["prompts"]
    ]
    if prompts is not None and sorted(p.sha256 for p in prompts) != sorted(
        p.sha256 for p in recorded_prompts
    ):
        raise InputError(
            "the prompts given differ from the ones this run used (sha256); resume takes them "
            "from the run itself: give no --prompt"
        )
    recorded_models = [model_of(m) for m in manifest["models"]]
    moved = endpoints.changed(manifest["models"], recorded_models)
    if moved:
        raise InputError(
            f"{path}: {'; '.join(moved)}: a resumed run calls where it started "
            "(set the endpoint back as it was, or start a new run)"
        )
    if models is not None and sorted(m.spec for m in models) != sorted(m.spec for m in recorded_models):
        raise InputError("the models given differ from the ones this run used; give no --model")
    settings = CheckSettings.from_dict(manifest.get("checks") or {"header": manifest.get("header")})
    config = replace(_recorded_config(manifest), checks=replace(settings, top_k=None))
    changes = {k: v for k, v in (changes or {}).items() if v is not None}
    unknown = sorted(set(changes) - set(RESUME_CHANGEABLE))
    if unknown:
        raise InputError(f"a resumed run cannot change {', '.join(unknown)}")
    run_options = _resumed_options(manifest, options or RunOptions(), changes, settings.top_k)
    resumed = ResumedRun(
        path,
        manifest,
        run_options,
        probeset=recorded_probeset,
        prompts=recorded_prompts,
        models=recorded_models,
        config=config,
        on_record=on_record,
    )
    resumed.changes = {
        k: {"from": (manifest.get("parameters") or {}).get(k), "to": v} for k, v in changes.items()
    }
    return resumed


def _recorded_config(manifest: dict[str, Any]) -> TargetConfig:
    """The target config the run started with, refused when it changed since."""
    target = manifest.get("target") or {}
    config_path = target.get("config")
    if not config_path:
        return TargetConfig()
    config = load_config(config_path)
    if target.get("config_sha256") and config.sha256 != target["config_sha256"]:
        raise InputError(
            f"{config_path}: the target config changed since the run started (sha256); "
            "resume needs the same target"
        )
    return config


def _resumed_options(
    manifest: dict[str, Any], base: RunOptions, changes: dict[str, Any], top_k: int | None
) -> RunOptions:
    """The run's own settings, with the few a resume may change (RESUME_CHANGEABLE) changed."""
    parameters = {**(manifest.get("parameters") or {}), **changes}
    params = GenerationParams(
        max_tokens=parameters.get("max_tokens", 1024),
        temperature=parameters.get("temperature"),
        seed=parameters.get("seed"),
        stream=parameters.get("stream", False),
        timeout=parameters.get("timeout", 120.0),
        cache=parameters.get("cache", False),
    )
    return replace(
        base,
        repeats=manifest["repeats"],
        params=params,
        concurrency=parameters.get("concurrency", base.concurrency),
        max_attempts=parameters.get("max_attempts", base.max_attempts),
        max_retry_wait=parameters.get("max_retry_wait", base.max_retry_wait),
        rpm=parameters.get("rpm", base.rpm) or 0.0,
        # The run's own cap holds unless --max-cost changes it (a resume is no way around it).
        max_cost=parameters["max_cost"] if parameters.get("max_cost") is not None else base.max_cost,
        seed=manifest["seed"],
        top_k=top_k,
        yes=True,
        batch=parameters.get("batch", False),
        settings={
            **(manifest.get("settings") or {}),
            **{name: {"value": value, "from": "flag (resume)"} for name, value in changes.items()},
        },
    )


__all__ = ["ProbeError", "ProbeRun", "RunOptions", "RunOutcome", "resume_run", "run_probe"]
