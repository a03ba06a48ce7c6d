"""The demo target: local BM25 retriever, the SIMULATED model over the real OpenAI SDK, `probe demo`."""

import json
import re
import threading
import tomllib

import pytest
from click.testing import CliRunner
from conftest import ROOT

from promptprobe.cli import main
from promptprobe.demo import DemoServer, generate, load_behaviour
from promptprobe.errors import InputError
from promptprobe.jsonio import read_jsonl
from promptprobe.models import parse_model_spec
from promptprobe.pack import read_raw
from promptprobe.providers import make_provider
from promptprobe.providers.base import GenerationParams
from promptprobe.retrievers.local import LocalRetriever
from promptprobe.tokens import tokenize

ACME = ROOT / "examples" / "demo" / "acme"


def test_tokenizer_handles_chinese_and_english():
    assert tokenize("Reset the PASSWORD, ｐｌｅａｓｅ") == ["reset", "password", "please"]
    assert tokenize("重置密码") == ["重", "置", "密", "码", "重置", "置密", "密码"]


def test_local_retriever_ranks_with_bm25():
    retriever = LocalRetriever({"path": str(ACME), "k": 3})
    assert len(retriever.passages) >= 12
    hits = retriever.retrieve("How long are database backups kept on the Team plan?", [])
    assert len(hits) == 3 and hits[0].id == "backups"
    assert hits[0].score > hits[1].score >= hits[2].score > 0
    chinese = retriever.retrieve("我忘记了密码，怎么重置？", [])
    assert chinese[0].id == "password-reset-zh"
    assert retriever.retrieve("zzzz qqqq", []) == []


def test_local_retriever_bad_folder(tmp_path):
    with pytest.raises(InputError, match="no such folder"):
        LocalRetriever({"path": "missing"}, tmp_path)
    with pytest.raises(InputError, match="no .md or .txt"):
        LocalRetriever({"path": str(tmp_path)})


def messages(prompt_name: str, question: str, passages: list[str]) -> list[dict]:
    prompt = (ROOT / "prompts" / f"{prompt_name}.md").read_text()
    sources = "\n\n".join(f"[{i}] {p}" for i, p in enumerate(passages, 1))
    return [{"role": "system", "content": prompt.replace("{{sources}}", sources)},
            {"role": "user", "content": question}]


def test_behaviour_is_seeded_and_follows_the_prompt():
    behaviour = load_behaviour()
    backups = (ACME / "backups.md").read_text()
    answerable = messages("always-header", "How long are backups kept?", [backups])
    unknown = messages("always-header", "Can I pay with Bitcoin?", [backups])
    replies = [generate(answerable, behaviour, i) for i in range(1, 201)]
    assert replies == [generate(answerable, behaviour, i) for i in range(1, 201)]  # deterministic
    present = sum(r.startswith(("[[ANSWER]]\n", "[[NO_ANSWER]]\n")) for r in replies)
    assert 176 <= present <= 199  # 95% configured; not all: the model is imperfect on purpose
    assert sum(r.startswith("[[ANSWER]]") for r in replies) > 150  # it mostly answers from the passage
    assert "Backups are kept for 7 days on Starter" in replies[0]
    refusals = [generate(unknown, behaviour, i) for i in range(1, 201)]
    assert sum("[[NO_ANSWER]]" in r for r in refusals) >= 170
    exception = [generate(messages("exception-only", "Can I pay with Bitcoin?", [backups]), behaviour, i)
                 for i in range(1, 201)]
    first_line = sum(r.startswith("[[NO_ANSWER]]") for r in exception)
    assert 40 <= first_line <= 110  # 35% configured: the exception-only rule is unstable
    assert any(r.endswith("[[NO_ANSWER]]") for r in exception)
    assert any("```\n[[NO_ANSWER]]\n```" in r for r in exception)


def test_bad_behaviour_file(tmp_path):
    path = tmp_path / "b.toml"
    path.write_text("seed = 1\n[decide]\nanswer_threshold = 0.5\nwrong_decision = 0\n"
                    "[always_header]\npresent = 0.9\ndecorated = 0.2\n[exception_only]\n"
                    "[pointer]\nmarker_first = 0.1\notherwise = 0.9\n")
    with pytest.raises(InputError, match="add up to more than 1"):
        load_behaviour(path)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_demo_server_speaks_chat_completions_to_the_real_sdk(stream):
    server = DemoServer("127.0.0.1", 0).start()
    try:
        provider = make_provider(parse_model_spec(f"openai:acme-helpdesk@{server.url}"),
                                 GenerationParams(stream=stream))
        completion = provider.complete(messages("always-header", "How long are backups kept?",
                                                [(ACME / "backups.md").read_text()]))
        provider.close()
    finally:
        server.stop()
    assert "SIMULATED" in completion.model
    assert "Backups are kept" in completion.text
    assert completion.stop_reason == "stop" and completion.usage["completion_tokens"] > 0
    if stream:
        assert completion.body.startswith(b"data: {") and completion.body.endswith(b"data: [DONE]\n\n")
    else:
        assert json.loads(completion.body)["choices"][0]["message"]["content"] == completion.text


