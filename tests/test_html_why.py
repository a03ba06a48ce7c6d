"""The HTML report (self-contained, escaped, its plot matching the JSON, opened in headless
Chromium when installed) and `probe why` on constructed runs."""

import json
import re
import shutil
import subprocess
from html import escape
from html.parser import HTMLParser
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import write_probeset
from servers import LocalServer, Reply
from wcwidth import wcswidth

from promptprobe.cli import main
from promptprobe.config import load_config
from promptprobe.engine.run import RunOptions, run_probe
from promptprobe.models import parse_model_spec
from promptprobe.probeset import load_probeset
from promptprobe.prompts import load_prompt

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
HOSTILE = [
    "<script>alert('x')</script>",
    "</textarea><b>bold</b>",
    '"><img src=x onerror=alert(1)>',
    "[[NO_ANSWER]]<svg onload=alert(2)>",
]


def record(tmp_path: Path, replies: dict[str, list[str]], cases: int = 4, repeats: int = 1) -> Path:
    """A run whose prompt NAME answers case i with replies[NAME][i % len]."""
    probeset = load_probeset(write_probeset(tmp_path / "p.toml", [(f"c{i}", f"question {i}", None) for i in range(cases)],
                                            repeats=repeats))
    prompts = []
    for name in replies:
        (tmp_path / f"{name}.md").write_text(f"VERSION={name}\n")
        prompts.append(load_prompt(tmp_path / f"{name}.md"))
    counter: dict = {}

    def reply(request):
        name = request.json["messages"][0]["content"].split("=")[1].strip()
        case = int(request.json["messages"][-1]["content"].split()[-1])
        counter[(name, case)] = counter.get((name, case), -1) + 1
        texts = replies[name]
        return Reply(texts[(case * repeats + counter[(name, case)]) % len(texts)])

    with LocalServer(reply) as server:
        return run_probe(probeset, prompts, [parse_model_spec(f"openai:m@{server.url}/v1")], load_config(None),
                         RunOptions(runs_dir=tmp_path / "runs", seed=3)).path


