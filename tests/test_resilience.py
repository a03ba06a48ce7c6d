"""Runs that survive: Ctrl-C, SIGTERM and SIGKILL on a real `probe run` process, resume, torn
lines, a full disk, models and retrievals that are down, huge plans, bad production code."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner
from conftest import ROOT, run_dir_of, write_probeset
from servers import LocalServer, Reply

from promptprobe.cli import main
from promptprobe.engine.store import run_state
from promptprobe.jsonio import read_jsonl
from promptprobe.pack import read_raw

PROMPT = str(ROOT / "prompts" / "always-header.md")
PROBE = str(Path(sys.executable).parent / "probe")


def start_probe(tmp_path: Path, *args: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [PROBE, "run", "--retrieval", "none", *args, "--runs-dir", str(tmp_path / "runs")],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
        # As from a terminal: the test runner itself may run with Ctrl-C ignored (a background job).
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def wait_for(condition, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting")
        time.sleep(0.02)


def the_run(tmp_path: Path) -> Path:
    (run,) = (tmp_path / "runs").iterdir()
    return run


def probeset(tmp_path: Path, cases: int, repeats: int = 1) -> str:
    return str(write_probeset(tmp_path / "p.toml", [(f"c{i}", f"question {i}", None) for i in range(cases)],
                              repeats=repeats))


FOREVER = 3600  # a call that never ends while the test lives (the server's stop ends it)


def hang_but_marker(request):
    """Every model call hangs; the test's own marker request is answered at once."""
    if request.path == "/marker":
        return Reply(body=b"{}")
    return Reply("[[ANSWER]]\nok", delay=FOREVER)


def count_connections(server: LocalServer) -> list:
    """Connections in the order the server accepted them (one request each: it closes them)."""
    accepted = []
    original = server.httpd.process_request

    def counting(request, address):
        accepted.append(address)
        original(request, address)

    server.httpd.process_request = counting
    return accepted


def connections_made_before_now(server: LocalServer, accepted: list) -> int:
    """Every connection a process that has exited made, counted without a sleep: the server accepts
    in arrival order, so once the marker sent now is answered, all earlier ones were accepted."""
    httpx.get(f"{server.url}/marker", timeout=30)
    return len(accepted) - 1


class StderrLines:
    """A process's stderr read line by line as it comes, so a test can wait for a line."""

    def __init__(self, process: subprocess.Popen) -> None:
        self.lines: list[str] = []
        self.thread = threading.Thread(target=self._read, args=(process.stderr,), daemon=True)
        self.thread.start()

    def _read(self, stream) -> None:
        for line in stream:
            self.lines.append(line)

    def text(self) -> str:
        self.thread.join(timeout=30)
        return "".join(self.lines)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_first_signal_stops_new_calls_and_exits_without_waiting_for_the_calls_in_flight(tmp_path, sig):
    with LocalServer(hang_but_marker) as server:  # every call hangs, for as long as the test lives
        accepted = count_connections(server)
        process = start_probe(tmp_path, probeset(tmp_path, 12), "--prompt", PROMPT,
                              "--model", f"openai:m@{server.url}/v1", "--concurrency", "3")
        wait_for(lambda: len(server.requests) == 3)
        before = len(accepted)  # the three calls (and the check that the endpoint is up)
        process.send_signal(sig)
        # The calls in flight never end: the process can only exit by abandoning them.
        out, err = process.communicate(timeout=60)
        made = connections_made_before_now(server, accepted)
    calls = [r for r in server.requests if r.path != "/marker"]
    assert made == before and len(calls) == 3  # no new call after the signal
    assert process.returncode == 128 + sig
    assert "interrupted: 0 samples recorded in" in err and "--resume" in err
    run = the_run(tmp_path)
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "interrupted"
    assert run_state(run, manifest) == "interrupted"


