"""A finished run keeps its counts (kept-counts.json, promptprobe.kept_counts): `probe report`,
`compare` and the rest read them instead of counting samples.jsonl again, and show the same
bytes either way; anything that could change the counts since (the samples, the judgments, the
manifest, a reclassification, another version, other prices), a kept file that is not the one
a run keeps, or an explicit --classification / --top-k, and the run is counted as before."""

import json
import os
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner
from test_failed_samples import record, write_inputs

import promptprobe.counts
from promptprobe import kept_counts, stamp, totals
from promptprobe.cli import main
from promptprobe.counts import KEPT_COUNTS, build_counts
from promptprobe.engine.store import load_manifest


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """A run of two prompts on 12 cases (2 repeats), a [[check]] that applies to half the cases,
    some requests failing on cases inside and outside the check; and a copy that keeps nothing."""
    folder = tmp_path_factory.mktemp("kept")
    here = os.getcwd()
    os.chdir(write_inputs(folder))
    try:
        run = record(folder, {"base": [2, 1, 0, 2, 1, 0], "cand": [0, 1, 2, 0, 0, 1]},
                     {"base": {0: 1, 8: 2}, "cand": {3: 2, 9: 1}})
    finally:
        os.chdir(here)
    return folder, run


@pytest.fixture
def run(recorded, tmp_path, monkeypatch):
    """The recorded run, copied (modification times kept, as `cp -p` keeps them)."""
    folder, source = recorded
    monkeypatch.chdir(folder)
    copy = tmp_path / source.name
    copy.mkdir()
    for path in source.rglob("*"):
        target = copy / path.relative_to(source)
        if path.is_dir():
            target.mkdir(exist_ok=True)
        else:
            target.write_bytes(path.read_bytes())
            info = path.stat()
            os.utime(target, ns=(info.st_atime_ns, info.st_mtime_ns))
    return copy


@pytest.fixture
def counted(monkeypatch):
    """The runs counted from samples.jsonl since the test started."""
    calls = []
    real = promptprobe.counts._Counter

    class Counting(real):
        def __init__(self, table, overridden):
            calls.append(table.run)
            super().__init__(table, overridden)

    monkeypatch.setattr(promptprobe.counts, "_Counter", Counting)
    return calls


def views(run: Path, *extra: str) -> list[str]:
    """What the report (terminal and JSON) and a comparison of the two arms print."""
    outputs = []
    for args in (["report", str(run), *extra], ["report", str(run), "--format", "json", *extra],
                 ["compare", f"{run}#prompt=base", f"{run}#prompt=cand", "--all", *extra]):
        result = CliRunner().invoke(main, args)
        assert result.exit_code in (0, 4), result.output
        outputs.append(result.stdout)
    return outputs


def test_a_finished_run_keeps_its_counts_and_its_views_read_them_with_the_same_bytes(run, counted):
    kept = json.loads((run / KEPT_COUNTS).read_bytes())
    assert kept["stamp"] == stamp.stamp(run, load_manifest(run))
    assert kept["stamp"] == {k: v for k, v in load_manifest(run)["totals"].items() if k != "arms"}
    from_kept = views(run)
    assert counted == []  # nothing counted: the report's table came whole from the kept counts
    table = build_counts(run)
    assert counted == [] and table.recorded == 48 and [a.errors for a in table.arms] == [3, 3]
    (run / KEPT_COUNTS).unlink()  # a run recorded before this release
    assert views(run) == from_kept
    assert counted == [run] * 3
    # The table itself, field by field, as counting makes it.
    kept_table, fresh = _kept_table(run, kept), build_counts(run)
    for kept_arm, arm in zip(kept_table.arms, fresh.arms, strict=True):
        assert sorted(kept_arm.latencies) == sorted(arm.latencies)
        kept_arm.latencies = arm.latencies
        assert kept_arm == arm
    assert kept_table.check_applies == fresh.check_applies and kept_table.snapshots == fresh.snapshots
    assert any(None in pattern for arm in fresh.arms for seen in arm.patterns.values() for pattern in seen)


def _kept_table(run: Path, kept: dict):
    (run / KEPT_COUNTS).write_bytes(orjson.dumps(kept))
    return build_counts(run)


def _changed_samples(run: Path) -> None:
    info = (run / "samples.jsonl").stat()
    os.utime(run / "samples.jsonl", ns=(info.st_atime_ns, info.st_mtime_ns + 1000))  # rewritten in place


def _judged(run: Path) -> None:
    (run / "judgments.jsonl").write_text("")


def _reclassified(run: Path) -> None:
    result = CliRunner().invoke(main, ["classify", str(run), "--markers", "[[ANSWER]],[[NO_ANSWER]],[[OTHER]]"])
    assert result.exit_code == 0, result.output
    assert (run / "classifications" / "1.jsonl").is_file()


