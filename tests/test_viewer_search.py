"""Where a person acts on a run: the viewer's search and filters (in the URL, JSON at `.json`),
provenance on every page that shows outputs (the same object as `probe show` and the incident
file), the incident file (`probe export --case --arm`: passages, expected outcome, failed metrics,
identical outputs grouped) and the verdict column of `probe runs`. One run recorded for real
through the OpenAI SDK against the local model server."""

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from servers import LocalServer, Reply

from promptprobe.cli import main
from promptprobe.config import load_config
from promptprobe.engine.run import RunOptions, run_probe
from promptprobe.models import parse_model_spec
from promptprobe.probeset import load_probeset
from promptprobe.prompts import load_prompt

pytest.importorskip("starlette")
from starlette.testclient import TestClient  # noqa: E402

from promptprobe.viewer.app import create_app  # noqa: E402

PROBESET = """repeats = 3
[[case]]
id = "reset"
question = "How do I reset my password?"
expect = "answer"
tags = ["account"]
[[case]]
id = "price"
question = "What does the Enterprise plan cost?"
expect = "no_answer"
tags = ["pricing"]
[[case]]
id = "invoice"
question = "Can I pay by invoice?"
tags = ["billing", "pricing"]
"""
PASSAGES = [{"id": "pricing-faq", "text": "Enterprise pricing is agreed with our sales team.", "score": 0.9},
            {"id": "billing", "text": "Invoices are sent at the start of each month.", "score": 0.5}]
# (prompt, case) -> the replies of repeats 1, 2, 3 (None: an HTTP 400, a failed sample)
REPLIES = {
    ("old", "reset"): ["[[ANSWER]]\nUse the reset link.\n", "[[ANSWER]]\nUse the reset link.\n", "Use the reset link.\n"],
    ("old", "price"): ["It costs $99.\n", "It costs $99.\n", "It costs $99.\n"],
    ("old", "invoice"): ["[[ANSWER]]\nYes, by invoice.\n"] * 3,
    ("new", "reset"): ["[[ANSWER]]\nUse the reset link.\n"] * 3,
    ("new", "price"): ["[[NO_ANSWER]]\nPricing is not in the help center.\n"] * 2 + [None],
    ("new", "invoice"): ["[[ANSWER]]\nYes, by invoice.\n", "Sorry, ask billing.\n", "[[ANSWER]]\nYes, by invoice.\n"],
}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    base = tmp_path_factory.mktemp("search")
    (base / "p.toml").write_text(PROBESET)
    for name in ("old", "new"):
        (base / f"{name}.md").write_text(f"VERSION={name}\n{{{{sources}}}}\n")
    questions = {"How do I reset my password?": "reset", "What does the Enterprise plan cost?": "price",
                 "Can I pay by invoice?": "invoice"}
    seen: dict = {}

    def reply(request):
        prompt = request.json["messages"][0]["content"].split("\n")[0].split("=")[1]
        case = questions[request.json["messages"][-1]["content"]]
        seen[(prompt, case)] = seen.get((prompt, case), -1) + 1
        text = REPLIES[(prompt, case)][seen[(prompt, case)]]
        return Reply(status=400, body=b'{"error": {"message": "bad request"}}') if text is None else Reply(text)

    (base / "probe.toml").write_text(
        '[retrieval]\nkind = "python"\nfunction = "search_passages:retrieve"\n'
    )
    (base / "search_passages.py").write_text(
        "def retrieve(question, history):\n"
        f"    return {PASSAGES!r}\n"
    )
    import sys

    sys.path.insert(0, str(base))
    try:
        with LocalServer(reply) as server:
            path = run_probe(
                load_probeset(base / "p.toml"),
                [load_prompt(base / "old.md"), load_prompt(base / "new.md")],
                [parse_model_spec(f"openai:m@{server.url}/v1")],
                load_config(base / "probe.toml"),
                RunOptions(runs_dir=base / "runs", seed=3, concurrency=1, max_attempts=1),
            ).path
    finally:
        sys.path.remove(str(base))
    return path


@pytest.fixture(scope="module")
def client(run):
    with TestClient(create_app(run.parent, warm=False), base_url="http://127.0.0.1") as client:
        yield client


def samples_of(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]


def output_of(run: Path, raw: dict) -> str:
    """A sample's output read straight from its pack at its recorded offset."""
    with open(run / raw["pack"], "rb") as pack:
        pack.seek(raw["offset"])
        data = pack.read(raw["bytes"])
    assert hashlib.sha256(data).hexdigest() == raw["sha256"]
    return data.decode()