def test_probe_demo_end_to_end_from_any_directory(demo_run):
    result, run_dir = demo_run  # run from an empty directory: the demo's data ships in the package
    assert "status complete, 72 of 72 samples" in result.stdout
    assert "NOTE: the model in this run is SIMULATED" in result.stdout
    assert "probe compare" in result.stdout and "header_present" in result.stdout
    verdict_line = next(line for line in result.stdout.splitlines() if " on header_present: " in line)
    assert verdict_line.startswith("always-header better")  # always-header beats exception-only on header_present
    sequential = next(line for line in result.stdout.replace("\n  ", " ").splitlines() if line.startswith(
        "sequential: always-header better on header_present, decided at round "))
    rounds = int(sequential.split("decided at round ")[1].split()[0])
    taken = int(sequential.split("): ")[1].split()[0])
    assert taken == 2 * 12 * rounds
    # Compared with the fixed paired plan of the same power at the measured rates, not with the
    # demo's own 3-repeat run (which has far more power than the sequential rule needs here).
    same = re.search(r"the rule decides with (\d+)% power after (\d+) samples per arm on average \(simulated\); "
                     r"a fixed paired plan with (\d+)% power takes (\d+) per arm \((\d+) repeats?\)", sequential)
    assert same, sequential
    assert int(same[4]) == 12 * int(same[5]) and int(same[3]) <= int(same[1])
    samples = read_jsonl(run_dir / "samples.jsonl")
    assert len(samples) == 72 and all(s["error"] is None for s in samples)
    for sample in samples[:5]:
        raw = read_raw(run_dir, sample)
        assert sample["raw"]["bytes"] == len(raw)
        body = json.loads(read_raw(run_dir, sample, "body"))
        assert body["choices"][0]["message"]["content"].encode() == raw
        assert sample["checks"]["filter"]["status"] in ("answered", "no_answer")  # production's filter ran
    retrievals = read_jsonl(run_dir / "retrievals.jsonl")
    assert len(retrievals) == 36 and retrievals[0]["retriever"].startswith("local bm25")
    # `probe report` and `probe compare` work on the recorded demo run, with every check's metrics.
    report = json.loads(CliRunner().invoke(main, ["report", str(run_dir), "--format", "json"]).stdout)
    assert report["simulated"] is True
    metrics = report["arms"][0]["metrics"]
    for name in ("status_correct", "marker_leaked", "citation_valid_only", "retrieval_hit", "assertions_pass"):
        assert metrics[name]["n"] > 0, name
    compare = CliRunner().invoke(main, ["compare", f"{run_dir}#prompt=exception-only",
                                        f"{run_dir}#prompt=always-header", "--json"])
    assert json.loads(compare.stdout)["design"] == "paired"
    # The judged check: every output judged twice by the SIMULATED judge, the truth labelled by hand.
    judgments = read_jsonl(run_dir / "judgments.jsonl")
    assert len(judgments) == 72 * 2 and all(j["label"] in ("pass", "fail") for j in judgments)
    assert metrics["answered"]["n"] == 36 and report["arms"][0]["metrics"]["answered"]["judge"]["repeats"] == 2
    assert "answered" in result.stdout and (run_dir.parent / "demo-labels.csv").is_file()
    # What the demo shows of its judge covers the truth it was simulated with: a sample passes only
    # when more than half of its judgments do, so with 2 judgments Se = se², Sp = 1 - (1 - sp)².
    truth = tomllib.loads((ROOT / "src" / "promptprobe" / "demo" / "behaviour.toml").read_text())["judge"]
    per_sample = {"sensitivity": truth["sensitivity"] ** 2, "specificity": 1 - (1 - truth["specificity"]) ** 2}
    for arm in report["arms"]:
        labels = arm["metrics"]["answered"]["judge"]["labels"]
        assert labels["n"] >= 30
        for name, value in per_sample.items():
            low, high = labels[name]["interval"]
            assert low <= value <= high, (arm["prompt"], name, value, labels[name])
    assert not [t for t in threading.enumerate() if "serve_forever" in t.name]  # the demo server stopped