def _manifest_edited(run: Path) -> None:
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["repeats"] = 3
    (run / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize("change", [_changed_samples, _judged, _reclassified, _manifest_edited])
def test_counts_kept_before_a_change_are_not_used(run, counted, change):
    change(run)
    build_counts(run)
    assert counted == [run]


@pytest.mark.parametrize("where", ["__version__", "_price_data"])
def test_counts_kept_by_another_version_or_with_other_prices_are_not_used(run, counted, monkeypatch, where):
    monkeypatch.setattr(stamp, where, (lambda: "genai-prices 9.9") if where == "_price_data" else "0.0.1")
    build_counts(run)
    assert counted == [run]


def test_a_named_classification_or_top_k_is_counted(run, counted):
    build_counts(run, top_k=1)
    assert counted == [run]


def _mutations(form: dict) -> list[dict]:
    """Kept counts each wrong in one way."""
    def changed(edit):
        copy = json.loads(json.dumps(form))
        edit(copy)
        return copy

    arm = lambda c: c["arms"][0]  # noqa: E731
    return [
        changed(lambda c: c.update(extra=1)),
        changed(lambda c: c["arms"].pop()),
        changed(lambda c: arm(c).update(samples=True)),
        changed(lambda c: arm(c).update(errors=-1)),
        changed(lambda c: arm(c).update(cost="0.1")),
        changed(lambda c: arm(c)["metrics"].update(no_such_metric={})),
        changed(lambda c: arm(c)["headers"].update(no_such_case={})),
        changed(lambda c: arm(c)["metrics"]["header_present"].update(c0=[1, 2])),
        changed(lambda c: arm(c)["latencies"].append(["slow", 1])),
        changed(lambda c: arm(c)["patterns"]["c0"][0][0].append(1)),
        changed(lambda c: arm(c)["patterns"]["c0"][0][0].__setitem__(0, 2)),
        changed(lambda c: c["check_applies"]["leaks"].update(c0="yes")),
        changed(lambda c: c.update(recorded=1.5)),
        changed(lambda c: c["snapshots"].update(c0=[[[1], 2]])),
    ]


def test_kept_counts_not_in_the_form_a_run_writes_are_refused_and_the_run_counted(run, counted):
    kept = json.loads((run / KEPT_COUNTS).read_bytes())
    table = build_counts(run)
    shape = (len(table.arms), set(table.cases), set(table.metrics), len(table.metrics))
    assert json.loads(orjson.dumps(kept_counts.encode(kept_counts.decode(kept["counts"], *shape)))) == kept["counts"]
    for number, wrong in enumerate(_mutations(kept["counts"])):
        with pytest.raises(kept_counts.Malformed):
            kept_counts.decode(wrong, *shape)
        (run / KEPT_COUNTS).write_bytes(orjson.dumps({**kept, "counts": wrong}))
        build_counts(run)
        assert len(counted) == number + 1, wrong
    for damaged in (b"", b"{", b"[]", orjson.dumps({"stamp": kept["stamp"]})):
        (run / KEPT_COUNTS).write_bytes(damaged)
        build_counts(run)
    assert len(counted) == len(_mutations(kept["counts"])) + 4


def test_a_kept_file_that_is_a_link_is_not_followed(run, counted, tmp_path):
    outside = tmp_path / "outside.json"
    outside.write_bytes((run / KEPT_COUNTS).read_bytes())
    (run / KEPT_COUNTS).unlink()
    (run / KEPT_COUNTS).symlink_to(outside)
    build_counts(run)
    assert counted == [run]


def test_a_run_counted_with_a_warning_keeps_nothing(run):
    (run / KEPT_COUNTS).unlink()
    lines = (run / "samples.jsonl").read_bytes().splitlines(keepends=True)
    (run / "samples.jsonl").write_bytes(b"".join(lines) + lines[0])  # a sample twice
    assert totals.count_and_keep(run).warnings
    assert not (run / KEPT_COUNTS).exists()
    (run / "samples.jsonl").write_bytes(b"".join(lines))
    totals.count_and_keep(run)
    assert (run / KEPT_COUNTS).exists()


def test_verify_checks_the_kept_counts_against_a_count_of_the_samples(run):
    verify = lambda: CliRunner().invoke(main, ["verify", str(run), "--format", "json"])  # noqa: E731
    result = verify()
    assert result.exit_code == 0 and json.loads(result.stdout)["ok"], result.output
    kept = json.loads((run / KEPT_COUNTS).read_bytes())
    forged = json.loads(json.dumps(kept))
    cell = forged["counts"]["arms"][1]["metrics"]["header_present"]["c0"]
    cell[0] = 0 if cell[0] else 1  # another count of headers on one case than samples.jsonl's
    (run / KEPT_COUNTS).write_bytes(orjson.dumps(forged))
    result = verify()
    assert result.exit_code != 0
    (problem,) = json.loads(result.stdout)["problems"]
    assert problem["file"] == KEPT_COUNTS and "not what samples.jsonl counts to" in problem["problem"]
    _judged(run)  # the stamp no longer holds: readers count, and verify says so without failing
    result = verify()
    assert result.exit_code == 0, result.output
    assert any(KEPT_COUNTS in note for note in json.loads(result.stdout)["notes"])
