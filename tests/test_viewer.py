"""`probe view` without a browser (Starlette's TestClient): every page and its JSON, paths that
stay inside the runs directory, hostile outputs escaped, GET only, damaged and growing runs, the
downloads, and one view model: the terminal, the JSON, the static HTML and the viewer show the
same numbers."""

import hashlib
import json
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import ROOT, write_probeset
from servers import LocalServer, Reply, openai_body
from viewer_support import GOOD, HOSTILE, LATE, SORRY, ab_replies, record, tree_digest

from promptprobe.cli import main
from promptprobe.config import load_config
from promptprobe.engine.run import RunOptions, run_probe
from promptprobe.models import parse_model_spec
from promptprobe.pack import read_raw
from promptprobe.probeset import load_probeset
from promptprobe.prompts import load_prompt

pytest.importorskip("starlette")
from starlette.testclient import TestClient  # noqa: E402

from promptprobe.viewer.app import create_app  # noqa: E402


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A runs directory: a two-arm run (ab) and a run of hostile outputs with a hostile question."""
    base = tmp_path_factory.mktemp("viewer")
    cases = [(f"c{i}", f"question number {i}?") for i in range(6)]
    ab = record(base / "ab", ab_replies(6, 2), cases, repeats=2)
    hostile = record(base / "hostile", {"v": HOSTILE}, [("h0", "<script>alert('q')</script> question?"),
                                                       ("h1", "plain question?")], repeats=2)
    folder = base / "runs"
    folder.mkdir()
    for run in (ab, hostile):
        shutil.copytree(run, folder / run.name)
    return folder, (folder / ab.name).name, (folder / hostile.name).name


@pytest.fixture
def client(runs):
    folder, _, _ = runs
    with TestClient(create_app(folder, warm=False), base_url="http://127.0.0.1") as client:
        yield client


class Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


def tags_of(html: str) -> list[tuple[str, dict]]:
    parser = Tags()
    parser.feed(html)
    return parser.tags


def pages_of(ab: str, hostile: str) -> list[str]:
    return [
        "/",
        f"/runs/{ab}",
        f"/runs/{ab}/cases/c0",
        f"/runs/{ab}/cases/c2?arm=2",
        f"/compare?a={ab}:1&b={ab}:2",
        f"/runs/{ab}/why?arm=2",
        f"/runs/{hostile}",
        f"/runs/{hostile}/cases/h0",
        f"/runs/{hostile}/cases/h0?arm=1",
        f"/runs/{hostile}/cases/h1?arm=1",
        f"/runs/{hostile}/why?arm=1&metric=header_absent",
    ]


def json_of(url: str) -> str:
    path, _, query = url.partition("?")
    return (path.rstrip("/") + ".json") + (f"?{query}" if query else "")


def test_every_page_and_its_json(client, runs):
    _, ab, hostile = runs
    for url in pages_of(ab, hostile):
        page = client.get(url)
        assert page.status_code == 200, (url, page.text[:300])
        assert page.headers["content-type"].startswith("text/html")
        data = client.get(json_of(url))
        assert data.status_code == 200 and data.headers["content-type"] == "application/json", url
        assert isinstance(data.json(), dict)
    listing = client.get("/.json").json()
    # newest first: the hostile run was recorded after ab (ids alone tie within a second)
    assert [r["id"] for r in listing["runs"]] == [hostile, ab]
    assert listing["runs"][0]["created"] >= listing["runs"][1]["created"]
    line = next(r for r in listing["runs"] if r["id"] == ab)
    assert line["samples"] == 24 and line["errors"] == 0 and [a["name"] for a in line["arms"]] == ["old", "new"]
    assert line["verdict"]["metric"] == "header_present"


def test_the_compare_page_puts_discordant_cases_first(client, runs):
    _, ab, _ = runs
    view = client.get(f"/compare.json?a={ab}:1&b={ab}:2").json()["comparison"]
    order = [(c["case_id"], c["better"]) for c in view["cases"]]
    # A (old) fails and B (new) passes on c2, c3, c4; the reverse on c0, c1; c5 ties.
    assert order == [("c2", "b"), ("c3", "b"), ("c4", "b"), ("c0", "a"), ("c1", "a"), ("c5", None)]
    assert view["discordant"] == {"b_better": 3, "a_better": 2}
    first = view["cases"][0]
    assert first["a"]["groups"][0]["count"] == 2 and first["a"]["groups"][0]["text"] == LATE
    assert first["b"]["groups"][0]["text"] == GOOD
    html = client.get(f"/compare?a={ab}:1&b={ab}:2").text
    assert [m.group(1) for m in re.finditer(r'<section class="case" data-case="(c\d)"', html)] == [c for c, _ in order]


def test_a_cell_groups_identical_outputs_with_their_counts(client, runs):
    _, ab, _ = runs
    view = client.get(f"/runs/{ab}/cases/c0.json?arm=2").json()
    (side,) = view["sides"]
    assert side["arm"]["name"] == "new"
    assert side["outputs"]["samples"] == 2 and side["outputs"]["total_groups"] == 1
    group = side["outputs"]["groups"][0]
    assert group["count"] == 2 and group["header"] == "absent" and group["text"] == SORRY
    assert group["sha256"] == hashlib.sha256(SORRY.encode()).hexdigest()
    assert side["metrics"]["header_present"] == {"k": 0, "n": 2, "errors": 0}


def test_hostile_outputs_and_questions_are_escaped_everywhere(client, runs):
    _, ab, hostile = runs
    for url in pages_of(ab, hostile):
        html = client.get(url).text
        tags = tags_of(html)
        scripts = [attrs for tag, attrs in tags if tag == "script"]
        assert scripts == [{"src": "/static/viewer.js", "defer": None}], url  # ours, and only ours
        assert not {tag for tag, _ in tags} & {"img", "iframe", "object", "embed"}, url
        assert not any(k.startswith("on") for _, attrs in tags for k in attrs), url
        assert not re.search(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\u202e]", html), url  # no raw control character
    case = client.get(f"/runs/{hostile}/cases/h0?arm=1").text
    assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in case
    assert "&lt;script&gt;alert(&#39;q&#39;)&lt;/script&gt; question?" in case  # the question too
    shown = client.get(f"/runs/{hostile}/cases/h1.json?arm=1").json()["sides"][0]["outputs"]["groups"]
    pieces = [piece for group in shown for piece in group["segments"]]
    assert ["U+001B", "inv"] in pieces and ["U+0007", "inv"] in pieces and ["U+0000", "inv"] in pieces
    headers = client.get(f"/runs/{hostile}").headers
    assert "script-src 'self'" in headers["content-security-policy"] and headers["x-content-type-options"] == "nosniff"


def test_paths_outside_the_runs_directory_are_refused(client, runs, tmp_path):
    folder, ab, _ = runs
    outside = tmp_path / "outside"
    shutil.copytree(folder / ab, outside)
    (outside / "raw" / "secret.txt").write_text("top secret")
    link = folder / "linked-out"
    link.symlink_to(outside, target_is_directory=True)
    try:
        for url in [
            "/runs/%2e%2e", "/runs/..%2F..%2Fetc", "/runs/linked-out", "/runs/linked-out.json",
            f"/runs/{ab}/raw/..%2F..%2Fmanifest.json", f"/runs/{ab}/raw/%2e%2e", f"/runs/{ab}/cases/..%2F..",
            f"/runs/{ab}/cases/nope/incident.md", "/runs/nope", f"/runs/{ab}/raw/c0.r1.a1.body",
        ]:  # fmt: skip
            answer = client.get(url)
            assert answer.status_code == 404, (url, answer.status_code)
            assert "top secret" not in answer.text
        assert "linked-out" not in client.get("/").text
    finally:
        link.unlink()


def test_a_tampered_raw_path_is_not_followed(runs, tmp_path):
    folder, ab, _ = runs
    copy = tmp_path / "runs"
    shutil.copytree(folder / ab, copy / ab)
    (tmp_path / "secret.txt").write_text("top secret")
    samples = copy / ab / "samples.jsonl"
    lines = [json.loads(line) for line in samples.read_text().splitlines()]
    lines[0]["raw"] = {"path": "../../secret.txt"}  # a record of a run written before packs
    samples.write_text("".join(json.dumps(line) + "\n" for line in lines))
    with TestClient(create_app(copy, warm=False), base_url="http://127.0.0.1") as client:
        sample, case = lines[0]["sample_id"], lines[0]["case_id"]
        arm = 1 if lines[0]["prompt"] == "old" else 2
        assert client.get(f"/runs/{ab}/raw/{sample}?arm={arm}&case={case}").status_code == 404
        page = client.get(f"/runs/{ab}/cases/{case}?arm={arm}").text
        assert "top secret" not in page and "missing, damaged or not the sample" in page


def test_only_get_is_answered_and_nothing_is_written(client, runs):
    folder, ab, hostile = runs
    before = tree_digest(folder)
    for url in pages_of(ab, hostile):
        client.get(url)
        client.get(json_of(url))
    for method in ("post", "put", "delete", "patch"):
        assert getattr(client, method)(f"/runs/{ab}").status_code == 405
        assert getattr(client, method)("/").status_code == 405
    assert tree_digest(folder) == before


def test_a_host_header_other_than_loopback_is_refused(runs):
    folder, _, _ = runs
    app = create_app(folder, warm=False)
    for base in ("http://attacker.example", "http://127.0.0.1.attacker.example:8000"):
        with TestClient(app, base_url=base) as client:
            assert client.get("/").status_code == 400  # a DNS name rebound to 127.0.0.1 reads nothing
    for base in ("http://127.0.0.1:8000", "http://localhost:8000", "http://[::1]:8000"):
        with TestClient(app, base_url=base) as client:
            assert client.get("/").status_code == 200, base


def test_the_same_arm_of_two_runs_is_told_apart_by_run_and_named_by_arm(runs, tmp_path):
    # The runs tell the two sides apart, so each side's name is its run; the line under the
    # choosers then says which arm each is, not the run twice.
    folder, ab, _ = runs
    both = tmp_path / "runs"
    both.mkdir()
    again = ab[:-1] + ("0" if ab[-1] != "0" else "1")
    shutil.copytree(folder / ab, both / ab)
    shutil.copytree(folder / ab, both / again)
    with TestClient(create_app(both, warm=False), base_url="http://127.0.0.1") as client:
        view = client.get(f"/compare.json?a={ab}:2&b={again}:2").json()["comparison"]
        html = client.get(f"/compare?a={ab}:2&b={again}:2").text
    assert (view["a"]["name"], view["b"]["name"]) == (ab, again)
    line = re.search(r'<p class="meta">(.*?)</p>', html).group(1)
    assert f"({ab})" not in line and f"arm 2: new x {view['a']['model']}" in line


def test_downloads_are_the_exact_bytes_and_the_export_file(client, runs, tmp_path):
    folder, ab, hostile = runs
    samples = [json.loads(line) for line in (folder / hostile / "samples.jsonl").read_text().splitlines()]
    for sample in samples:
        answer = client.get(f"/runs/{hostile}/raw/{sample['sample_id']}?arm=1&case={sample['case_id']}")
        assert answer.status_code == 200
        assert answer.content == read_raw(folder / hostile, sample)
        assert answer.headers["x-raw-sha256"] == sample["raw"]["sha256"]
        assert answer.headers["content-disposition"] == f'attachment; filename="{sample["sample_id"]}.txt"'
        assert client.get(f"/runs/{hostile}/raw/{sample['sample_id']}").content == answer.content  # no hint
    for fmt in ("md", "json"):
        written = tmp_path / f"incident.{fmt}"
        result = CliRunner().invoke(main, ["export", str(folder / ab), "--case", "c3", "-o", str(written)])
        assert result.exit_code == 0, result.output
        served = client.get(f"/runs/{ab}/cases/c3/incident.{fmt}")
        assert served.status_code == 200 and served.content == written.read_bytes()
        assert "attachment" in served.headers["content-disposition"]


def test_the_incident_json_names_the_run_as_probe_export_does_from_the_same_folder(runs, monkeypatch):
    # `probe view` over ./runs serves what `probe export ID` run there writes, not this machine's
    # absolute path to the run.
    folder, ab, _ = runs
    monkeypatch.chdir(folder.parent)
    written = CliRunner().invoke(main, ["export", ab, "--case", "c3", "--format", "json", "--runs-dir", folder.name])
    assert written.exit_code == 0, written.output
    assert json.loads(written.stdout)["run"] == f"{folder.name}/{ab}"
    with TestClient(create_app(Path(folder.name), warm=False), base_url="http://127.0.0.1") as client:
        served = client.get(f"/runs/{ab}/cases/c3/incident.json")
    assert served.status_code == 200 and served.text == written.stdout


def test_the_why_page_filters_outputs_by_a_phrase(client, runs):
    _, ab, _ = runs
    view = client.get(f"/runs/{ab}/why.json?arm=2").json()
    assert view["why"]["failing_samples"] == 4 and view["failing_outputs"]["samples"] == 4
    phrase = next(p["phrase"] for p in view["why"]["phrases"] if "support@acme.example" in p["phrase"])
    filtered = client.get(f"/runs/{ab}/why.json", params={"arm": 2, "phrase": phrase}).json()
    assert filtered["failing_outputs"]["samples"] == 2
    assert [g["text"] for g in filtered["failing_outputs"]["groups"]] == [SORRY]
    none = client.get(f"/runs/{ab}/why.json", params={"arm": 2, "phrase": "words no output has"}).json()
    assert none["failing_outputs"]["samples"] == 0 and none["failing_outputs"]["groups"] == []
    page = client.get(f"/runs/{ab}/why?arm=2").text
    assert f'href="/runs/{ab}/why?arm=2&amp;metric=header_present&amp;phrase=' in page  # each phrase a filter


def test_a_run_that_grows_is_counted_as_it_grows(runs, tmp_path):
    folder, ab, _ = runs
    copy = tmp_path / "runs"
    shutil.copytree(folder / ab, copy / ab)
    samples = copy / ab / "samples.jsonl"
    lines = samples.read_bytes().splitlines(keepends=True)
    samples.write_bytes(b"".join(lines[:10]) + lines[10][:25])  # the eleventh still being written
    with TestClient(create_app(copy, warm=False), base_url="http://127.0.0.1") as client:
        first = client.get(f"/runs/{ab}.json").json()
        assert first["report"]["recorded"] == 10
        assert any("torn" in p for p in first["problems"])  # the run is not running: a torn line
        assert client.get("/.json").json()["runs"][0]["samples"] == 10
        with open(samples, "ab") as handle:
            handle.write(lines[10][25:] + b"".join(lines[11:]))
        again = client.get(f"/runs/{ab}.json").json()
        assert again["report"]["recorded"] == 24 and again["problems"] == []
        assert client.get("/.json").json()["runs"][0]["samples"] == 24


def test_a_damaged_run_shows_what_can_be_read_and_says_what_cannot(runs, tmp_path):
    folder, ab, _ = runs
    copy = tmp_path / "runs"
    bad_line = copy / "bad-line"
    shutil.copytree(folder / ab, bad_line)
    lines = (bad_line / "samples.jsonl").read_bytes().splitlines(keepends=True)
    (bad_line / "samples.jsonl").write_bytes(b"".join(lines[:3]) + b"{not json\n" + b"".join(lines[3:]))
    no_arms = copy / "no-arms"
    shutil.copytree(folder / ab, no_arms)
    manifest = json.loads((no_arms / "manifest.json").read_text())
    del manifest["arms"]
    (no_arms / "manifest.json").write_text(json.dumps(manifest))
    (copy / "starting").mkdir()  # a run directory before its manifest is written
    with TestClient(create_app(copy, warm=False), base_url="http://127.0.0.1") as client:
        listing = {r["id"]: r for r in client.get("/.json").json()["runs"]}
        assert set(listing) == {"bad-line", "no-arms", "starting"}
        assert any("line 4 is not valid JSON" in p for p in listing["bad-line"]["problems"])
        assert listing["bad-line"]["probeset"] and listing["bad-line"]["arms"]  # what the manifest says
        assert any("lacks arms" in p for p in listing["no-arms"]["problems"])
        assert any("no manifest.json" in p for p in listing["starting"]["problems"])
        page = client.get("/runs/bad-line")
        assert page.status_code == 200 and "line 4 is not valid JSON" in page.text and "old x " in page.text
        assert "lacks arms" in client.get("/runs/no-arms").text
        assert client.get("/").status_code == 200


@pytest.mark.parametrize("line", [b"{}", b"[1, 2, 3]", b"null", b'{"sample_id": 5, "case_id": "c0"}'])
def test_a_line_that_is_json_but_no_sample_is_one_sentence_not_a_traceback(runs, tmp_path, line):
    folder, ab, _ = runs
    copy = tmp_path / "runs"
    shutil.copytree(folder / ab, copy / ab)
    samples = copy / ab / "samples.jsonl"
    lines = samples.read_bytes().splitlines(keepends=True)
    samples.write_bytes(b"".join(lines[:3]) + line + b"\n" + b"".join(lines[3:]))
    said = "line 4 is not a sample record"
    for args in (["report", str(copy / ab)], ["show", str(copy / ab)], ["why", str(copy / ab)],
                 ["export", str(copy / ab), "--format", "csv"],
                 ["compare", f"{copy / ab}#prompt=old", f"{copy / ab}#prompt=new"]):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 2 and said in result.stderr, (args, result.output, result.exception)
        assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.output
    with TestClient(create_app(copy, warm=False), base_url="http://127.0.0.1",
                    raise_server_exceptions=False) as client:
        listing = client.get("/.json")
        assert listing.status_code == 200
        assert any(said in p for p in listing.json()["runs"][0]["problems"])
        page = client.get(f"/runs/{ab}")
        assert page.status_code == 200 and said in page.text
        case = client.get(f"/runs/{ab}/cases/c0.json")
        assert case.status_code == 422 and said in case.json()["error"]


def test_the_viewer_shows_nothing_probe_show_and_export_do_not(runs, tmp_path):
    """What only the run's files hold (the target's config, the provider's response bodies, failed
    attempts' error bodies) stays there: no page, JSON or download carries it."""
    folder, ab, _ = runs
    marker = "ONLY-IN-THE-FILES-7f3a"
    copy = tmp_path / "runs"
    shutil.copytree(folder / ab, copy / ab)
    manifest = json.loads((copy / ab / "manifest.json").read_text())
    manifest["target"]["retrieval"] = {"kind": "http", "headers": {"Authorization": f"Bearer {marker}"}}
    manifest["vars"] = {"token": marker}
    (copy / ab / "manifest.json").write_text(json.dumps(manifest))
    samples = [json.loads(line) for line in (copy / ab / "samples.jsonl").read_text().splitlines()]
    for sample in samples:
        sample["attempts_log"] = [{"kind": "rate_limit", "status": 429, "message": marker, "body": marker}]
        (copy / ab / "raw" / f"{sample['sample_id']}.body").write_text(marker)
    (copy / ab / "samples.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples))
    printed = CliRunner().invoke(main, ["show", str(copy / ab)]).stdout
    printed += CliRunner().invoke(main, ["export", str(copy / ab), "--case", "c0"]).stdout
    assert marker not in printed
    with TestClient(create_app(copy, warm=False), base_url="http://127.0.0.1") as client:
        addresses = [url for page in pages_of(ab, ab) for url in (page, json_of(page))]
        # (incident.json is `probe export --format json`, byte for byte: the whole sample records)
        addresses += [f"/runs/{ab}/cases/c0/incident.md"]
        addresses += [f"/runs/{ab}/raw/{s['sample_id']}" for s in samples[:3]]
        for address in addresses:
            answer = client.get(address)
            assert answer.status_code in (200, 404), address
            assert marker not in answer.text, address


# -- one view model ---------------------------------------------------------------------------

TERMINAL_ROW = re.compile(r"^(\S+)\s+(\S+)\s+(\d+)/(\d+)\s+([\d.]+)%\s+([\d.]+)-([\d.]+)%", re.M)


def test_terminal_json_static_html_and_viewer_show_the_same_numbers(demo_run, tmp_path):
    _, run = demo_run
    env = {"COLUMNS": "250"}
    terminal = CliRunner(env=env).invoke(main, ["report", str(run)]).stdout
    report = json.loads(CliRunner().invoke(main, ["report", str(run), "--json"]).stdout)
    static = tmp_path / "report.html"
    assert CliRunner().invoke(main, ["report", str(run), "-o", str(static)]).exit_code == 0
    compare = CliRunner(env=env).invoke(
        main, ["compare", f"{run}#prompt=exception-only", f"{run}#prompt=always-header", "--all"]
    ).stdout
    with TestClient(create_app(run.parent, warm=False), base_url="http://127.0.0.1") as client:
        viewer_html = client.get(f"/runs/{run.name}").text
        viewer = client.get(f"/runs/{run.name}.json").json()
    assert viewer["report"]["arms"] == report["arms"]  # the viewer's JSON carries the report itself

    def numbers_of(html: str) -> dict:
        marks, cells, verdicts = {}, {}, {}
        metric = None
        for tag, attrs in tags_of(html):
            if tag == "div" and attrs.get("class") == "plot":
                metric = None
            if tag == "g" and attrs.get("class") == "arm":
                marks.setdefault(attrs["data-label"], []).append(
                    (float(attrs["data-rate"]), float(attrs["data-wilson-lo"]), float(attrs["data-wilson-hi"]))
                )
            if tag == "table" and attrs.get("class") == "grid":
                metric = attrs["data-metric"]
            if tag == "td" and "data-k" in attrs:
                cells[(metric, attrs["data-case"], attrs["data-arm"])] = (int(attrs["data-k"]), int(attrs["data-n"]))
            if tag == "li" and "data-verdict" in attrs:
                verdicts[attrs["data-metric"]] = attrs["data-verdict"]
        return {"marks": marks, "cells": cells, "verdicts": verdicts}

    static_numbers, viewer_numbers = numbers_of(static.read_text()), numbers_of(viewer_html)
    assert static_numbers == viewer_numbers and static_numbers["cells"] and static_numbers["verdicts"]
    rows = {(m.group(1), m.group(2)): m.groups()[2:] for m in TERMINAL_ROW.finditer(terminal)}
    for index, arm in enumerate(report["arms"], 1):
        for position, (name, metric) in enumerate(arm["metrics"].items()):
            k, n, rate, lo, hi = rows[(arm["prompt"], name)]
            assert (int(k), int(n)) == (metric["k"], metric["n"])
            assert float(rate) == pytest.approx(100 * metric["rate"], abs=0.05)
            assert (float(lo), float(hi)) == pytest.approx((100 * metric["wilson"][0], 100 * metric["wilson"][1]), abs=0.05)
            mark = static_numbers["marks"][arm["prompt"]][position]
            assert mark == pytest.approx((100 * metric["rate"], 100 * metric["wilson"][0], 100 * metric["wilson"][1]), abs=0.05)
            for case_id, cell in viewer_cells(viewer, name, index):
                assert static_numbers["cells"][(name, case_id, str(index))] == cell
    for result in viewer["verdicts"]["results"]:
        assert static_numbers["verdicts"][result["metric"]] == result["verdict"]
        said = result["words"]["verdict"]  # the terminal table's verdict column says the same words
        assert re.search(rf"^{result['metric']}\s.*\s{re.escape(said)}\s*$", compare, re.M), result["metric"]


def viewer_cells(view: dict, metric: str, index: int) -> list[tuple[str, tuple[int, int]]]:
    grid = next(g for g in view["grid"] if g["metric"] == metric)
    return [(row["case_id"], (row["cells"][index - 1]["k"], row["cells"][index - 1]["n"]))
            for row in grid["rows"] if row["cells"][index - 1]]


def test_probe_view_refuses_a_missing_folder_and_says_where_it_listens(tmp_path):
    result = CliRunner().invoke(main, ["view", str(tmp_path / "nowhere")])
    assert result.exit_code == 2 and "no such runs directory" in result.stderr
    assert "--host" in CliRunner().invoke(main, ["view", "--help"]).output


def test_probe_view_serves_until_interrupted(runs):
    import signal
    import subprocess
    import sys

    import httpx

    folder, ab, _ = runs
    probe = str(Path(sys.executable).parent / "probe")
    process = subprocess.Popen([probe, "view", str(folder), "--port", "0"], stderr=subprocess.PIPE, text=True)
    try:
        line = process.stderr.readline()  # printed once it listens
        url = re.search(r"at (http://127\.0\.0\.1:\d+/)", line).group(1)
        assert httpx.get(url).status_code == 200
        assert httpx.get(f"{url}runs/{ab}.json").json()["report"]["recorded"] == 24
    finally:
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=30)
    assert process.returncode == 130 and err.strip() == "interrupted", err  # Ctrl-C, as for every command


