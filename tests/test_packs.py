"""Raw bytes in packs: O(1) files a run, kills at any point of the writes, `probe verify` on every
kind of damage, `probe migrate` of runs written before packs, and the readers (show, export,
report, the viewer) on damaged runs: no traceback, no link followed, no sample counted twice, no
hang on a NUL tail."""

import hashlib
import json
import logging
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import ROOT, write_probeset
from servers import LocalServer, Reply

from promptprobe.cli import main
from promptprobe.jsonio import read_jsonl
from promptprobe.pack import INDEX, read_raw

PROMPT = str(ROOT / "prompts" / "always-header.md")
PROBE = str(Path(sys.executable).parent / "probe")


def reply(request) -> Reply:
    question = request.json["messages"][-1]["content"]
    return Reply(f"[[ANSWER]]\nanswer to {question}\r\n  \u200b" + "x" * (len(question) * 7))


def planned(cases: int, repeats: int, arms: int = 2) -> set[str]:
    return {f"c{i}.r{r}.a{a}" for i in range(cases) for r in range(1, repeats + 1) for a in range(1, arms + 1)}


def make_run(tmp_path: Path, server: LocalServer, cases: int = 4, repeats: int = 2) -> Path:
    probeset = write_probeset(tmp_path / "p.toml", [(f"c{i}", f"question {i}", None) for i in range(cases)],
                              repeats=repeats)
    result = CliRunner().invoke(main, ["run", "--retrieval", "none", str(probeset), "--prompt", PROMPT,
                                       "--prompt", f"other={PROMPT}", "--model", f"openai:m@{server.url}/v1",
                                       "--runs-dir", str(tmp_path / "runs"), "--json"])
    assert result.exit_code == 0, result.output
    return Path(json.loads(result.stdout)["run"])


def verify(run: Path) -> tuple[int, dict]:
    result = CliRunner().invoke(main, ["verify", str(run), "--format", "json"])
    return result.exit_code, json.loads(result.stdout)


@pytest.fixture(scope="module")
def server():
    with LocalServer(reply) as server:
        yield server


@pytest.fixture
def run(tmp_path, server):
    return make_run(tmp_path, server)


def test_a_run_keeps_its_bytes_in_one_pack_and_an_index(run):
    files = sorted(str(p.relative_to(run)) for p in run.rglob("*") if p.is_file())
    assert [f for f in files if f.startswith("raw/")] == ["raw/index.jsonl", "raw/pack-000001.bin"]
    samples = read_jsonl(run / "samples.jsonl")
    index = read_jsonl(run / INDEX)
    assert {(e["sample_id"], e["kind"]) for e in index} == {
        (s["sample_id"], kind) for s in samples for kind in ("txt", "body", "request")}
    pack = (run / "raw/pack-000001.bin").read_bytes()
    for entry in index:  # each blob is where the index says, with its sha256
        blob = pack[entry["offset"]:entry["offset"] + entry["bytes"]]
        assert hashlib.sha256(blob).hexdigest() == entry["sha256"]
    assert sum(e["bytes"] for e in index) == len(pack)  # nothing else in the pack
    for sample in samples:
        text = read_raw(run, sample)
        question = sample["case_id"].replace("c", "question ")
        assert text == f"[[ANSWER]]\nanswer to {question}\r\n  \u200b".encode() + b"x" * (len(question) * 7)
        assert json.loads(read_raw(run, sample, "body"))["choices"][0]["message"]["content"] == text.decode()
        assert json.loads(read_raw(run, sample, "request"))[-1]["content"] == question
    assert verify(run) == (0, verify(run)[1]) and verify(run)[1]["blobs"] == 2 * len(samples)


def test_a_runs_files_do_not_grow_with_its_samples(tmp_path, server):
    def files(run: Path) -> list[str]:
        return sorted(str(p.relative_to(run)) for p in run.rglob("*") if p.is_file())

    (tmp_path / "small").mkdir()
    (tmp_path / "large").mkdir()
    small = make_run(tmp_path / "small", server, cases=2, repeats=1)
    large = make_run(tmp_path / "large", server, cases=10, repeats=10)
    assert len(read_jsonl(large / "samples.jsonl")) == 50 * len(read_jsonl(small / "samples.jsonl"))
    # The same files, one pack among them, whatever the number of samples (200 here, 4 there).
    assert files(large) == files(small)
    assert len(files(large)) <= 20 and "raw/pack-000002.bin" not in files(large)


