"""A runs store in S3 (`--runs-dir s3://...`, `probe push`, `probe pull`, `probe view s3://...`),
against a real S3 server on 127.0.0.1 (moto's server mode, s3_server.py): runs written straight
to the store and read back by every reader, a writer killed mid-run and resumed from the store,
two writers on one run, a run pushed from disk and read in the viewer, pull checked by sha256."""

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
import s3_server
from click.testing import CliRunner
from conftest import ROOT, write_probeset
from servers import LocalServer, Reply
from test_ci_gate import EXCEPTION_ONLY, demo_url, repository  # noqa: F401  (the gate's fixtures)

from promptprobe.cli import main

PROMPT = str(ROOT / "prompts" / "always-header.md")
PROBE = str(Path(sys.executable).parent / "probe")


@pytest.fixture(scope="session")
def s3_endpoint():
    server, endpoint = s3_server.start()
    yield endpoint
    server.stop()


@pytest.fixture
def s3(s3_endpoint, tmp_path, monkeypatch):
    return s3_server.new_bucket(s3_endpoint, s3_server.environment(s3_endpoint, tmp_path), monkeypatch)


def objects(s3) -> dict[str, bytes]:
    """Every object of the test's bucket, by key."""
    found = {}
    for page in s3.client.get_paginator("list_objects_v2").paginate(Bucket=s3.bucket):
        for item in page.get("Contents", []):
            found[item["Key"]] = s3.client.get_object(Bucket=s3.bucket, Key=item["Key"])["Body"].read()
    return found


def keys(s3) -> list[str]:
    return [item["Key"] for page in s3.client.get_paginator("list_objects_v2").paginate(Bucket=s3.bucket)
            for item in page.get("Contents", [])]


def probeset(tmp_path: Path, cases: int, repeats: int = 1) -> str:
    return str(write_probeset(tmp_path / "p.toml", [(f"c{i}", f"question {i}", None) for i in range(cases)],
                              repeats=repeats))


def invoke(*args: str):
    return CliRunner().invoke(main, list(args))


def run_on_disk(tmp_path: Path, cases: int, reply=None) -> Path:
    """A finished run of `cases` questions and one prompt in `tmp_path/runs`, made on disk."""
    with LocalServer(reply) as server:
        made = invoke("run", "--retrieval", "none", probeset(tmp_path, cases), "--prompt", PROMPT, "--model",
                      f"openai:m@{server.url}/v1", "--runs-dir", str(tmp_path / "runs"))
    assert made.exit_code == 0, made.output
    (run,) = (tmp_path / "runs").iterdir()
    return run


def run_in_store(tmp_path, s3, server, cases=3, *extra):
    return invoke("run", "--retrieval", "none", probeset(tmp_path, cases), "--prompt", PROMPT,
                  "--prompt", f"other={PROMPT}", "--model", f"openai:m@{server.url}/v1",
                  "--runs-dir", s3.url, "--format", "json", *extra)


