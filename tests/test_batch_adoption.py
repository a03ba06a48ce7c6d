"""A run never adopts a batch it did not create (issue 37, item 6). Anthropic's batches carry no
marker of the run that made them, so two runs of the same size on one account see each other's
batches in the list: a create answered with an error made nothing and is not looked for; a batch
found again after a lost answer is used only once its results' custom ids are all the run's; a
batch that proves another's is never cancelled, counted or kept; an undocumented batch status is
waited on a while, then the run stops with the batch kept for --resume. Two runs against one
local batch server at once, the real SDK on both sides of the socket."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from batch_server import BatchServer, error_reply
from click.testing import CliRunner
from conftest import ROOT, write_probeset
from servers import Reply

from promptprobe.cli import main
from promptprobe.jsonio import read_jsonl

PROMPT = str(ROOT / "prompts" / "always-header.md")
PROBE = str(Path(sys.executable).parent / "probe")
KEY = {"ANTHROPIC_API_KEY": "sk-ant-test-key-0123456789"}


def arguments(folder: Path, url: str) -> list[str]:
    """`probe run --batch` of 3 questions x 2 repeats (6 requests) into `folder`/runs."""
    folder.mkdir()
    probeset = write_probeset(folder / "p.toml", [(f"c{i}", f"question {i}", None) for i in range(3)])
    return ["run", str(probeset), "--prompt", PROMPT, "-m", f"anthropic:claude-test@{url}", "--retrieval", "none",
            "--batch", "--poll-interval", "0.02", "-n", "2", "--runs-dir", str(folder / "runs"),
            "--max-retry-wait", "0.05"]


def start(folder: Path, url: str) -> subprocess.Popen:
    """Run A: in its own process, as another CI job on the same account would be."""
    return subprocess.Popen([PROBE, *arguments(folder, url)], cwd=folder.parent, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, **KEY})


def run_b(folder: Path, url: str, *args: str):
    """Run B: in this process, while run A's batch is in progress."""
    return CliRunner(env=KEY).invoke(main, [*arguments(folder, url), *args])


