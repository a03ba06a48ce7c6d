"""Header classification against hand-written tricky outputs; every field is asserted."""

import json

import pytest
from click.testing import CliRunner

from promptprobe.checks.header import classify
from promptprobe.checks.settings import HeaderConfig
from promptprobe.cli import main
from promptprobe.errors import InputError

NA = "[[NO_ANSWER]]"
ANS = "[[ANSWER]]"


def expect(header, where=None, line=None, declared="answer", marker=None, extra=0, near=None):
    return {
        "header": header,
        "where": where,
        "line": line,
        "declared": declared,
        "marker": marker,
        "extra_markers": extra,
        "near_miss": near,
    }


CASES = [
    # present
    ("plain no-answer", "[[NO_ANSWER]]\nSorry, the docs do not say.",
     expect("present", line=1, declared="no_answer", marker=NA)),
    ("plain answer", "[[ANSWER]]\nThe Team plan is $20.", expect("present", line=1, declared="answer", marker=ANS)),
    ("crlf present", "[[ANSWER]]\r\nYes.\r\n", expect("present", line=1, declared="answer", marker=ANS)),
    ("marker only", "[[NO_ANSWER]]", expect("present", line=1, declared="no_answer", marker=NA)),
    ("first marker wins, extras counted", "[[ANSWER]]\nSee [[NO_ANSWER]] and [[ANSWER]].",
     expect("present", line=1, declared="answer", marker=ANS, extra=2)),
    ("chinese after header", "[[NO_ANSWER]]\n抱歉，文档中没有提到企业版价格。",
     expect("present", line=1, declared="no_answer", marker=NA)),
    # misplaced: fenced
    ("backtick fence", "```\n[[NO_ANSWER]]\n```\nNo info.",
     expect("misplaced", "fenced", 2, marker=NA)),
    ("tilde fence", "~~~text\n[[ANSWER]]\n~~~", expect("misplaced", "fenced", 2, marker=ANS)),
    ("unclosed fence", "Here:\n```\nfoo\n[[NO_ANSWER]]", expect("misplaced", "fenced", 4, marker=NA)),
    ("fence wins over trailing", "Sorry.\n```\n[[NO_ANSWER]]\n```\n",
     expect("misplaced", "fenced", 3, marker=NA)),
    ("after a closed fence is not fenced", "```\ncode\n```\n[[NO_ANSWER]] no docs",
     expect("misplaced", "late_line", 4, marker=NA)),
    # misplaced: decorated
    ("bold", "**[[NO_ANSWER]]**\nNo docs.", expect("misplaced", "decorated", 1, marker=NA)),
    ("inline code", "`[[ANSWER]]` Yes.", expect("misplaced", "decorated", 1, marker=ANS)),
    ("triple-backtick code span is not a fence", "```[[NO_ANSWER]]``` No docs.\nMore.",
     expect("misplaced", "decorated", 1, marker=NA)),
    ("fence with an info string", "```text\n[[NO_ANSWER]]\n```", expect("misplaced", "fenced", 2, marker=NA)),
    ("quote block", "> [[NO_ANSWER]]\n> Not covered.", expect("misplaced", "decorated", 1, marker=NA, extra=0)),
    ("curly quotes after blank lines", "\n\n“[[NO_ANSWER]]” not covered",
     expect("misplaced", "decorated", 3, marker=NA)),
    # misplaced: leading whitespace / invisible characters
    ("leading space", " [[NO_ANSWER]]\nNo.", expect("misplaced", "leading_whitespace", 1, marker=NA)),
    ("bom", "\ufeff[[NO_ANSWER]]\nNo.", expect("misplaced", "leading_whitespace", 1, marker=NA)),
    ("zero-width space", "\u200b[[ANSWER]]\nYes.", expect("misplaced", "leading_whitespace", 1, marker=ANS)),
    ("blank lines first, crlf", "\r\n\r\n[[NO_ANSWER]]\r\nNo.",
     expect("misplaced", "leading_whitespace", 3, marker=NA)),
    # misplaced: trailing
    ("end of text", "I could not find that in the docs.\n[[NO_ANSWER]]",
     expect("misplaced", "trailing", 2, marker=NA)),
    ("end of line with crlf tail", "Sorry, not documented. [[NO_ANSWER]]\r\n",
     expect("misplaced", "trailing", 1, marker=NA)),
    ("after polite pointer", "Please contact support@acme.example.\n\n[[NO_ANSWER]]  \n",
     expect("misplaced", "trailing", 3, marker=NA)),
    # misplaced: late_line
    ("second line", "Thanks for asking!\n[[NO_ANSWER]]\nThe docs do not cover this.",
     expect("misplaced", "late_line", 2, marker=NA)),
    ("u2028 is not a line break", "Hi\u2028[[NO_ANSWER]] more",
     expect("misplaced", "inline", 1, marker=NA)),
    ("late line after emoji", "👋 Hello\n[[ANSWER]]\nYes 🎉", expect("misplaced", "late_line", 2, marker=ANS)),
    # misplaced: inline
    ("mid line", "The answer is [[NO_ANSWER]] because nothing matches.",
     expect("misplaced", "inline", 1, marker=NA)),
    ("chinese inline", "抱歉，[[NO_ANSWER]]，文档没有说明。", expect("misplaced", "inline", 1, marker=NA)),
    ("decorated only counts on first line", "Intro\n**[[NO_ANSWER]]** x",
     expect("misplaced", "inline", 2, marker=NA)),
    # absent with near misses
    # no text at all is its own state, not absent
    ("empty", "", expect("empty")),
    ("no header at all", "The Team plan costs $20 per user.", expect("absent")),
    ("space instead of underscore", "[[NO ANSWER]]\nSorry.", expect("absent", near="[[NO ANSWER]]")),
    ("single brackets", "[NO_ANSWER] Sorry.", expect("absent", near="[NO_ANSWER]")),
    ("lower case", "[[no_answer]]\nsorry", expect("absent", near="[[no_answer]]")),
    ("full-width brackets", "［［NO_ANSWER］］\n抱歉。", expect("absent", near="［［NO_ANSWER］］")),
    ("full-width letters", "[[ＮＯ＿ＡＮＳＷＥＲ]]", expect("absent", near="[[ＮＯ＿ＡＮＳＷＥＲ]]")),
    ("bare token", "NO_ANSWER: not covered", expect("absent", near="NO_ANSWER")),
    ("split by zero-width joiner", "[[NO_\u200dANSWER]]", expect("absent")),
    ("prose is not a near miss", "There is no answer in the docs.", expect("absent")),
]