def test_second_ctrl_c_exits_at_once_and_the_run_reads_as_killed(tmp_path):
    with LocalServer(hang_but_marker) as server:
        process = start_probe(tmp_path, probeset(tmp_path, 6), "--prompt", PROMPT,
                              "--model", f"openai:m@{server.url}/v1", "--concurrency", "2")
        stderr = StderrLines(process)
        wait_for(lambda: len(server.requests) == 2)
        process.send_signal(signal.SIGINT)
        wait_for(lambda: any("Ctrl-C again to quit at once" in line for line in stderr.lines))
        process.send_signal(signal.SIGINT)
        process.wait(timeout=60)  # the calls in flight never end: it exits without them
        assert process.returncode == 130, stderr.text()
    report = CliRunner().invoke(main, ["report", str(the_run(tmp_path)), "--json"])
    assert json.loads(report.stdout)["status"] in ("killed", "interrupted")


def test_sigkill_then_resume_runs_exactly_the_planned_samples_once(tmp_path):
    answers = []

    def reply(request):
        answers.append(request)
        return Reply("[[ANSWER]]\nok", delay=0.05)

    with LocalServer(reply) as server:
        process = start_probe(tmp_path, probeset(tmp_path, 10, repeats=3), "--prompt", PROMPT,
                              "--prompt", f"other={PROMPT}", "--model", f"openai:m@{server.url}/v1",
                              "--concurrency", "4")
        wait_for(lambda: (tmp_path / "runs").exists() and any((tmp_path / "runs").iterdir()))
        run = the_run(tmp_path)
        wait_for(lambda: (run / "samples.jsonl").exists() and len((run / "samples.jsonl").read_bytes().splitlines()) >= 15)
        process.send_signal(signal.SIGKILL)
        process.communicate(timeout=10)
        manifest = json.loads((run / "manifest.json").read_text())
        assert manifest["status"] == "running" and run_state(run, manifest) == "killed"
        before = len(read_jsonl(run / "samples.jsonl"))
        assert 15 <= before < 60
        resumed = CliRunner().invoke(main, ["run", "--resume", str(run)])
    assert resumed.exit_code == 0, resumed.output
    samples = read_jsonl(run / "samples.jsonl")
    planned = {f"c{i}.r{r}.a{a}" for i in range(10) for r in (1, 2, 3) for a in (1, 2)}
    assert sorted(s["sample_id"] for s in samples) == sorted(planned)  # each once
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["counts"] == {"planned": 60, "recorded": 60, "errors": 0}
    assert len(manifest["resumes"]) == 1
    # Both arms of a unit saw the same passages, resumed or not.
    by_unit: dict = {}
    for sample in samples:
        by_unit.setdefault((sample["case_id"], sample["repeat"]), set()).add(sample["retrieval"]["sha256"])
    assert all(len(digests) == 1 for digests in by_unit.values())


def test_a_torn_last_line_is_ignored_with_a_warning_and_resume_reruns_it(tmp_path):
    with LocalServer() as server:
        result = CliRunner().invoke(main, ["run", "--retrieval", "none", probeset(tmp_path, 4), "--prompt", PROMPT, "--model",
                                           f"openai:m@{server.url}/v1", "--runs-dir", str(tmp_path / "runs")])
        run = run_dir_of(result)
        lines = (run / "samples.jsonl").read_bytes().splitlines(keepends=True)
        torn_id = json.loads(lines[-1])["sample_id"]
        (run / "samples.jsonl").write_bytes(b"".join(lines[:-1]) + lines[-1][:40])  # a crash mid-write
        for command in (["report", str(run)], ["show", str(run)], ["export", str(run)]):
            shown = CliRunner().invoke(main, command)
            assert shown.exit_code == 0, shown.output
            assert "torn" in shown.stderr or "torn" in shown.stdout
        resumed = CliRunner().invoke(main, ["run", "--resume", str(run)])
    assert resumed.exit_code == 0, resumed.output
    samples = read_jsonl(run / "samples.jsonl")
    assert sorted(s["sample_id"] for s in samples) == [f"c{i}.r1.a1" for i in range(4)]
    assert torn_id in {s["sample_id"] for s in samples}


