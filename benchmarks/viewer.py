"""How fast `probe view` opens a 100,000-sample run, and how much memory it takes, against
`probe report` on the same run (benchmarks/synthetic.py makes it: 20 cases x 2 arms x 2,500
repeats); then the search page over a run of as many samples whose every output is distinct (its
own bytes and sha256, in the run's pack: the index reads each one): the first request of a fresh
viewer, then the first search of another fresh viewer once a page has counted the run.

The viewer runs as `probe view WORK --port 0` in its own process; each figure is the wall time of
one HTTP request from this process, and the memory is the viewer process's peak resident size
(VmHWM) after every page was opened. `probe report` is timed the same way as benchmarks/scale.py.

A long output (`--long-mb`, 20 by default: one line of words and Chinese after a BOM, a
zero-width space and a tab) is shown by `probe show` and the viewer's case page: each with its
wall time and its process's peak resident size (the output is read once and cut for display).

    .venv/bin/python benchmarks/viewer.py [--samples N] [--work DIR] [--long-mb MB]
"""

import argparse
import hashlib
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlencode

import httpx

sys.path.insert(0, str(Path(__file__).parent))
from installed import compile_package  # noqa: E402
from synthetic import PACK, make_run, packed  # noqa: E402

PROBE = str(Path(sys.executable).parent / "probe")


