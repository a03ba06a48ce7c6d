"""Planning: how many samples, repeats or cases a probe needs before the prompt changes.

Every figure is the power of the test the verdict actually uses (promptprobe.stats.power), never
a normal approximation the exact test falls short of:
- Samples per arm for one question asked n times per arm: exact power of the exact conditional
  test (the stratified test with one case), by enumeration; the smallest n reaching the power.
- Repeats for the paired design (the one a probe uses): the stratified exact test simulated with
  a fixed seed on the model of `simulation` (per-question rates with the given ICC, hard
  questions hard under both arms), with common random numbers across repeat counts; the fewest
  repeats whose simulated power reaches the target.
- Repeats for the unpaired design (its unit is the case): the case permutation test simulated
  the same way. When even unlimited repeats cannot get there (its ceiling is the power on the
  questions' true rates), the cases per side it needs instead; when the design cannot reach
  alpha at all (3 cases a side: the smallest p is 0.1), it says so.
- Any-of-k gate: P(block) = 1 - p^k.
The normal approximation n = [z_{α/2}·sqrt(2p̄q̄) + z_β·sqrt(p1q1 + p2q2)]² / (p1 - p2)² only
seeds the searches.
"""

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

from .distributions import normal_isf
from .tests import decision_limit

MAX_REPEATS = 200
MAX_SAMPLES = 100_000
EXACT_SAMPLES = 20_000  # above this, n_per_arm is Fleiss's continuity-corrected approximation
EXACT_TEST = "exact conditional test (one question, n samples per arm), exact power"
NORMAL_TEST = "normal approximation with continuity correction (Fleiss), above 20,000 samples per arm"
MAX_CASES = 2_000
PLAN_TRIALS = 1000
PLAN_SEED = 20261130


def validate(
    name: str, value: float, low: float, high: float, *, low_open: bool = False, high_open: bool = False
) -> float:
    """A finite value within its range, or ValueError naming the flag and the range."""
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    below = value <= low if low_open else value < low
    above = value >= high if high_open else value > high
    if below or above:
        left, right = "(" if low_open else "[", ")" if high_open else "]"
        raise ValueError(f"{name} must lie in {left}{low:g}, {high:g}{right}, got {value:g}")
    return float(value)


def check_test_settings(alpha: float, power: float) -> None:
    validate("alpha", alpha, 0, 0.5, low_open=True)
    validate("power", power, 0.5, 1, high_open=True)


def n_per_arm_float(p1: float, p2: float, alpha: float = 0.05, power: float = 0.8) -> float:
    """The classic pooled normal approximation (a starting point for the exact searches)."""
    if p1 == p2:
        return math.inf
    za = normal_isf(alpha / 2)
    zb = normal_isf(1 - power)
    pbar = (p1 + p2) / 2
    num = za * math.sqrt(2 * pbar * (1 - pbar)) + zb * math.sqrt(p1 * (1 - p1) + p2 * (1 - p2))
    return num**2 / (p1 - p2) ** 2


def smallest_reaching(
    power_at: Callable[[int], float],
    target: float,
    start: int,
    low: int,
    high: int,
    tolerance: float = 0.01,
    growth: float = 2.0,
    exact_below: int = 200,
) -> int | None:
    """The smallest m in [low, high] with power_at(m) >= target, searching out from `start`
    (growing by `growth`, then bisection); None when even `high` does not reach it. Exact below
    `exact_below`; above, to a relative `tolerance` (each step there costs far more and moves the
    power little)."""
    start = min(max(start, low), high)
    if power_at(start) >= target:
        hi = start
        lo = start
        while lo > low:
            lo = max(low, min(lo - 1, int(lo / growth)))
            if power_at(lo) < target:
                break
            hi = lo
        else:
            return hi
    else:
        lo = start
        hi = start
        while power_at(hi) < target:
            if hi >= high:
                return None
            lo, hi = hi, min(high, max(hi + 1, math.ceil(hi * growth)))
    while hi - lo > max(1, int(hi * tolerance) if hi > exact_below else 1):
        mid = (lo + hi) // 2
        if power_at(mid) >= target:
            hi = mid
        else:
            lo = mid
    return hi


