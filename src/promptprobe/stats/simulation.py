"""Synthetic probes with clustered questions: the model every simulation here shares.

Each question has its own success rate, drawn from Beta(mean·s, (1-mean)·s) with s = 1/ICC - 1,
whose intra-class correlation is ICC (ICC 0: every question has the mean rate; ICC 1: a question
always succeeds or always fails, with probability mean and 1 - mean). Each question is asked
`repeats` times per arm.
- Paired probe: both arms ask the same questions; a question's rate under B has the same rank
  among B's draws as its rate under A among A's (hard questions stay hard: the comonotone
  coupling, by ranks), so each arm has exactly its stated mean and ICC.
- Unpaired probe: each arm draws its own questions.
"""

from typing import Any

# An ICC this close to 0 is 0 (a Beta of strength 1e16 costs minutes and differs from the mean by
# nothing), and this close to 1 is 1.
ICC_EDGE = 1e-9


def _beta_parameters(mean: float, icc: float) -> tuple[float, float] | None:
    if icc <= ICC_EDGE or mean in (0.0, 1.0):
        return None  # every question has the mean rate
    strength = 1 / icc - 1
    return mean * strength, (1 - mean) * strength


def question_rates(rng: Any, mean: float, icc: float, shape: tuple[int, ...]) -> Any:
    import numpy as np

    if icc >= 1 - ICC_EDGE:
        return (rng.random(shape) < mean).astype(float)
    parameters = _beta_parameters(mean, icc)
    if parameters is None:
        return np.full(shape, mean)
    return np.nan_to_num(rng.beta(*parameters, size=shape), nan=mean)


def paired_rates(
    rng: Any, mean_a: float, mean_b: float, icc: float, shape: tuple[int, ...]
) -> tuple[Any, Any]:
    """Per-question rates of A and B on the same questions, comonotone: each arm's rates are
    drawn from its own distribution and paired by rank (the question that is the k-th hardest of
    A's draws is the k-th hardest of B's). Each arm's distribution is exactly its own, and no
    quantile function (no scipy import) is needed."""
    import numpy as np

    rates_a = question_rates(rng, mean_a, icc, shape)
    if mean_b == mean_a:
        return rates_a, rates_a
    rates_b = np.sort(question_rates(rng, mean_b, icc, shape).ravel())
    flat_a = rates_a.ravel()
    # Ties (ICC 1: every rate is 0 or 1) are broken at random, so that no position is favoured.
    order = np.lexsort((rng.random(flat_a.size), flat_a))
    paired = np.empty_like(rates_b)
    paired[order] = rates_b
    return rates_a, paired.reshape(shape)


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


def crn_counts(seed: int, stream: int, rates: Any, repeats: int) -> Any:
    """Successes in `repeats` tries at each of `rates`, with common random numbers: the j-th try
    of a question always uses the same uniform, whatever `repeats` is, so that power estimated at
    several repeat counts moves smoothly (drawn in blocks so memory stays small)."""
    import numpy as np

    counts = np.zeros(rates.shape, dtype=np.int64)
    block = 32
    for start in range(0, repeats, block):
        size = min(block, repeats - start)
        uniforms = np.random.default_rng([seed, stream, start // block]).random(rates.shape + (block,))
        counts += (uniforms[..., :size] < rates[..., None]).sum(axis=-1)
    return counts


def single_counts(rng: Any, mean: float, icc: float, trials: int, cases: int, repeats: int) -> Any:
    """Successes (trials x cases) of one arm."""
    return rng.binomial(repeats, question_rates(rng, mean, icc, (trials, cases)))
