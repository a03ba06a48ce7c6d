"""A plan's view object: what `probe plan` prints, built once for the text, markdown and JSON."""

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class PlanView:
    """`kind` names the plan ("samples", "detectable", "gate" or "sequential"); `data` is its JSON,
    key for key; `shown` holds the figures the text prints beside those (samples a plan of repeats
    takes, a limit a search stopped at), computed here so that no renderer computes one."""

    kind: str
    data: dict[str, Any]
    shown: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return self.data
