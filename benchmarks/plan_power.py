"""Do `probe plan`'s figures hold? Each plan is checked against a fresh simulation (another seed,
numpy's own binomial draws, no common random numbers) that calls the verdict functions
themselves (promptprobe.stats.verdict: the stratified exact test, the case permutation test with
its 20,000 permutations) on probes of the planned size. Achieved power should be within 2 points
of the stated one, or above it; a design said to be unable to reach alpha should never decide.

The unpaired plan issue 24 found short (`--p1 0.85 --p2 1 --cases 10 --icc 0.5`: 142 repeats
stated at 80.3%, 78.3% achieved) is checked with `--deep` fresh probes (20,000), and a plan
reaches its target when its achieved power's 95% Monte Carlo interval reaches 80%.

    .venv/bin/python benchmarks/plan_power.py [--trials 2000] [--deep 20000] [--quick]
"""

import argparse
import math
import time

import numpy as np

from promptprobe.planning import plan_sample_size
from promptprobe.stats.simulation import paired_counts, unpaired_counts
from promptprobe.stats.tests import decides
from promptprobe.stats.verdict import paired_verdict, unpaired_test

SEED = 77  # not the planner's seed
UNLIMITED = 2000  # repeats standing in for "unlimited repeats" (the questions' true rates)


def fresh_paired(p1, p2, cases, repeats, icc, trials, rng):
    a, b = paired_counts(rng, p1, p2, icc, trials, cases, repeats)
    right = "B>A" if p2 > p1 else "A>B"
    hits = 0
    for t in range(trials):
        verdict = paired_verdict([(int(k), repeats) for k in a[t]], [(int(k), repeats) for k in b[t]]).verdict
        hits += verdict == right
    return hits / trials


def fresh_unpaired(p1, p2, cases, repeats, icc, trials, rng):
    a, b = unpaired_counts(rng, p1, p2, icc, trials, cases, repeats)
    right = "B>A" if p2 > p1 else "A>B"
    hits = 0
    for t in range(trials):
        # The verdict's own test (unpaired_verdict without the interval beside it).
        test = unpaired_test([(int(k), repeats) for k in a[t]], [(int(k), repeats) for k in b[t]])
        decided = decides(test.p_at(0.0), 0.05) and test.estimate != 0
        hits += decided and ("B>A" if test.estimate > 0 else "A>B") == right
    return hits / trials


def row(name, stated, achieved, trials):
    error = 1.96 * math.sqrt(max(achieved * (1 - achieved), 0.01) / trials)
    holds = achieved >= stated - 0.02 - error if stated is not None else achieved == 0
    reaches = "-" if stated is None else ("yes" if achieved + error >= 0.8 else "NO")
    shown = "-" if stated is None else f"{stated:.1%}"
    print(
        f"| {name} | {trials:,} | {shown} | {achieved:.1%} ± {error:.1%} | {'yes' if holds else 'NO'} "
        f"| {reaches} |",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=2000)
    parser.add_argument("--deep", type=int, default=20000)
    parser.add_argument("--quick", action="store_true", help="one plan of each kind (the test suite's run)")
    args = parser.parse_args()
    started = time.perf_counter()
    rng = np.random.default_rng(SEED)
    trials = args.trials
    print(f"{trials} fresh simulated probes per row (seed {SEED}), alpha 0.05, target power 80%")
    print(
        "| plan | fresh probes | stated power | achieved (95% MC) | holds (within 2 points) | reaches 80% |"
    )
    print("|---|---:|---:|---:|---|---|")

    for p1, p2 in ((0.9, 0.7), (0.85, 1.0), (0.0, 1.0))[: 1 if args.quick else None]:
        plan = plan_sample_size(p1, p2).data
        n = plan["n_per_arm"]
        achieved = fresh_paired(p1, p2, 1, n, 0.0, trials, rng)  # one question asked n times per arm
        row(f"`--p1 {p1:g} --p2 {p2:g}`: {n} per arm", plan["n_per_arm_power"], achieved, trials)

    designs = ((0.85, 1.0, 10, 0.5), (0.9, 0.7, 12, 0.2), (0.9, 0.7, 10, 1.0), (0.9, 0.5, 3, 0.1))
    for p1, p2, cases, icc in designs[1:2] if args.quick else designs:  # quick: not the slowest plan
        plan = plan_sample_size(p1, p2, cases=cases, icc=icc).data
        flags = f"`--p1 {p1:g} --p2 {p2:g} --cases {cases} --icc {icc:g}`"
        m = plan["repeats"]
        row(
            f"{flags} paired: {m} repeats",
            plan["paired_power"],
            fresh_paired(p1, p2, cases, m, icc, trials, rng),
            trials,
        )
        if not plan["unpaired_reachable"]:
            achieved = fresh_unpaired(p1, p2, cases, 50, icc, trials, rng)
            row(f"{flags} unpaired: cannot reach alpha (50 repeats tried)", None, achieved, trials)
        if plan["repeats_unpaired"]:
            m = plan["repeats_unpaired"]
            checks = args.deep if (p1, p2, cases, icc) == (0.85, 1.0, 10, 0.5) else trials
            achieved = fresh_unpaired(p1, p2, cases, m, icc, checks, rng)
            row(f"{flags} unpaired: {m} repeats", plan["unpaired_power"], achieved, checks)
        if plan["unpaired_cases_needed"]:
            g = plan["unpaired_cases_needed"]
            achieved = fresh_unpaired(p1, p2, g, UNLIMITED, icc, min(trials, 1000), rng)
            row(
                f"{flags} unpaired: {g} cases a side (unlimited repeats)",
                plan["unpaired_cases_needed_power"],
                achieved,
                min(trials, 1000),
            )
    print(f"\ntook {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
