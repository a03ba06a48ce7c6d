"""Does the interval beside a verdict agree with it? Random designs through `probe compare`'s own
path (compare_sides, the family adjustment, settle, the words), counting the results whose interval
excludes 0 while the verdict is undecided, or covers 0 while it is decided, both as numbers and as
printed (the words a reader sees). Target: 0 in every row. Beside it, the rule it replaced: the
Mantel-Haenszel risk difference with Sato's 95% interval, unadjusted, beside every verdict.

Designs: balanced 12 questions x 3 repeats a side; unbalanced paired (2-20 questions, each arm
asking each question 1, 2, 3, 5, 10 or 20 times, drawn per question and per arm); unpaired (a2's
verdict; until its own interval lands, an interval is shown only where the mean-of-cases one
agrees). Per-question rates from the shared simulation model (ICC 0 or 0.5; the arms' means equal
in a third of the designs, 5-30 points apart otherwise). One metric, and a family of three
(header_present, its complement header_absent, and an independent declared_correct) adjusted
with Holm, where each interval is at the level its verdict was decided at.

Then the coverage of the paired interval for the mean per-question B - A (its target), against
the mapping of the exact inversion alone, Sato's interval and Newcombe's on pooled counts
(benchmarks/coverage.py sweeps every interval).

    .venv/bin/python benchmarks/interval_agreement.py [--designs 2000] [--coverage-trials 2000]
"""

import argparse
import math
import re
import time

import numpy as np

from promptprobe.comparison import Side, adjust, compare_sides
from promptprobe.stats.conditional import conditional_interval
from promptprobe.stats.effect import mantel_haenszel, mean_of_cases
from promptprobe.stats.intervals import newcombe
from promptprobe.stats.simulation import paired_rates, question_rates
from promptprobe.stats.verdict import paired_verdict

SEED = 20261130
REPEATS = (1, 2, 3, 5, 10, 20)
FAMILY = ("header_present", "header_absent", "declared_correct")


Counts = list[tuple[int, int]]


def draw_design(
    rng: np.random.Generator, kind: str, trials: tuple[list[int], list[int]] | None = None
) -> tuple[Counts, Counts, bool]:
    """Per question (successes, trials) of A and B, and whether the design is paired; `trials`:
    the same questions and trials as another metric of the same design."""
    icc = float(rng.choice([0.0, 0.5]))
    mean_a = float(rng.uniform(0.1, 0.95))
    gap = 0.0 if rng.random() < 1 / 3 else float(rng.uniform(0.05, 0.3)) * rng.choice([-1, 1])
    mean_b = min(0.99, max(0.01, mean_a + gap))
    if trials is not None:
        n_a, n_b = trials
        cases = len(n_a)
    elif kind == "balanced":
        cases, n_a, n_b = 12, [3] * 12, [3] * 12
    else:
        cases = int(rng.integers(2, 21))
        n_a = [int(rng.choice(REPEATS)) for _ in range(cases)]
        n_b = [int(rng.choice(REPEATS)) for _ in range(cases)]
    if kind == "unpaired":
        rates_a = question_rates(rng, mean_a, icc, (cases,))
        rates_b = question_rates(rng, mean_b, icc, (cases,))
    else:
        rates_a, rates_b = paired_rates(rng, mean_a, mean_b, icc, (1, cases))
        rates_a, rates_b = rates_a[0], rates_b[0]
    a = [(int(rng.binomial(n, r)), n) for n, r in zip(n_a, rates_a, strict=True)]
    b = [(int(rng.binomial(n, r)), n) for n, r in zip(n_b, rates_b, strict=True)]
    return a, b, kind != "unpaired"


def sides(a: Counts, b: Counts, paired: bool) -> tuple[Side, Side]:
    ids_a = [f"q{i}" for i in range(len(a))]
    ids_b = ids_a if paired else [f"r{i}" for i in range(len(b))]
    return (
        Side("A", {c: [k, n, 0] for c, (k, n) in zip(ids_a, a, strict=True)}, name="A"),
        Side("B", {c: [k, n, 0] for c, (k, n) in zip(ids_b, b, strict=True)}, name="B"),
    )


PRINTED = re.compile(r"CI ([+-][\d.]+) to ([+-][\d.]+)(, adjusted for \d+ comparisons)?$")


def side_of_zero(text: str) -> int:
    """+1, -1 or 0: which side of 0 a printed bound lies on ("-0.0" is just below 0, "+0" is 0)."""
    if text in ("+0", "-0"):
        return 0
    return 1 if text.startswith("+") else -1


def disagrees(result: dict) -> tuple[bool, bool, bool]:
    """(the interval disagrees, the printed interval disagrees, no interval is shown)."""
    decided = result["verdict"] != "indistinguishable"
    interval = result["effect"]["interval"]
    if interval is None:
        return False, False, True
    number = (interval[0] > 0 or interval[1] < 0) != decided
    shown = PRINTED.search(result["words"]["interval"])
    low, high = side_of_zero(shown.group(1)), side_of_zero(shown.group(2))
    printed = (low > 0 or high < 0) != decided
    return number, printed, False


def old_disagrees(result: dict, a: Counts, b: Counts, paired: bool) -> bool:
    """The rule it replaced: Sato's 95% interval (paired) or the Welch one (unpaired), unadjusted."""
    if paired:
        cases = [(x, n, y, m) for (x, n), (y, m) in zip(a, b, strict=True)]
        low, high = mantel_haenszel(cases).interval
    else:
        low, high = mean_of_cases(a, b).interval
    return (low > 0 or high < 0) != (result["verdict"] != "indistinguishable")


