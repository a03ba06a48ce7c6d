"""Wall time of a whole `probe run` against a local model that answers after 200 ms.

240 samples (12 cases x 10 repeats x 2 prompts) at concurrency 16: the ideal is
240 x 0.2 / 16 = 3 s. Prints the whole command's time and the time from the first call to the
last record, each over that ideal (targets 1.4 and 1.2), and the peak memory of pricing a
1,000,000-sample plan with --dry-run (target under 200 MB).

It also times the floor any runner built on the openai SDK has on this machine: a bare script
that imports the SDK (garbage collector paused, as probe does), then makes the same 240 typed
`chat.completions.create` calls from 16 threads and records nothing. The two are timed in
turn, so a noisy machine slows both alike; "probe over the SDK alone" is promptprobe's own
cost.

    .venv/bin/python benchmarks/run_speed.py [--runs 3] [--delay-ms 200]
"""

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from installed import compile_package  # noqa: E402

PROBE = str(Path(sys.executable).parent / "probe")
ROOT = Path(__file__).resolve().parent.parent
DELAY = 0.2
CASES, REPEATS, CONCURRENCY = 12, 10, 16  # 240 samples (two prompts)


class Model:
    def __init__(self) -> None:
        self.first: float | None = None
        self.calls = 0
        model = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def log_message(self, *args: object) -> None:
                """Quiet."""

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length") or 0))
                model.first = model.first or time.time()
                model.calls += 1
                time.sleep(DELAY)
                body = json.dumps(
                    {
                        "id": "c",
                        "object": "chat.completion",
                        "created": 0,
                        "model": "bench",
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": "[[ANSWER]]\nok"},
                                "finish_reason": "stop",
                            }
                        ],
                        "usage": {"prompt_tokens": 100, "completion_tokens": 5, "total_tokens": 105},
                    }
                ).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        ThreadingHTTPServer.request_queue_size = 128
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"


def probeset(folder: Path) -> Path:
    path = folder / "bench.toml"
    path.write_text(
        f"repeats = {REPEATS}\n"
        + "".join(f'[[case]]\nid = "c{i}"\nquestion = "Question {i}?"\n' for i in range(CASES))
    )
    return path


CHECK = """
def says_ok(sample):
    return "ok" in (sample["text"] or "")
"""


def one_run(folder: Path, check: bool = False) -> tuple[float, float]:
    model = Model()
    runs = folder / "runs"
    config: list[str] = []
    if check:  # one [[check]] of yours, called in its worker process on every sample
        (folder / "benchcheck.py").write_text(CHECK)
        (folder / "probe.toml").write_text('[[check]]\nname = "says_ok"\nfunction = "benchcheck:says_ok"\n')
        config = ["--config", str(folder / "probe.toml")]
    started = time.time()
    subprocess.run(
        [
            PROBE,
            "run",
            str(probeset(folder)),
            "--prompt",
            str(ROOT / "prompts" / "always-header.md"),
            "--prompt",
            f"b={ROOT / 'prompts' / 'exception-only.md'}",
            "--model",
            f"openai:bench@{model.url}",
            "--retrieval",
            "none",
            "--concurrency",
            str(CONCURRENCY),
            "--runs-dir",
            str(runs),
            "--format",
            "json",
            *config,
        ],
        check=True,
        stdout=subprocess.DEVNULL,
        cwd=folder,
    )
    whole = time.time() - started
    (run,) = runs.iterdir()
    last_record = (run / "samples.jsonl").stat().st_mtime
    model.httpd.shutdown()
    assert model.calls == SAMPLES(), model.calls
    return whole, last_record - (model.first or started)


# The bare SDK: what any runner calling the openai SDK pays before and between calls.
SDK_ALONE = """
import gc, queue, sys, threading, time
url, first_path, second_path = sys.argv[1:4]
cases, repeats, concurrency = map(int, sys.argv[4:7])
gc.disable()
import openai
gc.freeze()
gc.enable()
client = openai.OpenAI(api_key="no-key-needed", base_url=url, max_retries=0)
prompts = [open(first_path).read(), open(second_path).read()]
jobs = queue.SimpleQueue()
for _ in range(repeats):
    for case in range(cases):
        for prompt in prompts:
            question = {"role": "user", "content": f"Question {case}?"}
            jobs.put([{"role": "system", "content": prompt}, question])
last = [0.0]
def worker():
    while True:
        try:
            messages = jobs.get_nowait()
        except queue.Empty:
            return
        reply = client.chat.completions.create(model="bench", messages=messages, max_tokens=1024)
        assert reply.choices[0].message.content
        last[0] = time.time()
threads = [threading.Thread(target=worker) for _ in range(concurrency)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(last[0])
"""


def sdk_alone() -> tuple[float, float]:
    model = Model()
    started = time.time()
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            SDK_ALONE,
            model.url,
            str(ROOT / "prompts" / "always-header.md"),
            str(ROOT / "prompts" / "exception-only.md"),
            str(CASES),
            str(REPEATS),
            str(CONCURRENCY),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    whole = time.time() - started
    model.httpd.shutdown()
    assert model.calls == SAMPLES(), model.calls
    return whole, float(done.stdout) - (model.first or started)


def SAMPLES() -> int:  # noqa: N802 (a constant set by the flags)
    return CASES * REPEATS * 2


def dry_run_memory(folder: Path) -> float:
    path = folder / "million.toml"
    path.write_text("".join(f'[[case]]\nid = "c{i}"\nquestion = "Question {i}?"\n' for i in range(10)))
    subprocess.run(
        [
            PROBE,
            "run",
            str(path),
            "--prompt",
            str(ROOT / "prompts" / "always-header.md"),
            "--prompt",
            f"b={ROOT / 'prompts' / 'exception-only.md'}",
            "--model",
            "openai:gpt-4.1-mini",
            "-n",
            "50000",
            "--retrieval",
            "none",
            "--dry-run",
        ],
        check=True,
        stdout=subprocess.DEVNULL,
        cwd=folder,
    )
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024