# The confirming simulation: this many times the search's probes, and the pick must reach the
# target by its one-sided 95% lower bound, not by its estimate. Stopping where the estimate first
# crossed the target stated 80.3% for 142 unpaired repeats (10 cases, ICC 0.5, 85% vs 100%) that
# give 78.3%: the first crossing of a noisy curve lies above it (and 4,000 probes still stated
# 81.2% for 157 repeats that give 79.4%: one lucky draw of questions lifts the whole curve).
CONFIRM_FACTOR = 8
CONFIRM_Z = 1.6448536269514722  # the normal's 95% quantile


def reaches(power: float, target: float, trials: int) -> bool:
    """Whether a simulated power over `trials` probes reaches `target` by its 95% lower bound."""
    return power - CONFIRM_Z * math.sqrt(power * (1 - power) / trials) >= target


def confirmed(
    fresh_power: Callable[[int], float], m: int, target: float, high: int, trials: int
) -> tuple[int, float]:
    """Re-estimate the power at the search's pick on fresh random numbers and `trials` probes (the
    search's own estimate there is biased upwards: it stopped where its noise first crossed the
    target), stepping up by 10% until that estimate's 95% lower bound reaches the target too;
    (m, its power)."""
    power = fresh_power(m)
    while not reaches(power, target, trials) and m < high:
        m = min(high, max(m + 1, math.ceil(m * 1.1)))
        power = fresh_power(m)
    return m, power


@dataclass(frozen=True)
class SizePlan:
    n: int | None  # samples per arm; None when the rates are equal or it exceeds the limit
    power: float | None  # the exact power at n
    test: str = EXACT_TEST


def fleiss_n(p1: float, p2: float, alpha: float = 0.05, power: float = 0.8) -> float:
    """Fleiss's continuity-corrected samples per arm: what the exact test needs at large n."""
    guess = n_per_arm_float(p1, p2, alpha, power)
    return guess / 4 * (1 + math.sqrt(1 + 4 / (guess * abs(p1 - p2)))) ** 2


def size_plan(
    p1: float,
    p2: float,
    alpha: float = 0.05,
    power: float = 0.8,
    max_samples: int = MAX_SAMPLES,
    tolerance: float = 0.01,
    exact_below: int = 200,
    exact_samples: int = EXACT_SAMPLES,
) -> SizePlan:
    """Samples per arm for the exact test to tell p1 from p2 with this power (exact up to
    `exact_samples` per arm, Fleiss's continuity-corrected approximation above)."""
    from .power import fisher_power, fisher_smallest_p

    validate("p1", p1, 0, 1)
    validate("p2", p2, 0, 1)
    check_test_settings(alpha, power)
    if p1 == p2:
        return SizePlan(None, None)
    cache: dict[int, float] = {}

    def power_at(n: int) -> float:
        if n not in cache:
            reachable = fisher_smallest_p(n) <= decision_limit(alpha)
            cache[n] = fisher_power(n, p1, p2, alpha) if reachable else 0.0
        return cache[n]

    guess = n_per_arm_float(p1, p2, alpha, power)
    if guess > 2 * max_samples:
        return SizePlan(None, None)  # far beyond the limit: not worth enumerating
    if guess * 1.3 > exact_samples:
        # Here the exact test's steps are far finer than the power asked for: the continuity-
        # corrected normal approximation (Fleiss) is what the exact test reaches, to a sample.
        corrected = fleiss_n(p1, p2, alpha, power)
        test = (
            NORMAL_TEST
            if exact_samples == EXACT_SAMPLES
            else NORMAL_TEST.replace("20,000", f"{exact_samples:,}")
        )
        return SizePlan(math.ceil(corrected), None, test)
    start = min(max_samples, max(1, math.ceil(guess)))
    # The normal approximation is usually within 15% of the exact answer: bracket it closely.
    n = smallest_reaching(
        power_at, power, start, 1, max_samples, tolerance, growth=1.25, exact_below=exact_below
    )
    return SizePlan(n, power_at(n) if n else None)


def n_per_arm(p1: float, p2: float, alpha: float = 0.05, power: float = 0.8) -> int | None:
    """Samples per arm to tell p1 from p2 (exact power of the exact test); None when p1 == p2."""
    return size_plan(p1, p2, alpha, power).n