def complement(counts: Counts) -> Counts:
    return [(n - k, n) for k, n in counts]


def agreement(designs: int, rng) -> None:
    print(f"{designs} random designs per row, seed {SEED}, alpha 0.05")
    print(
        "| design | metrics | results | decided | disagree (number) | disagree (printed) | no interval shown "
        "| old rule disagrees (Sato/Welch 95%, unadjusted) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    worst = 0
    for kind, label in (
        ("balanced", "paired, 12 x 3 balanced"),
        ("unbalanced", "paired, unbalanced (1-20 repeats per question and arm)"),
        ("unpaired", "unpaired, unequal repeats"),
    ):
        for family in (False, True):
            counted = {"results": 0, "decided": 0, "number": 0, "printed": 0, "none": 0, "old": 0}
            for _ in range(designs):
                a, b, paired = draw_design(rng, kind)
                metrics = [("header_present", a, b)]
                if family:
                    # header_absent is the complement of the same outputs; declared_correct other draws.
                    other_a, other_b, _ = draw_design(rng, kind, ([n for _, n in a], [n for _, n in b]))
                    metrics.append(("header_absent", complement(a), complement(b)))
                    metrics.append(("declared_correct", other_a, other_b))
                results = []
                for metric, x, y in metrics:
                    side_a, side_b = sides(x, y, paired)
                    results.append((compare_sides(side_a, side_b, metric, exact=False, hints=False), x, y))
                adjust([r for r, _, _ in results], 0.05)
                for result, x, y in results:
                    number, printed, none = disagrees(result)
                    counted["results"] += 1
                    counted["decided"] += result["verdict"] != "indistinguishable"
                    counted["number"] += number
                    counted["printed"] += printed
                    counted["none"] += none
                    counted["old"] += old_disagrees(result, x, y, paired)
            worst = max(worst, counted["number"], counted["printed"])
            old = f"{counted['old']} ({counted['old'] / counted['results']:.1%})"
            print(
                f"| {label} | {3 if family else 1} | {counted['results']} | {counted['decided']} | "
                f"{counted['number']} | {counted['printed']} | {counted['none']} | {old} |",
                flush=True,
            )
    print(f"\nmost disagreements in any row: {worst} (target 0)")


def coverage(trials: int, rng) -> None:
    print(f"\ncoverage of the paired interval for the mean per-question B - A, {trials} probes a cell, 95%:")
    print(
        "| cases | repeats | ICC | A vs B | shipped | exact inversion alone | Sato (the old interval) "
        "| Newcombe pooled |"
    )
    print("|---:|---:|---:|---|---:|---:|---:|---:|")
    lowest = {"shipped": 1.0, "alone": 1.0, "sato": 1.0, "newcombe": 1.0}
    for cases, repeats in ((5, 3), (10, 1), (12, 3), (20, 10)):
        for icc in (0.0, 0.5):
            for p1, p2 in ((0.5, 0.6), (0.8, 0.9), (0.9, 0.97), (0.25, 0.95)):
                rates_a, rates_b = paired_rates(rng, p1, p2, icc, (trials, cases))
                a = rng.binomial(repeats, rates_a)
                b = rng.binomial(repeats, rates_b)
                target = (rates_b - rates_a).mean(axis=1)
                hits = dict.fromkeys(lowest, 0)
                for t in range(trials):
                    side_a = [(int(k), repeats) for k in a[t]]
                    side_b = [(int(k), repeats) for k in b[t]]
                    table = [(x, n, y, m) for (x, n), (y, m) in zip(side_a, side_b, strict=True)]
                    decision = paired_verdict(side_a, side_b)
                    samples = cases * repeats
                    bounds = {
                        "shipped": decision.interval_at(0.05),
                        "alone": conditional_interval(
                            table, decision.p_value, 0.05, decision.effect.sign, decision.effect.estimate
                        ).interval,
                        "sato": mantel_haenszel(table).interval,
                        "newcombe": newcombe(int(b[t].sum()), samples, int(a[t].sum()), samples),
                    }
                    for key, (low, high) in bounds.items():
                        hits[key] += low <= target[t] <= high
                shares = {k: v / trials for k, v in hits.items()}
                for key in lowest:
                    lowest[key] = min(lowest[key], shares[key])
                print(
                    f"| {cases} | {repeats} | {icc:g} | {p1:g} vs {p2:g} | {shares['shipped']:.1%} | "
                    f"{shares['alone']:.1%} | {shares['sato']:.1%} | {shares['newcombe']:.1%} |",
                    flush=True,
                )
    error = 1.96 * math.sqrt(0.05 * 0.95 / trials)
    print(f"\nlowest coverage over these cells (Monte Carlo error at 95%: ±{error:.1%}):")
    print("| interval | lowest coverage |\n|---|---:|")
    for key, label in (
        ("shipped", "Newcombe on the cases, agreed with the verdict (shipped)"),
        ("alone", "exact inversion alone, mapped within the margins"),
        ("sato", "Sato with the noise floor (the old interval)"),
        ("newcombe", "Newcombe on pooled counts (descriptive)"),
    ):
        print(f"| {label} | {lowest[key]:.1%} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--designs", type=int, default=2000)
    parser.add_argument("--coverage-trials", type=int, default=2000)
    args = parser.parse_args()
    started = time.perf_counter()
    rng = np.random.default_rng(SEED)
    agreement(args.designs, rng)
    coverage(args.coverage_trials, rng)
    print(f"\ntook {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
