"""Speed and memory of reading runs at scale, on synthetic run directories (benchmarks/synthetic.py).

Prints, each from a fresh `probe` process (wall time and peak memory of the whole command,
children included):
- `probe report` on 240, 100,000 and 1,000,000 samples (targets: 0.3 s at 240, 1.5 s at 100k,
  5 s and memory under 150 MB at 1M); at 1M, as `probe run` leaves the run (its counts kept in
  kept-counts.json) and counted again from samples.jsonl (the kept file set aside), and
  `probe compare --all` of its two arms;
- `probe compare --all` on the 100k run (each run directory is read once for all metrics);
- `probe compare` of two 25,000-sample arms (Boschloo is skipped above its affordable size);
- the header classifier on 1 KB outputs without a header (target: 25,000 outputs/s);
- on the 1,000,000-sample run, whose outputs are in a pack and whose manifest keeps its totals as
  a run writes them: `probe show` of one sample (read by its id at its offset, its provenance
  from the manifest's totals) and the run's file count (`--million-only`: only
  these and the 1M report).

    .venv/bin/python benchmarks/scale.py [--work DIR] [--skip-million] [--million-only] [--quick]
"""

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from installed import compile_package  # noqa: E402
from synthetic import make_run  # noqa: E402

PROBE = str(Path(sys.executable).parent / "probe")


def timed(*args: str) -> tuple[float, float]:
    """(seconds, peak MB of the command and its children: this command's own, not the largest
    of every command timed so far as RUSAGE_CHILDREN gives it)."""
    started = time.perf_counter()
    child = subprocess.Popen([PROBE, *args], stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - started
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode:
        raise SystemExit(f"probe {' '.join(args)} exited with {child.returncode}")
    return seconds, usage.ru_maxrss / 1024


def best_of(runs: int, *args: str) -> tuple[float, float]:
    results = [timed(*args) for _ in range(runs)]
    return min(r[0] for r in results), max(r[1] for r in results)


def classifier_rate(n: int = 20000) -> float:
    from promptprobe.checks.header import classify

    rng = random.Random(1)
    words = "the plan costs per user month support billing invoice team starter enterprise".split()
    outputs = []
    for _ in range(n):
        text = " ".join(rng.choice(words) for _ in range(180))[:1024]
        outputs.append(text)
    started = time.perf_counter()
    for text in outputs:
        classify(text)
    return n / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=None, help="Where to write the synthetic runs (kept).")
    parser.add_argument("--skip-million", action="store_true", help="Skip the 1,000,000-sample run (~1 GB).")
    parser.add_argument(
        "--quick", action="store_true", help="A quick look: 10,000 samples, no million, each timed once."
    )
    parser.add_argument("--million-only", action="store_true", help="Only the 1,000,000-sample figures.")
    args = parser.parse_args()
    compile_package()  # timed as an installed copy runs: bytecode compiled
    if args.work is not None:
        measure(args.work, args)
        return
    with tempfile.TemporaryDirectory(prefix="probe-scale-") as folder:  # a million samples is ~1 GB
        measure(Path(folder), args)


def measure(work: Path, args: argparse.Namespace) -> None:
    few, several = (1, 1) if args.quick else (3, 5)  # quick: one timing each
    print(f"synthetic runs in {work}")
    big_size = 10_000 if args.quick else 100_000
    rows: list[tuple[str, float, float, str]] = []
    if args.million_only:
        million(work, rows)
        return print_rows(rows)
    small = make_run(work / "r240", 240, cases=10)
    rows.append(("probe report, 240 samples", *best_of(several, "report", str(small)), "0.3 s"))
    big = make_run(work / "rbig", big_size)
    target = "1.5 s" if big_size == 100_000 else "-"
    rows.append((f"probe report, {big_size:,} samples", *best_of(few, "report", str(big)), target))
    rows.append(
        (
            f"probe compare --all, {big_size:,} samples",
            *best_of(few, "compare", f"{big}#prompt=prompt-0", f"{big}#prompt=prompt-1", "--all"),
            "-",
        )
    )
    pair = make_run(work / "rpair", big_size // 2, cases=20)
    rows.append(
        (
            f"probe compare, {big_size // 4:,} vs {big_size // 4:,}",
            *best_of(few, "compare", f"{pair}#prompt=prompt-0", f"{pair}#prompt=prompt-1"),
            "-",
        )
    )
    if not (args.skip_million or args.quick):
        million(work, rows)
    print_rows(rows)
    rate = classifier_rate(1000 if args.quick else 20000)
    print(f"\nheader classifier, 1 KB outputs without a header: {rate:,.0f} outputs/s (target 25,000)")


def million(work: Path, rows: list[tuple[str, float, float, str]]) -> None:
    """The 1,000,000-sample run, its outputs packed: report (5 s) as `probe run` leaves the run (its
    counts kept) and counted again, show of one sample, its files."""
    huge = make_run(
        work / "r1m",
        1_000_000,
        output="[[ANSWER]]\nThe Team plan is $20 per user per month.\n",
        totals=True,  # as probe run leaves it: show's provenance from the manifest
    )
    rows.append(
        (
            "probe report, 1,000,000 samples (as probe run leaves it)",
            *best_of(3, "report", str(huge)),
            "5 s, 150 MB",
        )
    )
    rows.append(
        (
            "probe compare --all, 1,000,000 samples",
            *best_of(3, "compare", f"{huge}#prompt=prompt-0", f"{huge}#prompt=prompt-1", "--all"),
            "-",
        )
    )
    kept = huge / "kept-counts.json"
    kept.rename(huge / "kept-counts.json.aside")  # as a run recorded before it, or changed since
    try:
        rows.append(
            (
                "probe report, 1,000,000 samples, counted (no kept counts)",
                *best_of(3, "report", str(huge)),
                "-",
            )
        )
    finally:
        (huge / "kept-counts.json.aside").rename(kept)
    rows.append(
        (
            "probe show of one sample, 1,000,000 samples",
            *best_of(3, "show", str(huge), "--sample", "case-013.r24000.a2"),
            "-",
        )
    )
    sizes = [p.stat().st_size for p in huge.rglob("*") if p.is_file()]
    print(f"1,000,000-sample run: {len(sizes)} files ({sum(sizes) / 1e6:.0f} MB)")


def print_rows(rows: list[tuple[str, float, float, str]]) -> None:
    print("| command | wall time | peak memory | target |")
    print("|---|---:|---:|---|")
    for name, seconds, megabytes, target in rows:
        print(f"| {name} | {seconds:.2f} s | {megabytes:.0f} MB | {target} |")


if __name__ == "__main__":
    main()
