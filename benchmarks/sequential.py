"""The sequential rule of `--until-decided`, checked after every round, on simulated probes (the
model of promptprobe.stats.simulation), and the cap `--detect` gives it.

1. The cap: rounds for 80% power at each --detect difference where it is hardest to see
   (50% ± d/2, questions alike), for 5, 12 and 50 cases.
2. The check of issue 16: 80% vs 70% with --detect 10 and 12 cases, ICC 0.2 and 0.5: the share
   decided within the cap (and the right way), samples per arm to a decision; beside it the cap
   it replaced (twice a fixed plan at 85% vs 100%) and the strongest fixed alternative: the
   samples per arm a fixed-n paired test needs for the same 80% power (knowing the rates).
3. False alarms at the cap and far beyond it, under clustered nulls.
4. The mixture: Beta(1/2, 1/2) (shipped) against the uniform one of the reference.

    .venv/bin/python benchmarks/sequential.py [--trials 2000]
"""

import argparse
import math
import time

import numpy as np

from promptprobe.stats.planning import paired_repeats
from promptprobe.stats.sequential import KT, rounds_for_power, simulate_rounds

SEED = 20261130
LONG = 1000  # rounds watched in the long-horizon null rows: the guarantee holds however long one looks


def caps() -> None:
    print("cap in rounds (samples per arm) for 80% power at --detect, hardest case (50% ± d/2, ICC 0):")
    print("| --detect | 5 cases | 12 cases | 50 cases |")
    print("|---:|---:|---:|---:|")
    for detect in (0.05, 0.10, 0.15, 0.20, 0.30):
        cells = []
        for cases in (5, 12, 50):
            cap = rounds_for_power(detect, cases)
            cells.append(f"{cap.rounds} ({cap.rounds * cases})" if cap.rounds else f"> {cap.limit}")
        print(f"| {100 * detect:g} | " + " | ".join(cells) + " |", flush=True)


def issue_check(trials: int) -> None:
    cases, detect = 12, 0.10
    cap = rounds_for_power(detect, cases).rounds
    old = 2 * paired_repeats(0.85, 1.0, cases, 0.5).repeats
    print(
        f"\n80% vs 70%, {cases} cases, --detect 10 (cap {cap} rounds = {cap * cases} samples per arm), "
        f"{trials} runs per row:"
    )
    print(
        "| ICC | decided within the cap | the wrong way | median samples/arm | 90th percentile | "
        f"old cap ({old} rounds) decided | fixed paired test, 80% power (samples/arm) |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for icc in (0.2, 0.5):
        stops, direction = simulate_rounds(0.8, 0.7, cases, icc, max_rounds=cap, trials=trials, seed=SEED)
        samples = np.where(stops > 0, stops, cap) * cases
        right = ((stops > 0) & (direction < 0)).mean()
        wrong = ((stops > 0) & (direction > 0)).mean()
        old_stops, old_direction = simulate_rounds(
            0.8, 0.7, cases, icc, max_rounds=old, trials=trials, seed=SEED
        )
        old_right = ((old_stops > 0) & (old_direction < 0)).mean()
        fixed = paired_repeats(0.8, 0.7, cases, icc).repeats
        print(
            f"| {icc:g} | {right:.1%} | {wrong:.1%} | {np.median(samples):.0f} | "
            f"{np.percentile(samples, 90):.0f} | {old_right:.1%} | {fixed * cases} |",
            flush=True,
        )


def nulls(trials: int) -> None:
    cases = 12
    cap = rounds_for_power(0.10, cases).rounds
    error = 1.96 * math.sqrt(0.05 * 0.95 / trials)
    print(f"\nfalse alarms under the null, {cases} cases (Monte Carlo error at 5%: ±{error:.1%}):")
    print(f"| both arms | ICC | at the cap of --detect 10 ({cap} rounds) | watched for {LONG} rounds |")
    print("|---:|---:|---:|---:|")
    for rate in (0.5, 0.8, 0.95):
        for icc in (0.2, 0.5):
            shares = []
            for horizon in (cap, LONG):
                stops, _ = simulate_rounds(
                    rate, rate, cases, icc, max_rounds=horizon, trials=trials, seed=SEED
                )
                shares.append(float((stops > 0).mean()))
            print(f"| {rate:g} | {icc:g} | {shares[0]:.1%} | {shares[1]:.1%} |", flush=True)


def mixtures(trials: int) -> None:
    cases, icc = 10, 0.5
    cap = rounds_for_power(0.15, cases).rounds
    print(f"\nthe mixture, {cases} cases, ICC {icc}, cap {cap} rounds (--detect 15):")
    columns = ["rates", "mixture", "median samples/arm", "80th percentile", "decided the right way"]
    print("| " + " | ".join([*columns, "fixed paired, 80% power"]) + " |")
    print("|---|---|---:|---:|---:|---:|")
    for p1, p2 in ((0.9, 0.7), (0.9, 0.5)):
        fixed = paired_repeats(p1, p2, cases, icc).repeats
        for a, name in ((KT, "Beta(1/2,1/2) (shipped)"), (1.0, "uniform")):
            stops, direction = simulate_rounds(
                p1, p2, cases, icc, max_rounds=cap, trials=trials, seed=SEED, a=a
            )
            rounds = np.where(stops > 0, stops, cap)
            right = float(((stops > 0) & (direction < 0)).mean())
            print(
                f"| {p1:g} vs {p2:g} | {name} | {np.median(rounds) * cases:.0f} | "
                f"{np.percentile(rounds, 80) * cases:.0f} | {right:.1%} | {fixed * cases} |",
                flush=True,
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=2000)
    args = parser.parse_args()
    started = time.perf_counter()
    rule = "checked after every round, at least 2 rounds"
    print(f"{args.trials} simulated runs per row, seed {SEED}, alpha 0.05, {rule}")
    caps()
    issue_check(args.trials)
    nulls(args.trials)
    mixtures(args.trials)
    print(f"\ntook {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
