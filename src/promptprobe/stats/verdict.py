"""The verdict rules: which test decides, and what it says, for two arms' per-case counts.

- Paired design (the same questions on both sides): the stratified exact conditional test; the
  interval beside it is that test inverted (promptprobe.stats.conditional), so it excludes 0
  exactly when the test decides, at whatever level it is asked for.
- Unpaired design: the permutation test over cases of the difference in mean per-case rates.
- Generalisation (paired): the exact sign test over the cases that moved, "likely" only with
  at least 5 of them; its interval is for the mean per-case difference B - A.
All differences are B - A: B the candidate, A the baseline. `A>B`/`B>A` say which rate is
reliably higher, whatever the metric's direction; the direction of a decided verdict is the exact
sign of the effect shown beside it (promptprobe.stats.effect), never a separate computation.
"""

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .conditional import METHOD as CONDITIONAL_METHOD
from .conditional import conditional_interval, model_of
from .effect import Effect, mantel_haenszel, mean_of_cases
from .intervals import t_critical
from .tests import case_permutation, decides, sign_test, stratified_exact

MIN_MOVED_FOR_GENERALISATION = 5
PAIRED_TEST = "stratified exact conditional (exact CMH)"
UNPAIRED_TEST = "permutation over cases"

Counts = tuple[int, int]  # (successes, trials)


@dataclass(frozen=True)
class Verdict:
    test: str
    p_value: float
    verdict: str  # "A>B", "B>A" or "indistinguishable"
    effect: Effect
    interval_at: Callable[[float], tuple[float, float] | None]
    # the test's own interval for B - A at level alpha (a 1 - alpha interval): excludes 0
    # exactly when decides(p_value, alpha); None where no interval can agree (say why in notes)


def word(p_value: float | None, alpha: float, sign: int) -> str:
    """The verdict for a p-value and the exact sign of B - A."""
    if sign == 0 or not decides(p_value, alpha):
        return "indistinguishable"
    return "B>A" if sign > 0 else "A>B"


def paired_verdict(
    a: Sequence[Counts], b: Sequence[Counts], alpha: float = 0.05, confidence: float = 0.95
) -> Verdict:
    """`a[i]` and `b[i]` are the same case's counts under each arm."""
    cases = [(ka, na, kb, nb) for (ka, na), (kb, nb) in zip(a, b, strict=True)]
    result = stratified_exact(cases)
    estimate = mantel_haenszel(cases, confidence)
    interval_at = paired_interval(cases, result.p_value, estimate.sign, estimate.estimate)
    effect = Effect(estimate.estimate, lambda: interval_at(alpha), CONDITIONAL_METHOD, estimate.sign)
    return Verdict(PAIRED_TEST, result.p_value, word(result.p_value, alpha, effect.sign), effect, interval_at)


def paired_interval(
    cases: Sequence[tuple[int, int, int, int]], p_value: float, sign: int, estimate: float
) -> Callable[[float], tuple[float, float] | None]:
    """The stratified exact test inverted, at any level; one model of the cases serves every level."""
    model = model_of(cases)
    found: dict[float, tuple[float, float]] = {}

    def interval_at(alpha: float) -> tuple[float, float]:
        if alpha not in found:
            low, high = conditional_interval(cases, p_value, alpha, sign, estimate, model).interval
            # Never narrower than Sato's large-sample interval, except across 0 when decided: the
            # model conditioned on each case's margins does not see how uncertain the per-question
            # rates are, and alone it covers as little as 79% far from 50% (docs/statistics.md).
            sato_low, sato_high = mantel_haenszel(cases, 1 - alpha).interval
            decided = decides(p_value, alpha)
            if not decided or sign < 0 or sato_low > 0:
                low = min(low, sato_low)
            if not decided or sign > 0 or sato_high < 0:
                high = max(high, sato_high)
            found[alpha] = (low, high)
        return found[alpha]

    return interval_at


def unpaired_verdict(
    a: Sequence[Counts],
    b: Sequence[Counts],
    alpha: float = 0.05,
    resamples: int | None = None,
    confidence: float = 0.95,
) -> Verdict:
    rates_a = [k / n for k, n in a if n]
    rates_b = [k / n for k, n in b if n]
    options = {} if resamples is None else {"resamples": resamples}
    p = case_permutation(rates_a, rates_b, **options)
    effect = mean_of_cases(a, b, confidence)

    def interval_at(level: float) -> tuple[float, float] | None:
        # Until the unpaired test has its own interval: the mean-of-cases interval where it agrees.
        bounds = mean_of_cases(a, b, 1 - level).interval
        return bounds if (bounds[0] > 0 or bounds[1] < 0) == decides(p, level) else None

    return Verdict(UNPAIRED_TEST, p, word(p, alpha, effect.sign), effect, interval_at)


@dataclass(frozen=True)
class Generalisation:
    cases: int
    up: int  # cases where B's rate is higher
    down: int
    p_value: float
    likely: bool
    mean_diff: float
    interval: tuple[float, float] | None


def generalisation(
    a: Sequence[Counts], b: Sequence[Counts], alpha: float = 0.05, confidence: float = 0.95
) -> Generalisation:
    """Would other questions like these move too? Sign test over the per-case differences.

    The interval is mean ± t(G-1)·SE of the per-case differences B - A, where SE uses their
    spread but never less than the binomial noise of each case's own counts (rates smoothed
    as (k+1)/(n+2)), so that identical differences do not give a zero-width interval; it is
    clipped to [-1, 1].
    """
    diffs = [kb / nb - ka / na for (ka, na), (kb, nb) in zip(a, b, strict=True)]
    g = len(diffs)
    up = sum(d > 0 for d in diffs)
    down = sum(d < 0 for d in diffs)
    p = sign_test(up, down)
    mean = sum(diffs) / g if g else 0.0
    interval = None
    if g >= 2:
        spread = sum((d - mean) ** 2 for d in diffs) / (g - 1)
        noise = 0.0
        for (ka, na), (kb, nb) in zip(a, b, strict=True):
            pa, pb = (ka + 1) / (na + 2), (kb + 1) / (nb + 2)
            noise += pa * (1 - pa) / na + pb * (1 - pb) / nb
        se = math.sqrt(max(spread, noise / g) / g)
        half = t_critical(g - 1, confidence) * se
        interval = (max(-1.0, mean - half), min(1.0, mean + half))
    likely = up + down >= MIN_MOVED_FOR_GENERALISATION and decides(p, alpha)
    return Generalisation(g, up, down, p, likely, mean, interval)
