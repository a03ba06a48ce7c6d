"""How often `probe compare --all --fail-if-worse` fails a candidate that changed nothing.

The arms are drawn from one arm's own recorded samples: the demo's exception-only prompt asked
30 times per question through the demo target (12 questions), each sample with its 13 metric
outcomes, so the metrics keep their real correlations (header_absent and header_present are
nearly complements, status_correct follows the header...). A simulated probe draws its
questions (with replacement from the 12) and, per question and arm, samples from that
question's 30 recorded ones; both arms alike, so any "worse" is a false alarm.

- paired fixed-n: 3 and 10 repeats; every metric's stratified exact p; the gate fails when a
  metric is decided worse at its own p (no correction), at Bonferroni's m·p, at Holm's adjusted
  p (the rule before), or at the Westfall-Young step-down min-P adjusted p (shipped:
  promptprobe.stats.multiplicity, from each probe's joint outcome patterns, as `compare` does);
  beside them a single-step min-P with 200 relabellings per probe (the ceiling it was held to).
- sequential: rounds until the rule decides header_present or reaches its cap (--detect 15);
  header_present's p is the sequential rule's own (valid at its stop), the others' the fixed-n p
  on the rounds run; a family with a sequential p is adjusted by Holm (shipped there too).
- power (the other side of the coin): B's samples drawn from the always-header prompt's pool
  with probability 0.25 per sample (a small real improvement on the header metrics, a small
  real change elsewhere) and A's from exception-only; the share of probes whose gate calls
  "worse" on a metric where B truly got worse, and how often a real improvement is decided.

    .venv/bin/python benchmarks/gate_family.py [--trials 2000] [--pool-repeats 30]
"""

import argparse
import math
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

from promptprobe.checks import METRICS
from promptprobe.demo import DemoServer, demo_inputs
from promptprobe.engine.run import ProbeRun, RunOptions
from promptprobe.jsonio import read_jsonl
from promptprobe.models import parse_model_spec
from promptprobe.stats.multiplicity import westfall_young
from promptprobe.stats.power import stratified_p_batch
from promptprobe.stats.sequential import rounds_for_power, stops_and_p_values
from promptprobe.stats.tests import holm

SEED = 20261130
POOL_REPEATS = 30
ALPHA = 0.05


def record_pools(folder: Path) -> dict[str, dict[str, np.ndarray]]:
    """Per prompt, per metric: an array (cases, POOL_REPEATS) of 0/1 outcomes (NaN: n/a)."""
    config, probeset, prompts = demo_inputs()
    server = DemoServer("127.0.0.1", 0).start()
    try:
        model = parse_model_spec(f"openai:acme-helpdesk@{server.url}")
        options = RunOptions(repeats=POOL_REPEATS, concurrency=8, runs_dir=folder, seed=3)
        outcome = ProbeRun(probeset, prompts, [model], config, options).execute()
    finally:
        server.stop()
    cases = [c.id for c in probeset.cases]
    pools: dict[str, dict[str, np.ndarray]] = {}
    for sample in read_jsonl(outcome.path / "samples.jsonl"):
        prompt = pools.setdefault(
            sample["prompt"], {m: np.full((len(cases), POOL_REPEATS), np.nan) for m in METRICS}
        )
        for name, hit in (sample.get("outcomes") or {}).items():
            prompt[name][cases.index(sample["case_id"]), sample["repeat"] - 1] = float(hit)
    return pools


def draw_samples(
    pool: dict[str, np.ndarray], rng, trials: int, picks: np.ndarray, repeats: int, mix=None, other=None
):
    """Per metric: outcomes (trials, cases, repeats) of m draws per (trial, question) from the pool
    (NaN where the metric does not apply to the question)."""
    cases = picks.shape[1]
    index = rng.integers(0, POOL_REPEATS, size=(trials, cases, repeats))
    use_other = rng.random((trials, cases, repeats)) < mix if mix else None
    samples = {}
    for name, outcomes in pool.items():
        values = outcomes[picks[..., None], index]
        if use_other is not None:
            values = np.where(use_other, other[name][picks[..., None], index], values)
        samples[name] = values
    return samples


def draw(pool, rng, trials, picks, repeats, mix=None, other=None):
    """Per metric: counts (trials, cases) of those draws."""
    return {n: v.sum(axis=2) for n, v in draw_samples(pool, rng, trials, picks, repeats, mix, other).items()}


