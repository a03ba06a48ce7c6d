"""`probe export RUN -o samples.csv` / `.jsonl`: one readable row per sample (arm names, case,
question, tags, repeat, the output text and its raw bytes' sha256, header, error, endpoint and
every metric's outcome), CSV cells a spreadsheet would run as a formula neutralised, rows
streamed; and -o FILE meaning what its suffix says on every command."""

import csv
import hashlib
import io
import json
import os
import re
import stat
import sys
import tracemalloc
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import ROOT
from servers import LocalServer, Reply

import promptprobe
from promptprobe.cli import SUFFIX_FORMATS, main
from promptprobe.views.rows import FORMULA_START, iter_rows, neutralise

sys.path.insert(0, str(ROOT / "benchmarks"))
from export_scale import make_run_with_outputs  # noqa: E402

# Outputs keyed by the case they answer; each starts the way a spreadsheet formula would, or not.
OUTPUTS = {
    "eq": '=HYPERLINK("http://evil.example","click")',
    "plus": "+1+1",
    "minus": "-2+3",
    "at": "@SUM(A1:A2)",
    "tab": "\t=1+1",
    "cr": "\r=1+1",
    "plain": "[[ANSWER]]\nYes — 是的 🎉, \"quoted\", a,b\r\n",
}
QUESTIONS = {"eq": "=2+2, what is it?", "minus": "-5 degrees: is that cold?", "at": "@team: who is on call?"}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("export")
    lines = ["repeats = 1"]
    for key in [*OUTPUTS, "broken"]:
        question = QUESTIONS.get(key, f"question {key}")
        lines += ["[[case]]", f"id = {json.dumps(key)}", f"question = {json.dumps(question)}",
                  'tags = ["=cmd", "plain tag"]' if key == "eq" else f'tags = ["{key}"]']
        if key == "plain":
            lines.append('expect = "answer"')
    (tmp / "p.toml").write_text("\n".join(lines) + "\n")
    (tmp / "v1.md").write_text("prompt v1\n")

    def reply(request):
        key = request.json["messages"][-1]["content"]
        key = next((k for k, q in QUESTIONS.items() if q == key), key.removeprefix("question "))
        if key == "broken":
            return Reply(status=400, body=b'{"error": {"message": "=context too long"}}')
        return Reply(OUTPUTS[key])

    with LocalServer(reply) as server:
        result = CliRunner().invoke(main, [
            "run", str(tmp / "p.toml"), "--prompt", str(tmp / "v1.md"), "--retrieval", "none",
            "--model", f"desk=openai:m@{server.url}/v1", "--runs-dir", str(tmp / "runs"), "--json",
            "--max-attempts", "1"])
    assert result.exit_code == 1, result.output  # the broken case failed
    return Path(json.loads(result.stdout)["run"])


def export(run_dir, *args):
    return CliRunner().invoke(main, ["export", str(run_dir), *args])


def test_the_csv_export_has_readable_columns_and_neutralised_formulas(run_dir, tmp_path):
    out = tmp_path / "samples.csv"
    result = export(run_dir, "-o", str(out))
    assert result.exit_code == 0, result.output
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    with open(out, newline="", encoding="utf-8") as handle:  # as the csv module reads a file
        rows = {row["case_id"]: row for row in csv.DictReader(handle)}
    assert set(rows) == {*OUTPUTS, "broken"}
    first = rows["plain"]
    assert list(first) == documented_columns()
    assert (first["prompt"], first["model"], first["arm"], first["repeat"]) == ("v1", "desk", "1", "1")
    assert first["run_id"] == run_dir.name and first["started_at"].startswith("20")
    assert first["prompt_sha256"] == hashlib.sha256((run_dir / "prompts" / "v1.md").read_bytes()).hexdigest()
    assert first["retrieval_hit"] == ""  # a metric the run lacks: an empty cell
    assert first["model_spec"].startswith("openai:m@http://127.0.0.1:") and first["endpoint"].endswith("/v1")
    assert first["endpoint_from"] == "spec"
    assert first["output"] == OUTPUTS["plain"] and first["header"] == "present"
    raw = promptprobe.load(run_dir).raw(first["sample_id"])
    assert first["raw_sha256"] == hashlib.sha256(raw).hexdigest()
    assert first["header_present"] == "1" and first["declared_correct"] == "1"
    assert rows["eq"]["declared_correct"] == ""  # no `expect`: the metric does not apply
    # Every formula-like cell starts with a quote; what follows is the exact text.
    for key in ("eq", "plus", "minus", "at", "tab", "cr"):
        assert rows[key]["output"] == "'" + OUTPUTS[key], key
    assert rows["eq"]["question"] == "'" + QUESTIONS["eq"] and rows["minus"]["question"] == "'" + QUESTIONS["minus"]
    assert rows["at"]["question"] == "'@team: who is on call?"
    assert rows["eq"]["tags"] == "'=cmd; plain tag" and rows["plus"]["tags"] == "plus"
    broken = rows["broken"]
    assert (broken["header"], broken["error_kind"], broken["output"], broken["raw_sha256"]) == ("error", "http_status", "", "")
    assert "HTTP 400" in broken["error"] and "=context too long" in broken["error"]
    assert broken["header_present"] == "0"  # a failed sample is the unfavourable outcome
    for row in rows.values():
        for value in row.values():
            assert not value.startswith(FORMULA_START), (row["case_id"], value)
    assert result.stderr.strip() == f"wrote {out}"


