"""`--until-decided` on simulated probes (the model of promptprobe.stats.sequential: each
question its own rate, paired by its place under both arms): what it costs against the fixed
paired plan of the same power and against the classic sequential designs, and its false alarms.

1. The design point of `--detect D` (50% ± D/2, ICC 0), where the cost is judged: the cap,
   the mean samples and power of the rule against the fixed paired plan for 80% power, and under
   the null (both arms at 50%) its mean samples and false alarms.
2. The sweep (four rate pairs x ICC 0.2 and 0.5, 12 cases, --detect = the true difference):
   mean samples (both arms), power, the fixed paired plan with the same power, and the anchors:
   group-sequential designs with 5 looks (O'Brien-Fleming, Pocock) and Wald's SPRT on the
   discordant pairs, each given the fewest rounds that reach 80% power at the design point, and
   the mixture e-value it replaced.
3. Under the null: mean samples against the fixed plan of --detect, false alarms (simulated, and
   exactly given each run's discordant counts), for clustered questions, beside the ceiling: the
   most a rule that treats the arms alike and keeps false alarms within alpha given the counts
   could spend given the same counts (`false_alarm_ceiling`).
4. `probe plan --sequential` against fresh seeded simulations and an independent run-by-run one.

    .venv/bin/python benchmarks/sequential.py [--trials 2000] [--quick]
"""

import argparse
import math
import random
import time

import numpy as np

from promptprobe.planning import plan_sequential
from promptprobe.stats.planning import paired_repeats
from promptprobe.stats.power import log_mixture_e, stratified_p_batch, stratified_smallest_p
from promptprobe.stats.sequential import (
    SEQUENTIAL_SEED,
    SEQUENTIAL_TRIALS,
    coupled_rates,
    design_point,
    design_point_counts,
    false_alarm_ceiling,
    first_decisions,
    look,
    null_spending,
    rounds_for_power,
    simulated_counts,
)
from promptprobe.stats.simulation import crn_counts
from promptprobe.stats.tests import decides, decision_limit

ALPHA, BETA, MIN_ROUNDS = 0.05, 0.2, 2
SEED = SEQUENTIAL_SEED + 7  # the sweep's runs are not the ones the caps were found on
CASES = 12
SWEEP = [((0.9, 0.7), 0.20), ((0.8, 0.7), 0.10), ((0.85, 1.0), 0.15), ((0.5, 0.6), 0.10)]
MAX_POWER = 0.99  # a fixed plan for more power than this is not searched


# -- the anchors: classic designs on the same discordant pairs -----------------------------------


def gsd(kind):
    """A group-sequential design with 5 equally spaced looks on z = lead / sqrt(discordant)
    (Jennison & Turnbull, Table 2.1/2.3: alpha 0.05 two-sided, K = 5)."""

    def rule(discordant, b_higher, cap):
        lead = np.cumsum(2 * b_higher - discordant, axis=1)
        total = np.cumsum(discordant, axis=1)
        stops = np.zeros(len(lead), dtype=np.int64)
        directions = np.zeros(len(lead), dtype=np.int64)
        for j in range(1, 6):
            k = math.ceil(j * cap / 5)
            c = 2.040 * math.sqrt(5 / j) if kind == "obf" else 2.413
            z = lead[:, k - 1] / np.sqrt(np.maximum(total[:, k - 1], 1))
            hit = (stops == 0) & (np.abs(z) >= c)
            stops[hit], directions[hit] = k, np.sign(z[hit])
        return stops, directions, np.where(stops > 0, stops, cap)

    return rule