def test_a_run_written_to_the_store_is_listed_reported_and_shown_from_it(tmp_path, s3, monkeypatch):
    with LocalServer(lambda r: Reply("[[ANSWER]]\nthe answer, byte for byte\u00a0")) as server:
        result = run_in_store(tmp_path, s3, server)
    assert result.exit_code == 0, result.output
    assert f"run: {s3.url}/" in result.stderr
    stored = objects(s3)
    (run_id,) = {key.split("/")[2] for key in stored}
    prefix = f"team/runs/{run_id}/"
    # The store mirrors the run directory; the parts of the running run are gone; no lock or reserve.
    assert {f"{prefix}manifest.json", f"{prefix}samples.jsonl", f"{prefix}probeset.toml"} <= set(stored)
    assert not [key for key in stored if "/.store/parts/" in key or key.endswith((".lock", ".reserve", ".tmp"))]
    manifest = json.loads(stored[prefix + "manifest.json"])
    assert manifest["status"] == "complete" and manifest["counts"]["recorded"] == 6
    index = json.loads(stored[prefix + ".store/index.json"])["files"]
    for relative, entry in index.items():  # every file as the index says, whole at its own key
        assert entry["parts"] == [[relative, entry["size"]]]
        assert hashlib.sha256(stored[prefix + relative]).hexdigest() == entry["sha256"]
    raw = [json.loads(line)["raw"] for line in stored[prefix + "samples.jsonl"].splitlines()]
    assert {r["sha256"] for r in raw} == {hashlib.sha256("[[ANSWER]]\nthe answer, byte for byte\u00a0".encode()).hexdigest()}

    listed = invoke("runs", "--runs-dir", s3.url, "--format", "json")
    assert listed.exit_code == 0, listed.output
    (line,) = json.loads(listed.stdout)["runs"]
    assert (line["run"], line["id"], line["status"], line["samples"]) == (f"{s3.url}/{run_id}", run_id, "complete", 6)
    report = invoke("report", "latest", "--runs-dir", s3.url, "--format", "json")
    assert report.exit_code == 0, report.output
    assert [arm["samples"] for arm in json.loads(report.stdout)["arms"]] == [3, 3]
    by_prefix = invoke("report", run_id[:17], "--runs-dir", s3.url, "--format", "json")  # an id prefix
    assert by_prefix.exit_code == 0 and json.loads(by_prefix.stdout) == json.loads(report.stdout)
    verified = invoke("verify", "latest", "--runs-dir", s3.url)  # probe verify reads it through the store too
    assert verified.exit_code == 0, verified.output
    from promptprobe import api

    assert api.report("latest", runs_dir=s3.url).to_dict() == json.loads(report.stdout)  # the Python API
    shown = invoke("show", f"{s3.url}/{run_id}", "--case", "c1")  # a run's URL
    assert shown.exit_code == 0, shown.output
    assert "the answer, byte for byte" in shown.stdout
    nothing = invoke("run", "--resume", "latest", "--runs-dir", s3.url)  # refused, and the run given back
    assert nothing.exit_code == 2 and "the run is complete with no failed samples" in nothing.output
    # An offline reclassification of a run in the store is written there, and the run given back.
    classified = invoke("classify", "latest", "--runs-dir", s3.url, "--markers", "[[ANSWER]],[[OTHER]]")
    assert classified.exit_code == 0, classified.output
    assert "classifications/1.jsonl" in read_index(s3, run_id)
    lease = json.loads(objects(s3)[f"{prefix}.store/lease.00000003"])
    assert lease["released"] is True and lease["pid"] == os.getpid()
    monkeypatch.setenv("PROBE_RUNS_DIR", s3.url)
    assert json.loads(invoke("runs", "--format", "json").stdout)["runs"][0]["id"] == run_id
    with LocalServer(lambda r: Reply("[[ANSWER]]\na newer answer")) as server:
        assert run_in_store(tmp_path, s3, server).exit_code == 0
    # Two runs in the store: latest~1 names the older; every reader reads them from the store,
    # and names a run by its URL (not by the path of its copy on this machine).
    url = f"{s3.url}/{run_id}"
    older = invoke("report", "latest~1", "--format", "json")
    assert older.exit_code == 0, older.output
    assert json.loads(report.stdout)["run"] == url  # as the first report, before the newer run
    assert (json.loads(older.stdout)["run"], json.loads(older.stdout)["recorded"]) == (url, 6)
    assert url in invoke("report", "latest~1").stdout
    compared = invoke("compare", "latest~1", "latest")
    assert compared.exit_code == 0, compared.output
    assert f"A = latest~1 ({url})" in compared.stdout and "/cache/" not in compared.stdout
    as_json = json.loads(invoke("compare", "latest~1", "latest", "--format", "json").stdout)
    assert [(row["a"]["k"], row["b"]["k"]) for row in as_json["results"]][:1] == [(3, 3)]
    exported = invoke("export", "latest~1", "--format", "json")
    assert exported.exit_code == 0 and json.loads(exported.stdout)["run"] == url, exported.output
    assert "the answer, byte for byte" in exported.stdout
    why = invoke("why", "latest~1", "--format", "json")
    assert why.exit_code == 0, why.output
    assert json.loads(invoke("show", "latest~1", "--case", "c1", "--format", "json").stdout)["run"] == url
    nothing_such = invoke("show", "latest~1", "--case", "c9")
    assert nothing_such.exit_code == 2 and nothing_such.output.startswith(f"error: {url}: no case"), nothing_such.output
    loaded = api.load(url)  # the Python API, by URL
    assert loaded.report().to_dict()["run"] == url and loaded.report().to_dict()["recorded"] == 6
    missing = invoke("report", "latest~2")
    assert missing.exit_code == 2 and f"there is no such run in {s3.url} (it has 2)" in missing.output


def read_index(s3, run_id: str) -> dict:
    body = s3.client.get_object(Bucket=s3.bucket, Key=f"{s3.prefix}/{run_id}/.store/index.json")["Body"].read()
    return json.loads(body)["files"]


def store_lines(s3, run_id: str) -> int:
    """The samples the store's copy of a run holds now (as its index says), 0 before it has any."""
    try:
        return len(objects_of_file(s3, run_id, "samples.jsonl").splitlines())
    except (s3.client.exceptions.NoSuchKey, KeyError):
        return 0


def run_ids(s3) -> list[str]:
    listed = s3.client.list_objects_v2(Bucket=s3.bucket, Prefix=f"{s3.prefix}/", Delimiter="/")
    return [entry["Prefix"].split("/")[-2] for entry in listed.get("CommonPrefixes", [])]


