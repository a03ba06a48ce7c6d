"""A 100,000-sample two-model run through the batch path, against the local server that speaks
the OpenAI batch wire format (the test suite's), with `probe run --batch` as a real process.

Prints the wall time beyond the server's own delay (the polls before each batch ends), the
process's peak memory (target: under 300 MB) and the files the run wrote.

    .venv/bin/python benchmarks/batch_scale.py [--samples 100000]
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from batch_server import BatchServer  # noqa: E402

POLL = 0.5  # seconds between looks at a batch
POLLS = 2  # looks before a batch ends: the server's own delay


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=100_000)
    args = parser.parse_args()
    models = 2
    if args.samples < 2 * models:
        parser.error("--samples: at least 4 (two models, two questions)")
    cases = min(1000, args.samples // (2 * models))  # 1,000 questions, fewer for a quick look
    repeats = args.samples // (cases * models)
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        lines = [f'name = "scale"\nrepeats = {repeats}\n']
        for i in range(cases):
            lines.append(
                f'[[case]]\nid = "c{i:04d}"\nquestion = "How do I do thing number {i} in the app?"\n'
            )
        (tmp / "scale.toml").write_text("\n".join(lines))
        (tmp / "prompt.md").write_text(
            "Answer the help-desk question. Start with [[ANSWER]] or [[NO_ANSWER]].\n"
        )
        with BatchServer(polls=POLLS) as server:
            command = [
                str(Path(sys.executable).parent / "probe"),
                "run",
                str(tmp / "scale.toml"),
                "--prompt",
                str(tmp / "prompt.md"),
                "-m",
                f"openai:model-a@{server.url}/v1",
                "-m",
                f"openai:model-b@{server.url}/v1",
                "--retrieval",
                "none",
                "--batch",
                "--poll-interval",
                str(POLL),
                "--yes",
                "--runs-dir",
                str(tmp / "runs"),
                "--json",
            ]
            started = time.monotonic()
            result = subprocess.run(
                command,
                capture_output=True,
                text=True,
                cwd=tmp,
                env={**os.environ, "PROBE_PROGRESS_INTERVAL": "3600"},
            )
            wall = time.monotonic() - started
            batches = len(server.batches)
            submitted = len(server.submitted)
        if result.returncode != 0:
            raise SystemExit(f"probe run failed ({result.returncode}): {result.stderr[-2000:]}")
        peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        outcome = json.loads(result.stdout)
        run = Path(outcome["run"])
        files = sum(1 for p in run.rglob("*") if p.is_file())
        size = sum(p.stat().st_size for p in run.rglob("*") if p.is_file())
        server_delay = POLLS * POLL  # the batches run side by side: one model's wait
        print(
            f"batch run of {outcome['counts']['recorded']:,} samples ({cases} cases x {repeats} repeats x "
            f"{models} models), {batches} batches, {submitted:,} requests submitted:"
        )
        print("| measure | figure | target |")
        print("|---|---:|---|")
        print(
            f"| wall time beyond the server's own delay ({server_delay:g} s) "
            f"| {wall - server_delay:.1f} s | - |"
        )
        print(f"| peak memory of `probe run --batch` | {peak_mb:.0f} MB | 300 MB |")
        print(f"| files written | {files:,} ({size / 1e6:.0f} MB) | - |")
        print(f"| errors | {outcome['counts']['errors']} | 0 |")


if __name__ == "__main__":
    main()
