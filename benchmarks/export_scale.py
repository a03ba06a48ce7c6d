"""`probe export` at scale: time and peak memory of `probe export RUN -o samples.csv` and
`-o samples.jsonl` (each a fresh process; rows streamed, so memory should not grow with the run)
on synthetic runs (benchmarks/synthetic.py) whose raw outputs exist.

    .venv/bin/python benchmarks/export_scale.py [--samples 10000 100000]
"""

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from synthetic import make_run  # noqa: E402

OUTPUT = "[[ANSWER]]\nThe Team plan is $20 per user per month [1]. =SUM(A1) stays text in a spreadsheet.\n"


def make_run_with_outputs(path: Path, samples: int) -> Path:
    """A synthetic run whose every raw output exists (in its pack, as a run writes them)."""
    return make_run(path, samples, output=OUTPUT)


# The command in a fresh interpreter that reports its own peak memory (VmHWM) as it exits: the
# children's ru_maxrss would count this process's pages too, copied at the fork before the exec.
MEASURED = """
import resource, sys
from promptprobe.cli import main
try:
    main(sys.argv[1:], prog_name="probe")
except SystemExit as exc:
    code = exc.code
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    peak = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
except (OSError, StopIteration):
    pass
print(peak, file=sys.stderr)
sys.exit(code)
"""


def timed(*args: str) -> tuple[float, float]:
    """(seconds, peak MB of the command's own process)."""
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", MEASURED, *args], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    seconds = time.perf_counter() - started
    return seconds, int(done.stderr.split()[-1]) / 1024


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
    print("probe export RUN -o FILE, fresh process each (its own peak resident memory):")
    print("| samples | format | seconds | rows/s | peak MB | file MB |")
    print("|---:|---|---:|---:|---:|---:|")
    for samples, suffix, seconds, rate, peak, size in rows:
        print(f"| {samples:,} | {suffix} | {seconds:.2f} | {rate:,.0f} | {peak:.0f} | {size:.1f} |")


if __name__ == "__main__":
    main()
