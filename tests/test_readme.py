"""The README stays true: its snippets load, its commands exist, its demo excerpt is real."""

import re
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import ROOT

from promptprobe.cli import main
from promptprobe.config import parse_config
from promptprobe.probeset import parse_probeset
from promptprobe.tomlfile import parse_toml

README = (ROOT / "README.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"```(\w*)\n(.*?)```", README, re.DOTALL)
TOML = [body for lang, body in BLOCKS if lang == "toml"]
COMMANDS = [line for lang, body in BLOCKS if lang == "console" for line in body.splitlines()
            if line.strip()]


def test_quick_start_has_the_two_commands_and_make_has_them():
    quick_start = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    assert "make demo" in quick_start and "make test" in quick_start
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^demo:", makefile, re.M) and re.search(r"^test:", makefile, re.M)
    assert "make test" in (ROOT / ".ci" / "run").read_text()


@pytest.mark.parametrize("snippet", TOML, ids=[f"toml{i}" for i in range(len(TOML))])
def test_every_toml_snippet_loads(snippet):
    path = Path("README.md")
    if "[[case]]" in snippet:
        assert parse_probeset(snippet.encode(), path).cases
    else:
        config = parse_config(parse_toml(snippet.encode(), path), path)
        assert config.run.models or config.checks.user


@pytest.mark.parametrize("line", COMMANDS, ids=[f"cmd{i}" for i in range(len(COMMANDS))])
def test_every_command_exists_and_parses(line):
    words = shlex.split(re.split(r"\s#\s", line, maxsplit=1)[0].rstrip(" &"))
    if words[0] == "make":
        assert words[1] in ("demo", "test")
        return
    assert words[0] == "probe"
    command = main.get_command(None, words[1])
    assert command is not None, line
    help_result = CliRunner().invoke(main, [words[1], "--help"])
    assert help_result.exit_code == 0 and "Example" in help_result.output
    # The flags and arguments the README shows parse (click raises on an unknown flag).
    with command.make_context(words[1], words[2:]) as context:
        assert context.args == [], line


def test_every_command_has_help_with_an_example():
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0 and "Example" in result.output
    for name, command in main.commands.items():
        assert command.help, name
        assert "Example" in (command.epilog or ""), name


def test_every_help_example_is_one_whole_line_that_parses():
    # At 80 columns click re-wrapped the examples and broke paths at their hyphens
    # ("prompts/always-" / "header.md"): each example must be a line a reader can paste.
    for name, command in [(None, main), *main.commands.items()]:
        output = CliRunner().invoke(main, [*([name] if name else []), "--help"], terminal_width=80).output
        examples = command.epilog.split(": ", 1)[1].split("   |   ")
        lines = [line.strip() for line in output.splitlines()]
        for example in examples:
            assert example.strip() in lines, (name, example)
            words = shlex.split(example)
            assert words[0] == "probe"
            sub = main.get_command(None, words[1])
            with sub.make_context(words[1], words[2:], resilient_parsing=True) as context:
                assert context.args == [], example


def test_demo_excerpt_is_what_the_demo_prints(demo_run):
    excerpt = README.split("<!-- demo-output:start -->\n```text\n", 1)[1].split("```\n<!-- demo-output:end -->")[0]
    result, _ = demo_run
    printed = set(result.stdout.splitlines())
    missing = [line for line in excerpt.splitlines() if line and line not in printed]
    assert missing == []


def test_the_readme_plan_examples_give_an_answer():
    plans = [line for line in COMMANDS if line.startswith("probe plan")]
    assert plans
    for line in plans:
        result = CliRunner().invoke(main, shlex.split(line)[1:])
        assert result.exit_code == 0, (line, result.output)
        assert "cannot get there" not in result.output and "more than 200" not in result.output, line
