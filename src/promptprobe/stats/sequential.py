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

The pairs are counted by rate: a discordant pair "favours B" when B's outcome is the 1 (B's rate
is the higher one there), whatever the metric's direction, so that the decision reads like every
other verdict: `B>A` means B's rate is reliably higher.

The cap of a run (`--detect POINTS`): the rounds this rule needs to decide a difference of that
size with 80% power where it is hardest to see, between 50% - d/2 and 50% + d/2 with questions
that do not differ from each other (ICC 0: questions that differ make discordant pairs rarer and
the same difference quicker to decide), found by simulating the rule (`rounds_for_power`).
"""

import math
from dataclasses import dataclass
from typing import Any

from .tests import DECISION_TOLERANCE

KT = 0.5  # the mixture promptprobe uses


def log_beta(x: float, y: float) -> float:
    return math.lgamma(x) + math.lgamma(y) - math.lgamma(x + y)


def mixture_e_value(b_higher: int, discordant: int, a: float = KT) -> float:
    """The Beta(a, a) mixture e-value of `b_higher` of `discordant` fair-coin pairs."""
    if not 0 <= b_higher <= discordant:
        raise ValueError(f"need 0 <= b_higher <= discordant, got {b_higher}, {discordant}")
    log_e = discordant * math.log(2) + log_beta(b_higher + a, discordant - b_higher + a) - log_beta(a, a)
    return math.exp(min(log_e, 700.0))


def decide(b_higher: int, discordant: int, alpha: float, a: float = KT) -> str | None:
    """`B>A` / `A>B` (which rate is higher) once the evidence reaches 1/alpha, else None."""
    if mixture_e_value(b_higher, discordant, a) * (1 + DECISION_TOLERANCE) < 1 / alpha:
        return None
    if 2 * b_higher == discordant:
        return None  # the mixture is symmetric: no direction at all (cannot reach 1/alpha anyway)
    return "B>A" if 2 * b_higher > discordant else "A>B"


SEQUENTIAL_TRIALS = 2000
SEQUENTIAL_SEED = 20261130


@dataclass(frozen=True)
class Cap:
    rounds: int | None  # None: not reached within `limit` rounds
    power: float  # share of simulated runs that decided within `rounds` (or `limit`)
    limit: int


def rounds_for_power(
    detect: float,
    cases: int,
    alpha: float = 0.05,
    power: float = 0.8,
    min_rounds: int = 2,
    a: float = KT,
    limit: int = 2000,
    trials: int = SEQUENTIAL_TRIALS,
) -> Cap:
    """The rounds the rule needs to decide a difference of `detect` with `power`, at 50% ± d/2
    with questions alike (the hardest place to see it); simulated with a fixed seed."""
    import numpy as np

    from .power import sequential_stops

    if not 0 < detect <= 1:
        raise ValueError(f"the difference to detect must lie in (0, 1], got {detect:g}")
    p1, p2 = 0.5 - detect / 2, 0.5 + detect / 2
    index = math.ceil(power * trials) - 1
    horizon = 64
    while True:
        # Simulate a short horizon first; lengthen it only when too few runs decided within it.
        horizon = min(limit, max(horizon, min_rounds))
        stops, directions = sequential_stops(
            p1, p2, cases, alpha, min_rounds, horizon, trials, SEQUENTIAL_SEED, a
        )
        decided = np.sort(np.where((stops > 0) & (directions > 0), stops, horizon + 1))
        rounds = int(decided[index])
        if rounds <= horizon:
            return Cap(max(min_rounds, rounds), float((decided <= rounds).mean()), limit)
        if horizon >= limit:
            return Cap(None, float((decided <= limit).mean()), limit)
        horizon *= 4


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

    from .power import first_decisions
    from .simulation import paired_rates

    rng = np.random.default_rng(seed)
    rates_a, rates_b = paired_rates(rng, p1, p2, icc, (trials, cases))
    a_ok = rng.random((trials, max_rounds, cases)) < rates_a[:, None, :]
    b_ok = rng.random((trials, max_rounds, cases)) < rates_b[:, None, :]
    b_higher = np.cumsum((b_ok & ~a_ok).sum(axis=2), axis=1)
    discordant = b_higher + np.cumsum((a_ok & ~b_ok).sum(axis=2), axis=1)
    return first_decisions(b_higher, discordant, alpha, a, min_rounds)
