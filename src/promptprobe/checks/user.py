"""Checks of your own: `[[check]]` in probe.toml names a function that reads one sample and says
yes (True), no (False) or "does not apply" (None). Each becomes a metric like the built-in
ones, so report, compare (and the Holm family of --all), the gate, sequential runs, why, the
HTML and export show it with no other change.

The function gets a read-only view of the sample: the question, the case (its id, expect,
tags, must_retrieve, history, vars and its own `data = {...}` table), the raw text exactly as
the model returned it, the text production's filter showed (when there is a [filter]), the
passages, the header object and the response (stop reason, usage, model). A function that
raises, or returns anything but True, False or None, makes the sample an error of kind `check`
with the message kept; its raw output stays, so `probe classify RUN` can run the fixed function
again offline.
"""

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from ..errors import InputError
from ..production import call_production, import_function
from .base import Check, CheckError, Metric, SampleView, details
from .settings import CheckSettings, UserCheckConfig


def frozen(value: Any) -> Any:
    """A read-only copy: mappings behind MappingProxyType, lists as tuples."""
    if isinstance(value, Mapping):
        return MappingProxyType({key: frozen(item) for key, item in value.items()})
    if isinstance(value, list | tuple):
        return tuple(frozen(item) for item in value)
    return value


def sample_view(view: SampleView) -> Mapping[str, Any]:
    """What a user check reads of one sample."""
    filtered = view.details.get("filter")
    return frozen(
        {
            "question": view.case.question,
            "case": view.case.to_dict(),
            "text": view.text,
            "filtered_text": filtered.get("text") if filtered else None,
            "passages": list(view.passages),
            "header": view.details.get("header"),
            "response": {key: view.response.get(key) for key in ("stop_reason", "usage", "model", "refusal")},
        }
    )


def user_metric(config: UserCheckConfig) -> Metric:
    name = config.name
    return Metric(
        name,
        config.higher_is_better,
        config.description or f"your check {config.function}",
        lambda case, settings: any(c.name == name for c in settings.user),
        lambda sample, case, settings: details(sample, "user").get(name),
    )


class UserCheck(Check):
    """Every [[check]] of the settings, called in the order given, after the built-in checks."""

    key = "user"

    def __init__(self, settings: CheckSettings) -> None:
        super().__init__(settings)
        self.functions = [
            (config, import_function(config.function, f"[[check]] {config.name}: function"))
            for config in settings.user
        ]

    @classmethod
    def active(cls, settings: CheckSettings) -> bool:
        return bool(settings.user)

    def evaluate(self, view: SampleView) -> dict[str, Any]:
        sample = sample_view(view)
        results: dict[str, bool | None] = {}
        for config, function in self.functions:
            where = f"[[check]] {config.name} ({config.function})"
            try:
                result = call_production(function, config.function, where, sample)
            except InputError:
                raise
            except Exception as exc:  # a user's function may raise anything; it is this sample's error
                raise CheckError("check", f"{where}: {type(exc).__name__}: {exc}") from exc
            if result is not None and not isinstance(result, bool):
                raise CheckError(
                    "check", f"{where}: returned {type(result).__name__}; a check returns True, False or None"
                )
            results[config.name] = result
        return results
