"""The target config (`probe.toml`): how a question reaches the model in the system under test,
what the checks look for, and the run's defaults."""

import hashlib
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from . import names
from .checks.settings import CheckSettings, CitationConfig, FilterConfig, HeaderConfig, UserCheckConfig
from .errors import InputError
from .limits import range_problem
from .models import ModelSpec, check_names, split_name
from .providers import parse_spec
from .tomlfile import check_keys, parse_toml, read_input

RETRIEVAL_KINDS = ("http", "python", "none", "local")
RETRIEVAL_KEYS = {
    "http": {"kind", "url", "method", "body", "headers", "results", "id", "text", "score", "timeout"},
    "python": {"kind", "function", "id", "text", "score"},
    "none": {"kind"},
    "local": {"kind", "path", "k"},
}
TOP_KEYS = {"retrieval", "assemble", "header", "filter", "citations", "run", "prices", "vars", "check"}
CHECK_KEYS = {"name", "function", "higher_is_better", "description"}
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
    batch: bool = False  # through the providers' batch APIs
    cache: bool = False  # prompt caching marks (Anthropic)


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


def _retrieval(table: dict[str, Any], where: str) -> dict[str, Any]:
    where = f"{where} [retrieval]"
    kind = table.get("kind", "none")
    if kind not in RETRIEVAL_KINDS:
        raise InputError(f"{where}: 'kind' must be one of {', '.join(RETRIEVAL_KINDS)}, got {kind!r}")
    check_keys(table, RETRIEVAL_KEYS[kind], f'{where} (kind = "{kind}")')
    if kind == "http":
        url = table.get("url")
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise InputError(f"{where}: 'url' must be an http(s) URL, got {url!r}")
        method = table.get("method", "POST")
        if method not in ("POST", "GET"):
            raise InputError(f'{where}: \'method\' must be "POST" or "GET", got {method!r}')
        for key in ("results", "id", "text", "score"):
            _typed(table, key, str, where)
        for key in ("body", "headers"):
            _typed(table, key, dict, where)
        _typed(table, "timeout", (int, float), where, 0)
    if kind == "python":
        _function(table, where, required=True)
    if kind == "local":
        if not isinstance(table.get("path"), str):
            raise InputError(f"{where}: 'path' must name a folder of documents")
        _typed(table, "k", int, where, 1)
    return dict(table, kind=kind)


def _models(value: Any, where: str) -> tuple[ModelSpec, ...]:
    if not isinstance(value, list):
        raise InputError(f"{where}: 'models' must be a list of model specs")
    specs = []
    for item in value:
        try:
            if isinstance(item, str):
                name, spec = split_name(item)
                specs.append(replace(parse_spec(spec), name=name))
            elif isinstance(item, dict):
                check_keys(item, MODEL_KEYS, f"model {item.get('spec', '?')!r}")
                if not isinstance(item.get("spec"), str):
                    raise InputError("a model table needs 'spec'")
                cloud = {key: _typed(item, key, str, "model") for key in ("api_version", "region", "project")}
                model = parse_spec(item["spec"], _typed(item, "api_key_env", str, "model"), **cloud)
                name = _typed(item, "name", str, "model")
                problem = name is not None and names.problem(name, "model name")
                if problem:
                    raise InputError(problem)
                specs.append(replace(model, name=name))
            else:
                raise InputError("each model is a spec string or { name, spec, api_key_env, ... }")
        except InputError as exc:
            raise InputError(f"{where}: {exc}") from None
    try:
        check_names(specs)
    except InputError as exc:
        raise InputError(f"{where}: {exc}") from None
    return tuple(specs)


def _checks(data: dict[str, Any], where: str) -> CheckSettings:
    header_table = _table(data, "header", where)
    check_keys(header_table, HEADER_KEYS, f"{where} [header]")
    markers = header_table.get("markers", list(HeaderConfig().markers))
    if not isinstance(markers, list):
        raise InputError(f"{where} [header]: 'markers' must be a list of strings")
    try:
        header = HeaderConfig(
            markers=tuple(markers),
            no_answer=header_table.get("no_answer", HeaderConfig().no_answer),
            allow_leading_whitespace=bool(
                _typed(header_table, "allow_leading_whitespace", bool, f"{where} [header]")
            ),
        )
    except InputError as exc:
        raise InputError(f"{where} [header]: {exc}") from None
    filter_config = None
    if "filter" in data:
        table = _table(data, "filter", where)
        check_keys(table, FILTER_KEYS, f"{where} [filter]")
        function = _function(table, f"{where} [filter]", required=True)
        status = _typed(table, "no_answer_status", str, f"{where} [filter]") or "no_answer"
        filter_config = FilterConfig(function, status)  # type: ignore[arg-type]
    citations = None
    if "citations" in data:
        table = _table(data, "citations", where)
        check_keys(table, CITATION_KEYS, f"{where} [citations]")
        pattern = _typed(table, "pattern", str, f"{where} [citations]")
        try:
            citations = CitationConfig(pattern) if pattern else CitationConfig()
        except InputError as exc:
            raise InputError(f"{where}: {exc}") from None
    user = _user_checks(data.get("check", []), where)
    return CheckSettings(header=header, filter=filter_config, citations=citations, user=user)


