"""A finished run keeps its per-arm totals in its manifest (promptprobe.totals): `probe show` takes
its provenance from them while they still describe the run as it stands, and counts the run
otherwise (an older run, a changed samples.jsonl, manifest, classification, version or price
data), with the same view either way."""

import json
import os

import pytest
from click.testing import CliRunner
from conftest import ROOT, run_dir_of, write_probeset
from servers import LocalServer, Reply

import promptprobe.counts
from promptprobe import stamp, totals
from promptprobe.cli import main
from promptprobe.engine.store import RunStore, load_manifest

PROMPT = ROOT / "prompts" / "always-header.md"
SHOWN = "b.r2.a2"


@pytest.fixture
def run_dir(tmp_path, monkeypatch):
    """A run of two prompts (three cases, two repeats, one case failing) with a listed price,
    recorded by `probe run` through a real socket."""
    probeset = write_probeset(tmp_path / "p.toml", [("a", "qa", None), ("b", "qb", None), ("c", "bad", None)],
                              repeats=2)

    def reply(request):
        if request.json["messages"][-1]["content"] == "bad":
            return Reply(status=400, body=b'{"error": {"message": "context too long"}}')
        return Reply("[[ANSWER]]\nok")

    monkeypatch.chdir(tmp_path)
    with LocalServer(reply) as server:
        spec = f"openai:m@{server.url}/v1"
        (tmp_path / "probe.toml").write_text(
            f'[retrieval]\nkind = "none"\n[prices]\n"{spec}" = {{ input = 2, output = 8 }}\n')
        result = CliRunner().invoke(main, ["run", str(probeset), "--prompt", PROMPT, "--prompt", f"b={PROMPT}",
                                           "-m", spec, "--runs-dir", str(tmp_path / "runs")])
    assert result.exit_code == 1, result.output  # the failing case
    return run_dir_of(result)


def show(run_dir, fmt="json"):
    result = CliRunner().invoke(main, ["show", str(run_dir), "--sample", SHOWN, "--format", fmt])
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.fixture
def counted(monkeypatch):
    """How many times the run was counted (build_counts) since the test started."""
    calls = []
    real = promptprobe.counts.build_counts

    def counting(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(promptprobe.counts, "build_counts", counting)
    return calls


def without_totals(run_dir):
    """The run as one recorded before its manifest kept totals."""
    manifest = load_manifest(run_dir)
    del manifest["totals"]
    store = RunStore.open(run_dir)
    try:
        store.write_manifest(manifest)
    finally:
        store.release()


def test_a_finished_run_keeps_its_totals_and_show_needs_no_count_for_the_same_provenance(run_dir, counted):
    kept = load_manifest(run_dir)["totals"]
    assert kept["classification"] is None and kept["samples_bytes"] == (run_dir / "samples.jsonl").stat().st_size
    # 6 samples an arm, 2 failed; 4 replies of 120 prompt and 17 completion tokens at 2 and 8 USD/M.
    assert [(a["prompt"], a["samples"], a["errors"]) for a in kept["arms"]] == [("always-header", 6, 2), ("b", 6, 2)]
    assert kept["arms"][1]["usage"]["input_tokens"] == 4 * 120
    assert kept["arms"][1]["usage"]["cost_usd"] == pytest.approx(4 * (120 * 2 + 17 * 8) / 1e6)
    shortcut, table = show(run_dir), show(run_dir, "table")
    assert counted == []  # the provenance came from the manifest
    assert json.loads(shortcut)["provenance"]["arms"][0]["samples"] == 6

    without_totals(run_dir)  # the same run as an older release wrote it: counted
    assert show(run_dir) == shortcut and show(run_dir, "table") == table
    assert len(counted) == 2


def test_totals_that_no_longer_describe_the_run_are_not_used(run_dir, counted, monkeypatch):
    manifest = load_manifest(run_dir)
    assert totals.kept_totals(run_dir, manifest) is not None
    monkeypatch.setattr(stamp, "__version__", "0.0.1")  # another promptprobe
    assert totals.kept_totals(run_dir, manifest) is None
    monkeypatch.undo()
    monkeypatch.setattr(stamp, "_price_data", lambda: "genai-prices 9.9")  # other built-in prices
    assert totals.kept_totals(run_dir, manifest) is None
    monkeypatch.undo()
    for changed in ({"status": "running"}, {"prices": {"openai:x": {"input": 1, "output": 1}}},
                    {"totals": {**manifest["totals"], "arms": manifest["totals"]["arms"][:1]}},
                    {"totals": {**manifest["totals"], "arms": [{**manifest["totals"]["arms"][0], "samples": "6"},
                                                               manifest["totals"]["arms"][1]]}}):
        assert totals.kept_totals(run_dir, {**manifest, **changed}) is None, changed
    (run_dir / "classifications").mkdir()
    (run_dir / "classifications" / "1.jsonl").write_text("")
    assert totals.kept_totals(run_dir, manifest) is None
    (run_dir / "classifications" / "1.jsonl").unlink()
    assert totals.kept_totals(run_dir, manifest) is not None
    info = (run_dir / "samples.jsonl").stat()
    os.utime(run_dir / "samples.jsonl", ns=(info.st_atime_ns, info.st_mtime_ns + 1000))  # rewritten in place
    assert totals.kept_totals(run_dir, manifest) is None


def test_show_counts_a_run_whose_samples_changed_after_its_totals(run_dir, counted):
    before = json.loads(show(run_dir))["provenance"]["arms"][0]
    samples = (run_dir / "samples.jsonl").read_bytes()
    lines = samples.splitlines(keepends=True)
    dropped = next(line for line in lines if b'"sample_id":"a.r1.a2"' in line)  # an arm 2 sample is lost
    (run_dir / "samples.jsonl").write_bytes(samples.replace(dropped, b""))
    after = json.loads(show(run_dir))["provenance"]["arms"][0]
    assert len(counted) == 1
    assert (before["samples"], after["samples"]) == (6, 5)
    assert after["usage"]["input_tokens"] == before["usage"]["input_tokens"] - 120


def test_no_totals_are_kept_while_another_process_holds_the_run_or_when_it_changed_meanwhile(run_dir, monkeypatch):
    without_totals(run_dir)
    store = RunStore.open(run_dir)  # a resume, say
    try:
        totals.count_and_keep(run_dir)
    finally:
        store.release()
    assert "totals" not in load_manifest(run_dir)

    real = promptprobe.counts.build_counts

    def counted_while_appended(path):
        counts = real(path)
        with open(path / "samples.jsonl", "ab") as handle:
            handle.write(b"\n")  # the file grew after it was counted
        return counts

    monkeypatch.setattr(totals, "build_counts", counted_while_appended)
    totals.count_and_keep(run_dir)
    assert "totals" not in load_manifest(run_dir)
    monkeypatch.undo()
    totals.count_and_keep(run_dir)
    assert totals.kept_totals(run_dir, load_manifest(run_dir)) is not None
