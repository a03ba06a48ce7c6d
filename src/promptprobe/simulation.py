"""Synthetic probes with clustered questions, to check the verdict rule's error rates.

Per-question success rates are drawn from Beta(mean·s, (1-mean)·s) with s = 1/ICC - 1, whose
intra-class correlation is ICC; each question is then asked `repeats` times.
"""

from dataclasses import dataclass

import numpy as np

from .compare import Side, compare_sides
from .stats import newcombe


@dataclass
class SimulationResult:
    trials: int
    claims: int  # verdicts other than "indistinguishable"
    naive_claims: int  # a naive pooled Newcombe interval excluding 0

    @property
    def rate(self) -> float:
        return self.claims / self.trials

    @property
    def naive_rate(self) -> float:
        return self.naive_claims / self.trials


def question_rates(rng: np.random.Generator, mean: float, icc: float, questions: int) -> np.ndarray:
    strength = 1 / icc - 1
    return rng.beta(mean * strength, (1 - mean) * strength, size=questions)


def _side(label: str, rng: np.random.Generator, rates: np.ndarray, repeats: int) -> Side:
    successes = rng.binomial(repeats, rates)
    return Side(label, {f"q{i}": (int(k), repeats) for i, k in enumerate(successes)})


def simulate(
    mean_a: float,
    mean_b: float,
    *,
    paired: bool,
    trials: int = 400,
    questions: int = 10,
    repeats: int = 3,
    icc: float = 0.5,
    seed: int = 20261129,
) -> SimulationResult:
    """Run `trials` synthetic A/B probes; count how often each rule claims a difference.

    Paired: both arms ask the same questions (a question's rate shifts by mean_b - mean_a in B).
    Unpaired: each arm draws its own questions.
    """
    rng = np.random.default_rng(seed)
    claims = naive = 0
    for _ in range(trials):
        rates_a = question_rates(rng, mean_a, icc, questions)
        if paired:
            rates_b = np.clip(rates_a + (mean_b - mean_a), 0, 1)
        else:
            rates_b = question_rates(rng, mean_b, icc, questions)
        a = _side("A", rng, rates_a, repeats)
        b = _side("B", rng, rates_b, repeats)
        if not paired:
            b = Side("B", {f"other{i}": v for i, v in enumerate(b.per_case.values())})
        result = compare_sides(a, b, exact=False)
        claims += result["verdict"] != "indistinguishable"
        ka, na = sum(k for k, _ in a.per_case.values()), questions * repeats
        kb, nb = sum(k for k, _ in b.per_case.values()), questions * repeats
        lo, hi = newcombe(ka, na, kb, nb)
        naive += lo > 0 or hi < 0
    return SimulationResult(trials, claims, naive)
