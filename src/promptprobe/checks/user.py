"""Checks of your own: `[[check]]` in probe.toml names a function that reads one sample and says
yes (True), no (False) or "does not apply" (None). Each becomes a metric like the built-in
ones, so report, compare (and the Holm family of --all), the gate, sequential runs, why, the
HTML and export show it with no other change.

The function gets a read-only view of the sample: the question, the case (its id, expect,
tags, must_retrieve, history, vars and its own `data = {...}` table), the raw text exactly as
the model returned it, the text production's filter showed (when there is a [filter]), the
passages, the header object and the response (stop reason, usage, model). Each runs in a
worker process under its `timeout` (promptprobe.sandbox): a function that raises (anything),
hangs, exits or returns anything but True, False or None is an error of that metric for that
sample, counted as its unfavourable outcome with the message kept; the sample's raw output and
other metrics stand, so `probe classify RUN` can run the fixed function again offline.
"""

import pickle
from typing import Any

from .base import Check, Metric, SampleView, details
from .settings import CheckSettings, UserCheckConfig


def sample_view(view: SampleView) -> dict[str, Any]:
    """What a user check reads of one sample, as plain data (the worker hands it on read-only)."""
    filtered = view.details.get("filter")
    return {
        "question": view.case.question,
        "case": view.case.to_dict(),
        "text": view.text,
        "filtered_text": filtered.get("text") if filtered else None,
        "passages": [dict(p) for p in view.passages],
        "header": view.details.get("header"),
        "response": {key: view.response.get(key) for key in ("stop_reason", "usage", "model", "refusal")},
    }


def user_metric(config: UserCheckConfig) -> Metric:
    name = config.name
    unfavourable = not config.higher_is_better

    def outcome(sample: dict[str, Any], case: Any, settings: CheckSettings) -> bool | None:
        if name in details(sample, "user_errors"):
            return unfavourable  # the check failed on this sample: errors never flatter an arm
        return details(sample, "user").get(name)

    return Metric(
        name,
        config.higher_is_better,
        config.description or f"your check {config.function}",
        lambda case, settings: any(c.name == name for c in settings.user),
        outcome,
    )


class UserCheck(Check):
    """Every [[check]] of the settings, called in the order given, after the built-in checks, each
    in a worker process under its time limit (promptprobe.sandbox). A check that fails on a sample
    is recorded under `user_errors` with its message: an error of that metric for that sample, not
    of the sample (its raw output and the other metrics stand)."""

    key = "user"

    def __init__(self, settings: CheckSettings) -> None:
        from ..sandbox import START_SECONDS, Sandbox  # only a run with checks of yours starts workers

        super().__init__(settings)
        self.configs = list(settings.user)
        self.sandbox = Sandbox(
            [c.function for c in self.configs],
            [f"[[check]] {c.name}: function" for c in self.configs],
            # Importing may take as long as a call may (a check that loads a model), and 2 minutes.
            max(START_SECONDS, *(c.timeout for c in self.configs)),
        )

    @classmethod
    def active(cls, settings: CheckSettings) -> bool:
        return bool(settings.user)

    def entries(self, view: SampleView) -> dict[str, Any]:
        data = pickle.dumps(sample_view(view), protocol=pickle.HIGHEST_PROTOCOL)
        results: dict[str, bool | None] = {}
        errors: dict[str, str] = {}
        for index, config in enumerate(self.configs):
            outcome = self.sandbox.call(index, data, config.timeout)
            if outcome.error is not None:
                errors[config.name] = f"[[check]] {config.name} ({config.function}): {outcome.error}"
            else:
                results[config.name] = outcome.value
        return {"user": results, **({"user_errors": errors} if errors else {})}

    def close(self) -> None:
        self.sandbox.close()
