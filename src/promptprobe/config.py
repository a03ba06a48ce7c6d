"""The target config (`probe.toml`): how a question reaches the model in the system under test,
what the checks look for, and the run's defaults."""

import hashlib
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from . import names
from .checks.settings import (
    DEFAULT_CHECK_TIMEOUT,
    CheckSettings,
    CitationConfig,
    FilterConfig,
    HeaderConfig,
    JudgeConfig,
    UserCheckConfig,
)
from .errors import InputError
from .judge_config import check_name_problem, judge_check
from .limits import range_problem
from .models import ModelSpec, check_names, split_name
from .paths import is_file, shown
from .providers import parse_spec
from .tomlfile import check_keys, did_you_mean, parse_toml, read_input, unknown_keys

RETRIEVAL_KINDS = ("http", "python", "none", "local")
RETRIEVAL_KEYS = {
    "http": {
        "kind", "url", "method", "body", "headers", "results", "id", "text", "score", "timeout",
        "max_bytes", "max_decompressed_bytes", "max_depth",
    },
    "python": {"kind", "function", "id", "text", "score"},
    "none": {"kind"},
    "local": {"kind", "path", "k"},
}
TOP_KEYS = {"retrieval", "assemble", "header", "filter", "citations", "run", "prices", "vars", "check"}
CHECK_KEYS = {"name", "kind", "function", "higher_is_better", "description", "timeout"}
CHECK_KINDS = ("function", "judge")
ASSEMBLE_KEYS = {"function"}
HEADER_KEYS = {"markers", "no_answer", "allow_leading_whitespace"}
FILTER_KEYS = {"function", "no_answer_status"}
CITATION_KEYS = {"pattern"}
RUN_KEYS = {
    "models",
    "repeats",
    "max_tokens",
    "concurrency",
    "temperature",
    "seed",
    "timeout",
    "max_attempts",
    "max_retry_wait",
    "rpm",
    "stream",
    "umask",
    "runs_dir",
    "batch",
    "cache",
}
MODEL_KEYS = {"name", "spec", "api_key_env", "api_version", "region", "project"}


@dataclass(frozen=True)
class RunSettings:
    models: tuple[ModelSpec, ...] = ()
    repeats: int | None = None  # None: the probe set's own
    max_tokens: int = 1024
    concurrency: int = 8
    temperature: float | None = None  # sent only when set
    seed: int | None = None
    timeout: float = 120.0  # the whole call, body included
    max_attempts: int = 6
    max_retry_wait: float = 60.0
    rpm: float = 0.0  # requests per minute per provider; 0: no limit
    stream: bool = False
    umask: int | None = None  # None: private (directories 0700, files 0600)
    runs_dir: str | None = None  # where runs are written: a folder, or a runs store s3://BUCKET/PREFIX
    batch: bool = False  # through the providers' batch APIs
    cache: bool = False  # prompt caching marks (Anthropic)
    given: frozenset[str] = frozenset()  # the keys [run] itself sets (the rest are defaults)


@dataclass(frozen=True)
class TargetConfig:
    path: Path | None = None
    sha256: str | None = None
    retrieval: dict[str, Any] = field(default_factory=lambda: {"kind": "none"})
    assemble_function: str | None = None
    checks: CheckSettings = field(default_factory=CheckSettings)
    run: RunSettings = field(default_factory=RunSettings)
    prices: dict[str, Any] = field(default_factory=dict)
    retrieval_given: bool = False  # the file has a [retrieval] table (kind = "none" included)
    vars: dict[str, str] = field(default_factory=dict)  # values of {{NAME}} in prompts

    def models_for(self, specs: Sequence[str]) -> list[ModelSpec]:
        """The models to run: `specs` (one also listed in [run] keeps its api_key_env and the
        rest of its table from there), or [run]'s models when none is given. `NAME=SPEC` names a
        model's arm; a bare NAME picks the [run] model of that name."""
        if not specs:
            return list(self.run.models)
        configured = {m.spec: m for m in self.run.models}
        by_name = {m.name: m for m in self.run.models if m.name}
        chosen = []
        for text in specs:
            if isinstance(text, str) and text in by_name:
                chosen.append(by_name[text])
                continue
            if isinstance(text, str) and by_name and ":" not in text and "=" not in text:
                raise InputError(  # a mistyped name reads better as one than as a malformed spec
                    f"model {text!r}: no [run] models entry has that name (names: {', '.join(by_name)})"
                    f"{did_you_mean(text, set(by_name))}, and it is not a spec PROVIDER:MODEL"
                )
            name, spec = split_name(text) if isinstance(text, str) else (None, text)
            model = configured.get(spec) or parse_spec(spec)
            chosen.append(replace(model, name=name) if name else model)
        return chosen

    @property
    def header(self) -> HeaderConfig:
        return self.checks.header

    @property
    def base_dir(self) -> Path:
        """Relative paths in the config (a local document folder) are relative to its file."""
        return self.path.parent if self.path else Path.cwd()