def objects_of_file(s3, run_id: str, relative: str) -> bytes:
    entry = read_index(s3, run_id)[relative]
    return b"".join(s3.client.get_object(Bucket=s3.bucket, Key=f"{s3.prefix}/{run_id}/{key}")["Body"].read()
                    for key, _ in entry["parts"])


def wait_for(condition, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.05)


@pytest.mark.parametrize("resumed_on", ["the same machine", "another machine"])
def test_a_writer_killed_mid_run_is_resumed_from_the_store_losing_nothing_and_a_second_writer_is_refused(
    tmp_path, s3, monkeypatch, resumed_on
):
    """On the same machine the killed writer's working copy holds samples no checkpoint sent up
    (here none did: checkpoints every hour); on another machine the store's copy is all there is
    (here every answered sample went up as parts, checkpoints every 0.2 s)."""
    requests = []
    more, killed = threading.Event(), threading.Event()

    def reply(request):  # 4 calls answered, 4 more once told, the rest once the writer is killed
        requests.append(request)
        number = len(requests)
        if number > 4:
            more.wait(30)
        if number > 8:
            killed.wait(30)
        return Reply("[[ANSWER]]\nok")

    elsewhere = resumed_on == "another machine"
    if not elsewhere:
        more.set()
    sync = {"PROBE_STORE_SYNC_SECONDS": "0.2" if elsewhere else "3600", "PROBE_STORE_APPEND_BYTES": "0"}
    work = tmp_path / "cache" / "promptprobe" / "work"
    with LocalServer(reply) as server:
        process = subprocess.Popen(
            [PROBE, "run", "--retrieval", "none", probeset(tmp_path, 10, repeats=2), "--prompt", PROMPT,
             "--prompt", f"other={PROMPT}", "--model", f"openai:m@{server.url}/v1", "--concurrency", "2",
             "--runs-dir", s3.url],
            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **sync},
        )
        try:
            wait_for(lambda: run_ids(s3))
            (run_id,) = run_ids(s3)
            if elsewhere:
                wait_for(lambda: store_lines(s3, run_id) == 4)
                more.set()
                wait_for(lambda: store_lines(s3, run_id) == 8)  # the next 4 have gone up as a part
                assert len(read_index(s3, run_id)["samples.jsonl"]["parts"]) > 1
            else:
                copy = work / next(work.iterdir()).name / run_id
                wait_for(lambda: (copy / "samples.jsonl").is_file()
                         and len((copy / "samples.jsonl").read_bytes().splitlines()) == 8)
                assert store_lines(s3, run_id) == 0  # nothing sent up since the start
            # A second writer of the same run is refused while the first holds it.
            second = invoke("run", "--resume", "latest", "--runs-dir", s3.url)
            assert second.exit_code == 3, second.output
            assert f"{s3.url}/{run_id}: another probe process (pid {process.pid} on " in second.output
            assert "is writing this run" in second.output
            process.send_signal(signal.SIGKILL)
            process.communicate(timeout=10)
        finally:
            process.kill()
            more.set()
            killed.set()
        (copy,) = work.glob(f"*/{run_id}")
        recorded = (copy / "samples.jsonl").read_bytes().splitlines()  # what the killed writer recorded
        assert len(recorded) == 8
        listed = json.loads(invoke("runs", "--runs-dir", s3.url, "--format", "json").stdout)["runs"]
        assert [(run["id"], run["status"]) for run in listed] == [(run_id, "killed")]
        if elsewhere:
            monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "another-machine"))
        asked = len(requests)
        resumed = invoke("run", "--resume", "latest", "--runs-dir", s3.url, "--format", "json")
    assert resumed.exit_code == 0, resumed.output
    final = objects_of_file(s3, run_id, "samples.jsonl").splitlines()
    assert set(recorded) <= set(final)  # every record of the killed writer, byte for byte
    planned = {f"c{i}.r{r}.a{a}" for i in range(10) for r in (1, 2) for a in (1, 2)}
    assert sorted(json.loads(line)["sample_id"] for line in final) == sorted(planned)  # each once
    assert len(requests) - asked == 40 - len(recorded)  # only the missing samples were asked again
    manifest = json.loads(objects_of_file(s3, run_id, "manifest.json"))
    assert manifest["status"] == "complete" and manifest["counts"] == {"planned": 40, "recorded": 40, "errors": 0}
    assert not [key for key in keys(s3) if "/.store/parts/" in key]


