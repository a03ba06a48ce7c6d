"""Checks beyond the header, each through a real run: production filter parity, citations,
expected sources with ranks and top-k, paraphrases, assertions, tags, retrieval drift, empty
retrievals, and offline reclassification that moves samples and changes the report."""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import ROOT, run_dir_of
from servers import LocalServer, Reply

from promptprobe.checks.citations import scan
from promptprobe.cli import main
from promptprobe.errors import InputError
from promptprobe.jsonio import read_jsonl
from promptprobe.probeset import parse_probeset

TESTS = Path(__file__).parent


@pytest.fixture(autouse=True)
def production_code_on_the_path(monkeypatch):
    monkeypatch.syspath_prepend(str(TESTS))


# -- citations --------------------------------------------------------------------------------

CITATIONS = [
    # (text, passages given, valid numbers, stripped count)
    ("See [1] and [2].", 3, [1, 2], 0),
    ("Adjacent [1][2] both count.", 2, [1, 2], 0),
    ("Out of range [4].", 3, [], 1),
    ("Zero is no passage [0].", 3, [], 1),
    ("Nested [1[99]] leaves one valid citation.", 3, [1], 1),  # the count comes from the cleaned text
    ("Twice nested [[99]9] strips twice.", 3, [], 2),
    ("Repeated [2] and [2] count once.", 3, [2], 0),
    ("A range [1-3] is not a citation.", 3, [], 0),
    ("Full-width ［1］ brackets are not ASCII ones.", 3, [], 0),
    ("Code `arr[1]` is not a citation [2].", 3, [2], 0),
    ("Fenced\n```\nx = y[3]\n```\nthen [1].", 3, [1], 0),
    ("A link [1](https://acme.example) is not a citation.", 3, [], 0),
    ("Mixed [1] [7] [3]", 3, [1, 3], 1),
    ("No passages at all [1].", 0, [], 1),
]


@pytest.mark.parametrize("text,passages,valid,stripped", CITATIONS, ids=[c[0][:30] for c in CITATIONS])
def test_citation_scan(text, passages, valid, stripped):
    result = scan(text, passages, r"\[(\d+)\]")
    assert result["valid"] == valid
    assert result["cited_source_count"] == len(valid)
    assert result["stripped_citation_count"] == stripped


def test_an_invalid_citation_pattern_or_case_regex_is_refused(tmp_path):
    config = tmp_path / "probe.toml"
    config.write_text("[citations]\npattern = '[('\n")
    result = CliRunner().invoke(main, ["run", str(ROOT / "probes" / "refusal-header.toml"), "--prompt",
                                       str(ROOT / "prompts" / "always-header.md"), "--config", str(config),
                                       "--model", "openai:m@http://x/v1"])
    assert result.exit_code == 2 and "[citations] pattern '[(' is not a valid regex" in result.stderr
    with pytest.raises(InputError, match="case 'a': regex '\\(unclosed' is not a valid regular expression"):
        parse_probeset(b'[[case]]\nid = "a"\nquestion = "q"\nregex = ["(unclosed"]\n', Path("p.toml"))


# -- one run with every check ---------------------------------------------------------------

PROBESET = """
[[case]]
id = "price"
question = "How much is Team?"
expect = "answer"
tags = ["pricing"]
must_retrieve = ["pricing"]
contains = ["$20"]
not_contains = ["[[NO_ANSWER]]"]
regex = ['^\\[\\[ANSWER\\]\\]\\n']

[[case]]
id = "price-paraphrase"
question = "What does the Team plan cost?"
expect = "answer"
tags = ["pricing", "paraphrase"]
must_retrieve = ["pricing"]
ignore_case = true
contains = ["TEAM"]

[[case]]
id = "refuse"
question = "Who is the CEO?"
expect = "no_answer"
tags = ["unanswerable"]
history = [{ role = "user", content = "Hi" }, { role = "assistant", content = "Hello" }]

[[case]]
id = "nothing"
question = "zzz"
expect = "no_answer"
"""

REPLIES = {
    "How much is Team?": "[[ANSWER]]\nTeam is $20 per user [1][9].",
    "What does the Team plan cost?": "[[ANSWER]]\nThe team plan costs $20 [2].",
    "Who is the CEO?": "I'm sorry, I can't say.\n[[NO_ANSWER]]",  # misplaced: production logs "answered"
    "zzz": "[[NO_ANSWER]]\nNothing found.",
}


def search_for(answers: dict[str, list[str]]):
    def search(request):
        ids = answers.get(request.json["q"], [])
        return Reply(body=json.dumps({"results": [{"id": i, "text": f"text of {i}", "score": 1.0} for i in ids]}).encode())

    return search


FIRST_SEARCH = {"How much is Team?": ["pricing", "billing"], "What does the Team plan cost?": ["billing", "faq", "pricing"],
                "Who is the CEO?": ["about"], "zzz": []}


