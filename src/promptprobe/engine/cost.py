"""What a run costs: the price table (packaged `prices.toml`, extended by `[prices]` in
probe.toml), the cost of recorded usage, and a dry run's estimate before any call is made.

Estimates count about 4 characters per token on the rendered prompt, the history and the
question (passages are not fetched in a dry run) and assume every reply uses `max_tokens`, so
they are an upper bound on the output side. A model without a price is "cost unknown".

Cached input is priced at the cache rates (read, and for Anthropic the write), and a sample sent
through a batch API at the batch rate (half price at both providers when the table was taken);
`saved_by_cache` is what the same tokens would have cost with no cache hits.
"""

import math
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..models import ModelSpec
from ..tomlfile import parse_toml

CHARS_PER_TOKEN = 4


PRICE_KEYS = ("input", "output", "cache_read", "cache_write", "batch")


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
    source: str  # "built-in (taken YYYY-MM-DD)" or "probe.toml"
    cache_read: float | None = None  # USD per million cached input tokens read (None: as input)
    cache_write: float | None = None  # USD per million input tokens written to the cache
    batch: float = 1.0  # the share of the price a batch request pays

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
class PriceTable:
    prices: dict[str, Price]
    taken: str

    def lookup(self, spec: ModelSpec) -> Price | None:
        """The price of the longest key the spec starts with (`provider:model...`)."""
        best: tuple[int, Price] | None = None
        for key, price in self.prices.items():
            if spec.spec == key or (spec.base_url is None and spec.spec.startswith(key)):
                if best is None or len(key) > best[0]:
                    best = (len(key), price)
        return best[1] if best else None


def _price(value: Any, where: str, source: str, rates: dict[str, float] | None = None) -> Price:
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
            numbers[key] = numbers["input"] * rates[key]
    if "batch" not in numbers and "batch" in rates:
        numbers["batch"] = rates["batch"]
    return Price(numbers.pop("input"), numbers.pop("output"), source, **numbers)


def load_prices(extra: dict[str, Any] | None = None, where: str = "probe.toml [prices]") -> PriceTable:
    data = parse_toml(
        resources.files("promptprobe").joinpath("prices.toml").read_bytes(), Path("prices.toml")
    )
    taken_by_provider: dict[str, str] = {k: str(v) for k, v in data.pop("taken").items()}
    taken = min(taken_by_provider.values())  # the table is as old as its oldest part
    rates: dict[str, dict[str, float]] = data.pop("rates")
    prices = {
        f"{provider}:{model}": _price(
            value,
            f"prices.toml {provider}.{model}",
            f"built-in (taken {taken_by_provider[provider]})",
            rates.get(provider),
        )
        for provider, table in data.items()
        for model, value in table.items()
    }
    for key, value in (extra or {}).items():
        if ":" not in key:
            raise InputError(f'{where}: key {key!r} must be a model spec such as "openai:gpt-4.1-mini"')
        prices[key] = _price(value, f"{where} {key!r}", "probe.toml", rates.get(key.split(":", 1)[0]))
    return PriceTable(prices, taken)


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
