"""What scripts rely on: JSON only on stdout for every command, every key documented in docs/,
tables that fit the terminal, no colour where it does not belong, help everywhere, and the
CI example of docs/ actually working."""

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import ROOT, run_dir_of, write_probeset
from servers import LocalServer, Reply

from promptprobe import config, probeset
from promptprobe.checks import METRICS
from promptprobe.cli import main
from promptprobe.comparison import Side, compare_sides, finish
from promptprobe.views.compare import render_comparison
from promptprobe.views.tables import color_enabled, table

DOCS = "\n".join(path.read_text(encoding="utf-8") for path in sorted((ROOT / "docs").glob("*.md")))
PROMPT = str(ROOT / "prompts" / "always-header.md")


def keys(value) -> set[str]:
    """Every object key in a JSON document, at any depth (metric and tag names included)."""
    found: set[str] = set()
    if isinstance(value, dict):
        for key, inner in value.items():
            found.add(key)
            found |= keys(inner)
    elif isinstance(value, list):
        for inner in value:
            found |= keys(inner)
    return found


def documented(key: str) -> bool:
    return f"`{key}`" in DOCS or f'"{key}"' in DOCS


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("contract")
    path = write_probeset(tmp / "p.toml", [(f"c{i}", f"question {i}", "answer" if i % 2 else "no_answer")
                                           for i in range(4)], repeats=2)
    with LocalServer(lambda r: Reply("[[ANSWER]]\nok [1]" if "1" in r.json["messages"][-1]["content"] else "no")) as s:
        result = CliRunner().invoke(main, ["run", "--retrieval", "none", str(path), "--prompt", PROMPT, "--prompt", f"other={PROMPT}",
                                           "--model", f"openai:m@{s.url}/v1", "--runs-dir", str(tmp / "runs"),
                                           "--format", "json"])
    assert result.exit_code == 0, result.output
    return tmp, path, result


def test_every_json_output_is_json_only_and_documented(recorded, tmp_path):
    tmp, path, run_result = recorded
    run = json.loads(run_result.stdout)  # stdout holds the JSON and nothing else
    run_dir = run["run"]
    outputs = {"run": run}
    commands = {
        "report": ["report", run_dir, "--by", "tag", "--format", "json"],
        "compare": ["compare", f"{run_dir}#prompt=always-header", f"{run_dir}#prompt=other", "--format", "json"],
        "compare --all": ["compare", f"{run_dir}#prompt=always-header", f"{run_dir}#prompt=other", "--all", "--json"],
        "plan": ["plan", "--p1", "0.85", "--p2", "1.0", "--cases", "10", "--icc", "0.5", "--format", "json"],
        "plan mdd": ["plan", "--n", "40", "--p1", "0.8", "--json"],
        "plan gate": ["plan", "--gate-any-of", "3", "--p", "0.9", "--json"],
        "plan sequential": ["plan", "--sequential", "--p1", "0.9", "--p2", "0.5", "--cases", "5", "--json"],
        "why": ["why", f"{run_dir}#prompt=other", "--format", "json"],
        "check": ["check", str(path), "--format", "json"],
        "dry-run": ["run", str(path), "--prompt", PROMPT, "--model", "openai:gpt-4.1", "--dry-run", "--json"],
        "classify run": ["classify", run_dir, "--format", "json"],
    }
    for name, args in commands.items():
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 0, (name, result.output)
        outputs[name] = json.loads(result.stdout)
    (tmp_path / "out.txt").write_text("[[ANSWER]]\nyes")
    classify = CliRunner().invoke(main, ["classify", str(tmp_path / "out.txt"), "--format", "json"])
    outputs["classify file"] = json.loads(classify.stdout)
    assert outputs["compare --all"]["results"][0].keys() >= {"metric", "verdict", "worse", "higher_is_better"}
    metric_names = set(METRICS)
    undocumented = {
        name: sorted(k for k in keys(value) if not documented(k) and k not in metric_names and not k.isdigit()
                     and not k.startswith(("c", "answer", "no_answer", "(untagged)")) or False)
        for name, value in outputs.items()
    }
    assert {name: missing for name, missing in undocumented.items() if missing} == {}


def test_every_metric_and_config_key_is_documented():
    names = set(METRICS)
    names |= config.TOP_KEYS | config.ASSEMBLE_KEYS | config.HEADER_KEYS | config.FILTER_KEYS
    names |= config.CITATION_KEYS | config.RUN_KEYS | config.MODEL_KEYS
    names |= set().union(*config.RETRIEVAL_KEYS.values())
    names |= probeset.TOP_KEYS | probeset.CASE_KEYS
    assert sorted(n for n in names if not documented(n)) == []


def test_every_sample_and_manifest_key_is_documented(recorded):
    _, _, run_result = recorded
    run_dir = Path(json.loads(run_result.stdout)["run"])
    manifest = json.loads((run_dir / "manifest.json").read_text())
    sample = json.loads((run_dir / "samples.jsonl").read_text().splitlines()[0])
    retrieval = json.loads((run_dir / "retrievals.jsonl").read_text().splitlines()[0])
    found = keys(manifest) | keys(sample) | keys(retrieval)
    found -= set(METRICS) | {"header_present"}
    assert sorted(k for k in found if not documented(k)) == []


def test_the_readme_points_to_docs_in_the_repository():
    readme = (ROOT / "README.md").read_text()
    assert "DESIGN.md" not in readme and "../" + "shared" not in readme
    for link in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert (ROOT / link).exists(), link


