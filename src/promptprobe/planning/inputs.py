"""The flags of `probe plan`, checked: finite; rates and ICC in [0, 1]; alpha in (0, 0.5]; power in
[0.5, 1). A bad one is an InputError naming the flag."""

from ..errors import InputError
from ..stats.planning import validate


def _check(name: str, value: float | None, low: float, high: float, **kwargs: bool) -> None:
    if value is None:
        return
    try:
        validate(name, value, low, high, **kwargs)
    except ValueError as exc:
        raise InputError(f"--{exc}") from None


def check_flags(
    p1: float | None = None,
    p2: float | None = None,
    alpha: float = 0.05,
    power: float = 0.8,
    icc: float | None = None,
    p: float | None = None,
) -> None:
    _check("p1", p1, 0, 1)
    _check("p2", p2, 0, 1)
    _check("p", p, 0, 1)
    _check("icc", icc, 0, 1)
    _check("alpha", alpha, 0, 0.5, low_open=True)
    _check("power", power, 0.5, 1, high_open=True)
