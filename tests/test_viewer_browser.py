"""`probe view` in real Chromium (playwright, the system's browser; never a download) at 390 and
1280 px: a new user's path from the runs list to an incident file on the demo run, discordant
cases first, a phrase filter, a sample appended while the page is open, nothing wider than the
window; and the static HTML report on a phone (arm names on each output group, why table words
whole, forest labels inside their plot)."""

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from viewer_support import (
    CHROMIUM,
    CHROMIUM_ARGS,
    GOOD,
    ab_replies,
    browser_missing,
    record,
    serving,
    still_running,
)

from promptprobe.cli import main

pytestmark = pytest.mark.skipif(browser_missing() is not None, reason=browser_missing() or "")

WIDTHS = (390, 1280)
LONG_MODELS = ["acme-helpdesk-model-with-a-rather-long-name-v2", "acme-helpdesk-model-with-a-rather-long-name-v3"]

WORDS_BROKEN = """(selector) => {
  const broken = [];
  document.querySelectorAll(selector).forEach((cell) => {
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      for (const match of node.data.matchAll(/\\S+/g)) {
        const range = document.createRange();
        range.setStart(node, match.index);
        range.setEnd(node, match.index + match[0].length);
        const lines = new Set(Array.from(range.getClientRects()).map((r) => Math.round(r.top)));
        if (lines.size > 1) broken.push(match[0]);
      }
    }
  });
  return broken;
}"""

LABELS_CUT = """() => Array.from(document.querySelectorAll("svg.forest")).flatMap((svg) => {
  const width = svg.viewBox.baseVal.width;
  return Array.from(svg.querySelectorAll("text")).filter((text) => {
    const box = text.getBBox();
    const rect = text.getBoundingClientRect();
    return box.x < -0.5 || box.x + box.width > width + 0.5 || rect.left < 0 || rect.right > window.innerWidth;
  }).map((text) => text.textContent);
})"""


@pytest.fixture(scope="module")
def site(tmp_path_factory, demo_run):
    """A runs directory with the demo run, a two-arm run discordant both ways, a run of two models
    with long specs, and a run that will grow; the viewer serving it."""
    base = tmp_path_factory.mktemp("browser")
    folder = base / "runs"
    folder.mkdir()
    _, demo = demo_run
    shutil.copytree(demo, folder / demo.name)
    cases = [(f"c{i}", f"question number {i}?") for i in range(6)]
    ab = record(base / "ab", ab_replies(6, 2), cases, repeats=2)
    long = record(base / "long", {"v": [GOOD, "ok\n[[ANSWER]]\n"]}, cases[:3], repeats=2, models=LONG_MODELS)
    for run in (ab, long):
        shutil.copytree(run, folder / run.name)
    grows = folder / "20991231T000000-grows-000000"
    shutil.copytree(ab, grows)
    with serving(folder) as url:
        yield {"url": url, "folder": folder, "demo": demo.name, "ab": ab.name, "long": long.name, "grows": grows}


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def pages(browser):
    """One page per width, reused by every test of the module."""
    opened = {width: browser.new_page(viewport={"width": width, "height": 900}) for width in WIDTHS}
    for page in opened.values():
        page.set_default_timeout(20_000)
    yield opened
    for page in opened.values():
        page.close()


def fits(page) -> bool:
    return page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")