def peak_mb(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmHWM:\s+(\d+) kB", status).group(1)) / 1024


def timed_get(client: httpx.Client, url: str) -> tuple[float, httpx.Response]:
    started = time.perf_counter()
    answer = client.get(url)
    seconds = time.perf_counter() - started
    answer.raise_for_status()
    return seconds, answer


def report_figures(run: Path) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    started = time.perf_counter()
    subprocess.run([PROBE, "report", str(run)], check=True, stdout=subprocess.DEVNULL)
    seconds = time.perf_counter() - started
    return seconds, max(before, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) / 1024


def with_raw_files(run: Path) -> None:
    """The outputs a page shows: a group is read from its first sample's file (repeat 1)."""
    texts = {"present": "[[ANSWER]]\nok", "absent": "plain", "misplaced": "sorry\n[[NO_ANSWER]]"}
    for line in (run / "samples.jsonl").open("rb"):
        sample = json.loads(line)
        if sample["repeat"] > 1:
            break
        header = sample["header"]
        text = "[[NO_ANSWER]]\nsorry" if header.get("declared") == "no_answer" else texts[header["header"]]
        (run / sample["raw"]["path"]).write_text(text)


RARE = "refund-policy"  # in one output of every 1,000


def with_distinct_outputs(run: Path) -> None:
    """Every sample its own output (its own bytes and sha256), in the run's pack and its index,
    as a run writes them."""
    openings = {"present": "[[ANSWER]]\n", "absent": "", "misplaced": "Sorry.\n[[NO_ANSWER]]\n"}
    lines = []
    with open(run / PACK, "wb") as pack, open(run / "raw" / "index.jsonl", "wb") as index:
        for number, line in enumerate((run / "samples.jsonl").read_bytes().splitlines()):
            sample = json.loads(line)
            rare = f" See the {RARE} page." if number % 1000 == 7 else ""
            ticket = number * 7919 % 100003
            opening = openings[sample["header"]["header"]]
            text = f"{opening}Answer {number} to {sample['case_id']}: ticket {ticket}.{rare}\n"
            data = text.encode()
            digest = hashlib.sha256(data).hexdigest()
            sample["raw"] = packed(pack, index, sample["sample_id"], data, digest)["raw"]
            lines.append(json.dumps(sample))
    (run / "samples.jsonl").write_text("\n".join(lines) + "\n")


def cold_search(runs: Path, rid: str, samples: int) -> str:
    """A fresh viewer with the run counted and nothing indexed: the search request's time alone."""
    viewer = subprocess.Popen(
        [PROBE, "view", str(runs), "--port", "0"],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    try:
        base = re.search(r"at (http://\S+)/ ", viewer.stderr.readline()).group(1)
        with httpx.Client(base_url=base, timeout=120) as client:
            # Counted by a page, before the background has counted the run (it indexes after).
            client.get(f"/runs/{rid}/cases/case-000.json")
            seconds, answer = timed_get(client, f"/runs/{rid}/search.json?{urlencode({'q': 'ticket'})}")
            found = answer.json()
        shown = f"{found['indexing']['percent']}% indexed" if found["indexing"] else "complete"
        return f"{seconds:.3f} s ({shown}: {found['indexed']['distinct_outputs']:,} distinct outputs read)"
    finally:
        viewer.terminate()
        viewer.wait(timeout=30)


def search_figures(work: Path, samples: int) -> list[tuple[str, str]]:
    """The search page over a run whose every output is distinct (a viewer of its own)."""
    runs = work / "search-runs"
    run = make_run(runs / "20261130T000000-synthetic-000002", samples)
    with_distinct_outputs(run)
    rows: list[tuple[str, str]] = []
    viewer = subprocess.Popen(
        [PROBE, "view", str(runs), "--port", "0"],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    try:
        base = re.search(r"at (http://\S+)/ ", viewer.stderr.readline()).group(1)
        rid = run.name
        with httpx.Client(base_url=base, timeout=120) as client:
            # The first request of a fresh viewer is the search: it counts the run, reads every
            # output once into the index (or waits for the background doing so) and answers whole.
            first = f"/runs/{rid}/search.json?{urlencode({'q': RARE})}"
            seconds, answer = timed_get(client, first)
            found = answer.json()
            shown = f"{found['indexing']['percent']}% indexed" if found["indexing"] else "complete"
            rows.append(
                (
                    "search, first request of a fresh viewer (counting included)",
                    f"{seconds:.3f} s ({shown}, {found['matched']['samples']:,} samples match)",
                )
            )
            while client.get(first).json()["indexing"]:
                time.sleep(0.5)  # as the page's own polling goes on
        label = "search, first request once the run is counted (index built by it)"
        rows.append((label, cold_search(runs, rid, samples)))
        with httpx.Client(base_url=base, timeout=120) as client:
            searches = [
                ("search: a rare phrase", {"q": RARE}),
                (f"search: words in {samples:,} outputs and the questions", {"q": "ticket 4242"}),
                (
                    "search: failing only on header_present, one arm",
                    {"failing": 1, "metric": "header_present", "arm": 2},
                ),
                (
                    "search: words, failing only, header misplaced",
                    {"q": "answer 9", "failing": 1, "header": "misplaced"},
                ),
                ("search: a word in every output", {"q": "ticket"}),
            ]
            for label, params in searches:
                seconds, answer = timed_get(client, f"/runs/{rid}/search.json?{urlencode(params)}")
                matched = answer.json()["matched"]["samples"]
                rows.append((label, f"{seconds:.3f} s ({matched:,} samples match)"))
            seconds, answer = timed_get(client, f"/runs/{rid}/search?{urlencode({'q': 'ticket'})}")
            rows.append(
                (
                    "search page (HTML, first 20 groups)",
                    f"{seconds:.3f} s ({len(answer.content) / 1024:.0f} KB)",
                )
            )
        rows.append(("probe view with the search index: peak memory", f"{peak_mb(viewer.pid):.0f} MB"))
    finally:
        viewer.terminate()
        viewer.wait(timeout=30)
    return rows


def measure(work: Path, samples: int) -> list[tuple[str, str]]:
    runs = work / "runs"
    run = make_run(runs / "20261130T000000-synthetic-000001", samples)
    with_raw_files(run)
    rows: list[tuple[str, str]] = []
    seconds, memory = report_figures(run)
    rows.append(
        (f"probe report, {samples:,} samples (for reference)", f"{seconds:.2f} s, peak {memory:.0f} MB")
    )
    started = time.perf_counter()
    viewer = subprocess.Popen(
        [PROBE, "view", str(runs), "--port", "0"],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    try:
        line = viewer.stderr.readline()  # "probe view: ... at http://127.0.0.1:PORT/ ..." once it listens
        base = re.search(r"at (http://\S+)/ ", line).group(1)
        listening = time.perf_counter()
        rows.append(("probe view: listening", f"{listening - started:.2f} s after start"))
        rid = run.name
        with httpx.Client(base_url=base, timeout=120) as client:
            seconds, answer = timed_get(client, f"/runs/{rid}.json")
            counting = answer.json()["counting"]
            shown = (
                f"{100 * counting['read_bytes'] / counting['of_bytes']:.0f}% counted, no verdict yet"
                if counting
                else "whole, with its verdicts"
            )
            rows.append(("run page, first request: cold", f"{seconds:.3f} s ({shown})"))
            while counting:  # as the page's own polling goes on
                counting = client.get(f"/runs/{rid}.json").json()["counting"]
            rows.append(
                (
                    "run page whole, with its verdicts",
                    f"{time.perf_counter() - listening:.2f} s after listening",
                )
            )
            pages = [
                ("run page, again (counted, nothing changed)", f"/runs/{rid}"),
                ("run page JSON", f"/runs/{rid}.json"),
                ("runs page (counted: headline verdict)", "/"),
                (
                    f"one cell: {samples // 40:,} outputs grouped, first page",
                    f"/runs/{rid}/cases/case-000?arm=2",
                ),
                ("a case, both arms side by side", f"/runs/{rid}/cases/case-000"),
                ("compare page, first (verdicts, hints, 10 cases)", f"/compare?a={rid}:1&b={rid}:2"),
                ("compare page, again", f"/compare?a={rid}:1&b={rid}:2"),
                ("compare page 2", f"/compare?a={rid}:1&b={rid}:2&page=2"),
            ]
            for label, url in pages:
                seconds, answer = timed_get(client, url)
                rows.append((label, f"{seconds:.3f} s ({len(answer.content) / 1024:.0f} KB)"))
            tag = client.get(f"/runs/{rid}").headers["etag"]
            started = time.perf_counter()
            unchanged = client.get(f"/runs/{rid}", headers={"If-None-Match": tag})
            rows.append(
                ("a live poll of an unchanged run page (304)", f"{time.perf_counter() - started:.3f} s")
            )
            assert unchanged.status_code == 304
        rows.append(("probe view: peak memory after every page", f"{peak_mb(viewer.pid):.0f} MB"))
    finally:
        viewer.terminate()
        viewer.wait(timeout=30)
    rows.append(("probe view over an empty runs directory: peak memory", f"{empty_viewer_mb(work):.0f} MB"))
    return rows + search_figures(work, samples)


def empty_viewer_mb(work: Path) -> float:
    """The viewer's own size (Python, Starlette, uvicorn, scipy), to set the figure above against."""
    empty = work / "empty"
    empty.mkdir()
    viewer = subprocess.Popen(
        [PROBE, "view", str(empty), "--port", "0"],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    try:
        base = re.search(r"at (http://\S+)/ ", viewer.stderr.readline()).group(1)
        httpx.get(base + "/").raise_for_status()
        return peak_mb(viewer.pid)
    finally:
        viewer.terminate()
        viewer.wait(timeout=30)


def long_output(mb: float) -> bytes:
    """One line of about `mb` MB: a BOM, a zero-width space and a tab, then words and Chinese
    with nothing invisible in them (the longest run of text a page joins)."""
    unit = "the plan costs 42 € 你好世界 and more ".encode()
    return "\ufeff[[ANSWER]] zero\u200bwidth\t".encode() + unit * max(1, int(mb * 1024 * 1024 / len(unit)))


def child_figures(command: list[str]) -> tuple[float, float, int]:
    """Wall time, peak resident size (MB) and bytes printed of one command in its own process."""
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    printed = len(process.stdout.read())
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    assert process.returncode == 0, command
    return time.perf_counter() - started, usage.ru_maxrss / 1024, printed


def measure_long(work: Path, mb: float) -> list[tuple[str, str]]:
    """`probe show` and the viewer's case page on one output of `mb` MB."""
    runs = work / "long-runs"
    run = make_run(runs / "20261130T000000-long-000001", 40, output="[[ANSWER]]\nok")
    lines = (run / "samples.jsonl").read_bytes().splitlines(keepends=True)
    first = json.loads(lines[0])
    data = long_output(mb)
    # The first sample's output is the long one (a raw file, as a run before packs wrote it).
    (run / "raw" / f"{first['sample_id']}.txt").write_bytes(data)
    first["raw"] = {"path": f"raw/{first['sample_id']}.txt", "sha256": hashlib.sha256(data).hexdigest(),
                    "bytes": len(data)}
    (run / "samples.jsonl").write_bytes(json.dumps(first).encode() + b"\n" + b"".join(lines[1:]))
    size = f"{len(data) / 1024 / 1024:.3g} MB output"
    rows = []
    seconds, memory, printed = child_figures([PROBE, "show", str(run), "--sample", first["sample_id"]])
    figure = f"{seconds:.2f} s, peak {memory:.0f} MB, {printed / 1024:.0f} KB printed"
    rows.append((f"probe show, one {size}", figure))
    second = json.loads(lines[1])["sample_id"]
    seconds, memory, _ = child_figures([PROBE, "show", str(run), "--sample", second])
    label = "probe show, a 14-byte output of the same run (for reference)"
    rows.append((label, f"{seconds:.2f} s, peak {memory:.0f} MB"))
    viewer = subprocess.Popen(
        [PROBE, "view", str(runs), "--port", "0"],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    try:
        base = re.search(r"at (http://\S+)/ ", viewer.stderr.readline()).group(1)
        arms = json.loads((run / "manifest.json").read_text())["arms"]
        arm = next(a["arm"] for a in arms if a["prompt"] == first["prompt"])
        with httpx.Client(base_url=base, timeout=600) as client:
            seconds, answer = timed_get(client, f"/runs/{run.name}/cases/{first['case_id']}?arm={arm}")
            assert "Cut for display" in answer.text
            figure = f"{seconds:.2f} s ({len(answer.content) / 1024:.0f} KB)"
            rows.append(
                (f"viewer case page with one {size}", figure)
            )
        rows.append(("probe view: peak memory after that page", f"{peak_mb(viewer.pid):.0f} MB"))
    finally:
        viewer.terminate()
        viewer.wait(timeout=30)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=100_000)
    parser.add_argument("--work", type=Path, default=None, help="Where to write the synthetic run (kept).")
    parser.add_argument("--long-mb", type=float, default=20.0, help="The long output's size (0: none).")
    args = parser.parse_args()
    compile_package()  # timed as an installed copy runs: bytecode compiled
    with tempfile.TemporaryDirectory(prefix="probe-viewer-") as folder:
        work = args.work or Path(folder)
        rows = measure(work, args.samples) if args.samples else []
        rows += measure_long(work, args.long_mb) if args.long_mb else []
    print("| what | figure |")
    print("|---|---|")
    for label, figure in rows:
        print(f"| {label} | {figure} |")


if __name__ == "__main__":
    main()