def test_resume_keeps_earlier_failed_attempts_aside(tmp_path):
    calls = []

    def flaky(request):
        calls.append(request)
        if request.json["messages"][-1]["content"] == "question 1" and len(calls) < 4:
            return Reply(status=500, body=b'{"error": {"message": "down for now"}}')
        return Reply("[[ANSWER]]\nok")

    with LocalServer(flaky) as server:
        (tmp_path / "probe.toml").write_text("[run]\nmax_attempts = 1\nconcurrency = 1\n")
        first = CliRunner().invoke(main, ["run", probeset(tmp_path, 3), "--prompt", PROMPT, "--model",
                                          f"openai:m@{server.url}/v1", "--runs-dir", str(tmp_path / "runs"),
                                          "--config", str(tmp_path / "probe.toml"), "--seed", "1"])
        assert first.exit_code == 1
        run = run_dir_of(first)
        resumed = CliRunner().invoke(main, ["run", "--resume", str(run)])
    assert resumed.exit_code == 0, resumed.output
    samples = read_jsonl(run / "samples.jsonl")
    assert len(samples) == 3 and all(s["error"] is None for s in samples)
    (aside,) = read_jsonl(run / "superseded.jsonl")
    assert aside["sample_id"] == "c1.r1.a1" and aside["error"]["kind"] == "http_status"


def test_resume_refuses_a_run_whose_copies_were_changed(tmp_path):
    with LocalServer() as server:
        done = CliRunner().invoke(main, ["run", "--retrieval", "none", probeset(tmp_path, 2), "--prompt", PROMPT, "--model",
                                         f"openai:m@{server.url}/v1", "--runs-dir", str(tmp_path / "runs")])
    run = run_dir_of(done)
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["status"] = "interrupted"
    (run / "manifest.json").write_text(json.dumps(manifest))
    (run / "prompts" / "always-header.md").write_text("an edited prompt\n")
    result = CliRunner().invoke(main, ["run", "--resume", str(run)])
    assert result.exit_code == 2 and "the prompt copy does not match its sha256 in the manifest" in result.stderr


def test_resume_refuses_a_changed_target_and_a_running_or_finished_run(tmp_path):
    with LocalServer() as server:
        config = tmp_path / "probe.toml"
        config.write_text("[run]\nconcurrency = 2\n")
        done = CliRunner().invoke(main, ["run", probeset(tmp_path, 2), "--prompt", PROMPT, "--model",
                                         f"openai:m@{server.url}/v1", "--runs-dir", str(tmp_path / "runs"),
                                         "--config", str(config)])
    run = run_dir_of(done)
    finished = CliRunner().invoke(main, ["run", "--resume", str(run)])
    assert finished.exit_code == 2 and "nothing to resume" in finished.stderr
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["status"] = "interrupted"
    (run / "manifest.json").write_text(json.dumps(manifest))
    config.write_text("[run]\nconcurrency = 3\n")
    changed = CliRunner().invoke(main, ["run", "--resume", str(run)])
    assert changed.exit_code == 2 and "the target config changed" in changed.stderr
    extra = CliRunner().invoke(main, ["run", "--resume", str(run), "--prompt", PROMPT])
    assert extra.exit_code == 2 and "it accepts only --concurrency" in extra.stderr and "not --prompt" in extra.stderr


def test_a_file_size_limit_mid_run_stops_cleanly_with_nothing_torn(tmp_path):
    """The kernel refuses writes past RLIMIT_FSIZE (as a full disk refuses them): exit 3, failed."""
    big = "[[ANSWER]]\n" + "x" * 6000
    with LocalServer(lambda r: Reply(big)) as server:
        code = (
            "import resource, signal, sys\n"
            "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
            "resource.setrlimit(resource.RLIMIT_FSIZE, (100000, 100000))\n"
            "from promptprobe.cli import main\n"
            f"sys.argv = ['probe', 'run', '--retrieval', 'none', {probeset(tmp_path, 150)!r}, '--prompt', {PROMPT!r}, "
            f"'--model', 'openai:m@{server.url}/v1', '--runs-dir', {str(tmp_path / 'runs')!r}, '--concurrency', '1']\n"
            "main()\n"
        )
        process = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                                 cwd=tmp_path)
    assert process.returncode == 3, process.stderr
    assert "cannot write" in process.stderr and "Traceback" not in process.stderr
    run = the_run(tmp_path)
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "failed"
    assert not (run / "manifest.json.tmp").exists()
    samples = read_jsonl(run / "samples.jsonl")  # every line whole
    assert (run / "samples.jsonl").read_bytes().endswith(b"\n")
    for sample in samples:
        assert len(read_raw(run, sample)) == sample["raw"]["bytes"]


