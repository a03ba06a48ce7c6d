"""Sequential decisions for two arms asked the same questions in rounds (`--until-decided`).

In each round every case is asked once under each arm. A (case, round) pair where exactly one
arm succeeded is discordant; under "the arms do not differ" each discordant pair favours B (B's
outcome is the 1) with probability 1/2, whatever the case's own rate and however many discordant
pairs a round happens to bring. So, given how many pairs each round made discordant, the lead
x = (pairs favouring B) - (pairs favouring A) is a fair-coin walk.

The rule is an exact boundary on that walk, looked at after every round up to the cap C, which
is fixed before the run starts:
- By round k the rule may have spent at most alpha·(k/C)^1.5 of its false-alarm rate (alpha
  spending, Lan & DeMets 1983, with the rho = 1.5 member of Kim & DeMets 1987's family: between
  Pocock's early spending, rho = 1, and O'Brien-Fleming's, rho = 3; the benchmark chose it). Rounds
  before `min_rounds` spend nothing; the cap's look takes whatever is left of alpha.
- At each look the null distribution of x given the discordant counts so far, over the walks
  that have not crossed at an earlier look, is computed exactly (one fair coin at a time); the
  boundary is the smallest lead c whose two-sided tail P(|x| >= c) keeps what has been spent
  within the budget. The rule decides when |x| >= c: `B>A` when B leads (B's rate is higher).
- So, given the discordant counts of every round, and therefore whatever they are, the chance
  of a false alarm at any look up to the cap is at most alpha, and it spends what its own
  spending schedule allows, not all that the walk's discreteness would (where discordant pairs
  are rare, both arms at 95%, ICC 0.5, `--detect 15`, it spends 2.44% and another schedule 2.75%;
  no deterministic rule deciding from the recorded walk reaches 3% there: a threshold sequence
  chosen in hindsight spends 2.88%).
- The p-value beside a decision is the stage-wise one (Fairbanks & Madsen 1982): the null
  chance of crossing at an earlier look plus that of a lead at least as large at this look. At
  the look where the run stops (a decision, or the cap) it is <= alpha exactly when it decided.

The pairs are counted by rate: a discordant pair "favours B" when B's outcome is the 1, whatever
the metric's direction, so the decision reads like every other verdict.

The cap (`--detect POINTS`): the fewest rounds C for which this rule decides a difference of
that size with 80% power at its design point, 50% - d/2 against 50% + d/2 with questions alike
(ICC 0: the rates a difference alone implies, where discordant pairs are most common and a
difference hardest to see), simulated with a fixed seed (`rounds_for_power`).
"""

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

SPENDING_POWER = 1.5  # by round k of C the rule may have spent alpha·(k/C)^1.5
SPENDING = "alpha·(k/C)^1.5"
RULE = "exact boundary on the discordant pairs, alpha·(k/C)^1.5 spent by round k of the cap C"
SEQUENTIAL_TRIALS = 2000
SEQUENTIAL_SEED = 20261130
ROUND_LIMIT = 2000  # the largest cap `--detect` may ask for
SPENDING_SLACK = 1e-12  # the budget is kept strictly: float sums never round a tail over alpha


def budget(alpha: float, round_number: int, cap: int) -> float:
    """The false-alarm rate the rule may have spent by the end of `round_number` (of `cap`)."""
    return alpha * (min(round_number, cap) / cap) ** SPENDING_POWER


@dataclass(frozen=True)
class Look:
    """The rule after one round of one run."""

    round: int
    discordant: int  # discordant pairs so far
    lead: int  # B-favouring minus A-favouring pairs so far
    needed: int | None  # the lead (either way) that decides at this look; None: none can
    budget: float  # the false-alarm rate the rule may have spent by this look: alpha·(k/C)^1.5
    spent: float  # what it has spent: the null chance of deciding by this look (<= budget)
    p_value: float  # stage-wise: <= budget exactly when this look decides
    decision: str | None  # "B>A" / "A>B" when it decides here
    stop: bool  # decided, or the cap


