"""The plan: which calls a run makes, generated lazily in a seeded order.

A unit is one (case, repeat): one retrieval, shared by every arm, then one sample per arm.
Units are ordered repeat by repeat (so a run stopped early has every case about equally
often), cases shuffled within a repeat and arms shuffled within a unit by the run's seed, so
that a provider's slow minute or bad hour falls on every arm alike. Nothing is materialised:
memory does not grow with the number of samples.
"""

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import InputError
from ..models import ModelSpec, check_names
from ..probeset import Case
from ..prompts import PromptVersion


@dataclass(frozen=True)
class Arm:
    index: int
    prompt: PromptVersion
    model: ModelSpec

    def to_dict(self) -> dict[str, Any]:
        # `model` is the arm's model name (its spec unless named NAME=SPEC), as in each sample.
        return {"arm": self.index, "prompt": self.prompt.name, "model": self.model.label}


@dataclass(frozen=True)
class Unit:
    case: Case
    repeat: int


def make_arms(prompts: Sequence[PromptVersion], models: Sequence[ModelSpec]) -> list[Arm]:
    if not prompts:
        raise InputError("no prompt: give --prompt FILE")
    if not models:
        raise InputError("no model: give --model SPEC or list [run] models in probe.toml")
    names = [p.name for p in prompts]
    duplicate = next((n for n in names if names.count(n) > 1), None)
    if duplicate:
        raise InputError(
            f"two prompt versions are both named {duplicate!r}: name one with --prompt NAME=PATH"
        )
    folded = [n.lower() for n in names]
    alike = next((n for i, n in enumerate(names) if folded.index(n.lower()) != i), None)
    if alike:
        first = names[folded.index(alike.lower())]
        # Each prompt's copy is prompts/NAME.md in the run: one file on macOS and Windows.
        raise InputError(
            f"prompt versions {first!r} and {alike!r} differ only in case, so their copies in the run "
            "would overwrite each other on macOS and Windows: name one with --prompt NAME=PATH"
        )
    specs = [m.spec for m in models]
    twice = next((spec for spec in specs if specs.count(spec) > 1), None)
    if twice:
        raise InputError(f"the model {twice} is given twice: give each model once")
    check_names(models)
    return [Arm(i, p, m) for i, (p, m) in enumerate(((p, m) for p in prompts for m in models), 1)]


def sample_id(case_id: str, repeat: int, arm: Arm) -> str:
    return f"{case_id}.r{repeat}.a{arm.index}"


@dataclass(frozen=True)
class Plan:
    cases: tuple[Case, ...]
    arms: tuple[Arm, ...]
    repeats: int
    seed: int

    @property
    def samples(self) -> int:
        return len(self.cases) * self.repeats * len(self.arms)

    def case_order(self, repeat: int) -> list[Case]:
        order = list(self.cases)
        random.Random(f"{self.seed}:cases:{repeat}").shuffle(order)
        return order

    def arm_order(self, case: Case, repeat: int) -> list[Arm]:
        order = list(self.arms)
        random.Random(f"{self.seed}:arms:{case.id}:{repeat}").shuffle(order)
        return order

    def units(self, repeats: range | None = None) -> Iterator[Unit]:
        for repeat in repeats or range(1, self.repeats + 1):
            for case in self.case_order(repeat):
                yield Unit(case, repeat)
