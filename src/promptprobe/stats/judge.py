"""How far to trust a model's grades: agreement, accuracy against hand labels, corrected rates.

- Agreement of repeated judgments of one output: the share of outputs whose judgments all
  agree (Wilson interval) and Fleiss' kappa (Fleiss 1971) over the outputs judged at least
  twice, with a percentile bootstrap interval over outputs (seeded, so a report is stable).
  A failed judgment is a category of its own: a judge that sometimes cannot answer is less
  reliable, not more.
- Accuracy against hand labels: sensitivity = P(judged pass | labelled pass), specificity =
  P(judged fail | labelled fail), each with the exact Clopper-Pearson interval. A failed
  judgment counts as judged fail, as it does on the metric itself.
- Bias between arms: Fisher's exact test of each arm's sensitivity against the other's, and
  of specificity, Holm-adjusted over the two; a warning when either decides.
- Rogan-Gladen (1978) correction: pi = (p + Sp - 1) / (Se + Sp - 1), clipped to [0, 1], with
  Lang and Reiczigel's (2014) interval: crit²/2 successes and failures added to the judged
  count (at the arm's effective n, so clustering is carried), to Se's and to Sp's (Agresti-
  Coull), then the delta-method variance [V(p) + pi² V(Se) + (1 - pi)² V(Sp)] / J². Where the
  labels cannot rule out Se + Sp <= 1 (a judge no better than chance) the interval is [0, 1].
- The corrected effect between arms: the judged effect and its interval (from the verdict's
  own test, at 1 - alpha/2) divided by Youden's J = Se + Sp - 1, whose Agresti-Coull Wald
  interval takes the other alpha/2. Dividing by a positive J keeps each bound's sign, so the
  corrected interval excludes 0 exactly when the judged one does. It assumes the judge errs
  alike in both arms, which the bias test checks.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from .intervals import wilson, z_critical

BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 20261202


@dataclass(frozen=True)
class Estimate:
    """A figure and its interval; both None when the data cannot give it (with the reason)."""

    estimate: float | None
    interval: tuple[float, float] | None
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "estimate": self.estimate,
            "interval": list(self.interval) if self.interval is not None else None,
        }
        if self.reason:
            out["reason"] = self.reason
        return out


@lru_cache(maxsize=4096)
def clopper_pearson(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Exact (Clopper-Pearson) interval for k successes of n; [0, 1] when n is 0."""
    if not (0 <= k <= n):
        raise ValueError(f"counts must satisfy 0 <= k <= n, got k={k}, n={n}")
    if n == 0:
        return (0.0, 1.0)
    from scipy.special import betaincinv  # the beta quantile, without importing scipy.stats

    tail = (1 - confidence) / 2
    low = 0.0 if k == 0 else float(betaincinv(k, n - k + 1, tail))
    high = 1.0 if k == n else float(betaincinv(k + 1, n - k, 1 - tail))
    return (low, high)


# --- agreement of repeated judgments -------------------------------------------------------

Judgment = bool | None  # True pass, False fail, None a failed or unparseable judgment
_CATEGORIES = (True, False, None)


@dataclass(frozen=True)
class Agreement:
    """How often repeated judgments of one output agree."""

    outputs: int  # outputs judged at least twice
    unanimous: int
    share: Estimate
    kappa: Estimate
    split: list[int] = field(default_factory=list)  # indices (into the input) of split outputs

    def to_dict(self) -> dict[str, Any]:
        return {"outputs": self.outputs, "unanimous": self.unanimous, "share": self.share.to_dict(),
                "kappa": self.kappa.to_dict(), "split": len(self.split)}


def _category_counts(judgments: Sequence[Sequence[Judgment]]) -> list[list[int]]:
    return [[sum(1 for j in row if j is c) for c in _CATEGORIES] for row in judgments]


def fleiss_kappa(counts: Sequence[Sequence[int]]) -> float | None:
    """Fleiss' kappa from per-output category counts (rows may have different totals >= 2).

    With unequal raters per output the per-output agreement is averaged as Fleiss defines it
    for each row, and chance agreement uses the pooled category shares. None when every
    judgment fell in one category (chance agreement is 1: kappa is undefined).
    """
    rows = [row for row in counts if sum(row) >= 2]
    if not rows:
        return None
    total = sum(sum(row) for row in rows)
    shares = [sum(row[c] for row in rows) / total for c in range(len(rows[0]))]
    chance = sum(s * s for s in shares)
    if chance >= 1 - 1e-12:
        return None
    observed = sum(
        (sum(x * x for x in row) - sum(row)) / (sum(row) * (sum(row) - 1)) for row in rows
    ) / len(rows)
    return (observed - chance) / (1 - chance)


