"""The daily workbench: runs listed and named by reference, prompt variables and placeholders
that are not, no silent probing without retrieval, one output convention, the HTML at 390 and
1280 px in headless Chromium, words people use, terminal tables, classification reuse, -m, and
sample rows for pandas, DuckDB and Datasette."""

import csv
import io
import json
import os
import re
import shutil
import subprocess
import urllib.parse
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from conftest import ROOT, run_dir_of, write_probeset
from servers import LocalServer, Reply

from promptprobe.cli import SUFFIX_FORMATS, main
from promptprobe.prompts import template_problems

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
PROMPT = str(ROOT / "prompts" / "always-header.md")


def probe(tmp_path: Path, *args: str, name: str = "p.toml", cases: int = 2, runs_dir: bool = True):
    probeset = write_probeset(tmp_path / name, [(f"c{i}", f"question {i}", None) for i in range(cases)])
    where = ["--runs-dir", str(tmp_path / "runs")] if runs_dir else []
    with LocalServer() as server:
        result = CliRunner().invoke(
            main,
            [
                "run",
                str(probeset),
                "--prompt",
                PROMPT,
                "-m",
                f"openai:m@{server.url}/v1",
                "--retrieval",
                "none",
                *where,
                *args,
            ],
        )
    assert result.exit_code == 0, result.output
    return run_dir_of(result)


# -- probe runs and run references ----------------------------------------------------------------