@pytest.mark.parametrize("text,expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_classification(text, expected):
    assert classify(text) == expected


def test_allow_leading_whitespace_makes_leading_spaces_present():
    config = HeaderConfig(allow_leading_whitespace=True)
    assert classify("\n  [[NO_ANSWER]]\nNo.", config) == expect("present", line=2, declared="no_answer", marker=NA)
    # A BOM is not whitespace: still misplaced even when whitespace is allowed.
    assert classify("\ufeff[[NO_ANSWER]]", config)["where"] == "leading_whitespace"


def test_custom_markers():
    config = HeaderConfig(markers=("<ok>", "<refuse>", "<escalate>"), no_answer="<refuse>")
    # `declared` is what production would log: only the no_answer marker means "no_answer".
    assert classify("<escalate>\nhuman please", config) == expect(
        "present", line=1, declared="answer", marker="<escalate>"
    )
    assert classify("<refuse>\nsorry", config) == expect("present", line=1, declared="no_answer", marker="<refuse>")
    assert classify("fine\n<refuse>", config) == expect("misplaced", "trailing", 2, marker="<refuse>")
    # The default markers mean nothing under a custom config.
    assert classify("[[NO_ANSWER]]", config) == expect("absent")


def test_overlapping_markers_longest_at_same_position_wins():
    config = HeaderConfig(markers=("NO", "NO_ANSWER"), no_answer="NO_ANSWER")
    assert classify("NO_ANSWER here", config)["marker"] == "NO_ANSWER"


def test_megabyte_output():
    text = "x" * 1_000_000 + "\n[[NO_ANSWER]]"
    result = classify(text)
    assert result == expect("misplaced", "trailing", 2, marker=NA)


def test_no_text_is_empty_not_absent():
    assert classify(None)["header"] == "empty"
    assert classify("")["header"] == "empty"
    assert classify(" ")["header"] == "absent"  # whitespace is text: the marker is missing


def test_no_answer_must_be_a_marker():
    with pytest.raises(InputError, match="not one of the markers"):
        HeaderConfig(markers=("A", "B"), no_answer="C")


def test_classify_cli_files(tmp_path):
    good = tmp_path / "out.txt"
    good.write_bytes("\ufeff[[NO_ANSWER]]\r\n抱歉".encode())
    near = tmp_path / "near.txt"
    near.write_bytes(b"[NO_ANSWER] nope")
    result = CliRunner().invoke(main, ["classify", str(good), str(near)])
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.output.splitlines()]
    assert lines == [
        {"path": str(good), **expect("misplaced", "leading_whitespace", 1, marker=NA)},
        {"path": str(near), **expect("absent", near="[NO_ANSWER]")},
    ]


def test_classify_cli_invalid_utf8_is_an_error_not_a_crash(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"[[ANSWER]]\n\xff\xfe")
    good = tmp_path / "good.txt"
    good.write_bytes(b"[[ANSWER]]\nok")
    result = CliRunner().invoke(main, ["classify", str(bad), str(good)])
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    assert f"{bad}: not valid UTF-8 (byte 11)" in result.stderr
    assert json.loads(result.stdout)["header"] == "present"


def test_classify_cli_marker_override(tmp_path):
    path = tmp_path / "out.txt"
    path.write_text("OK: yes", encoding="utf-8")
    result = CliRunner().invoke(
        main, ["classify", "--markers", "OK:,NOPE:", "--no-answer", "NOPE:", str(path)]
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == {
        "path": str(path), **expect("present", line=1, declared="answer", marker="OK:")
    }


def test_classify_cli_bad_override_is_exit_2(tmp_path):
    path = tmp_path / "out.txt"
    path.write_text("x", encoding="utf-8")
    result = CliRunner().invoke(main, ["classify", "--markers", "A,B", "--no-answer", "C", str(path)])
    assert result.exit_code == 2
    assert "not one of the markers" in result.stderr
