"""What a run costs: the price table (packaged `prices.toml`, extended by `[prices]` in
probe.toml), the cost of recorded usage, and a dry run's estimate before any call is made.

A price is never guessed. A built-in row applies only to its exact model id, or to a dated
snapshot of it (`claude-sonnet-4-5-20250929` is `claude-sonnet-4-5`, `gpt-4.1-mini-2025-04-14` is
`gpt-4.1-mini`: the one rule, SNAPSHOT below), and only when the calls go to that provider's own
endpoint (not a proxy, a local server or an `OPENAI_BASE_URL` elsewhere). A `[prices]` entry is
the user's word for that spec as written (`@URL` included) and wins. Anything else is "cost
unknown", with the reason (`PriceMatch.reason`), and `--max-cost` refuses to start on it.

Estimates count about 4 characters per token on the messages a call would send (the rendered
prompt with the passages a dry run fetched, the history, the question) and assume every reply
uses `max_tokens`, so they are an upper bound on the output side.

Cached input is priced at the cache rates (read, and for Anthropic the write), and a sample sent
through a batch API at the batch rate (half price at both providers when the table was taken);
`saved_by_cache` is what the same tokens would have cost with no cache hits.
"""

import math
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import date
from importlib import resources
from pathlib import Path
from typing import Any

from ..endpoints import Endpoint, resolve
from ..errors import InputError
from ..models import ModelSpec, parse_model_spec
from ..tomlfile import parse_toml

CHARS_PER_TOKEN = 4


PRICE_KEYS = ("input", "output", "cache_read", "cache_write", "batch")
PROVIDER_NAMES = {"openai": "OpenAI", "anthropic": "Anthropic", "azure": "Azure", "bedrock": "Bedrock"}
# The one dated-snapshot rule: a model id that is a priced id plus its release date is priced as
# that id (Anthropic: MODEL-YYYYMMDD; OpenAI: MODEL-YYYY-MM-DD). Nothing else is inferred.
SNAPSHOT = {
    "anthropic": re.compile(r"(?P<base>.+)-(?:19|20)\d{2}(?:0[1-9]|1[0-2])(?:0[1-9]|[12]\d|3[01])"),
    "openai": re.compile(r"(?P<base>.+)-(?:19|20)\d{2}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01])"),
}


@dataclass(frozen=True)
class Tokens:
    """A reply's tokens by how they are priced: input not from the cache, read from it, written
    to it, and output."""

    input: int = 0
    cache_read: int = 0
    cache_write: int = 0
    output: int = 0


def split_usage(usage: dict[str, Any] | None) -> Tokens:
    """An Anthropic usage (input_tokens excludes the cache; cache_read/creation apart) or an OpenAI
    one (prompt_tokens includes prompt_tokens_details.cached_tokens)."""
    usage = usage or {}
    output = int(usage.get("output_tokens", usage.get("completion_tokens", 0)) or 0)
    if "prompt_tokens" in usage and "input_tokens" not in usage:
        cached = int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
        prompt = int(usage.get("prompt_tokens") or 0)
        return Tokens(max(0, prompt - cached), cached, 0, output)
    return Tokens(
        int(usage.get("input_tokens") or 0),
        int(usage.get("cache_read_input_tokens") or 0),
        int(usage.get("cache_creation_input_tokens") or 0),
        output,
    )


@dataclass(frozen=True)
class Price:
    input: float  # USD per million input tokens
    output: float
    source: str  # "built-in (genai-prices VERSION, ...)" or "probe.toml"
    cache_read: float | None = None  # USD per million cached input tokens read (None: as input)
    cache_write: float | None = None  # USD per million input tokens written to the cache
    batch: float = 1.0  # the share of the price a batch request pays
    row: str = ""  # the table row it is: "anthropic:claude-sonnet-4-5", a [prices] key
    taken: str | None = None  # the date a built-in price took effect, when its data dates it
    rule: str | None = None  # how the model matched a row other than its own id

    def to_dict(self, batch: bool = False) -> dict[str, Any]:
        """The price as dry runs and reports show it: which row, from where, of when."""
        return {
            "row": self.row,
            "input": self.input,
            "output": self.output,
            "cache_read": self.cache_read,
            "cache_write": self.cache_write,
            "source": self.source,
            "taken": self.taken,
            "rule": self.rule,
            **({"batch": self.batch} if batch else {}),
        }

    def describe(self) -> str:
        """`ROW (built-in, genai-prices 0.2.3)`, as tables show it."""
        where = "[prices]" if self.source == "probe.toml" else self.source
        where += f", since {self.taken}" if self.taken else ""
        return f"{self.row} ({where}{', ' + self.rule if self.rule else ''})"

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        return (input_tokens * self.input + output_tokens * self.output) / 1_000_000

    def cost_of(self, tokens: Tokens, batch: bool = False) -> float:
        read = self.input if self.cache_read is None else self.cache_read
        write = self.input if self.cache_write is None else self.cache_write
        total = (
            tokens.input * self.input
            + tokens.cache_read * read
            + tokens.cache_write * write
            + tokens.output * self.output
        ) / 1_000_000
        return total * (self.batch if batch else 1.0)

    def without_cache(self, tokens: Tokens, batch: bool = False) -> float:
        """What the same tokens cost had nothing come from, or gone to, the cache."""
        whole = Tokens(tokens.input + tokens.cache_read + tokens.cache_write, 0, 0, tokens.output)
        return self.cost_of(whole, batch)