def write_target(tmp_path: Path, retrieval_url: str, filter_function: str = "prodcode.widget:filter_reply") -> Path:
    path = tmp_path / "probe.toml"
    path.write_text(f"""
[retrieval]
kind = "http"
url = "{retrieval_url}/search"
body = {{ q = "{{question}}" }}

[filter]
function = "{filter_function}"
no_answer_status = "refused"

[citations]
""")
    return path


def record(tmp_path: Path, search: dict, name: str = "runs", filter_function: str = "prodcode.widget:filter_reply",
           repeats: int = 2, replies: dict = REPLIES) -> Path:
    (tmp_path / "p.toml").write_text(f"repeats = {repeats}\n" + PROBESET)
    with LocalServer(search_for(search)) as retrieval, \
            LocalServer(lambda r: Reply(replies[r.json["messages"][-1]["content"]])) as model:
        result = CliRunner().invoke(main, ["run", str(tmp_path / "p.toml"), "--prompt",
                                           str(ROOT / "prompts" / "always-header.md"), "--model",
                                           f"openai:m@{model.url}/v1", "--runs-dir", str(tmp_path / name),
                                           "--config", str(write_target(tmp_path, retrieval.url, filter_function))])
    assert result.exit_code == 0, result.output
    return run_dir_of(result)


def test_every_check_on_a_recorded_run(tmp_path):
    run = record(tmp_path, FIRST_SEARCH)
    samples = {s["sample_id"]: s for s in read_jsonl(run / "samples.jsonl")}
    refuse = samples["refuse.r1.a1"]
    # Filter parity on a misplaced marker: production logged "answered" and the visitor saw the marker.
    assert refuse["header"]["header"] == "misplaced" and refuse["header"]["declared"] == "answer"
    assert refuse["checks"]["filter"] == {"text": REPLIES["Who is the CEO?"], "status": "answered",
                                          "declared": "answer", "marker_leaked": True}
    assert refuse["outcomes"]["status_correct"] is False and refuse["outcomes"]["marker_leaked"] is True
    price = samples["price.r1.a1"]
    assert price["checks"]["filter"]["text"] == "Team is $20 per user [1][9]."  # what the visitor saw
    assert price["checks"]["filter"]["status"] == "answered" and price["outcomes"]["marker_leaked"] is False
    assert price["checks"]["citations"]["valid"] == [1] and price["checks"]["citations"]["stripped"] == ["[9]"]
    assert price["checks"]["retrieval"]["ranks"] == {"pricing": 1}
    assert price["checks"]["assertions"] == {"checked": 3, "failed": []}
    paraphrase = samples["price-paraphrase.r1.a1"]
    assert paraphrase["checks"]["retrieval"]["ranks"] == {"pricing": 3}
    assert paraphrase["checks"]["assertions"]["failed"] == []  # ignore_case: "TEAM" matches "team"
    report = json.loads(CliRunner().invoke(main, ["report", str(run), "--json"]).stdout)
    metrics = report["arms"][0]["metrics"]
    expected = {
        "status_correct": (6, 8),  # refuse logged answered twice; nothing logged refused correctly
        "marker_leaked": (2, 8),
        "citation_valid_only": (2, 4),  # [1][9] strips one; [2] alone is valid only
        "citation_invalid": (2, 4),
        "citation_none": (0, 4),
        "retrieval_hit": (4, 4),
        "assertions_pass": (4, 4),
        "declared_correct": (6, 8),
    }
    for name, (k, n) in expected.items():
        assert (metrics[name]["k"], metrics[name]["n"]) == (k, n), name
        assert set(metrics[name]) == {"k", "n", "errors", "rate", "wilson", "deff", "n_eff", "wilson_eff",
                                      "higher_is_better"}
    # --top-k: a hit only within the first K passages (the paraphrase has it third).
    top = json.loads(CliRunner().invoke(main, ["report", str(run), "--top-k", "2", "--json"]).stdout)
    assert top["arms"][0]["metrics"]["retrieval_hit"]["k"] == 2
    paraphrases = top["retrieval"]["paraphrases"]
    assert paraphrases and {c["case_id"] for c in paraphrases[0]["cases"]} == {"price", "price-paraphrase"}
    text = CliRunner().invoke(main, ["report", str(run), "--top-k", "2"]).stdout
    assert "paraphrases expecting pricing differ in retrieval_hit:" in text
    # Empty retrievals are recorded as such, not as errors, and counted per case.
    nothing = samples["nothing.r1.a1"]
    assert nothing["error"] is None and nothing["retrieval"]["empty"] is True
    assert {c["case_id"]: c["empty"] for c in report["retrieval"]["cases"]}["nothing"] == 2
    assert "retrieval: empty results (nothing retrieved) for nothing (2)" in CliRunner().invoke(
        main, ["report", str(run)]).stdout
    # --by tag: follow-ups, paraphrases and the rest read apart.
    tagged = json.loads(CliRunner().invoke(main, ["report", str(run), "--by", "tag", "--json"]).stdout)
    by_tag = tagged["arms"][0]["by_tag"]
    assert by_tag["paraphrase"]["header_present"]["n"] == 2 and by_tag["pricing"]["header_present"]["n"] == 4
    assert "(untagged)" in by_tag
    compare = json.loads(CliRunner().invoke(main, ["compare", str(run), str(run), "--all", "--json"]).stdout)
    assert {"status_correct", "marker_leaked", "citation_valid_only", "assertions_pass"} <= {
        r["metric"] for r in compare["results"]}