def test_why_finds_the_support_pointer_on_the_demo(demo_run):
    _, run_dir = demo_run
    result = CliRunner().invoke(main, ["why", f"{run_dir}#prompt=exception-only", "--format", "json"])
    assert result.exit_code == 0, result.output
    top = [row["phrase"] for row in json.loads(result.stdout)["phrases"][:3]]
    assert any("support@acme.example" in phrase or "reach a person" in phrase for phrase in top), top


def test_probe_demo_batch_takes_the_batch_path_offline_with_the_same_results(demo_run, tmp_path):
    live, live_dir = demo_run
    result = CliRunner(env={"COLUMNS": "100"}).invoke(main, ["demo", "--batch", "--runs-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    run_dir = tmp_path / result.stdout.splitlines()[0].split("run: ", 1)[1].split("/")[-1]
    assert result.stdout.splitlines()[1] == "via the batch API: 1 batch(es)"
    ledger = read_jsonl(run_dir / "batches.jsonl")
    assert len(ledger) == 1 and ledger[0]["collected"] and len(ledger[0]["samples"]) == 72
    samples = read_jsonl(run_dir / "samples.jsonl")
    assert len(samples) == 72 and all(s["error"] is None and s["via"] == "batch" for s in samples)
    line = json.loads(read_raw(run_dir, samples[0], "body"))  # the result line's bytes
    place = ledger[0]["samples"].index(samples[0]["sample_id"])  # its place in the batch, after the batch's prefix
    assert line["custom_id"] == f"{ledger[0]['ids']}p{place}"
    assert line["response"]["status_code"] == 200
    assert "SIMULATED" in line["response"]["body"]["model"]
    # The simulated model answers a batch as it answers live calls: the same counts per arm.
    def counts(path):
        report = json.loads(CliRunner().invoke(main, ["report", str(path), "--format", "json"]).stdout)
        return {arm["prompt"]: (arm["metrics"]["header_present"]["k"], arm["metrics"]["answered"]["k"])
                for arm in report["arms"]}

    assert counts(run_dir) == counts(live_dir)
    # The sequential run sent one batch a round.
    sequential = [line for line in result.stdout.splitlines() if line.startswith("via the batch API")][1]
    rounds = int(result.stdout.replace("\n  ", " ").split("decided at round ")[-1].split()[0])
    assert sequential == f"via the batch API: {rounds} batch(es), one a round"


def test_probe_demo_refuses_stream_with_batch(tmp_path):
    result = CliRunner().invoke(main, ["demo", "--batch", "--stream", "--runs-dir", str(tmp_path)])
    assert result.exit_code == 2 and "choose one" in result.stderr and not list(tmp_path.iterdir())


def test_demo_batch_api_refuses_what_it_cannot_answer():
    import openai

    server = DemoServer("127.0.0.1", 0).start()
    try:
        client = openai.OpenAI(base_url=server.url, api_key="demo", max_retries=0)
        with pytest.raises(openai.NotFoundError, match="no batch batch_missing"):
            client.batches.retrieve("batch_missing")
        with pytest.raises(openai.BadRequestError, match="no input file"):
            client.batches.create(input_file_id="file-x", endpoint="/v1/chat/completions", completion_window="24h")
        good = {"custom_id": "s1", "method": "POST", "url": "/v1/chat/completions",
                "body": {"model": "acme-helpdesk", "messages": [{"role": "user", "content": "Backups?"}]}}
        data = (json.dumps(good) + "\n" + json.dumps({"custom_id": "s2", "body": {}}) + "\n").encode()
        uploaded = client.files.create(file=("in.jsonl", data), purpose="batch")
        batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                                      completion_window="24h")
        assert batch.status == client.batches.retrieve(batch.id).status == "in_progress"  # one look, then done
        ended = client.batches.retrieve(batch.id)
        assert ended.status == "completed" and ended.request_counts.failed == 1
        errors = client.files.content(ended.error_file_id).content.decode().splitlines()
        assert json.loads(errors[0])["custom_id"] == "s2" and "line 2" in json.loads(errors[0])["error"]["message"]
        output = json.loads(client.files.content(ended.output_file_id).content)
        assert output["custom_id"] == "s1" and output["response"]["body"]["choices"][0]["message"]["content"]
        client.close()
    finally:
        server.stop()