@dataclass(frozen=True)
class PriceMatch:
    """The price of one model, or why there is none (naming the model)."""

    price: Price | None
    reason: str | None = None


class BuiltinPrices(Mapping[str, Price]):
    """The built-in rows by "provider:model" as priced on `day` (None: today): genai-prices'
    bundled data (builtin_prices.py), read on first use, so a run whose models all have [prices]
    entries or go elsewhere never loads it."""

    def __init__(self, day: date | None = None) -> None:
        self.day = day
        self._loaded: dict[str, Price] | None = None

    def _rows(self) -> dict[str, Price]:
        from .builtin_prices import builtin_rows

        if self._loaded is None:
            self._loaded = {k: Price(**v) for k, v in builtin_rows(_rates(), self.day).items()}
        return self._loaded

    def __getitem__(self, key: str) -> Price:
        return self._rows()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._rows())

    def __len__(self) -> int:
        return len(self._rows())

    @property
    def source(self) -> str:
        from .builtin_prices import source

        return source()


@dataclass(frozen=True)
class PriceTable:
    prices: Mapping[str, Price]  # built-in rows, by "provider:model"
    extra: dict[str, Price] = field(default_factory=dict)  # [prices] entries, by their key

    @property
    def taken(self) -> str:
        """Where the built-in rows come from: the price library and its version."""
        return self.prices.source if isinstance(self.prices, BuiltinPrices) else "given"

    def lookup(self, spec: ModelSpec, endpoint: Endpoint | None = None) -> Price | None:
        return self.match(spec, endpoint).price

    def match(self, spec: ModelSpec, endpoint: Endpoint | None = None) -> PriceMatch:
        """The price of `spec` when its calls go to `endpoint` (default: where they would go from
        this process, `endpoints.resolve`): a [prices] entry for the spec as written, else a
        built-in row for its exact id (or the snapshot rule) on the provider's own endpoint."""
        for key, price in self.extra.items():
            rule = _same_model(spec, key)
            if rule is not None:
                return PriceMatch(price if not rule else _with_rule(price, rule))
        endpoint = endpoint or resolve(spec)
        fix = f'give it under [prices] in probe.toml ("{spec.spec}" = {{ input = USD, output = USD }})'
        if not endpoint.own:
            provider = PROVIDER_NAMES.get(spec.provider, spec.provider)
            return PriceMatch(
                None,
                f"cost unknown for {spec.spec}: its calls go to {endpoint.describe()}, not to "
                f"{provider}'s own endpoint where list prices apply; {fix}",
            )
        row = f"{spec.provider}:{spec.model}"
        if row in self.prices:
            return PriceMatch(self.prices[row])
        base = snapshot_base(spec.provider, spec.model)
        if base is not None and f"{spec.provider}:{base}" in self.prices:
            return PriceMatch(_with_rule(self.prices[f"{spec.provider}:{base}"], f"dated snapshot of {base}"))
        return PriceMatch(
            None,
            f"cost unknown for {spec.spec}: no built-in price for the exact model id {spec.model}; {fix}",
        )


def price_sentence(
    model: str, endpoint: dict[str, Any], price: dict[str, Any] | None, reason: str | None
) -> str:
    """What a model costs and where its calls go, in words (dry run and report say it alike)."""
    if price is None:
        return reason or f"cost unknown for {model}"
    taken = "probe.toml [prices]" if price["source"] == "probe.toml" else price["source"]
    taken += f", in effect since {price['taken']}" if price.get("taken") else ""
    rule = f", {price['rule']}" if price.get("rule") else ""
    where = endpoint.get("url") or "an address its SDK works out"
    return (
        f"price of {model}: row {price['row']} ({taken}{rule}), ${price['input']:g} in / "
        f"${price['output']:g} out per million tokens; calls to {where} (from {endpoint.get('from')})"
    )


def refuse_unknown(table: PriceTable, models: Sequence[ModelSpec]) -> None:
    """--max-cost cannot cap what it cannot price: an InputError naming each model without a price."""
    reasons = [r for r in (table.match(m).reason for m in dict.fromkeys(models)) if r]
    if reasons:
        raise InputError(f"--max-cost refuses to start: {'; '.join(reasons)}")


