"""Synthetic probes with clustered questions: the model every simulation here shares.

Each question has its own success rate, drawn from Beta(mean·s, (1-mean)·s) with s = 1/ICC - 1,
whose intra-class correlation is ICC (ICC 0: every question has the mean rate). Each question
is asked `repeats` times per arm.
- Paired probe: both arms ask the same questions; a question's rate under B is the same
  quantile of B's Beta distribution as its rate under A is of A's (hard questions stay hard),
  so each arm has exactly its stated mean and ICC.
- Unpaired probe: each arm draws its own questions.
"""

from typing import Any


def _beta_parameters(mean: float, icc: float) -> tuple[float, float] | None:
    if icc <= 0 or mean in (0.0, 1.0):
        return None  # every question has the mean rate
    strength = 1 / icc - 1
    return mean * strength, (1 - mean) * strength


def question_rates(rng: Any, mean: float, icc: float, shape: tuple[int, ...]) -> Any:
    import numpy as np

    parameters = _beta_parameters(mean, icc)
    if parameters is None:
        return np.full(shape, mean)
    return np.nan_to_num(rng.beta(*parameters, size=shape), nan=mean)


def _rates_at(quantiles: Any, mean: float, icc: float) -> Any:
    import numpy as np
    from scipy.special import betaincinv  # the Beta quantile function; far lighter than scipy.stats

    parameters = _beta_parameters(mean, icc)
    if parameters is None:
        return np.full(quantiles.shape, mean)
    return np.nan_to_num(betaincinv(*parameters, quantiles), nan=mean)


def paired_rates(
    rng: Any, mean_a: float, mean_b: float, icc: float, shape: tuple[int, ...]
) -> tuple[Any, Any]:
    """Per-question rates of A and B on the same questions (comonotone: one quantile each)."""
    quantiles = rng.random(shape)
    rates_a = _rates_at(quantiles, mean_a, icc)
    rates_b = rates_a if mean_b == mean_a else _rates_at(quantiles, mean_b, icc)
    return rates_a, rates_b


def paired_counts(
    rng: Any, mean_a: float, mean_b: float, icc: float, trials: int, cases: int, repeats: int
) -> tuple[Any, Any]:
    """Successes (trials x cases) for A and for B asked the same questions."""
    rates_a, rates_b = paired_rates(rng, mean_a, mean_b, icc, (trials, cases))
    return rng.binomial(repeats, rates_a), rng.binomial(repeats, rates_b)


def unpaired_counts(
    rng: Any, mean_a: float, mean_b: float, icc: float, trials: int, cases: int, repeats: int
) -> tuple[Any, Any]:
    """Successes (trials x cases) for A and for B, each asking its own questions."""
    rates_a = question_rates(rng, mean_a, icc, (trials, cases))
    rates_b = question_rates(rng, mean_b, icc, (trials, cases))
    return rng.binomial(repeats, rates_a), rng.binomial(repeats, rates_b)


def single_counts(rng: Any, mean: float, icc: float, trials: int, cases: int, repeats: int) -> Any:
    """Successes (trials x cases) of one arm."""
    return rng.binomial(repeats, question_rates(rng, mean, icc, (trials, cases)))
