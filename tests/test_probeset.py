"""Probe-set loading: every refusal names the file and the cases involved."""

from pathlib import Path

import pytest
from click.testing import CliRunner

from promptprobe.cli import main
from promptprobe.errors import InputError
from promptprobe.probeset import load_probeset, question_key

ROOT = Path(__file__).resolve().parent.parent


def write(tmp_path, text, name="set.toml"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def refuse(tmp_path, text):
    path = write(tmp_path, text)
    with pytest.raises(InputError) as info:
        load_probeset(path)
    message = str(info.value)
    assert message.startswith(f"{path}:")
    return message


def test_example_probe_set_loads():
    probeset = load_probeset(ROOT / "probes" / "refusal-header.toml")
    assert probeset.name == "refusal-header"
    assert len(probeset.cases) == 12
    assert probeset.repeats == 3
    expects = [c.expect for c in probeset.cases]
    assert expects.count("no_answer") == 6 and expects.count("answer") == 6
    assert any(c.contains or c.regex for c in probeset.cases)  # the demo pins answers with assertions
    assert all(c.tags for c in probeset.cases)
    followup = next(c for c in probeset.cases if c.history)
    assert [t["role"] for t in followup.history] == ["user", "assistant"]


def test_defaults_and_fields(tmp_path):
    path = write(tmp_path, '[[case]]\nid = "a"\nquestion = "Q?"\n', "my-set.toml")
    probeset = load_probeset(path)
    assert probeset.name == "my-set"
    assert probeset.repeats == 3
    assert probeset.cases[0].expect is None and probeset.cases[0].tags == ()
    assert probeset.source == path.read_bytes()
    assert len(probeset.sha256) == 64


def test_syntax_error_has_line(tmp_path):
    message = refuse(tmp_path, '[[case]]\nid = "a"\nquestion = "unterminated\n')
    assert "TOML syntax error" in message and "line 3" in message


def test_unknown_case_key_is_named(tmp_path):
    message = refuse(tmp_path, '[[case]]\nid = "a"\nquestion = "Q?"\nexpected = "answer"\n')
    assert "case 'a'" in message and "unknown key 'expected'" in message


def test_unknown_top_key_is_named(tmp_path):
    message = refuse(tmp_path, 'repeat = 3\n[[case]]\nid = "a"\nquestion = "Q?"\n')
    assert "unknown key 'repeat'" in message


def test_missing_id(tmp_path):
    message = refuse(tmp_path, '[[case]]\nid = "a"\nquestion = "Q1"\n[[case]]\nquestion = "Q2"\n')
    assert "case 2: missing 'id'" in message


def test_missing_question(tmp_path):
    message = refuse(tmp_path, '[[case]]\nid = "lonely"\n')
    assert "case 'lonely': missing 'question'" in message


def test_bad_expect(tmp_path):
    message = refuse(tmp_path, '[[case]]\nid = "a"\nquestion = "Q?"\nexpect = "refuse"\n')
    assert "case 'a'" in message and "'expect' must be" in message and "'refuse'" in message


def test_bad_id_characters(tmp_path):
    message = refuse(tmp_path, '[[case]]\nid = "price enterprise"\nquestion = "Q?"\n')
    assert "case 'price enterprise'" in message and "must start with a letter or a digit" in message


def test_duplicate_id(tmp_path):
    message = refuse(
        tmp_path, '[[case]]\nid = "a"\nquestion = "Q1"\n[[case]]\nid = "a"\nquestion = "Q2"\n'
    )
    assert "duplicate case id 'a' (cases 1 and 2)" in message


def test_duplicate_question_exact(tmp_path):
    message = refuse(
        tmp_path,
        '[[case]]\nid = "orig"\nquestion = "How much is it?"\n'
        '[[case]]\nid = "paraphrase"\nquestion = "How much is it?"\n',
    )
    assert "cases 'orig' and 'paraphrase' ask the same question: 'How much is it?'" in message


def test_duplicate_question_after_normalisation(tmp_path):
    # Full-width letters (NFKC), different case, doubled and non-breaking spaces.
    message = refuse(
        tmp_path,
        '[[case]]\nid = "orig"\nquestion = "How much is ＳＳＯ?"\n'
        '[[case]]\nid = "sentinel"\nquestion = "  how  MUCH\\u00a0is sso?\\n"\n',
    )
    assert "cases 'orig' and 'sentinel' ask the same question after normalisation" in message
    assert "how  MUCH" in message


def test_question_key():
    assert question_key("Ｈｏｗ\tmuch\n IS  it") == "how much is it"
    assert question_key("Straße") == question_key("STRASSE")


def test_bad_history(tmp_path):
    message = refuse(
        tmp_path,
        '[[case]]\nid = "h"\nquestion = "Q?"\nhistory = [{ role = "system", content = "x" }]\n',
    )
    assert "case 'h', history turn 1" in message and "role" in message


def test_bad_repeats_and_empty(tmp_path):
    assert "'repeats'" in refuse(tmp_path, 'repeats = 0\n[[case]]\nid = "a"\nquestion = "Q"\n')
    assert "no [[case]]" in refuse(tmp_path, 'name = "x"\n')


def test_check_cli_reports_each_file(tmp_path):
    good = write(tmp_path, 'repeats = 5\n[[case]]\nid = "a"\nquestion = "Q?"\n', "good.toml")
    bad = write(tmp_path, '[[case]]\nid = "a"\nquestion = "Q"\nexpected = "x"\n', "bad.toml")
    missing = tmp_path / "missing.toml"
    result = CliRunner().invoke(main, ["check", str(good), str(bad), str(missing)])
    assert result.exit_code == 2
    assert result.stdout == "ok: good (1 cases, 5 repeats)\n"
    errors = result.stderr.splitlines()
    assert len(errors) == 2
    assert errors[0].startswith(f"error: {bad}: case 'a': unknown key 'expected'")
    assert errors[1] == f"error: {missing}: no such probe set file"
    assert "Traceback" not in result.output


def test_check_cli_ok():
    result = CliRunner().invoke(main, ["check", str(ROOT / "probes" / "refusal-header.toml")])
    assert result.exit_code == 0
    assert result.output == "ok: refusal-header (12 cases, 3 repeats)\n"


def test_a_file_saved_with_a_bom_and_crlf_reads_as_written(tmp_path):
    """Windows editors save UTF-8 with a byte order mark and CRLF: the file means what it says (its
    duplicate questions are still refused), the run keeps its exact bytes, and probe.toml alike."""
    text = 'name = "win"\r\nrepeats = 2\r\n[[case]]\r\nid = "a"\r\nquestion = "Hi?"\r\n'
    path = tmp_path / "win.toml"
    path.write_bytes(b"\xef\xbb\xbf" + text.encode())
    probeset = load_probeset(path)
    assert (probeset.name, probeset.repeats, probeset.cases[0].question) == ("win", 2, "Hi?")
    assert probeset.source == path.read_bytes()
    duplicated = tmp_path / "twice.toml"
    duplicated.write_bytes(b"\xef\xbb\xbf" + (text + '[[case]]\r\nid = "b"\r\nquestion = "HI?"\r\n').encode())
    with pytest.raises(InputError, match="cases 'a' and 'b' ask the same question"):
        load_probeset(duplicated)
    config = tmp_path / "probe.toml"
    config.write_bytes(b"\xef\xbb\xbf" + b'[retrieval]\r\nkind = "none"\r\n[run]\r\nrepeats = 4\r\n')
    result = CliRunner().invoke(main, ["check", "--config", str(config), str(path)])
    assert result.exit_code == 0, result.output