def brute_force(run: Path, words: str = "", header: str | None = None, prompt: str | None = None,
                cases: set[str] | None = None) -> set[str]:
    """The sample ids a search should find, read straight from samples.jsonl and the raw files."""
    questions = {"reset": "How do I reset my password?", "price": "What does the Enterprise plan cost?",
                 "invoice": "Can I pay by invoice?"}
    found = set()
    for sample in samples_of(run):
        text = output_of(run, sample["raw"]) if sample.get("raw") else sample["error"]["message"]
        state = "error" if sample.get("error") else sample["header"]["header"]
        if words and words.casefold() not in (text + "\n" + questions[sample["case_id"]] + sample["case_id"]).casefold():
            continue
        if (header and state != header) or (prompt and sample["prompt"] != prompt):
            continue
        if cases is not None and sample["case_id"] not in cases:
            continue
        found.add(sample["sample_id"])
    return found


def found_ids(view: dict) -> set[str]:
    return {sample_id for result in view["results"] for sample_id in result["group"]["sample_ids"]}


def test_search_finds_words_in_outputs_and_questions_and_filters_stack(client, run):
    rid = run.name
    url = f"/runs/{rid}/search.json"
    view = client.get(url, params={"q": "RESET LINK"}).json()  # case-folded
    assert found_ids(view) == brute_force(run, "reset link") and view["matched"]["samples"] == 6
    # identical outputs are one group per (case, arm), with their count
    counts = {(r["arm"]["index"], r["group"]["header"]): r["group"]["count"] for r in view["results"]}
    assert counts == {(1, "present"): 2, (1, "absent"): 1, (2, "present"): 3}
    # a word of a question finds every sample of that case
    assert found_ids(client.get(url, params={"q": "enterprise plan"}).json()) == brute_force(run, "enterprise plan")
    assert len(brute_force(run, "enterprise plan")) == 6
    # tag, header and arm stack
    view = client.get(url, params={"tag": "pricing", "header": "absent", "arm": "2"}).json()
    assert found_ids(view) == brute_force(run, header="absent", prompt="new", cases={"price", "invoice"}) == {"invoice.r2.a2"}
    view = client.get(url, params={"header": "error"}).json()
    assert found_ids(view) == {"price.r3.a2"} and view["results"][0]["group"]["error"].startswith("http_status")


def test_failing_only_on_one_metric_or_on_any(client, run):
    url = f"/runs/{run.name}/search.json"
    present = client.get(url, params={"failing": "1", "metric": "header_present"}).json()
    # header_present fails where the header is not first, and on the failed sample
    expected = {s["sample_id"] for s in samples_of(run) if s.get("error") or s["header"]["header"] != "present"}
    assert found_ids(present) == expected and len(expected) == 6
    recall = client.get(url, params={"failing": "1", "metric": "refusal_recall"}).json()
    assert found_ids(recall) == {"price.r1.a1", "price.r2.a1", "price.r3.a1", "price.r3.a2"}
    every = client.get(url, params={"failing": "1"}).json()
    assert found_ids(every) >= found_ids(present) | found_ids(recall)
    applies = client.get(url, params={"metric": "refusal_recall"}).json()  # only the cases it applies to
    assert {r["case_id"] for r in applies["results"]} == {"price"}


def test_the_filters_are_in_the_url_and_the_page_shows_them(client, run):
    rid = run.name
    html = client.get(f"/runs/{rid}/search", params={"q": "invoice", "failing": "1", "tag": "billing"}).text
    assert 'name="q" value="invoice"' in html and 'name="failing" value="1" checked' in html
    assert "<option selected>billing</option>" in html
    assert f'href="/runs/{rid}/search.json?q=invoice&amp;failing=1&amp;tag=billing"' in html  # this view as JSON
    assert 'id="matched" data-samples="1"' in html  # the one failing invoice sample
    assert client.get(f"/runs/{rid}/search.json", params={"header": "sideways"}).status_code == 422
    assert client.get(f"/runs/{rid}/search.json", params={"metric": "nope"}).json()["error"].startswith("no metric")
    assert client.get(f"/runs/{rid}/search.json", params={"arm": "3"}).status_code == 422
    assert f'href="/runs/{rid}/search"' in client.get(f"/runs/{rid}").text  # the run page links to it