def snapshot_base(provider: str, model: str) -> str | None:
    """The model id a dated snapshot id is a snapshot of (None when it is not one)."""
    pattern = SNAPSHOT.get(provider)
    found = pattern.fullmatch(model) if pattern else None
    return found.group("base") if found else None


def _same_model(spec: ModelSpec, key: str) -> str | None:
    """'' when a [prices] key names exactly this spec, a rule when it names what this spec is a
    dated snapshot of (same endpoint), else None."""
    if key == spec.spec:
        return ""
    try:
        keyed = parse_model_spec(key)
    except InputError:
        return None
    same_url = (keyed.base_url or "").rstrip("/") == (spec.base_url or "").rstrip("/")
    if keyed.provider != spec.provider or not same_url:
        return None
    if keyed.model == spec.model:
        return ""
    if snapshot_base(spec.provider, spec.model) == keyed.model:
        return f"dated snapshot of {keyed.model}"
    return None


def _with_rule(price: Price, rule: str) -> Price:
    """The price, saying how the model matched it (and keeping what its row already says)."""
    return replace(price, rule=f"{rule}; {price.rule}" if price.rule else rule)


def _price(
    value: Any,
    where: str,
    source: str,
    rates: dict[str, float] | None = None,
    row: str = "",
    taken: str | None = None,
) -> Price:
    """`{ input, output }` in USD per million tokens, optionally `cache_read`, `cache_write` (USD
    per million) and `batch` (the share a batch request pays); missing ones from `rates`, the
    provider's multipliers of the input price."""
    if not isinstance(value, dict) or not {"input", "output"} <= set(value) or set(value) - set(PRICE_KEYS):
        raise InputError(
            f"{where}: a price is {{ input = USD, output = USD }} per million tokens (optionally "
            "cache_read, cache_write in USD per million and batch, the share a batch request pays)"
        )
    numbers: dict[str, float] = {}
    for key, number in value.items():
        if (
            isinstance(number, bool)
            or not isinstance(number, int | float)
            or not math.isfinite(number)
            or number < 0
            or (key == "batch" and number > 1)
        ):
            limit = "a share in [0, 1]" if key == "batch" else "a number of USD >= 0"
            raise InputError(f"{where}: '{key}' must be {limit}, got {number!r}")
        numbers[key] = float(number)
    rates = rates or {}
    for key in ("cache_read", "cache_write"):
        if key not in numbers and key in rates:
            numbers[key] = round(numbers["input"] * rates[key], 10)  # 0.3, not 0.30000000000000004
    if "batch" not in numbers and "batch" in rates:
        numbers["batch"] = rates["batch"]
    return Price(numbers.pop("input"), numbers.pop("output"), source, row=row, taken=taken, **numbers)


def load_prices(
    extra: Mapping[str, Any] | None = None, where: str = "probe.toml [prices]", day: date | None = None
) -> PriceTable:
    """The built-in rows as priced on `day` (default today; a run's report passes the run's own
    day), read when first needed, and `extra`, the [prices] entries of probe.toml, which win."""
    rates = _rates()
    added = {}
    for key, value in (extra or {}).items():
        if ":" not in key:
            raise InputError(f'{where}: key {key!r} must be a model spec such as "openai:gpt-4.1-mini"')
        added[key] = _price(value, f"{where} {key!r}", "probe.toml", rates.get(key.split(":", 1)[0]), row=key)
    return PriceTable(BuiltinPrices(day), added)


def _rates() -> dict[str, dict[str, float]]:
    """prices.toml: the batch share and the cache multipliers a provider's rows lack."""
    data = parse_toml(
        resources.files("promptprobe").joinpath("prices.toml").read_bytes(), Path("prices.toml")
    )
    return data["rates"]


def run_day(manifest: Mapping[str, Any]) -> date | None:
    """The day a run was created (its prices are that day's), None when the manifest lacks it."""
    try:
        return date.fromisoformat(str(manifest.get("created") or "")[:10])
    except ValueError:
        return None


def usage_tokens(usage: dict[str, Any] | None) -> tuple[int, int]:
    """(input, output) tokens from an Anthropic or OpenAI usage object."""
    usage = usage or {}
    input_tokens = usage.get("input_tokens", usage.get("prompt_tokens", 0)) or 0
    for extra in ("cache_creation_input_tokens", "cache_read_input_tokens"):
        input_tokens += usage.get(extra) or 0
    output_tokens = usage.get("output_tokens", usage.get("completion_tokens", 0)) or 0
    return int(input_tokens), int(output_tokens)


def estimate_tokens(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN)