def wait_for(condition, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def finished(process: subprocess.Popen) -> tuple[int, str]:
    _, err = process.communicate(timeout=60)
    return process.returncode, err


def samples_of(folder: Path) -> dict[str, dict]:
    (run,) = (folder / "runs").iterdir()
    return {s["sample_id"]: s for s in read_jsonl(run / "samples.jsonl")}


def ledger_of(folder: Path) -> list[dict]:
    (run,) = (folder / "runs").iterdir()
    entries: dict[str, dict] = {}
    for entry in read_jsonl(run / "batches.jsonl"):
        entries[entry["submission"]] = entry
    return list(entries.values())


def test_a_run_whose_creates_fail_adopts_nothing_of_another_run_of_the_same_size(tmp_path):
    # The reproduction, both runs at once: run A's 6-request batch is in progress; run B,
    # also 6 requests, has every create answered 500 (today: B took A's batch as its own).
    def fault(kind, n, handle, request):
        return error_reply(500) if kind == "create" and n >= 2 else handle()

    with BatchServer(polls=500, fault=fault) as server:
        a = start(tmp_path / "a", server.url)
        wait_for(lambda: len(server.batches) == 1)
        (theirs,) = server.batches.values()
        lists_before = server.calls["list"]
        b = run_b(tmp_path / "b", server.url, "--max-attempts", "3")
        assert b.exit_code == 3, b.output
        (line,) = [x for x in b.stderr.splitlines() if x.startswith("error: ")]
        assert "could not create a batch after 3 attempt(s)" in line and "its 6 requests were not sent" in line
        assert "batches: " not in b.stderr  # nothing of A's batch was counted as B's
        assert server.calls["create"] == 1 + 3 and server.calls["list"] == lists_before + 1  # B's check only
        theirs.polls_left = 1  # A's batch may end now
        code, err = finished(a)
    assert code == 0, err
    assert server.cancels == 0 and not theirs.cancelled
    assert [s["batch"] for s in samples_of(tmp_path / "a").values()] == [theirs.id] * 6
    assert not (tmp_path / "b" / "runs").exists() or not any((tmp_path / "b" / "runs").iterdir())


def test_a_lost_create_answer_takes_another_runs_batch_as_a_candidate_only(tmp_path):
    # B's first create made nothing and its answer never came; A's batch of the same size is the
    # one B finds. Its results name A's requests: B uses none, cancels nothing and sends again.
    def fault(kind, n, handle, request):
        if kind == "create" and n == 2:
            return Reply(body=b"{}", delay=30)
        reply = handle()
        if kind == "list" and n == 3:  # B looks for what its create made: A's batch may end now
            theirs.polls_left = 1
        return reply

    with BatchServer(polls=10_000, fault=fault) as server:
        a = start(tmp_path / "a", server.url)
        wait_for(lambda: len(server.batches) == 1 and server.calls["list"] == 1)
        (theirs,) = server.batches.values()
        server.polls = 2  # batches made from here on end soon
        b = run_b(tmp_path / "b", server.url, "--timeout", "1")
        code, err = finished(a)
    assert code == 0 and b.exit_code == 0, (err, b.output)
    assert server.cancels == 0 and not theirs.cancelled
    mine = samples_of(tmp_path / "b")
    assert len(mine) == 6 and all(s["error"] is None and s["batch"] not in (None, theirs.id) for s in mine.values())
    assert all(s["attempts"] == 1 and [e["kind"] for e in s["attempts_log"]] == ["batch_not_ours"]
               for s in mine.values())
    not_ours, own = ledger_of(tmp_path / "b")
    assert not_ours["foreign"] == theirs.id and not_ours["batch"] is None and not_ours["found_again"]
    assert own["batch"] == mine["c0.r1.a1"]["batch"] and own["collected"]
    assert [s["batch"] for s in samples_of(tmp_path / "a").values()] == [theirs.id] * 6
    (run,) = (tmp_path / "b" / "runs").iterdir()
    assert not list((run / "raw").glob("*.unmatched.jsonl"))  # A's outputs are not B's to keep


def test_an_undocumented_batch_status_is_waited_on_then_the_batch_is_kept_for_resume(tmp_path):
    paused = {"on": True}

    def fault(kind, n, handle, request):
        reply = handle()
        if kind == "retrieve" and paused["on"]:
            view = json.loads(reply.body)
            return Reply(body=json.dumps(dict(view, processing_status="paused")).encode())
        return reply

    probeset = write_probeset(tmp_path / "p.toml", [(f"c{i}", f"question {i}", None) for i in range(3)])
    with BatchServer(polls=1, fault=fault) as server:
        result = CliRunner(env=KEY).invoke(main, [
            "run", str(probeset), "--prompt", PROMPT, "-m", f"anthropic:claude-test@{server.url}",
            "--retrieval", "none", "--batch", "--poll-interval", "0.01", "-n", "2",
            "--runs-dir", str(tmp_path / "runs")])
        assert result.exit_code == 3, result.output
        (line,) = [x for x in result.stderr.splitlines() if x.startswith("error: ")]
        (batch_id,) = server.batches
        assert f"batch {batch_id} (anthropic:claude-test@{server.url}): its status 'paused' is not one the " \
               "batch API documents, still after 20 looks" in line and "probe run --resume" in line
        assert server.calls["retrieve"] == 20 and server.cancels == 0
        (run,) = (tmp_path / "runs").iterdir()
        paused["on"] = False
        resumed = CliRunner(env=KEY).invoke(main, ["run", "--resume", str(run), "--poll-interval", "0.01"])
    assert resumed.exit_code == 0, resumed.output
    assert len(read_jsonl(run / "samples.jsonl")) == 6 and len(server.batches) == 1


def test_the_progress_line_counts_a_candidate_only_once_it_is_confirmed():
    from promptprobe.engine.batch_ledger import BatchLedger
    from promptprobe.providers.batching import BatchState

    ledger = BatchLedger.__new__(BatchLedger)  # the account alone: no run directory needed
    ledger.entries = [
        {"batch": "msgbatch_ours", "samples": ["a", "b"], "collected": False},
        {"batch": "msgbatch_maybe", "samples": ["c", "d", "e"], "collected": False, "confirmed": False},
        {"batch": None, "foreign": "msgbatch_theirs", "samples": ["f"], "collected": False},
    ]
    states = {"msgbatch_ours": BatchState("in_progress", False, 1, 2),
              "msgbatch_maybe": BatchState("in_progress", False, 3, 3)}
    assert ledger.progress(states, None) == (
        "batches: 0/1 ended, 1/2 requests done (and 1 found again, this run's only if their results say "
        "so), results within the providers' 24 h window")