def test_a_new_user_gets_from_the_runs_list_to_an_incident_file_without_typing(site, pages, tmp_path):
    page = pages[1280]
    page.goto(site["url"])
    page.get_by_role("link", name=site["demo"]).click()
    # The demo's verdict, in words.
    badge = page.locator('#verdicts li.badge[data-metric="header_present"]')
    said = badge.inner_text()
    assert "always-header" in said and "better" in said and "header_present: +72 points" in said
    assert badge.get_attribute("class") == "badge better"
    # A cell of the grid: that case's outputs for that arm, identical ones grouped with their counts.
    cell = page.locator('table.grid[data-metric="header_present"] td.cell[data-arm="1"]').first
    case_id, n = cell.get_attribute("data-case"), int(cell.get_attribute("data-n"))
    cell.locator("a").click()
    page.wait_for_url(f"**/cases/{case_id}?arm=1")
    counts = [int(c) for c in page.locator(".group").evaluate_all("gs => gs.map(g => g.dataset.count)")]
    assert sum(counts) == n and page.locator(".group .count").count() == len(counts)
    # The two prompts side by side, cases where exception-only fails and always-header passes first.
    page.go_back()
    page.locator("a.go-compare").click()
    page.wait_for_url("**/compare?**")
    first = page.locator("section.case").first
    assert first.get_attribute("data-better") == "b"
    assert first.locator("tr.heads th").all_inner_texts() == ["A: exception-only", "B: always-header"]
    # That case's page, and its incident file: what `probe export --case` writes.
    chosen = first.get_attribute("data-case")
    first.locator("h3 a").click()
    page.wait_for_url(f"**/cases/{chosen}")
    with page.expect_download() as download:
        page.locator("a.incident").click()
    written = tmp_path / "incident.md"
    assert CliRunner().invoke(main, ["export", str(site["folder"] / site["demo"]), "--case", chosen, "-o",
                                     str(written)]).exit_code == 0
    assert Path(download.value.path()).read_bytes() == written.read_bytes()
    assert download.value.suggested_filename == f"{site['demo']}-{chosen}.md"


def test_the_compare_page_puts_discordant_cases_first(site, pages):
    page = pages[390]
    page.goto(f"{site['url']}/compare?a={site['ab']}:1&b={site['ab']}:2")
    order = page.locator("section.case").evaluate_all("s => s.map(c => [c.dataset.case, c.dataset.better || null])")
    assert order == [["c2", "b"], ["c3", "b"], ["c4", "b"], ["c0", "a"], ["c1", "a"], ["c5", None]]
    # On a phone the two sides stack: each still says whose outputs it holds.
    names = page.locator("section.case").first.locator(".armname")
    assert names.all_inner_texts() == ["A: old", "B: new"] and all(n.is_visible() for n in names.all())
    assert fits(page)


def test_a_phrase_filters_the_failing_outputs(site, pages):
    page = pages[1280]
    page.goto(f"{site['url']}/runs/{site['ab']}/why?arm=2")
    assert page.locator("#failing .group").count() == 2
    page.locator("table.why td.phrase a", has_text="support@acme.example").first.click()
    page.wait_for_url("**phrase=**")
    texts = page.locator("#failing .group pre.raw").all_inner_texts()
    assert len(texts) == 1 and "support@acme.example" in texts[0]


def test_a_sample_appended_to_a_run_appears_without_a_reload(site, browser):
    grows = site["grows"]
    runs_page = browser.new_page(viewport={"width": 1280, "height": 900})
    run_page = browser.new_page(viewport={"width": 390, "height": 900})
    try:
        runs_page.goto(site["url"])
        run_page.goto(f"{site['url']}/runs/{grows.name}")
        assert runs_page.locator(f'[id="run-{grows.name}"] .samples').inner_text() == "24 of 24"
        cell = 'table.grid[data-metric="header_present"] td.cell[data-case="c0"][data-arm="1"]'
        assert run_page.locator(cell).get_attribute("data-n") == "2"
        runs_page.evaluate("window.__same_document = true")
        samples = grows / "samples.jsonl"
        last = next(json.loads(line) for line in samples.read_text().splitlines()
                    if json.loads(line)["case_id"] == "c0" and json.loads(line)["prompt"] == "old")
        last["sample_id"], last["repeat"] = "c0.r3.a1", 3
        with open(samples, "a") as handle:
            handle.write(json.dumps(last) + "\n")
        # Waiting for the DOM to change (the pages poll every 0.3 s here); the CSP forbids eval,
        # so the waits are locators, not wait_for_function.
        runs_page.locator(f'[id="run-{grows.name}"] .samples', has_text="25 of 24").wait_for()
        run_page.locator(f'{cell}[data-n="3"]').wait_for()
        assert run_page.locator("#run-meta .samples").inner_text() == "25"
        assert runs_page.evaluate("window.__same_document === true")  # updated in place, not reloaded
    finally:
        runs_page.close()
        run_page.close()


