"""The effect shown beside a verdict, B - A, computed so that its sign is the verdict's direction.

- Paired design: the Mantel-Haenszel common risk difference over cases,
  RD = Σ (b_i·nA_i - a_i·nB_i)/N_i / Σ nA_i·nB_i/N_i (b, a: B's and A's successes in case i),
  whose numerator is minus the stratified exact test's statistic minus its null expectation: the
  test and the effect look at the same within-case comparison, so they cannot point different
  ways (pooled counts can: Simpson's paradox). Its interval uses Sato's (1989) variance, which
  stays consistent when there are many cases with few repeats each (the sparse regime of a probe):
  Var = (RD·ΣP_i + ΣQ_i) / (Σ w_i)², w_i = nA_i·nB_i/N_i,
  P_i = (nB_i²·a_i - nA_i²·b_i + nB_i·nA_i·(nA_i - nB_i)/2) / N_i²,
  Q_i = (b_i·(nA_i - a_i) + a_i·(nB_i - b_i)) / (2·N_i),
  never below the variance the cases' own binomial noise gives the same weighted difference
  (Σ w_i²·(Var pA_i + Var pB_i) / (Σ w_i)², with half a success added to a rate of 0 or 1):
  Sato's variance is 0 when no outcome varies within a case, and an interval of "+0 to +0"
  from 6/6 against 6/6 would claim a precision nobody has.
- Unpaired design: the difference of the mean per-case rates (the permutation test's statistic)
  with a Welch t interval over cases whose standard error never falls below each case's own
  binomial noise (rates smoothed as (k+1)/(n+2)).
Intervals are clipped to [-1, 1].
"""

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .distributions import normal_isf
from .intervals import t_critical, z_critical
from .tests import direction_sign

MANTEL_HAENSZEL = "Mantel-Haenszel risk difference over cases (Sato variance)"
MEAN_OF_CASES = "difference of mean per-case rates (Welch t over cases)"


Bounds = tuple[float, float]


@dataclass
class Effect:
    """B - A and an interval; `bounds` may be a function computing the interval when first read
    (the paired verdict's interval inverts the exact test, which a verdict alone need not pay for)."""

    estimate: float
    bounds: "Bounds | None | Callable[[], Bounds | None]"
    method: str
    sign: int  # the exact sign of the estimate: +1 B ahead, -1 A ahead, 0 neither

    @property
    def interval(self) -> Bounds | None:
        if callable(self.bounds):
            self.bounds = self.bounds()
        return self.bounds

    def to_dict(self) -> dict[str, object]:
        interval = self.interval
        return {
            "estimate": self.estimate,
            "interval": None if interval is None else list(interval),
            "method": self.method,
        }


def _clip(low: float, high: float) -> tuple[float, float]:
    return (max(-1.0, low), min(1.0, high))


def _binomial_noise(k: int, n: int) -> float:
    """The variance of one case's rate k/n; half a success is added where the rate is 0 or 1."""
    rate = k / n if 0 < k < n else (k + 0.5) / (n + 1)
    return rate * (1 - rate) / n


def mantel_haenszel(
    cases: Sequence[tuple[int, int, int, int]], confidence: float = 0.95, alpha: float | None = None
) -> Effect:
    """Common risk difference B - A from per-case (a, nA, b, nB); its interval at `confidence`, or
    at 1 - `alpha` when given (exact for a tiny alpha, which 1 - alpha would round to 1)."""
    numerator = weights = p_sum = q_sum = noise = 0.0
    for a, n_a, b, n_b in cases:
        total = n_a + n_b
        if not n_a or not n_b:
            continue  # a case one arm never asked carries no within-case comparison
        weight = n_a * n_b / total
        numerator += (b * n_a - a * n_b) / total
        weights += weight
        p_sum += (n_b**2 * a - n_a**2 * b + n_b * n_a * (n_a - n_b) / 2) / total**2
        q_sum += (b * (n_a - a) + a * (n_b - b)) / (2 * total)
        noise += weight**2 * (_binomial_noise(a, n_a) + _binomial_noise(b, n_b))
    sign = direction_sign(cases)
    if weights == 0:
        return Effect(0.0, (-1.0, 1.0), MANTEL_HAENSZEL, 0)
    # The exact sign rules: a numerator that is zero in exact arithmetic is zero here too.
    estimate = 0.0 if sign == 0 else math.copysign(abs(numerator) / weights, sign)
    variance = max((estimate * p_sum + q_sum) / weights**2, noise / weights**2)
    z = normal_isf(alpha / 2) if alpha is not None else z_critical(confidence)
    half = z * math.sqrt(variance)
    return Effect(estimate, _clip(estimate - half, estimate + half), MANTEL_HAENSZEL, sign)


