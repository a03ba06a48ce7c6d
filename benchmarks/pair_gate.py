"""How often `--fail-if-worse` fails when K arms are gated at once, and how often it catches the
one arm that got worse: `probe compare RUN1 RUN2` (each arm of one run against the arm of the
same name in the other: every pair one family, as the views adjust it), against gating each
pair on its own (what running one `probe compare` per arm did), and against Bonferroni's
alpha / K per pair (what the gate script did for several prompts, one compare each, before
`probe gate` made every prompt, model and metric one family).

Each simulated pair is paired (the same questions on both sides): per-case rates drawn from a
Beta with the given mean and ICC, both arms asked `repeats` times per case; under the null both
arms of every pair share their per-case rates; for power one pair's candidate loses 20 points
on every case. Results go through the same compare_sides and adjust that `probe compare` uses.

    .venv/bin/python benchmarks/pair_gate.py [--trials 2000]
"""

import argparse
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent / "src"))
from promptprobe.comparison import Side, adjust, compare_sides  # noqa: E402

SEED = 20261201
ALPHA = 0.05
CASES = 12
REPEATS = 3


def case_rates(rng: random.Random, mean: float, icc: float, cases: int) -> list[float]:
    """Per-case rates with the given mean and intra-case correlation (Beta, ICC = 1 / (a + b + 1))."""
    if icc <= 0:
        return [mean] * cases
    strength = 1 / icc - 1
    return [rng.betavariate(mean * strength, (1 - mean) * strength) for _ in range(cases)]


def side(rng: random.Random, rates: list[float], label: str) -> Side:
    per_case = {}
    for i, rate in enumerate(rates):
        k = sum(rng.random() < rate for _ in range(REPEATS))
        per_case[f"c{i}"] = [k, REPEATS, 0]
    return Side(label, per_case, {f"c{i}": f"question {i}" for i in range(len(rates))}, name=label)


def one_gate(rng: random.Random, pairs: int, mean: float, icc: float, drop: float) -> dict[str, bool]:
    """Whether each rule fails the gate; with `drop`, whether it fails on the worsened pair 0."""
    results = []
    for pair in range(pairs):
        rates = case_rates(rng, mean, icc, CASES)
        worse = [max(0.0, r - drop) for r in rates] if pair == 0 else rates
        result = compare_sides(side(rng, rates, "A"), side(rng, worse, "B"), "header_present", ALPHA,
                               exact=False, hints=False)
        results.append(result)
    own = [r["worse"] for r in results]
    bonferroni = [
        r["p_value"] <= ALPHA / pairs * (1 + 1e-9) and r["effect"]["estimate"] < 0 for r in results
    ]
    adjust(results, ALPHA)  # the family, as probe compare RUN1 RUN2 adjusts it
    family = [r["worse"] for r in results]
    if drop:
        return {"separate": own[0], "family": family[0], "bonferroni": bonferroni[0]}
    return {"separate": any(own), "family": any(family), "bonferroni": any(bonferroni)}


def rate(rng: random.Random, trials: int, **cell: float) -> dict[str, float]:
    counts = {"separate": 0, "family": 0, "bonferroni": 0}
    for _ in range(trials):
        for rule, failed in one_gate(rng, **cell).items():
            counts[rule] += failed
    return {rule: count / trials for rule, count in counts.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=2000)
    args = parser.parse_args()
    rng = random.Random(SEED)
    pct = "{:.1%}".format
    print(f"{args.trials} simulated gates a row, seed {SEED}, alpha {ALPHA}, {CASES} cases x {REPEATS} "
          "repeats per arm, header_present")
    print("false alarms (no arm changed; Monte Carlo error at 5%: "
          f"±{1.96 * (0.05 * 0.95 / args.trials) ** 0.5:.1%}):")
    print("| pairs gated | rate | ICC | each pair on its own (old) | one family (probe compare RUN1 RUN2) "
          "| alpha / K each (the old gate, several prompts) |")
    print("|---:|---:|---:|---:|---:|---:|")
    for pairs in (2, 4):
        for mean, icc in ((0.5, 0.5), (0.8, 0.5), (0.8, 0.0)):
            found = rate(rng, args.trials, pairs=pairs, mean=mean, icc=icc, drop=0.0)
            print(f"| {pairs} | {mean} | {icc} | {pct(found['separate'])} | {pct(found['family'])} "
                  f"| {pct(found['bonferroni'])} |")
    print()
    print("power: one arm's candidate 20 points worse on every case, the others unchanged "
          "(the gate fails on it):")
    print("| pairs gated | rate | ICC | each pair on its own (old) | one family | alpha / K each |")
    print("|---:|---:|---:|---:|---:|---:|")
    for pairs in (2, 4):
        for mean, icc in ((0.8, 0.5), (0.8, 0.0)):
            found = rate(rng, args.trials, pairs=pairs, mean=mean, icc=icc, drop=0.2)
            print(f"| {pairs} | {mean} | {icc} | {pct(found['separate'])} | {pct(found['family'])} "
                  f"| {pct(found['bonferroni'])} |")


if __name__ == "__main__":
    main()
