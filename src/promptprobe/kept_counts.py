"""A finished run's counts table as its manifest keeps it (`totals.counts`, docs/runs.md): the
part of the table one pass over samples.jsonl adds up (promptprobe.counts), written as JSON and
read back exactly. Reading is strict: anything but the form `encode` writes, or a name the run's
plan does not have, is refused (ValueError), and the run is counted again."""

from array import array
from collections import Counter
from itertools import repeat
from typing import Any

import orjson

# The arm's figures, in the order of the tuple counts' partial tables hold them.
ARM_FIELDS = (
    "samples", "errors", "error_kinds", "metrics", "headers", "input_tokens", "output_tokens",
    "cost", "cost_unknown", "latencies", "cache_saved", "batched", "check_errors", "judge_errors",
    "judge_cost", "judge_cost_unknown",
)  # fmt: skip


class Malformed(ValueError):
    """What the manifest keeps is not the form `encode` writes, or not of this run."""


def encode(part: dict[str, Any]) -> dict[str, Any]:
    """A finished table's part (no pending failures: finish() settled them) as JSON values."""
    arms = []
    for figures, patterns in zip(part["arms"], part["patterns"], strict=True):
        arm = dict(zip(ARM_FIELDS, figures, strict=True))
        arm["latencies"] = sorted(Counter(arm["latencies"]).items())  # latencies repeat: a value, its count
        arm["patterns"] = {case_id: _pairs(seen) for case_id, seen in patterns.items()}
        arms.append(arm)
    return {
        "recorded": part["recorded"],
        "simulated": part["simulated"],
        "snapshots": {case_id: _pairs(found) for case_id, found in part["snapshots"].items()},
        "empty": dict(part["empty"]),
        "check_applies": part["check_applies"],
        "arms": arms,
    }


def _pairs(counted: Counter) -> list[list[Any]]:
    """A counter's keys (tuples) and counts, in an order of their own (the same however counted)."""
    return sorted(
        ([list(key), count] for key, count in counted.items()), key=lambda pair: orjson.dumps(pair[0])
    )


def decode(data: Any, arms: int, cases: set[str], metrics: set[str], width: int) -> dict[str, Any]:
    """The part `encode` wrote, checked against the run's plan: its number of arms, its cases, its
    metrics and a pattern's width."""
    _is(data, dict)
    if set(data) != {"recorded", "simulated", "snapshots", "empty", "check_applies", "arms"}:
        raise Malformed("unexpected keys")
    _is(data["arms"], list)
    if len(data["arms"]) != arms:
        raise Malformed("another number of arms")
    check_applies = _named(data["check_applies"], metrics)
    for per_case in check_applies.values():
        for value in _named(per_case, cases).values():
            _is(value, bool)
    decoded = [_arm(arm, cases, metrics, width) for arm in data["arms"]]
    return {
        "recorded": _count(data["recorded"]),
        "simulated": _is(data["simulated"], bool),
        "snapshots": {
            case_id: _counter(found, lambda key: tuple(_is(part, str) for part in key))
            for case_id, found in _named(data["snapshots"], cases).items()
        },
        "empty": _counts(data["empty"], cases),
        "check_applies": check_applies,
        "pending": [{} for _ in decoded],
        "patterns": [patterns for _, patterns in decoded],
        "arms": [figures for figures, _ in decoded],
    }


def _arm(
    arm: Any, cases: set[str], metrics: set[str], width: int
) -> tuple[tuple[Any, ...], dict[str, Counter]]:
    _is(arm, dict)
    if tuple(arm) != (*ARM_FIELDS, "patterns"):
        raise Malformed("an arm's keys")
    for key in ("samples", "errors", "input_tokens", "output_tokens", "batched"):
        _count(arm[key])
    for key in ("cost", "cache_saved", "judge_cost"):
        if type(arm[key]) not in (float, int):
            raise Malformed(f"{key} is not a number")
    for key in ("cost_unknown", "judge_cost_unknown"):
        _is(arm[key], bool)
    metric_cells = {
        name: {case_id: _cell(cell) for case_id, cell in _named(per_case, cases).items()}
        for name, per_case in _named(arm["metrics"], metrics).items()
    }
    headers = {case_id: _counts(states, None) for case_id, states in _named(arm["headers"], cases).items()}
    latencies = array("d")
    for pair in _is(arm["latencies"], list):
        value, count = _pair(pair)
        if type(value) not in (float, int):
            raise Malformed("a latency is not a number")
        latencies.extend(repeat(float(value), count))
    patterns = {
        case_id: _counter(seen, lambda key: _pattern(key, width))
        for case_id, seen in _named(arm["patterns"], cases).items()
    }
    figures = {
        **arm,
        "error_kinds": Counter(_counts(arm["error_kinds"], None)),
        "metrics": metric_cells,
        "headers": headers,
        "latencies": latencies,
        "check_errors": Counter(_counts(arm["check_errors"], None)),
        "judge_errors": Counter(_counts(arm["judge_errors"], None)),
    }
    return tuple(figures[key] for key in ARM_FIELDS), patterns


def _pattern(key: Any, width: int) -> tuple[int | None, ...]:
    if len(_is(key, list)) != width or any(value not in (0, 1, None) or type(value) is bool for value in key):
        raise Malformed("an outcome pattern")
    return tuple(key)


def _cell(cell: Any) -> list[int]:
    if len(_is(cell, list)) != 3:
        raise Malformed("a metric's cell")
    return [_count(value) for value in cell]


def _counter(pairs: Any, key_of: Any) -> Counter:
    counted: Counter = Counter()
    for pair in _is(pairs, list):
        key, count = _pair(pair)
        counted[key_of(key)] += count
    return counted


def _pair(pair: Any) -> tuple[Any, int]:
    if len(_is(pair, list)) != 2:
        raise Malformed("a pair")
    return pair[0], _count(pair[1])


def _counts(counted: Any, names: set[str] | None) -> dict[str, int]:
    return {name: _count(count) for name, count in _named(counted, names).items()}


def _named(mapping: Any, names: set[str] | None) -> dict[str, Any]:
    """A JSON object whose keys are among the names (any string when None)."""
    _is(mapping, dict)
    if names is not None and not set(mapping) <= names:
        raise Malformed("a name the run does not have")
    return mapping


def _count(value: Any) -> int:
    if type(value) is not int or value < 0:
        raise Malformed("a count is not a whole number")
    return value


def _is(value: Any, kind: type) -> Any:
    if type(value) is not kind:
        raise Malformed(f"{kind.__name__} expected")
    return value