def test_the_python_api_reads_a_sample_by_id(run):
    import promptprobe

    loaded = promptprobe.load(run)
    sample = next(loaded.samples())
    assert loaded.raw(sample["sample_id"]) == read_raw(run, sample)
    assert json.loads(loaded.raw(sample["sample_id"], "request"))[0]["role"] == "system"


def _resume(run: Path) -> None:
    result = CliRunner().invoke(main, ["run", "--resume", str(run)])
    assert result.exit_code == 0, result.output


def _assert_whole(run: Path, ids: set[str]) -> None:
    samples = read_jsonl(run / "samples.jsonl")
    assert sorted(s["sample_id"] for s in samples) == sorted(ids)  # nothing lost, nothing twice
    code, found = verify(run)
    assert code == 0 and found["problems"] == [], found


def test_a_kill_at_any_byte_of_the_writes_loses_only_what_was_in_flight(tmp_path, server):
    """The states a kill leaves: each file a prefix of what it would have become, the packs and the
    index at least as long as the records need (they are written first). Seeded cuts."""
    (tmp_path / "whole").mkdir()
    whole = make_run(tmp_path / "whole", server)
    samples = (whole / "samples.jsonl").read_bytes()
    index = (whole / INDEX).read_bytes()
    pack = (whole / "raw/pack-000001.bin").read_bytes()
    rng = random.Random(36)
    for attempt in range(4):
        run = tmp_path / f"cut{attempt}" / whole.name
        shutil.copytree(whole, run)
        manifest = json.loads((run / "manifest.json").read_text())
        manifest["status"] = "running"  # as the kill left it
        (run / "manifest.json").write_text(json.dumps(manifest))
        cut = rng.randrange(len(samples))
        kept = [json.loads(line) for line in samples[:cut].splitlines(keepends=True) if line.endswith(b"\n")]
        needed = max((s["raw"]["offset"] + s["raw"]["bytes"] for s in kept), default=0)
        needed = max([needed] + [s["response"]["body"]["offset"] + s["response"]["body"]["bytes"] for s in kept])
        (run / "samples.jsonl").write_bytes(samples[:cut])
        pack_cut = rng.randrange(needed, len(pack) + 1)
        (run / "raw/pack-000001.bin").write_bytes(pack[:pack_cut])
        # Index lines are written after their bytes are in the pack: a prefix of those it can name.
        lines = index.splitlines(keepends=True)
        fits = next((i for i, line in enumerate(lines)
                     if json.loads(line)["offset"] + json.loads(line)["bytes"] > pack_cut), len(lines))
        # ...and at least the lines of the records kept: they are synced before any record is written.
        ids = {s["sample_id"] for s in kept}
        least = max((i + 1 for i, line in enumerate(lines) if json.loads(line)["sample_id"] in ids), default=0)
        index_cut = rng.randrange(len(b"".join(lines[:least])), len(b"".join(lines[:fits])) + 1)
        (run / INDEX).write_bytes(index[:index_cut])
        _resume(run)
        _assert_whole(run, planned(4, 2))


def test_sigkill_while_writing_then_resume_holds_every_sample_once(tmp_path):
    probeset = write_probeset(tmp_path / "p.toml", [(f"c{i}", f"question {i}", None) for i in range(8)], repeats=2)
    rng = random.Random(7)
    with LocalServer(reply) as server:
        args = [PROBE, "run", "--retrieval", "none", str(probeset), "--prompt", PROMPT, "--prompt", f"other={PROMPT}",
                "--model", f"openai:m@{server.url}/v1", "--runs-dir", str(tmp_path / "runs"), "--concurrency", "4"]
        process = subprocess.Popen(args, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        threshold = rng.randrange(1, 15_000)  # bytes of pack written when the kill comes
        deadline = time.monotonic() + 60
        while process.poll() is None and time.monotonic() < deadline:
            packs = list((tmp_path / "runs").glob("*/raw/pack-000001.bin"))
            if packs and packs[0].stat().st_size >= threshold:
                break
            time.sleep(0.005)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)
        (run,) = (tmp_path / "runs").iterdir()
        _resume(run)
    _assert_whole(run, planned(8, 2))