def sprt(detect):
    """Wald's SPRT on the discordant pairs, B's share 1/2 against the design point's (either way),
    checked after every round: it decides when a likelihood ratio reaches (1 - beta)/(alpha/2) and
    accepts "no difference" when both fall to beta/(1 - alpha/2); no decision at its cap."""
    lean = 0.5 + detect / (1 + detect * detect)
    upper, lower = math.log((1 - BETA) / (ALPHA / 2)), math.log(BETA / (1 - ALPHA / 2))

    def rule(discordant, b_higher, cap):
        s, d = np.cumsum(b_higher, axis=1), np.cumsum(discordant, axis=1)
        up = s * math.log(2 * lean) + (d - s) * math.log(2 * (1 - lean))
        down = (d - s) * math.log(2 * lean) + s * math.log(2 * (1 - lean))
        reject = np.maximum(up, down) >= upper
        accept = np.maximum(up, down) <= lower
        ended = reject | accept
        first = np.where(ended.any(axis=1), ended.argmax(axis=1) + 1, 0)
        rows, at = np.arange(len(s)), np.clip(first - 1, 0, cap - 1)
        decided = (first > 0) & reject[rows, at]
        directions = np.where(decided, np.sign(2 * s[rows, at] - d[rows, at]), 0)
        return np.where(decided, first, 0), directions, np.where(first > 0, first, cap)

    return rule


def mixture(discordant, b_higher, cap):
    """The rule before the exact boundary: the Beta(1/2, 1/2) mixture e-value reaching 1/alpha."""
    s, d = np.cumsum(b_higher, axis=1), np.cumsum(discordant, axis=1)
    reached = log_mixture_e(s, d, 0.5) >= math.log(1 / ALPHA) - 1e-9
    reached[:, : MIN_ROUNDS - 1] = False
    first = np.where(reached.any(axis=1), reached.argmax(axis=1) + 1, 0)
    rows, at = np.arange(len(s)), np.clip(first - 1, 0, cap - 1)
    directions = np.where(first > 0, np.sign(2 * s[rows, at] - d[rows, at]), 0)
    return first, directions, np.where(first > 0, first, cap)


def boundary(discordant, b_higher, cap):
    """The rule a run uses (stats.sequential)."""
    stops, directions = first_decisions(discordant, b_higher, ALPHA, cap, MIN_ROUNDS)
    return stops, directions, np.where(stops > 0, stops, cap)


def calibrated_cap(rule, detect, cases, trials=SEQUENTIAL_TRIALS):
    """The fewest rounds at which `rule` decides --detect's design point the right way with 80%
    power (the same search and the same runs as the boundary's cap, whatever --trials is)."""
    guess = rounds_for_power(detect, cases, ALPHA, 0.8, MIN_ROUNDS).rounds
    if rule is boundary:
        return guess
    horizon = 3 * guess
    counts = design_point_counts(detect, cases, range(1, horizon + 1), trials, SEQUENTIAL_SEED)

    def power(cap):
        stops, directions, _ = rule(counts[0][:, :cap], counts[1][:, :cap], cap)
        return ((stops > 0) & (directions > 0)).mean()

    cap = guess
    while cap > 1 and power(cap - 1) >= 0.8:
        cap -= 1
    while power(cap) < 0.8 and cap < horizon:
        cap += 1
    return cap


# -- the fixed paired plan on the same simulated questions -------------------------------------


class FixedPlan:
    """Power of the fixed paired design (the stratified exact test) with `repeats` of each
    question, on the same model of questions, with common random numbers across repeats."""

    def __init__(self, p1, p2, cases, icc, trials, seed):
        rng = np.random.default_rng([seed, 99])
        self.rates_a, self.rates_b = coupled_rates(rng, p1, p2, icc, (trials, cases))
        self.seed, self.cases, self.direction = seed, cases, np.sign(p2 - p1)
        self.cache = {}

    def power(self, repeats):
        if repeats not in self.cache:
            if not decides(stratified_smallest_p(self.cases, repeats), ALPHA):
                self.cache[repeats] = 0.0
            else:
                a = crn_counts(self.seed, 1, self.rates_a, repeats)
                b = crn_counts(self.seed, 2, self.rates_b, repeats)
                p, signs = stratified_p_batch(a, b, repeats, alpha=ALPHA)
                self.cache[repeats] = float(((p <= decision_limit(ALPHA)) & (signs == self.direction)).mean())
        return self.cache[repeats]

    def repeats_for(self, target, limit=2000):
        """The fewest repeats whose power reaches `target` (doubling, then bisection)."""
        high = 1
        while self.power(high) < target:
            if high >= limit:
                return None
            high = min(limit, 2 * high)
        low = high // 2
        while high - low > 1:
            mid = (low + high) // 2
            low, high = (low, mid) if self.power(mid) >= target else (mid, high)
        return high


