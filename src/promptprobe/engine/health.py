"""Is the target down? A model whose first samples all fail the same permanent way (401, 404,
cannot connect) is down: its remaining samples are recorded as errors without calling it, and
when every model is down the run stops. A retrieval that fails the same permanent way on the
first questions stops the run too. Transient failures (429, 5xx, timeouts) never mean down."""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import StartError
from .retrieval import Retrieved

FAIL_FAST = 3  # identical permanent failures, before any success, that mean "down"
PERMANENT_STATUS = frozenset({400, 401, 403, 404, 405, 410, 422})


@dataclass
class Health:
    ok: int = 0
    failures: list[str] = field(default_factory=list)
    down: str | None = None  # why, once down

    def failed(self, signature: str) -> bool:
        """Count a permanent failure; True when the first ones were all this one (down now)."""
        self.failures.append(signature)
        return len(self.failures) >= FAIL_FAST and len(set(self.failures[-FAIL_FAST:])) == 1


def failure_signature(error: dict[str, Any], status: int | None) -> str | None:
    """A permanent failure's signature, or None for a transient one (which never means down)."""
    if error["kind"] in ("connection", "timeout"):
        return "cannot connect"
    if status in PERMANENT_STATUS:
        return f"HTTP {status}"
    return None


class HealthWatch:
    """The health of each model of a run and of its retrieval, from the samples as they come
    (the caller serialises the calls). Each `saw_*` returns the error that stops the run, if any."""

    def __init__(
        self, specs: list[str], down: dict[str, str], reachable: Callable[[str], bool] | None = None
    ) -> None:
        self.models = {spec: Health(down=down.get(spec)) for spec in specs}
        self.retrieval = Health()
        # Whether a model's endpoint accepts a connection now (engine/parts.py: a TCP connect).
        self.reachable = reachable or (lambda spec: False)

    def down(self, spec: str) -> str | None:
        """Why a model is not called any more, or None while it is."""
        return self.models[spec].down

    def saw_sample(self, spec: str, record: dict[str, Any]) -> StartError | None:
        health = self.models[spec]
        error = record.get("error")
        if health.down is not None or health.ok:
            return None
        if error is None:
            health.ok += 1
            return None
        if error["kind"] in ("retrieval", "assemble", "model_down"):
            return None  # not the model's doing
        status = next((a.get("status") for a in reversed(record.get("attempts_log") or [])), None)
        signature = failure_signature(error, status)
        if signature is None:
            health.failures.clear()
            return None
        if not health.failed(signature):
            return None
        if signature == "cannot connect" and self.reachable(spec):
            # It stalls or drops replies but accepts connections: flaky, not down (each failure counts).
            health.failures.clear()
            return None
        reason = "could not connect" if signature == "cannot connect" else f"got {signature}"
        why = (
            f"{error['message']}: the model looks down (its first {len(health.failures)} samples "
            f"{reason} after retries)"
        )
        health.down = f"{why}; not called again in this run"
        if all(h.down for h in self.models.values()):
            return StartError(why + ("" if len(self.models) == 1 else "; every model of this run is down"))
        return None

    def saw_retrieval(self, retrieved: Retrieved) -> StartError | None:
        health = self.retrieval
        if health.ok or health.down:
            return None
        if not retrieved.failed:
            health.ok += 1
            return None
        error = retrieved.error
        assert error is not None
        if error.unreachable:
            signature = "cannot connect"
        elif error.status in PERMANENT_STATUS or (not error.retryable and error.status is None):
            signature = f"HTTP {error.status}" if error.status else str(error)
        else:
            health.failures.clear()
            return None
        if health.failed(signature):
            return StartError(
                f"{error}: the retrieval failed the same way on the first {FAIL_FAST} questions; stopped"
            )
        return None
