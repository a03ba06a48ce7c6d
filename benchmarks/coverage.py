"""How often every interval the tool prints covers its stated target: a seeded sweep.

Each cell draws probes from the shared model (promptprobe.stats.simulation: Beta question rates
with the stated ICC; paired probes couple the arms' rates by rank, unpaired ones draw their own
questions), runs the same functions `probe compare` and `probe report` call, and counts how often
the interval, at 95%, holds its target:

| interval | target |
|---|---|
| paired effect | the drawn questions' mean B - A (weights nA·nB/(nA+nB): the plain mean with equal repeats) |
| unpaired effect | the drawn questions' mean rate under B minus that under A |
| generalisation | the population's mean B - A (questions like these) |
| sequential effect | the drawn questions' mean B - A, the run stopped at each round from the 2nd to the cap |
| per arm, Wilson (continuity-corrected) | the drawn questions' rate over the arm's samples (trial-weighted) |
| per arm, wilson_eff ("95% adjusted") | the population's rate |

Designs: separated and near-separated data (100% vs 0%, 95% vs 5%, 90% vs 10%), 25% vs 95%,
50% vs 50%, 0% vs 0%; 4-12 questions a side; 1-12 repeats, and unequal repeats (A once and B 12
times per question; 1, 3, 12 per question in turn); ICC 0, 0.2, 0.5. Each row: coverage with its
Monte Carlo error (1.96 standard errors), the median width in points, the share of intervals that
are a single point; weakest cells first, then each interval's weakest cell; then every cell under
92% drawn again from a fresh seed with `--confirm` times the probes (a cell short by chance comes
back; one truly short stays short). Each round a sequential run may stop at is a cell of its own.
Last, the per-arm interval's exact coverage from every outcome: at one rate for 1 to 40 samples,
and for seeded random mixes of questions at their own rates.

    .venv/bin/python benchmarks/coverage.py [--replicates 150] [--sequential-replicates 80] [--confirm 5]
    .venv/bin/python benchmarks/coverage.py --smoke
"""

import argparse
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.stats import binom

from promptprobe.comparison.rates import metric_object
from promptprobe.stats.intervals import wilson, wilson_cc
from promptprobe.stats.sequential import look, stops_and_p_values
from promptprobe.stats.sequential_effect import boundary_test, sequential_effect
from promptprobe.stats.simulation import paired_rates, question_rates
from promptprobe.stats.verdict import generalisation, paired_verdict, unpaired_verdict

SEED = 20261202
ALPHA = 0.05
RATES = ((1.0, 0.0), (0.95, 0.05), (0.9, 0.1), (0.25, 0.95), (0.5, 0.5), (0.0, 0.0))
ICCS = (0.0, 0.2, 0.5)
# (label, questions, A's repeats per question, B's)
SHAPES = (
    ("4 x 1", 4, [1] * 4, [1] * 4),
    ("6 x 1", 6, [1] * 6, [1] * 6),
    ("4 x 3", 4, [3] * 4, [3] * 4),
    ("5 x 3", 5, [3] * 5, [3] * 5),
    ("12 x 3", 12, [3] * 12, [3] * 12),
    ("4 x 12", 4, [12] * 4, [12] * 4),
    ("6: A x1, B x12", 6, [1] * 6, [12] * 6),
    ("6 x 1/3/12 mixed", 6, [1, 3, 12, 1, 3, 12], [12, 3, 1, 12, 3, 1]),
)
SEQUENTIAL = ((12, 17), (5, 17))  # (questions, cap in rounds)
SEQUENTIAL_RATES = ((0.25, 0.95), (0.95, 0.05), (0.5, 0.5), (0.5, 0.65), (0.9, 1.0))


@dataclass
class Cell:
    kind: str
    design: str
    icc: float
    rates: str
    hits: int = 0
    total: int = 0
    points: int = 0
    widths: list | None = None
    source: tuple = ()  # what draws it again: ("fixed" | "sequential", design, rates, ICC)

    def add(self, interval: tuple[float, float] | None, target: float) -> None:
        if self.widths is None:
            self.widths = []
        self.total += 1
        if interval is None:
            return  # no interval shown: nothing claimed, counted as a miss
        low, high = interval
        self.hits += low - 1e-12 <= target <= high + 1e-12
        self.points += high <= low
        self.widths.append(high - low)

    @property
    def coverage(self) -> float:
        return self.hits / self.total if self.total else 1.0

    def row(self) -> str:
        # At least the error at the nominal 95%, so that a cell at 100% does not claim none.
        error = 1.96 * math.sqrt(max(self.coverage * (1 - self.coverage), 0.95 * 0.05) / self.total)
        width = 100 * float(np.median(self.widths)) if self.widths else float("nan")
        return (
            f"| {self.kind} | {self.design} | {self.icc:g} | {self.rates} | "
            f"{self.coverage:.1%} ± {error:.1%} | {width:.0f} | {self.points / self.total:.1%} "
            f"| {self.total} |"
        )