def _bootstrap_kappa(counts: list[list[int]], confidence: float) -> tuple[float, float] | None:
    import numpy as np

    table = np.asarray(counts, dtype=float)
    m = table.sum(axis=1)
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    picks = rng.integers(0, len(table), size=(BOOTSTRAP_RESAMPLES, len(table)))
    per_row = ((table**2).sum(axis=1) - m) / (m * (m - 1))
    observed = per_row[picks].mean(axis=1)
    totals = table[picks].sum(axis=1)  # resamples x categories
    shares = totals / totals.sum(axis=1, keepdims=True)
    chance = (shares**2).sum(axis=1)
    defined = chance < 1 - 1e-12
    if defined.sum() < BOOTSTRAP_RESAMPLES / 2:
        return None
    kappas = (observed[defined] - chance[defined]) / (1 - chance[defined])
    tail = (1 - confidence) / 2
    low, high = np.quantile(kappas, [tail, 1 - tail])
    return (float(max(-1.0, low)), float(min(1.0, high)))


def agreement(judgments: Sequence[Sequence[Judgment]], confidence: float = 0.95) -> Agreement:
    """Agreement of repeated judgments; outputs judged fewer than twice are left out."""
    judged = [(i, list(row)) for i, row in enumerate(judgments) if len(row) >= 2]
    counts = _category_counts([row for _, row in judged])
    split = [i for (i, _), row in zip(judged, counts, strict=True) if max(row) < sum(row)]
    unanimous = len(judged) - len(split)
    if not judged:
        reason = "no output was judged twice (repeats = 1)"
        return Agreement(0, 0, Estimate(None, None, reason), Estimate(None, None, reason), [])
    share = Estimate(unanimous / len(judged), wilson(unanimous, len(judged), confidence))
    kappa_value = fleiss_kappa(counts)
    if kappa_value is None:
        kappa = Estimate(None, None, "every judgment gave the same label: kappa is undefined")
    elif len(judged) < 2:
        kappa = Estimate(kappa_value, None, "one output judged twice: no interval")
    else:
        kappa = Estimate(kappa_value, _bootstrap_kappa(counts, confidence))
    return Agreement(len(judged), unanimous, share, kappa, split)


# --- accuracy against hand labels ----------------------------------------------------------


@dataclass(frozen=True)
class Accuracy:
    """The judge's sensitivity and specificity against hand labels."""

    n: int
    true_pass: int  # labelled pass, judged pass
    labelled_pass: int
    true_fail: int  # labelled fail, judged fail
    labelled_fail: int
    sensitivity: Estimate
    specificity: Estimate

    def to_dict(self) -> dict[str, Any]:
        return {"n": self.n, "labelled_pass": self.labelled_pass, "labelled_fail": self.labelled_fail,
                "sensitivity": self.sensitivity.to_dict(), "specificity": self.specificity.to_dict()}


def _share(k: int, n: int, confidence: float, what: str) -> Estimate:
    if n == 0:
        return Estimate(None, None, f"no output labelled {what}")
    return Estimate(k / n, clopper_pearson(k, n, confidence))


def accuracy(pairs: Sequence[tuple[Judgment, bool]], confidence: float = 0.95) -> Accuracy:
    """Sensitivity and specificity from (judged outcome, hand label) pairs."""
    labelled_pass = sum(1 for _, label in pairs if label)
    true_pass = sum(1 for judged, label in pairs if label and judged is True)
    labelled_fail = len(pairs) - labelled_pass
    true_fail = sum(1 for judged, label in pairs if not label and judged is not True)
    return Accuracy(len(pairs), true_pass, labelled_pass, true_fail, labelled_fail,
                    _share(true_pass, labelled_pass, confidence, "pass"),
                    _share(true_fail, labelled_fail, confidence, "fail"))


@dataclass(frozen=True)
class Bias:
    """Whether the judge's accuracy differs between two arms (a grader that prefers one)."""

    p_sensitivity: float | None
    p_specificity: float | None
    p_adjusted: float | None
    biased: bool

    def to_dict(self) -> dict[str, Any]:
        return {"p_sensitivity": self.p_sensitivity, "p_specificity": self.p_specificity,
                "p_adjusted": self.p_adjusted, "biased": self.biased}


def _fisher(k1: int, n1: int, k2: int, n2: int) -> float | None:
    if n1 == 0 or n2 == 0:
        return None
    from scipy.stats import fisher_exact

    return float(fisher_exact([[k1, n1 - k1], [k2, n2 - k2]]).pvalue)


def bias(a: Accuracy, b: Accuracy, alpha: float = 0.05) -> Bias:
    """Fisher's exact test of sensitivity and of specificity between arms, Holm over the two."""
    p_se = _fisher(a.true_pass, a.labelled_pass, b.true_pass, b.labelled_pass)
    p_sp = _fisher(a.true_fail, a.labelled_fail, b.true_fail, b.labelled_fail)
    tested = [p for p in (p_se, p_sp) if p is not None]
    if not tested:
        return Bias(p_se, p_sp, None, False)
    adjusted = min(1.0, min(tested) * len(tested))  # Holm's first step decides the family
    return Bias(p_se, p_sp, adjusted, adjusted <= alpha * (1 + 1e-9))


# --- correcting for the judge's errors -----------------------------------------------------