class _Walks:
    """The null distributions of a batch of walks over walks that have not crossed yet, kept for
    leads x >= 0 only (they are symmetric): h[i, x] = P(lead = x, not crossed) = P(lead = -x, ...)."""

    def __init__(self, count: int, width: int) -> None:
        import numpy as np

        self.h = np.zeros((count, width + 1))
        self.h[:, 0] = 1.0
        self.live = np.zeros(count, dtype=np.int64)  # the largest |lead| still possible

    def take(self, rows: Any) -> None:
        self.h, self.live = self.h[rows], self.live[rows]

    def add_coins(self, coins: Any) -> None:
        """Add `coins[i]` fair coins to walk i (rows in any order)."""
        import numpy as np

        need = int((self.live + coins).max(initial=0)) + 2
        if need > self.h.shape[1]:
            self.h = np.pad(self.h, ((0, 0), (0, need - self.h.shape[1] + 16)))
        order = np.argsort(-coins, kind="stable")
        h = self.h[order]
        sorted_coins = coins[order]
        for j in range(int(sorted_coins[0]) if sorted_coins.size else 0):
            n = int(np.count_nonzero(sorted_coins > j))  # a prefix: coins are sorted down
            v = h[:n]
            new = np.empty_like(v)
            new[:, 0] = v[:, 1]  # P(0) = (P(-1) + P(1)) / 2 = P(1) by symmetry
            new[:, 1:-1] = 0.5 * (v[:, :-2] + v[:, 2:])
            new[:, -1] = 0.5 * v[:, -2]
            h[:n] = new
        self.h[order] = h
        self.live = self.live + coins

    def upper_tails(self) -> Any:
        """U[i, x] = P(|lead| >= x, not crossed) for x >= 1; U[i, 0] the whole live mass."""
        import numpy as np

        tails = 2 * np.cumsum(self.h[:, ::-1], axis=1)[:, ::-1]
        tails[:, 0] -= self.h[:, 0]  # x = 0 is one point, not two
        return tails

    def absorb(self, needed: Any) -> None:
        import numpy as np

        columns = np.arange(self.h.shape[1])
        self.h[columns[None, :] >= needed[:, None]] = 0.0
        self.live = np.minimum(self.live, needed - 1)


@dataclass
class _Round:
    """One round's looks over the walks still running (`rows` index the original batch)."""

    rows: Any
    lead: Any
    discordant: Any
    needed: Any  # 0 where no lead can decide
    budget: float
    spent: Any  # the null chance of a crossing up to this look, given the discordant counts
    p_value: Any
    decided: Any


def _walk(discordant: Any, b_higher: Any, alpha: float, cap: int, min_rounds: int) -> Iterator[_Round]:
    """The rule on a batch of runs: per-round counts (runs x rounds, at most `cap` rounds) of
    discordant pairs and of those favouring B. Yields each round's looks; a run leaves the batch
    once it has decided."""
    import numpy as np

    discordant = np.asarray(discordant, dtype=np.int64)
    b_higher = np.asarray(b_higher, dtype=np.int64)
    runs, rounds = discordant.shape
    rows = np.arange(runs)
    walks = _Walks(runs, 16)
    spent = np.zeros(runs)
    lead = np.zeros(runs, dtype=np.int64)
    total = np.zeros(runs, dtype=np.int64)
    for k in range(1, min(rounds, cap) + 1):
        coins = discordant[rows, k - 1]
        walks.add_coins(coins)
        lead += 2 * b_higher[rows, k - 1] - coins
        total += coins
        allowed = budget(alpha, k, cap)
        tails = walks.upper_tails()
        size = np.abs(lead)
        index = np.arange(rows.size)
        p_value = np.minimum(1.0, spent + tails[index, size])
        if k < min_rounds:
            needed = np.zeros(rows.size, dtype=np.int64)
        else:
            fits = tails <= (allowed * (1 - SPENDING_SLACK) - spent)[:, None]
            fits[:, 0] = False  # a lead of 0 never decides
            needed = np.where(fits.any(axis=1), fits.argmax(axis=1), 0)
            spent = spent + np.where(needed > 0, tails[index, needed], 0.0)
            walks.absorb(np.where(needed > 0, needed, walks.h.shape[1]))
        decided = (needed > 0) & (size >= needed)
        yield _Round(rows, lead.copy(), total.copy(), needed, allowed, spent, p_value, decided)
        keep = ~decided
        rows, lead, total, spent = rows[keep], lead[keep], total[keep], spent[keep]
        walks.take(keep)
        if rows.size == 0:
            return