def test_a_present_header_passes_filter_parity(tmp_path):
    replies = dict(REPLIES, **{"Who is the CEO?": "[[NO_ANSWER]]\nI can't say."})
    run = record(tmp_path, FIRST_SEARCH, replies=replies, filter_function="prodcode.widget:filter_as_tuple")
    refuse = next(s for s in read_jsonl(run / "samples.jsonl") if s["case_id"] == "refuse")
    assert refuse["checks"]["filter"]["status"] == "refused" and refuse["outcomes"]["status_correct"] is True
    assert refuse["checks"]["filter"]["text"] == "I can't say." and refuse["outcomes"]["marker_leaked"] is False


def run_with_filter(tmp_path, function: str, *extra: str):
    """`probe run` of PROBESET through production's `[filter] function`, against local servers."""
    (tmp_path / "p.toml").write_text(PROBESET)
    with LocalServer(search_for(FIRST_SEARCH)) as retrieval, \
            LocalServer(lambda r: Reply(REPLIES[r.json["messages"][-1]["content"]])) as model:
        return CliRunner().invoke(main, ["run", str(tmp_path / "p.toml"), "--prompt",
                                         str(ROOT / "prompts" / "always-header.md"), "--model",
                                         f"openai:m@{model.url}/v1", "--runs-dir", str(tmp_path / "runs"),
                                         "--config", str(write_target(tmp_path, retrieval.url, function)), *extra])


def test_a_filter_that_raises_is_that_samples_error(tmp_path):
    result = run_with_filter(tmp_path, "prodcode.widget:broken_filter")
    assert result.exit_code == 1
    samples = read_jsonl(run_dir_of(result) / "samples.jsonl")
    assert all(s["error"]["kind"] == "filter" and "widget crashed" in s["error"]["message"] for s in samples)
    assert all(s["raw"] is not None for s in samples)  # the output itself is kept


def test_a_filter_that_prints_leaves_json_output_alone(tmp_path):
    """Production's filter prints a debug line per reply: `--format json` stays JSON only on stdout
    (the lines go to stderr), live and when the run is reclassified offline."""
    result = run_with_filter(tmp_path, "prodcode.widget:noisy_filter", "--format", "json")
    assert result.exit_code == 0, result.output
    run = json.loads(result.stdout)
    assert run["status"] == "complete" and "filter_reply: " in result.stderr
    config = tmp_path / "other.toml"
    config.write_text('[filter]\nfunction = "prodcode.widget:noisy_filter"\nno_answer_status = "answered"\n')
    again = CliRunner().invoke(main, ["classify", run["run"], "--config", str(config)])
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["classification"] == 1 and "filter_reply: " in again.stderr


def test_drift_between_two_runs_whose_retrieval_changed(tmp_path):
    first = record(tmp_path, FIRST_SEARCH, "one")
    changed = dict(FIRST_SEARCH, **{"How much is Team?": ["billing", "pricing", "new-doc"], "Who is the CEO?": []})
    second = record(tmp_path, changed, "two")
    data = json.loads(CliRunner().invoke(main, ["compare", str(first), str(second), "--json"]).stdout)
    drift = {d["case_id"]: d for d in data["retrieval_drift"]}
    assert drift["price"] == {"case_id": "price", "added": ["new-doc"], "dropped": [],
                              "moved": [{"id": "pricing", "from": 1, "to": 2}, {"id": "billing", "from": 2, "to": 1}]}
    assert drift["refuse"]["dropped"] == ["about"]
    assert "price-paraphrase" not in drift
    text = CliRunner().invoke(main, ["compare", str(first), str(second)]).stdout
    assert "retrieval drift: price got different passages in B's run: added new-doc; moved pricing 1→2" in text