def test_a_full_disk_stops_cleanly(tmp_path):
    mount = tmp_path / "tiny"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=400k", "tmpfs", str(mount)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a small tmpfs here (needs root): the RLIMIT_FSIZE test covers the path")
    try:
        big = "[[ANSWER]]\n" + "x" * 20000
        answered = []

        def reply(request):
            # The writer commits whatever was queued meanwhile in one all-or-nothing group: a
            # first group that does not fit (the writer thread starved under load) records
            # nothing and the run keeps no directory. Holding the second answer until the first
            # sample is on disk makes the first group that one sample; the disk fills later.
            if answered:
                wait_for(lambda: any(p.stat().st_size for p in (mount / "runs").glob("*/samples.jsonl")))
            answered.append(request)
            return Reply(big)

        with LocalServer(reply) as server:
            result = CliRunner().invoke(main, ["run", "--retrieval", "none", probeset(tmp_path, 40), "--prompt", PROMPT, "--model",
                                               f"openai:m@{server.url}/v1", "--runs-dir", str(mount / "runs"),
                                               "--concurrency", "1"])
        assert result.exit_code == 3, result.output
        assert "the disk is full" in result.stderr
        (run,) = (mount / "runs").iterdir()
        assert json.loads((run / "manifest.json").read_text())["status"] == "failed"
        read_jsonl(run / "samples.jsonl")
        assert (run / "samples.jsonl").read_bytes().endswith(b"\n")
    finally:
        subprocess.run(["umount", str(mount)], capture_output=True)


def test_an_unwritable_runs_dir_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with LocalServer() as server:
        result = CliRunner().invoke(main, ["run", "--retrieval", "none", probeset(tmp_path, 1), "--prompt", PROMPT, "--model",
                                           f"openai:m@{server.url}/v1", "--runs-dir", str(blocker / "runs")])
    assert result.exit_code == 3
    assert result.stderr.startswith(f"error: --runs-dir {blocker / 'runs'}: cannot create a run directory there")
    assert "Traceback" not in result.output


def test_one_model_down_the_other_completes(tmp_path):
    with LocalServer() as healthy:
        down = f"http://127.0.0.1:{free_port()}/v1"
        (tmp_path / "probe.toml").write_text("[run]\nmax_attempts = 1\nconcurrency = 2\n")
        result = CliRunner().invoke(main, ["run", probeset(tmp_path, 9), "--prompt", PROMPT,
                                           "--model", f"openai:good@{healthy.url}/v1", "--model", f"openai:bad@{down}",
                                           "--runs-dir", str(tmp_path / "runs"), "--config", str(tmp_path / "probe.toml")])
    assert result.exit_code == 1, result.output
    samples = read_jsonl(run_dir_of(result) / "samples.jsonl")
    good = [s for s in samples if s["model"].startswith("openai:good")]
    bad = [s for s in samples if s["model"].startswith("openai:bad")]
    assert len(good) == 9 and all(s["error"] is None for s in good)
    assert len(bad) == 9 and all(s["error"] for s in bad)
    # Its port refused the connection before the run started: never called, every sample recorded.
    assert {s["error"]["kind"] for s in bad} == {"model_down"}
    assert sum(s["attempts"] for s in bad) == 0
    assert "cannot connect to 127.0.0.1" in bad[0]["error"]["message"]


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_401_on_every_call_fails_fast(tmp_path):
    calls = []

    def unauthorized(request):
        calls.append(request)
        return Reply(status=401, body=b'{"error": {"message": "invalid api key"}}')

    with LocalServer(unauthorized) as server:
        result = CliRunner().invoke(main, ["run", "--retrieval", "none", probeset(tmp_path, 30), "--prompt", PROMPT, "--model",
                                           f"openai:m@{server.url}/v1", "--runs-dir", str(tmp_path / "runs"),
                                           "--concurrency", "1"])
    assert result.exit_code == 3
    assert "HTTP 401" in result.stderr and "the model looks down" in result.stderr
    assert len(calls) == 3
    assert json.loads((the_run(tmp_path) / "manifest.json").read_text())["status"] == "failed"