def detectable_difference(
    n: int, p1: float, alpha: float = 0.05, power: float = 0.8
) -> dict[str, float | None]:
    """Smallest p2 - p1 (each direction) that n samples per arm detect (exact power up to
    EXACT_SAMPLES per arm, Fleiss's continuity-corrected approximation above, as `size_plan`);
    None if unreachable."""
    from .power import fisher_power, fisher_smallest_p

    if n < 1:
        raise ValueError("n must be at least 1")
    validate("p1", p1, 0, 1)
    check_test_settings(alpha, power)

    def detects(p2: float) -> bool:
        if n > EXACT_SAMPLES:
            # Enumerating the exact test costs O(n) per point (minutes at 10^5, hours at 10^6).
            return fleiss_n(p1, p2, alpha, power) <= n
        return fisher_power(n, p1, p2, alpha) >= power

    result: dict[str, float | None] = {}
    reachable = n > EXACT_SAMPLES or fisher_smallest_p(n) <= decision_limit(alpha)
    for name, edge in (("up", 1.0), ("down", 0.0)):
        if p1 == edge or not reachable or not detects(edge):
            result[name] = None
            continue
        # Power grows as p2 moves away from p1: bisect for where it reaches the target.
        near, far = p1, edge
        for _ in range(30):
            mid = (near + far) / 2
            if not detects(mid):
                near = mid
            else:
                far = mid
            if abs(far - near) < 1e-5:
                break
        result[name] = far - p1
    return result


def gate_block_probability(p: float, k: int) -> float:
    """A gate that fails a case when any of k runs fails blocks it with 1 - p^k."""
    return 1 - p**k


# -- designs with cases and repeats ----------------------------------------------------------


def paired_power(
    p1: float,
    p2: float,
    cases: int,
    repeats: int,
    icc: float,
    alpha: float = 0.05,
    trials: int = PLAN_TRIALS,
    seed: int = PLAN_SEED,
) -> float:
    """Simulated power of the paired verdict (stratified exact test, deciding the right way)."""
    return _PairedSimulation(p1, p2, cases, icc, alpha, trials, seed).power(repeats)


class _PairedSimulation:
    """Simulated paired probes of one design; questions are drawn once, repeats vary."""

    def __init__(self, p1: float, p2: float, cases: int, icc: float, alpha: float, trials: int, seed: int):
        import numpy as np

        from .simulation import paired_rates

        self.rates_a, self.rates_b = paired_rates(np.random.default_rng(seed), p1, p2, icc, (trials, cases))
        self.seed, self.alpha, self.cases = seed, alpha, cases
        self.direction = (p2 > p1) - (p2 < p1)
        self.cache: dict[int, float] = {}

    def power(self, repeats: int) -> float:
        from .power import stratified_p_batch, stratified_smallest_p
        from .simulation import crn_counts
        from .tests import decides

        if repeats not in self.cache:
            if not decides(stratified_smallest_p(self.cases, repeats), self.alpha):
                self.cache[repeats] = 0.0
            else:
                a = crn_counts(self.seed, 1, self.rates_a, repeats)
                b = crn_counts(self.seed, 2, self.rates_b, repeats)
                p_values, signs = stratified_p_batch(a, b, repeats, alpha=self.alpha)
                hits = (p_values <= decision_limit(self.alpha)) & (signs == self.direction)
                self.cache[repeats] = float(hits.mean())
        return self.cache[repeats]


@dataclass(frozen=True)
class PairedPlan:
    repeats: int | None  # None: not reached within the limit
    power: float | None  # simulated power at those repeats (or at the limit)
    limit: int = MAX_REPEATS


@functools.lru_cache(maxsize=64)  # seeded, so a pure function: asked twice, computed once
def paired_repeats(
    p1: float,
    p2: float,
    cases: int,
    icc: float,
    alpha: float = 0.05,
    power: float = 0.8,
    trials: int = PLAN_TRIALS,
    max_repeats: int = MAX_REPEATS,
    tolerance: float = 0.01,
    exact_below: int = 200,
    confirm: bool = True,
) -> PairedPlan:
    """The fewest repeats of `cases` cases whose paired test reaches `power` (simulated; with
    `confirm`, the pick is re-simulated on fresh random numbers and raised until it holds)."""
    validate("icc", icc, 0, 1)
    check_test_settings(alpha, power)
    if p1 == p2:
        return PairedPlan(None, None, max_repeats)
    simulation = _PairedSimulation(p1, p2, cases, icc, alpha, trials, PLAN_SEED)
    guess = n_per_arm_float(p1, p2, alpha, power) / cases
    start = max(1, min(max_repeats, math.ceil(guess)))
    repeats = smallest_reaching(simulation.power, power, start, 1, max_repeats, tolerance, 2.0, exact_below)
    if repeats is None:
        return PairedPlan(None, simulation.power(max_repeats), max_repeats)
    if not confirm:
        return PairedPlan(repeats, simulation.power(repeats), max_repeats)
    checks = CONFIRM_FACTOR * trials
    fresh = _PairedSimulation(p1, p2, cases, icc, alpha, checks, PLAN_SEED + 1)
    repeats, achieved = confirmed(fresh.power, repeats, power, max_repeats, checks)
    return PairedPlan(repeats if reaches(achieved, power, checks) else None, achieved, max_repeats)