def test_no_page_is_wider_than_the_window(site, pages):
    demo, ab, long = site["demo"], site["ab"], site["long"]
    addresses = [
        "/", f"/runs/{demo}", f"/runs/{demo}/cases/pay-bitcoin", f"/runs/{demo}/cases/pay-bitcoin?arm=2",
        f"/compare?a={demo}:1&b={demo}:2", f"/runs/{demo}/why?arm=1", f"/runs/{long}",
        f"/compare?a={long}:1&b={long}:2", f"/compare?a={ab}:1&b={long}:2", "/compare",
        f"/runs/{demo}/search?q=support&failing=1", f"/runs/{long}/search",
    ]  # fmt: skip
    for width, page in pages.items():
        for address in addresses:
            assert page.goto(site["url"] + address).ok, (width, address)
            page.evaluate("document.querySelectorAll('details').forEach(d => d.open = true)")
            assert fits(page), (width, address)
            assert page.evaluate(LABELS_CUT) == [], (width, address)
            assert page.evaluate(WORDS_BROKEN, "table.why td") == [], (width, address)


def test_the_static_report_reads_on_a_phone(site, pages, tmp_path):
    """Issue 26: at 390 px every output group carries its arm's name, the why table breaks no word
    or number, and forest labels of long model specs are not clipped (at 1280 px neither)."""
    long = site["folder"] / site["long"]
    demo = site["folder"] / site["demo"]
    files = {}
    for name, run in (("long", long), ("demo", demo)):
        files[name] = tmp_path / f"{name}.html"
        assert CliRunner().invoke(main, ["report", str(run), "-o", str(files[name])]).exit_code == 0
    files["compare"] = tmp_path / "compare.html"
    arms = json.loads((long / "manifest.json").read_text())["arms"]
    a, b = (f"{long}#model={arm['model']}" for arm in arms)
    assert CliRunner().invoke(main, ["compare", a, b, "--all", "-o", str(files["compare"])]).exit_code == 0
    for width, page in pages.items():
        for name, file in files.items():
            page.goto(file.as_uri())
            page.evaluate("document.querySelectorAll('details').forEach(d => d.open = true)")
            assert fits(page), (width, name)
            assert page.evaluate(LABELS_CUT) == [], (width, name)
            assert page.evaluate(WORDS_BROKEN, "table.why td") == [], (width, name)
            # Each side of each case is named: by the column heads on a wide screen, by its own
            # heading where the sides stack.
            sides = page.locator("table.outputs td.side")
            assert sides.count() > 0
            named = sides.evaluate_all(
                """tds => tds.map(td => td.querySelector('.armname').offsetHeight > 0
                   || td.closest('table').querySelector('tr.heads').offsetHeight > 0)"""
            )
            assert all(named), (width, name)
            if width == 390:
                assert all(sides.evaluate_all("tds => tds.map(td => td.querySelector('.armname').offsetHeight > 0)"))
    page = pages[390]
    page.goto(files["long"].as_uri())
    labels = page.locator("svg.forest g.arm").evaluate_all("gs => gs.map(g => g.dataset.label)")
    assert any(label.startswith(f"openai:{LONG_MODELS[0]}@http://127.0.0.1:") for label in labels)


