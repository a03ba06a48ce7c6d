"""The interval beside the paired verdict: the stratified exact conditional test, inverted.

Given each case's total successes t_i, A's count in case i under a common odds ratio psi (B's
odds over A's) is Fisher's noncentral hypergeometric: P(a) ∝ C(nA_i, a)·C(nB_i, t_i - a)·psi^-a.
A's total S then has the null distribution of the verdict's test tilted by psi^-S, and at psi = 1
it is exactly that test. With theta = log psi, the two-sided p at theta uses the verdict's own
rule (the probabilities no larger than the observed one's, relative tolerance 1e-7), and theta is
in the acceptance set at level alpha when p(theta) > alpha·(1 + 1e-9), the verdict's `decides`
turned round. The acceptance set of a discrete two-sided test need not be an interval, so:

- decided (theta = 0 rejected, by the verdict's own p): the interval is the hull of the accepted
  points on the side of the estimate only, so it excludes 0 by construction;
- not decided: the hull of every accepted point together with 0, so it contains 0.

The conditional maximum-likelihood estimate theta_hat always has p = 1: S is a sum of independent
Bernoulli variables for every theta (each noncentral hypergeometric is one, Fisher's distribution
being a Pólya frequency sequence), so when its mean is the observed integer that value is the
mode (Darroch 1964). The hull therefore contains theta_hat, which lies on the estimate's side.

The risk-difference scale: RD(theta) = (E_0[S] - E_theta[S]) / Σ w_i, w_i = nA_i·nB_i/N_i, which
is Σ w_i·(E_theta[b_i]/nB_i - E_theta[a_i]/nA_i) / Σ w_i, the weighted difference of the rates the
conditional model expects in each case. It is 0 at theta = 0, strictly increasing in theta, and at
theta_hat (where E[S] = S) it is the Mantel-Haenszel risk difference: the estimate shown is the
point of the interval the test likes best. An infinite theta (the observed total at the end of
its range) maps to the limit of RD, the largest difference the cases' margins allow; with no case
that can move the interval is [-1, 1]. The paired verdict (promptprobe.stats.verdict) widens the
far end to Sato's interval where that is wider: conditioned on each case's margins, this mapping
cannot see how uncertain the per-question rates themselves are.

The search: p(theta) from one distribution of S computed at a centre (a convolution of the cases'
noncentral hypergeometrics) and tilted by exp(-(theta - centre)·s) for every other theta, which is
exact while the part of the support cut off below double precision cannot matter (checked by a
log-concave tail bound; otherwise a new centre is computed there). Candidate thetas are a grid plus
every point where p can jump (where one value's probability crosses the observed one's) when there
are few enough, then bisection to 1e-9 between the outermost accepted candidate and the next one.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .tests import RELATIVE_TOLERANCE, decision_limit

# Beyond this odds ratio (e^30, about 1e13) the model's rates are 0 and 1 to double precision.
THETA_LIMIT = 30.0
GRID = 64
RECENTRES = 4  # new centres one p_values call may add before taking the nearest one's answer
MAX_BREAKPOINTS = 4096
BISECTIONS = 20  # rounds of cutting the last gap into SECTIONS (to THETA_TOLERANCE)
SECTIONS = 16
SCAN_BATCH = 4  # doubling steps looked at together (out to 2 standard errors, then 32)
THETA_TOLERANCE = 1e-7
# A centre's tilt is trusted while the mass beyond its cut-off support is below this (relative):
# p to 1e-6 is far finer than any comparison with alpha needs.
TRUSTED_TAIL = 1e-6
# Values this far below a distribution's largest are dropped (exp underflows near -745).
_LOG_FLOOR = -700.0
# A case's values this far below its largest change no p-value that matters (at most G·e^-60 of
# the mass); the check on the tails of S still sees that they were cut.
_CASE_FLOOR = -60.0
# After an FFT convolution, values below this (relative to the largest) are rounding noise.
_FFT_FLOOR = 1e-11
METHOD = "exact conditional test inverted (common odds ratio), as a difference of rates"

Case = tuple[int, int, int, int]  # (a, nA, b, nB)


@dataclass
class _Centre:
    theta: float
    low: int  # the smallest S kept
    logs: np.ndarray  # log P(S = low + j) at theta, up to a constant


@dataclass
class ConditionalModel:
    """A's total S over the cases that can move, and everything needed to tilt it."""

    observed: int
    s_min: int
    s_max: int
    weight: float  # Σ nA·nB/N over cases both arms asked
    expected0: float  # E_0[S]
    values: np.ndarray  # a, per moving case, concatenated
    base: np.ndarray  # log C(nA, a)·C(nB, t - a), relative within each case
    starts: np.ndarray  # where each moving case starts in `values`
    fixed: int  # A's successes in the cases that cannot move
    pvalues: "PFunction | None" = None

    @property
    def moving(self) -> bool:
        return self.s_max > self.s_min

    # -- per-case moments (exact at any theta, no convolution) ------------------------------

    def weights(self, theta: float) -> tuple[np.ndarray, np.ndarray]:
        """Each moving case's noncentral hypergeometric weights at theta, and their sums."""
        logs = self.base - theta * self.values
        tops = np.maximum.reduceat(logs, self.starts)
        counts = np.diff(np.append(self.starts, len(self.values)))
        weights = np.exp(logs - np.repeat(tops, counts))
        return weights, np.add.reduceat(weights, self.starts)

    def mean(self, theta: float) -> float:
        """E_theta[S]; the limits at ±infinity are the ends of the support."""
        if theta == math.inf:
            return float(self.s_min)
        if theta == -math.inf:
            return float(self.s_max)
        if not self.moving:
            return float(self.s_min)
        weights, totals = self.weights(theta)
        return self.fixed + float((np.add.reduceat(weights * self.values, self.starts) / totals).sum())

    def variance(self, theta: float) -> float:
        if not self.moving or math.isinf(theta):
            return 0.0
        weights, totals = self.weights(theta)
        first = np.add.reduceat(weights * self.values, self.starts) / totals
        second = np.add.reduceat(weights * self.values**2, self.starts) / totals
        return float(np.maximum(second - first**2, 0.0).sum())

    def risk_difference(self, theta: float) -> float:
        """RD(theta) = (E_0[S] - E_theta[S]) / Σ w; exactly 0 at theta = 0."""
        if theta == 0 or self.weight == 0:
            return 0.0
        return (self.expected0 - self.mean(theta)) / self.weight

    def solve(self, target: float) -> float:
        """The theta where E_theta[S] = target (s_min < target < s_max): Newton inside a bracket."""
        low, high = -THETA_LIMIT * 4, THETA_LIMIT * 4
        theta = 0.0
        for _ in range(200):
            gap = self.mean(theta) - target  # decreasing in theta
            if abs(gap) < 1e-10 * max(1.0, abs(target)):
                return theta
            if gap > 0:
                low = theta
            else:
                high = theta
            spread = self.variance(theta)
            step = theta + gap / spread if spread > 0 else (low + high) / 2
            theta = step if low < step < high else (low + high) / 2
            if high - low < 1e-13:
                break
        return theta

    def estimate_theta(self) -> float:
        """The conditional maximum-likelihood log odds ratio (infinite at the ends of the range)."""
        if self.observed <= self.s_min:
            return math.inf if self.moving else 0.0
        if self.observed >= self.s_max:
            return -math.inf
        return self.solve(self.observed)

    def p_function(self) -> "PFunction":
        """The p-value at any theta (one per model: its distributions of S serve every level)."""
        if self.pvalues is None:
            self.pvalues = PFunction(self)
        return self.pvalues