def test_the_jsonl_export_keeps_values_as_they_are(run_dir, tmp_path):
    out = tmp_path / "samples.jsonl"
    assert export(run_dir, "-o", str(out)).exit_code == 0
    rows = {row["case_id"]: row for row in map(json.loads, out.read_text().splitlines())}
    assert rows["eq"]["output"] == OUTPUTS["eq"] and rows["eq"]["tags"] == ["=cmd", "plain tag"]
    assert rows["tab"]["output"] == OUTPUTS["tab"] and rows["minus"]["question"] == QUESTIONS["minus"]
    assert rows["broken"]["output"] is None and rows["broken"]["error_kind"] == "http_status"
    assert rows["plain"]["header_present"] == 1 and rows["eq"]["declared_correct"] is None
    same = export(run_dir, "--format", "jsonl").stdout  # stdout gives the same rows
    assert [json.loads(line) for line in same.splitlines()] == list(map(json.loads, out.read_text().splitlines()))


def test_a_selection_that_matches_nothing_is_exit_2_and_writes_no_file(run_dir, tmp_path):
    for args, words in ((["--case", "nope"], "no case 'nope'"), (["--sample", "nope.r1.a1"], "no sample")):
        out = tmp_path / "none.csv"
        result = export(run_dir, *args, "-o", str(out))
        assert result.exit_code == 2 and words in result.stderr, result.output
        assert not out.exists()
    one = export(run_dir, "--case", "plus", "--format", "csv").stdout
    assert len(list(csv.DictReader(io.StringIO(one)))) == 1
    none = export(run_dir, "--header", "misplaced", "--format", "csv").stdout
    assert none.startswith("run_id,sample_id,arm,") and len(none.splitlines()) == 1  # the columns alone


def documented_columns() -> list[str]:
    """The export's columns as docs/json.md lists them, in order."""
    text = (ROOT / "docs" / "json.md").read_text(encoding="utf-8")
    section = text[text.index("## `probe export --format jsonl|csv`"):]
    table = section[section.index("| column | value |"):].split("\n\n")[0].splitlines()[2:]
    return [name for row in table for name in re.findall(r"`([a-z_0-9]+)`", row.split(" | ")[0])]


def test_the_columns_are_the_same_whatever_the_run(run_dir, tmp_path):
    """Another run (synthetic: must_retrieve and expect on every case, no tags) has exactly the
    columns docs/json.md lists, as this one does: exports of different runs stack."""
    other = make_run_with_outputs(tmp_path / "other", 8)
    heads = [next(csv.reader(io.StringIO(next(iter_rows(run, "csv"))))) for run in (run_dir, other)]
    assert heads[0] == heads[1] == documented_columns()
    row = json.loads(next(iter_rows(other, "jsonl")))
    assert row["retrieval_hit"] in (0, 1) and row["run_id"] == other.name


def test_neutralise_follows_owasp():
    for start in ("=", "+", "-", "@", "\t", "\r"):
        assert neutralise(start + "x") == "'" + start + "x"
    assert neutralise("a=1") == "a=1" and neutralise(-1) == -1 and neutralise(None) is None


def test_rows_are_streamed_memory_does_not_grow_with_the_run(tmp_path):
    def peak(samples: int) -> int:
        run = make_run_with_outputs(tmp_path / f"r{samples}", samples)
        tracemalloc.start()
        for _ in iter_rows(run, "csv"):
            pass
        _, top = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        return top

    small, large = peak(400), peak(4000)
    assert large < 1.5 * small, (small, large)  # ten times the rows, not ten times the memory


# -- -o FILE by suffix, on every command ---------------------------------------------------


@pytest.mark.parametrize("args", [
    ["why", "RUN", "-o", "why.html"],
    ["runs", "--runs-dir", "RUNS", "-o", "runs.html"],
    ["show", "RUN", "-o", "show.html"],
    ["plan", "--p1", "0.8", "--p2", "0.9", "-o", "plan.html"],
    ["report", "RUN", "-o", "report.pdf"],
    ["export", "RUN", "-o", "samples.xlsx"],
])
def test_a_suffix_the_command_cannot_write_is_refused(run_dir, tmp_path, args):
    args = [str(run_dir) if a == "RUN" else str(run_dir.parent) if a == "RUNS" else a for a in args]
    target = tmp_path / args[-1]
    args[-1] = str(target)
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"error: -o {target}: probe {args[0]} cannot write ")
    assert "table (.txt)" in line or "md (.md, .markdown)" in line
    assert not target.exists()


