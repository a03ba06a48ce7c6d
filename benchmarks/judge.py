"""Verdicts on a judged metric with a noisy judge: false alarms, power and interval coverage.

A seeded simulation. Each case has a true pass rate drawn from a Beta with the given mean and
ICC; each sample truly passes with its case's rate; a judge then grades it, right with
probability Se on a true pass and Sp on a true fail. The comparison's paired test (the
stratified exact conditional test the verdicts use) runs on the judged outcomes.

Tables:
1. False alarms under the null (both arms share every case's true rate): a judge that errs
   alike in both arms keeps them <= alpha; one that errs differently invents a difference,
   and the bias test on hand labels (Fisher, Holm over Se and Sp) is how often it is caught.
2. Power at a true difference: how much judge noise shrinks it.
3. Coverage (label 95%) of the sensitivity and specificity intervals (Clopper-Pearson), of the
   Rogan-Gladen corrected rate (Lang-Reiczigel, at the arm's effective n) and of the corrected
   effect as `probe compare` computes it (the paired verdict's own effect and the interval beside
   it, asked at 97.5%, over Youden's J interval at 97.5%; its target is the drawn cases' mean
   difference), weakest cells first.

    python benchmarks/judge.py              # about a minute on one core
    python benchmarks/judge.py --runs 200   # quicker, noisier
"""

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
from tabulate import tabulate

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from promptprobe.stats.intervals import clustered_rate  # noqa: E402
from promptprobe.stats.judge import (  # noqa: E402
    accuracy,
    bias,
    corrected_effect,
    corrected_rate,
    effect_level,
)
from promptprobe.stats.simulation import question_rates  # noqa: E402
from promptprobe.stats.tests import decides, stratified_exact  # noqa: E402
from promptprobe.stats.verdict import paired_verdict  # noqa: E402

SEED = 20261202
ALPHA = 0.05


def judged(rng: np.random.Generator, truth: np.ndarray, se: float, sp: float) -> np.ndarray:
    """The judge's grade of each true outcome."""
    right = np.where(truth, rng.random(truth.shape) < se, rng.random(truth.shape) < sp)
    return np.where(right, truth, ~truth)


def labels(rng: np.random.Generator, count: int, rate: float, se: float, sp: float) -> list:
    """Hand labels of `count` samples of an arm whose true rate is `rate`: (judged, label) pairs."""
    truth = rng.random(count) < rate
    return list(zip(judged(rng, truth, se, sp).tolist(), truth.tolist(), strict=True))


def arm_outcomes(rng, case_rates: np.ndarray, repeats: int, se: float, sp: float) -> np.ndarray:
    truth = rng.random((len(case_rates), repeats)) < case_rates[:, None]
    return judged(rng, truth, se, sp)


def paired_p(a: np.ndarray, b: np.ndarray) -> float:
    cases = [(int(x.sum()), x.size, int(y.sum()), y.size) for x, y in zip(a, b, strict=True)]
    return stratified_exact(cases).p_value


def null_table(runs: int, cases: int, repeats: int, label_count: int) -> list[list]:
    rng = np.random.default_rng(SEED)
    rows = []
    for rate in (0.5, 0.8):
        for error in (0.05, 0.1, 0.2, 0.3):
            for name, judge_a, judge_b in (
                ("alike", (1 - error, 1 - error), (1 - error, 1 - error)),
                ("B judged leniently", (1 - error, 1 - error), (1 - error, 1 - error - 0.15)),
            ):
                alarms = caught = 0
                for _ in range(runs):
                    case_rates = question_rates(rng, rate, 0.2, (cases,))
                    a = arm_outcomes(rng, case_rates, repeats, *judge_a)
                    b = arm_outcomes(rng, case_rates, repeats, *judge_b)
                    alarms += decides(paired_p(a, b), ALPHA)
                    acc_a = accuracy(labels(rng, label_count, rate, *judge_a))
                    acc_b = accuracy(labels(rng, label_count, rate, *judge_b))
                    caught += bias(acc_a, acc_b, ALPHA).biased
                share = alarms / runs
                rows.append([f"{rate:.0%}", f"{error:.0%}", name, f"{share:.1%} ± {_se(share, runs):.1%}",
                             f"{caught / runs:.0%}"])
    return rows


def power_table(runs: int, cases: int, repeats: int) -> list[list]:
    rng = np.random.default_rng(SEED + 1)
    rows = []
    for p1, p2 in ((0.7, 0.9), (0.5, 0.75)):
        for error in (0.0, 0.05, 0.1, 0.2, 0.3):
            hits = 0
            for _ in range(runs):
                rates_a = question_rates(rng, p1, 0.2, (cases,))
                rates_b = np.clip(rates_a + (p2 - p1), 0, 1)
                a = arm_outcomes(rng, rates_a, repeats, 1 - error, 1 - error)
                b = arm_outcomes(rng, rates_b, repeats, 1 - error, 1 - error)
                hits += decides(paired_p(a, b), ALPHA) and b.mean() > a.mean()
            rows.append([f"{p1:.0%} vs {p2:.0%}", f"{error:.0%}", f"{hits / runs:.0%}"])
    return rows