def cached(function: Callable) -> Callable:
    seen: dict = {}

    def call(*key):
        if key not in seen:
            seen[key] = function(*key)
        return seen[key]

    return call


def paired_interval(a: tuple, b: tuple):
    return paired_verdict(list(a), list(b), ALPHA).interval_at(ALPHA)


def unpaired_interval(a: tuple, b: tuple):
    return unpaired_verdict(list(a), list(b), ALPHA).interval_at(ALPHA)


def generalisation_interval(a: tuple, b: tuple):
    return generalisation(list(a), list(b), ALPHA).interval


def fixed_cells(replicates: int, rng: np.random.Generator, shapes, rates_list, iccs) -> list[Cell]:
    cells = []
    paired = cached(paired_interval)
    unpaired = cached(unpaired_interval)
    general = cached(generalisation_interval)
    for shape in shapes:
        design, cases, n_a, n_b = shape
        n_a, n_b = np.array(n_a), np.array(n_b)
        for mean_a, mean_b in rates_list:
            for icc in iccs if 0 < mean_a < 1 or 0 < mean_b < 1 else (0.0,):
                label = f"{mean_a:g} vs {mean_b:g}"
                row = {
                    kind: Cell(kind, design, icc, label, source=("fixed", shape, (mean_a, mean_b), icc))
                    for kind in ("paired effect", "unpaired effect", "generalisation")
                }
                arms = {
                    f"{kind} {arm}": Cell(
                        f"per arm, {kind}",
                        design,
                        icc,
                        f"{arm} at {mean:g}",
                        source=("fixed", shape, (mean_a, mean_b), icc),
                    )
                    for kind in ("Wilson", "wilson_eff")
                    for arm, mean in (("A", mean_a), ("B", mean_b))
                }
                rates_a, rates_b = paired_rates(rng, mean_a, mean_b, icc, (replicates, cases))
                a = rng.binomial(n_a, rates_a)
                b = rng.binomial(n_b, rates_b)
                weights = n_a * n_b / (n_a + n_b)
                drawn = ((rates_b - rates_a) * weights).sum(axis=1) / weights.sum()
                own_a = question_rates(rng, mean_a, icc, (replicates, cases))
                own_b = question_rates(rng, mean_b, icc, (replicates, cases))
                ua, ub = rng.binomial(n_a, own_a), rng.binomial(n_b, own_b)
                for t in range(replicates):
                    side_a = tuple(zip(a[t].tolist(), n_a.tolist(), strict=True))
                    side_b = tuple(zip(b[t].tolist(), n_b.tolist(), strict=True))
                    row["paired effect"].add(paired(side_a, side_b), drawn[t])
                    row["generalisation"].add(general(side_a, side_b), mean_b - mean_a)
                    key_a = tuple(sorted(zip(ua[t].tolist(), n_a.tolist(), strict=True)))
                    key_b = tuple(sorted(zip(ub[t].tolist(), n_b.tolist(), strict=True)))
                    row["unpaired effect"].add(unpaired(key_a, key_b), own_b[t].mean() - own_a[t].mean())
                    for arm, counts, rates, mean in (
                        ("A", a[t], rates_a[t], mean_a),
                        ("B", b[t], rates_b[t], mean_b),
                    ):
                        trials = n_a if arm == "A" else n_b
                        # The metric object `probe report` shows: its `wilson` and `wilson_eff`.
                        shown = metric_object(
                            {str(i): [k, m, 0] for i, (k, m) in enumerate(zip(counts, trials, strict=True))},
                            higher_is_better=True,
                        )
                        drawn_rate = float((rates * trials).sum() / trials.sum())
                        arms[f"Wilson {arm}"].add(tuple(shown["wilson"]), drawn_rate)
                        arms[f"wilson_eff {arm}"].add(tuple(shown["wilson_eff"]), mean)
                cells += list(row.values()) + list(arms.values())
    return cells


