"""Interim means interim (issue 35): while a fixed-size run is running, every verdict of it is
marked interim (samples counted of planned, a fixed design only valid at its end) in compare's
table (before the table), its JSON (`"interim": true`), the HTML report and the viewer, and is never
coloured as final; a sequential run whose rule stopped says its verdict is final."""

import json
import shutil

import pytest
from click.testing import CliRunner
from viewer_support import ab_replies, record, still_running

from promptprobe.cli import main
from promptprobe.comparison import compare_runs
from promptprobe.views.compare import GREEN, RED, render_comparison

pytest.importorskip("starlette")
from starlette.testclient import TestClient  # noqa: E402

from promptprobe.viewer.app import create_app  # noqa: E402


@pytest.fixture(scope="module")
def ab(tmp_path_factory):
    base = tmp_path_factory.mktemp("interim")
    cases = [(f"c{i}", f"question number {i}?") for i in range(6)]
    return record(base / "ab", ab_replies(6, 2), cases, repeats=2)


@pytest.fixture
def running(ab, tmp_path):
    folder = tmp_path / "runs"
    copy = folder / ab.name
    shutil.copytree(ab, copy)
    with still_running(copy, planned=240) as run:
        yield run


def test_compare_says_interim_before_the_table_and_never_colours_it(running):
    a, b = f"{running}#prompt=old", f"{running}#prompt=new"
    table = CliRunner().invoke(main, ["compare", a, b, "--all"]).stdout
    lines = table.splitlines()
    assert lines[0].startswith(f"INTERIM: run {running.name} is still running (24 of 240 samples counted)")
    assert "a fixed-size design is only valid at its end" in " ".join(" ".join(lines[:3]).split())
    assert lines.index(next(line for line in lines if line.startswith("A = "))) > 0  # the table comes after
    comparison = compare_runs(a, b, all_metrics=True)
    assert comparison["interim"] is True and all(r["interim"] for r in comparison["results"])
    assert all(r["words"]["tone"] == "interim" and r["words"]["verdict"].endswith("(interim)")
               for r in comparison["results"])
    decided = [r for r in comparison["results"] if r["verdict"] != "indistinguishable"]
    assert decided  # the verdict itself stands as computed; only its standing is interim
    coloured = render_comparison(comparison, color=True)
    assert GREEN not in coloured and RED not in coloured
    single = json.loads(CliRunner().invoke(main, ["compare", a, b, "--json"]).stdout)
    assert single["interim"] is True and "24 of 240 samples" in single["interim_notes"][0]


def test_the_same_run_finished_is_final(ab):
    comparison = compare_runs(f"{ab}#prompt=old", f"{ab}#prompt=new", all_metrics=True)
    assert comparison["interim"] is False and comparison["interim_notes"] == []
    assert not any(r["interim"] for r in comparison["results"])
    assert {r["words"]["tone"] for r in comparison["results"]} <= {"better", "worse", "same"}
    assert GREEN in render_comparison(comparison, color=True)  # a final verdict keeps its colour


def test_a_stopped_sequential_run_says_its_verdict_is_final(demo_run):
    _, fixed = demo_run
    sequential = next(p for p in fixed.parent.iterdir()
                      if (p / "manifest.json").is_file() and json.loads((p / "manifest.json").read_text()).get("sequential"))
    arms = json.loads((sequential / "manifest.json").read_text())["arms"]
    a, b = (f"{sequential}#prompt={arm['prompt']}" for arm in arms)
    comparison = compare_runs(a, b)
    assert comparison["interim"] is False
    (final,) = comparison["final_notes"]
    assert "sequential rule stopped at round" in final and "stands" in final
    assert CliRunner().invoke(main, ["compare", a, b]).stdout.startswith("FINAL: run ")


def test_the_viewer_and_the_report_mark_every_verdict_interim(running, tmp_path):
    with TestClient(create_app(running.parent, warm=False), base_url="http://127.0.0.1") as client:
        view = client.get(f"/runs/{running.name}.json").json()
        assert view["verdicts"]["interim"] is True and all(r["interim"] for r in view["verdicts"]["results"])
        html = client.get(f"/runs/{running.name}").text
        assert 'class="badge interim"' in html and 'class="badge better"' not in html
        assert html.index("Interim: run ") < html.index('class="badges"')
        line = client.get("/.json").json()["runs"][0]
        assert line["verdict"]["interim"] is True and line["verdict"]["tone"] == "interim"
    report = tmp_path / "report.html"
    assert CliRunner().invoke(main, ["report", str(running), "-o", str(report)]).exit_code == 0
    text = report.read_text()
    assert 'class="badge interim"' in text and "Interim: run " in text and 'class="badge better"' not in text
    listed = json.loads(CliRunner().invoke(main, ["runs", "--runs-dir", str(running.parent), "--json"]).stdout)
    assert listed["runs"][0]["verdict"]["short"].endswith("(interim)")
