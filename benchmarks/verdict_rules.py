"""How the verdict rules behave on simulated probes with clustered questions.

Prints one table over the sweep G (cases) in {5, 10, 20} x repeats in {1, 3, 10} x ICC in
{0, 0.5, 0.8} x rate in {0.5, 0.8, 0.95}, each cell `--trials` simulated probes (fixed seed):
- paired FA: how often the paired verdict (stratified exact conditional test) calls two arms
  different when they are not (both arms ask the same questions, no arm effect);
- unpaired FA: the same for the unpaired verdict (permutation test over cases), each arm
  asking its own questions drawn from the same population;
- coverage: how often the single-arm interval `wilson_eff` contains the true rate.
Then the paired verdict's power at 0.9 vs 0.7 and 0.8 vs 0.6 (10 cases x 3 repeats, ICC 0.5),
with the rule it replaced beside it, and the lowest coverage each interval method reached
over the sweep (the methods tried for `wilson_eff`).

    .venv/bin/python benchmarks/verdict_rules.py [--trials 2000] [--power-trials 10000]
"""

import argparse
import math
import time

import numpy as np

from promptprobe.stats.intervals import anova, clustered_rate, newcombe, t_critical, wilson_crit
from promptprobe.stats.simulation import paired_counts, single_counts, unpaired_counts
from promptprobe.stats.verdict import paired_verdict, unpaired_verdict

CASES = (5, 10, 20)
REPEATS = (1, 3, 10)
ICCS = (0.0, 0.5, 0.8)
RATES = (0.5, 0.8, 0.95)
SEED = 20261130


def false_alarms(rng, cases, repeats, icc, rate, trials, paired):
    draw = paired_counts if paired else unpaired_counts
    a, b = draw(rng, rate, rate, icc, trials, cases, repeats)
    decide = paired_verdict if paired else unpaired_verdict
    claims = 0
    for trial in range(trials):
        side_a = [(int(k), repeats) for k in a[trial]]
        side_b = [(int(k), repeats) for k in b[trial]]
        claims += decide(side_a, side_b).verdict != "indistinguishable"
    return claims / trials


# -- the interval methods tried for wilson_eff ---------------------------------------------


def point_icc(successes, repeats):
    """The rule it replaced: Wilson at n / DEFF (point ICC) with t(G-1)."""
    g, n, k = len(successes), len(successes) * repeats, sum(successes)
    fit = anova(successes, [repeats] * g)
    n_eff = n if fit is None else n / (1 + (fit.m0 - 1) * fit.icc)
    return wilson_crit(k / n * n_eff, n_eff, t_critical(g - 1))


def cases_as_units(successes, repeats):
    """Wilson with n = G (each case one unit) and t(G-1)."""
    g, n, k = len(successes), len(successes) * repeats, sum(successes)
    return wilson_crit(k / n * g, g, t_critical(g - 1))


def icc_upper_95(successes, repeats):
    """Wilson at n / DEFF with the ICC's 95% upper limit and t(G-1)."""
    g, n, k = len(successes), len(successes) * repeats, sum(successes)
    fit = anova(successes, [repeats] * g)
    n_eff = n if fit is None else n / (1 + (fit.m0 - 1) * fit.icc_upper(0.95))
    return wilson_crit(k / n * n_eff, n_eff, t_critical(g - 1))


def shipped(successes, repeats):
    """What `wilson_eff` is: the ICC's 99% upper limit (promptprobe.stats.intervals)."""
    return clustered_rate([int(s) for s in successes], [repeats] * len(successes)).wilson_eff


METHODS = {
    "point ICC, t(G-1) (the old rule)": point_icc,
    "cases as units, t(G-1)": cases_as_units,
    "ICC 95% upper limit, t(G-1)": icc_upper_95,
    "ICC 99% upper limit, t(G-1) (shipped)": shipped,
}


def coverages(rng, cases, repeats, icc, rate, trials):
    counts = single_counts(rng, rate, icc, trials, cases, repeats)
    covered = dict.fromkeys(METHODS, 0)
    for trial in range(trials):
        successes = [int(k) for k in counts[trial]]
        for name, method in METHODS.items():
            lo, hi = method(successes, repeats)
            covered[name] += lo <= rate <= hi
    return {name: hits / trials for name, hits in covered.items()}


def old_paired_rule(a, b, repeats):
    """The rule the paired verdict replaced: Newcombe's interval on the pooled counts excludes 0."""
    n = len(a) * repeats
    lo, hi = newcombe(int(sum(b)), n, int(sum(a)), n)
    return lo > 0 or hi < 0


def power_rows(rng, trials):
    rows = []
    for rate_a, rate_b in ((0.9, 0.7), (0.8, 0.6)):
        a, b = paired_counts(rng, rate_a, rate_b, 0.5, trials, 10, 3)
        new = old = 0
        for trial in range(trials):
            side_a = [(int(k), 3) for k in a[trial]]
            side_b = [(int(k), 3) for k in b[trial]]
            new += paired_verdict(side_a, side_b).verdict != "indistinguishable"
            old += old_paired_rule(a[trial], b[trial], 3)
        rows.append((rate_a, rate_b, new / trials, old / trials))
    return rows


def monte_carlo_error(rate, trials):
    return 1.96 * math.sqrt(max(rate * (1 - rate), 0.05 * 0.95) / trials)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=2000)
    parser.add_argument("--power-trials", type=int, default=10000)
    args = parser.parse_args()
    started = time.perf_counter()
    rng = np.random.default_rng(SEED)
    print(f"{args.trials} simulated probes per cell, seed {SEED}, alpha 0.05, 95% intervals")
    print("| cases | repeats | ICC | rate | paired FA | unpaired FA | wilson_eff coverage |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    worst = {"paired": 0.0, "unpaired": 0.0}
    lowest = dict.fromkeys(METHODS, 1.0)
    for cases in CASES:
        for repeats in REPEATS:
            for icc in ICCS:
                for rate in RATES:
                    paired = false_alarms(rng, cases, repeats, icc, rate, args.trials, True)
                    unpaired = false_alarms(rng, cases, repeats, icc, rate, args.trials, False)
                    cover = coverages(rng, cases, repeats, icc, rate, args.trials)
                    worst["paired"] = max(worst["paired"], paired)
                    worst["unpaired"] = max(worst["unpaired"], unpaired)
                    for name, value in cover.items():
                        lowest[name] = min(lowest[name], value)
                    print(
                        f"| {cases} | {repeats} | {icc:g} | {rate:g} | {paired:.1%} | {unpaired:.1%} "
                        f"| {cover[next(reversed(METHODS))]:.1%} |",
                        flush=True,
                    )
    error = monte_carlo_error(0.05, args.trials)
    print()
    print(
        f"highest false-alarm rate: paired {worst['paired']:.1%}, unpaired {worst['unpaired']:.1%} "
        f"(Monte Carlo error at 5%: ±{error:.1%})"
    )
    print()
    print(f"paired verdict power, 10 cases x 3 repeats, ICC 0.5, {args.power_trials} probes each:")
    print("| rates | stratified exact (shipped) | Newcombe on pooled counts (old) |")
    print("|---|---:|---:|")
    for rate_a, rate_b, new, old in power_rows(rng, args.power_trials):
        print(f"| {rate_a:g} vs {rate_b:g} | {new:.1%} | {old:.1%} |")
    print()
    print("lowest coverage over the sweep, per interval method tried for wilson_eff:")
    print("| method | lowest coverage |")
    print("|---|---:|")
    for name, value in lowest.items():
        print(f"| {name} | {value:.1%} |")
    print(f"\ntook {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
