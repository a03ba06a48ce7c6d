"""How often each verdict rule claims a difference, on synthetic probes with clustered questions.

10 questions x 3 repeats per arm, per-question rates with ICC 0.5 (see promptprobe.simulation).
Under the null (same mean rate) a claim is a false alarm; with different means it is power.
"naive" is Newcombe's interval on the pooled samples, ignoring that repeats of one question
are correlated.

    .venv/bin/python benchmarks/verdict_rules.py [--trials 2000]
"""

import argparse
import time

from promptprobe.simulation import simulate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=2000)
    args = parser.parse_args()
    started = time.perf_counter()
    print(f"{args.trials} synthetic A/B probes per row; 10 questions x 3 repeats; ICC 0.5; alpha 0.05")
    print(f"{'design':<9} {'rate A':>6} {'rate B':>6}  {'rule claims':>11}  {'naive claims':>12}")
    for paired in (True, False):
        design = "paired" if paired else "unpaired"
        for a, b in ((0.8, 0.8), (0.6, 0.6), (0.9, 0.7), (0.9, 0.5), (0.95, 0.5)):
            result = simulate(a, b, paired=paired, trials=args.trials)
            kind = "false alarm" if a == b else "power"
            print(
                f"{design:<9} {a:>6.2f} {b:>6.2f}  {result.rate:>10.1%}  {result.naive_rate:>11.1%}  ({kind})"
            )
    print(f"took {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