def _user_checks(value: Any, where: str) -> tuple[UserCheckConfig, ...]:
    """[[check]] tables: a name, a function, a direction and a description each."""
    from .checks import METRICS

    if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
        raise InputError(f"{where}: [[check]] must be tables, each with name and function")
    found: list[UserCheckConfig] = []
    for index, table in enumerate(value, 1):
        label = f"{where} [[check]] {table.get('name', index)!r}"
        check_keys(table, CHECK_KEYS, label)
        name = table.get("name")
        if not isinstance(name, str) or not re.fullmatch(r"[a-z][a-z0-9_]{0,63}", name):
            raise InputError(
                f"{label}: 'name' must be lower-case letters, digits and _ (a metric name), got {name!r}"
            )
        if name in METRICS:
            raise InputError(f"{label}: {name} is a built-in metric; give your check another name")
        if any(c.name == name for c in found):
            raise InputError(f"{label}: two checks are called {name}")
        function = _function(table, label, required=True)
        higher = table.get("higher_is_better", True)
        if not isinstance(higher, bool):
            raise InputError(f"{label}: 'higher_is_better' must be true or false")
        description = _typed(table, "description", str, label) or ""
        found.append(UserCheckConfig(name, function, higher, description))  # type: ignore[arg-type]
    return tuple(found)


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
    where = str(path) if path else "config"
    check_keys(data, TOP_KEYS, where)
    retrieval = _retrieval(_table(data, "retrieval", where), where)
    assemble = _table(data, "assemble", where)
    check_keys(assemble, ASSEMBLE_KEYS, f"{where} [assemble]")
    function = _function(assemble, f"{where} [assemble]", required=False)
    checks = _checks(data, where)
    run_table = _table(data, "run", where)
    run_where = f"{where} [run]"
    check_keys(run_table, RUN_KEYS, run_where)
    defaults = RunSettings()

    def number(key: str, kind: type | tuple[type, ...], minimum: float | None, default: Any) -> Any:
        value = _typed(run_table, key, kind, run_where, minimum)
        return default if value is None else value

    run = RunSettings(
        models=_models(run_table.get("models", []), run_where),
        repeats=_typed(run_table, "repeats", int, run_where, 1),
        max_tokens=number("max_tokens", int, 1, defaults.max_tokens),
        concurrency=number("concurrency", int, 1, defaults.concurrency),
        temperature=_typed(run_table, "temperature", (int, float), run_where, 0),
        seed=_typed(run_table, "seed", int, run_where),
        timeout=float(number("timeout", (int, float), 0.001, defaults.timeout)),
        max_attempts=number("max_attempts", int, 1, defaults.max_attempts),
        max_retry_wait=float(number("max_retry_wait", (int, float), 0, defaults.max_retry_wait)),
        rpm=float(number("rpm", (int, float), 0, defaults.rpm)),
        stream=bool(_typed(run_table, "stream", bool, run_where)),
        batch=bool(_typed(run_table, "batch", bool, run_where)),
        cache=bool(_typed(run_table, "cache", bool, run_where)),
        umask=_umask(run_table.get("umask"), run_where),
    )
    prices = _table(data, "prices", where)
    if prices:
        from .engine.cost import load_prices

        load_prices(prices, f"{where} [prices]")  # refuse a bad price now, not mid-run
    variables = _variables(_table(data, "vars", where), f"{where} [vars]")
    return TargetConfig(
        path, sha256, retrieval, function, checks, run, prices, "retrieval" in data, variables
    )


def _variables(table: dict[str, Any], where: str) -> dict[str, str]:
    """Prompt variables: names as in {{NAME}}, values strings (numbers are written as text)."""
    from .prompts import SOURCES

    variables = {}
    for name, value in table.items():
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) or name == SOURCES:
            raise InputError(
                f"{where}: {name!r} cannot be a variable name (letters, digits and _; not sources)"
            )
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise InputError(f"{where}: {name} must be text, got {value!r}")
        variables[name] = str(value)
    return variables


def load_config(path: str | Path | None) -> TargetConfig:
    """Load `path`, or `./probe.toml` when it exists, or the defaults (no retrieval)."""
    if path is None:
        default = Path("probe.toml")
        if not default.is_file():
            return TargetConfig()
        path = default
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such config file")
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