def test_a_retrieval_that_404s_on_every_call_fails_fast(tmp_path):
    searches = []

    def missing(request):
        searches.append(request)
        return Reply(status=404, body=b"no such index", content_type="text/plain")

    with LocalServer(missing) as retrieval, LocalServer() as model:
        (tmp_path / "probe.toml").write_text(
            f'[retrieval]\nkind = "http"\nurl = "{retrieval.url}/s"\nbody = {{ q = "{{question}}" }}\n[run]\nconcurrency = 1\n')
        result = CliRunner().invoke(main, ["run", probeset(tmp_path, 30), "--prompt", PROMPT, "--model",
                                           f"openai:m@{model.url}/v1", "--runs-dir", str(tmp_path / "runs"),
                                           "--config", str(tmp_path / "probe.toml")])
        assert model.requests == []
    assert result.exit_code == 3
    assert "HTTP 404" in result.stderr and "the retrieval failed the same way on the first 3 questions" in result.stderr
    assert len(searches) <= 4


def test_a_huge_plan_asks_for_yes(tmp_path):
    result = CliRunner().invoke(main, ["run", "--retrieval", "none", probeset(tmp_path, 10), "--prompt", PROMPT, "--model",
                                       "openai:m@http://127.0.0.1:9/v1", "-n", "1000000",
                                       "--runs-dir", str(tmp_path / "runs")])
    assert result.exit_code == 2
    assert "this plan makes 10,000,000 model calls" in result.stderr and "--yes" in result.stderr
    assert not (tmp_path / "runs").exists()
    priced = CliRunner().invoke(main, ["run", probeset(tmp_path, 10), "--prompt", PROMPT, "--model",
                                       "openai:gpt-4.1-mini", "-n", "1000000", "--dry-run", "--json"])
    assert priced.exit_code == 0, priced.output
    assert json.loads(priced.stdout)["calls"] == 10_000_000


def test_model_calls_start_before_all_retrievals_are_done(tmp_path):
    times: dict[str, list[float]] = {"retrieval": [], "model": []}

    def search(request):
        times["retrieval"].append(time.monotonic())
        return Reply(body=b'{"results": [{"id": "a", "text": "Alpha"}]}', delay=0.1)

    def model(request):
        times["model"].append(time.monotonic())
        return Reply("[[ANSWER]]\nok")

    with LocalServer(search) as retrieval, LocalServer(model) as provider:
        (tmp_path / "probe.toml").write_text(
            f'[retrieval]\nkind = "http"\nurl = "{retrieval.url}/s"\nbody = {{ q = "{{question}}" }}\n[run]\nconcurrency = 2\n')
        result = CliRunner().invoke(main, ["run", probeset(tmp_path, 20), "--prompt", PROMPT, "--model",
                                           f"openai:m@{provider.url}/v1", "--runs-dir", str(tmp_path / "runs"),
                                           "--config", str(tmp_path / "probe.toml")])
    assert result.exit_code == 0, result.output
    assert min(times["model"]) < max(times["retrieval"]) - 0.5


@pytest.mark.parametrize("module,message", [
    ("def retrieve(question, history)\n    return []\n", "syntax error"),
    ("import sys\nsys.exit(3)\n", "called sys.exit(3)"),
    ("raise RuntimeError('no database')\n", "raised RuntimeError: no database"),
])
def test_bad_production_retriever_modules_are_exit_2(tmp_path, monkeypatch, module, message):
    (tmp_path / "badrag.py").write_text(module)
    (tmp_path / "probe.toml").write_text('[retrieval]\nkind = "python"\nfunction = "badrag:retrieve"\n')
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "badrag", raising=False)
    result = CliRunner().invoke(main, ["run", probeset(tmp_path, 1), "--prompt", PROMPT, "--model",
                                       "openai:m@http://127.0.0.1:9/v1", "--runs-dir", str(tmp_path / "runs")])
    assert result.exit_code == 2, result.output
    assert message in result.stderr and "[retrieval] function 'badrag:retrieve'" in result.stderr
    assert "Traceback" not in result.output