def mean_of_cases(
    a: Sequence[tuple[int, int]], b: Sequence[tuple[int, int]], confidence: float = 0.95
) -> Effect:
    """Difference of the mean per-case rates of B and A (cases need not match)."""
    rates_a = [k / n for k, n in a if n]
    rates_b = [k / n for k, n in b if n]
    if not rates_a or not rates_b:
        return Effect(0.0, (-1.0, 1.0), MEAN_OF_CASES, 0)
    mean_a, mean_b = sum(rates_a) / len(rates_a), sum(rates_b) / len(rates_b)
    estimate = mean_b - mean_a
    # The sign from exact rationals, so that it is the same comparison the verdict makes.
    from fractions import Fraction

    exact = sum(Fraction(k, n) for k, n in b if n) / len(rates_b) - sum(
        Fraction(k, n) for k, n in a if n
    ) / len(rates_a)
    sign = (exact > 0) - (exact < 0)
    if sign == 0:
        estimate = 0.0

    def parts(rates: list[float], counts: Sequence[tuple[int, int]]) -> tuple[float, float]:
        g = len(rates)
        spread = sum((r - sum(rates) / g) ** 2 for r in rates) / (g - 1) if g > 1 else 0.0
        noise = sum(((k + 1) / (n + 2)) * (1 - (k + 1) / (n + 2)) / n for k, n in counts if n) / g
        return max(spread, noise) / g, g

    var_a, g_a = parts(rates_a, a)
    var_b, g_b = parts(rates_b, b)
    se = math.sqrt(var_a + var_b)
    if g_a > 1 and g_b > 1 and se > 0:
        # Welch-Satterthwaite degrees of freedom.
        df = (var_a + var_b) ** 2 / (var_a**2 / (g_a - 1) + var_b**2 / (g_b - 1))
        crit = t_critical(max(1.0, df), confidence)
    else:
        crit = z_critical(confidence)
    half = crit * se
    return Effect(estimate, _clip(estimate - half, estimate + half), MEAN_OF_CASES, sign)


DISCORDANT = "difference of discordant pairs over the rounds (anytime-valid confidence sequence)"
KT_MIXTURE = 0.5  # the Beta(1/2, 1/2) mixture runs recorded before the exact boundary used


def _log_beta(x: float, y: float) -> float:
    return math.lgamma(x) + math.lgamma(y) - math.lgamma(x + y)


def discordant_interval(
    totals: Sequence[tuple[int, int]], pairs: int, alpha: float, mixture: float
) -> tuple[float, tuple[float, float]] | None:
    """A sequential run recorded under the mixture e-value (before the exact boundary): that
    rule's own interval, as (estimate, interval) for B - A.

    `totals` are (B-higher discordant pairs, discordant pairs) after each round at which the rule
    could stop; `pairs` the pairs asked in all. q, the chance that a discordant pair has B's
    outcome the success, is in the confidence sequence while the Beta mixture's likelihood ratio
    against q stays below 1/alpha at every one of those rounds (the test is q = 1/2, so 1/2 is
    excluded exactly when the rule's p = 1 / max e decides). Each round's set is an interval
    (the log ratio is convex in q); their intersection is reported on the points scale as
    D·(2q - 1), D the share of pairs that were discordant, with the estimate the point of it
    nearest the last round's s/d. None when the rounds' sets do not meet (the data contradict
    every q, which happens with probability at most alpha)."""
    from .tests import decision_limit

    threshold = -math.log(decision_limit(alpha))
    low, high = 0.0, 1.0
    for s, d in totals:
        if d == 0:
            continue
        base = _log_beta(s + mixture, d - s + mixture) - _log_beta(mixture, mixture)

        def log_ratio(q: float, s: int = s, d: int = d, base: float = base) -> float:
            with_s = s * math.log(q) if s else 0.0
            with_f = (d - s) * math.log1p(-q) if d - s else 0.0
            return base - with_s - with_f

        centre = s / d
        ends = []
        for end in (0.0, 1.0):
            inside, outside = centre, end
            if (end == 0.0 and s == 0) or (end == 1.0 and s == d):
                ends.append(end)  # the ratio stays below its bound all the way to this end
                continue
            for _ in range(100):
                middle = (inside + outside) / 2
                if middle in (inside, outside):
                    break
                if log_ratio(middle) < threshold:
                    inside = middle
                else:
                    outside = middle
            ends.append(inside)
        low, high = max(low, ends[0]), min(high, ends[1])
    if low > high:
        return None
    s_last, d_last = totals[-1] if totals else (0, 0)
    if not d_last or not pairs:
        return 0.0, (-1.0, 1.0)
    share = d_last / pairs
    q = min(max(s_last / d_last, low), high)
    return share * (2 * q - 1), (share * (2 * low - 1), share * (2 * high - 1))
