"""Which plan `probe plan`'s flags ask for, and that plan built: the one entry of the CLI and the API."""

from ..errors import InputError
from .detectable import plan_mdd
from .gate import plan_gate
from .inputs import check_flags
from .samples import plan_sample_size
from .sequential import plan_sequential
from .view import PlanView


def choose_plan(
    p1: float | None = None,
    p2: float | None = None,
    *,
    n: int | None = None,
    alpha: float = 0.05,
    power: float = 0.8,
    cases: int | None = None,
    icc: float | None = None,
    gate_any_of: int | None = None,
    p: float | None = None,
    sequential: bool = False,
    detect: float = 15.0,
    cases_b: int | None = None,
) -> PlanView:
    """The gate's plan, a sequential run's, the smallest change `n` detects, or the samples (and
    repeats of `cases` questions) to tell p1 from p2, in that order of precedence; `detect` in
    points. The flags' types and counts are the caller's to check."""
    if not 0 < detect <= 100:
        raise InputError(f"--detect must lie in (0, 100] points, got {detect!r}")
    if gate_any_of is not None and gate_any_of > 1000:
        raise InputError(f"gate_any_of={gate_any_of!r}: must be between 1 and 1000")
    check_flags(p1, p2, alpha, power, icc, p)
    if gate_any_of is not None:
        if p is None:
            raise InputError("--gate-any-of needs --p (the per-run success rate)")
        return plan_gate(p, gate_any_of)
    if sequential:
        if p1 is None or p2 is None or cases is None:
            raise InputError("--sequential needs --p1, --p2 and --cases")
        icc = icc if icc is not None else 0.5
        return plan_sequential(p1, p2, cases, icc, alpha, power, detect=detect / 100)
    if n is not None:
        if p1 is None:
            raise InputError("--n needs --p1 (the rate you have now)")
        return plan_mdd(n, p1, alpha, power)
    if p1 is not None and p2 is not None:
        if (cases is None) != (icc is None):
            raise InputError("--cases and --icc go together")
        if cases_b is not None and cases is None:
            raise InputError("--cases-b goes with --cases and --icc (A's cases and their ICC)")
        return plan_sample_size(p1, p2, alpha, power, cases, icc, cases_b)
    raise InputError("give --p1 and --p2, or --n and --p1, or --gate-any-of K and --p")
