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
}
