"""`probe show`, `probe export` and `probe classify RUN` on a run recorded through a real socket."""

import base64
import csv
import hashlib
import io
import json

import pytest
from click.testing import CliRunner
from conftest import ROOT, write_probeset
from servers import LocalServer, Reply, openai_body

import promptprobe
from promptprobe.cli import main
from promptprobe.config import load_config
from promptprobe.engine.run import RunOptions, run_probe
from promptprobe.jsonio import read_jsonl
from promptprobe.models import parse_model_spec
from promptprobe.probeset import load_probeset
from promptprobe.prompts import load_prompt
from promptprobe.views.show import visible

OUTPUTS = {
    "bom": "\ufeff[[NO_ANSWER]]\r\nNot covered.  \r\n",
    "fence": "Sorry.\n```\n[[NO_ANSWER]]\n```",
    "plain": "[[ANSWER]]\nYes — 是的 🎉",
}


@pytest.fixture
def run_dir(tmp_path):
    probeset = load_probeset(write_probeset(tmp_path / "p.toml", [(k, f"q {k}", None) for k in OUTPUTS] +
                                            [("broken", "q broken", None)]))

    def reply(request):
        key = request.json["messages"][-1]["content"].split()[-1]
        if key == "broken":
            return Reply(status=400, body=b'{"error": {"message": "context too long"}}')
        return Reply(OUTPUTS[key])

    with LocalServer(reply) as server:
        outcome = run_probe(probeset, [load_prompt(ROOT / "prompts" / "always-header.md")],
                            [parse_model_spec(f"openai:m@{server.url}/v1")], load_config(None),
                            RunOptions(runs_dir=tmp_path / "runs"))
    return outcome.path


def test_visible():
    assert visible("\ufeffa\u200b b \r\n") == "⟨U+FEFF BOM⟩a⟨U+200B ZWSP⟩ b·␍\n"
    assert visible("x  \ny") == "x··\ny␄"
    assert visible("tab\there\u2028") == "tab→here⟨U+2028 LSEP⟩␄"


def test_show_filters_and_makes_invisible_characters_visible(run_dir):
    result = CliRunner().invoke(main, ["show", str(run_dir), "--header", "misplaced"])
    assert result.exit_code == 0, result.output
    blocks = result.output.strip().split("\n\n== ")
    assert [b.removeprefix("== ").split()[0] for b in blocks] == ["bom.r1.a1", "fence.r1.a1", "provenance"]
    prompt_sha = hashlib.sha256((ROOT / "prompts" / "always-header.md").read_bytes()).hexdigest()
    assert f"prompt always-header (sha256 {prompt_sha})" in blocks[2]
    assert "/v1 (from spec)" in blocks[2] and "probe set p (sha256 " in blocks[2]
    assert "header misplaced, leading_whitespace on line 1" in blocks[0]
    assert blocks[0].splitlines()[1:] == ["⟨U+FEFF BOM⟩[[NO_ANSWER]]␍", "Not covered.··␍"]  # no ␄: ends with a newline
    errors = CliRunner().invoke(main, ["show", str(run_dir), "--header", "error"])
    assert "error: openai:m@" in errors.output and "HTTP 400" in errors.output
    missing = CliRunner().invoke(main, ["show", str(run_dir), "--case", "nope"])
    assert missing.exit_code == 2 and "no case 'nope'" in missing.stderr


