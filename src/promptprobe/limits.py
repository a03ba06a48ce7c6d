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
    "max_bytes": (1, 2**31),  # [retrieval]: the reply body as received
    "max_decompressed_bytes": (1, 2**31),  # [retrieval]: the body a compressed reply expands to
    "max_depth": (1, 500),  # [retrieval]: JSON nesting (the JSON reader itself stops near 1,000)
}


WHOLE = frozenset({"repeats", "max_tokens", "concurrency", "seed", "max_attempts", "k"})  # counts


def range_problem(name: str, value: float, minimum: float | None = None) -> str | None:
    """ "must be between LOW and HIGH" (or "at least LOW") when `value` is outside the range of
    `name` (narrowed by `minimum`), NaN included; None when it is inside."""
    low, high = LIMITS.get(name, (minimum, None))
    if minimum is not None:
        low = max(low, minimum) if low is not None else minimum
    if value != value or (low is not None and value < low) or (high is not None and value > high):
        return f"must be between {low:g} and {high:g}" if high is not None else f"must be at least {low:g}"
    return None


def argument_problem(name: str, value: float | None) -> str | None:
    """Why a number given from Python (the API) is not a valid `name`: not a number, a fraction
    where a count is meant, or out of range; None when it is valid or not given."""
    if value is None:
        return None
    whole = name in WHOLE
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or (whole and not float(value).is_integer())
    ):
        return f"{name}={value!r}: must be {'a whole number' if whole else 'a number'}"
    problem = range_problem(name, value)
    return f"{name}={value!r}: {problem}" if problem else None