class PFunction:
    """The two-sided conditional p at any theta: distributions of S computed at a few centres
    (convolutions), tilted to every other theta while their cut-off tails cannot matter."""

    def __init__(self, model: ConditionalModel) -> None:
        self.model = model
        self.centres: list[_Centre] = []

    def _centre_at(self, theta: float) -> _Centre:
        model = self.model
        weights, totals = model.weights(theta)
        bounds = np.append(model.starts, len(model.values))
        pieces = []
        for i, start in enumerate(model.starts):
            pmf = weights[start : bounds[i + 1]] / totals[i]
            kept = np.nonzero(pmf > math.exp(_CASE_FLOOR))[0]
            pieces.append((int(model.values[start + kept[0]]), pmf[kept[0] : kept[-1] + 1]))
        low, dist = _tree(pieces)
        # The run of values around the largest that carry probability (FFT noise is 0 already).
        top = int(np.argmax(dist))
        zeros = np.nonzero(dist <= dist[top] * math.exp(_LOG_FLOOR))[0]
        first = int(zeros[zeros < top].max()) + 1 if (zeros < top).any() else 0
        last = int(zeros[zeros > top].min()) if (zeros > top).any() else len(dist)
        centre = _Centre(theta, model.fixed + low + first, np.log(dist[first:last]))
        self.centres.append(centre)
        return centre

    def p_values(self, thetas: np.ndarray) -> np.ndarray:
        """The two-sided conditional p at each theta (finite), the verdict's rule."""
        out = np.full(len(thetas), np.nan)
        self.first_centre()
        pending = np.arange(len(thetas))
        for attempt in range(RECENTRES + 1):
            centres = self.centres
            where = np.array([c.theta for c in centres])
            nearest = np.argmin(np.abs(where[:, None] - thetas[pending]), axis=0)
            still = []
            for index, centre in enumerate(centres):
                mine = pending[nearest == index]
                if not len(mine):
                    continue
                p, trusted = _tilted_p(centre, thetas[mine], *self._ends())
                out[mine[trusted]] = p[trusted]
                still.extend(mine[~trusted])
            pending = np.array(sorted(still), dtype=int)
            if not len(pending):
                break
            if attempt < RECENTRES:
                # A new centre where it is needed most: the pending theta farthest from every centre.
                where = np.array([c.theta for c in self.centres])
                gaps = np.abs(where[:, None] - thetas[pending]).min(axis=0)
                self._centre_at(float(thetas[pending][int(np.argmax(gaps))]))
        for index in pending:  # each on a centre of its own: as exact as double precision allows
            centre = self._centre_at(float(thetas[index]))
            out[index] = _tilted_p(centre, thetas[index : index + 1], *self._ends())[0][0]
        return out

    def _ends(self) -> tuple[int, int, int]:
        return self.model.observed, self.model.s_min, self.model.s_max

    @property
    def small(self) -> bool:
        """Whether the first distribution of S holds every value of its support (nothing cut)."""
        return len(self.first_centre().logs) == self.model.s_max - self.model.s_min + 1

    def first_centre(self) -> _Centre:
        """The distribution of S where the observed total is most likely (computed once)."""
        if not self.centres:
            self._centre_at(_clip(self.model.estimate_theta(), self.model))
        return self.centres[0]

    def p_at(self, theta: float) -> float:
        observed, s_min, s_max = self._ends()
        if theta == math.inf:
            return 1.0 if observed == s_min else 0.0
        if theta == -math.inf:
            return 1.0 if observed == s_max else 0.0
        return float(self.p_values(np.array([theta]))[0])

    def breakpoints(self, low: float, high: float) -> np.ndarray:
        """The thetas in (low, high) where some value's probability crosses the observed one's."""
        centre = self.first_centre()
        s = np.arange(len(centre.logs)) + centre.low
        observed = self.model.observed
        at = observed - centre.low
        if not 0 <= at < len(s):
            return np.empty(0)
        other = s != observed
        points = centre.theta + (
            centre.logs[other] - centre.logs[at] - math.log1p(RELATIVE_TOLERANCE)
        ) / (s[other] - observed)
        points = points[(points > low) & (points < high)]
        return np.sort(points) if len(points) <= MAX_BREAKPOINTS else np.empty(0)