def test_repeats_that_got_different_passages_within_a_run_are_said(tmp_path):
    calls: dict[str, int] = {}

    def flipping(request):
        calls[request.json["q"]] = calls.get(request.json["q"], 0) + 1
        ids = ["pricing"] if calls[request.json["q"]] % 2 else ["billing"]
        return Reply(body=json.dumps({"results": [{"id": i, "text": i} for i in ids]}).encode())

    (tmp_path / "p.toml").write_text("repeats = 2\n" + PROBESET)
    with LocalServer(flipping) as retrieval, LocalServer(lambda r: Reply("[[ANSWER]]\nok")) as model:
        result = CliRunner().invoke(main, ["run", str(tmp_path / "p.toml"), "--prompt",
                                           str(ROOT / "prompts" / "always-header.md"), "--model",
                                           f"openai:m@{model.url}/v1", "--runs-dir", str(tmp_path / "runs"),
                                           "--config", str(write_target(tmp_path, retrieval.url)), "--concurrency", "1"])
    report = json.loads(CliRunner().invoke(main, ["report", str(run_dir_of(result)), "--json"]).stdout)
    assert set(report["retrieval"]["changed_within_run"]) == {"price", "price-paraphrase", "refuse", "nothing"}


def test_reclassification_moves_samples_offline_and_the_report_follows(tmp_path):
    run = record(tmp_path, FIRST_SEARCH)  # both servers are stopped from here on
    before = json.loads(CliRunner().invoke(main, ["report", str(run), "--json"]).stdout)
    assert before["arms"][0]["metrics"]["header_present"]["k"] == 6
    config = tmp_path / "escalate.toml"
    config.write_text('[header]\nmarkers = ["[[ANSWER]]", "[[NO_ANSWER]]", "I\'m sorry"]\n'
                      'no_answer = "[[NO_ANSWER]]"\n[filter]\nfunction = "prodcode.widget:filter_reply"\n'
                      'no_answer_status = "refused"\n[citations]\n')
    result = CliRunner().invoke(main, ["classify", str(run), "--config", str(config), "--format", "table"])
    assert result.exit_code == 0, result.output
    assert "2 samples moved from misplaced to present" in result.stdout
    assert json.loads((run / "classifications" / "1.jsonl").read_text().splitlines()[0])["settings"]["header"][
        "markers"] == ["[[ANSWER]]", "[[NO_ANSWER]]", "I'm sorry"]
    after = json.loads(CliRunner().invoke(main, ["report", str(run), "--json"]).stdout)
    assert after["classification"] == 1 and after["arms"][0]["metrics"]["header_present"]["k"] == 8
    original = json.loads(CliRunner().invoke(main, ["report", str(run), "--classification", "1", "--json"]).stdout)
    assert original["arms"][0]["metrics"]["header_present"]["k"] == 8
    missing = CliRunner().invoke(main, ["report", str(run), "--classification", "7"])
    assert missing.exit_code == 2 and "no classification 7 (this run has: 1)" in missing.stderr
    again = CliRunner().invoke(main, ["classify", str(run), "--markers", "[[ANSWER]],[[NO_ANSWER]]"])
    assert json.loads(again.stdout)["classification"] == 2
    assert json.loads(CliRunner().invoke(main, ["report", str(run), "--json"]).stdout)["arms"][0]["metrics"][
        "header_present"]["k"] == 6  # the latest classification is what the report uses
    assert sorted(p.name for p in (run / "classifications").iterdir()) == ["1.jsonl", "2.jsonl"]  # both kept


def test_compare_says_which_classification_each_side_counts(tmp_path):
    run = record(tmp_path, FIRST_SEARCH)
    own = json.loads(CliRunner().invoke(main, ["compare", str(run), str(run), "--json"]).stdout)
    assert own["a"]["classification"] is None and own["b"]["classification"] is None
    config = tmp_path / "escalate.toml"
    config.write_text('[header]\nmarkers = ["[[ANSWER]]", "[[NO_ANSWER]]", "I\'m sorry"]\n'
                      'no_answer = "[[NO_ANSWER]]"\n[filter]\nfunction = "prodcode.widget:filter_reply"\n'
                      'no_answer_status = "refused"\n[citations]\n')
    assert CliRunner().invoke(main, ["classify", str(run), "--config", str(config)]).exit_code == 0
    data = json.loads(CliRunner().invoke(main, ["compare", str(run), str(run), "--all", "--json"]).stdout)
    header = next(r for r in data["results"] if r["metric"] == "header_present")
    assert header["a"]["k"] == 8 and header["a"]["classification"] == 1 and header["b"]["classification"] == 1
    text = CliRunner().invoke(main, ["compare", str(run), str(run)]).stdout
    assert f"A = A ({run}), classification 1 (an offline reclassification)" in " ".join(text.split())


def test_reclassification_makes_no_network_call(tmp_path, monkeypatch):
    run = record(tmp_path, FIRST_SEARCH)
    import socket

    def refuse(*args, **kwargs):
        raise AssertionError("reclassification opened a socket")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    result = CliRunner().invoke(main, ["classify", str(run)])
    assert result.exit_code == 0, result.output