class _UnpairedSimulation:
    """Simulated unpaired probes: each arm asks its own questions (`cases` of A's, `cases_b` of B's)."""

    def __init__(
        self,
        p1: float,
        p2: float,
        cases: int,
        icc: float,
        alpha: float,
        trials: int,
        seed: int,
        resamples: int,
        cases_b: int | None = None,
    ):
        import numpy as np

        from .simulation import question_rates

        self.rates_a = question_rates(np.random.default_rng([seed, 1]), p1, icc, (trials, cases))
        self.rates_b = question_rates(np.random.default_rng([seed, 2]), p2, icc, (trials, cases_b or cases))
        self.seed, self.alpha, self.resamples = seed, alpha, resamples
        self.direction = (p2 > p1) - (p2 < p1)
        self.cache: dict[int | None, float] = {}

    def power(self, repeats: int | None) -> float:
        """Power at `repeats` per case (None: unlimited repeats, the questions' true rates)."""
        import numpy as np

        from .power import permutation_p_batch

        if repeats not in self.cache:
            if repeats is None:
                observed_a, observed_b = self.rates_a, self.rates_b
            else:
                from .simulation import crn_counts

                observed_a = crn_counts(self.seed, 1, self.rates_a, repeats) / repeats
                observed_b = crn_counts(self.seed, 2, self.rates_b, repeats) / repeats
            p_values = permutation_p_batch(observed_a, observed_b, resamples=self.resamples)
            signs = np.sign(observed_b.mean(axis=1) - observed_a.mean(axis=1))
            hits = (p_values <= decision_limit(self.alpha)) & (signs == self.direction)
            self.cache[repeats] = float(hits.mean())
        return self.cache[repeats]


@dataclass(frozen=True)
class UnpairedPlan:
    repeats: int | None  # None: no number of repeats reaches the power with these cases
    power: float | None  # simulated power at those repeats (or with unlimited repeats)
    cases_needed: int | None  # cases per side unlimited repeats would need (when repeats cannot)
    smallest_p: float  # the smallest p the case permutation test can give with these cases
    reachable: bool  # whether alpha can be reached at all with these cases
    cases_power: float | None = None  # simulated power with `cases_needed` cases, unlimited repeats