def _se(share: float, runs: int) -> float:
    return math.sqrt(max(share * (1 - share), 1 / runs) / runs)


def _inside(interval, value: float) -> bool:
    return interval is not None and interval[0] - 1e-12 <= value <= interval[1] + 1e-12


def coverage_table(runs: int, cases: int, repeats: int) -> list[list]:
    rng = np.random.default_rng(SEED + 2)
    rows = []
    for label_count in (20, 60):
        for se, sp in ((0.95, 0.95), (0.85, 0.9), (0.7, 0.8)):
            for rate, shift in ((0.3, 0.3), (0.8, 0.15)):
                hits = {"sensitivity": 0, "specificity": 0, "corrected rate": 0, "corrected effect": 0}
                seen = dict.fromkeys(hits, 0)
                widths: dict[str, list[float]] = {key: [] for key in hits}
                for _ in range(runs):
                    rates_a = question_rates(rng, rate, 0.2, (cases,))
                    truth_a = rng.random((cases, repeats)) < rates_a[:, None]
                    truth_b = rng.random((cases, repeats)) < np.clip(rates_a + shift, 0, 1)[:, None]
                    a, b = judged(rng, truth_a, se, sp), judged(rng, truth_b, se, sp)
                    acc = accuracy(labels(rng, label_count, 0.5, se, sp))
                    arm = clustered_rate(a.sum(axis=1).tolist(), [repeats] * cases)
                    estimates = {
                        "sensitivity": (acc.sensitivity.interval, se),
                        "specificity": (acc.specificity.interval, sp),
                        "corrected rate": (corrected_rate(arm.rate, arm.n_eff, acc).interval, rate),
                    }
                    # As probe compare does it: the paired verdict's own effect and interval at 1 - alpha/2.
                    verdict = paired_verdict([(int(x.sum()), x.size) for x in a],
                                             [(int(y.sum()), y.size) for y in b], ALPHA)
                    effect = verdict.effect.estimate
                    judged_ci = verdict.interval_at(1 - effect_level(1 - ALPHA))
                    true_effect = float(np.clip(rates_a + shift, 0, 1).mean() - rates_a.mean())
                    estimates["corrected effect"] = (corrected_effect(effect, judged_ci, acc).interval,
                                                     true_effect)
                    for key, (interval, value) in estimates.items():
                        if interval is None:
                            continue
                        seen[key] += 1
                        hits[key] += _inside(interval, value)
                        widths[key].append(interval[1] - interval[0])
                for key in hits:
                    share = hits[key] / max(seen[key], 1)
                    rows.append([key, label_count, f"{se:.2f}/{sp:.2f}", f"{rate:.0%} +{shift * 100:.0f}",
                                 share, f"{share:.1%} ± {_se(share, max(seen[key], 1)):.1%}",
                                 f"{np.median(widths[key]) * 100:.0f}" if widths[key] else "-"])
    rows.sort(key=lambda row: row[4])
    return [row[:4] + row[5:] for row in rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000, help="simulated runs per cell")
    parser.add_argument("--cases", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--labels", type=int, default=40, help="hand labels per arm for the bias test")
    args = parser.parse_args()
    started = time.perf_counter()
    print(f"{args.cases} cases x {args.repeats} repeats, ICC 0.2, alpha {ALPHA}, {args.runs} runs a cell, "
          f"seed {SEED}\n")
    print("1. False alarms under the null (both arms' true rates equal); 'B judged leniently': the")
    print("   judge's specificity is 15 points lower on B; caught = how often the bias test on")
    print(f"   {args.labels} hand labels an arm decides\n")
    headers = ["true rate", "judge error", "judge", "false alarms", "caught"]
    print(tabulate(null_table(args.runs, args.cases, args.repeats, args.labels), headers=headers,
                   tablefmt="github"))
    print("\n2. Power of the paired test on the judged metric (judge error alike in both arms)\n")
    print(tabulate(power_table(args.runs, args.cases, args.repeats),
                   headers=["true rates", "judge error", "power"], tablefmt="github"))
    print("\n3. Coverage of the 95% intervals, weakest first (each hand-labelled output truly passes")
    print("   with probability 1/2)\n")
    print(tabulate(coverage_table(args.runs, args.cases, args.repeats),
                   headers=["interval", "labels", "Se/Sp", "rate, shift", "coverage", "median width (pts)"],
                   tablefmt="github"))
    print(f"\n{time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