class Elements(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


def test_outputs_are_escaped_and_the_file_is_self_contained(tmp_path):
    run = record(tmp_path, {"v": HOSTILE})
    out = tmp_path / "report.html"
    result = CliRunner().invoke(main, ["report", str(run), "--format", "html", "-o", str(out)])
    assert result.exit_code == 0, result.output
    html = out.read_text()
    parser = Elements()
    parser.feed(html)
    tags = {tag for tag, _ in parser.tags}
    assert not tags & {"script", "img", "textarea", "b", "iframe", "link"}  # no output became markup
    assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in html
    assert "&lt;/textarea&gt;" in html and "&#34;&gt;&lt;img src=x onerror=alert(1)&gt;" in html
    assert "<mark>[[NO_ANSWER]]</mark>&lt;svg onload" in html  # the marker highlighted, the rest escaped
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", html)  # nothing loaded from a network


def test_forest_plot_matches_the_json(tmp_path):
    run = record(tmp_path, {"good": ["[[ANSWER]]\nok"], "bad": ["ok\n[[ANSWER]]", "[[ANSWER]]\nok"]}, repeats=3)
    out = tmp_path / "report.html"
    CliRunner().invoke(main, ["report", str(run), "--format", "html", "-o", str(out)])
    report = json.loads(CliRunner().invoke(main, ["report", str(run), "--json"]).stdout)
    parser = Elements()
    parser.feed(out.read_text())
    marks = [attrs for tag, attrs in parser.tags if tag == "g" and attrs.get("class") == "arm"]
    per_metric = sum(len(arm["metrics"]) for arm in report["arms"])
    assert len(marks) == per_metric  # one mark per arm in each metric's plot
    header = [m for m in marks][: len(report["arms"])]  # header_present comes first
    for mark, arm in zip(header, report["arms"], strict=True):
        metric = arm["metrics"]["header_present"]
        assert float(mark["data-rate"]) == pytest.approx(100 * metric["rate"], abs=0.1)
        assert float(mark["data-wilson-lo"]) == pytest.approx(100 * metric["wilson"][0], abs=0.1)
        assert float(mark["data-wilson-hi"]) == pytest.approx(100 * metric["wilson"][1], abs=0.1)
        assert float(mark["data-adjusted-lo"]) == pytest.approx(100 * metric["wilson_eff"][0], abs=0.1)
        assert float(mark["data-adjusted-hi"]) == pytest.approx(100 * metric["wilson_eff"][1], abs=0.1)


def test_compare_html_says_the_verdict_in_words(tmp_path):
    run = record(tmp_path, {"old": ["[[ANSWER]]\nok"], "new": ["ok"]}, cases=8, repeats=2)
    out = tmp_path / "compare.html"
    result = CliRunner().invoke(main, ["compare", f"{run}#prompt=old", f"{run}#prompt=new", "--format", "html",
                                       "-o", str(out)])
    assert result.exit_code == 0, result.output
    html = out.read_text()
    assert 'data-verdict="A&gt;B"' in html and "new worse on header_present: old 16/16, new 0/16" in html
    data = json.loads(CliRunner().invoke(main, ["compare", f"{run}#prompt=old", f"{run}#prompt=new", "--json"]).stdout)
    # The page is the compare object's words: its verdict box and its sentence, interval included.
    assert f'class="badge worse" data-metric="header_present">{escape(data["words"]["badge"])}<' in html
    assert escape(data["words"]["sentence"]) in html and data["effect"]["interval"][1] < 0
    printed = CliRunner().invoke(main, ["compare", f"{run}#prompt=old", f"{run}#prompt=new", "--format", "html"])
    assert printed.exit_code == 0 and printed.stdout.startswith("<!doctype html>")  # HTML to stdout, for a pipe
    by_suffix = tmp_path / "by-suffix.html"
    assert CliRunner().invoke(main, ["compare", f"{run}#prompt=old", f"{run}#prompt=new", "-o", str(by_suffix)]).exit_code == 0
    assert by_suffix.read_text().startswith("<!doctype html>")  # the suffix picked the format


@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium is not installed (apt-get install chromium)")
def test_demo_report_opens_in_headless_chromium_without_console_errors(demo_run, tmp_path):
    _, run_dir = demo_run
    out = tmp_path / "demo.html"
    assert CliRunner().invoke(main, ["report", str(run_dir), "--format", "html", "-o", str(out)]).exit_code == 0
    result = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr", "--v=0", "--dump-dom", out.as_uri()],
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    console = [line for line in result.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line
               or "Refused to" in line]
    assert console == []
    report = json.loads(CliRunner().invoke(main, ["report", str(run_dir), "--json"]).stdout)
    rendered = result.stdout.count('class="arm"')
    assert rendered == sum(len(arm["metrics"]) for arm in report["arms"])


# -- why ------------------------------------------------------------------------------------

SHARED = "You are welcome to write to our support address."


def test_why_ranks_the_shared_sentence_first(tmp_path):
    # 10 failing outputs (no header), 9 with the sentence; 20 passing, 1 with it.
    # The same filler on both sides: only the header and the sentence tell them apart.
    failing = [f"Item {i} is noted. {SHARED if i < 9 else 'Goodbye.'}" for i in range(10)]
    passing = [f"[[ANSWER]]\nItem {i} is noted. {SHARED if i == 0 else 'Goodbye.'}" for i in range(20)]
    run = record(tmp_path, {"v": failing + passing}, cases=30)
    result = CliRunner().invoke(main, ["why", str(run), "--format", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert (data["failing_samples"], data["passing_samples"]) == (10, 20)
    first = data["phrases"][0]
    assert first["phrase"] in SHARED.lower() and len(first["phrase"].split()) >= 4
    assert first["failing"] == [9, 10] and first["passing"] == [1, 20]
    assert first["p_adjusted"] < 0.05 and first["significant"] is True
    assert len(first["examples"]) == 2
    text = CliRunner().invoke(main, ["why", str(run)]).stdout
    assert "over-represented at adjusted p <= 0.05" in text and first["phrase"] in text


def test_why_finds_nothing_when_failing_and_passing_share_everything(tmp_path):
    texts = ["Same words here.\n[[ANSWER]]", "[[ANSWER]]\nSame words here."] * 10
    run = record(tmp_path, {"v": texts}, cases=20)
    data = json.loads(CliRunner().invoke(main, ["why", str(run), "--json"]).stdout)
    assert data["failing_samples"] == 10 and data["passing_samples"] == 10
    assert not any(row["significant"] for row in data["phrases"])
    assert "no phrase is over-represented" in CliRunner().invoke(main, ["why", str(run)]).stdout


def test_why_handles_chinese(tmp_path):
    failing = ["抱歉，请联系人工客服处理。" for _ in range(6)]
    passing = ["[[ANSWER]]\n密码可以在设置中重置。" for _ in range(6)]
    run = record(tmp_path, {"v": failing + passing}, cases=12)
    data = json.loads(CliRunner().invoke(main, ["why", str(run), "--json"]).stdout)
    assert any("人工客服" in row["phrase"] for row in data["phrases"][:5])
    # On a terminal a Chinese character takes two columns: the table's columns line up by that.
    text = CliRunner().invoke(main, ["why", str(run)], env={"COLUMNS": "200"}).stdout
    lines = text.splitlines()
    rule = next(i for i, line in enumerate(lines) if set(line) <= {"-", " "} and "--" in line)
    starts = [i for i, ch in enumerate(lines[rule]) if ch == "-" and (i == 0 or lines[rule][i - 1] == " ")]
    rows = [line for line in lines[rule + 1 :] if "人工客服" in line]
    assert rows and len(starts) >= 2
    for line in rows:
        # the character at each column start (counted in display columns) begins a cell
        columns, at = [], 0
        for ch in line:
            columns.append(at)
            at += wcswidth(ch)
        assert all(start in columns and line[columns.index(start) - 1] == " " for start in starts[1:]), line