@functools.lru_cache(maxsize=64)  # seeded, so a pure function: asked twice, computed once
def _unpaired_cases_needed(
    p1: float,
    p2: float,
    cases: int,
    cases_b: int,
    icc: float,
    alpha: float,
    power: float,
    trials: int,
    resamples: int,
    max_cases: int,
    tolerance: float,
    exact_below: int,
    confirm: bool,
) -> tuple[int | None, float | None]:
    """The cases a side the case-level unpaired test needs at this power (searched up to
    `max_cases`; 0 or 1 skips the search), with the power it reaches."""
    from .power import permutation_smallest_p
    from .tests import decides

    if max_cases < 2:
        return None, None
    powers: dict[int, float] = {}

    def power_with(g: int) -> float:
        if g not in powers:
            if not decides(permutation_smallest_p(g, g), alpha):
                powers[g] = 0.0
            else:
                # Half the probes and a quarter of the permutations: a search over case counts.
                search = _UnpairedSimulation(
                    p1, p2, g, icc, alpha, max(100, trials // 2), PLAN_SEED, resamples // 4
                )
                powers[g] = search.power(None)
        return powers[g]

    needed = smallest_reaching(
        power_with, power, max(2, cases, cases_b), 2, max_cases, tolerance, 2.0, exact_below
    )
    if needed is None or not confirm:
        return needed, (powers[needed] if needed else None)
    checks = CONFIRM_FACTOR * trials

    def fresh_with(g: int) -> float:
        return _UnpairedSimulation(p1, p2, g, icc, alpha, checks, PLAN_SEED + 1, resamples).power(None)

    needed, achieved = confirmed(fresh_with, needed, power, max_cases, checks)
    return (needed if reaches(achieved, power, checks) else None), achieved


def unpaired_repeats(
    p1: float,
    p2: float,
    cases: int,
    icc: float,
    alpha: float = 0.05,
    power: float = 0.8,
    trials: int = PLAN_TRIALS,
    resamples: int | None = None,
    max_cases: int = MAX_CASES,
    tolerance: float = 0.01,
    exact_below: int = 200,
    confirm: bool = True,
    cases_b: int | None = None,
) -> UnpairedPlan:
    """Repeats per case for the case-level unpaired test (simulated) with `cases` questions on
    A's side and `cases_b` (default: as many) on B's, or the cases a side it needs (searched up
    to `max_cases`; 0 skips that search)."""
    from .power import permutation_smallest_p
    from .tests import RESAMPLES, decides

    validate("icc", icc, 0, 1)
    check_test_settings(alpha, power)
    cases_b = cases_b or cases
    smallest = permutation_smallest_p(cases, cases_b)
    if p1 == p2:
        return UnpairedPlan(None, None, None, smallest, decides(smallest, alpha))
    resamples = resamples or RESAMPLES
    checks = CONFIRM_FACTOR * trials

    def cases_needed() -> tuple[int | None, float | None]:
        return _unpaired_cases_needed(
            p1,
            p2,
            cases,
            cases_b,
            icc,
            alpha,
            power,
            trials,
            resamples,
            max_cases,
            tolerance,
            exact_below,
            confirm,
        )

    if not decides(smallest, alpha):
        needed, needed_power = cases_needed()
        return UnpairedPlan(None, None, needed, smallest, False, needed_power)
    simulation = _UnpairedSimulation(p1, p2, cases, icc, alpha, trials, PLAN_SEED, resamples, cases_b)
    ceiling = simulation.power(None)
    if ceiling < power:
        needed, needed_power = cases_needed()
        return UnpairedPlan(None, ceiling, needed, smallest, True, needed_power)
    guess = n_per_arm_float(p1, p2, alpha, power) / min(cases, cases_b)
    start = max(1, min(MAX_REPEATS, math.ceil(guess)))
    repeats = smallest_reaching(
        simulation.power, power, start, 1, 10 * MAX_REPEATS, tolerance, 2.0, exact_below
    )
    if repeats is None:
        return UnpairedPlan(None, ceiling, None, smallest, True)
    if not confirm:
        return UnpairedPlan(repeats, simulation.power(repeats), None, smallest, True)
    fresh = _UnpairedSimulation(p1, p2, cases, icc, alpha, checks, PLAN_SEED + 1, resamples, cases_b)
    repeats, achieved = confirmed(fresh.power, repeats, power, 10 * MAX_REPEATS, checks)
    return UnpairedPlan(repeats if reaches(achieved, power, checks) else None, achieved, None, smallest, True)


def design_plan(
    p1: float,
    p2: float,
    cases: int,
    icc: float,
    alpha: float = 0.05,
    power: float = 0.8,
    *,
    paired: bool,
    cases_b: int | None = None,
    search_cases: bool = True,
    trials: int = PLAN_TRIALS,
    resamples: int | None = None,
    tolerance: float = 0.01,
    exact_below: int = 200,
) -> PairedPlan | UnpairedPlan:
    """The repeats a design of `cases` questions (unpaired: `cases_b` on B's side) needs for
    `power`: the one planner of `probe plan` and of the hint beside an undecided verdict (which
    asks it with fewer probes, permutations and a coarser search, and `search_cases=False`: an
    unpaired plan then skips the slow search for the cases a side unlimited repeats would need).
    Either way the pick is confirmed on fresh probes, so that a noisy first crossing of the
    target does not understate the repeats."""
    if paired:
        return paired_repeats(
            p1, p2, cases, icc, alpha, power, trials, tolerance=tolerance, exact_below=exact_below
        )
    return unpaired_repeats(
        p1,
        p2,
        cases,
        icc,
        alpha,
        power,
        trials,
        resamples,
        max_cases=MAX_CASES if search_cases else 0,
        tolerance=tolerance,
        exact_below=exact_below,
        cases_b=cases_b,
    )