def test_nothing_in_the_repository_points_outside_it_for_reference():
    outside = "../" + "shared"  # spelled in two parts so this file does not name it
    files = [p for d in ("src", "tests", "docs", "benchmarks", "scripts", "examples", ".ci") for p in (ROOT / d).rglob("*")]
    named = [p for p in [*files, ROOT / "README.md", ROOT / "Makefile", ROOT / "pyproject.toml"]
             if p.is_file() and p.suffix not in {".png", ".pyc"} and outside in p.read_text(errors="replace")]
    assert [str(p.relative_to(ROOT)) for p in named] == []


def test_a_table_shown_in_two_docs_is_the_same_table():
    """Benchmark tables copied into a second page (ci.md carries the gate's and compare's, the
    README the verdict rules' and the sequential rule's) never drift."""
    blocks: dict[str, set[str]] = {}
    for path in [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]:
        text = path.read_text(encoding="utf-8")
        for name, body in re.findall(r"<!-- ([\w-]+):start -->\n(.*?)<!-- \1:end -->", text, re.S):
            blocks.setdefault(name, set()).add(body)
    assert {"gate-table", "compare-speed", "sequential-table", "verdict-table"} <= blocks.keys()
    assert {name: len(bodies) for name, bodies in blocks.items() if len(bodies) > 1} == {}


def test_plain_tables_fit_the_terminal(recorded):
    _, _, run_result = recorded
    run_dir = json.loads(run_result.stdout)["run"]
    for columns in ("60", "80", "200"):
        for args in (["report", run_dir], ["compare", f"{run_dir}#prompt=always-header", f"{run_dir}#prompt=other"]):
            result = CliRunner(env={"COLUMNS": columns}).invoke(main, args)
            assert result.exit_code == 0
            # Paths and the selectors echoed back can be longer than a narrow terminal.
            lines = [line for line in result.stdout.splitlines() if run_dir not in line]
            assert max(len(line) for line in lines) <= int(columns), (columns, args)


def test_narrow_tables_drop_optional_columns_first():
    rows = [["header_present", "9/30", "30.0%", "16.7-47.9%", "1.17", "25.7"]]
    headers = ["metric", "k/n", "rate", "95% Wilson", "DEFF", "n_eff"]
    wide = table(rows, headers, width=200)
    narrow = table(rows, headers, optional=("n_eff", "DEFF"), width=50)
    assert "n_eff" in wide and "n_eff" not in narrow and "95% Wilson" in narrow
    assert max(map(len, narrow.splitlines())) <= 50


def test_colour_only_on_a_terminal_without_no_color(monkeypatch):
    class Terminal:
        def isatty(self):
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    assert color_enabled(Terminal()) is True
    monkeypatch.setenv("NO_COLOR", "1")
    assert color_enabled(Terminal()) is False
    assert color_enabled(object()) is False
    a = Side("A", {f"q{i}": [1, 1, 0] if i < 9 else [0, 1, 0] for i in range(10)}, name="v1")
    b = Side("B", {f"q{i}": [1, 1, 0] if i < 1 else [0, 1, 0] for i in range(10)}, name="v2")
    result = finish(compare_sides(a, b, hints=False))
    assert result["words"]["verdict"] == "v2 worse"
    coloured = render_comparison({"results": [result]}, color=True)
    plain = render_comparison({"results": [result]}, color=False)
    assert "\x1b[31mv2 worse" in coloured and "\x1b[" not in plain


def test_every_command_has_help_with_an_example_and_report_explains_its_columns():
    for name, command in main.commands.items():
        assert command.help and "Example" in (command.epilog or ""), name
    text = CliRunner().invoke(main, ["report", "--help"]).output
    assert "DEFF:" in text and "n_eff:" in text and "95% adjusted:" in text


def test_check_reports_every_problem_of_a_file_at_once(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('[[case]]\nid = "a"\nquestion = "Q?"\nexpected = "x"\n'
                   '[[case]]\nid = "b"\nquestion = "q?"\nregex = ["("]\n[[case]]\nquestion = "other"\n')
    result = CliRunner().invoke(main, ["check", str(bad)])
    assert result.exit_code == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 4  # unknown key, bad regex, missing id, duplicate question
    assert any("unknown key 'expected'" in e for e in errors) and any("not a valid regular" in e for e in errors)
    assert any("missing 'id'" in e for e in errors) and any("'a' and 'b' ask the same question" in e for e in errors)


def test_prompt_names_tell_two_files_of_the_same_name_apart(tmp_path):
    for folder in ("one", "two"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "prompt.md").write_text(f"{folder}\n")
    path = write_probeset(tmp_path / "p.toml", [("c", "q?", None)])
    same = CliRunner().invoke(main, ["run", "--retrieval", "none", str(path), "--prompt", str(tmp_path / "one" / "prompt.md"),
                                     "--prompt", str(tmp_path / "two" / "prompt.md"), "--model", "openai:m@http://x/v1"])
    assert same.exit_code == 2 and "name one with --prompt NAME=PATH" in same.stderr
    with LocalServer() as server:
        named = CliRunner().invoke(main, ["run", "--retrieval", "none", str(path), "--prompt", f"one={tmp_path / 'one' / 'prompt.md'}",
                                          "--prompt", f"two={tmp_path / 'two' / 'prompt.md'}", "--model",
                                          f"openai:m@{server.url}/v1", "--runs-dir", str(tmp_path / "runs")])
    assert named.exit_code == 0, named.output
    manifest = json.loads((run_dir_of(named) / "manifest.json").read_text())
    assert [p["name"] for p in manifest["prompts"]] == ["one", "two"]


def test_markdown_export_never_prints_none(recorded):
    _, _, run_result = recorded
    run_dir = json.loads(run_result.stdout)["run"]
    text = CliRunner().invoke(main, ["export", run_dir, "--format", "md"]).stdout
    assert "None" not in text and "| latency |" in text