def test_export_md_and_json_keep_exact_bytes(run_dir):
    md = CliRunner().invoke(main, ["export", str(run_dir), "--case", "fence"])
    assert md.exit_code == 0, md.output
    assert "## Case `fence`" in md.output and "\n> q fence\n" in md.output
    assert "Samples: `fence.r1.a1`" in md.output and "header misplaced, fenced on line 3" in md.output
    assert "````text\nSorry.\n```\n[[NO_ANSWER]]\n```␄\n````" in md.output  # fence longer than the output's
    data = json.loads(CliRunner().invoke(main, ["export", str(run_dir), "--format", "json"]).output)
    by_case = {case["case_id"]: case["arms"][0]["groups"] for case in data["cases"]}
    assert set(by_case) == {"bom", "fence", "plain", "broken"}
    for key, text in OUTPUTS.items():
        (group,) = by_case[key]
        assert group["sample_ids"] == [f"{key}.r1.a1"] and group["samples"][0]["sample_id"] == f"{key}.r1.a1"
        assert base64.b64decode(group["raw_base64"]) == text.encode() and group["raw_text"] == text
    (broken,) = by_case["broken"]
    assert broken["raw_text"] is None and broken["error"]["kind"] == "http_status"
    assert {c["case_id"]: c["passages"] for c in data["cases"]}["bom"] == [{"repeats": [1], "passages": [], "error": None}]


def test_classify_run_offline_with_other_markers(run_dir):
    same = json.loads(CliRunner().invoke(main, ["classify", str(run_dir)]).stdout)
    assert same["reused"] is True and same["classification"] is None  # the run's own: nothing to redo
    assert not (run_dir / "classifications").exists()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    (run_dir / "manifest.json").write_text(json.dumps(dict(manifest, tool_version="0.0.1")))  # an older classifier
    result = CliRunner().invoke(main, ["classify", str(run_dir)])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["classification"] == 1 and summary["moved"] == []  # same settings: nothing moves
    lines = {line["sample_id"]: line for line in read_jsonl(run_dir / "classifications" / "1.jsonl")[1:]}
    assert lines["plain.r1.a1"]["header"]["header"] == "present"
    assert lines["fence.r1.a1"]["header"]["where"] == "fenced"
    assert "broken.r1.a1" not in lines  # a failed sample has no output to classify
    other = CliRunner().invoke(main, ["classify", str(run_dir), "--markers", "Sorry.,Yes", "--no-answer", "Sorry."])
    summary = json.loads(other.stdout)
    assert summary["classification"] == 2 and summary["based_on"] == 1
    lines = {line["sample_id"]: line for line in read_jsonl(run_dir / "classifications" / "2.jsonl")[1:]}
    assert lines["fence.r1.a1"]["header"]["header"] == "present"
    assert lines["fence.r1.a1"]["header"]["declared"] == "no_answer"


def test_show_and_export_follow_the_latest_reclassification(run_dir):
    """After `probe classify RUN --markers ...`, show --header and the md/json incident export pick
    and state samples by the classification report and compare count, and say which it is."""
    result = CliRunner().invoke(main, ["classify", str(run_dir), "--markers", "Sorry.,Yes", "--no-answer", "Sorry."])
    assert result.exit_code == 0, result.output
    report = json.loads(CliRunner().invoke(main, ["report", str(run_dir), "--json"]).stdout)
    assert report["classification"] == 1
    assert {c["case_id"]: c["present"] for c in report["arms"][0]["cases"]}["fence"] == 1
    shown = CliRunner().invoke(main, ["show", str(run_dir), "--header", "present"])
    assert shown.exit_code == 0, shown.output
    assert shown.output.startswith("headers as classification 1 (an offline reclassification)")
    assert "== fence.r1.a1" in shown.output and "header present" in shown.output
    misplaced = CliRunner().invoke(main, ["show", str(run_dir), "--header", "misplaced"])
    assert "fence.r1.a1" not in misplaced.output
    data = json.loads(CliRunner().invoke(main, ["export", str(run_dir), "--case", "fence", "--format", "json"]).stdout)
    assert data["classification"] == 1
    group = data["cases"][0]["arms"][0]["groups"][0]
    assert group["header"]["header"] == "present" and group["header"]["declared"] == "no_answer"
    md = CliRunner().invoke(main, ["export", str(run_dir), "--case", "fence"]).stdout
    assert "classification 1 (an offline reclassification)" in md and "header present," in md