def look(discordant: Sequence[int], b_higher: Sequence[int], alpha: float, cap: int, min_rounds: int) -> Look:
    """The rule after the last of these rounds of one run (per round: its discordant pairs and
    those favouring B); the rounds before it must not have decided."""
    if not discordant or len(discordant) != len(b_higher) or len(discordant) > cap:
        raise ValueError(f"need 1 to {cap} rounds of counts, got {len(discordant)} and {len(b_higher)}")
    k = len(discordant)
    looks = list(_walk([list(discordant)], [list(b_higher)], alpha, cap, min_rounds))
    if len(looks) < k:
        raise ValueError(f"the rule had already decided at round {len(looks)}, before round {k}")
    last = looks[-1]
    lead, needed, decided = int(last.lead[0]), int(last.needed[0]), bool(last.decided[0])
    return Look(
        round=k,
        discordant=int(last.discordant[0]),
        lead=lead,
        needed=needed or None,
        budget=last.budget,
        spent=float(last.spent[0]),
        p_value=float(last.p_value[0]),
        decision=("B>A" if lead > 0 else "A>B") if decided else None,
        stop=decided or k == cap,
    )


def first_decisions(
    discordant: Any, b_higher: Any, alpha: float, cap: int, min_rounds: int
) -> tuple[Any, Any]:
    """Per run (rows of per-round counts): the round the rule decided at (0: not by the cap or
    the rounds given) and its direction (+1: B's rate higher, -1: A's, 0: undecided)."""
    stops, directions, _ = stops_and_p_values(discordant, b_higher, alpha, cap, min_rounds)
    return stops, directions


def stops_and_p_values(
    discordant: Any, b_higher: Any, alpha: float, cap: int, min_rounds: int
) -> tuple[Any, Any, Any]:
    """`first_decisions`, and each run's stage-wise p where it stopped (its decision, or the
    last round given: the cap's p when that is the cap)."""
    import numpy as np

    runs = len(discordant)
    stops = np.zeros(runs, dtype=np.int64)
    directions = np.zeros(runs, dtype=np.int64)
    p_values = np.ones(runs)
    for k, looked in enumerate(_walk(discordant, b_higher, alpha, cap, min_rounds), start=1):
        rows = looked.rows[looked.decided]
        stops[rows] = k
        directions[rows] = np.sign(looked.lead[looked.decided])
        p_values[looked.rows] = looked.p_value
    return stops, directions, p_values


def null_spending(discordant: Any, alpha: float, cap: int, min_rounds: int) -> Any:
    """Per run (rows of per-round discordant counts): the exact chance, given those counts, that
    the rule decides by the last round given when the arms do not differ (what it spends along
    a walk that never decides; its mean over runs is the false-alarm rate, exactly)."""
    import numpy as np

    discordant = np.asarray(discordant, dtype=np.int64)
    b_higher = np.empty_like(discordant)
    lead = np.zeros(len(discordant), dtype=np.int64)
    for k in range(discordant.shape[1]):
        d = discordant[:, k]
        b_higher[:, k] = (d + np.where(lead <= 0, 1, -1) * (d % 2)) // 2  # the lead stays 0 or ±1
        lead += 2 * b_higher[:, k] - d
    spent = np.zeros(len(discordant))
    for looked in _walk(discordant, b_higher, alpha, cap, min_rounds):
        spent[looked.rows] = looked.spent
    return spent