def draw_rounds(rng, rates_a, rates_b, cap):
    """Per replicate and round: B-higher minus A-higher pairs, discordant pairs, B-higher pairs."""
    outcome_a = rng.random((len(rates_a), cap, rates_a.shape[1])) < rates_a[:, None, :]
    outcome_b = rng.random((len(rates_b), cap, rates_b.shape[1])) < rates_b[:, None, :]
    b_higher = (outcome_b & ~outcome_a).sum(axis=2)
    a_higher = (outcome_a & ~outcome_b).sum(axis=2)
    return b_higher - a_higher, b_higher + a_higher, b_higher


def sequential_cells(replicates: int, rng: np.random.Generator, designs, rates_list, iccs) -> list[Cell]:
    cells = []
    for cases, cap in designs:
        for mean_a, mean_b in rates_list:
            for icc in iccs:
                rates_a, rates_b = paired_rates(rng, mean_a, mean_b, icc, (replicates, cases))
                target = (rates_b - rates_a).mean(axis=1)
                leads, discordant, b_higher = draw_rounds(rng, rates_a, rates_b, cap)
                stops, _, p_values = stops_and_p_values(discordant, b_higher, ALPHA, cap, 2)
                by_round = {
                    r: Cell(
                        "sequential effect",
                        f"{cases} questions, cap {cap}, stopped by round {r}",
                        icc,
                        f"{mean_a:g} vs {mean_b:g}",
                        source=("sequential", (cases, cap), (mean_a, mean_b), icc),
                    )
                    for r in range(2, cap + 1)
                }
                for t in range(replicates):
                    stop = int(stops[t]) or cap
                    for r in range(2, cap + 1):
                        at = min(r, stop)
                        decided = bool(stops[t]) and at == stop
                        needed = (
                            [
                                look(
                                    discordant[t, :k].tolist(), b_higher[t, :k].tolist(), ALPHA, cap, 2
                                ).needed
                                for k in range(1, at + 1)
                            ]
                            if decided
                            else [None] * at
                        )
                        p_value = float(p_values[t]) if decided else 1.0
                        test = boundary_test(
                            discordant[t, :at].tolist(), needed, int(leads[t, :at].sum()), cases * at, p_value
                        )
                        _, interval = sequential_effect(
                            leads[t, :at].tolist(), [cases] * at, p_value, ALPHA, test
                        )
                        by_round[r].add(interval, target[t])
                every = Cell(
                    "sequential effect",
                    f"{cases} questions, cap {cap}, every stopping round",
                    icc,
                    f"{mean_a:g} vs {mean_b:g}",
                    source=("sequential", (cases, cap), (mean_a, mean_b), icc),
                )
                for c in by_round.values():
                    every.hits += c.hits
                    every.total += c.total
                    every.points += c.points
                    every.widths = (every.widths or []) + (c.widths or [])
                cells += [every, *by_round.values()]
    return cells


