"""The sequential rule of `--until-decided`, checked after every round, on simulated probes
(10 cases, ICC 0.5; the model of promptprobe.stats.simulation).

Prints the false-alarm rate under clustered nulls (both arms at 0.5, 0.8, 0.95) for the
Beta(1/2, 1/2) mixture promptprobe uses and the uniform mixture of the reference, and under
0.9 vs 0.7 and 0.9 vs 0.5 the median and 80th-percentile samples per arm to a decision,
beside the samples per arm the fixed-n paired test needs for the same 80% power.

    .venv/bin/python benchmarks/sequential.py [--trials 2000]
"""

import argparse
import math
import time

import numpy as np

from promptprobe.engine.sequential import default_max_rounds
from promptprobe.stats.planning import paired_repeats
from promptprobe.stats.sequential import KT, simulate_rounds

CASES = 10
ICC = 0.5
SEED = 20261130
LONG = 200  # rounds watched in the long-horizon null rows: the guarantee holds however long one looks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=2000)
    args = parser.parse_args()
    started = time.perf_counter()
    cap, _ = default_max_rounds(CASES, 0.05)
    print(
        f"{args.trials} simulated runs per row, {CASES} cases, ICC {ICC}, alpha 0.05, checked after every "
        f"round, at least 2 rounds, cap {cap} rounds (the default for {CASES} cases)"
    )
    error = 1.96 * math.sqrt(0.05 * 0.95 / args.trials)
    print(f"\nfalse alarms under the null (Monte Carlo error at 5%: ±{error:.1%}):")
    print("| both arms | rounds watched | Beta(1/2,1/2) mixture (shipped) | uniform mixture |")
    print("|---:|---:|---:|---:|")
    for horizon in (cap, LONG):
        for rate in (0.5, 0.8, 0.95):
            shares = []
            for a in (KT, 1.0):
                stops, _ = simulate_rounds(
                    rate, rate, CASES, ICC, max_rounds=horizon, trials=args.trials, seed=SEED, a=a
                )
                shares.append(float((stops > 0).mean()))
            print(f"| {rate:g} | {horizon} | {shares[0]:.1%} | {shares[1]:.1%} |")
    print("\nsamples per arm to a decision (undecided runs count at the cap):")
    print("| rates | mixture | median | 80th percentile | decided (power) | fixed paired, 80% power |")
    print("|---|---|---:|---:|---:|---:|")
    for p1, p2 in ((0.9, 0.7), (0.9, 0.5)):
        fixed = paired_repeats(p1, p2, CASES, ICC).repeats
        for a, name in ((KT, "Beta(1/2,1/2)"), (1.0, "uniform")):
            stops, direction = simulate_rounds(
                p1, p2, CASES, ICC, max_rounds=cap, trials=args.trials, seed=SEED, a=a
            )
            rounds = np.where(stops > 0, stops, cap)
            right = float(((stops > 0) & (direction < 0)).mean())  # B worse: A>B is the right call
            print(
                f"| {p1:g} vs {p2:g} | {name} | {np.median(rounds) * CASES:.0f} | "
                f"{np.percentile(rounds, 80) * CASES:.0f} | {right:.1%} | {fixed * CASES} |"
            )
    print(f"\ntook {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
