"""One pace per provider endpoint, shared by every worker calling it.

- `--rpm N`: at most N requests a minute (evenly spaced).
- A 429 or 529 pauses the whole endpoint for the wait its retry takes, not only the worker
  that got it; waiters resume staggered (jitter) rather than all in the same millisecond.
- Rate-limit headers (`x-ratelimit-remaining-*` with `x-ratelimit-reset-*`, and Anthropic's
  `anthropic-ratelimit-*-remaining` with `-reset`) pause it until the reset when a budget is
  spent, for at most `--max-retry-wait` (then it tries again: a reset a server puts 1,000 s out
  must not stall a run the user capped at 2 s between attempts).
"""

import random
import re
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

DURATION = re.compile(
    r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m(?!s))?(?:(\d+(?:\.\d+)?)s)?(?:(\d+(?:\.\d+)?)ms)?$"
)
BUDGETS = ("requests", "tokens", "input-tokens", "output-tokens")


class Cancelled(Exception):
    """The run was cancelled while waiting."""


def parse_reset(value: str, now: float | None = None) -> float | None:
    """Seconds until a reset given as `1s`, `6m0s`, `20ms`, plain seconds or an RFC 3339 time."""
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass  # not plain seconds
    match = DURATION.match(value)
    if match and any(match.groups()):
        h, m, s, ms = (float(g) if g else 0.0 for g in match.groups())
        return h * 3600 + m * 60 + s + ms / 1000
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    current = now if now is not None else time.time()
    return max(0.0, when.timestamp() - current)


def header_pause(headers: dict[str, Any], longest: float) -> float | None:
    """How long a spent budget in these headers asks us to wait (at most `longest`), if any is spent."""
    waits = []
    for budget in BUDGETS:
        for remaining_name, reset_name in (
            (f"x-ratelimit-remaining-{budget}", f"x-ratelimit-reset-{budget}"),
            (f"anthropic-ratelimit-{budget}-remaining", f"anthropic-ratelimit-{budget}-reset"),
        ):
            remaining, reset = headers.get(remaining_name), headers.get(reset_name)
            if remaining is None or reset is None:
                continue
            try:
                spent = float(remaining) <= 0
            except ValueError:
                continue  # a malformed header says nothing
            wait = parse_reset(str(reset)) if spent else None
            if wait is not None:
                waits.append(min(wait, longest))
    return max(waits) if waits else None


class Limiter:
    def __init__(
        self,
        rpm: float = 0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] | None = None,  # tests record waits instead of sleeping
        max_wait: float = 60.0,  # --max-retry-wait: the longest a rate-limit header may pause
    ) -> None:
        self.rpm = rpm
        self.max_wait = max_wait
        self._clock = clock
        self.sleep = sleep
        self.slept = 0.0  # time a recording `sleep` pretended to pass
        self.lock = threading.Lock()
        self.next_slot = 0.0
        self.paused_until = 0.0
        self.pause_length = 0.0
        self.rng = random.Random()

    def clock(self) -> float:
        return self._clock() + self.slept

    def wait(self, cancel: threading.Event) -> None:
        """Block until this worker may send; raises Cancelled if the run is cancelled meanwhile."""
        with self.lock:
            now = self.clock()
            start = now
            if self.paused_until > now:
                # Stagger the workers a pause released, over up to a fifth of it (2 s at most),
                # within --max-retry-wait: pause and stagger together never wait longer than that.
                room = max(0.0, self.max_wait - self.pause_length)
                start = self.paused_until + self.rng.uniform(0, min(2.0, 0.2 * self.pause_length, room))
            if self.rpm > 0:
                start = max(start, self.next_slot)
                self.next_slot = start + 60.0 / self.rpm
            delay = start - now
        if delay > 0:
            if self.sleep is not None:
                self.sleep(delay)
                with self.lock:
                    self.slept += delay
            elif cancel.wait(delay):
                raise Cancelled
        if cancel.is_set():
            raise Cancelled

    def pause(self, seconds: float) -> None:
        """Hold every worker of this endpoint for `seconds` from now."""
        if seconds <= 0:
            return
        with self.lock:
            until = self.clock() + seconds
            if until > self.paused_until:
                self.paused_until = until
                self.pause_length = seconds

    def observe(self, headers: dict[str, Any]) -> None:
        wait = header_pause(headers, self.max_wait)
        if wait:
            self.pause(wait)