def test_a_retriever_calling_sys_exit_while_probing_is_exit_2(tmp_path, monkeypatch):
    (tmp_path / "exitrag.py").write_text("import sys\ndef retrieve(question, history):\n    sys.exit(4)\n")
    (tmp_path / "probe.toml").write_text('[retrieval]\nkind = "python"\nfunction = "exitrag:retrieve"\n')
    monkeypatch.chdir(tmp_path)
    with LocalServer() as server:
        result = CliRunner().invoke(main, ["run", probeset(tmp_path, 2), "--prompt", PROMPT, "--model",
                                           f"openai:m@{server.url}/v1", "--runs-dir", str(tmp_path / "runs")])
    assert result.exit_code == 2, result.output
    assert "called sys.exit(4) while probing" in result.stderr


def test_an_empty_case_list_is_exit_2(tmp_path):
    path = tmp_path / "p.toml"
    path.write_text("case = []\n")
    result = CliRunner().invoke(main, ["run", "--retrieval", "none", str(path), "--prompt", PROMPT, "--model", "openai:m@http://x/v1"])
    assert result.exit_code == 2 and "needs at least one case" in result.stderr


def test_run_files_are_private_unless_shared(tmp_path):
    with LocalServer() as server:
        private = CliRunner().invoke(main, ["run", "--retrieval", "none", probeset(tmp_path, 1), "--prompt", PROMPT, "--model",
                                            f"openai:m@{server.url}/v1", "--runs-dir", str(tmp_path / "a")])
        shared = CliRunner().invoke(main, ["run", "--retrieval", "none", probeset(tmp_path, 1), "--prompt", PROMPT, "--model",
                                           f"openai:m@{server.url}/v1", "--runs-dir", str(tmp_path / "b"), "--share"])
    for result, dir_mode, file_mode in ((private, 0o700, 0o600), (shared, 0o755, 0o644)):
        run = run_dir_of(result)
        for path in [run, *run.rglob("*")]:
            mode = path.stat().st_mode & 0o777
            assert mode == (dir_mode if path.is_dir() else file_mode), (path, oct(mode))


def test_progress_lines_off_a_terminal(tmp_path):
    with LocalServer(lambda r: Reply("[[ANSWER]]\nok", delay=0.1)) as server:
        process = start_probe(tmp_path, probeset(tmp_path, 8), "--prompt", PROMPT, "--model",
                              f"openai:m@{server.url}/v1", "--concurrency", "1",
                              env={"PROBE_PROGRESS_INTERVAL": "0.2"})
        _, err = process.communicate(timeout=60)
    lines = [line for line in err.splitlines() if line.startswith("progress: ")]
    assert len(lines) >= 2 and "/8 samples, 0 errors" in lines[-1] and "samples/s" in lines[-1]


def test_progress_off_a_terminal_says_nothing_twice_while_a_batch_waits(capsys):
    from promptprobe.cli import Progress

    err: list[str] = []

    def said(count: int) -> bool:
        err.append(capsys.readouterr().err)
        return "".join(err).count("progress: ") >= count

    with Progress(24, interval=0.02) as progress:
        progress.batches("batches: 0/1 ended, 0/24 requests done")
        wait_for(lambda: said(1))  # the reporting thread has had its turn, however loaded the machine
        time.sleep(0.3)  # some fifteen intervals with nothing new
        progress.batches("batches: 1/1 ended, 24/24 requests done")
        wait_for(lambda: said(2))
        time.sleep(0.1)  # more intervals with nothing new
    said(0)
    lines = [line for line in "".join(err).splitlines() if line.startswith("progress: ")]
    assert lines == [
        "progress: 0/24 samples recorded, 0 errors; batches: 0/1 ended, 0/24 requests done",
        "progress: 0/24 samples recorded, 0 errors; batches: 1/1 ended, 24/24 requests done",
    ]


def test_a_run_started_with_ctrl_c_ignored_keeps_ignoring_it_and_stops_on_sigterm(tmp_path):
    with LocalServer(lambda r: Reply("[[ANSWER]]\nok", delay=60)) as server:
        process = subprocess.Popen(
            [PROBE, "run", "--retrieval", "none", probeset(tmp_path, 4), "--prompt", PROMPT, "--model", f"openai:m@{server.url}/v1",
             "--concurrency", "2", "--runs-dir", str(tmp_path / "runs")],
            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),  # like `nohup probe run ... &`
        )
        wait_for(lambda: len(server.requests) == 2)
        process.send_signal(signal.SIGINT)
        time.sleep(0.5)
        assert process.poll() is None  # still running
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=10)
    assert process.returncode == 143
