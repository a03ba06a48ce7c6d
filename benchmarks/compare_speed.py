"""How long `probe compare` takes on small runs, where the hint of an indistinguishable verdict
once took minutes (issue 16: 409 s for 11/12 vs 12/12).

Writes 500 random pairs of small run directories (1-30 cases, 1-10 repeats; rates drawn to
include 0 and 1, one arm perfect, equal arms, and 11/12 against 12/12; a fifth of the pairs ask
different questions, so unpaired), runs `probe compare A B` on each in a fresh process, and
prints the median and maximum wall time beyond a bare interpreter's start (`python -c pass`);
then the same for `probe compare --all` on a demo run. Target: the maximum under 1 s.

    .venv/bin/python benchmarks/compare_speed.py [--pairs 500] [--demo-compares 5]
"""

import argparse
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from promptprobe.checks import CheckSettings, outcomes
from promptprobe.checks.header import classify
from promptprobe.jsonio import dumps_line, dumps_pretty
from promptprobe.probeset import parse_probeset

sys.path.insert(0, str(Path(__file__).parent))
from synthetic import CHECKS, run_manifest  # noqa: E402

PROBE = str(Path(sys.executable).parent / "probe")
SEED = 20261130
HEADERS = {True: classify("[[ANSWER]]\nok"), False: classify("ok, no header")}


def write_run(path: Path, name: str, questions: list[str], rates: list[float], repeats: int, rng) -> Path:
    """A finished one-arm run whose case i gets the header with probability rates[i]."""
    path.mkdir(parents=True)
    source = "".join(f'[[case]]\nid = "c{i}"\nquestion = "{q}"\n\n' for i, q in enumerate(questions))
    model = "openai:m"
    cases = [f"c{i}" for i in range(len(questions))]
    samples = repeats * len(questions)
    manifest = run_manifest(source, cases, [name], model, repeats, samples)
    (path / "manifest.json").write_text(dumps_pretty(manifest))
    probeset = parse_probeset(source.encode(), Path("p.toml"))
    settings = CheckSettings.from_dict(CHECKS)
    with open(path / "samples.jsonl", "wb") as out:
        for repeat in range(1, repeats + 1):
            for i, rate in enumerate(rates):
                present = rng.random() < rate
                record = {
                    "sample_id": f"c{i}.r{repeat}.a1",
                    "case_id": f"c{i}",
                    "repeat": repeat,
                    "prompt": name,
                    "model": model,
                    "latency_ms": 100,
                    "attempts": 1,
                    "header": HEADERS[present],
                    "checks": {},
                    "error": None,
                    "raw": {"path": "x", "sha256": "0", "bytes": 1},
                    "response": None,
                    "retrieval": None,
                }
                record["outcomes"] = outcomes(record, probeset.cases[i], settings)
                out.write(dumps_line(record))
    return path


def random_rates(rng, cases: int) -> tuple[list[float], list[float]]:
    kind = rng.choice(["random", "zero_one", "perfect", "equal", "eleven_of_twelve"])
    if kind == "zero_one":
        return [rng.choice([0.0, 1.0]) for _ in range(cases)], [rng.choice([0.0, 1.0]) for _ in range(cases)]
    if kind == "perfect":
        return [rng.random() for _ in range(cases)], [1.0] * cases
    if kind == "equal":
        rates = [rng.choice([0.0, 0.5, 0.9, 1.0, rng.random()]) for _ in range(cases)]
        return rates, list(rates)
    if kind == "eleven_of_twelve":
        return [1.0] * (cases - 1) + [0.67], [1.0] * cases
    return [rng.random() for _ in range(cases)], [rng.random() for _ in range(cases)]


def wall(*args: str) -> float:
    started = time.perf_counter()
    subprocess.run(args, check=True, capture_output=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=500)
    # Each is a fresh `probe` process: the test suite's smoke run times one.
    parser.add_argument("--demo-compares", type=int, default=5, help="times `compare --all` on the demo run")
    args = parser.parse_args()
    started = time.perf_counter()
    rng = random.Random(SEED)
    bare = statistics.median(wall(sys.executable, "-c", "pass") for _ in range(10))
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        times, worst = [], (0.0, "")
        for pair in range(args.pairs):
            cases, repeats = rng.randint(1, 30), rng.randint(1, 10)
            questions = [f"question {i}" for i in range(cases)]
            rates_a, rates_b = random_rates(rng, cases)
            other = questions if rng.random() < 0.8 else [f"other question {i}" for i in range(cases)]
            a = write_run(root / f"{pair}a", "a", questions, rates_a, repeats, rng)
            b = write_run(
                root / f"{pair}b",
                "b",
                other,
                rates_b,
                rng.randint(1, 10) if rng.random() < 0.2 else repeats,
                rng,
            )
            seconds = wall(PROBE, "compare", str(a), str(b)) - bare
            times.append(seconds)
            if seconds > worst[0]:
                worst = (seconds, f"{cases} cases x {repeats} repeats")
        times.sort()
        where = f"fresh process each, beyond {bare:.3f} s of bare interpreter start"
        print(f"probe compare A B on {args.pairs} random small run pairs ({where}):")
        print("| pairs | median | 90th percentile | maximum | slowest pair |")
        print("|---:|---:|---:|---:|---|")
        cells = [statistics.median(times), times[int(0.9 * len(times))], worst[0]]
        print(f"| {args.pairs} | " + " | ".join(f"{x:.2f} s" for x in cells) + f" | {worst[1]} |")
        demo = demo_run(root)
        runs = [
            wall(PROBE, "compare", f"{demo}#prompt=exception-only", f"{demo}#prompt=always-header", "--all")
            - bare
            for _ in range(args.demo_compares)
        ]
        times_run = f"{args.demo_compares} times"
        print(f"\n`probe compare --all` on the demo run (12 cases x 3 repeats, 13 metrics), {times_run}:")
        print(f"| median | maximum |\n|---:|---:|\n| {statistics.median(runs):.2f} s | {max(runs):.2f} s |")
    print(f"\ntook {time.perf_counter() - started:.0f} s")


def demo_run(root: Path) -> str:
    from promptprobe.demo import DemoServer, demo_inputs
    from promptprobe.engine.run import ProbeRun, RunOptions
    from promptprobe.models import parse_model_spec

    config, probeset, prompts = demo_inputs()
    server = DemoServer("127.0.0.1", 0).start()
    try:
        model = parse_model_spec(f"openai:acme-helpdesk@{server.url}")
        options = RunOptions(repeats=3, concurrency=8, runs_dir=root / "demo", seed=1)
        return str(ProbeRun(probeset, prompts, [model], config, options).execute().path)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
