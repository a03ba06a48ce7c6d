"""Would it generalise? The sign test over the cases that moved, exact whatever the repeats.

With equal repeats a case's difference b/nB - a/nA is symmetric about 0 when the prompt moves no
question, so each case that moved is a fair coin: the sign test. With unequal repeats it is not: a
case asked once under A and 10 times under B at 90% moves towards A with probability 10/11 by
noise alone (12 such cases, all towards A, gave sign test p = 0.000488). So each case is put on
its own footing by its sufficient counts:

- Given a case's total t = a + b, A's count is hypergeometric when the arms do not differ on it,
  and under a common odds ratio psi = e^theta (B's odds over A's) Fisher's noncentral
  hypergeometric, P(a) ∝ C(nA, a)·C(nB, t - a)·psi^-a, whatever the question's own rate.
- The case moved up when b/nB > a/nA (a·N < t·nA), down when a·N > t·nA. Given that it moved, up
  with probability q(theta) = P(up) / (P(up) + P(down)); q(0) = 1/2 exactly when nA = nB.
- The number of moved cases that went up is then Poisson-binomial(q_i): its two-sided p is twice
  the smaller tail (at theta = 0 with equal repeats, the plain sign test's p exactly). Conditioning
  on which cases moved keeps it exact.

This test inverted over theta (promptprobe.stats.inversion, so it excludes 0 exactly when the
test decides) gives the end on 0's side of the interval shown beside a decided line, where the
t interval of promptprobe.stats.case_means reaches 0 (promptprobe.stats.agreement); each theta
is shown in points as the mean over cases of the difference the model expects,
E_theta[b]/nB - E_theta[a]/nA: 0 at theta = 0 and increasing, so the sign agrees, and at its
ends the largest change the cases' totals allow.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .betabinomial import lgamma
from .inversion import invert

THETA_LIMIT = 30.0  # an odds ratio of e^30: rates 0 and 1 to double precision
Case = tuple[int, int, int, int]  # (a, nA, b, nB)


def _log_choose(n: np.ndarray, k: np.ndarray) -> np.ndarray:
    n, k = np.asarray(n, dtype=float), np.asarray(k, dtype=float)
    # One call over every cell: lgamma costs the same for 1 value as for 100.
    parts = lgamma(np.concatenate([n + 1, k + 1, n - k + 1])).reshape(3, -1)
    return parts[0] - parts[1] - parts[2]


@dataclass(frozen=True)
class SignResult:
    up: int
    down: int
    p_value: float


class ConditionalSignTest:
    """The sign test of the moved cases conditional on each case's total, at any common odds ratio."""

    def __init__(self, cases: Sequence[Case]) -> None:
        self.cases = [c for c in cases if c[1] and c[3]]
        width = max((min(n_a, n_b) + 1 for _, n_a, _, n_b in self.cases), default=1)
        rows = len(self.cases)
        self.values = np.zeros((rows, width))  # A's possible counts
        self.logs = np.full((rows, width), -np.inf)  # log C(nA, a)·C(nB, t - a)
        self.side = np.zeros((rows, width))  # +1 up, -1 down, 0 tie
        self.scale = np.zeros((rows, 2))  # 1/nA, 1/nB
        self.totals = np.zeros(rows)
        moved, up = [], 0
        rows_at, columns, n_as, n_bs, ts = [], [], [], [], []
        for i, (a, n_a, b, n_b) in enumerate(self.cases):
            t, total = a + b, n_a + n_b
            support = np.arange(max(0, t - n_b), min(t, n_a) + 1)
            width_i = len(support)
            self.values[i, :width_i] = support
            rows_at += [i] * width_i
            columns += range(width_i)
            n_as += [n_a] * width_i
            n_bs += [n_b] * width_i
            ts += [t] * width_i
            self.side[i, :width_i] = np.sign(t * n_a - support * total)
            self.scale[i] = (1 / n_a, 1 / n_b)
            self.totals[i] = t
            direction = (b * n_a > a * n_b) - (b * n_a < a * n_b)
            if direction:
                moved.append(i)
                up += direction > 0
        if rows_at:
            at = (np.array(rows_at), np.array(columns))
            support = self.values[at]
            t = np.array(ts, dtype=float)
            self.logs[at] = _log_choose(np.array(n_as), support) + _log_choose(np.array(n_bs), t - support)
        self.moved = np.array(moved, dtype=int)
        self.up = up
        self.down = len(moved) - up

    def _case_probabilities(self, theta: float) -> np.ndarray:
        """P(a) per case under odds ratio e^theta; at ±THETA_LIMIT the limit itself (all mass on
        A's fewest or most successes), so that the interval's open ends are exact."""
        if abs(theta) >= THETA_LIMIT:
            valid = np.isfinite(self.logs)
            index = np.where(
                theta > 0, valid.argmax(axis=1), valid.shape[1] - 1 - valid[:, ::-1].argmax(axis=1)
            )
            probs = np.zeros(self.logs.shape)
            probs[np.arange(len(probs)), index] = 1.0
            return probs
        logs = self.logs - theta * self.values
        logs = logs - logs.max(axis=1, keepdims=True)
        weights = np.exp(logs)
        return weights / weights.sum(axis=1, keepdims=True)

    def q_up(self, theta: float) -> np.ndarray:
        """For each moved case: the probability that it moved up, given that it moved."""
        probs = self._case_probabilities(theta)[self.moved]
        side = self.side[self.moved]
        up = (probs * (side > 0)).sum(axis=1)
        down = (probs * (side < 0)).sum(axis=1)
        return up / (up + down)

    def p_at(self, theta: float) -> float:
        """Twice the smaller tail of the observed number up, Poisson-binomial(q(theta))."""
        if not len(self.moved):
            return 1.0
        dist = np.ones(1)
        for q in self.q_up(theta):
            dist = np.concatenate([dist * (1 - q), [0.0]]) + np.concatenate([[0.0], dist * q])
        lower = dist[: self.up + 1].sum()
        upper = dist[self.up :].sum()
        return float(min(1.0, 2 * min(lower, upper)))

    @property
    def p_value(self) -> float:
        return self.p_at(0.0)

    def points(self, theta: float) -> float:
        """The mean over cases of E_theta[b]/nB - E_theta[a]/nA, which is (E_0[a] - E_theta[a])·
        (1/nA + 1/nB) per case: exactly 0 at theta = 0, and of theta's sign elsewhere."""
        if not self.cases or theta == 0:
            return 0.0
        probs = self._case_probabilities(theta)
        null = self._case_probabilities(0.0)
        shift = ((null - probs) * self.values).sum(axis=1)
        value = float((shift * self.scale.sum(axis=1)).mean())
        # Rounding must not give the wrong sign (or 0) where theta has one.
        return math.copysign(max(abs(value), 1e-12), theta) if value * theta <= 0 else value

    def _movable(self) -> bool:
        """Whether some case has outcomes that could differ between the arms given its total."""
        probs = self._case_probabilities(0.0)
        return bool(((probs > 0) & (self.side != 0)).any())

    def estimate(self) -> float:
        """The theta whose expected number up is the observed one (±THETA_LIMIT at the ends)."""
        if self.up == len(self.moved):
            return THETA_LIMIT
        if self.up == 0:
            return -THETA_LIMIT
        low, high = -THETA_LIMIT, THETA_LIMIT
        for _ in range(60):
            middle = (low + high) / 2
            if self.q_up(middle).sum() < self.up:
                low = middle
            else:
                high = middle
        return (low + high) / 2

    def interval_at(self, alpha: float) -> tuple[float, float] | None:
        """The 1 - alpha interval in points (excludes 0 exactly when p_value decides at alpha); None
        when no case could move given its total (every sample alike): the test then knows nothing."""
        if not len(self.cases) or not self._movable():
            return None
        found = invert(self.p_at, self.estimate(), alpha, -THETA_LIMIT, THETA_LIMIT)
        if found is None:
            return None
        low, high = found
        return (max(-1.0, self.points(low)), min(1.0, self.points(high)))