# Put on the PYTHONPATH of a probe process, this stops it (os._exit, as a kill would) when it is
# about to write an object whose key matches $KILL_BEFORE, once the file $KILL_ARMED exists (if
# set) and an object whose key matches $KILL_AFTER (and whose bytes match $KILL_AFTER_BYTES) has
# been written since: a chosen point of a checkpoint or a push, whatever the timing.
KILL_HOOK = """
import os, re
from promptprobe.runstore import remote

_armed, _after = os.environ.get("KILL_ARMED"), re.compile(os.environ["KILL_AFTER"])
_body, _before = re.compile(os.environ.get("KILL_AFTER_BYTES", "").encode()), re.compile(os.environ["KILL_BEFORE"])
_seen, _write = [], remote.Store.pipe_many

def _pipe_many(self, objects):
    if _seen and any(_before.search(key) for key in objects):
        os._exit(9)
    _write(self, objects)
    if (not _armed or os.path.exists(_armed)) and any(
        _after.search(key) and _body.search(data) for key, data in objects.items()
    ):
        _seen.append(True)

remote.Store.pipe_many = _pipe_many
"""


def killing(tmp_path: Path, **points: str) -> dict[str, str]:
    """The environment of a probe process stopped at a chosen point (KILL_HOOK)."""
    folder = tmp_path / "kill-hook"
    folder.mkdir(exist_ok=True)
    (folder / "sitecustomize.py").write_text(KILL_HOOK)
    path = os.pathsep.join(p for p in (str(folder), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, **{f"KILL_{name.upper()}": value for name, value in points.items()}}


def consistent_copy(copy: Path, replaced: str) -> None:
    """What a reader of a copy in the cache finds between two of its files being replaced: every
    line that points into a pack finds its bytes there, and a finished manifest its samples."""
    for line in (copy / "raw" / "index.jsonl").read_bytes().splitlines() if (copy / "raw" / "index.jsonl").exists() else []:
        blob = json.loads(line)
        assert (copy / blob["pack"]).stat().st_size >= blob["offset"] + blob["bytes"], f"after {replaced}"
    samples = (copy / "samples.jsonl").read_bytes().splitlines() if (copy / "samples.jsonl").exists() else []
    for line in samples:
        raw = json.loads(line)["raw"]
        assert (copy / raw["pack"]).stat().st_size >= raw["offset"] + raw["bytes"], f"after {replaced}"
    manifest = json.loads((copy / "manifest.json").read_bytes())
    if manifest["status"] != "running":
        assert len(samples) == manifest["counts"]["recorded"], f"after {replaced}"


@pytest.mark.parametrize("killed_in", ["a checkpoint", "its final upload"])
def test_a_writer_killed_inside_a_checkpoint_leaves_the_last_one_and_a_resume_finishes_the_run(
    tmp_path, s3, monkeypatch, killed_in
):
    """Killed after a checkpoint's files went up and before its index (or after the end's files
    and manifest went up, before its index): readers see the run as the last checkpoint left it,
    killed, never complete; `--resume` on the same machine finishes it, each sample once; a
    reader's copy in the cache is never inconsistent while it is brought up to date."""
    requests = []
    more, killed = threading.Event(), threading.Event()

    def reply(request):  # 4 answered; the rest once told (in a checkpoint: 4 more, then none till the kill)
        requests.append(request)
        if len(requests) > 4:
            more.wait(30)
        if len(requests) > 8 and killed_in == "a checkpoint":
            killed.wait(30)
        return Reply("[[ANSWER]]\nok")

    armed = tmp_path / "armed"
    if killed_in == "a checkpoint":  # stopped before the index of a checkpoint that sent new parts
        points = {"armed": str(armed), "after": r"/samples\.jsonl", "before": r"/\.store/index\.json$"}
    else:  # stopped before the index of the first upload that sends the manifest saying complete:
        # the end's, or a checkpoint's between the run's end on disk and its final upload (a part)
        points = {"after": r"/manifest\.json", "after_bytes": r'"status": *"complete"', "before": r"/\.store/index\.json$"}
    env = {**killing(tmp_path, **points), "PROBE_STORE_SYNC_SECONDS": "0.1"}  # small files: sent whole
    with LocalServer(reply) as server:
        process = subprocess.Popen(
            [PROBE, "run", "--retrieval", "none", probeset(tmp_path, 5, repeats=2), "--prompt", PROMPT,
             "--prompt", f"other={PROMPT}", "--model", f"openai:m@{server.url}/v1", "--concurrency", "2",
             "--runs-dir", s3.url],
            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        )
        try:
            wait_for(lambda: run_ids(s3))
            (run_id,) = run_ids(s3)
            wait_for(lambda: store_lines(s3, run_id) == 4)
            armed.touch()
            more.set()
            _, stderr = process.communicate(timeout=60)
            assert process.returncode == 9, stderr  # stopped by the hook, where it was told
        finally:
            process.kill()
            more.set()
            killed.set()
        (copy,) = (tmp_path / "cache" / "promptprobe" / "work").glob(f"*/{run_id}")
        recorded = (copy / "samples.jsonl").read_bytes().splitlines()
        in_store = store_lines(s3, run_id)  # as the last whole checkpoint left it
        assert in_store < len(recorded) or killed_in == "its final upload"
        if killed_in == "a checkpoint":
            named = {f"{s3.prefix}/{run_id}/{key}" for entry in read_index(s3, run_id).values() for key, _ in entry["parts"]}
            assert in_store == 4 and [key for key in keys(s3) if "/samples.jsonl" in key and key not in named]
        listed = invoke("runs", "--runs-dir", s3.url, "--format", "json")
        assert listed.exit_code == 0 and listed.stderr == "", listed.output
        assert [(r["id"], r["status"], r["samples"]) for r in json.loads(listed.stdout)["runs"]] == [
            (run_id, "killed", in_store)]
        report = invoke("report", run_id, "--runs-dir", s3.url, "--format", "json")
        assert report.exit_code == 0, report.output
        assert (json.loads(report.stdout)["status"], json.loads(report.stdout)["recorded"]) == ("killed", in_store)
        asked = len(requests)
        resumed = invoke("run", "--resume", run_id, "--runs-dir", s3.url, "--format", "json")
    assert resumed.exit_code == 0, resumed.output
    final = objects_of_file(s3, run_id, "samples.jsonl").splitlines()
    assert set(recorded) <= set(final)  # nothing the killed writer recorded is lost
    planned = {f"c{i}.r{r}.a{a}" for i in range(5) for r in (1, 2) for a in (1, 2)}
    assert sorted(json.loads(line)["sample_id"] for line in final) == sorted(planned)  # each once
    assert len(requests) - asked == 20 - len(recorded)
    assert not [key for key in keys(s3) if "/.store/parts/" in key]
    # The reader's copy (killed, as listed) brought up to date: consistent between any two files.
    from promptprobe.runstore import download

    write = download._write
    read_copy = next((tmp_path / "cache" / "promptprobe" / "read").glob(f"*/{run_id}"))

    def checked_write(path, data):
        write(path, data)
        if path.parent == read_copy or read_copy in path.parents:
            consistent_copy(read_copy, path.name)

    monkeypatch.setattr(download, "_write", checked_write)
    after = invoke("report", run_id, "--runs-dir", s3.url, "--format", "json")
    assert after.exit_code == 0, after.output
    assert (json.loads(after.stdout)["status"], json.loads(after.stdout)["recorded"]) == ("complete", 20)


def test_a_finished_run_written_again_keeps_the_objects_its_index_names_until_its_new_index(tmp_path, s3, monkeypatch):
    """A run resumed after it finished rewrites files whose own keys its index names: they are
    copied aside first, so a writer stopped between two own keys leaves an index that holds."""
    from contextlib import nullcontext

    from promptprobe.runstore import Store, StoreError
    from promptprobe.runstore.download import materialize
    from promptprobe.runstore.lease import Lease
    from promptprobe.runstore.upload import Uploader

    store, local = Store.parse(s3.url), tmp_path / "work" / "r1"
    local.mkdir(parents=True)
    (local / "manifest.json").write_text('{"status": "complete"}')
    (local / "samples.jsonl").write_text('{"n": 1}\n')
    lease = Lease(store, "r1")
    lease.acquire()
    Uploader(store, "r1", local, lease, "first").checkpoint(nullcontext, final=True)
    with open(local / "samples.jsonl", "a") as handle:
        handle.write('{"n": 2}\n')
    (local / "manifest.json").write_text('{"status": "complete", "resumes": 1}')
    again = Uploader(store, "r1", local, lease, "second")
    again.adopt({k: {**v, "parts": [tuple(p) for p in v["parts"]]} for k, v in read_index(s3, "r1").items()})
    write = Store.pipe_many

    def stopped(self, objects):  # the writer is stopped after samples.jsonl, before the manifest
        if any(key.endswith("/r1/manifest.json") for key in objects):
            raise StoreError("stopped")
        write(self, objects)

    monkeypatch.setattr(Store, "pipe_many", stopped)
    with pytest.raises(StoreError):
        again.checkpoint(nullcontext, final=True)
    monkeypatch.setattr(Store, "pipe_many", write)
    assert objects(s3)[f"{s3.prefix}/r1/samples.jsonl"] == b'{"n": 1}\n{"n": 2}\n'  # rewritten
    monkeypatch.setattr("promptprobe.runstore.download.RETRY_WAIT", 0.001)
    materialize(store, "r1", tmp_path / "read")  # every file as the index names it, checked by sha256
    assert (tmp_path / "read" / "samples.jsonl").read_text() == '{"n": 1}\n'
    again.checkpoint(nullcontext, final=True)  # the next try ends it: every file whole at its own key
    assert {k: v["parts"] for k, v in read_index(s3, "r1").items()} == {
        "manifest.json": [["manifest.json", 36]], "samples.jsonl": [["samples.jsonl", 18]]}
    assert not [key for key in keys(s3) if "/.store/parts/" in key]


def test_a_run_on_disk_pushed_to_the_store_is_read_back_in_the_viewer(tmp_path, s3):
    from viewer_support import serving

    run = run_on_disk(tmp_path, 2, lambda r: Reply("[[ANSWER]]\npushed <b>bytes</b>"))
    pushed = invoke("push", str(run), s3.url)
    assert pushed.exit_code == 0, pushed.output
    assert pushed.stdout.strip() == f"{s3.url}/{run.name}: copied, every file checked by sha256"
    again = invoke("push", str(run), s3.url, "--format", "json")
    assert again.exit_code == 0 and json.loads(again.stdout) == {"run": f"{s3.url}/{run.name}", "copied": False}
    for relative in ("manifest.json", "samples.jsonl", "probeset.toml"):
        assert objects_of_file(s3, run.name, relative) == (run / relative).read_bytes()
    with serving(s3.url) as base:
        runs_page = httpx.get(f"{base}/.json", timeout=30).json()
        assert runs_page["runs_dir"] == s3.url
        assert [line["id"] for line in runs_page["runs"]] == [run.name]
        assert runs_page["runs"][0]["status"] == "complete"
        page = httpx.get(f"{base}/runs/{run.name}/cases/c1", timeout=30)
    assert page.status_code == 200
    assert "pushed &lt;b&gt;bytes&lt;/b&gt;" in page.text


def test_push_refuses_an_unfinished_run_and_pull_checks_every_file_by_sha256(tmp_path, s3, monkeypatch):
    run = run_on_disk(tmp_path, 2)
    manifest = json.loads((run / "manifest.json").read_text())
    (run / "manifest.json").write_text(json.dumps({**manifest, "status": "running", "pid": 2**22 + 7}))
    refused = invoke("push", str(run), s3.url)
    assert refused.exit_code == 2
    assert refused.output.strip() == (
        f"error: {run}: the run is killed, not finished; only a finished run is copied "
        f"(probe run --resume {run} finishes it)"
    )
    assert keys(s3) == []  # nothing was written
    (run / "manifest.json").write_text(json.dumps(manifest, indent=2))
    assert invoke("push", str(run), s3.url).exit_code == 0
    # The store's copy left unfinished (its writer could not send its end): the finished run
    # pushed from disk takes its place; a different run of the same id is refused.
    def store_copy(changed: dict | None) -> None:
        body = json.dumps({**manifest, **changed}).encode() if changed else (run / "manifest.json").read_bytes()
        s3.client.put_object(Bucket=s3.bucket, Key=f"{s3.prefix}/{run.name}/manifest.json", Body=body)
        index = json.loads(s3.client.get_object(Bucket=s3.bucket, Key=f"{s3.prefix}/{run.name}/.store/index.json")["Body"].read())
        index["files"]["manifest.json"] = {"size": len(body), "sha256": hashlib.sha256(body).hexdigest(),
                                           "parts": [["manifest.json", len(body)]]}
        s3.client.put_object(Bucket=s3.bucket, Key=f"{s3.prefix}/{run.name}/.store/index.json", Body=json.dumps(index).encode())

    store_copy({"status": "running", "finished": None})
    # A push killed after it wrote the manifest and before the index leaves that copy as it was
    # (readable, unfinished); a second push then takes its place.
    killed = subprocess.run([PROBE, "push", str(run), s3.url], capture_output=True, text=True, env=killing(
        tmp_path, after=r"/manifest\.json$", before=r"/\.store/index\.json$"))
    assert killed.returncode == 9, killed.stderr
    assert objects(s3)[f"{s3.prefix}/{run.name}/manifest.json"] == (run / "manifest.json").read_bytes()
    meanwhile = invoke("report", run.name, "--runs-dir", s3.url, "--format", "json")
    assert meanwhile.exit_code == 0 and json.loads(meanwhile.stdout)["status"] == "killed", meanwhile.output
    shutil.rmtree(tmp_path / "cache" / "promptprobe" / "read")  # the damaged object below is read afresh
    replaced = invoke("push", str(run), s3.url)
    assert replaced.exit_code == 0 and "copied, every file checked by sha256" in replaced.stdout, replaced.output
    assert not [key for key in keys(s3) if "/.store/parts/" in key]
    assert objects_of_file(s3, run.name, "manifest.json") == (run / "manifest.json").read_bytes()
    store_copy({"status": "running", "created": "2026-01-01T00:00:00.000Z"})
    other = invoke("push", str(run), s3.url)
    assert other.exit_code == 2 and "holds a different run of that id already; nothing was changed" in other.output
    store_copy(None)

    pulled = invoke("pull", f"{s3.url}/latest", str(tmp_path / "elsewhere"))
    assert pulled.exit_code == 0, pulled.output
    copy = Path(pulled.stdout.strip())
    assert copy == tmp_path / "elsewhere" / run.name
    mine = {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file() and p.name != ".lock"}
    assert {p.relative_to(copy): p.read_bytes() for p in copy.rglob("*") if p.is_file()} == mine
    assert oct(copy.stat().st_mode & 0o777) == "0o700"
    assert invoke("report", str(copy), "--format", "json").exit_code == 0
    again = invoke("pull", f"{s3.url}/{run.name}", str(tmp_path / "elsewhere"))
    assert again.exit_code == 2 and "exists already; nothing was changed" in again.output

    # One object changed behind the index's back: refused (after the fresh looks a reader takes
    # in case a writer was between two uploads; not waited for here), nothing left half-copied.
    monkeypatch.setattr("promptprobe.runstore.download.RETRY_WAIT", 0.001)
    samples = f"{s3.prefix}/{run.name}/samples.jsonl"
    body = s3.client.get_object(Bucket=s3.bucket, Key=samples)["Body"].read()
    s3.client.put_object(Bucket=s3.bucket, Key=samples, Body=body.replace(b"[[ANSWER]]", b"[[ANSW3R]]", 1))
    damaged = invoke("pull", f"{s3.url}/{run.name}", str(tmp_path / "third"))
    assert damaged.exit_code == 2
    assert damaged.output.strip() == (
        f"error: {s3.url}/{run.name}/samples.jsonl: does not match the sha256 the run's index records "
        "(the object was changed or damaged); it was not used"
    )
    assert not (tmp_path / "third" / run.name).exists()
    assert [p.name for p in (tmp_path / "third").iterdir()] == []
    report = invoke("report", run.name, "--runs-dir", s3.url)
    assert report.exit_code == 2 and "does not match the sha256" in report.output


def test_a_large_file_is_pushed_checked_and_pulled_a_chunk_at_a_time(tmp_path, s3, monkeypatch):
    from promptprobe.runstore import download, transfer
    from promptprobe.runstore.remote import Store

    run = run_on_disk(tmp_path, 3)
    # Every file counts as large here: sent whole, read back and fetched 1,000 bytes at a time.
    monkeypatch.setattr(transfer, "BATCH_BYTES", 1)
    monkeypatch.setattr(download, "STREAM_BYTES", 1)
    for module in (download, transfer):
        monkeypatch.setattr(module, "CHUNK_BYTES", 1000)
    read: list[int] = []
    chunks, put_file = Store.chunks, Store.put_file

    def counted(self, key, size):
        for chunk in chunks(self, key, size):
            read.append(len(chunk))
            yield chunk

    def damaged(self, local, key):  # the object is not what was sent
        put_file(self, local, key)
        if key.endswith("/samples.jsonl"):
            s3.client.put_object(Bucket=s3.bucket, Key=key.split("/", 1)[1], Body=b"not the file")

    monkeypatch.setattr(Store, "chunks", counted)
    monkeypatch.setattr(Store, "put_file", damaged)
    refused = invoke("push", str(run), s3.url)
    assert refused.exit_code == 2
    assert refused.output.strip() == (
        f"error: {s3.url}/{run.name}/samples.jsonl: the object read back does not match the file's sha256; "
        "the run is not complete in the store (push it again)"
    )
    monkeypatch.setattr(Store, "put_file", put_file)
    pushed = invoke("push", str(run), s3.url)
    assert pushed.exit_code == 0, pushed.output
    pulled = invoke("pull", f"{s3.url}/{run.name}", str(tmp_path / "elsewhere"))
    assert pulled.exit_code == 0, pulled.output
    copy = Path(pulled.stdout.strip())
    mine = {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file() and p.name != ".lock"}
    assert {p.relative_to(copy): p.read_bytes() for p in copy.rglob("*") if p.is_file()} == mine
    assert max(read) == 1000 and len(read) > 2 * len(mine)  # files of several chunks among them
    assert sum(read) > 2 * sum(len(data) for data in mine.values())  # each checked, then fetched


def test_no_credential_reaches_any_file_and_the_cache_is_private(tmp_path, s3, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-test-not-a-real-key-0000000000")
    with LocalServer() as server:
        result = run_in_store(tmp_path, s3, server, 2)
    assert result.exit_code == 0, result.output
    assert invoke("runs", "--runs-dir", s3.url).exit_code == 0
    assert invoke("show", "latest", "--runs-dir", s3.url).exit_code == 0
    secrets = [s3_server.SECRET_KEY, s3_server.ACCESS_KEY, "sk-openai-test-not-a-real-key"]
    written = {f"s3://{key}": body for key, body in objects(s3).items()}
    written.update({str(p): p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()})
    assert len(written) > 20
    leaked = [where for where, body in written.items() for secret in secrets if secret.encode() in body]
    assert leaked == []
    cache = tmp_path / "cache" / "promptprobe"
    assert {oct(folder.stat().st_mode & 0o777) for folder in [cache, *cache.rglob("*")] if folder.is_dir()} == {"0o700"}


def test_a_runs_store_named_in_probe_toml_and_refusals_in_one_sentence(tmp_path, s3, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "probe.toml").write_text(f'[retrieval]\nkind = "none"\n\n[run]\nruns_dir = "{s3.url}"\n')
    with LocalServer() as server:
        made = invoke("run", probeset(tmp_path, 1), "--prompt", PROMPT, "--model", f"openai:m@{server.url}/v1")
    assert made.exit_code == 0, made.output
    assert f"run: {s3.url}/" in made.stderr and not (tmp_path / "runs").exists()
    assert json.loads(invoke("runs", "--format", "json").stdout)["runs"][0]["status"] == "complete"
    refused = invoke("migrate", "latest")  # it would convert this machine's copy, not the stored run
    assert refused.exit_code == 2 and "probe migrate converts a run on disk" in refused.output
    bad = invoke("runs", "--runs-dir", "s3://Not_A_Bucket/x")
    assert bad.exit_code == 2 and bad.output.strip() == (
        "error: s3://Not_A_Bucket/x: not a usable runs store (s3://BUCKET/PREFIX, plain names only)")
    nothing = invoke("report", "latest", "--runs-dir", "s3://no-such-bucket-here/runs")
    assert nothing.exit_code == 3
    assert nothing.output.strip() == "error: s3://no-such-bucket-here/runs: no such bucket (no-such-bucket-here), or no access to it"
    assert invoke("runs", "--runs-dir", f"s3://{s3.bucket}/empty").output.strip() == f"no runs in s3://{s3.bucket}/empty"


def test_the_lease_one_writer_expiry_and_a_race_for_one_generation(s3):
    from promptprobe.errors import StartError
    from promptprobe.runstore import Store
    from promptprobe.runstore.lease import Lease, LeaseLost

    store = Store.parse(s3.url)
    key = f"{s3.prefix}/r1/.store/lease.00000001"

    def holder(host: str, expires: str) -> None:
        record = {"pid": 4242, "host": host, "expires": expires, "released": False}
        s3.client.put_object(Bucket=s3.bucket, Key=key, Body=json.dumps(record).encode())

    holder("ci-runner-7", "2999-01-01T00:00:00Z")  # another machine, renewed: the run is held
    with pytest.raises(StartError) as held:
        Lease(store, "r1").acquire()
    assert str(held.value).startswith(f"{s3.url}/r1: another probe process (pid 4242 on ci-runner-7) is writing")
    holder("ci-runner-7", "2001-01-01T00:00:00Z")  # it stopped renewing: the lease has lapsed
    mine = Lease(store, "r1")
    mine.acquire()
    assert mine.generation == 2
    late = Lease(store, "r1")  # the old holder comes back: it finds a later generation, and stops
    late.generation = 1
    with pytest.raises(LeaseLost):
        late.renew()
    mine.renew()
    # Two processes that both found generation 2 lapsed race for generation 3: one create wins.
    assert store.create(store.key("r1", ".store/lease.00000003"), b"{}") is True
    assert store.create(store.key("r1", ".store/lease.00000003"), b"{}") is False
    with pytest.raises(LeaseLost):  # and the holder of generation 2 learns it at its next renewal
        mine.renew()



def test_the_gate_writes_its_run_to_the_store_its_config_names(s3, repository, monkeypatch):  # noqa: F811
    config = repository / "probe.toml"
    config.write_text(re.sub(r"(?m)^models = ", f'runs_dir = "{s3.url}"\nmodels = ', config.read_text(), count=1))
    (repository / "prompts" / "always-header.md").write_bytes(EXCEPTION_ONLY)  # the change breaks it
    monkeypatch.chdir(repository)
    result = invoke("gate", "main", "prompts/always-header.md", "--metric", "header_present", "-n", "1",
                    "--format", "json")
    assert result.exit_code == 4, result.output
    (run_id,) = run_ids(s3)
    assert json.loads(objects_of_file(s3, run_id, "manifest.json"))["status"] == "complete"
    assert not (repository / "runs").exists()
    listed = json.loads(invoke("runs", "--format", "json").stdout)["runs"]  # probe.toml's store again
    assert [run["run"] for run in listed] == [f"{s3.url}/{run_id}"]
