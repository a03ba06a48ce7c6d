"""Several metrics at once: Westfall-Young min-P over relabellings within cases, against a brute-force
enumeration of every relabelling, its family-wise rate exhaustively, the joint outcome patterns the
counts pass keeps, and the fall-back to Holm."""

import itertools
import json
import subprocess
import sys
from collections import Counter

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from promptprobe.cli import main
from promptprobe.counts import build_counts
from promptprobe.stats.multiplicity import HOLM, WESTFALL_YOUNG, adjust, raw_p_values, westfall_young
from promptprobe.stats.tests import holm, stratified_exact

# A sample is a tuple of metric outcomes: 1, 0, or None where the metric is outside it.


def pattern_counts(samples):
    return Counter(samples)


def labellings(cases):
    """Every relabelling of each case's samples that keeps, for every set of metrics that apply to
    a sample, how many such samples A had (each equally likely): yields per case (A's, B's)."""
    per_case = []
    for in_a, in_b in cases:
        pooled = list(in_a) + list(in_b)
        groups: dict[tuple, list[int]] = {}
        for i, sample in enumerate(pooled):
            groups.setdefault(tuple(v is None for v in sample), []).append(i)
        a_count = {key: sum(1 for i in members if i < len(in_a)) for key, members in groups.items()}
        options = []
        for key, members in groups.items():
            options.append([set(c) for c in itertools.combinations(members, a_count[key])])
        per_case.append([(pooled, set().union(*choice)) for choice in itertools.product(*options)])
    for choice in itertools.product(*per_case):
        yield [
            ([p[i] for i in chosen], [p[i] for i in range(len(p)) if i not in chosen]) for p, chosen in choice
        ]


def metric_p_values(cases, metrics):
    ps = []
    for j in range(metrics):
        cells = []
        for in_a, in_b in cases:
            a = [s[j] for s in in_a if s[j] is not None]
            b = [s[j] for s in in_b if s[j] is not None]
            if a or b:
                cells.append((sum(a), len(a), sum(b), len(b)))
        ps.append(stratified_exact(cells).p_value)
    return ps


def brute_force(cases, metrics):
    observed = np.array(metric_p_values(cases, metrics))
    every = np.array([metric_p_values(c, metrics) for c in labellings(cases)])
    order = np.argsort(observed, kind="stable")
    shares = [np.mean(every[:, order[k:]].min(axis=1) <= observed[order[k]] * (1 + 1e-7)) for k in range(metrics)]
    stepped = np.minimum(1, np.maximum.accumulate(np.maximum(shares, observed[order])))
    out = np.empty(metrics)
    out[order] = stepped
    return observed, out


TABLES = [
    # two metrics, nearly complements (header_present / header_absent), three cases
    [
        ([(1, 0), (1, 0), (0, 1)], [(0, 1), (0, 0)]),
        ([(1, 0), (1, 0)], [(0, 1), (0, 1), (1, 0)]),
        ([(1, 0), (0, 0)], [(0, 1), (0, 1)]),
    ],
    # a metric that does not apply to a whole case (refusal_recall on an answerable case)
    [
        ([(1, 1, None), (1, 0, None)], [(0, 0, None), (0, 1, None)]),
        ([(1, 1, 1), (1, 1, 1)], [(0, 0, 0), (1, 1, 0)]),
        ([(0, 1, 1), (1, 1, 0)], [(0, 0, 0)]),
    ],
    # a user check that does not apply to some samples of a case: relabelled within its stratum
    [
        ([(1, None), (1, 1), (0, 0)], [(0, None), (0, 0), (1, 1)]),
        ([(1, 1), (1, None)], [(0, 0), (0, None), (0, 1)]),
    ],
]