def test_probe_view_started_with_ctrl_c_ignored_keeps_ignoring_it_and_stops_on_sigterm(runs):
    import signal
    import subprocess
    import sys

    import httpx

    folder, ab, _ = runs
    probe = str(Path(sys.executable).parent / "probe")
    process = subprocess.Popen(
        [probe, "view", str(folder), "--port", "0"], stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),  # like `nohup probe view &`
    )
    try:
        url = re.search(r"at (http://127\.0\.0\.1:\d+/)", process.stderr.readline()).group(1)
        process.send_signal(signal.SIGINT)
        # Still serving after the ignored Ctrl-C (uvicorn alone would have caught it and stopped).
        assert httpx.get(f"{url}runs/{ab}.json").json()["report"]["recorded"] == 24
        assert process.poll() is None
    finally:
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=30)
    assert process.returncode == 143 and err.strip() == "interrupted", err


def _is_json(data: bytes) -> bool:
    try:
        json.loads(data)
    except ValueError:
        return False
    return True


def test_live_counts_equal_a_fresh_count_however_the_file_grew(runs, tmp_path):
    """Appended in pieces cut anywhere (mid-line too), the live table equals build_counts."""
    import random

    from promptprobe.counts import LiveCounts, build_counts
    from promptprobe.views.report import build_report

    folder, ab, _ = runs
    copy = tmp_path / ab
    shutil.copytree(folder / ab, copy)
    data = (copy / "samples.jsonl").read_bytes()
    expected = build_report(build_counts(copy))
    rng = random.Random(7)
    cuts = sorted(rng.sample(range(1, len(data)), 12)) + [len(data)]
    (copy / "samples.jsonl").write_bytes(b"")
    live = LiveCounts(copy)
    written = 0
    for cut in cuts:
        with open(copy / "samples.jsonl", "ab") as handle:
            handle.write(data[written:cut])
        written = cut
        table = live.refresh()
        # a finished run's last record counts even before its newline (a cut just before one)
        tail = data[:cut].rsplit(b"\n", 1)[-1]
        assert table.recorded == data[:cut].count(b"\n") + (tail.endswith(b"}") and _is_json(tail))
    assert build_report(table) == expected
    offsets = live.offsets("old", table.arms[0].model, "c0")
    assert [json.loads(data[o : o + n])["case_id"] for o, n in offsets] == ["c0", "c0"]


