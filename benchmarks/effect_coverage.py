"""How often the effect interval `probe compare` shows covers the difference it estimates.

The paired effect is the Mantel-Haenszel risk difference over cases with Sato's variance, never
below the cases' own binomial noise (promptprobe.stats.effect). What it estimates is the
within-case difference on these questions: with equal repeats, the mean over the probe's
questions of (rate under B - rate under A). Each simulated probe draws its questions (the model
of promptprobe.stats.simulation, comonotone rates), so the target is computed per probe from the
drawn rates. Beside it: Sato's variance alone (no floor), and Newcombe's interval on the pooled
counts, which targets the same number here (equal repeats) but ignores the pairing.

    .venv/bin/python benchmarks/effect_coverage.py [--trials 2000]
"""

import argparse
import math
import time

import numpy as np

from promptprobe.stats.effect import mantel_haenszel
from promptprobe.stats.intervals import newcombe
from promptprobe.stats.simulation import paired_rates

SEED = 20261130
Z = 1.959963984540054


def sato_only(cases):
    """Sato's interval without the noise floor (what the floor is compared with)."""
    num = weights = p_sum = q_sum = 0.0
    for a, n_a, b, n_b in cases:
        total = n_a + n_b
        num += (b * n_a - a * n_b) / total
        weights += n_a * n_b / total
        p_sum += (n_b**2 * a - n_a**2 * b + n_b * n_a * (n_a - n_b) / 2) / total**2
        q_sum += (b * (n_a - a) + a * (n_b - b)) / (2 * total)
    rd = num / weights
    half = Z * math.sqrt(max(0.0, (rd * p_sum + q_sum) / weights**2))
    return max(-1, rd - half), min(1, rd + half)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=2000)
    args = parser.parse_args()
    started = time.perf_counter()
    rng = np.random.default_rng(SEED)
    target = "mean per-question B - A"
    print(f"{args.trials} simulated probes per cell, seed {SEED}, 95% intervals, target: {target}")
    print("| cases | repeats | ICC | A vs B | Sato with the noise floor | Sato alone | Newcombe pooled |")
    print("|---:|---:|---:|---|---:|---:|---:|")
    lowest = {"shipped": 1.0, "sato": 1.0, "newcombe": 1.0}
    for cases in (5, 10, 20):
        for repeats in (1, 3, 10):
            for icc in (0.0, 0.5):
                for p1, p2 in ((0.5, 0.6), (0.8, 0.9), (0.9, 0.97)):
                    rates_a, rates_b = paired_rates(rng, p1, p2, icc, (args.trials, cases))
                    a = rng.binomial(repeats, rates_a)
                    b = rng.binomial(repeats, rates_b)
                    target = (rates_b - rates_a).mean(axis=1)
                    hits = {"shipped": 0, "sato": 0, "newcombe": 0}
                    for t in range(args.trials):
                        table = [(int(x), repeats, int(y), repeats) for x, y in zip(a[t], b[t], strict=True)]
                        lo, hi = mantel_haenszel(table).interval
                        hits["shipped"] += lo <= target[t] <= hi
                        lo, hi = sato_only(table)
                        hits["sato"] += lo <= target[t] <= hi
                        n = cases * repeats
                        lo, hi = newcombe(int(b[t].sum()), n, int(a[t].sum()), n)
                        hits["newcombe"] += lo <= target[t] <= hi
                    shares = {k: v / args.trials for k, v in hits.items()}
                    for key in lowest:
                        lowest[key] = min(lowest[key], shares[key])
                    print(
                        f"| {cases} | {repeats} | {icc:g} | {p1:g} vs {p2:g} | {shares['shipped']:.1%} | "
                        f"{shares['sato']:.1%} | {shares['newcombe']:.1%} |",
                        flush=True,
                    )
    error = 1.96 * math.sqrt(0.05 * 0.95 / args.trials)
    print(f"\nlowest coverage over the sweep (Monte Carlo error at 95%: ±{error:.1%}):")
    print("| interval | lowest coverage |\n|---|---:|")
    for name, label in (
        ("shipped", "Sato with the noise floor"),
        ("sato", "Sato alone"),
        ("newcombe", "Newcombe on pooled counts"),
    ):
        print(f"| {label} | {lowest[name]:.1%} |")
    print(f"\ntook {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