def test_every_reader_warns_of_a_torn_last_line(run_dir):
    """DESIGN: a torn last line is ignored by every reader with a warning (why and the row export
    too), on stderr or in the view, never in the rows themselves."""
    samples = run_dir / "samples.jsonl"
    lines = samples.read_bytes().splitlines(keepends=True)
    samples.write_bytes(b"".join(lines[:-1]) + lines[-1][:40])
    torn = f"the last line (line {len(lines)}) is torn"
    for fmt in ("csv", "jsonl"):
        rows = CliRunner().invoke(main, ["export", str(run_dir), "--format", fmt])
        assert rows.exit_code == 0 and torn in rows.stderr and "torn" not in rows.stdout, fmt
        found = list(csv.DictReader(io.StringIO(rows.stdout))) if fmt == "csv" else rows.stdout.splitlines()
        assert len(found) == len(lines) - 1
    why = CliRunner().invoke(main, ["why", str(run_dir), "--metric", "header_misplaced"])
    assert why.exit_code == 0 and torn in " ".join(why.output.split()), why.output
    data = json.loads(CliRunner().invoke(main, ["why", str(run_dir), "--json"]).stdout)
    assert any(torn in w for w in data["warnings"])


def lone_surrogate_reply(request):
    """A server that cuts an emoji in half: its JSON holds a lone `\\ud83d` escape (llama.cpp and
    other OpenAI-compatible servers do at max_tokens), which is recorded as the bytes ED A0 BD."""
    body = openai_body("[[ANSWER]]\nemoji cut CUT", request.json["model"], None).replace(b"CUT", b"\\ud83d")
    return Reply(body=body, content_type="application/json")


def test_show_and_export_name_the_bytes_that_are_not_utf8(tmp_path):
    probeset = load_probeset(write_probeset(tmp_path / "p.toml", [("cut", "q cut", None)]))
    with LocalServer(lone_surrogate_reply) as server:
        run = run_probe(probeset, [load_prompt(ROOT / "prompts" / "always-header.md")],
                        [parse_model_spec(f"openai:m@{server.url}/v1")], load_config(None),
                        RunOptions(runs_dir=tmp_path / "runs")).path
    data = promptprobe.load(run).raw("cut.r1.a1")
    assert data == b"[[ANSWER]]\nemoji cut \xed\xa0\xbd"
    named = "emoji cut ⟨byte 0xED not UTF-8⟩⟨byte 0xA0 not UTF-8⟩⟨byte 0xBD not UTF-8⟩␄"
    shown = CliRunner().invoke(main, ["show", str(run)])
    assert shown.exit_code == 0, shown.output
    assert named in shown.output
    as_json = CliRunner().invoke(main, ["show", str(run), "--format", "json"])
    assert as_json.exit_code == 0, as_json.output
    sample = json.loads(as_json.stdout)["samples"][0]
    assert named in sample["visible"] and sample["text"] == data.decode("utf-8", "replace")
    written = tmp_path / "incident.md"
    md = CliRunner().invoke(main, ["export", str(run), "-o", str(written)])
    assert md.exit_code == 0, md.output
    text = written.read_text(encoding="utf-8")
    assert named in text and base64.b64encode(data).decode() in text
    assert f"sha256 {hashlib.sha256(data).hexdigest()}" in text
    exported = CliRunner().invoke(main, ["export", str(run), "--format", "json"])
    assert exported.exit_code == 0, exported.output
    item = json.loads(exported.stdout)["cases"][0]["arms"][0]["groups"][0]
    assert base64.b64decode(item["raw_base64"]) == data
    assert item["raw_text"] == data.decode("utf-8", "replace")


def test_a_question_with_line_endings_stays_in_its_markdown_quote(tmp_path):
    # CommonMark ends a line at a lone CR too: every line of a question written with CR or CRLF is quoted.
    (tmp_path / "p.toml").write_text('[[case]]\nid = "cr"\nquestion = "first | part\\rsecond\\r\\nthird\\nfourth"\n')
    probeset = load_probeset(tmp_path / "p.toml")
    with LocalServer(lambda request: Reply("[[ANSWER]]\nok\n")) as server:
        run = run_probe(probeset, [load_prompt(ROOT / "prompts" / "always-header.md")],
                        [parse_model_spec(f"openai:m@{server.url}/v1")], load_config(None),
                        RunOptions(runs_dir=tmp_path / "runs")).path
    md = CliRunner().invoke(main, ["export", str(run)])
    assert md.exit_code == 0, md.output
    assert "\n> first | part\n> second\n> third\n> fourth\n" in md.output