def rogan_gladen(rate: float, sensitivity: float, specificity: float) -> float | None:
    """The true pass rate implied by a judged rate, clipped to [0, 1]; None if J <= 0."""
    youden = sensitivity + specificity - 1
    if youden <= 0:
        return None
    return min(1.0, max(0.0, (rate + specificity - 1) / youden))


def _adjusted(k: float, n: float, crit: float) -> tuple[float, float]:
    """Agresti-Coull: add crit²/2 successes and failures; returns (share, adjusted n)."""
    n_adj = n + crit**2
    return (k + crit**2 / 2) / n_adj, n_adj


def corrected_rate(rate: float | None, n_eff: float, acc: Accuracy, confidence: float = 0.95) -> Estimate:
    """Rogan-Gladen rate for a judged rate, with Lang and Reiczigel's (2014) interval.

    `n_eff` is the judged rate's effective sample size (n / DEFF when repeats of a case are not
    independent). Every count gets crit²/2 added successes and failures (Agresti-Coull), and the
    delta-method variance of Rogan and Gladen carries the judged rate's, Se's and Sp's.
    """
    if rate is None or n_eff <= 0:
        return Estimate(None, None, "no sample judged")
    se, sp = acc.sensitivity, acc.specificity
    if se.estimate is None or sp.estimate is None:
        return Estimate(None, None, "labels of both kinds (pass and fail) are needed to correct")
    point = rogan_gladen(rate, se.estimate, sp.estimate)
    if point is None:
        return Estimate(None, None, "the judge does no better than chance on the labels (Se + Sp <= 1)")
    crit = z_critical(confidence)
    ap, n_ap = _adjusted(rate * n_eff, n_eff, crit)
    se_a, n_se = _adjusted(acc.true_pass, acc.labelled_pass, crit)
    sp_a, n_sp = _adjusted(acc.true_fail, acc.labelled_fail, crit)
    youden = se_a + sp_a - 1
    if youden <= 0:
        return Estimate(point, (0.0, 1.0), "too few labels to rule out a judge no better than chance")
    centre = (ap + sp_a - 1) / youden
    variance = (ap * (1 - ap) / n_ap + centre**2 * se_a * (1 - se_a) / n_se
                + (1 - centre) ** 2 * sp_a * (1 - sp_a) / n_sp) / youden**2
    half = crit * math.sqrt(variance)
    low, high = max(0.0, centre - half), min(1.0, centre + half)
    # The interval holds its point estimate; it is never a single point.
    return Estimate(point, (min(low, point), max(high, point)))


def youden_interval(acc: Accuracy, confidence: float) -> tuple[float, float] | None:
    """Youden's J = Se + Sp - 1 with an Agresti-Coull-adjusted Wald interval; None without labels."""
    if acc.labelled_pass == 0 or acc.labelled_fail == 0:
        return None
    crit = z_critical(confidence)
    se_a, n_se = _adjusted(acc.true_pass, acc.labelled_pass, crit)
    sp_a, n_sp = _adjusted(acc.true_fail, acc.labelled_fail, crit)
    half = crit * math.sqrt(se_a * (1 - se_a) / n_se + sp_a * (1 - sp_a) / n_sp)
    centre = se_a + sp_a - 1
    return (max(-1.0, centre - half), min(1.0, centre + half))


def corrected_effect(effect: float, interval: tuple[float, float], acc: Accuracy,
                     confidence: float = 0.95) -> Estimate:
    """A judged effect (B - A) and its interval at 1 - alpha/2, divided by Youden's J.

    `interval` must come from the comparison's own test at `effect_level(confidence)`; the
    other half of alpha goes to J's interval. Dividing by a positive J keeps the sign of each
    bound, so the corrected interval excludes 0 exactly when the judged one does.
    """
    se, sp = acc.sensitivity, acc.specificity
    if se.estimate is None or sp.estimate is None:
        return Estimate(None, None, "labels of both kinds (pass and fail) are needed to correct")
    youden = se.estimate + sp.estimate - 1
    if youden <= 0:
        return Estimate(None, None, "the judge does no better than chance on the labels (Se + Sp <= 1)")
    j_low, j_high = youden_interval(acc, effect_level(confidence))
    point = max(-1.0, min(1.0, effect / youden))
    low, high = interval
    if j_low <= 0:
        reason = "too few labels to rule out a judge no better than chance: the size is unbounded"
        bounds = (low / j_high if low > 0 else -1.0, high / j_high if high < 0 else 1.0)
    else:
        reason = None
        bounds = (low / (j_high if low > 0 else j_low), high / (j_low if high > 0 else j_high))
    bounds = (max(-1.0, bounds[0]), min(1.0, bounds[1]))
    return Estimate(point, (min(bounds[0], point), max(bounds[1], point)), reason)


def effect_level(confidence: float = 0.95) -> float:
    """The level the judged effect's interval must have for `corrected_effect` (half of alpha)."""
    return 1 - (1 - confidence) / 2