def min_p_adjusted(samples_a, samples_b, names, trial, repeats, rng, permutations=200):
    """Westfall-Young min-P adjusted p-values of one probe: the arms' samples are exchanged
    within each question (the same exchange for every metric, so their correlation is kept),
    and each metric's p is compared with the smallest p over the metrics in each exchange."""
    cases = samples_a[names[0]].shape[1]
    chosen = np.argsort(rng.random((permutations, cases, 2 * repeats)), axis=2)[:, :, :repeats]
    minimum = np.ones(permutations)
    for name in names:
        pooled = np.concatenate([samples_a[name][trial], samples_b[name][trial]], axis=1)  # (cases, 2m)
        keep = ~np.isnan(pooled[:, 0])
        if not keep.any():
            continue
        taken = np.take_along_axis(np.broadcast_to(pooled, (permutations, *pooled.shape)), chosen, axis=2)
        counts_a = taken.sum(axis=2)[:, keep].astype(int)
        counts_b = (pooled.sum(axis=1)[keep][None, :] - counts_a).astype(int)
        values, _ = stratified_p_batch(counts_a, counts_b, repeats)
        minimum = np.minimum(minimum, values)
    return lambda p: (1 + np.sum(minimum <= p * (1 + 1e-9))) / (1 + permutations)


def shipped_adjusted(samples_a, samples_b, names, trial):
    """The shipped adjustment of one probe's family: Westfall-Young from its joint outcome patterns
    (per case and arm, how many samples showed each vector of metric outcomes)."""
    cases = samples_a[names[0]].shape[1]
    patterns = []
    for case in range(cases):
        sides = []
        for samples in (samples_a, samples_b):
            block = np.stack([samples[n][trial, case] for n in names], axis=1)  # (repeats, metrics)
            sides.append(Counter(tuple(None if math.isnan(v) else int(v) for v in row) for row in block))
        patterns.append(tuple(sides))
    return np.array(westfall_young(patterns, len(names)).p_adjusted)


def shipped_fails(samples_a, samples_b, names, p, sign, keep=None):
    """Per trial: does the gate fail at the shipped adjusted p (on the metrics in `keep`)?"""
    worse_direction = np.array([-1 if METRICS[n].higher_is_better else 1 for n in names])
    keep = np.ones(len(names), dtype=bool) if keep is None else keep
    fails = np.zeros(len(p), dtype=bool)
    adjusted = np.empty_like(p)
    for t in range(len(p)):
        adjusted[t] = shipped_adjusted(samples_a, samples_b, names, t)
        present = ~np.isnan(p[t])
        decided = present & keep & (adjusted[t] <= ALPHA * (1 + 1e-9)) & (sign[t] == worse_direction)
        fails[t] = decided.any()
    return fails, adjusted


def paired_family(counts_a, counts_b, repeats):
    """(trials, metrics) p-values and the sign of B - A per metric (NaN where nothing applies)."""
    names = [n for n in METRICS if not np.isnan(counts_a[n]).all()]
    trials = next(iter(counts_a.values())).shape[0]
    p = np.full((trials, len(names)), np.nan)
    sign = np.zeros((trials, len(names)))
    for j, name in enumerate(names):
        a, b = counts_a[name], counts_b[name]
        for t in range(trials):
            keep = ~np.isnan(a[t])
            if not keep.any():
                continue
            value, direction = stratified_p_batch(
                a[t : t + 1, keep].astype(int), b[t : t + 1, keep].astype(int), repeats
            )
            p[t, j], sign[t, j] = value[0], direction[0]
    return names, p, sign


def gate_fails(names, p, sign, rule):
    """Per trial: does the gate fail (some metric decided worse)?"""
    worse_direction = np.array([-1 if METRICS[n].higher_is_better else 1 for n in names])
    trials, m = p.shape
    fails = np.zeros(trials, dtype=bool)
    for t in range(trials):
        present = ~np.isnan(p[t])
        raw = p[t]
        if rule == "none":
            adjusted = raw
        elif rule == "bonferroni":
            adjusted = np.minimum(1, raw * present.sum())
        else:
            adjusted = adjusted_p(raw[None, :], rule)[0]
        decided = present & (adjusted <= ALPHA * (1 + 1e-9)) & (sign[t] == worse_direction)
        fails[t] = decided.any()
    return fails


