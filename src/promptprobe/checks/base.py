"""The check interface: a check turns one recorded sample into details and yes/no metrics.

A check records its details at run time (or when a run is reclassified offline); each of its
metrics reads those details back as a yes/no outcome. Whether a metric applies is decided by
the case and the settings alone, so a sample that failed still has a place in every
denominator it would have counted in, as that metric's unfavourable outcome.
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..probeset import Case
from .settings import CheckSettings


class CheckError(Exception):
    """A check could not run on this sample (production's filter raised): the sample's error."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class SampleView:
    """What a check sees of one sample: the case, the exact output text and what was retrieved."""

    case: Case
    text: str | None  # None: the model returned no text
    passages: Sequence[dict[str, Any]]  # id, text, score, in rank order
    response: dict[str, Any]
    settings: CheckSettings
    details: dict[str, Any]  # what the checks before this one recorded (the filter's visitor text)


@dataclass(frozen=True)
class Metric:
    """A yes/no outcome per sample with one declared direction."""

    name: str
    higher_is_better: bool
    description: str
    applies: Callable[[Case, CheckSettings], bool]
    outcome: Callable[[dict[str, Any], Case, CheckSettings], bool]  # (sample record, case, settings)
    # Settings a report may change without reclassifying (--top-k): then the recorded outcome
    # is derived again from the details.
    recompute_on: tuple[str, ...] = ()


class Check:
    """One module of checks/. `key` names its details in a sample record."""

    key: str = ""
    metrics: tuple[Metric, ...] = ()

    def __init__(self, settings: CheckSettings) -> None:
        self.settings = settings

    @classmethod
    def active(cls, settings: CheckSettings) -> bool:
        """Whether this check runs at all under these settings."""
        return True

    def evaluate(self, view: SampleView) -> dict[str, Any] | None:
        """The details to record for this sample (None: nothing to record)."""
        raise NotImplementedError

    def entries(self, view: SampleView) -> dict[str, Any]:
        """What this check adds to the sample's `checks` (its details under its key; a check may
        record more than one entry)."""
        result = self.evaluate(view)
        return {} if result is None else {self.key: result}

    def close(self) -> None:
        """Release what the check holds (worker processes)."""


def details(sample: dict[str, Any], key: str) -> dict[str, Any]:
    """A check's recorded details in a sample ({} when it recorded none)."""
    if key == "header":
        return sample.get("header") or {}
    return (sample.get("checks") or {}).get(key) or {}
