"""The built-in prices, from genai-prices' bundled data (offline: the package ships it; nothing is
downloaded), under promptprobe's rules rather than the library's own model matching.

A row prices the model ids its data names exactly: the model's id and every id its match clause
lists as an equality (`gpt-4.1` and `gpt-4.1-2025-04-14`); its prefix, substring and pattern
clauses are not used, so `claude-opus-4-1-fast` is not priced as `claude-opus-4-1`. Dated
snapshots are the one rule cost.py adds. A price that changed on a date is the one in effect on
the day priced (a run's own day, so a report of an old run keeps its prices; its start date is
shown); a price with a time-of-day condition has no row. A price tiered
by prompt length is its base tier when the first tier starts at LONG_CONTEXT input tokens or more
(a long-context surcharge far above a probe's prompt; the row says so), and has no row otherwise.
"""

import functools
from datetime import UTC, date, datetime
from importlib.metadata import version
from typing import Any

PROVIDERS = ("anthropic", "openai")  # the providers whose own endpoints cost.py recognises
LONG_CONTEXT = 128_000


def _decimal(value: Any) -> tuple[float | None, int | None]:
    """A price per million tokens as a float, and where its first tier starts (None: untiered)."""
    from genai_prices.types import TieredPrices

    if value is None:
        return None, None
    if isinstance(value, TieredPrices):
        return float(value.base), value.tiers[0].start if value.tiers else None
    return float(value), None


def _in_effect(prices: Any, today: date) -> tuple[Any, date | None] | None:
    """The ModelPrice in effect today and the date it started (None: a condition we do not model)."""
    from genai_prices.types import ModelPrice, StartDateConstraint

    if isinstance(prices, ModelPrice):
        return prices, None
    chosen: tuple[Any, date | None] | None = None
    for conditional in prices:
        constraint = conditional.constraint
        if constraint is None:
            chosen = chosen or (conditional.prices, None)
        elif isinstance(constraint, StartDateConstraint):
            if constraint.start_date <= today:
                chosen = (conditional.prices, constraint.start_date)
        else:
            return None
    return chosen


def _exact_ids(clause: Any) -> list[str]:
    from genai_prices.types import ClauseEquals, ClauseOr

    if isinstance(clause, ClauseEquals):
        return [clause.equals]
    if isinstance(clause, ClauseOr):
        return [found for inner in clause.or_ for found in _exact_ids(inner)]
    return []


@functools.cache
def source() -> str:
    """The library and its version, and the newest dated price change in its data up to today."""
    from genai_prices.data import providers
    from genai_prices.types import StartDateConstraint

    today = datetime.now(UTC).date()
    dates = [
        c.constraint.start_date
        for p in providers
        for m in p.models
        if isinstance(m.prices, list)
        for c in m.prices
        if isinstance(c.constraint, StartDateConstraint) and c.constraint.start_date <= today
    ]
    newest = f", data with price changes up to {max(dates).isoformat()}" if dates else ""
    return f"genai-prices {version('genai-prices')}{newest}"


@functools.cache
def _rows_cached(
    rates_key: tuple[tuple[str, tuple[tuple[str, float], ...]], ...], today: date
) -> dict[str, Any]:
    from genai_prices.data import providers

    rates = {provider: dict(values) for provider, values in rates_key}
    where = f"built-in, {source()}"
    rows: dict[str, dict[str, Any]] = {}
    for provider in providers:
        if provider.id not in PROVIDERS:
            continue
        for model in provider.models:
            found = _in_effect(model.prices, today)
            if found is None:
                continue
            price, since = found
            values = {
                key: _decimal(getattr(price, f"{key}_mtok", None))
                for key in ("input", "output", "cache_read", "cache_write")
            }
            if values["input"][0] is None or values["output"][0] is None:
                continue
            tiers = [start for _, start in values.values() if start is not None]
            if tiers and min(tiers) < LONG_CONTEXT:
                continue  # priced by prompt length from a size a probe can reach: no guess
            rule = f"base tier: prompts under {min(tiers):,} tokens" if tiers else None
            own = rates.get(provider.id, {})
            cache = {key: values[key][0] for key in ("cache_read", "cache_write")}
            for key in cache:
                if cache[key] is None and key in own:  # the provider's rule for a row without its own
                    cache[key] = round(values["input"][0] * own[key], 10)
            for model_id in dict.fromkeys([model.id, *_exact_ids(model.match)]):
                rows[f"{provider.id}:{model_id}"] = dict(
                    input=values["input"][0],
                    output=values["output"][0],
                    source=where,
                    cache_read=cache["cache_read"],
                    cache_write=cache["cache_write"],
                    batch=own.get("batch", 1.0),
                    row=f"{provider.id}:{model.id}",
                    taken=since.isoformat() if since else None,
                    rule=rule if model_id == model.id else _alias(model.id, rule),
                )
    return rows


def _alias(model_id: str, rule: str | None) -> str:
    return f"listed as {model_id}" + (f"; {rule}" if rule else "")


def builtin_rows(rates: dict[str, dict[str, float]], day: date | None = None) -> dict[str, Any]:
    """Every built-in row by "provider:model id" as priced on `day` (default today), each the
    arguments of a cost.Price."""
    key = tuple(sorted((p, tuple(sorted(v.items()))) for p, v in rates.items()))
    return _rows_cached(key, day or datetime.now(UTC).date())