def test_a_reclassified_run_reads_as_probe_report_reads_it(runs, tmp_path):
    folder, ab, _ = runs
    copy = tmp_path / "runs"
    shutil.copytree(folder / ab, copy / ab)
    result = CliRunner().invoke(main, ["classify", str(copy / ab), "--markers", "Yes,Sorry", "--no-answer", "Sorry"])
    assert result.exit_code == 0, result.output
    report = json.loads(CliRunner().invoke(main, ["report", str(copy / ab), "--json"]).stdout)
    assert report["classification"] == 1
    with TestClient(create_app(copy, warm=False), base_url="http://127.0.0.1") as client:
        view = client.get(f"/runs/{ab}.json").json()
        assert view["report"]["arms"] == report["arms"]
        groups = client.get(f"/runs/{ab}/cases/c0.json?arm=2").json()["sides"][0]["outputs"]["groups"]
        assert [g["header"] for g in groups] == ["present"]  # SORRY starts with the new marker


def test_a_large_run_shows_what_is_counted_so_far_and_no_verdict_until_whole(runs, monkeypatch):
    folder, ab, _ = runs
    monkeypatch.setattr("promptprobe.viewer.runs.PAGE_CHUNK", 3000)  # a few samples a look, as 16 MB of a big run
    with TestClient(create_app(folder, warm=False), base_url="http://127.0.0.1") as client:
        first = client.get(f"/runs/{ab}.json").json()
        assert 0 < first["counting"]["read_bytes"] < first["counting"]["of_bytes"]
        assert 0 < first["report"]["recorded"] < 24 and first["verdicts"] is None
        assert "Counting this run" in client.get(f"/runs/{ab}").text
        for _ in range(50):  # each look counts one more chunk, as the page's polling does
            view = client.get(f"/runs/{ab}.json").json()
            if view["counting"] is None:
                break
        assert view["counting"] is None and view["report"]["recorded"] == 24 and view["verdicts"]["results"]
        whole = client.get(f"/runs/{ab}/cases/c0.json?arm=1").json()  # other pages wait for the whole count
        assert whole["sides"][0]["metrics"]["header_present"]["n"] == 2