def false_alarm_ceiling(discordant: int, alpha: float) -> float:
    """The most that a rule treating the arms alike and keeping its false alarms within alpha
    given the counts can spend, given that the run made `discordant` discordant pairs: under the
    null each of the 2^n ways their coins can fall is equally likely, and such a rule decides on
    a set of them and on its mirror image too (B and A swapped), so it spends an even number of
    2^-n at most alpha. The rule's own spending is at most this (a rule that may favour an arm
    is not bound by it: at both arms 95%, ICC 0.5, `--detect 15` it could spend 3.43% against
    this 3.16%); only a coin drawn apart from the outputs could spend all of alpha."""
    if discordant < 0 or not 0 < alpha < 1:
        raise ValueError(f"need discordant >= 0 and 0 < alpha < 1, got {discordant} and {alpha:g}")
    if discordant == 0:
        return 0.0
    if discordant > 1000:  # 2^-n is far below any float gap in alpha
        return alpha
    # alpha·2^(n-1) is exact in floating point (a power of two), so the floor is too.
    return math.ldexp(math.floor(math.ldexp(alpha, discordant - 1)), 1 - discordant)


# -- simulated runs ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Cap:
    rounds: int | None  # None: more than `limit` rounds
    power: float | None  # share of simulated runs decided the right way by `rounds`
    limit: int


def design_point(detect: float) -> tuple[float, float]:
    """The rates `--detect` alone implies: 50% - d/2 and 50% + d/2."""
    return 0.5 - detect / 2, 0.5 + detect / 2


def discordant_pairs_needed(detect: float, alpha: float, power: float) -> float:
    """The discordant pairs a fixed-size sign test needs at the design point (normal
    approximation; B's share of discordant pairs there is 1/2 + d/(1 + d²))."""
    from .distributions import normal_isf

    lean = detect / (1 + detect * detect)
    return ((normal_isf(alpha / 2) + normal_isf(1 - power)) / (2 * lean)) ** 2


def design_point_counts(detect: float, cases: int, rounds: range, trials: int, seed: int) -> tuple[Any, Any]:
    """Per-round discordant and B-favouring counts (trials x rounds) at the design point: each
    round drawn from its own seed, so that a longer horizon extends a shorter one."""
    import numpy as np

    p1, p2 = design_point(detect)
    b_only, a_only = p2 * (1 - p1), p1 * (1 - p2)
    discordant = np.empty((trials, len(rounds)), dtype=np.int64)
    b_higher = np.empty_like(discordant)
    for i, k in enumerate(rounds):
        rng = np.random.default_rng([seed, k])
        discordant[:, i] = rng.binomial(cases, b_only + a_only, size=trials)
        b_higher[:, i] = rng.binomial(discordant[:, i], b_only / (b_only + a_only))
    return discordant, b_higher