def test_every_page_with_outputs_carries_the_same_provenance(client, run):
    rid = run.name
    manifest = json.loads((run / "manifest.json").read_text())
    old_sha = hashlib.sha256((run / "prompts" / "old.md").read_bytes()).hexdigest()
    pages = [f"/runs/{rid}", f"/runs/{rid}/cases/price", f"/runs/{rid}/why?arm=1", f"/runs/{rid}/search",
             f"/compare?a={rid}:1&b={rid}:2"]
    for url in pages:
        path, _, query = url.partition("?")
        data = client.get(path + ".json" + (f"?{query}" if query else "")).json()
        sources = data["provenance"] if isinstance(data["provenance"], list) else [data["provenance"]]
        first = next(a for p in sources for a in p["arms"] if a["prompt"]["name"] == "old")
        assert first["prompt"]["sha256"] == old_sha == manifest["prompts"][0]["sha256"], url
        assert first["prompt"]["text"] == (run / "prompts" / "old.md").read_text()
        assert first["endpoint"]["from"] == "spec" and first["endpoint"]["url"].endswith("/v1")
        assert sources[0]["probeset"]["sha256"] == manifest["probeset"]["sha256"]
        assert sources[0]["parameters"]["repeats"] == 3 and sources[0]["started"] == manifest["created"]
        html = client.get(url).text
        assert f"prompt old (sha256 {old_sha})" in html and 'class="prompt-text"' in html, url
    shown = CliRunner().invoke(main, ["show", str(run), "--case", "price", "--format", "json"])
    assert json.loads(shown.stdout)["provenance"]["arms"][0]["lines"] == first["lines"]
    terminal = CliRunner().invoke(main, ["show", str(run), "--case", "price"]).stdout
    provenance_block = terminal.split("== provenance\n")[1]
    for name in ("old", "new"):  # each prompt's text, indented under its own prompt line
        sha = hashlib.sha256((run / "prompts" / f"{name}.md").read_bytes()).hexdigest()
        under = provenance_block.split(f"  prompt {name} (sha256 {sha})\n\n")[1]
        text = (run / "prompts" / f"{name}.md").read_text()
        assert under.startswith("".join(f"    {line}\n" for line in text.splitlines()) + "\n  model ")


def test_the_incident_file_groups_outputs_and_keeps_one_arm(client, run):
    md = CliRunner().invoke(main, ["export", str(run), "--case", "price", "--arm", "prompt=old"])
    assert md.exit_code == 0, md.output
    text = md.stdout
    assert "Expected: a refusal: the no-answer header first." in text
    assert PASSAGES[0]["text"] in text and "Every repeat got 2 passage(s):" in text  # the passages' text
    assert "Failed metrics" in text and "refusal_recall 3 of 3" in text
    assert "#### Output 1: 3 of 3 sample(s), header absent" in text and text.count("#### Output") == 1
    assert "Samples: `price.r1.a1`, `price.r2.a1`, `price.r3.a1`" in text
    assert "### Arm 1: old" in text and "Arm 2" not in text and "- prompt old (sha256 " in text
    data = json.loads(CliRunner().invoke(main, ["export", str(run), "--case", "price", "--arm", "2",
                                                "--format", "json"]).stdout)
    (case,) = data["cases"]
    (arm,) = case["arms"]
    assert arm["name"] == "new" and [g["count"] for g in arm["groups"]] == [2, 1]
    assert arm["groups"][1]["error"]["kind"] == "http_status" and arm["groups"][1]["sample_ids"] == ["price.r3.a2"]
    assert {m["metric"]: (m["failed"], m["of"]) for m in arm["failed_metrics"]}["refusal_recall"] == (1, 3)
    assert [a["index"] for a in data["provenance"]["arms"]] == [2]
    bad = CliRunner().invoke(main, ["export", str(run), "--case", "price", "--arm", "prompt=nope"])
    assert bad.exit_code == 2 and "matches no arm" in bad.stderr
    # the viewer's download is the same file
    assert client.get(f"/runs/{run.name}/cases/price/incident.md").status_code == 200


def test_probe_runs_has_a_verdict_column(run, tmp_path):
    folder = tmp_path / "runs"
    shutil.copytree(run, folder / run.name)
    data = json.loads(CliRunner().invoke(main, ["runs", "--runs-dir", str(folder), "--json"]).stdout)
    (line,) = data["runs"]
    assert set(line) >= {"run", "id", "probeset", "arms", "status", "samples", "errors", "created", "verdict"}
    compared = json.loads(CliRunner().invoke(main, ["compare", f"{run}#prompt=old", f"{run}#prompt=new", "--all",
                                                    "--json"]).stdout)["results"][0]
    assert line["verdict"]["metric"] == compared["metric"] and line["verdict"]["verdict"] == compared["verdict"]
    table = CliRunner(env={"COLUMNS": "160"}).invoke(main, ["runs", "--runs-dir", str(folder)]).stdout
    assert table.splitlines()[0].split()[-1] == "verdict"
    assert line["verdict"]["short"].split()[0] in table