def test_a_run_whose_writer_dies_reads_as_killed_without_any_file_changing(runs, tmp_path):
    import subprocess
    import sys

    folder, ab, _ = runs
    copy = tmp_path / "runs"
    shutil.copytree(folder / ab, copy / ab)
    manifest = json.loads((copy / ab / "manifest.json").read_text())
    manifest["status"] = "running"
    (copy / ab / "manifest.json").write_text(json.dumps(manifest))
    holder = (  # a writer: holds the run's lock with its pid inside, as a running probe does
        "import fcntl, os, sys\n"
        f"handle = open({str(copy / ab / '.lock')!r}, 'w')\n"
        "fcntl.flock(handle, fcntl.LOCK_EX)\n"
        "handle.write(str(os.getpid())); handle.flush()\n"
        "print('held', flush=True)\n"
        "sys.stdin.read()\n"
    )
    writer = subprocess.Popen([sys.executable, "-c", holder], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout.readline().strip() == "held"
        with TestClient(create_app(copy, warm=False), base_url="http://127.0.0.1") as client:
            assert client.get("/.json").json()["runs"][0]["status"] == "running"
            assert client.get(f"/runs/{ab}.json").json()["report"]["status"] == "running"
            writer.kill()
            writer.wait(timeout=30)
            assert client.get("/.json").json()["runs"][0]["status"] == "killed"
            assert client.get(f"/runs/{ab}.json").json()["report"]["status"] == "killed"
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait(timeout=30)


def test_every_view_names_the_adjustment_the_verdicts_used(runs, tmp_path):
    """The terminal and the JSON say which adjustment decided a family's verdicts; the static HTML
    and the viewer say the same one, not Holm when it was Westfall-Young."""
    folder, ab, _ = runs
    run = str(folder / ab)
    data = json.loads(CliRunner().invoke(main, ["compare", f"{run}#prompt=old", f"{run}#prompt=new", "--all",
                                                "--json"]).stdout)
    method = data["results"][0]["adjustment"]
    assert method == "Westfall-Young min-P"  # every result paired: the min-P step-down
    terminal = CliRunner().invoke(main, ["compare", f"{run}#prompt=old", f"{run}#prompt=new", "--all"]).stdout
    assert method in terminal
    compared, reported = tmp_path / "compare.html", tmp_path / "report.html"
    CliRunner().invoke(main, ["compare", f"{run}#prompt=old", f"{run}#prompt=new", "--all", "-o", str(compared)])
    CliRunner().invoke(main, ["report", run, "-o", str(reported)])
    with TestClient(create_app(folder, warm=False), base_url="http://127.0.0.1") as client:
        pages = {"compare.html": compared.read_text(), "report.html": reported.read_text(),
                 "viewer run": client.get(f"/runs/{ab}").text,
                 "viewer compare": client.get(f"/compare?a={ab}:1&b={ab}:2").text}
    for name, html in pages.items():
        assert f"{method}-adjusted p" in html or f"p ({method})" in html, name
        assert "Holm" not in html, name


def test_arm_by_arm_notes_name_their_pair(runs, tmp_path):
    """Two runs compared arm by arm: a note or warning that reads the same for two pairs is said for
    each pair, by its name, not once for nobody knows which."""
    folder, ab, _ = runs
    copies = []
    for name in ("before", "after"):
        shutil.copytree(folder / ab, tmp_path / name)
        path = tmp_path / name / "samples.jsonl"
        samples = [json.loads(line) for line in path.read_text().splitlines()]
        for sample in samples:
            if sample["case_id"] == "c5" and sample["repeat"] == 1:  # one failed sample in each arm
                sample.update(raw=None, header=None, checks={}, outcomes=None,
                              error={"kind": "http_status", "message": "HTTP 500", "attempts": 1})
        path.write_text("".join(json.dumps(s) + "\n" for s in samples))
        copies.append(str(tmp_path / name))
    result = CliRunner().invoke(main, ["compare", *copies])
    assert result.exit_code == 0, result.output
    notes = [line for line in result.stdout.splitlines() if line.startswith("note: ")]
    assert [n.split(":")[1].strip() for n in notes if "failed samples" in n] == ["old", "new"]
    warnings = result.stderr.splitlines()
    assert [w.split(":")[1].strip() for w in warnings if "failed samples count" in w] == ["old", "new"]


def test_probe_runs_and_the_viewer_count_a_run_still_marked_running_alike(runs, tmp_path):
    """A run still marked running (being written, or killed) has its start's counts in its manifest:
    `probe runs` counts its samples.jsonl as the viewer's runs page does, not 0."""
    folder, ab, _ = runs
    copy = tmp_path / "runs"
    shutil.copytree(folder / ab, copy / ab)
    manifest = json.loads((copy / ab / "manifest.json").read_text())
    manifest["status"] = "running"
    manifest["counts"] = {"planned": manifest["counts"]["planned"], "recorded": 0, "errors": 0}
    (copy / ab / "manifest.json").write_text(json.dumps(manifest))
    samples = [json.loads(line) for line in (copy / ab / "samples.jsonl").read_text().splitlines()][:10]
    samples[0].update(raw=None, header=None, error={"kind": "http_status", "message": "HTTP 500", "attempts": 1})
    (copy / ab / "samples.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples))
    listed = json.loads(CliRunner().invoke(main, ["runs", "--runs-dir", str(copy), "--json"]).stdout)["runs"][0]
    assert (listed["status"], listed["samples"], listed["errors"]) == ("killed", 10, 1)
    with TestClient(create_app(copy, warm=False), base_url="http://127.0.0.1") as client:
        line = client.get("/.json").json()["runs"][0]
    assert (line["status"], line["samples"], line["errors"]) == ("killed", 10, 1)


def test_the_compare_page_refuses_a_metric_the_runs_do_not_have(client, runs):
    """Ordered by a metric neither arm has, every case would read as a tie (0 discordant): the page
    says the metric is unknown instead, as the why page does."""
    _, ab, _ = runs
    answer = client.get(f"/compare.json?a={ab}:1&b={ab}:2&metric=header_presnt")
    assert answer.status_code == 404 and "no metric 'header_presnt'" in answer.json()["error"]
    assert client.get(f"/compare?a={ab}:1&b={ab}:2&metric=header_presnt").status_code == 404
    assert client.get(f"/compare.json?a={ab}:1&b={ab}:2&metric=header_absent").status_code == 200


def test_bytes_that_are_not_utf8_are_named_and_the_incident_file_is_served(tmp_path):
    # A server that cuts an emoji in half sends a lone \ud83d escape, recorded as the bytes ED A0 BD:
    # the page names each byte (not three U+FFFD) and the incident file is what probe export writes.
    def reply(request):
        body = openai_body("[[ANSWER]]\nemoji cut CUT", request.json["model"], None).replace(b"CUT", b"\\ud83d")
        return Reply(body=body, content_type="application/json")

    probeset = load_probeset(write_probeset(tmp_path / "p.toml", [("cut", "q cut", None)]))
    with LocalServer(reply) as server:
        run = run_probe(probeset, [load_prompt(ROOT / "prompts" / "always-header.md")],
                        [parse_model_spec(f"openai:m@{server.url}/v1")], load_config(None),
                        RunOptions(runs_dir=tmp_path / "runs")).path
    with TestClient(create_app(run.parent, warm=False), base_url="http://127.0.0.1") as client:
        groups = client.get(f"/runs/{run.name}/cases/cut.json").json()["sides"][0]["outputs"]["groups"]
        assert [p for p in groups[0]["segments"] if p[1] == "inv"][:3] == [
            ["byte 0xED not UTF-8", "inv"], ["byte 0xA0 not UTF-8", "inv"], ["byte 0xBD not UTF-8", "inv"]]
        assert "byte 0xED not UTF-8" in client.get(f"/runs/{run.name}/cases/cut").text
        for fmt in ("md", "json"):
            written = tmp_path / f"incident.{fmt}"
            result = CliRunner().invoke(main, ["export", str(run), "--case", "cut", "-o", str(written)])
            assert result.exit_code == 0, result.output
            served = client.get(f"/runs/{run.name}/cases/cut/incident.{fmt}")
            assert served.status_code == 200 and served.content == written.read_bytes()


def test_an_rtl_override_in_a_question_is_named_not_obeyed(tmp_path):
    # U+202E in a question would show "Plain question" reversed; like an output's, it is spelled out
    # on the case page, the compare page and the static HTML, and the JSON says so.
    run = record(tmp_path, {"old": [GOOD], "new": [LATE]}, [("c0", "Plain \u202equestion here?")], repeats=2)
    with TestClient(create_app(run.parent, warm=False), base_url="http://127.0.0.1") as client:
        view = client.get(f"/runs/{run.name}/cases/c0.json").json()
        assert view["case"]["question"] == "Plain \u202equestion here?"
        assert view["case"]["question_segments"] == [
            ["Plain ", "text"], ["U+202E RIGHT-TO-LEFT OVERRIDE", "inv"], ["question here?", "text"]]
        for url in (f"/runs/{run.name}/cases/c0", f"/compare?a={run.name}:1&b={run.name}:2"):
            html = client.get(url).text
            assert "\u202e" not in html, url
            assert '<span class="inv">U+202E RIGHT-TO-LEFT OVERRIDE</span>question here?' in html, url
    written = tmp_path / "compare.html"
    result = CliRunner().invoke(main, ["compare", f"{run}#prompt=old", f"{run}#prompt=new", "-o", str(written)])
    assert result.exit_code == 0, result.output
    html = written.read_text(encoding="utf-8")
    assert "\u202e" not in html and '<span class="inv">U+202E RIGHT-TO-LEFT OVERRIDE</span>question here?' in html


def test_characters_a_model_writes_are_not_taken_for_the_marks_of_invisible_ones(tmp_path):
    # A model writes "→", "·", "⟨...⟩" and "␄" too: the page shows them as text, and labels only
    # the real tab, trailing spaces and missing final newline.
    written = "[[ANSWER]]\nStep 1 → Step 2 · done ⟨U+202E⟩ ␄\tend  "
    run = record(tmp_path, {"v": [written]}, [("c0", "q0")])
    with TestClient(create_app(run.parent, warm=False), base_url="http://127.0.0.1") as client:
        groups = client.get(f"/runs/{run.name}/cases/c0.json").json()["sides"][0]["outputs"]["groups"]
    assert groups[0]["segments"] == [
        ["[[ANSWER]]", "marker"], ["\nStep 1 → Step 2 · done ⟨U+202E⟩ ␄", "text"], ["TAB", "inv"], ["end", "text"],
        ["··", "inv"], ["no newline at end", "inv"]]
