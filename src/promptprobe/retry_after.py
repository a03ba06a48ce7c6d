"""How long a server asks to be left alone: `Retry-After` (seconds or an HTTP date) and
`retry-after-ms`, read alike for model calls and retrieval, so the runner's retries honour both."""

import time
from datetime import UTC
from typing import Any


def parse_retry_after(headers: Any, now: float | None = None) -> float | None:
    """Seconds from `retry-after-ms`, or `retry-after` in seconds or as an HTTP date."""
    if headers is None:
        return None
    value = headers.get("retry-after-ms")
    if value is not None:
        try:
            return max(0.0, float(value) / 1000)
        except ValueError:
            pass  # a malformed header: try the next form
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass  # not seconds: an HTTP date
    import email.utils  # only when a server sends a date

    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    current = now if now is not None else time.time()
    return max(0.0, when.timestamp() - current)