@pytest.mark.parametrize("cases", TABLES)
def test_westfall_young_matches_every_relabelling(cases):
    metrics = len(cases[0][0][0])
    observed, expected = brute_force(cases, metrics)
    patterns = [(pattern_counts(a), pattern_counts(b)) for a, b in cases]
    found = westfall_young(patterns, metrics)
    assert found.exact and found.method == WESTFALL_YOUNG
    assert found.raw == pytest.approx(observed, abs=1e-12)
    assert found.p_adjusted == pytest.approx(expected, abs=1e-12)
    if all(len({tuple(v is None for v in s) for s in a + b}) == 1 for a, b in cases):
        # Relabelled within whole cases, each metric's p is exact under the relabelling, so the
        # min-P is never above Holm (Bonferroni bounds it). Within strata a metric's count in a
        # case is a sum of hypergeometrics, not the one its p assumed: no such bound.
        assert all(w <= h + 1e-12 for w, h in zip(found.p_adjusted, holm(list(observed)), strict=True))


def test_drawn_relabellings_approach_the_exact_answer_and_repeat():
    cases = TABLES[1]
    patterns = [(pattern_counts(a), pattern_counts(b)) for a, b in cases]
    exact = westfall_young(patterns, 3).p_adjusted
    drawn = westfall_young(patterns, 3, exact_limit=0, permutations=20_000)
    assert not drawn.exact and drawn.permutations == 20_000
    assert drawn.p_adjusted == pytest.approx(exact, abs=0.01)
    assert westfall_young(patterns, 3, exact_limit=0, permutations=20_000).p_adjusted == drawn.p_adjusted


def test_the_family_wise_rate_over_every_relabelling_is_at_most_alpha():
    # Under the null every relabelling is as likely as the one observed: the share of them whose
    # smallest adjusted p decides is the gate's exact family-wise false-alarm rate.
    cases = [
        ([(1, 0), (1, 1)], [(0, 1), (0, 0)]),
        ([(1, 0), (1, 0)], [(0, 1), (1, 1)]),
        ([(1, 1), (0, 1)], [(0, 0), (1, 0)]),
    ]
    alpha = 0.2  # small designs reach no smaller p often enough to test the bound
    every = list(labellings(cases))
    rejected = 0
    for relabelled in every:
        patterns = [(pattern_counts(a), pattern_counts(b)) for a, b in relabelled]
        rejected += min(westfall_young(patterns, 2).p_adjusted) <= alpha * (1 + 1e-9)
    assert 0 < rejected / len(every) <= alpha


outcome = st.sampled_from([0, 1])
samples = st.lists(st.tuples(outcome, outcome, outcome), min_size=1, max_size=5)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(samples, samples), min_size=1, max_size=5))
def test_each_metrics_own_p_is_the_stratified_exact_test(cases):
    patterns = [(pattern_counts(a), pattern_counts(b)) for a, b in cases]
    assert raw_p_values(patterns, 3) == pytest.approx(metric_p_values(cases, 3), abs=1e-12)
    found = westfall_young(patterns, 3, permutations=500)
    assert all(raw <= adj + 1e-12 <= 1 + 1e-12 for raw, adj in zip(found.raw, found.p_adjusted, strict=True))


def test_without_patterns_it_is_holm():
    found = adjust([0.01, 0.04, 0.3, None])
    assert found.method == HOLM and found.p_adjusted == holm([0.01, 0.04, 0.3, None])


# -- the joint patterns the counts pass keeps, and compare ------------------------------------------