def check_call_cost(folder: Path, calls: int = 2000) -> tuple[float, float]:
    """Milliseconds per sample of one [[check]] called in its worker process, and called directly
    in this process: the price of isolating user code from the run."""
    import os

    sys.path.insert(0, str(ROOT / "src"))
    from promptprobe.checks import build_checks, close_checks, run_checks
    from promptprobe.checks.base import SampleView
    from promptprobe.checks.settings import CheckSettings, UserCheckConfig
    from promptprobe.probeset import load_probeset

    (folder / "benchcheck.py").write_text(CHECK)
    (folder / "p.toml").write_text('[[case]]\nid = "a"\nquestion = "How much is the Team plan?"\n')
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        settings = CheckSettings(user=(UserCheckConfig("says_ok", "benchcheck:says_ok"),))
        case = load_probeset(folder / "p.toml").cases[0]
        text = "Team is $20 per user per month. " * 20
        passages = [{"id": f"doc-{i}", "text": text, "score": 0.5} for i in range(5)]
        response = {"stop_reason": "stop", "usage": {"prompt_tokens": 900, "completion_tokens": 40}}
        view = SampleView(case, "[[ANSWER]]\nok " * 50, passages, response, settings, {})
        checks = build_checks(settings)
        try:
            for _ in range(50):
                run_checks(checks, view)  # warm
            started = time.perf_counter()
            for _ in range(calls):
                run_checks(checks, view)
            isolated = (time.perf_counter() - started) / calls * 1000
        finally:
            close_checks(checks)
        sys.path.insert(0, str(folder))
        import benchcheck  # type: ignore[import-not-found]

        started = time.perf_counter()
        for _ in range(calls):
            benchcheck.says_ok({"text": view.text})
        direct = (time.perf_counter() - started) / calls * 1000
    finally:
        os.chdir(cwd)
    return isolated, direct


def main() -> None:
    global DELAY, CASES, REPEATS, CONCURRENCY
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--delay-ms", type=float, default=DELAY * 1000, help="the model's answer time")
    parser.add_argument("--cases", type=int, default=CASES, help="questions (x repeats x 2 prompts samples)")
    parser.add_argument("--repeats", type=int, default=REPEATS)
    parser.add_argument("--concurrency", type=int, default=CONCURRENCY)
    parser.add_argument("--quick", action="store_true", help="only probe against the bare SDK")
    args = parser.parse_args()
    compile_package()  # timed as an installed copy runs: bytecode compiled
    DELAY = args.delay_ms / 1000
    CASES, REPEATS, CONCURRENCY = args.cases, args.repeats, args.concurrency
    ideal = SAMPLES() * DELAY / CONCURRENCY
    results = []
    checked = []
    floors = []
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory() as folder:
            results.append(one_run(Path(folder)))
        if not args.quick:
            with tempfile.TemporaryDirectory() as folder:
                checked.append(one_run(Path(folder), check=True))
        floors.append(sdk_alone())

    def median(values: list[float]) -> float:
        return sorted(values)[len(values) // 2]

    whole, calls = median([r[0] for r in results]), median([r[1] for r in results])
    sdk_whole, sdk_calls = median([f[0] for f in floors]), median([f[1] for f in floors])
    print(
        f"{SAMPLES():,} samples, model answering after {DELAY * 1000:g} ms, concurrency {CONCURRENCY}; "
        f"ideal {ideal:.1f} s (median of {args.runs} runs)"
    )
    print("| measure | seconds | over the ideal | target |")
    print("|---|---:|---:|---:|")
    print(f"| whole `probe run` command | {whole:.2f} | {whole / ideal:.2f} | 1.4 |")
    if checked:
        checked_whole = median([r[0] for r in checked])
        with_check = f"{checked_whole:.2f} | {checked_whole / ideal:.2f}"
        print(f"| the same with one `[[check]]` of yours | {with_check} | 1.4 |")
    print(f"| first call to last record | {calls:.2f} | {calls / ideal:.2f} | 1.2 |")
    print(f"| openai SDK alone, whole script (floor) | {sdk_whole:.2f} | {sdk_whole / ideal:.2f} | - |")
    print(f"| openai SDK alone, first call to last reply | {sdk_calls:.2f} | {sdk_calls / ideal:.2f} | - |")
    print(f"\nprobe over the SDK alone: whole command {whole / sdk_whole:.2f}, calls {calls / sdk_calls:.2f}")
    # Each round's own ratio: the two ran back to back, so a slow spell of the machine slows both.
    pairs = sorted(r[0] / f[0] for r, f in zip(results, floors, strict=True))
    print(
        f"the same round by round (whole command): median {median(pairs):.2f}, "
        f"{pairs[0]:.2f} to {pairs[-1]:.2f}; {sum(p <= 1.05 for p in pairs)} of {len(pairs)} rounds "
        "within 1.05"
    )
    if args.quick:
        return
    with tempfile.TemporaryDirectory() as folder:
        isolated, direct = check_call_cost(Path(folder))
    print(
        f"\na [[check]] in its worker process: {isolated:.3f} ms per sample (the same function called "
        f"in-process: {direct:.4f} ms; target under 1 ms)"
    )
    with tempfile.TemporaryDirectory() as folder:
        print(
            f"\n--dry-run of a 1,000,000-sample plan: peak memory {dry_run_memory(Path(folder)):.0f} MB "
            "(target 200 MB)"
        )


if __name__ == "__main__":
    main()
