"""Before a run creates anything: connect to each model's endpoint, retrieve the first question,
and look at each batch API a batch run will use. A target that refuses connections, or a server
that does not speak the batch endpoints, stops the run here (exit 3, no run directory); a model
that refuses while others answer is marked down and its samples recorded without calls."""

import threading
from dataclasses import replace

from ..errors import StartError
from ..providers.base import ProviderError
from ..providers.batching import UNSUPPORTED_STATUS, BatchAPI
from .parts import RunParts
from .plan import Plan
from .retrieval import Retrieved
from .retry import Attempted, RetryPolicy, call_with_retries


def preflight(
    parts: RunParts, plan: Plan, policy: RetryPolicy, cancel: threading.Event
) -> tuple[Retrieved, dict[str, str]]:
    """(the first question's retrieval, the models that look down with why)."""
    # One quick retry at most: a target that refuses connections now is down, not flaky.
    quick = replace(policy, max_attempts=min(2, policy.max_attempts))
    retrieved = parts.retrieval(None, quick, cancel).retrieve(plan.case_order(1)[0])
    if retrieved.error is not None and retrieved.error.unreachable:
        raise StartError(f"{retrieved.error}; nothing was run")
    unreachable = parts.unreachable()
    arm_specs = {arm.model.spec for arm in plan.arms}  # a judge's model alone does not make a target
    if unreachable and arm_specs <= set(unreachable):
        raise StartError(f"{'; '.join(unreachable.values())}; nothing was run")
    down = {
        spec: f"{reason}: the model looks down; not called in this run"
        for spec, reason in unreachable.items()
    }
    for spec, api in parts.batch_apis.items():
        if spec not in down:
            check_batch_api(spec, api, quick, cancel)
    return retrieved, down


def check_batch_api(spec: str, api: BatchAPI, policy: RetryPolicy, cancel: threading.Event) -> None:
    """One look at the model's batch list: StartError when the server does not speak the batch
    API (404, 405, 501) or refuses it (a key without access)."""
    try:
        call_with_retries(api.check, policy, cancel, retryable_kinds=(ProviderError,))
    except Attempted as failure:
        status = getattr(failure.error, "status", None)
        if status in UNSUPPORTED_STATUS:
            raise StartError(
                f"model {spec}: the server does not speak the batch API (its batch list answered "
                f"HTTP {status}); run it without --batch; nothing was run"
            ) from None
        raise StartError(
            f"model {spec}: cannot use its batch API ({failure.error}); nothing was run"
        ) from None
