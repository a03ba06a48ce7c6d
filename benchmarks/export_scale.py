"""`probe export` at scale: time and peak memory of `probe export RUN -o samples.csv` and
`-o samples.jsonl` (each a fresh process; rows streamed, so memory should not grow with the run)
on synthetic runs (benchmarks/synthetic.py) whose raw outputs exist.

    .venv/bin/python benchmarks/export_scale.py [--samples 10000 100000]
"""

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from synthetic import make_run  # noqa: E402

PROBE = str(Path(sys.executable).parent / "probe")
OUTPUT = "[[ANSWER]]\nThe Team plan is $20 per user per month [1]. =SUM(A1) stays text in a spreadsheet.\n"


def make_run_with_outputs(path: Path, samples: int) -> Path:
    """A synthetic run whose every raw output exists (one file, hard-linked per sample)."""
    run = make_run(path, samples)
    source = path / "raw" / "_output.txt"
    source.write_text(OUTPUT, encoding="utf-8")
    for line in (run / "samples.jsonl").read_bytes().splitlines():
        sample_id = line.split(b'"sample_id":"', 1)[1].split(b'"', 1)[0].decode()
        os.link(source, run / "raw" / f"{sample_id}.txt")
    return run


def timed(*args: str) -> tuple[float, float]:
    """(seconds, peak MB of the command)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    started = time.perf_counter()
    subprocess.run([PROBE, *args], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return seconds, max(after, before) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, nargs="+", default=[10_000, 100_000])
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="probe-export-") as folder:
        work = Path(folder)
        for samples in args.samples:
            run = make_run_with_outputs(work / f"r{samples}", samples)
            for suffix in ("csv", "jsonl"):
                out = work / f"samples-{samples}.{suffix}"
                seconds, peak = timed("export", str(run), "-o", str(out))
                size = out.stat().st_size / 1e6
                rows.append((samples, suffix, seconds, samples / seconds, peak, size))
    print("probe export RUN -o FILE, fresh process each (peak memory of the whole command):")
    print("| samples | format | seconds | rows/s | peak MB | file MB |")
    print("|---:|---|---:|---:|---:|---:|")
    for samples, suffix, seconds, rate, peak, size in rows:
        print(f"| {samples:,} | {suffix} | {seconds:.2f} | {rate:,.0f} | {peak:.0f} | {size:.1f} |")


if __name__ == "__main__":
    main()
