"""Anytime-valid evidence for two arms asked the same questions in rounds.

In each round every case is asked once under each arm. A (case, round) pair where exactly one
arm succeeded is discordant; under "the arms do not differ", whatever the case's own rate,
each discordant pair favours B with probability 1/2. With d discordant pairs of which s favour
B, the Beta(a, a) mixture of the likelihood ratio of p against 1/2 is

    e = 2^d · B(s + a, d - s + a) / B(a, a)

(a = 1: the uniform mixture; a = 1/2: the Krichevsky-Trofimov mixture, which puts more weight
on large effects and decided sooner in the benchmark). It is a nonnegative martingale with mean
1 under the null, so by Ville's inequality rejecting when e >= 1/alpha keeps the false-alarm
rate at most alpha however often it is checked (Howard et al. 2021; Waudby-Smith & Ramdas 2023).
"""

import math
from typing import Any

KT = 0.5  # the mixture promptprobe uses


def log_beta(x: float, y: float) -> float:
    return math.lgamma(x) + math.lgamma(y) - math.lgamma(x + y)


def mixture_e_value(favour_b: int, discordant: int, a: float = KT) -> float:
    """The Beta(a, a) mixture e-value of `favour_b` of `discordant` fair-coin pairs."""
    if not 0 <= favour_b <= discordant:
        raise ValueError(f"need 0 <= favour_b <= discordant, got {favour_b}, {discordant}")
    log_e = discordant * math.log(2) + log_beta(favour_b + a, discordant - favour_b + a) - log_beta(a, a)
    return math.exp(min(log_e, 700.0))


def decide(favour_b: int, discordant: int, alpha: float, a: float = KT) -> str | None:
    """`B>A` / `A>B` once the evidence reaches 1/alpha, else None."""
    if mixture_e_value(favour_b, discordant, a) < 1 / alpha:
        return None
    return "B>A" if 2 * favour_b > discordant else "A>B"


def simulate_rounds(
    p1: float,
    p2: float,
    cases: int,
    icc: float,
    alpha: float = 0.05,
    min_rounds: int = 2,
    max_rounds: int = 40,
    trials: int = 2000,
    seed: int = 20261130,
    a: float = KT,
) -> tuple[Any, Any]:
    """Simulated sequential runs (paired questions, see `simulation`): per trial the round it
    stopped at (0: reached the cap undecided) and whether it said B>A (+1), A>B (-1) or nothing."""
    import numpy as np
    from scipy.special import betaln

    from .simulation import paired_rates

    rng = np.random.default_rng(seed)
    rates_a, rates_b = paired_rates(rng, p1, p2, icc, (trials, cases))
    a_ok = rng.random((trials, max_rounds, cases)) < rates_a[:, None, :]
    b_ok = rng.random((trials, max_rounds, cases)) < rates_b[:, None, :]
    favour_b = np.cumsum((b_ok & ~a_ok).sum(axis=2), axis=1)
    discordant = favour_b + np.cumsum((a_ok & ~b_ok).sum(axis=2), axis=1)
    log_e = discordant * math.log(2) + betaln(favour_b + a, discordant - favour_b + a) - betaln(a, a)
    reached = log_e >= math.log(1 / alpha)
    reached[:, : min_rounds - 1] = False
    stopped = reached.any(axis=1)
    first = np.where(stopped, reached.argmax(axis=1) + 1, 0)
    index = np.clip(first - 1, 0, max_rounds - 1)
    rows = np.arange(trials)
    direction = np.sign(2 * favour_b[rows, index] - discordant[rows, index])
    return first, np.where(stopped, direction, 0)