@lru_cache(maxsize=32)
def rounds_for_power(
    detect: float,
    cases: int,
    alpha: float = 0.05,
    power: float = 0.8,
    min_rounds: int = 2,
    limit: int = ROUND_LIMIT,
    trials: int = SEQUENTIAL_TRIALS,
) -> Cap:
    """The fewest rounds for which the rule decides a difference of `detect` the right way with
    `power` at the design point (simulated with a fixed seed, the same runs for every cap)."""
    import numpy as np

    if not 0 < detect <= 1:
        raise ValueError(f"the difference to detect must lie in (0, 1], got {detect:g}")
    per_round = cases * (1 + detect * detect) / 2  # discordant pairs a round brings there
    # The rule needs about 1.14x the rounds of a fixed sign test (the benchmark's caps).
    guess = max(min_rounds, math.ceil(1.14 * discordant_pairs_needed(detect, alpha, power) / per_round))
    if guess > limit:
        return Cap(None, None, limit)
    counts: tuple[Any, Any] = (np.empty((trials, 0), dtype=np.int64),) * 2
    powers: dict[int, float] = {}

    def reaches(cap: int) -> bool:
        nonlocal counts
        if cap < min_rounds:
            return False
        if cap not in powers:
            have = counts[0].shape[1]
            if cap > have:
                more = design_point_counts(detect, cases, range(have + 1, cap + 1), trials, SEQUENTIAL_SEED)
                counts = (np.hstack([counts[0], more[0]]), np.hstack([counts[1], more[1]]))
            stops, directions = first_decisions(
                counts[0][:, :cap], counts[1][:, :cap], alpha, cap, min_rounds
            )
            powers[cap] = float(((stops > 0) & (directions > 0)).mean())
        return powers[cap] >= power

    # A bracket around the guess (low does not reach the power, high does), then bisection.
    step = max(1, guess // 20)
    if reaches(guess):
        low, high = guess - step, guess
        while reaches(low):
            low, high, step = low - step, low, 2 * step
    else:
        low, high = guess, min(limit, guess + step)
        while not reaches(high):
            if high >= limit:
                return Cap(None, powers[high], limit)
            low, high, step = high, min(limit, high + step), 2 * step
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if reaches(middle) else (middle, high)
    return Cap(high, powers[high], limit)


def coupled_rates(
    rng: Any, mean_a: float, mean_b: float, icc: float, shape: tuple[int, ...]
) -> tuple[Any, Any]:
    """Per-question rates of A and B on the same questions: each question has its own place u
    in the spread of questions (hard questions are hard under both arms), and its rate under
    each arm is that quantile of the arm's Beta distribution (the comonotone coupling, drawn
    question by question, so every simulated run pairs its own questions)."""
    import numpy as np

    from .simulation import ICC_EDGE

    u = rng.random(shape)

    def quantiles(mean: float) -> Any:
        if icc <= ICC_EDGE or mean in (0.0, 1.0):
            return np.full(shape, mean)
        if icc >= 1 - ICC_EDGE:
            return (u >= 1 - mean).astype(float)
        from scipy.special import betaincinv

        strength = 1 / icc - 1
        return betaincinv(mean * strength, (1 - mean) * strength, u)

    return quantiles(mean_a), quantiles(mean_b)


def simulated_counts(
    p1: float, p2: float, cases: int, icc: float, rounds: int, trials: int, seed: int
) -> tuple[Any, Any]:
    """Per-round discordant and B-favouring counts (trials x rounds) of simulated runs with
    clustered questions (see `coupled_rates`); each round asks every question once per arm."""
    import numpy as np

    rates_a, rates_b = coupled_rates(np.random.default_rng([seed, 0]), p1, p2, icc, (trials, cases))
    discordant = np.empty((trials, rounds), dtype=np.int64)
    b_higher = np.empty_like(discordant)
    for k in range(rounds):
        rng = np.random.default_rng([seed, k + 1])
        a_ok = rng.random((trials, cases)) < rates_a
        b_ok = rng.random((trials, cases)) < rates_b
        b_higher[:, k] = (b_ok & ~a_ok).sum(axis=1)
        discordant[:, k] = b_higher[:, k] + (a_ok & ~b_ok).sum(axis=1)
    return discordant, b_higher


def simulate_rounds(
    p1: float,
    p2: float,
    cases: int,
    icc: float,
    alpha: float = 0.05,
    min_rounds: int = 2,
    max_rounds: int = 40,
    trials: int = SEQUENTIAL_TRIALS,
    seed: int = SEQUENTIAL_SEED,
) -> tuple[Any, Any]:
    """Simulated sequential runs with the rule's own code: per run the round it decided at (0:
    reached the cap undecided) and whether it said B>A (+1), A>B (-1) or nothing (0)."""
    discordant, b_higher = simulated_counts(p1, p2, cases, icc, max_rounds, trials, seed)
    return first_decisions(discordant, b_higher, alpha, max_rounds, min_rounds)
