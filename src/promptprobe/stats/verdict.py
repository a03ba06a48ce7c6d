"""The verdict rules: which test decides, and what it says, for two arms' per-case counts.

- Paired design (the same questions on both sides): the stratified exact conditional test. The
  interval beside it covers the drawn questions' weighted mean B - A: Newcombe's interval on the
  cases' binomial noise (promptprobe.stats.case_means), made to agree with the test
  (promptprobe.stats.agreement: the decided end, where needed, is the test inverted,
  promptprobe.stats.conditional), so it excludes 0 exactly when the test decides, at whatever
  level it is asked for.
- Unpaired design: the difference of the mean per-case rates, tested by exchanging whole cases
  between the arms when every case was asked equally often (exact: the cases are exchangeable),
  and otherwise by the beta-binomial test over cases (promptprobe.stats.betabinomial: a case
  asked once and one asked 20 times are not exchangeable) together with the case permutation:
  the larger of the two p-values decides. Its interval is Newcombe's on the two arms' mean
  per-case rates, made to agree with the test (the decided end, where needed, is the test
  inverted with shifted nulls, promptprobe.stats.inversion).
- Generalisation (paired): the sign test over the cases that moved, conditional on each case's
  total so that it stays exact when the arms' repeats differ (promptprobe.stats.generalisation),
  "likely" only with at least 5 of them; its interval, for the population's mean B - A, is
  Student's t over the per-case differences, made to agree with the sign test.
All differences are B - A: B the candidate, A the baseline. `A>B`/`B>A` say which rate is
reliably higher, whatever the metric's direction; the direction of a decided verdict is the exact
sign of the effect shown beside it (promptprobe.stats.effect), never a separate computation.
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .agreement import agree
from .betabinomial import TEST as BETA_BINOMIAL_TEST
from .betabinomial import BetaBinomialTest
from .case_means import population_difference, unpaired_difference
from .conditional import conditional_interval, model_of
from .effect import Effect, mantel_haenszel, mean_of_cases
from .generalisation import ConditionalSignTest
from .inversion import invert
from .tests import CasePermutation, decides, stratified_exact

MIN_MOVED_FOR_GENERALISATION = 5
PAIRED_TEST = "stratified exact conditional (exact CMH)"
GENERALISATION_TEST = "sign test over the cases that moved, conditional on each case's total"
UNPAIRED_TEST = "permutation over cases"
PAIRED_METHOD = (
    "Mantel-Haenszel risk difference over cases (Newcombe on the cases' binomial noise; "
    "the decided end from the exact conditional test inverted)"
)

Counts = tuple[int, int]  # (successes, trials)


@dataclass(frozen=True)
class Verdict:
    test: str
    p_value: float
    verdict: str  # "A>B", "B>A" or "indistinguishable"
    effect: Effect
    interval_at: Callable[[float], tuple[float, float] | None]
    # the interval for B - A at level alpha (a 1 - alpha interval; promptprobe.stats.agreement): excludes 0
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
    effect = Effect(estimate.estimate, lambda: interval_at(alpha), PAIRED_METHOD, estimate.sign)
    return Verdict(PAIRED_TEST, result.p_value, word(result.p_value, alpha, effect.sign), effect, interval_at)


def paired_interval(
    cases: Sequence[tuple[int, int, int, int]], p_value: float, sign: int, estimate: float
) -> Callable[[float], tuple[float, float] | None]:
    """The interval beside the paired verdict, at any level: Newcombe's interval on the cases'
    Mantel-Haenszel-weighted mean rates (promptprobe.stats.case_means), which carries each case's
    binomial noise, made to agree with the verdict (promptprobe.stats.agreement); the decided end,
    where that interval reaches 0, is the stratified exact test inverted."""
    model = model_of(cases)
    weights = [n_a * n_b / (n_a + n_b) if n_a and n_b else 0.0 for _, n_a, _, n_b in cases]
    a = [(k, n) for k, n, _, _ in cases]
    b = [(k, n) for _, _, k, n in cases]
    found: dict[float, tuple[float, float]] = {}

    def tested(alpha: float) -> tuple[float, float] | None:
        low, high = conditional_interval(cases, p_value, alpha, sign, estimate, model).interval
        return low, high

    def interval_at(alpha: float) -> tuple[float, float]:
        if alpha not in found:
            valid = unpaired_difference(a, b, alpha, weights)
            direction = sign if decides(p_value, alpha) else 0
            found[alpha] = agree(valid, estimate, direction, lambda: tested(alpha))
        return found[alpha]

    return interval_at


def equal_repeats(a: Sequence[Counts], b: Sequence[Counts]) -> bool:
    """Every case of both arms asked the same number of times: whole cases are exchangeable."""
    return len({n for _, n in (*a, *b) if n}) <= 1


@dataclass(frozen=True)
class UnpairedTest:
    """The unpaired test of "B - A = delta": `p_at(0)` decides, every delta makes the interval."""

    name: str
    p_at: Callable[[float], float]
    estimate: float  # the difference of the mean per-case rates


def unpaired_test(a: Sequence[Counts], b: Sequence[Counts], resamples: int | None = None) -> UnpairedTest:
    """The case permutation when every case was asked equally often, else the beta-binomial test."""
    model = BetaBinomialTest(a, b)
    options = {} if resamples is None else {"resamples": resamples}
    permutation = CasePermutation([k / n for k, n in a if n], [k / n for k, n in b if n], **options)
    if not equal_repeats(a, b):
        # Both must reject: the model fails where few cases leave its ICC uncertain (high ICC), the
        # permutation where cases asked once meet cases asked often (low ICC); not both at once.
        return UnpairedTest(
            BETA_BINOMIAL_TEST, lambda delta: max(model.p_at(delta), permutation.p_at(delta)), model.estimate
        )

    def p_at(delta: float) -> float:
        # Rates shifted by delta leave a case with no spread exactly where it was: 5 cases at 3/3
        # against 5 at 3/3 would reject every shift ("+0 to +0"). Beyond the span from 0 to the
        # estimate the beta-binomial model's shifted null (each case's binomial noise) is accepted
        # beside it; a value is rejected only where the permutation rejects it too, so the interval
        # stays valid, and within the span the permutation alone speaks.
        if min(0.0, model.estimate) <= delta <= max(0.0, model.estimate):
            return permutation.p_at(delta)
        return max(permutation.p_at(delta), model.p_at(delta))

    return UnpairedTest(UNPAIRED_TEST, p_at, model.estimate)


def unpaired_verdict(
    a: Sequence[Counts],
    b: Sequence[Counts],
    alpha: float = 0.05,
    resamples: int | None = None,
    confidence: float = 0.95,
) -> Verdict:
    """Different questions on each side: the unit is the case (see the module's docstring)."""
    effect = mean_of_cases(a, b, confidence)
    test = unpaired_test(a, b, resamples)
    p = test.p_at(0.0)
    found: dict[float, tuple[float, float] | None] = {}

    def tested(level: float) -> tuple[float, float] | None:
        # The Welch interval over cases only tells the search where to start.
        guess = mean_of_cases(a, b, 1 - level).interval
        return invert(test.p_at, test.estimate, level, guess=guess)

    def interval_at(level: float) -> tuple[float, float] | None:
        if level not in found:
            direction = effect.sign if decides(p, level) else 0
            valid = unpaired_difference(a, b, level)
            found[level] = agree(valid, effect.estimate, direction, lambda: tested(level))
        return found[level]

    method = f"difference of mean per-case rates (Newcombe on the cases' binomial noise; {test.name})"
    effect = Effect(effect.estimate, lambda: interval_at(alpha), method, effect.sign)  # read when shown
    return Verdict(test.name, p, word(p, alpha, effect.sign), effect, interval_at)


@dataclass(frozen=True)
class Generalisation:
    cases: int
    up: int  # cases where B's rate is higher
    down: int
    p_value: float
    likely: bool
    mean_diff: float
    interval: tuple[float, float] | None


def generalisation(a: Sequence[Counts], b: Sequence[Counts], alpha: float = 0.05) -> Generalisation:
    """Would other questions like these move too? The sign test over the cases that moved,
    conditional on each case's total (exact with any repeats), and its interval at alpha."""
    diffs = [kb / nb - ka / na for (ka, na), (kb, nb) in zip(a, b, strict=True)]
    g = len(diffs)
    test = ConditionalSignTest([(ka, na, kb, nb) for (ka, na), (kb, nb) in zip(a, b, strict=True)])
    p = test.p_value
    mean = sum(diffs) / g if g else 0.0
    likely = test.up + test.down >= MIN_MOVED_FOR_GENERALISATION and decides(p, alpha)
    valid = population_difference(a, b, alpha)
    if valid is None:
        return Generalisation(g, test.up, test.down, p, likely, mean, None)
    direction = ((test.up > test.down) - (test.up < test.down)) if decides(p, alpha) else 0
    interval = agree(valid, mean, direction, lambda: test.interval_at(alpha))
    return Generalisation(g, test.up, test.down, p, likely, mean, interval)
