"""An interval for B - A that stays valid however the run chose when to stop (a confidence sequence).

In a sequential run every round asks each case once under each arm, so a round's mean over its
pairs, Z_t = (pairs where only B succeeded - pairs where only A succeeded) / pairs, lies in
[-1, 1] and has mean theta = the mean over the drawn cases of (B's rate - A's rate), the same in
every round: the rounds are independent and alike. Neither the share of discordant pairs nor how
they split is treated as known; both are in Z.

For each candidate m of theta a bettor stakes, before each round, a fraction lambda_t(m) of its
capital on Z_t - m (the aGRAPA bet of Waudby-Smith & Ramdas 2024, JRSS-B 86:1, from the rounds
before only, clipped to [-c/(1-m), c/m] on the [0, 1] scale, c = 1/2). Where m is theta the capital
is a nonnegative martingale, so by Ville's inequality it ever reaches 1/alpha with probability at
most alpha: the m whose capital never has are a 1 - alpha confidence sequence, valid at every round
at once, and so at whatever round the rule (or a person) stopped. The interval is the hull of the
candidates never rejected on a grid of GRID points, each end moved out to the next grid point.
"""

from collections.abc import Sequence

import numpy as np

GRID = 2001  # candidates on [-1, 1]: a tenth of a point apart
BET_CAP = 0.5
METHOD = "mean difference over the rounds (betting confidence sequence, valid at any stopping round)"


def round_means(leads: Sequence[int], pairs: Sequence[int]) -> list[float]:
    """Z_t per round from each round's lead (B-higher minus A-higher discordant pairs) and pairs."""
    return [lead / n for lead, n in zip(leads, pairs, strict=True) if n]


def confidence_sequence(means: Sequence[float], alpha: float) -> tuple[float, float]:
    """The 1 - alpha interval for theta after the rounds `means` (each in [-1, 1])."""
    y = (np.asarray(means, dtype=float) + 1) / 2
    m = np.linspace(0.0, 1.0, GRID)[1:-1]
    log_capital = np.zeros(len(m))
    rejected = np.zeros(len(m), dtype=bool)
    threshold = np.log(1 / alpha)
    total = square = 0.0
    for t, value in enumerate(y, start=1):
        centre = (0.5 + total) / t
        spread = (0.25 + square) / t
        gap = centre - m
        bet = np.clip(gap / (spread + gap * gap), -BET_CAP / (1 - m), BET_CAP / m)
        log_capital += np.log1p(bet * (value - m))
        rejected |= log_capital >= threshold
        square += (value - centre) ** 2
        total += value
    kept = np.nonzero(~rejected)[0]
    if not len(kept):  # every candidate rejected: probability at most alpha; the estimate alone stands
        centre = float(np.mean(means)) if len(means) else 0.0
        return (centre, centre)
    step = 2 / (GRID - 1)
    low = 2 * m[kept[0]] - 1 - step
    high = 2 * m[kept[-1]] - 1 + step
    return (max(-1.0, float(low)), min(1.0, float(high)))