def test_search_follows_the_latest_reclassification(run, tmp_path):
    folder = tmp_path / "runs"
    copy = folder / run.name
    shutil.copytree(run, copy)
    # "Use" and "It" as the only markers: the reset outputs without a header now start with one.
    result = CliRunner().invoke(main, ["classify", str(copy), "--markers", "Use,It", "--no-answer", "It"])
    assert result.exit_code == 0, result.output
    with TestClient(create_app(folder, warm=False), base_url="http://127.0.0.1") as client:
        view = client.get(f"/runs/{copy.name}/search.json", params={"header": "present"}).json()
    assert found_ids(view) == {"reset.r3.a1", "price.r1.a1", "price.r2.a1", "price.r3.a1"}


def test_the_index_reads_packs_in_blocks_as_the_raw_reader_reads_each_output(tmp_path):
    """read_many (the search index's reader) gives each location's exact bytes, across packs and
    blocks and in any order, and None where a location names no pack of the run or lies past its end."""
    from promptprobe.pack import PackWriter, RawReader, read_many

    (tmp_path / "raw").mkdir()
    writer = PackWriter(tmp_path, 0o600, limit=300)  # a new pack every few outputs
    blobs = [(f"s{i}", ("x" * (i % 37) + f"output {i} \u00e9\n").encode()) for i in range(60)]
    locations = [writer.append(sid, "txt", data) for sid, data in blobs]
    writer.sync()
    writer.close()
    assert len({at["pack"] for at in locations}) > 3
    order = list(reversed(range(60)))
    wanted = [locations[i] for i in order]
    past_end = {**locations[-1], "offset": locations[-1]["offset"] + 10_000}
    outside = {**locations[0], "pack": "raw/../manifest.json"}
    found = read_many(tmp_path, [*wanted, past_end, outside], block=100)  # several blocks a pack
    reader = RawReader(tmp_path)
    assert found[:60] == [reader.read({"sample_id": blobs[i][0], "raw": locations[i]}) for i in order]
    assert found[:60] == [blobs[i][1] for i in order] and found[60:] == [None, None]


def _columns(index) -> tuple:
    index.outputs.read_unread()
    found = index.columns
    return (found.sample_ids, list(found.arm), list(found.case), list(found.state), found.fails,
            found.applies, [index.texts[o] for o in found.output], index.offset)


def test_the_index_fed_by_the_counting_pass_is_the_index_read_on_its_own(run, tmp_path):
    """The viewer's newest runs are indexed by their counting pass (each record parsed once): the
    same columns as an index that reads samples.jsonl itself, while the run grows, when its
    counting starts over, and past a blank line (from which the index reads on its own)."""
    from promptprobe.counts import LiveCounts
    from promptprobe.views.search import SearchIndex

    copy = tmp_path / run.name
    shutil.copytree(run, copy)
    samples = copy / "samples.jsonl"
    lines = samples.read_bytes().splitlines(keepends=True)
    samples.write_bytes(b"".join(lines[:7]))
    followed = SearchIndex(copy)
    live = LiveCounts(copy, follower=followed)

    def both_agree(fed: bool = True) -> None:
        table = live.refresh()
        # fed: the counting gave it every line; past a blank line it reads on its own
        assert (followed.offset == samples.stat().st_size) is fed
        alone = SearchIndex(copy)
        alone.update(table)
        followed.update(table)  # reads only what the counting left to it (nothing, or past a gap)
        assert _columns(followed) == _columns(alone) and followed.offset == samples.stat().st_size

    both_agree()
    assert len(followed.columns.sample_ids) == 7
    with samples.open("ab") as handle:  # the run grows
        handle.write(b"".join(lines[7:12]))
    both_agree()
    samples.write_bytes(b"".join(lines[:12]))  # replaced: the counting starts over, so does the index
    both_agree()
    with samples.open("ab") as handle:
        handle.write(b"\n" + b"".join(lines[12:]))
    both_agree(fed=False)
    assert len(followed.columns.sample_ids) == len(lines)
    searched = {sid for sid, o in zip(followed.columns.sample_ids, followed.columns.output, strict=True)
                if "reset link" in followed.texts[o]}
    assert searched == brute_force(run, "reset link")  # the same samples, without the blank line
