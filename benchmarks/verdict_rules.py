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

Then arms that asked their cases a different number of times (1 vs 10 and 1 vs 20 per case):
- unpaired: false alarms of the shipped test (the larger p of the beta-binomial test over cases
  and the case permutation), of each alone (the permutation is the rule it replaced there), of
  the beta-binomial test with every nuisance at its point estimate (a plain parametric
  bootstrap), and of a Welch t over cases with a binomial noise floor; then power against the
  beta-binomial test with the true ICC known (the ceiling);
- paired: false alarms of the "would it generalise" line (likely: at least 5 cases moved and
  p <= alpha) with the conditional sign test (shipped) and the plain sign test it replaced, and of
  the paired verdict itself;
- interval/verdict disagreements of the unpaired verdict over random designs (equal and unequal
  repeats): the interval is the test inverted, so there must be none.

    .venv/bin/python benchmarks/verdict_rules.py [--trials 2000] [--power-trials 10000]
        [--unequal-trials 2000] [--designs 300] [--quick]
"""

import argparse
import math
import time

import numpy as np

from promptprobe.stats.betabinomial import BetaBinomialTest, _fit_mu, _tail_p, fit_null
from promptprobe.stats.betabinomial import _design as bb_design
from promptprobe.stats.distributions import betainc
from promptprobe.stats.effect import mean_of_cases
from promptprobe.stats.generalisation import ConditionalSignTest
from promptprobe.stats.intervals import anova, clustered_rate, newcombe, t_critical, wilson_crit
from promptprobe.stats.simulation import (
    paired_counts,
    paired_rates,
    question_rates,
    single_counts,
    unpaired_counts,
)
from promptprobe.stats.tests import case_permutation, decides, sign_test
from promptprobe.stats.verdict import generalisation, paired_verdict, unpaired_test, unpaired_verdict

CASES = (5, 10, 20)
REPEATS = (1, 3, 10)
ICCS = (0.0, 0.5, 0.8)
RATES = (0.5, 0.8, 0.95)
SEED = 20261130


def false_alarms(rng, cases, repeats, icc, rate, trials, paired):
    draw = paired_counts if paired else unpaired_counts
    a, b = draw(rng, rate, rate, icc, trials, cases, repeats)
    claims = 0
    for trial in range(trials):
        side_a = [(int(k), repeats) for k in a[trial]]
        side_b = [(int(k), repeats) for k in b[trial]]
        if paired:
            claims += paired_verdict(side_a, side_b).verdict != "indistinguishable"
        else:  # the verdict's own test (its interval is not needed to count false alarms)
            test = unpaired_test(side_a, side_b)
            claims += test.estimate != 0 and decides(test.p_at(0.0), 0.05)
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


# -- arms with unequal repeats ---------------------------------------------------------------

# (cases, repeats) of A, then of B
UNPAIRED_DESIGNS = ((8, 1, 8, 20), (20, 1, 5, 10), (20, 1, 5, 20), (5, 1, 5, 20), (10, 1, 10, 10))
# cases, A's repeats, B's repeats
PAIRED_DESIGNS = ((12, 1, 10), (10, 1, 20), (20, 1, 10), (5, 1, 20))
UNEQUAL_ICCS = (0.0, 0.2, 0.5, 0.8)
UNEQUAL_RATES = (0.5, 0.8, 0.9, 0.95)  # paired; unpaired drops 0.9 (its test costs more)
UNPAIRED_RATES = (0.5, 0.8, 0.95)
UNPAIRED_POWER = (
    (8, 1, 8, 20, 0.2, 0.7, 0.9),
    (20, 1, 5, 10, 0.2, 0.6, 0.85),
    (10, 1, 10, 20, 0.5, 0.5, 0.8),
    (10, 1, 10, 10, 0.0, 0.8, 0.95),
    (5, 1, 5, 20, 0.5, 0.3, 0.8),
)


def welch_p(a, b) -> float:
    """Two-sided p of the Welch t over cases with the binomial noise floor (the effect's old interval)."""
    effect = mean_of_cases(a, b)
    rates_a = [k / n for k, n in a]
    rates_b = [k / n for k, n in b]

    def part(rates, counts):
        g = len(rates)
        mean = sum(rates) / g
        spread = sum((r - mean) ** 2 for r in rates) / (g - 1) if g > 1 else 0.0
        noise = sum(((k + 1) / (n + 2)) * (1 - (k + 1) / (n + 2)) / n for k, n in counts) / g
        return max(spread, noise) / g, g

    var_a, g_a = part(rates_a, a)
    var_b, g_b = part(rates_b, b)
    se = math.sqrt(var_a + var_b)
    if se == 0:
        return 1.0
    df = (var_a + var_b) ** 2 / (var_a**2 / max(1, g_a - 1) + var_b**2 / max(1, g_b - 1))
    t = effect.estimate / se
    return betainc(df / 2, 0.5, df / (df + t * t))


def naive_p(a, b) -> float:
    """The beta-binomial test with every nuisance at its point estimate (ICC and mean at their
    maximum likelihood), what a plain parametric bootstrap would do."""
    design = bb_design(a, b)
    if (design.k == 0).all() or (design.k == design.n).all():
        return 1.0
    mu, rho = fit_null(design, 0.0, 0.0)
    return _tail_p(design, mu, mu, rho)


def known_icc_p(a, b, icc) -> float:
    """The ceiling: the beta-binomial test with the ICC known (mean at its maximum likelihood)."""
    design = bb_design(a, b)
    if (design.k == 0).all() or (design.k == design.n).all():
        return 1.0
    mu, _ = _fit_mu(design, 0.0, np.array([icc]))
    return _tail_p(design, float(mu[0]), float(mu[0]), icc)


def draw_unpaired(rng, design, icc, rate_a, rate_b, trials):
    g_a, n_a, g_b, n_b = design
    k_a = rng.binomial(n_a, question_rates(rng, rate_a, icc, (trials, g_a)))
    k_b = rng.binomial(n_b, question_rates(rng, rate_b, icc, (trials, g_b)))
    for t in range(trials):
        yield [(int(k), n_a) for k in k_a[t]], [(int(k), n_b) for k in k_b[t]]


def unequal_unpaired_rows(rng, trials):
    print(f"\nunpaired, unequal repeats: false alarms, {trials} probes a cell (both arms at the same rate)")
    print(
        "| A (cases x repeats) | B | ICC | rate | shipped: beta-binomial and case permutation | "
        "case permutation alone (old) | beta-binomial alone | beta-binomial at its point estimates | "
        "Welch t over cases |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    names = ("shipped", "permutation", "model", "naive", "welch")
    worst = dict.fromkeys(names, 0.0)
    for design in UNPAIRED_DESIGNS:
        for icc in UNEQUAL_ICCS:
            for rate in UNPAIRED_RATES:
                hits = np.zeros(5)
                for index, (a, b) in enumerate(draw_unpaired(rng, design, icc, rate, rate, trials)):
                    model = BetaBinomialTest(a, b).p_value
                    old = case_permutation([k / n for k, n in a], [k / n for k, n in b])
                    shipped = max(model, old)
                    if index < 5:  # the verdict's own test
                        assert abs(shipped - unpaired_test(a, b).p_at(0.0)) < 1e-12
                    hits += [decides(p, 0.05) for p in (shipped, old, model, naive_p(a, b), welch_p(a, b))]
                shares = hits / trials
                for name, value in zip(names, shares, strict=True):
                    worst[name] = max(worst[name], value)
                g_a, n_a, g_b, n_b = design
                cells = " | ".join(f"{x:.1%}" for x in shares)
                print(f"| {g_a} x {n_a} | {g_b} x {n_b} | {icc:g} | {rate:g} | {cells} |", flush=True)
    error = monte_carlo_error(0.05, trials)
    print(
        f"highest: shipped {worst['shipped']:.1%}, case permutation {worst['permutation']:.1%}, "
        f"beta-binomial alone {worst['model']:.1%}, at its point estimates {worst['naive']:.1%}, "
        f"Welch {worst['welch']:.1%} (Monte Carlo error at 5%: ±{error:.1%})"
    )


def unequal_power_rows(rng, trials):
    print(f"\nunpaired, unequal repeats: power (decided the right way), {trials} probes a row")
    print(
        "| A | B | ICC | rates A vs B | shipped | beta-binomial alone | ceiling: the ICC known "
        "| case permutation alone (not valid here) | Welch t over cases |"
    )
    print("|---|---|---:|---|---:|---:|---:|---:|---:|")
    for g_a, n_a, g_b, n_b, icc, rate_a, rate_b in UNPAIRED_POWER:
        hits = np.zeros(5)
        for a, b in draw_unpaired(rng, (g_a, n_a, g_b, n_b), icc, rate_a, rate_b, trials):
            right = np.sign(np.mean([k / n for k, n in b]) - np.mean([k / n for k, n in a])) == np.sign(
                rate_b - rate_a
            )
            model = BetaBinomialTest(a, b).p_value
            old = case_permutation([k / n for k, n in a], [k / n for k, n in b])
            ps = (max(model, old), model, known_icc_p(a, b, icc), old, welch_p(a, b))
            hits += [right and decides(p, 0.05) for p in ps]
        cells = " | ".join(f"{x:.1%}" for x in hits / trials)
        print(f"| {g_a} x {n_a} | {g_b} x {n_b} | {icc:g} | {rate_a:g} vs {rate_b:g} | {cells} |", flush=True)


def unequal_paired_rows(rng, trials):
    print(f"\npaired, unequal repeats: false alarms, {trials} probes a cell (the same rates under both arms)")
    print(
        "| cases | A repeats | B repeats | ICC | rate | generalises: conditional sign test (shipped) "
        "| generalises: plain sign test (old) | paired verdict |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    worst = np.zeros(3)
    for cases, n_a, n_b in PAIRED_DESIGNS:
        for icc in UNEQUAL_ICCS:
            for rate in UNEQUAL_RATES:
                rates_a, rates_b = paired_rates(rng, rate, rate, icc, (trials, cases))
                k_a, k_b = rng.binomial(n_a, rates_a), rng.binomial(n_b, rates_b)
                hits = np.zeros(3)
                for t in range(trials):
                    a = [(int(k), n_a) for k in k_a[t]]
                    b = [(int(k), n_b) for k in k_b[t]]
                    # generalisation()'s "likely", without the interval it also computes
                    cells = [(x, n_a, y, n_b) for (x, _), (y, _) in zip(a, b, strict=True)]
                    test = ConditionalSignTest(cells)
                    likely = test.up + test.down >= 5 and decides(test.p_value, 0.05)
                    if t < 3:
                        assert likely == generalisation(a, b).likely
                    diffs = [kb / n_b - ka / n_a for (ka, _), (kb, _) in zip(a, b, strict=True)]
                    up, down = sum(d > 0 for d in diffs), sum(d < 0 for d in diffs)
                    old = up + down >= 5 and decides(sign_test(up, down), 0.05)
                    verdict = paired_verdict(a, b).verdict != "indistinguishable"
                    hits += [likely, old, verdict]
                shares = hits / trials
                worst = np.maximum(worst, shares)
                cells = " | ".join(f"{x:.1%}" for x in shares)
                print(f"| {cases} | {n_a} | {n_b} | {icc:g} | {rate:g} | {cells} |", flush=True)
    error = monte_carlo_error(0.05, trials)
    print(
        f"highest: conditional sign test {worst[0]:.1%}, plain sign test {worst[1]:.1%}, paired verdict "
        f"{worst[2]:.1%} (Monte Carlo error at 5%: ±{error:.1%})"
    )


def agreement_rows(rng, designs):
    """Random unpaired designs: does the interval exclude 0 exactly when the verdict is decided?"""
    disagreements = decided = 0
    for _ in range(designs):
        sides = []
        equal = rng.random() < 0.5
        repeats = int(rng.integers(1, 11))
        for _side in range(2):
            cases = int(rng.integers(2, 13))
            rate = rng.choice([0.0, 0.5, 0.9, 1.0, rng.random()])
            side = []
            for _case in range(cases):
                n = repeats if equal else int(rng.choice([1, 3, 10, 20]))
                side.append((int(rng.binomial(n, min(1.0, max(0.0, rate + rng.normal(0, 0.2))))), n))
            sides.append(side)
        for alpha in (0.05, 0.01, 0.05 / 13):
            verdict = unpaired_verdict(*sides, alpha=alpha)
            bounds = verdict.interval_at(alpha)
            excludes = bounds is not None and (bounds[0] > 0 or bounds[1] < 0)
            decided += decides(verdict.p_value, alpha)
            disagreements += bounds is None or excludes != decides(verdict.p_value, alpha)
    print(
        f"\nunpaired interval/verdict disagreements over {designs} random designs (half with unequal "
        f"repeats) x 3 levels (0.05, 0.01, 0.05/13): {disagreements} ({decided} decided)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=2000)
    parser.add_argument("--power-trials", type=int, default=10000)
    parser.add_argument("--unequal-trials", type=int, default=2000)
    parser.add_argument("--designs", type=int, default=300)
    parser.add_argument("--only-unequal", action="store_true", help="only the unequal-repeats sections")
    parser.add_argument("--skip-unequal", action="store_true", help="only the equal-repeats sweep")
    parser.add_argument("--quick", action="store_true", help="the first cell of each table (the suite's run)")
    args = parser.parse_args()
    if args.quick:
        shrink_to_first_cells()
    started = time.perf_counter()
    rng = np.random.default_rng(SEED)
    if args.only_unequal:
        unequal_sections(args)
        print(f"\ntook {time.perf_counter() - started:.0f} s")
        return
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
    if not args.skip_unequal:
        unequal_sections(args)
    print(f"\ntook {time.perf_counter() - started:.0f} s")


def shrink_to_first_cells() -> None:
    global CASES, REPEATS, ICCS, RATES, UNPAIRED_DESIGNS, PAIRED_DESIGNS, UNEQUAL_ICCS, UNEQUAL_RATES
    global UNPAIRED_RATES, UNPAIRED_POWER
    CASES, REPEATS, ICCS, RATES = CASES[:1], REPEATS[:1], ICCS[:1], RATES[:1]
    UNPAIRED_DESIGNS, PAIRED_DESIGNS = UNPAIRED_DESIGNS[:1], PAIRED_DESIGNS[:1]
    UNPAIRED_POWER = UNPAIRED_POWER[:1]
    UNEQUAL_ICCS, UNEQUAL_RATES, UNPAIRED_RATES = UNEQUAL_ICCS[:1], UNEQUAL_RATES[:1], UNPAIRED_RATES[:1]


def unequal_sections(args) -> None:
    """Arms with unequal repeats, on a stream of their own (the same figures run alone or after the
    sweep)."""
    rng = np.random.default_rng([SEED, 2])
    print(f"\nunequal repeats: seed [{SEED}, 2], alpha 0.05")
    unequal_unpaired_rows(rng, args.unequal_trials)
    unequal_power_rows(rng, args.unequal_trials)
    unequal_paired_rows(rng, args.unequal_trials)
    agreement_rows(rng, args.designs)


if __name__ == "__main__":
    main()