def test_patterns_add_up_to_the_counts_in_one_pass_and_in_parallel(demo_run):
    _, run = demo_run
    table = build_counts(run)
    names = table.pattern_metrics
    for arm in table.arms:
        for name, per_case in arm.metrics.items():
            j = names.index(name)
            for case_id, (k, n, _) in per_case.items():
                seen = arm.patterns[case_id]
                assert sum(c for p, c in seen.items() if p[j] is not None) == n
                assert sum(c for p, c in seen.items() if p[j] == 1) == k
        assert sum(sum(seen.values()) for seen in arm.patterns.values()) == arm.samples
    # The parallel pass forks only a process with one thread (a test runner's worker has more):
    # it runs in a fresh interpreter, which reports the patterns it counted.
    script = (
        "import json, sys\n"
        "from promptprobe import counts\n"
        "counts.PARALLEL_BYTES = 0\n"
        "calls = []\n"
        "real = counts._count_in_parallel\n"
        "counts._count_in_parallel = lambda *a: calls.append(1) or real(*a)\n"
        "table = counts.build_counts(sys.argv[1])\n"
        "print(json.dumps({'calls': len(calls), 'arms': [[sorted([[list(p), c] for p, c in seen.items()], key=repr)"
        " for case, seen in sorted(arm.patterns.items())] for arm in table.arms]}))\n"
    )
    done = subprocess.run([sys.executable, "-c", script, str(run)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    parallel = json.loads(done.stdout)
    assert parallel["calls"], "the parallel path did not run"
    serial = [
        [sorted([[list(p), c] for p, c in seen.items()], key=repr) for _, seen in sorted(arm.patterns.items())]
        for arm in table.arms
    ]
    assert parallel["arms"] == json.loads(json.dumps(serial))


def test_compare_all_adjusts_a_paired_family_by_westfall_young(demo_run):
    import json

    _, run = demo_run
    out = CliRunner().invoke(
        main, ["compare", f"{run}#prompt=exception-only", f"{run}#prompt=always-header", "--all", "--json"]
    )
    results = json.loads(out.stdout)["results"]
    assert {r["adjustment"] for r in results} == {WESTFALL_YOUNG}
    raw = [r["p_value"] for r in results]
    adjusted = [r["p_adjusted"] for r in results]
    assert all(r <= a for r, a in zip(raw, adjusted, strict=True))
    # Never above Holm's on the same p-values (up to the draws' Monte Carlo error).
    assert all(a <= h + 0.01 for a, h in zip(adjusted, holm(raw), strict=True))


PARALLEL_AND_SERIAL = (
    "import json, sys\n"
    "from dataclasses import asdict\n"
    "from promptprobe import counts\n"
    "calls = []\n"
    "real = counts._count_in_parallel\n"
    "counts._count_in_parallel = lambda *a: calls.append(1) or real(*a)\n"
    "def table(parallel):\n"
    "    counts.PARALLEL_BYTES, counts.MAX_PROCESSES = (0, 3) if parallel else (1 << 60, 1)\n"
    "    found = counts.build_counts(sys.argv[1])\n"
    "    arms = [{k: (list(v) if k == 'latencies' else repr(v)) for k, v in asdict(a).items()} for a in found.arms]\n"
    "    return {'arms': arms, 'recorded': found.recorded, 'snapshots': repr(found.snapshots),\n"
    "            'empty': repr(found.empty_retrievals), 'simulated': found.simulated}, found.warnings\n"
    "print(json.dumps([table(True), table(False), len(calls)]))\n"
)


def test_counting_in_parallel_parts_gives_the_table_of_one_pass_on_untidy_lines(demo_run, tmp_path):
    """Each counting process reads its part of samples.jsonl line by line: blank and whitespace lines,
    CRLF endings, a record without some keys, a torn last line, a NUL tail after it, a sample
    recorded again in the other part; the table is the one pass's, every count, latency and
    snapshot in the same order."""
    import shutil

    _, run = demo_run
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    lines = (copy / "samples.jsonl").read_bytes().splitlines(keepends=True)
    lines[3] = lines[3].replace(b"\n", b"\r\n")
    older = json.loads(lines[4])  # a record without some keys (an older writer's): read key by key
    del older["raw"], older["retrieval"], older["checks"]
    lines[4] = json.dumps(older).encode() + b"\n"
    lines.insert(5, b"\n")
    lines.insert(9, b"  \t\n")
    again = lines[0]  # the first part's first sample, recorded again at the end (in the other part)
    for tail, torn in ((b"", False), (b'{"sample_id": "cut', True), (b'{"sample_id": "cut' + b"\0" * 5000, True),
                       (again, False)):
        (copy / "samples.jsonl").write_bytes(b"".join(lines) + tail)
        done = subprocess.run([sys.executable, "-c", PARALLEL_AND_SERIAL, str(copy)], capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        (parallel, warned), (serial, _), calls = json.loads(done.stdout)
        assert calls == 1 and parallel == serial
        assert parallel["recorded"] == len(lines) - 2
        if tail is again:  # counted twice in parallel: counted again in one pass, once
            assert len(warned) == 1 and "is in samples.jsonl more than once" in warned[0]
            continue
        assert warned == ([f"{copy / 'samples.jsonl'}: the last line is torn (cut off mid-write) and is ignored"]
                          if torn else [])