def _clip(theta: float, model: ConditionalModel) -> float:
    """A finite centre near theta (an infinite estimate: where E[S] is half a step inside)."""
    if theta == math.inf:
        return model.solve(model.s_min + 0.5) if model.moving else 0.0
    if theta == -math.inf:
        return model.solve(model.s_max - 0.5) if model.moving else 0.0
    return theta


def _convolve(left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """Direct convolution keeps every value's relative precision; above 4 million products an
    FFT does, whose rounding noise (relative to the largest value) is set to 0."""
    if len(left) * len(right) <= 4_000_000:
        return np.convolve(left, right)
    size = len(left) + len(right) - 1
    fft_size = 1 << (size - 1).bit_length()
    out = np.fft.irfft(np.fft.rfft(left, fft_size) * np.fft.rfft(right, fft_size), fft_size)[:size]
    out[out < out.max() * _FFT_FLOOR] = 0.0
    return out


def _tree(pieces: list[tuple[int, np.ndarray]]) -> tuple[int, np.ndarray]:
    """Convolve the cases' distributions pairwise (a balanced tree: fast with many cases)."""
    if not pieces:
        return 0, np.ones(1)
    while len(pieces) > 1:
        paired = []
        for i in range(0, len(pieces) - 1, 2):
            (low_a, a), (low_b, b) = pieces[i], pieces[i + 1]
            paired.append((low_a + low_b, _convolve(a, b)))
        if len(pieces) % 2:
            paired.append(pieces[-1])
        pieces = paired
    return pieces[0]


def _tilted_p(
    centre: _Centre, thetas: np.ndarray, observed: int, s_min: int, s_max: int
) -> tuple[np.ndarray, np.ndarray]:
    """p at each theta from a centre, and whether the centre's cut-off tails cannot matter there.

    The distribution of S is log-concave, so beyond a cut edge where the log-probability falls
    by `slope` per step the mass is at most P(edge)·e^slope / (1 - e^slope). When the observed
    total lies beyond an edge, p is at most the mass beyond both edges (returned as p)."""
    size = len(centre.logs)
    at = observed - centre.low
    s = np.arange(size, dtype=float)
    logs = centre.logs[None, :] - (thetas[:, None] - centre.theta) * s[None, :]
    logs -= logs.max(axis=1, keepdims=True)
    weights = np.exp(logs)
    total = weights.sum(axis=1)
    high = centre.low + size - 1
    trusted = np.ones(len(thetas), dtype=bool)
    beyond = np.zeros(len(thetas))
    for cut, edge, inner in ((centre.low > s_min, 0, 1), (high < s_max, size - 1, size - 2)):
        if not cut:
            continue
        if size < 2:
            trusted[:] = False
            continue
        slope = np.minimum(logs[:, edge] - logs[:, inner], -1e-12)  # per step outward
        tail = weights[:, edge] * np.exp(slope) / -np.expm1(slope)
        trusted &= (logs[:, edge] < logs[:, inner]) & (tail <= TRUSTED_TAIL * total)
        beyond += tail / total
    if not 0 <= at < size:
        return np.minimum(1.0, beyond), trusted
    observed_weight = weights[:, at]
    extreme = weights <= observed_weight[:, None] * (1 + RELATIVE_TOLERANCE)
    p = np.minimum(1.0, (weights * extreme).sum(axis=1) / total)
    return p, trusted


def model_of(cases: Sequence[Case]) -> ConditionalModel:
    """The conditional model of per-case (a, nA, b, nB)."""
    values, base, starts = [], [], []
    fixed = s_min = s_max = observed = 0
    expected0 = weight = 0.0
    position = 0
    for a, n_a, b, n_b in cases:
        total = a + b
        observed += a
        if n_a and n_b:
            weight += n_a * n_b / (n_a + n_b)
            expected0 += total * n_a / (n_a + n_b)
        else:
            expected0 += a
        low, high = max(0, total - n_b), min(total, n_a)
        s_min += low
        s_max += high
        if high == low:
            fixed += low
            continue
        x = np.arange(low, high, dtype=float)
        steps = np.log((n_a - x) * (total - x)) - np.log((x + 1) * (n_b - total + x + 1))
        values.append(np.arange(low, high + 1, dtype=float))
        base.append(np.concatenate([[0.0], np.cumsum(steps)]))
        starts.append(position)
        position += high - low + 1
    return ConditionalModel(
        observed,
        s_min,
        s_max,
        weight,
        expected0,
        np.concatenate(values) if values else np.empty(0),
        np.concatenate(base) if base else np.empty(0),
        np.array(starts, dtype=int),
        fixed,
    )


# -- the search ----------------------------------------------------------------------------


def _scale(model: ConditionalModel, theta: float) -> float:
    """A step in theta of about a quarter of its standard error there."""
    return 0.25 / math.sqrt(max(model.variance(theta), 0.25))


def _accepted_start(pf: PFunction, estimate: float, limit: float) -> float:
    """A finite accepted theta on the estimate's side: the estimate itself (p = 1), or for an
    infinite estimate the first accepted point going out from the finite centre (inf if none)."""
    if not math.isinf(estimate):
        return estimate
    direction = 1 if estimate > 0 else -1
    theta = pf.first_centre().theta
    step = _scale(pf.model, theta)
    while abs(theta) < THETA_LIMIT:
        if pf.p_at(theta) > limit:
            return theta
        theta += direction * step
        step *= 2
    return estimate


def _outermost(
    pf: PFunction, start: float, direction: int, limit: float, stop: float | None = None
) -> float:
    """The accepted theta farthest from `start` (accepted) in `direction`, not beyond `stop`
    (rejected, e.g. 0 when the verdict rejected it); ±inf when the end itself is accepted."""
    if math.isinf(start):
        return start
    if stop is None and pf.p_at(direction * math.inf) > limit:
        return direction * math.inf
    # Out by doubling steps until p stays far below the limit, `stop`, or effectively infinity
    # (all looked at in one go); the segment searched finely runs from the last accepted point to
    # the next one looked at (a small design, where every value's probability is known and p can
    # jump back up, to the last one looked at).
    first = _scale(pf.model, start)
    steps = first * 2.0 ** np.arange(64)
    points = start + direction * steps[: int(np.searchsorted(steps, 2 * THETA_LIMIT)) + 1]
    ends = [stop] if stop is not None else []
    ends.append(direction * THETA_LIMIT)
    for end in ends:
        beyond = np.nonzero((points - end) * direction >= 0)[0]
        if len(beyond):
            points = np.append(points[: beyond[0]], end)
    small = pf.small
    inside, after, quiet, far = start, None, 0, start
    batch_size = SCAN_BATCH if small else 1  # a large design pays a convolution for a far theta
    for batch in range(0, len(points), batch_size):
        chunk = points[batch : batch + batch_size]
        p = pf.p_values(chunk)
        if stop is not None and chunk[-1] == stop:
            p[-1] = 0.0  # the verdict's own p rejected it
        elif chunk[-1] == direction * THETA_LIMIT and p[-1] > limit:
            return direction * math.inf
        for theta, value in zip(chunk, p, strict=True):
            far = float(theta)
            if value > limit:
                inside, after = far, None
            elif after is None:
                after = far
            quiet = quiet + 1 if value < limit / 100 else 0
            if quiet >= 2 or (quiet == 1 and not small):
                break  # p does not come back up once it is this far below
        if quiet >= 2 or (quiet == 1 and not small):
            break
    return _crossing(pf, inside, far if small else (after if after is not None else far), limit)


def _crossing(pf: PFunction, accepted: float, end: float, limit: float) -> float:
    """The accepted point farthest from `accepted` on the segment to `end` (rejected): every
    accepted candidate (grid and the points where p can jump) counts, then bisection."""
    low, high = sorted((accepted, end))
    small = pf.small
    grid = np.linspace(low, high, GRID if small else SECTIONS)
    candidates = np.unique(np.concatenate([grid, _limits(pf.breakpoints(low, high))]))
    candidates = candidates[(candidates >= low) & (candidates <= high)]
    p = pf.p_values(candidates)
    p[candidates == 0.0] = 0.0 if end == 0.0 else p[candidates == 0.0]  # the verdict's own p at 0
    order = np.argsort(np.abs(candidates - accepted), kind="stable")
    ok = np.nonzero(p[order] > limit)[0]
    if not len(ok):
        return accepted
    last = int(ok[-1])
    inside = float(candidates[order[last]])
    if last + 1 >= len(order):
        return inside
    outside = float(candidates[order[last + 1]])
    # Between two neighbouring candidates p does not jump: cut the gap into SECTIONS at a time.
    for _ in range(BISECTIONS):
        if abs(outside - inside) <= THETA_TOLERANCE * max(1.0, abs(inside)):
            break
        points = inside + (outside - inside) * np.arange(1, SECTIONS) / SECTIONS
        values = pf.p_values(points)
        values[points == 0.0] = 0.0
        accepted = np.nonzero(values > limit)[0]
        if len(accepted):
            inside = float(points[accepted[-1]])
            outside = float(points[accepted[-1] + 1]) if accepted[-1] + 1 < len(points) else outside
        else:
            outside = float(points[0])
    return inside


def _limits(points: np.ndarray) -> np.ndarray:
    """Both sides of each breakpoint, where p takes its two values."""
    if not len(points):
        return points
    gap = 1e-9 * np.maximum(1.0, np.abs(points))
    return np.concatenate([points - gap, points + gap])


@dataclass(frozen=True)
class ConditionalInterval:
    theta: tuple[float, float]  # log odds ratio
    interval: tuple[float, float]  # B - A, risk-difference scale, within [-1, 1]
    estimate: float  # RD at theta_hat: the Mantel-Haenszel risk difference


def conditional_interval(
    cases: Sequence[Case],
    p_value: float,
    alpha: float,
    sign: int,
    estimate_rd: float | None = None,
    model: ConditionalModel | None = None,
) -> ConditionalInterval:
    """The 1 - alpha interval for B - A that excludes 0 exactly when `p_value` (the verdict's
    stratified exact p for these cases) decides at alpha. `sign` is the exact sign of the
    effect (the verdict's direction); `estimate_rd` the estimate shown, kept inside."""
    model = model or model_of(cases)
    limit = decision_limit(alpha)
    decided = p_value <= limit
    if not model.moving:
        # No case can move: the test cannot tell anything, and nothing bounds the difference.
        return ConditionalInterval((-math.inf, math.inf), (-1.0, 1.0), 0.0)
    estimate = model.estimate_theta()
    if decided and sign == 0:
        raise ValueError("a decided verdict has a direction")
    pf = model.p_function()
    start = _accepted_start(pf, estimate, limit)
    if decided:
        direction = sign
        near = _outermost(pf, start, -direction, limit, stop=0.0)
        far = estimate if math.isinf(estimate) else _outermost(pf, start, direction, limit)
        theta = (near, far) if direction > 0 else (far, near)
    else:
        low_start, high_start = min(0.0, start), max(0.0, start)
        theta = (
            estimate if estimate == -math.inf else _outermost(pf, low_start, -1, limit),
            estimate if estimate == math.inf else _outermost(pf, high_start, 1, limit),
        )
    rd_estimate = model.risk_difference(estimate) if estimate_rd is None else estimate_rd
    low, high = model.risk_difference(theta[0]), model.risk_difference(theta[1])
    low, high = min(low, rd_estimate), max(high, rd_estimate)
    if decided:  # rounding must not carry an endpoint across 0
        if direction > 0:
            low = max(low, math.ulp(0.0))
        else:
            high = min(high, -math.ulp(0.0))
    else:
        low, high = min(low, 0.0), max(high, 0.0)
    return ConditionalInterval(theta, (max(-1.0, low), min(1.0, high)), rd_estimate)