# -- damage ------------------------------------------------------------------------------------


def _rewrite(run: Path, change) -> None:
    lines = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    lines = change(lines) or lines
    (run / "samples.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))


def _problems(run: Path) -> list[str]:
    code, found = verify(run)
    assert code == 1 and not found["ok"]
    return [f"{p['sample_id']}: {p['problem']}" for p in found["problems"]]


def test_a_duplicated_or_unplanned_sample_is_named_and_never_counted_twice(run):
    _rewrite(run, lambda lines: lines + [lines[0], dict(lines[1], prompt="ghost")])
    first = read_jsonl(run / "samples.jsonl")[0]["sample_id"]
    problems = _problems(run)
    assert any(p.startswith(f"{first}: line 17 records this sample again (first on line 1)") for p in problems), problems
    assert any("prompt 'ghost'" in p and "is no arm of the plan" in p for p in problems)
    report = CliRunner().invoke(main, ["report", str(run), "--json"])
    assert report.exit_code == 0
    counted = json.loads(report.stdout)
    assert (counted["recorded"], counted["planned"]) == (16, 16)  # 16 of 16, not 18 of 16
    assert sum(a["samples"] for a in counted["arms"]) == 16
    warnings = " ".join(counted["warnings"])
    assert "more than once" in warnings and "no arm" in warnings
    shown = CliRunner().invoke(main, ["show", str(run), "--sample", first])
    assert shown.exit_code == 0 and shown.stdout.count(f"== {first}") == 1 and "more than once" in shown.stderr
    rows = CliRunner().invoke(main, ["export", str(run), "--format", "jsonl"])
    assert [json.loads(r)["sample_id"] for r in rows.stdout.splitlines()].count(first) == 1


def test_an_id_out_of_place_a_wrong_sha256_or_byte_count_and_a_swapped_output_are_named(run):
    def damage(lines):
        lines[0]["sample_id"] = "c9.r9.a9"
        lines[1]["raw"]["sha256"] = "0" * 64
        lines[2]["raw"]["bytes"] += 1
        lines[3]["raw"], lines[4]["raw"] = lines[4]["raw"], lines[3]["raw"]
    _rewrite(run, damage)
    ids = [s["sample_id"] for s in read_jsonl(run / "samples.jsonl")]
    problems = _problems(run)
    assert any(p.startswith("c9.r9.a9: line 1: the id is out of place") for p in problems), problems
    assert any(p.startswith(f"{ids[1]}: its txt bytes do not match their recorded sha256") for p in problems), problems
    assert any(p.startswith(f"{ids[2]}: its record names") and "the index" in p for p in problems), problems
    for swapped in ids[3:5]:  # each sha256 matches the blob it points to: the index tells whose it is
        assert any(p.startswith(f"{swapped}: its record names") for p in problems), problems
    shown = CliRunner().invoke(main, ["show", str(run), "--sample", ids[1]])
    assert shown.exit_code == 0 and "do not match their recorded sha256" in shown.stdout


def test_bytes_changed_in_the_pack_and_a_pack_cut_short_are_named(run):
    pack = run / "raw/pack-000001.bin"
    data = bytearray(pack.read_bytes())
    data[5] ^= 0xFF
    pack.write_bytes(bytes(data[:-10]))
    problems = _problems(run)
    assert any("do not match the index's sha256" in p for p in problems)
    assert any("lies past the end of raw/pack-000001.bin" in p for p in problems)
    assert any("cannot be read" in p and "cut short" in p for p in problems)


def test_a_torn_or_nul_filled_tail_is_named_and_read_past_quickly(run, server):
    samples = run / "samples.jsonl"
    manifest = json.loads((run / "manifest.json").read_text())
    (run / "manifest.json").write_text(json.dumps(dict(manifest, status="running")))  # as a crash left it
    with open(samples, "ab") as handle:
        handle.write(b'{"sample_id": "c0.r')
    os.truncate(samples, samples.stat().st_size + 300 * 1024 * 1024)  # a hole: no disk used
    problems = _problems(run)
    assert any("line 17 is torn" in p for p in problems) and any("314572800 NUL bytes" in p for p in problems)
    started = time.process_time()
    report = CliRunner().invoke(main, ["report", str(run), "--json"])
    assert report.exit_code == 0 and json.loads(report.stdout)["recorded"] == 16
    assert "NUL" in " ".join(json.loads(report.stdout)["warnings"])
    assert time.process_time() - started < 5  # not a pass over 300 MB (CPU time, not wall time)
    pytest.importorskip("starlette")
    from starlette.testclient import TestClient

    from promptprobe.viewer.app import create_app

    with TestClient(create_app(run.parent, warm=False), base_url="http://127.0.0.1") as client:
        started = time.process_time()
        page = client.get(f"/runs/{run.name}/cases/c0.json?arm=1")
        assert page.status_code == 200 and page.json()["sides"][0]["outputs"]["samples"] == 2  # it answers
        assert any("NUL" in problem for problem in page.json()["problems"])
        assert time.process_time() - started < 5
    _resume(run)
    assert samples.stat().st_size < 1024 * 1024
    _assert_whole(run, planned(4, 2))


def test_a_symlinked_or_missing_raw_file_of_an_old_run_is_not_followed_and_no_traceback(run, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET-HOSTNAME")
    ids = [s["sample_id"] for s in read_jsonl(run / "samples.jsonl")]

    def legacy(lines):
        for line in lines[:2]:
            line["raw"] = {"path": f"raw/{line['sample_id']}.txt", "sha256": line["raw"]["sha256"],
                           "bytes": line["raw"]["bytes"]}
    _rewrite(run, legacy)
    os.symlink(secret, run / "raw" / f"{ids[0]}.txt")  # ln -sf /etc/hostname RUN/raw/<id>.txt
    for args in (["show", str(run)], ["export", str(run)], ["export", str(run), "--format", "csv"]):
        result = CliRunner().invoke(main, args)
        assert "TOP-SECRET" not in result.stdout, args
        assert not isinstance(result.exception, OSError | KeyError | TypeError), (args, result.exception)
    shown = CliRunner().invoke(main, ["show", str(run), "--sample", ids[1]])  # its raw file is missing
    assert shown.exit_code == 0 and "No such file" in shown.stdout
    problems = _problems(run)
    assert any(p.startswith(f"{ids[0]}:") and "symbolic link" in p for p in problems)
    assert any(p.startswith(f"{ids[1]}:") and "No such file" in p for p in problems)


def test_a_run_killed_while_its_directory_was_made_is_listed_and_resume_says_so(tmp_path):
    folder = tmp_path / "runs"
    dead = folder / "20261202T070000-p-abc123"
    (dead / "raw").mkdir(parents=True)
    for name in ("manifest.json.tmp", ".reserve", ".lock"):
        (dead / name).write_bytes(b"\0" * 10)
    listed = CliRunner().invoke(main, ["runs", "--runs-dir", str(folder), "--json"])
    assert listed.exit_code == 0
    assert [(r["id"], r["status"]) for r in json.loads(listed.stdout)["runs"]] == [(dead.name, "incomplete")]
    resumed = CliRunner().invoke(main, ["run", "--resume", str(dead)])
    assert resumed.exit_code == 2 and "not a run directory" not in resumed.output
    assert "stopped while its directory was being created" in resumed.output and "nothing was recorded" in resumed.output
    latest = CliRunner().invoke(main, ["report", "latest", "--runs-dir", str(folder)])
    assert latest.exit_code == 2 and "there is no such run" in latest.output  # `latest` skips it


# -- migrate -----------------------------------------------------------------------------------


def _to_legacy(run: Path) -> dict[str, bytes]:
    """The run as a version before packs wrote it: one file per blob, records naming them."""
    files = {}
    index = read_jsonl(run / INDEX)
    pack = (run / "raw/pack-000001.bin").read_bytes()
    suffix = {"txt": ".txt", "body": ".body", "request": ".request.json"}
    for entry in index:
        name = f"raw/{entry['sample_id']}{suffix[entry['kind']]}"
        files[name] = pack[entry["offset"]:entry["offset"] + entry["bytes"]]
        (run / name).write_bytes(files[name])

    def legacy(lines):
        for line in lines:
            line["raw"] = {"path": f"raw/{line['sample_id']}.txt", "sha256": line["raw"]["sha256"],
                           "bytes": line["raw"]["bytes"]}
            line["response"]["body"] = f"raw/{line['sample_id']}.body"
    _rewrite(run, legacy)
    (run / INDEX).unlink()
    (run / "raw/pack-000001.bin").unlink()
    return files


def test_an_old_run_reads_as_it_is_and_migrate_packs_it_losing_nothing(run):
    files = _to_legacy(run)
    before = CliRunner().invoke(main, ["show", str(run), "--format", "json"]).stdout
    assert verify(run)[0] == 0
    result = CliRunner().invoke(main, ["migrate", str(run)])
    assert result.exit_code == 0, result.output
    assert f"{len(files)} blobs packed and checked by sha256" in result.stdout
    assert sorted(p.name for p in (run / "raw").iterdir()) == ["index.jsonl", "pack-000001.bin"]
    suffix = {"txt": ".txt", "body": ".body", "request": ".request.json"}
    index = read_jsonl(run / INDEX)
    assert {f"raw/{e['sample_id']}{suffix[e['kind']]}" for e in index} == set(files)
    for sample in read_jsonl(run / "samples.jsonl"):
        assert read_raw(run, sample) == files[f"raw/{sample['sample_id']}.txt"]
        assert read_raw(run, sample, "body") == files[f"raw/{sample['sample_id']}.body"]
        assert read_raw(run, sample, "request") == files[f"raw/{sample['sample_id']}.request.json"]
    assert CliRunner().invoke(main, ["show", str(run), "--format", "json"]).stdout == before
    assert verify(run)[0] == 0


def test_migrate_refuses_a_damaged_old_run_and_changes_nothing(run):
    files = _to_legacy(run)
    name = next(n for n in files if n.endswith(".txt"))
    (run / name).write_bytes(b"edited")
    before = (run / "samples.jsonl").read_bytes()
    result = CliRunner().invoke(main, ["migrate", str(run)])
    assert result.exit_code == 2 and "does not match the sha256 its record holds" in result.output
    assert (run / "samples.jsonl").read_bytes() == before and (run / name).read_bytes() == b"edited"


MIGRATE_KILLER = """
import os
if os.environ.get("KILL_AT") == "replace":  # as the records are put in place
    real_replace = os.replace

    def replace(src, dst, *args, **kwargs):
        if str(dst).endswith("samples.jsonl"):
            os._exit(9)
        return real_replace(src, dst, *args, **kwargs)

    os.replace = replace
elif os.environ.get("KILL_AT") == "unlink":  # some old files removed, the rest not
    real_unlink, removed = os.unlink, []

    def unlink(path, *args, **kwargs):
        if "/raw/" in str(path) and str(path).endswith((".txt", ".body", ".request.json")):
            removed.append(path)
            if len(removed) == 3:
                os._exit(9)
        return real_unlink(path, *args, **kwargs)

    os.unlink = unlink
"""


@pytest.mark.parametrize("kill_at", ["replace", "unlink"])
def test_a_migration_killed_midway_finishes_when_run_again_losing_nothing(run, tmp_path, kill_at):
    files = _to_legacy(run)
    before = CliRunner().invoke(main, ["show", str(run), "--format", "json"]).stdout
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(MIGRATE_KILLER)
    path = os.pathsep.join(p for p in [str(site), os.environ.get("PYTHONPATH", "")] if p)
    killed = subprocess.run([PROBE, "migrate", str(run)], capture_output=True,
                            env={**os.environ, "PYTHONPATH": path, "KILL_AT": kill_at})
    assert killed.returncode == 9, killed.stderr
    assert CliRunner().invoke(main, ["show", str(run), "--format", "json"]).stdout == before  # readable meanwhile
    again = CliRunner().invoke(main, ["migrate", str(run)])
    assert again.exit_code == 0, again.output
    assert sorted(p.name for p in (run / "raw").iterdir()) == ["index.jsonl", "pack-000001.bin"]
    assert CliRunner().invoke(main, ["show", str(run), "--format", "json"]).stdout == before
    for sample in read_jsonl(run / "samples.jsonl"):
        assert read_raw(run, sample, "body") == files[f"raw/{sample['sample_id']}.body"]
    # Each blob once in the pack, where its record and the index's one line for it both say.
    index = read_jsonl(run / INDEX)
    assert len(index) == len(files) and sum(e["bytes"] for e in index) == (run / "raw/pack-000001.bin").stat().st_size
    code, found = verify(run)
    assert code == 0 and found["problems"] == [], found
    assert [n for n in found["notes"] if not n.startswith("kept-counts.json no longer")] == []  # rewritten


# -- the viewer serves a sample's output and nothing else -------------------------------------


@pytest.mark.parametrize("named", ["raw/{sid}.body", "manifest.json", "../../outside.txt", "raw/../manifest.json"])
def test_the_viewer_refuses_a_raw_path_naming_another_file_and_logs_it(run, tmp_path, caplog, named):
    pytest.importorskip("starlette")
    from starlette.testclient import TestClient

    from promptprobe.viewer.app import create_app

    (tmp_path / "outside.txt").write_text("OUTSIDE")
    first = read_jsonl(run / "samples.jsonl")[0]
    sid = first["sample_id"]
    legacy = _to_legacy(run)

    def point(lines):
        lines[0]["raw"] = {"path": named.format(sid=sid)}
    _rewrite(run, point)
    with caplog.at_level(logging.WARNING, logger="promptprobe.viewer"):
        with TestClient(create_app(run.parent, warm=False), base_url="http://127.0.0.1") as client:
            arm = 1 if first["prompt"] == "always-header" else 2
            answer = client.get(f"/runs/{run.name}/raw/{sid}?arm={arm}&case={first['case_id']}")
            page = client.get(f"/runs/{run.name}/cases/{first['case_id']}?arm={arm}").text
    assert answer.status_code == 404
    assert legacy[f"raw/{sid}.body"].decode()[:40] not in page and "OUTSIDE" not in page and "OUTSIDE" not in answer.text
    refused = [r.getMessage() for r in caplog.records if "not read" in r.getMessage()]
    assert refused and all("\n" not in line for line in refused)


def test_blobs_are_written_at_sync_and_a_failed_write_is_cut_back_and_stops_the_writer(tmp_path, monkeypatch):
    """An append places a blob and returns where it goes; the writing is the sync's (one write a
    pack). A request placed but not yet written is read from memory; a write that fails is cut
    back, so the pack holds only whole blobs, and every later append and sync raises it."""
    from promptprobe.pack import INDEX, REQUEST, PackWriter, RawReader

    (tmp_path / "raw").mkdir()
    writer = PackWriter(tmp_path, 0o600, limit=40)  # a new pack every two blobs
    blobs = [(f"s{i}", f"blob {i} \u00e9\r\n".encode()) for i in range(5)]
    locations = [writer.append(sid, "txt", data) for sid, data in blobs]
    request = writer.append("s9", REQUEST, b'{"messages": []}')
    assert writer.placed("s9") == b'{"messages": []}'
    assert not any((tmp_path / at["pack"]).stat().st_size for at in locations)  # placed, not written
    writer.sync()
    assert writer.placed("s9") is None
    reader = RawReader(tmp_path)
    assert [reader.read({"sample_id": sid, "raw": at}) for (sid, _), at in zip(blobs, locations, strict=True)] == [
        data for _, data in blobs]
    assert reader.read({"sample_id": "s9", "raw": request}) == b'{"messages": []}'
    assert len((tmp_path / INDEX).read_bytes().splitlines()) == 6
    size = (tmp_path / request["pack"]).stat().st_size
    writer.append("s10", "txt", b"lost")
    real_write = os.write

    def full_disk(fd: int, data) -> int:  # half of it goes down, then the disk is full
        if len(data) > 2:
            return real_write(fd, bytes(data)[: len(data) // 2])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", full_disk)
    with pytest.raises(OSError, match="No space"):
        writer.sync()
    monkeypatch.setattr(os, "write", real_write)
    assert (tmp_path / request["pack"]).stat().st_size == size
    with pytest.raises(OSError):
        writer.append("s11", "txt", b"after")
    with pytest.raises(OSError):
        writer.sync()