def exact_per_arm(rng: np.random.Generator, mixes: int, most: int = 40) -> None:
    """The per-arm interval's exact coverage of the arm's mean rate, from every outcome: at one rate
    (0.1% to 99.9% in steps of 0.1%) for 1 to `most` samples, and for seeded random mixes of 1 to 6
    questions at their own rates with 1, 2, 3 or 12 samples each (the successes a sum of binomials).
    The shown interval beside the plain score interval it replaced."""
    grid = np.arange(1, 1000) / 1000
    print("\nper arm, exact coverage of the arm's mean rate (every outcome enumerated):")
    print(f"| interval | one rate, 1-{most} samples: lowest | at | {mixes} random mixes: lowest | at |")
    print("|---|---:|---|---:|---|")
    for name, interval in (("Wilson, continuity-corrected (shown)", wilson_cc), ("plain Wilson", wilson)):
        worst_one = (2.0, "")
        for n in range(1, most + 1):
            bounds = np.array([interval(k, n) for k in range(n + 1)])
            chances = binom.pmf(np.arange(n + 1)[:, None], n, grid[None, :])
            held = (bounds[:, :1] - 1e-12 <= grid) & (grid <= bounds[:, 1:] + 1e-12)
            covered = (chances * held).sum(axis=0)
            at = int(covered.argmin())
            worst_one = min(worst_one, (float(covered[at]), f"{n} samples at {grid[at]:.1%}"))
        worst_mix = (2.0, "")
        draws = np.random.default_rng(rng.integers(2**32))
        for _ in range(mixes):
            questions = int(draws.integers(1, 7))
            repeats = draws.choice([1, 2, 3, 12], questions)
            # Half the questions at a rate near or at an edge, half anywhere.
            edge = draws.choice([0.0, 0.02, 0.05, 0.1, 0.9, 0.95, 0.98, 1.0], questions)
            rates = np.repeat(np.where(draws.random(questions) < 0.5, edge, draws.random(questions)), repeats)
            chances = np.array([1.0])
            for p in rates:
                chances = np.append(chances * (1 - p), 0.0) + np.append(0.0, chances * p)
            n, target = len(rates), float(rates.mean())
            held = [interval(k, n)[0] - 1e-12 <= target <= interval(k, n)[1] + 1e-12 for k in range(n + 1)]
            described = f"{questions} questions x {'/'.join(map(str, repeats))}"
            worst_mix = min(worst_mix, (float(chances[held].sum()), described))
        print(f"| {name} | {worst_one[0]:.1%} | {worst_one[1]} | {worst_mix[0]:.1%} | {worst_mix[1]} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicates", type=int, default=150, help="probes per fixed-size cell")
    parser.add_argument("--sequential-replicates", type=int, default=80, help="runs per sequential cell")
    parser.add_argument("--rows", type=int, default=25, help="weakest cells printed")
    parser.add_argument("--smoke", action="store_true", help="a second's run: a few small cells")
    parser.add_argument(
        "--confirm",
        type=int,
        default=5,
        help="cells under 92%% are drawn again with this many times the probes",
    )
    args = parser.parse_args()
    started = time.perf_counter()
    rng = np.random.default_rng(SEED)
    if args.smoke:
        args.replicates, args.sequential_replicates, args.confirm = 8, 4, 1
        cells = fixed_cells(8, rng, SHAPES[:1], RATES[:2], ICCS[:1])
        cells += sequential_cells(4, rng, ((4, 4),), SEQUENTIAL_RATES[:1], ICCS[:1])
    else:
        cells = fixed_cells(args.replicates, rng, SHAPES, RATES, ICCS)
        cells += sequential_cells(args.sequential_replicates, rng, SEQUENTIAL, SEQUENTIAL_RATES, (0.0, 0.5))
    header = (
        "| interval | design | ICC | rates | coverage | median width (pts) | single points | probes |\n"
        "|---|---|---:|---|---:|---:|---:|---:|"
    )
    print(f"seed {SEED}, 95% intervals, {len(cells)} cells; weakest {args.rows} first:")
    print(header)
    for cell in sorted(cells, key=lambda c: c.coverage)[: args.rows]:
        print(cell.row())
    print("\neach interval's weakest cell, and its single points over the whole sweep:")
    print("| interval | weakest cell | coverage | cells | cells under 92% | single points |")
    print("|---|---|---:|---:|---:|---:|")
    for kind in dict.fromkeys(c.kind for c in cells):
        mine = [c for c in cells if c.kind == kind]
        worst = min(mine, key=lambda c: c.coverage)
        points = sum(c.points for c in mine)
        under = sum(c.coverage < 0.92 for c in mine)
        print(
            f"| {kind} | {worst.design}, ICC {worst.icc:g}, {worst.rates} | {worst.coverage:.1%} | "
            f"{len(mine)} | {under} | {points} |"
        )
    confirm(cells, args)
    exact_per_arm(np.random.default_rng(SEED + 2), *((50, 12) if args.smoke else (5000, 40)))
    print(f"\ntook {time.perf_counter() - started:.0f} s")


def confirm(cells: list[Cell], args: argparse.Namespace) -> None:
    """Every cell under 92% drawn again from a fresh seed with `--confirm` times the probes: a cell
    that falls short by chance comes back, one that truly falls short stays short."""
    short = [c for c in cells if c.coverage < 0.92 and c.source]
    if not short or args.confirm < 1:
        return
    rng = np.random.default_rng(SEED + 1)
    print(f"\ncells under 92% drawn again (seed {SEED + 1}, {args.confirm} times the probes):")
    print("| interval | design | ICC | rates | coverage | median width (pts) | single points | probes |")
    print("|---|---|---:|---|---:|---:|---:|---:|")
    for cell in short:
        kind, design, rates, icc = cell.source
        if kind == "fixed":
            again = fixed_cells(args.replicates * args.confirm, rng, [design], [rates], [icc])
        else:
            again = sequential_cells(args.sequential_replicates * args.confirm, rng, [design], [rates], [icc])
        same = next(c for c in again if (c.kind, c.design, c.rates) == (cell.kind, cell.design, cell.rates))
        print(same.row())


if __name__ == "__main__":
    main()
