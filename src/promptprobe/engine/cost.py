"""What a run costs: the price table (packaged `prices.toml`, extended by `[prices]` in
probe.toml), the cost of recorded usage, and a dry run's estimate before any call is made.

Estimates count about 4 characters per token on the rendered prompt, the history and the
question (passages are not fetched in a dry run) and assume every reply uses `max_tokens`, so
they are an upper bound on the output side. A model without a price is "cost unknown".
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


@dataclass(frozen=True)
class Price:
    input: float  # USD per million input tokens
    output: float
    source: str  # "built-in (taken YYYY-MM-DD)" or "probe.toml"

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        return (input_tokens * self.input + output_tokens * self.output) / 1_000_000


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


def _price(value: Any, where: str, source: str) -> Price:
    if not isinstance(value, dict) or set(value) != {"input", "output"}:
        raise InputError(f"{where}: a price is {{ input = USD, output = USD }} per million tokens")
    numbers = []
    for key in ("input", "output"):
        number = value[key]
        if (
            isinstance(number, bool)
            or not isinstance(number, int | float)
            or not math.isfinite(number)
            or number < 0
        ):
            raise InputError(f"{where}: '{key}' must be a number of USD >= 0, got {number!r}")
        numbers.append(float(number))
    return Price(numbers[0], numbers[1], source)


def load_prices(extra: dict[str, Any] | None = None, where: str = "probe.toml [prices]") -> PriceTable:
    data = parse_toml(
        resources.files("promptprobe").joinpath("prices.toml").read_bytes(), Path("prices.toml")
    )
    taken = str(data.pop("taken"))
    prices = {
        f"{provider}:{model}": _price(value, f"prices.toml {provider}.{model}", f"built-in (taken {taken})")
        for provider, table in data.items()
        for model, value in table.items()
    }
    for key, value in (extra or {}).items():
        if ":" not in key:
            raise InputError(f'{where}: key {key!r} must be a model spec such as "openai:gpt-4.1-mini"')
        prices[key] = _price(value, f"{where} {key!r}", "probe.toml")
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
