"""Prompt versions: exact bytes, name, sha256 and rendering that changes nothing else."""

import hashlib
from pathlib import Path

import pytest

from promptprobe.errors import InputError
from promptprobe.prompts import load_prompt, render_prompt

ROOT = Path(__file__).resolve().parent.parent
PASSAGES = [{"id": "a", "text": "Alpha."}, {"id": "b", "text": "Beta 测试."}]


def test_load_keeps_bytes_and_hash(tmp_path):
    raw = "\ufeffSystem rule\r\n  trailing  \r\n{{sources}}\r\n".encode()
    path = tmp_path / "v2.md"
    path.write_bytes(raw)
    prompt = load_prompt(path)
    assert prompt.name == "v2"
    assert prompt.source == raw
    assert prompt.sha256 == hashlib.sha256(raw).hexdigest()


def test_render_with_placeholder_keeps_other_bytes(tmp_path):
    path = tmp_path / "p.md"
    path.write_bytes(b"Rule one.\r\n\r\nSources:\r\n{{sources}}\r\nEnd  \n")
    rendered = render_prompt(load_prompt(path), PASSAGES)
    assert rendered == "Rule one.\r\n\r\nSources:\r\n[1] Alpha.\n\n[2] Beta 测试.\r\nEnd  \n"


def test_render_without_placeholder_appends_after_blank_line():
    assert render_prompt("Be brief.", PASSAGES) == "Be brief.\n\n[1] Alpha.\n\n[2] Beta 测试."
    assert render_prompt("Be brief.\n", PASSAGES) == "Be brief.\n\n[1] Alpha.\n\n[2] Beta 测试."
    assert render_prompt("Be brief.", []) == "Be brief."


def test_example_prompts_have_placeholder():
    for name in ("exception-only", "always-header"):
        prompt = load_prompt(ROOT / "prompts" / f"{name}.md")
        assert prompt.name == name
        assert "{{sources}}" in prompt.text and "[[NO_ANSWER]]" in prompt.text


def test_missing_and_invalid_prompt(tmp_path):
    with pytest.raises(InputError, match="no such prompt file"):
        load_prompt(tmp_path / "nope.md")
    bad = tmp_path / "bad.md"
    bad.write_bytes(b"\xff")
    with pytest.raises(InputError, match="not valid UTF-8"):
        load_prompt(bad)