def test_runs_lists_newest_first_and_references_resolve(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    first = probe(tmp_path, name="one.toml")
    second = probe(tmp_path, name="two.toml")
    listing = json.loads(CliRunner().invoke(main, ["runs", "--json"]).stdout)["runs"]
    assert [r["id"] for r in listing] == [second.name, first.name]
    assert listing[0].keys() >= {"run", "id", "probeset", "arms", "status", "samples", "errors", "created"}
    assert (
        listing[0]["probeset"] == "two" and listing[0]["samples"] == 2 and listing[0]["status"] == "complete"
    )
    assert (
        json.loads(CliRunner().invoke(main, ["runs", "--limit", "1", "--json"]).stdout)["runs"][0]["id"]
        == second.name
    )
    table = CliRunner().invoke(main, ["runs"]).stdout
    assert table.index(second.name) < table.index(first.name)
    for reference, expected in (
        ("latest", second),
        ("latest~1", first),
        (second.name, second),
        (second.name[:-3], second),
        (str(first), first),
    ):
        report = json.loads(CliRunner().invoke(main, ["report", reference, "--json"]).stdout)
        assert Path(report["run"]).name == expected.name, reference
    compared = CliRunner().invoke(main, ["compare", "latest~1", "latest", "--json"])
    assert compared.exit_code == 0 and json.loads(compared.stdout)["design"] == "paired"


def test_unknown_and_ambiguous_references_are_exit_2_listing_candidates(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    first, second = probe(tmp_path, name="one.toml"), probe(tmp_path, name="two.toml")
    common = os.path.commonprefix([first.name, second.name])
    ambiguous = CliRunner().invoke(main, ["report", common])
    assert ambiguous.exit_code == 2 and first.name in ambiguous.stderr and second.name in ambiguous.stderr
    unknown = CliRunner().invoke(main, ["show", "nothing-like-it"])
    assert unknown.exit_code == 2 and "no run directory or run id matches it" in unknown.stderr
    too_far = CliRunner().invoke(main, ["report", "latest~5"])
    assert too_far.exit_code == 2 and "it has 2" in too_far.stderr


def test_the_runs_directory_comes_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PROBE_RUNS_DIR", str(tmp_path / "elsewhere"))
    run = probe(tmp_path, runs_dir=False)
    assert run.parent == tmp_path / "elsewhere"
    assert CliRunner().invoke(main, ["report", "latest"]).exit_code == 0
    flagged = CliRunner().invoke(main, ["runs", "--runs-dir", str(tmp_path / "missing")])
    assert flagged.exit_code == 0 and "no runs in" in flagged.stdout


# -- prompt templates ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "written,expected",
    [
        ("{{ sources }}", "has spaces inside the braces and would be sent as written; write {{sources}}"),
        ("{sources}", "has single braces and would be sent as written; write {{sources}}"),
        ("{{Sources}}", "names no variable (known: product, sources); did you mean {{sources}}?"),
        ("{{sources}", "has unbalanced braces; write {{sources}}"),
        ("{sources}}", "has unbalanced braces; write {{sources}}"),
        ("{{prodcut}}", "did you mean {{product}}?"),
    ],
)
def test_placeholders_that_are_not_name_file_line_and_the_intended_one(written, expected):
    problems = template_problems(f"line one\nsee {written} here\n", "prompt.md", {"product"})
    assert problems and problems[0].startswith("prompt.md:2: ") and expected in problems[0], problems


def test_ordinary_braces_are_text():
    assert (
        template_problems('JSON {"a": 1} and {x} and {{sources}} and {{product}}', "p.md", {"product"}) == []
    )


def test_variables_come_from_vars_and_the_case_wins(tmp_path):
    (tmp_path / "p.md").write_text("You help {{product}} users; today is {{day}}.\n{{sources}}")
    (tmp_path / "probe.toml").write_text(
        '[retrieval]\nkind = "none"\n[vars]\nproduct = "Acme"\nday = "Monday"\n'
    )
    probeset = tmp_path / "set.toml"
    probeset.write_text(
        '[[case]]\nid = "a"\nquestion = "q1"\n[[case]]\nid = "b"\nquestion = "q2"\n'
        'vars = { product = "Globex" }\n'
    )
    with LocalServer() as server:
        result = CliRunner().invoke(
            main,
            [
                "run",
                str(probeset),
                "--prompt",
                str(tmp_path / "p.md"),
                "--config",
                str(tmp_path / "probe.toml"),
                "-m",
                f"openai:m@{server.url}/v1",
                "--runs-dir",
                str(tmp_path / "runs"),
            ],
        )
        systems = {
            r.json["messages"][-1]["content"]: r.json["messages"][0]["content"] for r in server.requests
        }
    assert result.exit_code == 0, result.output
    assert systems["q1"].startswith("You help Acme users; today is Monday.")
    assert systems["q2"].startswith("You help Globex users; today is Monday.")
    run = run_dir_of(result)
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["vars"] == {"product": "Acme", "day": "Monday"}  # with the copies: rebuildable
    assert (run / "prompts" / "p.md").read_text().startswith("You help {{product}}")


def test_check_takes_prompt_files_and_run_refuses_a_bad_template(tmp_path):
    bad = tmp_path / "bad.md"
    bad.write_text("Answer from:\n{{ sources }}\nfor {{product}}\n")
    probeset = write_probeset(tmp_path / "p.toml", [("c0", "q", None)])
    checked = CliRunner().invoke(main, ["check", str(probeset), str(bad)])
    assert checked.exit_code == 2
    assert f"{bad}:2: {{{{ sources }}}} has spaces inside the braces" in checked.stderr
    assert f"{bad}:3: {{{{product}}}} names no variable" in checked.stderr
    ran = CliRunner().invoke(
        main,
        [
            "run",
            str(probeset),
            "--prompt",
            str(bad),
            "-m",
            "openai:m@http://127.0.0.1:9/v1",
            "--retrieval",
            "none",
            "--runs-dir",
            str(tmp_path / "runs"),
        ],
    )
    assert ran.exit_code == 2 and "has spaces inside the braces" in ran.stderr
    assert not (tmp_path / "runs").exists()
    good = CliRunner().invoke(main, ["check", str(probeset), PROMPT])
    assert good.exit_code == 0 and "ok: prompt always-header" in good.stdout


def test_a_variable_missing_for_a_case_names_the_case(tmp_path):
    (tmp_path / "p.md").write_text("Hi {{product}}\n")
    probeset = tmp_path / "set.toml"
    probeset.write_text(
        '[[case]]\nid = "a"\nquestion = "q1"\nvars = { product = "X" }\n[[case]]\nid = "b"\nquestion = "q2"\n'
    )
    checked = CliRunner().invoke(main, ["check", str(probeset), str(tmp_path / "p.md")])
    assert checked.exit_code == 2 and "{{product}} has no value for case b" in checked.stderr


# -- no silent probing without retrieval ------------------------------------------------------------


def test_without_a_config_probing_without_retrieval_must_be_asked_for(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    probeset = write_probeset(tmp_path / "p.toml", [("c0", "q", None)])
    refused = CliRunner().invoke(
        main, ["run", str(probeset), "--prompt", PROMPT, "-m", "openai:m@http://127.0.0.1:9/v1"]
    )
    assert refused.exit_code == 2
    assert (
        "no retrieval path: there is no probe.toml here" in refused.stderr
        and "--retrieval none" in refused.stderr
    )
    assert not (tmp_path / "runs").exists()
    probe(tmp_path)  # asked for: fine
    (tmp_path / "probe.toml").write_text('[retrieval]\nkind = "none"\n')
    with LocalServer() as server:
        explicit = CliRunner().invoke(
            main, ["run", str(probeset), "--prompt", PROMPT, "-m", f"openai:m@{server.url}/v1"]
        )
    assert explicit.exit_code == 0 and "no [retrieval]" not in explicit.stderr


# -- one output convention ----------------------------------------------------------------------------

COMMANDS_TABLE = re.compile(r"^\| `probe (\w[\w-]*)` \| ([^|]+) \| ([^|]+) \|$", re.M)


def documented_formats() -> dict[str, tuple[set[str], str]]:
    text = (ROOT / "docs" / "cli.md").read_text()
    section = text.split("## Output formats", 1)[1].split("\n## ", 1)[0]
    found = {}
    for name, formats, default in COMMANDS_TABLE.findall(section):
        found[name] = ({f.strip(" `") for f in formats.split(",")}, default.strip(" `"))
    return found


def test_every_printing_command_takes_format_and_o_and_the_docs_list_them():
    documented = documented_formats()
    for name, command in main.commands.items():
        callback = command.callback
        options = {opt for param in command.params for opt in getattr(param, "opts", [])}
        formats = getattr(callback, "formats", None)
        while formats is None and hasattr(callback, "__wrapped__"):
            callback = callback.__wrapped__
            formats = getattr(callback, "formats", None)
        if name in ("demo", "demo-server", "init", "view", "label"):
            assert name in documented and documented[name][0] == {"text"}, name
            continue
        assert "--format" in options and "-o" in options, name
        choice = next(p for p in command.params if p.name == "fmt").type
        assert isinstance(choice, click.Choice)
        assert documented[name][0] == set(choice.choices), name
        assert documented[name][1] == callback.default_format, name
    readme = (ROOT / "README.md").read_text()
    assert "every command takes `--format table|md|json`" not in readme


def test_o_file_suffix_picks_the_format(tmp_path):
    run = probe(tmp_path)
    for suffix, fmt in (".json", "json"), (".md", "md"), (".html", "html"), (".txt", "table"):
        target = tmp_path / f"report{suffix}"
        assert CliRunner().invoke(main, ["report", str(run), "-o", str(target)]).exit_code == 0
        text = target.read_text()
        assert {
            "json": text.startswith("{"),
            "md": re.search(r"^\| metric +\|", text, re.M) is not None and "|---" in text,
            "html": text.startswith("<!doctype html>"),
            "table": re.match(r"run\s", text) is not None,
        }[fmt], (suffix, text[:300])
    forced = tmp_path / "forced.html"
    assert CliRunner().invoke(main, ["report", str(run), "-o", str(forced), "--format", "md"]).exit_code == 0
    assert not forced.read_text().startswith("<!doctype")  # --format wins over the suffix
    assert SUFFIX_FORMATS[".csv"] == "csv"


# -- sample rows -------------------------------------------------------------------------------------


def test_export_rows_load_in_csv_and_json_with_the_reports_rates(tmp_path, demo_run):
    _, run = demo_run
    rows_csv = list(
        csv.DictReader(io.StringIO(CliRunner().invoke(main, ["export", str(run), "--format", "csv"]).stdout))
    )
    rows_jsonl = [
        json.loads(line)
        for line in CliRunner().invoke(main, ["export", str(run), "--format", "jsonl"]).stdout.splitlines()
    ]
    assert len(rows_csv) == len(rows_jsonl) == 72
    assert rows_jsonl[0].keys() >= {
        "sample_id",
        "arm",
        "prompt",
        "model",
        "case_id",
        "repeat",
        "header",
        "error_kind",
        "latency_ms",
        "input_tokens",
        "output_tokens",
        "header_present",
    }
    report = json.loads(CliRunner().invoke(main, ["report", str(run), "--json"]).stdout)
    for arm in report["arms"]:
        mine = [r for r in rows_jsonl if r["prompt"] == arm["prompt"]]
        for metric, value in arm["metrics"].items():
            counted = [r[metric] for r in mine if r[metric] is not None]
            assert (sum(counted), len(counted)) == (value["k"], value["n"]), metric
            assert (
                sum(int(r[metric]) for r in rows_csv if r["prompt"] == arm["prompt"] and r[metric] != "")
                == value["k"]
            )
    written = tmp_path / "rows.csv"
    assert CliRunner().invoke(main, ["export", str(run), "-o", str(written)]).exit_code == 0
    assert written.read_text().startswith("run_id,sample_id,arm,prompt")  # the suffix picked csv
    assert oct(written.stat().st_mode & 0o777) == "0o600"


# -- words, terminal, classification ------------------------------------------------------------------


def test_tables_never_break_inside_a_word_at_80_columns(demo_run):
    _, run = demo_run
    result = CliRunner(env={"COLUMNS": "80"}).invoke(
        main, ["compare", f"{run}#prompt=exception-only", f"{run}#prompt=always-header", "--all"]
    )
    words = set(re.findall(r"[a-z_]{4,}", result.stdout))
    assert "header_present" in words and "header_prese" not in words and "citation_valid_only" in words
    report = CliRunner(env={"COLUMNS": "80"}).invoke(main, ["report", str(run)]).stdout
    header = next(line for line in report.splitlines() if line.startswith("prompt "))
    assert "DEFF" not in header  # 80 columns drop it
    for column in (
        "DEFF",
        "n_eff",
        "95% adjusted",
    ):  # a legend line for each column shown, none for the others
        assert (f"{column}: " in report) == (column in header), column


def test_piped_output_is_100_columns_unless_columns_says_otherwise(demo_run):
    _, run = demo_run
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    piped = subprocess.run(
        [str(Path(os.sys.executable).parent / "probe"), "report", str(run)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert max(len(line) for line in piped.stdout.splitlines()) <= 100
    narrow = subprocess.run(
        [str(Path(os.sys.executable).parent / "probe"), "report", str(run)],
        capture_output=True,
        text=True,
        env={**env, "COLUMNS": "60"},
        timeout=60,
    )
    table_lines = [line for line in narrow.stdout.splitlines() if "  " in line]
    assert max(len(line) for line in table_lines) < max(
        len(line) for line in piped.stdout.splitlines() if "  " in line
    )


def test_classify_reuses_a_classification_with_the_same_settings(tmp_path):
    run = probe(tmp_path)
    first = json.loads(
        CliRunner().invoke(main, ["classify", str(run), "--markers", "[[ANSWER]],[[NO_ANSWER]],[[X]]"]).stdout
    )
    again = json.loads(
        CliRunner().invoke(main, ["classify", str(run), "--markers", "[[ANSWER]],[[NO_ANSWER]],[[X]]"]).stdout
    )
    assert first["classification"] == again["classification"] == 1 and again["reused"] is True
    assert sorted(p.name for p in (run / "classifications").iterdir()) == ["1.jsonl"]
    own = json.loads(CliRunner().invoke(main, ["classify", str(run)]).stdout)
    assert own["reused"] is False and own["classification"] == 2  # back to the run's markers: new settings


def test_sequential_runs_read_as_decided_not_unfinished(tmp_path):
    def reply(request):
        name = request.json["messages"][0]["content"].split("=")[1].strip()
        return Reply("[[ANSWER]]\nok" if name == "b" else "ok")

    for name in "ab":
        (tmp_path / f"{name}.md").write_text(f"VERSION={name}\n")
    probeset = write_probeset(tmp_path / "p.toml", [(f"c{i}", f"q{i}", None) for i in range(6)])
    with LocalServer(reply) as server:
        result = CliRunner().invoke(
            main,
            [
                "run",
                str(probeset),
                "--prompt",
                str(tmp_path / "a.md"),
                "--prompt",
                str(tmp_path / "b.md"),
                "-m",
                f"openai:m@{server.url}/v1",
                "--retrieval",
                "none",
                "--until-decided",
                "--runs-dir",
                str(tmp_path / "runs"),
            ],
        )
    assert result.exit_code == 0, result.output
    assert re.search(r"24 samples \(at most \d+ if it ran to its cap\)", result.stdout)
    assert re.search(
        r"sequential on header_present: b better: B>A \(b's rate is higher\), decided at round 2 "
        r"\(cap \d+ rounds\)",
        result.stdout.replace("\n  ", " "),  # one wrapped line
    )
    assert "run: " in result.stderr.splitlines()[1]  # the run directory, said as the run starts


def test_the_readme_says_what_why_shows(demo_run):
    readme = (ROOT / "README.md").read_text()
    assert "is where to look next" not in readme
    result, _ = demo_run
    if "no phrase is over-represented at adjusted p <= 0.05 yet" in result.stdout:
        assert "not yet significant" in readme
    else:
        assert re.search(r"\d+ phrases? over-represented at adjusted p <= 0.05", result.stdout)


# -- the HTML at a glance, in headless Chromium ----------------------------------------------------------

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def measured(html: Path, width: int, profile: Path) -> tuple[int, str]:
    """(document.documentElement.scrollWidth in a frame this wide, the page's DOM) from headless Chromium.
    The page sits in an iframe because a headless window is never narrower than 500 px."""
    page = html.with_name(f"{html.stem}-{width}.html")
    page.write_text(re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", html.read_text()))
    frame = html.with_name(f"{html.stem}-{width}-frame.html")
    frame.write_text(
        f'<!doctype html><html><body style="margin:0"><iframe src="{page.name}" style="width:{width}px;'
        'height:1600px;border:0" onload="var d = this.contentDocument; document.body.setAttribute('
        "'data-scroll-width', d.documentElement.scrollWidth); document.body.setAttribute('data-dom', "
        'encodeURIComponent(d.documentElement.outerHTML))"></iframe></body></html>'
    )
    result = subprocess.run(
        [
            CHROMIUM,
            *CHROMIUM_FLAGS,
            "--allow-file-access-from-files",
            f"--user-data-dir={profile}",
            "--window-size=1400,900",
            "--dump-dom",
            frame.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    dom = urllib.parse.unquote(re.search(r'data-dom="([^"]*)"', result.stdout).group(1))
    return int(re.search(r'data-scroll-width="(\d+)"', result.stdout).group(1)), dom


@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium is not installed (apt-get install chromium)")
def test_the_html_fits_390_and_1280_px_and_reads_at_a_glance(demo_run, tmp_path):
    _, run = demo_run
    report = tmp_path / "report.html"
    compare = tmp_path / "compare.html"
    assert CliRunner().invoke(main, ["report", str(run), "-o", str(report)]).exit_code == 0
    assert (
        CliRunner()
        .invoke(
            main,
            [
                "compare",
                f"{run}#prompt=exception-only",
                f"{run}#prompt=always-header",
                "--all",
                "-o",
                str(compare),
            ],
        )
        .exit_code
        == 0
    )
    source = report.read_text()
    assert '<meta name="viewport" content="width=device-width, initial-scale=1">' in source
    assert "@media (max-width: 700px)" in source
    wide = tmp_path / "wide.html"  # the measure itself can see a page that does not fit
    wide.write_text('<!doctype html><html><body><div style="width:600px">x</div></body></html>')
    assert measured(wide, 390, tmp_path / "profile-wide")[0] > 390
    for page in (report, compare):
        for width in (390, 1280):
            scroll, dom = measured(page, width, tmp_path / f"profile-{width}")
            assert scroll <= width, (page.name, width, scroll)
    # Arms named by what differs, never a cut-down path; a verdict badge per metric in words.
    assert (
        ">A: exception-only 9/36<" in compare.read_text().replace("\n", "")
        or "A: exception-only" in compare.read_text()
    )
    assert "runs/" not in re.sub(
        r"<code>.*?</code>|<title>.*?</title>", "", compare.read_text().split("<svg")[1]
    )
    # In a family (every metric of the demo) the interval is at the level the verdict was decided at,
    # said in one phrase.
    assert re.search(
        r'class="badge better" data-metric="header_present">always-header better on '
        r"header_present: \+72 points, 95% CI \+\d+ to \+\d+, adjusted for 1\d comparisons<",
        compare.read_text(),
    )
    # The two-arm report opens with the comparison.
    head = source.split("<h2>Rates per arm</h2>")[0]
    assert "always-header against exception-only" in head and 'class="badge better"' in head
    # Invisible characters are labelled in ASCII, never the control pictures that render as boxes.
    assert "␄" not in source and "␍" not in source and '<span class="inv">no newline at end</span>' in source
    shots = {}
    for width in (390, 1280):
        shot = tmp_path / f"report-{width}.png"
        shown = report if width > 500 else report.with_name(f"report-{width}-frame.html")  # the 390 px frame
        subprocess.run(
            [
                CHROMIUM,
                *CHROMIUM_FLAGS,
                "--allow-file-access-from-files",
                f"--user-data-dir={tmp_path / 'shots'}",
                f"--window-size={max(width, 500)},1600",
                f"--screenshot={shot}",
                shown.as_uri(),
            ],
            capture_output=True,
            timeout=120,
            check=True,
        )
        shots[width] = shot
        assert shot.stat().st_size > 10_000
    kept = os.environ.get("PROBE_SCREENSHOTS")
    if kept:
        for shot in shots.values():
            shutil.copy(shot, Path(kept) / shot.name)
