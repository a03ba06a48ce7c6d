"""The range of every number a run takes, in probe.toml and on the command line alike."""

# Beyond them a value is a typo, or cannot be represented on the way (a timeout of 1e308
# overflows a wait; max_tokens beyond int64 cannot be written to the manifest).
LIMITS: dict[str, tuple[float, float]] = {
    "repeats": (1, 1_000_000),
    "max_tokens": (1, 1_000_000),
    "concurrency": (1, 1_000),
    "temperature": (0, 100),
    "seed": (-(2**63), 2**63 - 1),
    "timeout": (0.001, 86_400),
    "max_attempts": (1, 100),
    "max_retry_wait": (0, 86_400),
    "rpm": (0, 10_000_000),
    "k": (1, 10_000),
    "poll_interval": (0, 3_600),
}


WHOLE = frozenset({"repeats", "max_tokens", "concurrency", "seed", "max_attempts", "k"})  # counts


def out_of_range(name: str, value: float | None) -> str | None:
    """Why `value` is not a valid `name` (also NaN, and a fraction where a count is meant), or
    None when it is (or not given)."""
    if value is None:
        return None
    low, high = LIMITS[name]
    whole = name in WHOLE
    kind = "a whole number" if whole else "a number"
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not number or not low <= value <= high or (whole and not float(value).is_integer()):
        return f"{name}={value!r}: give {kind} from {_shown(low)} to {_shown(high)}"  # NaN fails the range
    return None


def _shown(bound: float) -> str:
    return f"{int(bound):,}" if float(bound).is_integer() else f"{bound:g}"