def main() -> None:
    global POOL_REPEATS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=2000)
    # The test suite's smoke run records fewer repeats: the demo run of the pools is most of its time.
    parser.add_argument("--pool-repeats", type=int, default=POOL_REPEATS, help="recorded repeats a question")
    args = parser.parse_args()
    POOL_REPEATS = args.pool_repeats
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        pools = record_pools(Path(folder))
    null_pool = pools["exception-only"]
    cases = next(iter(null_pool.values())).shape[0]
    rng = np.random.default_rng(SEED)
    error = 1.96 * math.sqrt(0.05 * 0.95 / args.trials)
    print(
        f"{args.trials} simulated probes per row, seed {SEED}, alpha {ALPHA}; arms drawn from the demo's "
        f"exception-only samples ({cases} questions x {POOL_REPEATS} recorded repeats, 13 metrics)"
    )
    print(f"\nfamily-wise false alarms of --all --fail-if-worse (Monte Carlo error at 5%: ±{error:.1%}):")
    ceiling = min(args.trials, 400)
    columns = [
        "design",
        "repeats",
        "metrics tested",
        "no correction",
        "Bonferroni",
        "Holm (before)",
        "Westfall-Young (shipped)",
    ]
    print("| " + " | ".join([*columns, f"min-P permutation (the ceiling, {ceiling} probes)"]) + " |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for repeats in (3, 10):
        picks = rng.integers(0, cases, size=(args.trials, cases))
        samples_a = draw_samples(null_pool, rng, args.trials, picks, repeats)
        samples_b = draw_samples(null_pool, rng, args.trials, picks, repeats)
        a = {n: v.sum(axis=2) for n, v in samples_a.items()}
        b = {n: v.sum(axis=2) for n, v in samples_b.items()}
        names, p, sign = paired_family(a, b, repeats)
        shares = [gate_fails(names, p, sign, rule).mean() for rule in ("none", "bonferroni", "holm")]
        shipped, _ = shipped_fails(samples_a, samples_b, names, p, sign)
        min_p = min_p_gate(samples_a, samples_b, names, p, sign, repeats, rng, ceiling)
        cells = " | ".join(f"{x:.1%}" for x in [*shares, shipped.mean(), min_p])
        print(f"| paired | {repeats} | {len(names)} | {cells} |", flush=True)
    sequential_rows(null_pool, rng, args.trials, cases)
    power_rows(pools, rng, args.trials, cases)
    print(f"\ntook {time.perf_counter() - started:.0f} s")


def sequential_rows(pool, rng, trials, cases):
    cap = rounds_for_power(0.15, cases).rounds
    picks = rng.integers(0, cases, size=(trials, cases))
    # Per round: the discordant pairs of header_present (a fresh pair of samples per question).
    index_a = rng.integers(0, POOL_REPEATS, size=(trials, cases, cap))
    index_b = rng.integers(0, POOL_REPEATS, size=(trials, cases, cap))
    primary = pool["header_present"]
    out_a = primary[picks[..., None], index_a]
    out_b = primary[picks[..., None], index_b]
    per_round_b = ((out_b == 1) & (out_a == 0)).sum(axis=1)
    per_round = per_round_b + ((out_a == 1) & (out_b == 0)).sum(axis=1)
    decided, _, p_at_stop = stops_and_p_values(per_round, per_round_b, ALPHA, cap, 2)  # --min-rounds 2
    stop = np.where(decided > 0, decided, cap)
    b_higher, discordant = np.cumsum(per_round_b, axis=1), np.cumsum(per_round, axis=1)
    shares = {rule: 0 for rule in ("none", "bonferroni", "holm")}
    for rounds in np.unique(stop):
        rows = np.nonzero(stop == rounds)[0]
        # The other metrics' counts over the rounds run: draws of the same per-question pools.
        counts_a = {n: draw_rows(pool[n], picks[rows], index_a[rows, :, :rounds]) for n in METRICS}
        counts_b = {n: draw_rows(pool[n], picks[rows], index_b[rows, :, :rounds]) for n in METRICS}
        names, p, sign = paired_family(counts_a, counts_b, int(rounds))
        j = names.index("header_present")
        p[:, j] = p_at_stop[rows]
        sign[:, j] = np.sign(2 * b_higher[rows, rounds - 1] - discordant[rows, rounds - 1])
        for rule in shares:
            shares[rule] += gate_fails(names, p, sign, rule).sum()
    print(
        f"| sequential (cap {cap} rounds, --detect 15) | to the stop | 13 | "
        + " | ".join(f"{shares[r] / trials:.1%}" for r in ("none", "bonferroni", "holm"))
        + f" | {shares['holm'] / trials:.1%} (Holm) | - |",
        flush=True,
    )


def min_p_gate(samples_a, samples_b, names, p, sign, repeats, rng, trials):
    """The share of the first `trials` probes whose gate fails at min-P adjusted p-values."""
    worse_direction = np.array([-1 if METRICS[n].higher_is_better else 1 for n in names])
    fails = 0
    for t in range(trials):
        adjust = min_p_adjusted(samples_a, samples_b, names, t, repeats, rng)
        present = ~np.isnan(p[t])
        fails += any(
            present[j] and sign[t, j] == worse_direction[j] and adjust(p[t, j]) <= ALPHA
            for j in range(len(names))
        )
    return fails / trials


def draw_rows(outcomes, picks, index):
    return outcomes[picks[..., None], index].sum(axis=2)


def power_rows(pools, rng, trials, cases):
    print("\npower against a real change: B mixes in always-header samples with probability 0.25, 3 repeats")
    print("| rule | gate fails on a metric B truly worsened | header_present decided B better |")
    print("|---|---:|---:|")
    picks = rng.integers(0, cases, size=(trials, cases))
    base, better = pools["exception-only"], pools["always-header"]
    samples_a = draw_samples(base, rng, trials, picks, 3)
    samples_b = draw_samples(base, rng, trials, picks, 3, mix=0.25, other=better)
    a = {n: v.sum(axis=2) for n, v in samples_a.items()}
    b = {n: v.sum(axis=2) for n, v in samples_b.items()}
    names, p, sign = paired_family(a, b, 3)
    # Which metrics truly got worse: the mixed-in prompt's mean is worse in the metric's direction.
    truly_worse = [
        (np.nanmean(better[n]) - np.nanmean(base[n])) * (1 if METRICS[n].higher_is_better else -1) < 0
        for n in names
    ]
    j = names.index("header_present")
    labels = {"none": "none", "bonferroni": "Bonferroni", "holm": "Holm (before)"}
    for rule in ("none", "bonferroni", "holm"):
        sub_names = [n for n, w in zip(names, truly_worse, strict=True) if w]
        keep = [i for i, w in enumerate(truly_worse) if w]
        fails = gate_fails(sub_names, p[:, keep], sign[:, keep], rule) if keep else np.zeros(trials, bool)
        adjusted = adjusted_p(p, rule)
        improved = ((adjusted[:, j] <= ALPHA * (1 + 1e-9)) & (sign[:, j] > 0)).mean()
        print(f"| {labels[rule]} | {fails.mean():.1%} | {improved:.1%} |", flush=True)
    fails, adjusted = shipped_fails(samples_a, samples_b, names, p, sign, np.array(truly_worse))
    improved = ((adjusted[:, j] <= ALPHA * (1 + 1e-9)) & (sign[:, j] > 0)).mean()
    print(f"| Westfall-Young (shipped) | {fails.mean():.1%} | {improved:.1%} |", flush=True)
    ceiling = min(trials, 400)
    improved = 0
    for t in range(ceiling):
        adjust = min_p_adjusted(samples_a, samples_b, names, t, 3, rng)
        improved += sign[t, j] > 0 and adjust(p[t, j]) <= ALPHA
    print(f"| min-P permutation (the ceiling, {ceiling} probes) | - | {improved / ceiling:.1%} |")


def adjusted_p(p, rule):
    out = np.empty_like(p)
    for t in range(len(p)):
        present = ~np.isnan(p[t])
        if rule == "none":
            out[t] = p[t]
        elif rule == "bonferroni":
            out[t] = np.minimum(1, p[t] * present.sum())
        else:
            values = holm([x if ok else None for x, ok in zip(p[t], present, strict=True)])
            out[t] = [np.nan if x is None else x for x in values]
    return out


if __name__ == "__main__":
    main()
