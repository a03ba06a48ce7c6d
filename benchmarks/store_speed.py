"""A run written to and read from a runs store in S3 against the same run on disk.

Starts moto's S3 server on 127.0.0.1 (no network, no cloud: dummy credentials, AWS_ENDPOINT_URL
set) and a local model that answers after --delay-ms (default 200 ms). Then, --runs times, in
turn so a noisy machine slows both alike:

- `probe run` of 240 samples (12 cases x 10 repeats x 2 prompts, concurrency 16), with
  `--runs-dir` a folder and with `--runs-dir s3://...`;
- `probe report RUN --format json` of each: on disk, from the store with an empty cache (the
  run is downloaded and checked by sha256), and from the store again (the cache is current:
  only the run's index is read);
- `probe push` of the disk run into the store and `probe pull` of it back to disk.

Prints the median wall time and CPU time (user + system of the command's own process: what a
busy machine changes least) of each command, and the store's over the disk's. moto on loopback
has no network latency but is itself a Python server on the same cores: a real S3 adds some
10-50 ms a request, and checkpoints send a run's new bytes every 2 s while it runs.

    .venv/bin/python benchmarks/store_speed.py [--runs 3] [--delay-ms 200]
"""

import argparse
import logging
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import run_speed  # noqa: E402
from installed import compile_package  # noqa: E402
from run_speed import Model  # noqa: E402

PROBE = str(Path(sys.executable).parent / "probe")
ROOT = Path(__file__).resolve().parent.parent


def start_s3(folder: Path) -> tuple[object, dict[str, str]]:
    import boto3
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    env = {
        **os.environ,
        "AWS_ENDPOINT_URL": f"http://{host}:{port}",
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench-secret",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
        "NO_GCE_CHECK": "true",
        "AWS_CONFIG_FILE": str(folder / "none"),
        "AWS_SHARED_CREDENTIALS_FILE": str(folder / "none"),
    }
    env.pop("AWS_PROFILE", None)
    boto3.client(
        "s3",
        endpoint_url=env["AWS_ENDPOINT_URL"],
        region_name="us-east-1",
        aws_access_key_id="bench",
        aws_secret_access_key="bench-secret",
    ).create_bucket(Bucket="bench")
    return server, env


def timed(command: list[str], env: dict[str, str], cwd: Path) -> tuple[tuple[float, float], str]:
    """(wall seconds, CPU seconds the command itself used: user + system), and what it printed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True)
    took = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)}: exit {done.returncode}\n{done.stderr[-2000:]}")
    return (took, cpu), done.stdout + done.stderr


CASES = 12  # x 10 repeats x 2 prompts


def probeset(folder: Path) -> Path:
    path = folder / "bench.toml"
    path.write_text(
        "repeats = 10\n"
        + "".join(f'[[case]]\nid = "c{i}"\nquestion = "Question {i}?"\n' for i in range(CASES))
    )
    return path


def write_run(folder: Path, runs_dir: str, env: dict[str, str]) -> tuple[tuple[float, float], str]:
    model = Model()
    prompts = ROOT / "prompts"
    try:
        took, output = timed(
            [
                PROBE, "run", str(probeset(folder)), "--prompt", str(prompts / "always-header.md"),
                "--prompt", f"b={prompts / 'exception-only.md'}", "--model", f"openai:bench@{model.url}",
                "--retrieval", "none", "--concurrency", "16", "--runs-dir", runs_dir, "--format", "json",
            ],
            env,
            folder,
        )  # fmt: skip
    finally:
        model.httpd.shutdown()
    assert model.calls == CASES * 20, model.calls
    line = next(line for line in output.splitlines() if line.startswith("run: "))
    return took, line.removeprefix("run: ")


def one_round(folder: Path, env: dict[str, str], index: int) -> dict[str, float]:
    """Each command's wall and CPU seconds (`cpu NAME`) in this round."""
    times: dict[str, tuple[float, float]] = {}
    disk_runs = folder / f"disk{index}"
    store = f"s3://bench/round{index}"
    times["run (disk)"], disk_run = write_run(folder, str(disk_runs), env)
    times["run (S3)"], store_run = write_run(folder, store, env)
    report = [PROBE, "report", "--format", "json"]
    times["report (disk)"], _ = timed([*report, disk_run], env, folder)
    cold = {**env, "XDG_CACHE_HOME": str(folder / f"cold{index}")}
    times["report (S3, empty cache)"], _ = timed([*report, store_run], cold, folder)
    times["report (S3, cache current)"], _ = timed([*report, store_run], cold, folder)
    times["push (disk to S3)"], _ = timed([PROBE, "push", disk_run, f"s3://bench/pushed{index}"], env, folder)
    run_id = Path(disk_run).name
    into = folder / f"pulled{index}"
    pull = [PROBE, "pull", f"s3://bench/pushed{index}/{run_id}", str(into)]
    times["pull (S3 to disk)"], _ = timed(pull, env, folder)
    shutil.rmtree(into, ignore_errors=True)
    return {
        **{name: wall for name, (wall, _) in times.items()},
        **{f"cpu {name}": cpu for name, (_, cpu) in times.items()},
    }


PAIRS = [
    ("probe run", "run (disk)", "run (S3)"),
    ("probe report, cache empty", "report (disk)", "report (S3, empty cache)"),
    ("probe report, cache current", "report (disk)", "report (S3, cache current)"),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--delay-ms", type=float, default=200.0)
    parser.add_argument("--cases", type=int, default=12, help="x 10 repeats x 2 prompts (12: 240 samples)")
    args = parser.parse_args()
    compile_package()  # timed as an installed copy runs: bytecode compiled
    run_speed.DELAY = args.delay_ms / 1000
    global CASES
    CASES = args.cases
    with tempfile.TemporaryDirectory() as temp:
        folder = Path(temp)
        server, env = start_s3(folder)
        env["XDG_CACHE_HOME"] = str(folder / "cache")
        try:
            rounds = [one_round(folder, env, index) for index in range(args.runs)]
        finally:
            server.stop()  # type: ignore[attr-defined]
    median = {name: statistics.median(r[name] for r in rounds) for name in rounds[0]}
    print(
        f"A run of {CASES * 20} samples on disk and in a runs store (moto's S3 server on 127.0.0.1); "
        f"median of {args.runs}, replies after {args.delay_ms:g} ms, concurrency 16\n"
    )
    print("| command | disk, wall | S3, wall | S3 / disk | disk, CPU | S3, CPU | S3 / disk |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for label, disk, s3 in PAIRS:
        wall = f"{median[disk]:.2f} s | {median[s3]:.2f} s | {median[s3] / median[disk]:.2f}x"
        cpu_disk, cpu_s3 = median[f"cpu {disk}"], median[f"cpu {s3}"]
        print(f"| {label} | {wall} | {cpu_disk:.2f} s | {cpu_s3:.2f} s | {cpu_s3 / cpu_disk:.2f}x |")
    for name in ("push (disk to S3)", "pull (S3 to disk)"):
        print(f"| probe {name} | | {median[name]:.2f} s | | | {median['cpu ' + name]:.2f} s | |")


if __name__ == "__main__":
    main()