class ConfigInvalid(InputError):
    """Every problem found in one target config, one line each."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


class _Problems:
    """Collects a config's problems so that all of them are reported at once."""

    def __init__(self) -> None:
        self.items: list[str] = []

    def attempt(self, check: Callable[[], Any], default: Any = None) -> Any:
        """`check()`, or `default` with its problem noted."""
        try:
            return check()
        except ConfigInvalid as exc:
            self.items.extend(exc.problems)
        except InputError as exc:
            self.items.append(str(exc))
        return default

    def keys(self, table: dict[str, Any], allowed: set[str], where: str) -> None:
        message = unknown_keys(table, allowed, where)
        if message:
            self.items.append(message)


FROM_PROBESET = "probe set"
FROM_DEFAULT = "default"


@dataclass(frozen=True)
class Precedence:
    """Where each run setting comes from, the first that gives it: the command's flags (or the
    Python API's arguments), the probe set (its `repeats`), the target's [run], the default."""

    run: RunSettings = field(default_factory=RunSettings)
    probeset_repeats: int | None = None  # the probe set's own `repeats`, when its file says one
    given_as: str = "flag"
    run_label: str = "probe.toml [run]"

    def choose(self, name: str, given: Any, default: Any = None) -> tuple[Any, str]:
        """(value, where it came from) for setting `name`, `given` on the command line or None."""
        if given is not None:
            return given, self.given_as
        if name == "repeats" and self.probeset_repeats is not None:
            return self.probeset_repeats, FROM_PROBESET
        if name in self.run.given:
            return getattr(self.run, name), self.run_label
        configured = getattr(self.run, name, None)
        return (configured if default is None else default), FROM_DEFAULT

    @staticmethod
    def of(config: "TargetConfig", probeset: Any = None, given_as: str = "flag") -> "Precedence":
        """The precedence of a run of `probeset` (a ProbeSet, or None) on `config`."""
        label = f"{config.path.name if config.path else 'probe.toml'} [run]"
        repeats = probeset.repeats if probeset is not None and probeset.repeats_given else None
        return Precedence(config.run, repeats, given_as, label)


def settle_repeats(
    config: "TargetConfig", probeset: Any, given: int | None, record: dict[str, dict[str, Any]]
) -> tuple[int, dict[str, dict[str, Any]]]:
    """The repeats of a run of `probeset` (a ProbeSet), and the settings `record` with where they
    came from: `given` is the options' repeats (settled already when `record` says from where)."""
    source = record.get("repeats", {}).get("from") if given is not None else None
    repeats, found = Precedence.of(config, probeset, "argument").choose("repeats", given, probeset.repeats)
    return repeats, {**record, "repeats": {"value": repeats, "from": source or found}}


def models_setting(
    specs: Sequence[str], models: Sequence[ModelSpec], precedence: Precedence
) -> dict[str, Any]:
    """The `models` entry of a run's settings record."""
    source = precedence.given_as if specs else precedence.run_label if models else FROM_DEFAULT
    return {"value": [m.spec for m in models], "from": source}


