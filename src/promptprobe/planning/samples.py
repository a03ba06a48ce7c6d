"""Samples per arm to tell p1 from p2, and the repeats (or cases) a probe set of questions needs
(`probe plan --p1 X --p2 Y [--cases C --icc R [--cases-b D]]`).

Every figure is the power of the test the verdict uses: exact for one question asked n times per
arm, simulated for a probe set of `cases` cases (paired and unpaired; `cases_b`: B's cases of an
unpaired design whose sides differ, which has no paired figure).
"""

import math
from typing import Any

from ..errors import InputError
from ..stats.planning import MAX_CASES, MAX_REPEATS, MAX_SAMPLES, design_plan, size_plan
from .inputs import check_flags
from .view import PlanView


def plan_sample_size(
    p1: float,
    p2: float,
    alpha: float = 0.05,
    power: float = 0.8,
    cases: int | None = None,
    icc: float | None = None,
    cases_b: int | None = None,
) -> PlanView:
    check_flags(p1, p2, alpha, power, icc)
    if p1 == p2:
        raise InputError("--p1 and --p2 are equal: there is no difference to detect")
    size = size_plan(p1, p2, alpha, power)
    data: dict[str, Any] = {
        "p1": p1,
        "p2": p2,
        "n_per_arm": size.n,
        "n_per_arm_power": size.power,
        "test": size.test,
        "alpha": alpha,
        "power": power,
    }
    shown: dict[str, Any] = {"max_samples": MAX_SAMPLES}
    if cases is not None and icc is not None:
        data.update(_designs(p1, p2, alpha, power, cases, icc, cases_b))
        shown.update(
            max_repeats=MAX_REPEATS,
            max_cases=MAX_CASES,
            paired_samples=data["repeats"] * cases if data["repeats"] is not None else None,
            icc_between=math.isfinite(icc) and 0 < icc < 1,  # the ICC's meaning is worth a line
        )
    return PlanView("samples", data, shown)


def _designs(
    p1: float, p2: float, alpha: float, power: float, cases: int, icc: float, cases_b: int | None
) -> dict[str, Any]:
    """The paired plan (none when the sides ask different numbers of cases) and the unpaired one."""
    sides_differ = cases_b is not None and cases_b != cases
    paired = None if sides_differ else design_plan(p1, p2, cases, icc, alpha, power, paired=True)
    unpaired = design_plan(p1, p2, cases, icc, alpha, power, paired=False, cases_b=cases_b)
    return {
        "cases": cases,
        **({"cases_b": cases_b} if sides_differ else {}),
        "icc": icc,
        "repeats": paired.repeats if paired else None,
        "paired_power": paired.power if paired else None,
        "repeats_unpaired": unpaired.repeats,
        "unpaired_power": unpaired.power,
        "unpaired_cases_needed": unpaired.cases_needed,
        "unpaired_cases_needed_power": unpaired.cases_power,
        "unpaired_smallest_p": unpaired.smallest_p,
        "unpaired_reachable": unpaired.reachable,
    }
