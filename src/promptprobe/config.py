"""The target config (`probe.toml`): how a question reaches the model in the system under test."""

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import InputError
from .header import HeaderConfig
from .models import ModelSpec, parse_model_spec
from .tomlfile import check_keys, read_toml

RETRIEVAL_KINDS = ("http", "python", "none", "local")
RETRIEVAL_KEYS = {
    "http": {"kind", "url", "method", "body", "headers", "results", "id", "text", "score", "timeout"},
    "python": {"kind", "function", "id", "text", "score"},
    "none": {"kind"},
    "local": {"kind", "path", "k"},
}
TOP_KEYS = {"retrieval", "assemble", "header", "run"}
ASSEMBLE_KEYS = {"function"}
HEADER_KEYS = {"markers", "no_answer", "allow_leading_whitespace"}
RUN_KEYS = {
    "models",
    "repeats",
    "max_tokens",
    "concurrency",
    "temperature",
    "seed",
    "timeout",
    "max_attempts",
    "stream",
}
MODEL_KEYS = {"spec", "api_key_env"}


@dataclass(frozen=True)
class RunSettings:
    models: tuple[ModelSpec, ...] = ()
    repeats: int | None = None  # None: the probe set's own
    max_tokens: int = 1024
    concurrency: int = 8
    temperature: float | None = None  # sent only when set
    seed: int | None = None
    timeout: float = 60.0
    max_attempts: int = 4
    stream: bool = False


@dataclass(frozen=True)
class TargetConfig:
    path: Path | None = None
    retrieval: dict[str, Any] = field(default_factory=lambda: {"kind": "none"})
    assemble_function: str | None = None
    header: HeaderConfig = field(default_factory=HeaderConfig)
    run: RunSettings = field(default_factory=RunSettings)


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
    if minimum is not None and value < minimum:
        raise InputError(f"{where}: '{key}' must be at least {minimum}, got {value!r}")
    return value


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
        function = table.get("function")
        if not isinstance(function, str) or ":" not in function:
            raise InputError(f"{where}: 'function' must be \"module:function\", got {function!r}")
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
                specs.append(parse_model_spec(item))
            elif isinstance(item, dict):
                check_keys(item, MODEL_KEYS, f"model {item.get('spec', '?')!r}")
                if not isinstance(item.get("spec"), str):
                    raise InputError("a model table needs 'spec'")
                specs.append(parse_model_spec(item["spec"], _typed(item, "api_key_env", str, "model")))
            else:
                raise InputError("each model is a spec string or { spec, api_key_env }")
        except InputError as exc:
            raise InputError(f"{where}: {exc}") from None
    return tuple(specs)


def parse_config(data: dict[str, Any], path: Path | None) -> TargetConfig:
    where = str(path) if path else "config"
    check_keys(data, TOP_KEYS, where)
    retrieval = _retrieval(_table(data, "retrieval", where), where)
    assemble = _table(data, "assemble", where)
    check_keys(assemble, ASSEMBLE_KEYS, f"{where} [assemble]")
    function = assemble.get("function")
    if function is not None and (not isinstance(function, str) or ":" not in function):
        raise InputError(f"{where} [assemble]: 'function' must be \"module:function\"")
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
    run_table = _table(data, "run", where)
    run_where = f"{where} [run]"
    check_keys(run_table, RUN_KEYS, run_where)
    defaults = RunSettings()
    run = RunSettings(
        models=_models(run_table.get("models", []), run_where),
        repeats=_typed(run_table, "repeats", int, run_where, 1),
        max_tokens=_typed(run_table, "max_tokens", int, run_where, 1) or defaults.max_tokens,
        concurrency=_typed(run_table, "concurrency", int, run_where, 1) or defaults.concurrency,
        temperature=_typed(run_table, "temperature", (int, float), run_where, 0),
        seed=_typed(run_table, "seed", int, run_where),
        timeout=_typed(run_table, "timeout", (int, float), run_where, 0) or defaults.timeout,
        max_attempts=_typed(run_table, "max_attempts", int, run_where, 1) or defaults.max_attempts,
        stream=bool(_typed(run_table, "stream", bool, run_where)),
    )
    return TargetConfig(path, retrieval, function, header, run)


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
    return parse_config(read_toml(path), path)
