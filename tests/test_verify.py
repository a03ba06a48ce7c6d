"""`probe verify` on the damage an audit found it let through (samples missing from a complete run,
a lost samples.jsonl, lost index lines, torn tails of the other JSON-lines files, a pack that is a
link or no regular file), and what `compare`, `show`, `export` and the viewer make of a run with a
sample twice, one of no arm, or a torn tail."""

import json
import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from servers import LocalServer, Reply
from test_packs import make_run, planned, reply, verify

from promptprobe.cli import main
from promptprobe.jsonio import read_jsonl
from promptprobe.pack import INDEX

PACK = "raw/pack-000001.bin"


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """One clean run (4 cases x 2 repeats x 2 arms), copied for each test."""
    folder = tmp_path_factory.mktemp("made")
    with LocalServer(reply) as server:
        return make_run(folder, server)


@pytest.fixture
def run(made, tmp_path):
    copy = tmp_path / "runs" / made.name
    shutil.copytree(made, copy)
    return copy


def _samples(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]


def _write_samples(run: Path, records: list[dict]) -> None:
    (run / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def _manifest(run: Path, **changes) -> dict:
    manifest = json.loads((run / "manifest.json").read_text())
    manifest.update(changes)
    (run / "manifest.json").write_text(json.dumps(manifest))
    return manifest


def _said(found: dict) -> list[str]:
    return [f"{p['sample_id']}: {p['file']}: {p['problem']}" for p in found["problems"]]


def _names_the_pack(found: dict, words: str = "") -> bool:
    """A problem of the pack itself (no sample's) saying `words`."""
    return any(p["file"] == PACK and p["sample_id"] is None and words in p["problem"] for p in found["problems"])


# -- a complete run holds every planned sample ---------------------------------------------------


def test_a_complete_run_lacking_planned_samples_names_each_one_and_caps_the_terminal_list(run):
    kept = _samples(run)[:4]
    _write_samples(run, kept)
    missing = sorted(planned(4, 2) - {s["sample_id"] for s in kept})
    code, found = verify(run)
    assert code == 1
    named = [p["sample_id"] for p in found["problems"] if "planned but not recorded" in p["problem"]]
    assert sorted(named) == missing and len(named) == 12  # JSON lists every one
    table = CliRunner().invoke(main, ["verify", str(run)])
    assert table.exit_code == 1
    lines = [line for line in table.stdout.splitlines() if "planned but not recorded" in line]
    assert len(lines) == 11 and lines[-1].startswith(
        "... and 2 more samples: samples.jsonl:"
    )  # 10, then a count
    assert "--format json lists every one" in lines[-1]
    # The counts the run ended with say more were recorded: fewer present is damage too.
    assert any("the manifest counts 16 recorded" in p for p in _said(found)), _said(found)
    assert any("fewer than the 8 the manifest's totals counted" in p for p in _said(found)), _said(found)


def test_a_run_that_ended_otherwise_may_lack_samples_but_never_fewer_than_it_counted(run):
    kept = _samples(run)[:10]
    _write_samples(run, kept)
    arms = {a["prompt"]: a["arm"] for a in json.loads((run / "manifest.json").read_text())["arms"]}
    per_arm = {arm: sum(arms[s["prompt"]] == arm for s in kept) for arm in arms.values()}
    for status, stopped_by in (("interrupted", "max_cost"), ("interrupted", None), ("failed", None)):
        manifest = _manifest(
            run, status=status, stopped_by=stopped_by, counts={"planned": 16, "recorded": 10, "errors": 0}
        )
        totals = manifest.pop("totals")
        (run / "manifest.json").write_text(json.dumps(manifest))
        code, found = verify(run)
        assert (code, found["problems"]) == (0, []), (status, found)
        assert f"10 of 16 planned samples are recorded (the run is {status})" in found["notes"]
        # The totals it kept when it ended count 8 an arm: the arm now short of them is damage.
        for arm in totals["arms"]:
            arm["samples"] = per_arm[arms[arm["prompt"]]] + 1
        (run / "manifest.json").write_text(json.dumps(dict(manifest, totals=totals)))
        code, found = verify(run)
        assert code == 1 and sum("the manifest's totals counted" in p for p in _said(found)) == 2, found


def test_a_sequential_run_its_rule_stopped_lacks_only_the_rounds_after_it(run):
    manifest = _manifest(run, sequential={"metric": "header_present", "alpha": 0.05})
    manifest.pop("totals")
    manifest["counts"]["recorded"] = 8
    (run / "manifest.json").write_text(json.dumps(manifest))
    (run / "sequential.jsonl").write_text(json.dumps({"round": 1, "decision": "B>A", "stop": True}) + "\n")
    round_one = [s for s in _samples(run) if s["repeat"] == 1]
    _write_samples(run, round_one)
    code, found = verify(run)
    assert code == 0 and "the sequential rule stopped at round 1 of 2" in " ".join(found["notes"]), found
    _write_samples(run, round_one[1:])  # a sample of a round the rule ran is missing: damage
    code, found = verify(run)
    missing = [p["sample_id"] for p in found["problems"] if "planned but not recorded" in p["problem"]]
    assert code == 1 and missing == [round_one[0]["sample_id"]], found


@pytest.mark.parametrize("how", ["deleted", "emptied"])
def test_a_lost_samples_file_is_damage_when_the_manifest_counts_samples(run, how):
    if how == "deleted":
        (run / "samples.jsonl").unlink()
    else:
        (run / "samples.jsonl").write_bytes(b"")
    code, found = verify(run)
    assert code == 1, found
    said = " ".join(_said(found))
    assert ("is missing" if how == "deleted" else "holds 0 samples") in said
    assert "the manifest counts 16 recorded" in said


# -- the index against the records ---------------------------------------------------------------


def _drop_index_lines(run: Path, keep) -> list[dict]:
    lines = read_jsonl(run / INDEX)
    (run / INDEX).write_text("".join(json.dumps(e) + "\n" for e in lines if keep(e)))
    return [e for e in lines if not keep(e)]


def test_a_record_whose_index_lines_were_removed_is_named_for_each_blob(run):
    sid = _samples(run)[2]["sample_id"]
    dropped = _drop_index_lines(run, lambda e: e["sample_id"] != sid)
    assert sorted(e["kind"] for e in dropped) == ["body", "request", "txt"]
    code, found = verify(run)
    mine = [p for p in found["problems"] if p["sample_id"] == sid]
    assert code == 1 and len(mine) == 3, found
    assert all(p["file"] == INDEX and "has no line in the index" in p["problem"] for p in mine)
    assert any(p["problem"].startswith("its request has no line") for p in mine)


def test_a_lost_request_line_alone_is_named(run):
    sid = _samples(run)[5]["sample_id"]
    _drop_index_lines(run, lambda e: (e["sample_id"], e["kind"]) != (sid, "request"))
    code, found = verify(run)
    assert code == 1 and [p["sample_id"] for p in found["problems"]] == [sid], found
    assert "request has no line in the index" in found["problems"][0]["problem"]


def test_an_index_line_whose_sha256_disagrees_with_the_record_is_named(run):
    record = _samples(run)[3]
    record["raw"]["sha256"] = "f" * 64  # the record's own digest is wrong, the index's right
    _write_samples(run, [record if s["sample_id"] == record["sample_id"] else s for s in _samples(run)])
    code, found = verify(run)
    assert code == 1
    assert any(
        p == f"{record['sample_id']}: {PACK}: its record and the index give its txt different sha256s"
        for p in _said(found)
    ), _said(found)


def test_blobs_of_a_sample_with_no_record_are_a_note_in_a_run_that_stopped(run):
    records = _samples(run)
    gone = records[-1]["sample_id"]  # in flight when the run stopped: its blobs written, its record not
    _write_samples(run, records[:-1])
    manifest = _manifest(run, status="interrupted", counts={"planned": 16, "recorded": 15, "errors": 0})
    manifest.pop("totals")
    (run / "manifest.json").write_text(json.dumps(manifest))
    code, found = verify(run)
    assert (code, found["problems"]) == (0, []), found
    assert any(
        note.startswith(f"{INDEX}: 1 sample(s) have blobs but no record ({gone})") for note in found["notes"]
    )


def test_a_resumed_run_whose_failed_sample_was_set_aside_holds(tmp_path):
    failed = set()

    def flaky(request):
        question = request.json["messages"][-1]["content"]
        if question == "question 1" and not failed:
            failed.add(question)
            return Reply(
                status=400, body=b'{"error": {"message": "bad request"}}', content_type="application/json"
            )
        return reply(request)

    with LocalServer(flaky) as server:
        first = CliRunner().invoke(
            main,
            [
                "run",
                "--retrieval",
                "none",
                str(_probeset(tmp_path)),
                "--prompt",
                str(Path(__file__).parent.parent / "prompts" / "always-header.md"),
                "--model",
                f"openai:m@{server.url}/v1",
                "--runs-dir",
                str(tmp_path / "runs"),
                "--max-attempts",
                "1",
                "--json",
            ],
        )
        run = Path(json.loads(first.stdout)["run"])
        assert any(s.get("error") for s in read_jsonl(run / "samples.jsonl")), first.output
        resumed = CliRunner().invoke(main, ["run", "--resume", str(run)])
        assert resumed.exit_code == 0, resumed.output
    assert (run / "superseded.jsonl").is_file()
    code, found = verify(run)
    assert (code, found["problems"]) == (0, []), found


def _probeset(tmp_path: Path) -> Path:
    from conftest import write_probeset

    return write_probeset(tmp_path / "p.toml", [(f"c{i}", f"question {i}", None) for i in range(2)])


# -- the tails of the other files, and packs that are no regular file ----------------------------


@pytest.mark.parametrize("name", ["retrievals.jsonl", "judgments.jsonl", "superseded.jsonl"])
def test_a_torn_or_nul_filled_tail_of_the_other_lines_files_is_named(run, name):
    path = run / name
    whole = path.read_bytes() if path.exists() else b'{"sample_id": "c0.r1.a1"}\n'
    path.write_bytes(whole + b'{"case_id": "c0", "rep')
    code, found = verify(run)
    lines = len(whole.splitlines())
    assert code == 1 and f"None: {name}: line {lines + 1} is torn (cut off mid-write)" in _said(found), found
    path.write_bytes(whole + b"\0" * 100)
    code, found = verify(run)
    assert code == 1
    assert f"None: {name}: ends in 100 NUL bytes (a crash or power loss wrote over it)" in _said(found), found


def test_a_pack_that_is_a_link_is_named_and_not_followed(run, tmp_path):
    outside = tmp_path / "outside.bin"
    shutil.move(run / PACK, outside)  # the same bytes, out of the run
    os.symlink(outside, run / PACK)
    code, found = verify(run)
    assert code == 1
    assert _names_the_pack(found, "symbolic link"), found
    assert not any("index's sha256" in p for p in _said(found))  # its bytes were not read
    (run / PACK).unlink()
    os.symlink(tmp_path / "nowhere.bin", run / PACK)  # a dangling link: a sentence, no traceback
    code, found = verify(run)
    assert code == 1 and _names_the_pack(found), found


def test_a_pack_that_is_a_fifo_is_named_without_waiting_on_it(run):
    (run / PACK).unlink()
    os.mkfifo(run / PACK)  # opened O_NONBLOCK: no writer is waited for
    code, found = verify(run)
    assert code == 1
    assert _names_the_pack(found, "not a regular file"), found


# -- what the other commands make of a damaged run -----------------------------------------------


def _duplicated(run: Path) -> str:
    records = _samples(run)
    _write_samples(run, records + [records[0]])
    return records[0]["sample_id"]


def _unplanned(run: Path) -> str:
    records = _samples(run)
    _write_samples(run, records + [dict(records[1], prompt="ghost")])
    return records[1]["sample_id"]


def _torn(run: Path) -> str:
    with open(run / "samples.jsonl", "ab") as handle:
        handle.write(b'{"sample_id": "c0.r')
    return ""


def _compared(run: Path) -> tuple[dict, str]:
    result = CliRunner().invoke(main, ["compare", str(run), "--format", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    table = CliRunner().invoke(main, ["compare", str(run)])
    assert table.exit_code == 0, table.output
    return data, table.stdout


@pytest.mark.parametrize(
    ("damage", "said"), [(_duplicated, "more than once"), (_unplanned, "no arm"), (_torn, "is torn")]
)
def test_compare_counts_a_damaged_run_as_the_clean_one_and_says_why_in_one_sentence(run, damage, said):
    clean, _ = _compared(run)
    damage(run)
    data, table = _compared(run)
    for side in ("a", "b"):
        assert (data[side]["k"], data[side]["n"], data[side]["errors"]) == (
            clean[side]["k"],
            clean[side]["n"],
            clean[side]["errors"],
        )
    assert len(data["warnings"]) == 1 and said in data["warnings"][0], data["warnings"]
    words = " ".join(table.split())  # the table wraps long lines
    assert words.count("warning:") == 1 and said in words.split("warning:")[1], table


def test_show_and_export_leave_out_a_sample_of_no_arm_and_say_so(run):
    sid = _unplanned(run)
    shown = CliRunner().invoke(main, ["show", str(run), "--format", "json"])
    assert shown.exit_code == 0
    assert "no arm" in shown.stderr and len(shown.stderr.strip().splitlines()) == 1
    rows = CliRunner().invoke(main, ["export", str(run), "--format", "jsonl"])
    assert rows.exit_code == 0 and "no arm" in rows.stderr
    exported = [json.loads(line) for line in rows.stdout.splitlines()]
    assert len(exported) == 16 and [r["sample_id"] for r in exported].count(sid) == 1
    assert not any(r.get("prompt") == "ghost" for r in exported)
    assert "ghost" not in shown.stdout


@pytest.mark.parametrize(("damage", "said"), [(_duplicated, "more than once"), (_unplanned, "no arm")])
def test_the_viewer_shows_the_damage_on_the_run_page(run, damage, said):
    pytest.importorskip("starlette")
    from starlette.testclient import TestClient

    from promptprobe.viewer.app import create_app

    damage(run)
    with TestClient(create_app(run.parent, warm=False), base_url="http://127.0.0.1") as client:
        page = client.get(f"/runs/{run.name}")
        data = client.get(f"/runs/{run.name}.json").json()
    assert page.status_code == 200 and said in page.text
    assert any(said in problem for problem in data["problems"]), data["problems"]
    assert data["report"]["recorded"] == 16 and sum(a["samples"] for a in data["report"]["arms"]) == 16