def test_two_arms_of_two_runs_are_chosen_on_the_page(site, pages):
    page = pages[1280]
    page.goto(f"{site['url']}/compare")
    page.select_option('select[name="a"]', f"{site['ab']}:1")
    page.select_option('select[name="b"]', f"{site['long']}:2")
    page.get_by_role("button", name="Compare").click()
    page.wait_for_url("**/compare?a=**")
    assert page.locator("#verdicts li.badge").count() >= 1
    assert page.locator("section.case").count() == 6  # the union of both probe sets' cases
    sides = page.locator("section.case").first.locator(".armname").all_inner_texts()
    assert sides[0].startswith("A: old") and sides[1].startswith("B: v")  # named by what differs


def test_the_search_filters_are_chosen_on_the_page_and_kept_in_its_address(site, pages, browser):
    """Issue 35: words, failing only, a metric and an arm chosen in the form land in the address,
    the results are those the page's JSON lists, and the address opened afresh shows the same."""
    demo = site["demo"]
    for width, page in pages.items():
        page.goto(f"{site['url']}/runs/{demo}")
        page.locator("a.go-search").click()
        page.wait_for_url(f"**/runs/{demo}/search")
        page.fill('input[name="q"]', "Support@Acme")
        page.check('input[name="failing"]')
        page.select_option('select[name="metric"]', "header_present")
        page.select_option('select[name="arm"]', "1")
        page.get_by_role("button", name="search").click()
        page.wait_for_url("**/search?q=**")
        address = page.url
        assert "q=Support%40Acme" in address and "failing=1" in address and "metric=header_present" in address
        assert "arm=1" in address and "header=" in address  # every field of the form, in the address
        data = page.request.get(address.replace("/search?", "/search.json?")).json()
        groups = page.locator("#results .group")
        assert groups.count() == len(data["results"]) > 0
        assert int(page.locator("#matched").get_attribute("data-samples")) == data["matched"]["samples"]
        assert all("support@acme" in text.lower() for text in page.locator("#results pre.raw").all_inner_texts())
        assert set(page.locator("#results .group").evaluate_all("gs => gs.map(g => g.dataset.header)")) <= {
            "absent", "misplaced", "empty", "error"}  # failing header_present: never a present header
        again = browser.new_page(viewport={"width": width, "height": 900})
        try:
            again.goto(address)  # a link to this view shows this view
            assert again.locator("#results .group").count() == groups.count()
            assert again.locator('input[name="failing"]').is_checked()
            assert again.input_value('select[name="arm"]') == "1"
            assert fits(again), width
        finally:
            again.close()


def test_a_running_fixed_size_run_shows_every_verdict_interim(site, pages):
    """Issue 35: the verdicts of a fixed-size run still running are marked interim (counted of
    planned) and grey, not green or red, in the runs list and on the run page, at both widths."""
    running = site["folder"] / "20991230T000000-running-000000"
    shutil.copytree(site["folder"] / site["ab"], running)
    try:
        with still_running(running, planned=240):
            for width, page in pages.items():
                page.goto(site["url"])
                badge = page.locator(f'[id="run-{running.name}"] .verdict-cell .badge')
                assert badge.get_attribute("class") == "badge interim", width
                assert badge.inner_text().startswith("interim, 24 of 240 samples: "), width
                assert badge.evaluate("b => getComputedStyle(b).backgroundColor") == "rgb(244, 244, 244)"
                page.goto(f"{site['url']}/runs/{running.name}")
                badges = page.locator("#verdicts li.badge")
                assert badges.count() > 0
                assert set(badges.evaluate_all("bs => bs.map(b => b.className)")) == {"badge interim"}, width
                note = page.locator("#verdicts .interim-note")
                assert note.is_visible() and "24 of 240 samples counted" in note.inner_text()
                # the warning is read before any verdict: it comes first in the page
                assert note.evaluate("(n) => !!(n.compareDocumentPosition(document.querySelector("
                                     "'#verdicts li.badge')) & Node.DOCUMENT_POSITION_FOLLOWING)")
                assert fits(page), width
    finally:
        shutil.rmtree(running)
