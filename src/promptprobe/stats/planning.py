"""Planning: how many samples, repeats or cases a probe needs before the prompt changes.

- Samples per arm for two independent rates (classic pooled normal approximation, no continuity
  correction): n = [z_{α/2}·sqrt(2·p̄q̄) + z_β·sqrt(p1q1 + p2q2)]² / (p1 - p2)².
- Repeats for the paired design (the one a probe uses): the power of the stratified exact
  test is simulated with a fixed seed on the model of `simulation` (per-question rates with
  the given ICC, hard questions hard under both arms), and the smallest number of repeats
  reaching the target power is found by bisection with common random numbers.
- Repeats for the unpaired design (its unit is the case): each case's rate has variance
  ICC·pq + (1-ICC)·pq/m, so with G cases a side the test has power about
  Φ(|Δ| / sqrt((σ_A² + σ_B²)/G) - z_{α/2}); when even infinitely many repeats cannot get
  there, the cases it needs are given instead.
- Any-of-k gate: P(block) = 1 - p^k.
"""

import math
from dataclasses import dataclass

from .distributions import normal_cdf, normal_isf

MAX_REPEATS = 200
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
    if p1 == p2:
        return math.inf
    za = normal_isf(alpha / 2)
    zb = normal_isf(1 - power)
    pbar = (p1 + p2) / 2
    num = za * math.sqrt(2 * pbar * (1 - pbar)) + zb * math.sqrt(p1 * (1 - p1) + p2 * (1 - p2))
    return num**2 / (p1 - p2) ** 2


def n_per_arm(p1: float, p2: float, alpha: float = 0.05, power: float = 0.8) -> int | None:
    """Samples per arm to tell p1 from p2 (two-sided alpha, power); None when p1 == p2."""
    validate("p1", p1, 0, 1)
    validate("p2", p2, 0, 1)
    check_test_settings(alpha, power)
    if p1 == p2:
        return None
    # The small tolerance keeps 48.0000000001 from becoming 49.
    return math.ceil(n_per_arm_float(p1, p2, alpha, power) - 1e-9)


def detectable_difference(
    n: int, p1: float, alpha: float = 0.05, power: float = 0.8
) -> dict[str, float | None]:
    """Smallest p2 - p1 (each direction) that n samples per arm detect; None if unreachable."""
    if n < 1:
        raise ValueError("n must be at least 1")
    validate("p1", p1, 0, 1)
    check_test_settings(alpha, power)
    result: dict[str, float | None] = {}
    for name, edge in (("up", 1.0), ("down", 0.0)):
        if p1 == edge or n_per_arm_float(p1, edge, alpha, power) > n:
            result[name] = None
            continue
        # n_per_arm falls as p2 moves away from p1: bisect for where it equals n.
        near, far = p1, edge
        for _ in range(200):
            mid = (near + far) / 2
            if mid in (near, far):
                break
            if n_per_arm_float(p1, mid, alpha, power) > n:
                near = mid
            else:
                far = mid
        result[name] = far - p1
    return result


def gate_block_probability(p: float, k: int) -> float:
    """A gate that fails a case when any of k runs fails blocks it with 1 - p^k."""
    return 1 - p**k


def repeats_needed(n_eff: float, cases: int, icc: float) -> int | None:
    """Repeats of `cases` cases whose effective n reaches n_eff; None if no repeat count does.

    n_eff(m) = C·m / (1 + (m-1)·ICC), which tends to C/ICC as m grows.
    """
    if cases < 1 or not 0 <= icc <= 1:
        raise ValueError("cases must be >= 1 and icc within [0, 1]")
    if n_eff <= cases:
        return 1
    if cases - n_eff * icc <= 0:
        return None
    return max(1, math.ceil(n_eff * (1 - icc) / (cases - n_eff * icc) - 1e-9))


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
    """Simulated power of the paired verdict (stratified exact test) at these settings."""
    import numpy as np

    from .simulation import paired_rates
    from .tests import stratified_exact

    rng = np.random.default_rng(seed)
    rates_a, rates_b = paired_rates(rng, p1, p2, icc, (trials, cases))
    # Common random numbers: the same uniforms decide every repeat count's outcomes.
    uniforms = np.random.default_rng(seed + 1).random((2, trials, cases, repeats))
    a = (uniforms[0] < rates_a[..., None]).sum(axis=2)
    b = (uniforms[1] < rates_b[..., None]).sum(axis=2)
    hits = 0
    for trial in range(trials):
        counts = [(int(x), repeats, int(y), repeats) for x, y in zip(a[trial], b[trial], strict=True)]
        hits += stratified_exact(counts).p_value <= alpha
    return hits / trials


@dataclass(frozen=True)
class PairedPlan:
    repeats: int | None  # None: not reached within MAX_REPEATS
    power: float  # simulated power at those repeats (or at MAX_REPEATS)


def paired_repeats(
    p1: float,
    p2: float,
    cases: int,
    icc: float,
    alpha: float = 0.05,
    power: float = 0.8,
    trials: int = PLAN_TRIALS,
) -> PairedPlan:
    """The fewest repeats of `cases` cases whose paired test reaches `power` (simulated)."""
    validate("icc", icc, 0, 1)
    check_test_settings(alpha, power)
    if p1 == p2:
        return PairedPlan(None, alpha)
    cache: dict[int, float] = {}

    def power_at(m: int) -> float:
        if m not in cache:
            cache[m] = paired_power(p1, p2, cases, m, icc, alpha, trials)
        return cache[m]

    high = 1
    while power_at(high) < power:
        if high >= MAX_REPEATS:
            return PairedPlan(None, power_at(high))
        high = min(MAX_REPEATS, high * 2)
    low = high // 2  # power_at(low) < power, or low == 0
    while high - low > 1:
        mid = (low + high) // 2
        if power_at(mid) >= power:
            high = mid
        else:
            low = mid
    return PairedPlan(high, power_at(high))


@dataclass(frozen=True)
class UnpairedPlan:
    repeats: int | None  # None: no number of repeats reaches the power with these cases
    cases_needed: int  # cases per side that infinitely many repeats would need


def unpaired_repeats(
    p1: float, p2: float, cases: int, icc: float, alpha: float = 0.05, power: float = 0.8
) -> UnpairedPlan:
    """Repeats per case for the case-level unpaired test (normal approximation)."""
    validate("icc", icc, 0, 1)
    check_test_settings(alpha, power)
    delta = abs(p1 - p2)
    z = normal_isf(alpha / 2) + normal_isf(1 - power)
    pq = p1 * (1 - p1) + p2 * (1 - p2)
    if delta == 0:
        return UnpairedPlan(None, 0)
    cases_needed = max(2, math.ceil(z * z * icc * pq / delta**2 - 1e-9))

    def reached(m: int) -> bool:
        variance = (icc * pq + (1 - icc) * pq / m) / cases
        return normal_cdf(delta / math.sqrt(variance) - normal_isf(alpha / 2)) >= power if variance else True

    if not reached(10**9):
        return UnpairedPlan(None, cases_needed)
    m = 1
    while not reached(m):
        m *= 2
    low, high = m // 2, m
    while high - low > 1:
        mid = (low + high) // 2
        if reached(mid):
            high = mid
        else:
            low = mid
    return UnpairedPlan(max(1, high), cases_needed)
