"""A run's own files (samples.jsonl, manifest.json, raw/index.jsonl, the packs) are read only from
inside the run and only as regular files: a symbolic link or a FIFO in their place is damage that
every reader names in one sentence, promptly, without a traceback and without a byte of what the
link points to; a missing pack is said, not a traceback."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from servers import LocalServer
from test_packs import make_run, reply

from promptprobe.cli import main

SECRET = "OUTSIDE-THE-RUN-7d1e"
PROBE = str(Path(sys.executable).parent / "probe")
LINKED = "is a symbolic link; a run's files are read only from inside the run"


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    with LocalServer(reply) as server:
        return make_run(tmp_path_factory.mktemp("made"), server)


@pytest.fixture
def run(recorded, tmp_path):
    """A copy of a finished run (it keeps its counts: kept-counts.json and the manifest's totals)."""
    copy = tmp_path / "runs" / recorded.name
    shutil.copytree(recorded, copy, symlinks=True)
    return copy


def _outside(tmp_path: Path, run: Path, name: str) -> Path:
    """The run's file moved out of it, a link to it in its place (a valid copy: only the link is wrong)."""
    outside = tmp_path / f"outside-{name.replace('/', '-')}"
    shutil.move(run / name, outside)
    os.symlink(outside, run / name)
    return outside


def _cli(*args: str):
    return CliRunner().invoke(main, list(args))


def _viewer(run: Path):
    pytest.importorskip("starlette")
    from starlette.testclient import TestClient

    from promptprobe.viewer.app import create_app

    return TestClient(create_app(run.parent, warm=False), base_url="http://127.0.0.1")


def test_open_in_run_refuses_a_link_at_any_step_a_fifo_and_a_folder(tmp_path):
    from promptprobe.paths import RunFileRefused, open_in_run

    run = tmp_path / "run"
    (run / "real").mkdir(parents=True)
    (run / "real" / "index.jsonl").write_text("{}\n")
    os.symlink(run / "real", run / "raw")  # the folder a link: its file is outside the run
    os.mkfifo(run / "samples.jsonl")
    (run / "manifest.json").mkdir()
    for relative, said in [("raw/index.jsonl", f"{run / 'raw'}: {LINKED}"),
                           ("samples.jsonl", "is a FIFO, not a regular file"),
                           ("manifest.json", "is a directory, not a regular file")]:
        with pytest.raises(RunFileRefused, match=said.replace("(", r"\(")):
            open_in_run(run, relative)
    with pytest.raises(FileNotFoundError):
        open_in_run(run, "retrievals.jsonl")
    os.close(open_in_run(run, "real/index.jsonl"))


@pytest.mark.parametrize("name", ["samples.jsonl", "manifest.json"])
def test_a_linked_samples_or_manifest_file_is_refused_by_every_reader(run, tmp_path, name):
    _outside(tmp_path, run, name)
    for args in (["report", str(run)], ["compare", str(run)], ["show", str(run)], ["export", str(run)],
                 ["why", f"{run}#prompt=always-header"]):
        result = _cli(*args)
        assert result.exit_code == 2, (args, result.output)
        assert f"{run / name}: {LINKED}" in result.output, args
    code = _cli("verify", str(run), "--format", "json")
    if name == "manifest.json":  # not a run that can be read: exit 2, the sentence naming it
        assert code.exit_code == 2 and LINKED in code.output
    else:  # a valid copy outside the run is still damage: exit 1, named
        assert code.exit_code == 1
        assert {"sample_id": None, "file": name, "problem": LINKED} in json.loads(code.stdout)["problems"]
    with _viewer(run) as client:
        page = client.get(f"/runs/{run.name}/cases/c0.json?arm=1")
        assert page.status_code == 422 and LINKED in page.json()["error"]


def test_a_linked_index_is_damage_to_verify(run, tmp_path):
    _outside(tmp_path, run, "raw/index.jsonl")
    result = _cli("verify", str(run), "--format", "json")
    assert result.exit_code == 1
    assert {"sample_id": None, "file": "index.jsonl", "problem": LINKED} in json.loads(result.stdout)["problems"]


def test_a_linked_pack_is_refused_and_show_says_so_once(run, tmp_path):
    secret = tmp_path / "hostname"
    secret.write_text(SECRET * 2000)  # ln -sf /etc/hostname RUN/raw/pack-000001.bin, long enough
    (run / "raw" / "pack-000001.bin").unlink()
    os.symlink(secret, run / "raw" / "pack-000001.bin")
    said = f"{run / 'raw' / 'pack-000001.bin'}: {LINKED}"
    for args in (["show", str(run)], ["export", str(run), "--format", "jsonl"], ["verify", str(run)]):
        result = _cli(*args)
        assert SECRET not in result.output, args
        assert result.exception is None or isinstance(result.exception, SystemExit), (args, result.exception)
        assert said in result.output, args
    incident = _cli("export", str(run))  # markdown: the output not shown, in general words
    assert incident.exit_code == 0 and SECRET not in incident.output and "Output not shown" in incident.output
    shown = _cli("show", str(run))
    warnings = [line for line in shown.stderr.splitlines() if line.startswith("warning:")]
    assert shown.exit_code == 0 and len(warnings) == 1, warnings  # one sentence, not one per sample
    assert said in warnings[0] and "16 samples' outputs cannot be shown" in warnings[0]
    with _viewer(run) as client:
        for path in (f"/runs/{run.name}", f"/runs/{run.name}/cases/c0?arm=1",
                     f"/runs/{run.name}/raw/c0.r1.a1", f"/runs/{run.name}/search?q=answer"):
            page = client.get(path)
            assert page.status_code < 500 and SECRET not in page.text, path


def test_a_missing_pack_gives_a_sentence_not_a_traceback(run):
    (run / "raw" / "pack-000001.bin").unlink()
    assert _cli("report", str(run)).exit_code == 0  # its counts need no output bytes
    for args in (["show", str(run)], ["export", str(run), "--format", "jsonl"], ["verify", str(run)]):
        result = _cli(*args)
        assert result.exception is None or isinstance(result.exception, SystemExit), (args, result.exception)
        assert "No such file or directory" in result.output, args
    assert _cli("export", str(run)).exit_code == 0
    assert _cli("verify", str(run)).exit_code == 1
    with _viewer(run) as client:
        assert client.get(f"/runs/{run.name}").status_code == 200
        case = client.get(f"/runs/{run.name}/cases/c0.json?arm=1")
        assert case.status_code == 200
        assert all(g["text"] is None and g["missing"] for g in case.json()["sides"][0]["outputs"]["groups"])


def _promptly(args: list[str]) -> subprocess.CompletedProcess:
    """A command that must not wait on a FIFO: finished well within 30 s (it takes well under 1)."""
    return subprocess.run(args, capture_output=True, text=True, timeout=30, env=os.environ)


VIEW_CASE = """
import sys
from pathlib import Path
from starlette.testclient import TestClient
from promptprobe.viewer.app import create_app
run = Path(sys.argv[1])
with TestClient(create_app(run.parent, warm=False), base_url="http://127.0.0.1") as client:
    page = client.get(f"/runs/{run.name}/cases/c0.json?arm=1")
    print(page.status_code, page.json()["error"])
"""


def test_a_fifo_samples_file_is_refused_at_once_by_report_runs_and_the_viewer(run):
    (run / "samples.jsonl").unlink()
    os.mkfifo(run / "samples.jsonl")  # nothing ever writes to it: opening it to read would wait forever
    said = f"{run / 'samples.jsonl'}: is a FIFO, not a regular file"
    report = _promptly([PROBE, "report", str(run)])
    assert report.returncode == 2 and said in report.stderr
    listed = _promptly([PROBE, "runs", "--runs-dir", str(run.parent), "--json"])
    assert listed.returncode == 0, listed.stderr
    [entry] = json.loads(listed.stdout)["runs"]
    assert entry["status"] == "damaged" and said in entry["problem"]
    table = _promptly([PROBE, "runs", "--runs-dir", str(run.parent)])
    assert "damaged" in table.stdout and said in table.stderr
    pytest.importorskip("starlette")
    case = _promptly([sys.executable, "-c", VIEW_CASE, str(run)])
    assert case.returncode == 0 and case.stdout.startswith("422 ") and said in case.stdout, case.stderr


def test_probe_runs_lists_a_run_with_a_linked_file_as_damaged_beside_the_others(run, tmp_path, recorded):
    other = run.parent / (recorded.name[:-6] + "000000")
    shutil.copytree(recorded, other)
    _outside(tmp_path, run, "manifest.json")
    result = _cli("runs", "--runs-dir", str(run.parent), "--json")
    assert result.exit_code == 0, result.output
    found = {r["id"]: r for r in json.loads(result.stdout)["runs"]}
    assert found[run.name]["status"] == "damaged" and LINKED in found[run.name]["problem"]
    assert found[other.name]["status"] == "complete" and found[other.name]["problem"] is None


def test_resume_reads_the_runs_prompt_copy_only_from_inside_it(run, tmp_path):
    manifest = json.loads((run / "manifest.json").read_text())
    (run / "manifest.json").write_text(json.dumps({**manifest, "status": "interrupted"}))
    copy = manifest["prompts"][0]["copy"]
    _outside(tmp_path, run, copy)  # the same bytes, through a link
    result = _cli("run", "--resume", str(run))
    assert result.exit_code == 2, result.output
    assert result.output.strip() == f"error: {run / copy}: {LINKED}"