def _table(data: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise InputError(f"{where}: [{key}] must be a table")
    return value


def _typed(
    table: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str, minimum: float | None = None
) -> Any:
    value = table.get(key)
    if value is None:
        return None
    if isinstance(value, bool) and kind is not bool or not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise InputError(f"{where}: '{key}' must be {names}, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise InputError(f"{where}: '{key}' must be a finite number, got {value!r}")
    problem = range_problem(key, value, minimum)
    if problem:
        raise InputError(f"{where}: '{key}' {problem}, got {value!r}")
    return value


def _function(table: dict[str, Any], where: str, required: bool) -> str | None:
    function = table.get("function")
    if function is None and not required:
        return None
    if not isinstance(function, str) or ":" not in function:
        raise InputError(f"{where}: 'function' must be \"module:function\", got {function!r}")
    return function


def _retrieval(table: dict[str, Any], where: str, problems: _Problems) -> dict[str, Any]:
    where = f"{where} [retrieval]"
    kind = table.get("kind", "none")
    if kind not in RETRIEVAL_KINDS:
        problems.items.append(
            f"{where}: 'kind' must be one of {', '.join(RETRIEVAL_KINDS)}, got {kind!r}"
            + did_you_mean(kind, set(RETRIEVAL_KINDS))
        )
        return {"kind": "none"}
    problems.keys(table, RETRIEVAL_KEYS[kind], f'{where} (kind = "{kind}")')
    if kind == "http":
        url = table.get("url")
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            problems.items.append(f"{where}: 'url' must be an http(s) URL, got {url!r}")
        method = table.get("method", "POST")
        if method not in ("POST", "GET"):
            problems.items.append(f'{where}: \'method\' must be "POST" or "GET", got {method!r}')
        for key in ("results", "id", "text", "score"):
            problems.attempt(lambda key=key: _typed(table, key, str, where))
        for key in ("body", "headers"):
            problems.attempt(lambda key=key: _typed(table, key, dict, where))
        problems.attempt(lambda: _typed(table, "timeout", (int, float), where, 0))
        for key in ("max_bytes", "max_decompressed_bytes", "max_depth"):
            problems.attempt(lambda key=key: _typed(table, key, int, where))
    if kind == "python":
        problems.attempt(lambda: _function(table, where, required=True))
    if kind == "local":
        if not isinstance(table.get("path"), str):
            problems.items.append(f"{where}: 'path' must name a folder of documents")
        problems.attempt(lambda: _typed(table, "k", int, where, 1))
    return dict(table, kind=kind)


def _models(value: Any, where: str, problems: _Problems) -> tuple[ModelSpec, ...]:
    """The models that parse; each one that does not is a problem of its own."""
    if not isinstance(value, list):
        problems.items.append(f"{where}: 'models' must be a list of model specs")
        return ()
    specs = [problems.attempt(lambda item=item: _model(item, where)) for item in value]
    found = tuple(spec for spec in specs if spec is not None)
    problems.attempt(lambda: _unique_names(found, where))
    return found


def _unique_names(models: tuple[ModelSpec, ...], where: str) -> None:
    try:
        check_names(models)
    except InputError as exc:
        raise InputError(f"{where}: {exc}") from None


def _model(item: Any, where: str) -> ModelSpec:
    try:
        if isinstance(item, str):
            name, spec = split_name(item)  # "NAME=SPEC" names the model's arm
            return replace(parse_spec(spec), name=name)
        if isinstance(item, dict):
            check_keys(item, MODEL_KEYS, f"model {item.get('spec', '?')!r}")
            if not isinstance(item.get("spec"), str):
                raise InputError("a model table needs 'spec'")
            cloud = {key: _typed(item, key, str, "model") for key in ("api_version", "region", "project")}
            model = parse_spec(item["spec"], _typed(item, "api_key_env", str, "model"), **cloud)
            name = _typed(item, "name", str, "model")
            problem = name is not None and names.problem(name, "model name")
            if problem:
                raise InputError(problem)
            return replace(model, name=name)
        raise InputError("each model is a spec string or { name, spec, api_key_env, ... }")
    except InputError as exc:
        raise InputError(f"{where}: {exc}") from None


def _checks(
    data: dict[str, Any], where: str, problems: _Problems, base: Path | None = None
) -> CheckSettings:
    header_table = problems.attempt(lambda: _table(data, "header", where), {})
    problems.keys(header_table, HEADER_KEYS, f"{where} [header]")
    header = problems.attempt(lambda: _header(header_table, f"{where} [header]"), HeaderConfig())
    filter_config = None
    if "filter" in data:
        table = problems.attempt(lambda: _table(data, "filter", where), {})
        problems.keys(table, FILTER_KEYS, f"{where} [filter]")
        function = problems.attempt(lambda: _function(table, f"{where} [filter]", required=True))
        status = problems.attempt(lambda: _typed(table, "no_answer_status", str, f"{where} [filter]"))
        if function:
            filter_config = FilterConfig(function, status or "no_answer")
    citations = None
    if "citations" in data:
        table = problems.attempt(lambda: _table(data, "citations", where), {})
        problems.keys(table, CITATION_KEYS, f"{where} [citations]")
        citations = problems.attempt(lambda: _citations(table, where))
    user, judges = _user_checks(data.get("check", []), where, problems, base or Path.cwd())
    return CheckSettings(header=header, filter=filter_config, citations=citations, user=user, judges=judges)


def _header(table: dict[str, Any], where: str) -> HeaderConfig:
    markers = table.get("markers", list(HeaderConfig().markers))
    if not isinstance(markers, list):
        raise InputError(f"{where}: 'markers' must be a list of strings")
    leading = bool(_typed(table, "allow_leading_whitespace", bool, where))
    try:
        return HeaderConfig(
            markers=tuple(markers),
            no_answer=table.get("no_answer", HeaderConfig().no_answer),
            allow_leading_whitespace=leading,
        )
    except InputError as exc:
        raise InputError(f"{where}: {exc}") from None


def _citations(table: dict[str, Any], where: str) -> CitationConfig:
    pattern = _typed(table, "pattern", str, f"{where} [citations]")
    try:
        return CitationConfig(pattern) if pattern else CitationConfig()
    except InputError as exc:
        raise InputError(f"{where}: {exc}") from None


def _user_checks(
    value: Any, where: str, problems: _Problems, base: Path
) -> tuple[tuple[UserCheckConfig, ...], tuple[JudgeConfig, ...]]:
    """[[check]] tables: a function of yours (name, function, direction, description), or a
    judged check (kind = "judge": checks/judge.py)."""
    if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
        problems.items.append(f"{where}: [[check]] must be tables, each with name and function")
        return (), ()
    found: list[Any] = []
    for index, table in enumerate(value, 1):
        kind = table.get("kind", "function")
        if kind not in CHECK_KINDS:
            problems.items.append(
                f"{where} [[check]] {table.get('name', index)!r}: kind {kind!r} is not one of "
                f"{', '.join(CHECK_KINDS)}{did_you_mean(kind, set(CHECK_KINDS))}"
            )
            continue
        if kind == "judge":
            make: Any = lambda index=index, table=table: judge_check(  # noqa: E731
                index, table, where, found, base
            )
        else:
            make = lambda index=index, table=table: _user_check(index, table, where, found)  # noqa: E731
        check = problems.attempt(make)
        if check is not None:
            found.append(check)
    return (
        tuple(c for c in found if isinstance(c, UserCheckConfig)),
        tuple(c for c in found if isinstance(c, JudgeConfig)),
    )


def _user_check(index: int, table: dict[str, Any], where: str, found: list[Any]) -> UserCheckConfig:
    label = f"{where} [[check]] {table.get('name', index)!r}"
    problems = _Problems()
    problems.keys(table, CHECK_KEYS, label)
    name = table.get("name")
    problem = check_name_problem(name, label, found)
    if problem:
        problems.items.append(problem)
    function = problems.attempt(lambda: _function(table, label, required=True))
    higher = table.get("higher_is_better", True)
    if not isinstance(higher, bool):
        problems.items.append(f"{label}: 'higher_is_better' must be true or false")
    description = problems.attempt(lambda: _typed(table, "description", str, label)) or ""
    timeout = problems.attempt(lambda: _typed(table, "timeout", (int, float), label))
    if problems.items:
        raise ConfigInvalid(problems.items)
    return UserCheckConfig(
        name,  # type: ignore[arg-type]
        function,  # type: ignore[arg-type]
        higher,
        description,
        float(timeout) if timeout is not None else DEFAULT_CHECK_TIMEOUT,
    )


def _umask(value: Any, where: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = int(value, 8)
        except ValueError:
            raise InputError(f"{where}: 'umask' must be octal such as \"022\", got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 0o777:
        raise InputError(f"{where}: 'umask' must be octal such as \"022\", got {value!r}")
    return value


def parse_config(data: dict[str, Any], path: Path | None, sha256: str | None = None) -> TargetConfig:
    """The target config in `data`; ConfigInvalid lists every problem at once, each naming the
    table and key (with the key meant, for a near miss such as [retreival])."""
    where = str(path) if path else "config"
    problems = _Problems()
    problems.keys(data, TOP_KEYS, where)

    def table(key: str) -> dict[str, Any]:
        return problems.attempt(lambda: _table(data, key, where), {})  # type: ignore[no-any-return]

    retrieval = _retrieval(table("retrieval"), where, problems)
    assemble = table("assemble")
    problems.keys(assemble, ASSEMBLE_KEYS, f"{where} [assemble]")
    function = problems.attempt(lambda: _function(assemble, f"{where} [assemble]", required=False))
    checks = _checks(data, where, problems, path.parent if path else None)
    run = _run(table("run"), f"{where} [run]", problems)
    prices = table("prices")
    if prices:
        from .engine.cost import load_prices

        for key, value in prices.items():  # refuse a bad price now, not mid-run
            problems.attempt(lambda key=key, value=value: load_prices({key: value}, f"{where} [prices]"))
    variables = _variables(table("vars"), f"{where} [vars]", problems)
    if problems.items:
        raise ConfigInvalid(problems.items)
    return TargetConfig(
        path, sha256, retrieval, function, checks, run, prices, "retrieval" in data, variables
    )


def _run(run_table: dict[str, Any], where: str, problems: _Problems) -> RunSettings:
    problems.keys(run_table, RUN_KEYS, where)
    defaults = RunSettings()

    def value(key: str, kind: type | tuple[type, ...], minimum: float | None = None) -> Any:
        found = problems.attempt(lambda: _typed(run_table, key, kind, where, minimum))
        return getattr(defaults, key) if found is None else found

    return RunSettings(
        models=_models(run_table.get("models", []), where, problems),
        repeats=problems.attempt(lambda: _typed(run_table, "repeats", int, where, 1)),
        max_tokens=value("max_tokens", int, 1),
        concurrency=value("concurrency", int, 1),
        temperature=problems.attempt(lambda: _typed(run_table, "temperature", (int, float), where, 0)),
        seed=problems.attempt(lambda: _typed(run_table, "seed", int, where)),
        timeout=float(value("timeout", (int, float), 0.001)),
        max_attempts=value("max_attempts", int, 1),
        max_retry_wait=float(value("max_retry_wait", (int, float), 0)),
        rpm=float(value("rpm", (int, float), 0)),
        stream=bool(value("stream", bool)),
        batch=bool(value("batch", bool)),
        cache=bool(value("cache", bool)),
        umask=problems.attempt(lambda: _umask(run_table.get("umask"), where)),
        runs_dir=problems.attempt(lambda: _typed(run_table, "runs_dir", str, where)) or None,
        given=frozenset(key for key in run_table if key in RUN_KEYS),
    )


def _variables(table: dict[str, Any], where: str, problems: _Problems) -> dict[str, str]:
    """Prompt variables: names as in {{NAME}}, values strings (numbers are written as text)."""
    from .prompts import SOURCES

    variables = {}
    for name, value in table.items():
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) or name == SOURCES:
            problems.items.append(
                f"{where}: {name!r} cannot be a variable name (letters, digits and _; not sources)"
            )
        elif isinstance(value, bool) or not isinstance(value, str | int | float):
            problems.items.append(f"{where}: {name} must be text, got {value!r}")
        else:
            variables[name] = str(value)
    return variables


def prompt_variables(table: dict[str, Any]) -> dict[str, str]:
    """The sound variables of a [vars] table (the others are left out: `probe check` reports them)."""
    return _variables(table, "[vars]", _Problems())


def load_config(path: str | Path | None) -> TargetConfig:
    """Load `path`, or `./probe.toml` when it exists, or the defaults (no retrieval)."""
    if path is None:
        default = Path("probe.toml")
        if not is_file(default):
            return TargetConfig()
        path = default
    path = Path(path)
    if not is_file(path):
        raise InputError(f"{shown(path)}: no such config file")
    source = read_input(path, "config file")
    config = parse_config(parse_toml(source, path), path, hashlib.sha256(source).hexdigest())
    # Messages name the file as given; the run records where it is, for --resume.
    return replace(config, path=path.resolve())


def with_retrieval(config: TargetConfig, choice: str | None, dry_run: bool = False) -> TargetConfig:
    """The config checked for a retrieval path (`choice` "none": probe without one, as asked).
    Probing without retrieval must be asked for: with no config at all it is an error; a config
    without [retrieval] gets a warning (a dry run calls nothing, so it needs neither)."""
    from .jsonio import warn

    if choice == "none":
        if config.retrieval_given and config.retrieval.get("kind") != "none":
            raise InputError(
                f'--retrieval none, but {config.path} says [retrieval] kind = "{config.retrieval["kind"]}": '
                "give one or the other"
            )
        return replace(config, retrieval={"kind": "none"}, retrieval_given=True)
    if choice is not None:
        raise InputError(f"retrieval {choice!r}: the only choice is 'none'; the config says how otherwise")
    if not config.retrieval_given and not dry_run:
        if config.path is None:
            raise InputError(
                "no retrieval path: there is no probe.toml here. Point probe at the system under test with "
                "--config FILE (its [retrieval] says how a question reaches the model), or add --retrieval "
                'none to probe without retrieval (in Python: config=..., or retrieval="none")'
            )
        warn(
            f"{config.path} has no [retrieval]: probing without retrieval (the model gets no passages); "
            'kind = "none" or --retrieval none says so and silences this'
        )
    return config