SEARCH_IN_HALVES = """
import json, os, sys
from promptprobe import sample_lines
sample_lines.PARALLEL_SEARCH, sample_lines.SEARCH_WINDOW = 0, int(sys.argv[2])
forks, fork = [], os.fork
os.fork = lambda: forks.append(1) or fork()
found = {wanted: sample_lines.lines_naming(sys.argv[1], wanted) for wanted in sys.argv[3:]}
print(json.dumps({"forks": len(forks), "found": found}))
"""


@pytest.mark.parametrize("window", [1, 5, 4096, 1 << 20])
def test_a_sample_is_found_by_its_bytes_whatever_window_the_file_is_searched_in(tmp_path, monkeypatch, window):
    """`probe show --sample` finds a sample's lines by its id's bytes, a window of the file at a time,
    a large file in two halves at once (the second by a forked process): every line naming it (a
    duplicate too), none twice, whichever window boundary or half a line or its id straddles; a last
    line without its end, or a line that is not JSON, leaves it to the careful reader."""
    import subprocess
    import sys

    from promptprobe import sample_lines

    monkeypatch.setattr(sample_lines, "SEARCH_WINDOW", window)
    monkeypatch.setattr(sample_lines, "LINE_STEP", 7)

    def compact(record):
        return json.dumps(record, separators=(",", ":"))

    lines = [compact({"sample_id": f"s{i % 50}", "n": i, "pad": "x" * (i % 97)}) for i in range(400)]
    lines[10] = compact({"sample_id": "s3", "inner": {"sample_id": "s3"}})  # the id's bytes twice in a line
    lines[200] = compact({"sample_id": "s3", "note": "the middle of the file: where the halves meet"})
    path = tmp_path / "samples.jsonl"
    path.write_text("\n".join(lines) + "\n")
    wanted = ["s3", "s49", "s0", "s50"]
    expected = {w: [json.loads(line) for line in lines if json.loads(line)["sample_id"] == w] or None for w in wanted}
    assert {w: sample_lines.lines_naming(path, w) for w in wanted} == expected
    halves = subprocess.run([sys.executable, "-c", SEARCH_IN_HALVES, str(path), str(window), *wanted],
                            capture_output=True, text=True, timeout=60)
    assert halves.returncode == 0, halves.stderr
    assert json.loads(halves.stdout) == {"forks": len(wanted), "found": expected}
    path.write_text("\n".join(lines) + "\n" + compact({"sample_id": "s7"}))  # no newline at its end
    assert sample_lines.lines_naming(path, "s7") is None
    path.write_text('{"sample_id":"s1", torn\n')
    assert sample_lines.lines_naming(path, "s1") is None
    path.write_text("")
    assert sample_lines.lines_naming(path, "s1") is None


def test_a_search_split_anywhere_finds_each_place_once(tmp_path, monkeypatch):
    """The halves (and windows) of a search meet anywhere, inside the id's bytes too: every place
    is found by exactly one of them."""
    from promptprobe import sample_lines

    path = tmp_path / "f"
    path.write_bytes(b'x"sample_id":"s1"yy"sample_id":"s1""sample_id":"s1"z"sample_id":"s12"')
    needle = b'"sample_id":"s1"'
    size = path.stat().st_size
    with open(path, "rb") as handle:
        fd = handle.fileno()
        whole = sample_lines._search(fd, size, needle, 0, size)
        assert whole == [1, 19, 35]
        for window in (1, 3, 16, 4096):
            monkeypatch.setattr(sample_lines, "SEARCH_WINDOW", window)
            for split in range(size + 1):
                parts = sample_lines._search(fd, size, needle, 0, split) + sample_lines._search(
                    fd, size, needle, split, size)
                assert parts == whole, (window, split)
