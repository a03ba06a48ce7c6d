"""Names users give (case ids, prompt and model names) that collide: the ones that would name one
file on a case-insensitive file system (macOS, Windows) are refused before anything is written."""

import pytest
from click.testing import CliRunner
from conftest import ROOT, write_probeset
from servers import LocalServer

import promptprobe
from promptprobe.cli import main
from promptprobe.probeset import load_probeset

PROMPT = ROOT / "prompts" / "always-header.md"


def test_case_ids_that_differ_only_in_case_are_refused(tmp_path):
    probeset = write_probeset(tmp_path / "p.toml", [("Q1", "first question", None), ("q1", "second question", None)])
    with pytest.raises(promptprobe.InputError) as raised:
        load_probeset(probeset)
    assert "case ids 'Q1' and 'q1' differ only in case" in str(raised.value)
    checked = CliRunner().invoke(main, ["check", str(probeset)])
    assert checked.exit_code == 2 and "differ only in case" in checked.output


def test_prompt_names_that_differ_only_in_case_are_refused(tmp_path):
    probeset = write_probeset(tmp_path / "p.toml", [("c0", "q", None)])
    with pytest.raises(promptprobe.InputError) as raised:
        promptprobe.run(probeset, prompts=[f"Header={PROMPT}", f"header={PROMPT}"],
                        models=["openai:m@http://127.0.0.1:9/v1"], retrieval="none", runs_dir=tmp_path / "runs")
    assert "prompt versions 'Header' and 'header' differ only in case" in str(raised.value)
    assert not (tmp_path / "runs").exists()


def test_a_selector_naming_one_key_twice_is_refused_not_read_as_the_last(tmp_path):
    """`RUN#prompt=v1,prompt=v2` once selected v2 silently (and the header still showed both)."""
    probeset = write_probeset(tmp_path / "p.toml", [("c0", "q", None)])
    (tmp_path / "v1.md").write_text("v1\n")
    (tmp_path / "v2.md").write_text("v2\n")
    with LocalServer() as server:
        result = promptprobe.run(probeset, prompts=[tmp_path / "v1.md", tmp_path / "v2.md"],
                                 models=[f"openai:m@{server.url}/v1"], retrieval="none", runs_dir=tmp_path / "runs")
    with pytest.raises(promptprobe.InputError, match="prompt= is given twice"):
        promptprobe.compare(f"{result.path}#prompt=v1,prompt=v2", f"{result.path}#prompt=v1")
    why = CliRunner().invoke(main, ["why", f"{result.path}#prompt=v2,prompt=v1"])
    assert why.exit_code == 2 and "prompt= is given twice" in why.output


def test_an_arm_given_to_a_command_that_takes_a_run_is_said_to_be_one(tmp_path):
    """`probe report 'latest#prompt=v1'` said no run matched 'latest#prompt=v1' and listed the runs."""
    probeset = write_probeset(tmp_path / "p.toml", [("c0", "q", None)])
    with LocalServer() as server:
        result = promptprobe.run(probeset, prompts=[PROMPT], models=[f"openai:m@{server.url}/v1"],
                                 retrieval="none", runs_dir=tmp_path / "runs")
    for command in ("report", "show", "export"):
        printed = CliRunner().invoke(main, [command, "latest#prompt=always-header", "--runs-dir",
                                            str(tmp_path / "runs")])
        assert printed.exit_code == 2
        assert printed.stderr.strip() == (
            "error: latest#prompt=always-header: names one arm (#prompt=always-header); this command "
            f"takes a whole run: {result.path}"
        )