def test_a_suffix_picks_the_form_and_format_says_otherwise(run_dir, tmp_path):
    checks = {
        "report.html": lambda text: text.startswith("<!doctype html>"),
        "report.json": lambda text: json.loads(text)["arms"][0]["model"] == "desk",
        "report.md": lambda text: "| metric" in text or "|---" in text,
        "report.txt": lambda text: "header_present" in text and "|---" not in text,
        "report": lambda text: "header_present" in text and "|---" not in text,  # no suffix: the default
    }
    for name, check in checks.items():
        result = CliRunner().invoke(main, ["report", str(run_dir), "-o", str(tmp_path / name)])
        assert result.exit_code == 0, result.output
        assert check((tmp_path / name).read_text()), name
    forced = CliRunner().invoke(main, ["plan", "--p1", "0.8", "--p2", "0.9", "--format", "json",
                                       "-o", str(tmp_path / "plan.html")])
    assert forced.exit_code == 0 and json.loads((tmp_path / "plan.html").read_text())["n_per_arm"] > 0


def test_every_form_of_every_command_has_a_suffix():
    commands = [c for c in main.commands.values() if hasattr(c.callback, "formats")]
    assert {c.name for c in commands} >= {"check", "classify", "run", "report", "compare", "plan", "why",
                                          "show", "export", "runs"}
    for command in commands:
        for form in command.callback.formats:
            assert form in SUFFIX_FORMATS.values(), (command.name, form)


# -- probe init and shell completion --------------------------------------------------------


def test_probe_init_writes_files_that_check_and_dry_run_accept(tmp_path, monkeypatch):
    folder = tmp_path / "their-repo"
    result = CliRunner().invoke(main, ["init", str(folder)])
    assert result.exit_code == 0, result.output
    written = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
    assert written == ["probe.toml", "probes/example.toml", "prompts/assistant.md"]
    assert "# " in (folder / "probe.toml").read_text()  # commented
    monkeypatch.chdir(folder)  # as a user would: the config is ./probe.toml
    checked = CliRunner().invoke(main, ["check", "probe.toml", "probes/example.toml", "prompts/assistant.md",
                                        "--json"])
    assert checked.exit_code == 0, checked.output
    results = json.loads(checked.stdout)["probesets"]
    assert len(results) == 3 and all(r["ok"] for r in results)
    planned = CliRunner().invoke(main, ["run", "probes/example.toml", "--prompt", "prompts/assistant.md",
                                        "--dry-run", "--json"])
    assert planned.exit_code == 0, planned.output
    plan = json.loads(planned.stdout)
    assert plan["calls"] == 12 and [a["model"] for a in plan["arms"]] == ["sonnet"]
    assert plan["cost_usd"] is not None  # a model with a built-in price


def test_probe_init_never_overwrites_unless_forced(tmp_path):
    (tmp_path / "probe.toml").write_text("# mine\n")
    result = CliRunner().invoke(main, ["init", str(tmp_path)])
    assert result.exit_code == 2 and "probe.toml already exists" in result.stderr
    assert (tmp_path / "probe.toml").read_text() == "# mine\n" and not (tmp_path / "probes").exists()
    assert CliRunner().invoke(main, ["init", str(tmp_path), "--force"]).exit_code == 0
    assert "[retrieval]" in (tmp_path / "probe.toml").read_text()
    (tmp_path / "file").write_text("x")
    assert CliRunner().invoke(main, ["init", str(tmp_path / "file")]).exit_code == 2


def test_shell_completion_emits_a_script_and_completes_commands():
    import subprocess

    probe = str(Path(sys.executable).parent / "probe")
    script = subprocess.run([probe], env={**os.environ, "_PROBE_COMPLETE": "bash_source"},
                            capture_output=True, text=True, timeout=60)
    assert script.returncode == 0 and "_probe_completion" in script.stdout and "complete " in script.stdout
    words = subprocess.run([probe], env={**os.environ, "_PROBE_COMPLETE": "bash_complete",
                                         "COMP_WORDS": "probe ex", "COMP_CWORD": "1"},
                           capture_output=True, text=True, timeout=60)
    assert "plain,export" in words.stdout.split()
    metrics = subprocess.run([probe], env={**os.environ, "_PROBE_COMPLETE": "bash_complete",
                                           "COMP_WORDS": "probe compare a b --metric refusal_r", "COMP_CWORD": "5"},
                             capture_output=True, text=True, timeout=60)
    assert "plain,refusal_recall" in metrics.stdout.split()