def ci(share, trials):
    return 1.96 * math.sqrt(max(share * (1 - share), 1e-12) / trials)


# -- 1. the design point ------------------------------------------------------------------------


def design_point_table(trials, quick=False):
    print("\n1. the design point of --detect D (50% ± D/2, ICC 0), samples per arm; the target: mean samples")
    print("   <= 0.85x the fixed paired plan for 80% power, at 80% power or more; under the null (both 50%)")
    print("   <= 1.25x it, false alarms between 3% and 5%. The fixed plan: the fewest repeats whose")
    print("   simulated power (these runs) reaches 80%; beside it what `probe plan` states:")
    print(
        "| --detect | cases | cap (rounds) | fixed plan, 80% (samples) | probe plan says | mean samples "
        "| x fixed | power | null: mean samples | x fixed | false alarms (simulated) "
        "| exact, given the counts |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for detect in (0.20,) if quick else (0.10, 0.15, 0.20, 0.30):
        for cases in (12,) if quick else (5, 12, 50):
            cap = rounds_for_power(detect, cases, ALPHA, 0.8, MIN_ROUNDS).rounds
            p1, p2 = design_point(detect)
            fixed = FixedPlan(p1, p2, cases, 0.0, trials, SEED).repeats_for(0.8)
            stated = paired_repeats(p1, p2, cases, 0.0, ALPHA, 0.8, max_repeats=1000).repeats
            counts = simulated_counts(p1, p2, cases, 0.0, cap, trials, SEED)
            stops, directions, used = boundary(*counts, cap)
            power = ((stops > 0) & (directions > 0)).mean()
            null = simulated_counts(0.5, 0.5, cases, 0.0, cap, trials, SEED + 1)
            null_stops, _, null_used = boundary(*null, cap)
            alarms = (null_stops > 0).mean()
            exact = null_spending(null[0], ALPHA, cap, MIN_ROUNDS).mean()
            mean, null_mean = used.mean() * cases, null_used.mean() * cases
            alarms_error = ci(alarms, trials)
            print(
                f"| {100 * detect:g} | {cases} | {cap} | {fixed * cases} | {stated * cases} | {mean:.0f} | "
                f"{mean / (fixed * cases):.2f} | {power:.1%} | {null_mean:.0f} | "
                f"{null_mean / (fixed * cases):.2f} | {alarms:.1%} ± {alarms_error:.1%} | {exact:.2%} |",
                flush=True,
            )


# -- 2. the sweep of issue 28 --------------------------------------------------------------------


ANCHORS = ("OBF", "Pocock", "SPRT")
RULES = {"boundary": boundary, "OBF": gsd("obf"), "Pocock": gsd("pocock"), "mixture": mixture}


def sweep(trials, quick=False):
    cells_swept = SWEEP[:1] if quick else SWEEP
    caps = {}
    for _, detect in cells_swept:
        rules = dict(RULES, SPRT=sprt(detect))
        for name, rule in rules.items():
            if name == "mixture":
                continue  # its own cap, found the way it was before
            caps[(name, detect)] = calibrated_cap(rule, detect, CASES)
        caps[("mixture", detect)] = calibrated_cap(mixture, detect, CASES)
    print(f"\n2. the sweep: {CASES} cases, --detect = the true difference, samples over both arms; each")
    print("   design gets the fewest rounds that reach 80% power at --detect's design point (its cap, in")
    print("   rounds); anchors: mean samples (power; cap):")
    print(
        "| true rates | ICC | --detect (cap) | mean samples | power | fixed plan, same power | x fixed | "
        "OBF 5 looks | Pocock 5 looks | SPRT | x best anchor | mixture it replaced |"
    )
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    ratios = []
    for (p1, p2), detect in cells_swept:
        for icc in (0.2, 0.5):
            rules = dict(RULES, SPRT=sprt(detect))
            horizon = max(caps[(name, detect)] for name in rules)
            counts = simulated_counts(p1, p2, CASES, icc, horizon, trials, SEED)
            cells = {}
            for name, rule in rules.items():
                cap = caps[(name, detect)]
                stops, directions, used = rule(counts[0][:, :cap], counts[1][:, :cap], cap)
                right = ((stops > 0) & (directions == np.sign(p2 - p1))).mean()
                cells[name] = (2 * CASES * used.mean(), right, 2 * CASES * used.std() / math.sqrt(trials))
            mean, power, error = cells["boundary"]
            target = min(MAX_POWER, power)
            fixed = FixedPlan(p1, p2, CASES, icc, trials, SEED).repeats_for(target)
            fixed_n = 2 * CASES * fixed
            best = min(cells[name][0] for name in ANCHORS)
            ratios.append((mean / fixed_n, mean / best, f"{p1:g} vs {p2:g}, ICC {icc:g}"))

            anchors = " | ".join(
                f"{cells[n][0]:.0f} ({cells[n][1]:.1%}; {caps[(n, detect)]})" for n in ANCHORS
            )
            old = f"{cells['mixture'][0]:.0f} ({cells['mixture'][1]:.1%}; {caps[('mixture', detect)]})"
            print(
                f"| {p1:g} vs {p2:g} | {icc:g} | {100 * detect:g} ({caps[('boundary', detect)]}) | "
                f"{mean:.0f} ± {1.96 * error:.0f} | {power:.1%} | {fixed_n} ({100 * target:.0f}%) | "
                f"{mean / fixed_n:.2f} | {anchors} | {mean / best:.2f} | {old} |",
                flush=True,
            )
    worst_fixed = max(ratios)
    worst_anchor = max(ratios, key=lambda r: r[1])
    print(
        f"weakest cells: {worst_fixed[2]} ({worst_fixed[0]:.2f}x the fixed plan of the same power); "
        f"{worst_anchor[2]} ({worst_anchor[1]:.2f}x the best anchor)"
    )


# -- 3. under the null ---------------------------------------------------------------------------


def nulls(trials, quick=False):
    error = ci(0.05, trials)
    print(f"\n3. under the null, {CASES} cases, samples over both arms; the fixed plan is --detect's for 80%")
    print(f"   power; Monte Carlo error at 5%: ±{error:.1%}; anchors: mean samples (false alarms):")
    print(
        "| both arms | ICC | --detect (cap) | mean samples | x fixed plan of --detect | "
        "false alarms (simulated) | exact, given the counts | ceiling, given the counts | "
        "OBF | Pocock | SPRT |"
    )
    print("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    weakest = None
    for detect in (0.15,) if quick else (0.15, 0.10):
        p1, p2 = design_point(detect)
        fixed_n = 2 * CASES * FixedPlan(p1, p2, CASES, 0.0, trials, SEED).repeats_for(0.8)
        rules = dict(RULES, SPRT=sprt(detect))
        caps = {name: calibrated_cap(rules[name], detect, CASES) for name in ("boundary", *ANCHORS)}
        for rate in (0.5,) if quick else (0.5, 0.8, 0.95):
            for icc in (0.0,) if quick else (0.0, 0.2, 0.5):
                counts = simulated_counts(rate, rate, CASES, icc, max(caps.values()), trials, SEED + 2)
                cells = {}
                for name, cap in caps.items():
                    stops, _, used = rules[name](counts[0][:, :cap], counts[1][:, :cap], cap)
                    cells[name] = (2 * CASES * used.mean(), (stops > 0).mean())
                cap = caps["boundary"]
                exact = null_spending(counts[0][:, :cap], ALPHA, cap, MIN_ROUNDS).mean()
                totals = counts[0][:, :cap].sum(axis=1)
                ceiling = np.mean([false_alarm_ceiling(int(n), ALPHA) for n in totals])
                mean, alarms = cells["boundary"]
                others = " | ".join(f"{cells[n][0]:.0f} ({cells[n][1]:.1%})" for n in ANCHORS)
                print(
                    f"| {rate:g} | {icc:g} | {100 * detect:g} ({cap}) | {mean:.0f} | {mean / fixed_n:.2f} | "
                    f"{alarms:.1%} | {exact:.2%} | {ceiling:.2%} | {others} |",
                    flush=True,
                )
                cell = (exact, f"both at {rate:g}, ICC {icc:g}, --detect {100 * detect:g}", ceiling)
                weakest = min(weakest or cell, cell)
    exact, where, ceiling = weakest
    print(
        f"lowest exact false alarms: {exact:.2%} ({where}); the ceiling there for rules that treat the "
        f"arms alike and keep false alarms within alpha given the counts: {ceiling:.2%}"
    )


# -- 4. the plan reproduced ----------------------------------------------------------------------


def plan_check(trials, quick=False):
    seeds = range(1, 3 if quick else 11)
    print(f"\n4. probe plan --sequential against {len(seeds)} fresh simulations of the same rule (other")
    print("   seeds; their mean with its 95% Monte Carlo error), and one run at a time through the run's")
    print("   own per-round look (Python's random numbers), samples per arm:")
    runs = min(400, trials)
    print(
        "| rates, ICC, cases, --detect | plan: mean samples | plan: power | fresh seeds: mean samples "
        f"| power | run by run ({runs} runs): mean | power |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    cells = ((0.5, 0.6, 0.5, 12, 0.10), (0.8, 0.7, 0.2, 12, 0.10), (0.9, 0.7, 0.5, 10, 0.20))
    for p1, p2, icc, cases, detect in cells[:1] if quick else cells:
        plan = plan_sequential(p1, p2, cases, icc, ALPHA, detect=detect).data
        cap = plan["max_rounds"]
        used_all, right_all = [], []
        for seed in seeds:
            stops, directions, used = boundary(*simulated_counts(p1, p2, cases, icc, cap, trials, seed), cap)
            used_all.append(used * cases)
            right_all.append((stops > 0) & (directions == np.sign(p2 - p1)))
        used, right = np.concatenate(used_all), np.concatenate(right_all)
        mean_error, power_error = 1.96 * used.std() / math.sqrt(used.size), ci(right.mean(), right.size)
        taken, share = one_run_at_a_time(p1, p2, cases, icc, cap, runs)
        stated = plan["samples_per_arm"]
        print(
            f"| {p1:g} vs {p2:g}, {icc:g}, {cases}, {100 * detect:g} | {stated['mean']:.1f} ± "
            f"{stated['mean_error']:.1f} | {plan['power']:.1%} ± {plan['power_error']:.1%} | "
            f"{used.mean():.1f} ± {mean_error:.1f} | {right.mean():.1%} ± {power_error:.1%} | "
            f"{taken:.1f} | {share:.1%} |",
            flush=True,
        )


def one_run_at_a_time(p1, p2, cases, icc, cap, runs):
    """Runs simulated one at a time with Python's random numbers, each round looked at by
    stats.sequential.look, the function a run decides with."""
    rng = random.Random(29)
    rates_a, rates_b = coupled_rates(np.random.default_rng(29), p1, p2, icc, (runs, cases))
    taken, right = [], 0
    for i in range(runs):
        discordant, b_higher = [], []
        while True:
            a = [rng.random() < r for r in rates_a[i]]
            b = [rng.random() < r for r in rates_b[i]]
            discordant.append(sum(x != y for x, y in zip(a, b, strict=True)))
            b_higher.append(sum(y and not x for x, y in zip(a, b, strict=True)))
            seen = look(discordant, b_higher, ALPHA, cap, MIN_ROUNDS)
            if seen.stop:
                break
        taken.append(seen.round * cases)
        right += seen.decision == ("B>A" if p2 > p1 else "A>B")
    return float(np.mean(taken)), right / runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=2000)
    parser.add_argument("--quick", action="store_true", help="one cell of each table (the test suite's run)")
    args = parser.parse_args()
    started = time.perf_counter()
    print(
        f"{args.trials} simulated runs per row, seed {SEED}, alpha {ALPHA}, the boundary looked at after "
        f"every round from round {MIN_ROUNDS}"
    )
    design_point_table(args.trials, args.quick)
    sweep(args.trials, args.quick)
    nulls(args.trials, args.quick)
    plan_check(args.trials, args.quick)
    print(f"\ntook {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
