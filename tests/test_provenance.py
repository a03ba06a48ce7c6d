"""Where the numbers of a run come from: the dry run's passages (fetched once per question from a
real local retrieval server, and nothing else called), each model's effective endpoint and what
set it (OPENAI_BASE_URL to a real local server; each rule checked against the SDK's own client),
and one precedence for the settings, recorded in the dry run and the manifest."""

import json
import math
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner
from conftest import PASSAGES, ROOT, run_dir_of, write_config, write_probeset
from servers import LocalServer, Reply

from promptprobe.cli import main
from promptprobe.endpoints import model_record, resolve, scrub_url
from promptprobe.models import parse_model_spec
from promptprobe.prompts import render_prompt

PROMPT = ROOT / "prompts" / "always-header.md"
KEY = "sk-test-0123456789abcdefghij"
QUESTIONS = [("c0", "How much is the Team plan?", None), ("c1", "Can I pay by invoice?", None),
             ("c2", "When does a downgrade apply?", None)]


def probeset(tmp_path, repeats=None, cases=QUESTIONS, name="p"):
    path = write_probeset(tmp_path / f"{name}.toml", cases)
    if repeats is None:  # write_probeset always writes repeats: take it out
        path.write_text("\n".join(line for line in path.read_text().splitlines() if not line.startswith("repeats")))
    else:
        path.write_text(path.read_text().replace("repeats = 1", f"repeats = {repeats}"))
    return str(path)


def invoke(*args, env=None):
    return CliRunner(env=env).invoke(main, [str(a) for a in args])


def unwrapped(text: str) -> str:
    """Printed lines joined again where the terminal width folded them."""
    return text.replace("\n  ", " ")


def chars4(messages) -> int:
    return sum(math.ceil(len(m["content"]) / 4) for m in messages)


# -- the dry run fetches retrieval -------------------------------------------------------------


def test_dry_run_counts_the_passages_it_fetched_once_per_question_and_calls_nothing_else(tmp_path,
                                                                                       retrieval_server):
    config = write_config(tmp_path / "probe.toml", retrieval_server.url)
    with LocalServer() as model:
        spec = f"openai:m@{model.url}/v1"
        args = ["run", probeset(tmp_path), "--prompt", PROMPT, "--prompt", f"b={PROMPT}", "-m", spec, "-m",
                "anthropic:claude-sonnet-5-5", "--config", config, "-n", "4", "--runs-dir", tmp_path / "runs",
                "--dry-run"]
        text = invoke(*args)
        data = json.loads(invoke(*args, "--json").stdout)
        assert model.requests == []  # no model, no key, no batch API, nothing written
    assert text.exit_code == 0, text.output
    assert not (tmp_path / "runs").exists()
    # Once per question for each dry run: not per repeat, not per arm.
    assert len(retrieval_server.requests) == 2 * len(QUESTIONS)
    assert sorted(r.json["q"] for r in retrieval_server.requests[:3]) == sorted(q for _, q, _ in QUESTIONS)
    passages = [{"id": h["doc"], "text": h["body"], "score": h["rel"]} for h in PASSAGES["default"]]
    # Each call's messages: the prompt with the passages, then the question (chars / 4 each).
    per_call = [math.ceil(len(render_prompt(PROMPT.read_text(), passages)) / 4) + math.ceil(len(q) / 4)
                for _, q, _ in QUESTIONS]
    assert [a["input_tokens"] for a in data["arms"]] == [4 * sum(per_call)] * 4
    assert data["retrieval"] == {"kind": "http", "fetched": True, "questions": 3, "passages": 6,
                                 "passage_tokens": 3 * sum(math.ceil(len(p["text"]) / 4) for p in passages),
                                 "skipped": None}
    assert "retrieval fetched once per question (3 questions, 6 passages, about" in unwrapped(text.stdout)


def test_the_estimate_counts_what_the_run_then_sends(tmp_path, retrieval_server):
    config = write_config(tmp_path / "probe.toml", retrieval_server.url)
    with LocalServer() as model:
        args = ["run", probeset(tmp_path), "--prompt", PROMPT, "-m", f"openai:m@{model.url}/v1",
                "--config", config, "-n", "2", "--runs-dir", tmp_path / "runs"]
        estimate = json.loads(invoke(*args, "--dry-run", "--json").stdout)
        result = invoke(*args)
        assert result.exit_code == 0, result.output
        sent = sum(chars4(r.json["messages"]) for r in model.requests)
    assert len(model.requests) == 6 and estimate["arms"][0]["input_tokens"] == sent


def test_no_retrieval_fetch_leaves_the_passages_out_and_says_so(tmp_path, retrieval_server):
    config = write_config(tmp_path / "probe.toml", retrieval_server.url)
    args = ["run", probeset(tmp_path), "--prompt", PROMPT, "-m", "anthropic:claude-sonnet-5-5", "--config", config,
            "--dry-run", "--no-retrieval-fetch"]
    text, data = invoke(*args), json.loads(invoke(*args, "--json").stdout)
    assert retrieval_server.requests == []
    assert data["retrieval"]["fetched"] is False and data["retrieval"]["skipped"] == "--no-retrieval-fetch was given"
    assert data["arms"][0]["input_tokens"] == 3 * sum(
        math.ceil(len(render_prompt(PROMPT.read_text(), [])) / 4) + math.ceil(len(q) / 4) for _, q, _ in QUESTIONS)
    assert ("retrieval not fetched (--no-retrieval-fetch was given): the estimate leaves out the passages"
            in unwrapped(text.stdout))
    assert any("retrieval was not fetched" in note for note in data["notes"])
    alone = invoke("run", probeset(tmp_path), "--prompt", PROMPT, "--config", config, "--no-retrieval-fetch")
    assert alone.exit_code == 2 and "give one of them" in alone.stderr


@pytest.mark.parametrize("down", ["500", "refused"])
def test_a_retrieval_that_fails_in_a_dry_run_is_one_sentence_and_exit_3(tmp_path, down):
    with LocalServer(lambda r: Reply(status=500, body=b'{"error": "index offline"}')) as server:
        url = server.url
        if down == "refused":
            server.__exit__(None, None, None)
        config = write_config(tmp_path / "probe.toml", url)
        result = invoke("run", probeset(tmp_path), "--prompt", PROMPT, "--config", config, "--dry-run",
                        "-m", "anthropic:claude-sonnet-5-5", "--runs-dir", tmp_path / "runs")
    assert result.exit_code == 3, result.output
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: dry run: the retrieval failed for case 'c")
    assert line.endswith("nothing else was called (--no-retrieval-fetch prices the plan without the passages)")
    assert not (tmp_path / "runs").exists()


def test_a_dry_run_of_cloud_models_looks_up_no_credential(tmp_path):
    """Bedrock and Vertex endpoints come from the region alone: no boto3, no google-auth is even imported."""
    code = (
        "import sys, json\n"
        "from promptprobe.cli import main\n"
        "try:\n"
        f"    main(['run', {probeset(tmp_path)!r}, '--prompt', {str(PROMPT)!r}, '--retrieval', 'none', '--dry-run',"
        " '--json', '-m', 'bedrock:anthropic.claude-sonnet-4-5-20250929-v1:0', '-m', 'vertex:claude-sonnet-4-5@20250929',"
        " '-m', 'azure:support@https://acme.openai.azure.com'])\n"
        "except SystemExit as exit:\n"
        "    loaded = sorted(m for m in ('boto3', 'botocore', 'google.auth') if m in sys.modules)\n"
        "    print(json.dumps({'exit': exit.code, 'loaded': loaded}), file=sys.stderr)\n"
    )
    env = {**os.environ, "AWS_REGION": "eu-central-1", "CLOUD_ML_REGION": "europe-west1",
           "AWS_EC2_METADATA_DISABLED": "true", "NO_GCE_CHECK": "true", "COLUMNS": "100"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    status = json.loads(done.stderr.splitlines()[-1])
    assert status == {"exit": 0, "loaded": []}, done.stderr
    arms = json.loads(done.stdout)["arms"]
    assert [a["endpoint"] for a in arms] == [
        {"url": "https://bedrock-runtime.eu-central-1.amazonaws.com", "from": "region from AWS_REGION",
         "provider_own": True},
        {"url": "https://europe-west1-aiplatform.googleapis.com/v1", "from": "region from CLOUD_ML_REGION",
         "provider_own": True},
        {"url": "https://acme.openai.azure.com/openai", "from": "spec", "provider_own": True},
    ]
    assert all(a["cost_usd"] is None and a["cost_unknown"].startswith("cost unknown for ") for a in arms)


# -- each model's effective endpoint -----------------------------------------------------------


def test_each_endpoint_rule_agrees_with_the_sdks_own_client(monkeypatch):
    import anthropic
    import openai

    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("NO_GCE_CHECK", "true")
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION", "ANTHROPIC_BEDROCK_BASE_URL", "ANTHROPIC_VERTEX_BASE_URL"):
        monkeypatch.delenv(name, raising=False)

    def agree(spec: str, client) -> None:
        endpoint = resolve(parse_model_spec(spec))
        assert endpoint.url == str(client.base_url).rstrip("/"), spec

    agree("openai:gpt-x", openai.OpenAI(api_key=KEY))
    agree("openai:m@http://127.0.0.1:9/v1", openai.OpenAI(api_key=KEY, base_url="http://127.0.0.1:9/v1"))
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:8/v1")
    agree("openai:gpt-x", openai.OpenAI(api_key=KEY))
    assert resolve(parse_model_spec("openai:gpt-x")).source == "environment OPENAI_BASE_URL"
    agree("anthropic:claude-x", anthropic.Anthropic(api_key=KEY))
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:7")
    agree("anthropic:claude-x", anthropic.Anthropic(api_key=KEY))
    agree("azure:dep@https://acme.openai.azure.com",
          openai.AzureOpenAI(azure_endpoint="https://acme.openai.azure.com", api_key=KEY, api_version="2024-10-21"))
    monkeypatch.setenv("AWS_REGION", "eu-central-1")
    bedrock = anthropic.AnthropicBedrock(aws_access_key="AKIDEXAMPLE", aws_secret_key="x" * 20)
    agree("bedrock:anthropic.claude-x", bedrock)
    for region in ("europe-west1", "global", "us"):
        monkeypatch.setenv("CLOUD_ML_REGION", region)
        agree("vertex:claude-x", anthropic.AnthropicVertex(project_id="p", access_token="tok"))
    monkeypatch.delenv("AWS_REGION")
    assert resolve(parse_model_spec("bedrock:anthropic.claude-x")).url is None  # the profile's: read at run time


def test_no_secret_of_an_endpoint_url_is_recorded():
    url = "https://alice:hunter2-passphrase@proxy.corp:8443/v1?api-key=k3y-0123456789abcdef&region=eu#frag"
    assert scrub_url(url) == "https://proxy.corp:8443/v1?api-key=REMOVED&region=REMOVED"
    record = model_record(parse_model_spec(f"openai:m@{url}"), {})
    assert "hunter2" not in json.dumps(record["endpoint"]) and "k3y-" not in json.dumps(record["endpoint"])
    from promptprobe.redaction import SCRUBBER

    # The spec itself still holds them: the scrubber now removes them from everything written.
    scrubbed = SCRUBBER.text(json.dumps(record))
    assert "hunter2-passphrase" not in scrubbed and "k3y-0123456789abcdef" not in scrubbed


def test_openai_base_url_is_where_the_calls_go_and_what_the_run_records(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with LocalServer() as server:
        monkeypatch.setenv("OPENAI_BASE_URL", f"{server.url}/v1")
        result = invoke("run", "--retrieval", "none", probeset(tmp_path, 2), "--prompt", PROMPT,
                        "-m", "openai:gpt-4.1-mini", "--runs-dir", tmp_path / "runs")
        assert result.exit_code == 0, result.output
        assert len(server.requests) == 6 and server.requests[0].path == "/v1/chat/completions"
    run_dir = run_dir_of(result)
    (model,) = json.loads((run_dir / "manifest.json").read_text())["models"]
    assert model["endpoint"] == {"url": f"{server.url}/v1", "from": "environment OPENAI_BASE_URL",
                                 "provider_own": False}
    report = json.loads(invoke("report", run_dir, "--json").stdout)
    (priced,) = report["models"]
    assert priced["endpoint"] == model["endpoint"] and priced["price"] is None
    assert "(from environment OPENAI_BASE_URL), not to OpenAI's own endpoint" in priced["cost_unknown"]
    assert report["arms"][0]["usage"]["cost_usd"] is None
    text = invoke("report", run_dir).stdout
    assert "cost unknown for openai:gpt-4.1-mini: its calls go to" in unwrapped(text)
    export = invoke("export", run_dir, "--format", "md").stdout
    assert f"endpoint {server.url}/v1 (from environment OPENAI_BASE_URL)" in export


def test_a_listed_price_does_not_apply_when_the_base_url_points_elsewhere(tmp_path, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    with LocalServer() as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        result = invoke("run", "--retrieval", "none", probeset(tmp_path, 1), "--prompt", PROMPT,
                        "-m", "anthropic:claude-sonnet-5-5", "--runs-dir", tmp_path / "runs")
        assert result.exit_code == 0, result.output
        assert server.requests[0].path == "/v1/messages"
    report = json.loads(invoke("report", run_dir_of(result), "--json").stdout)
    assert report["arms"][0]["usage"]["cost_usd"] is None  # not Sonnet 5.5's list price
    assert report["models"][0]["endpoint"]["from"] == "environment ANTHROPIC_BASE_URL"
    # The same run read where the variable is unset still prices it by where its calls went.
    monkeypatch.delenv("ANTHROPIC_BASE_URL")
    assert json.loads(invoke("report", run_dir_of(result), "--json").stdout)["arms"][0]["usage"]["cost_usd"] is None


def test_a_resume_refuses_to_call_another_endpoint_than_the_run_did(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)

    def one_fails(request):
        if "Team plan" in request.json["messages"][-1]["content"]:
            return Reply(status=400, body=b'{"error": {"message": "bad request"}}')
        return Reply("[[ANSWER]]\nok")

    with LocalServer(one_fails) as first, LocalServer() as other:
        monkeypatch.setenv("OPENAI_BASE_URL", f"{first.url}/v1")
        result = invoke("run", "--retrieval", "none", probeset(tmp_path, 1), "--prompt", PROMPT,
                        "-m", "openai:gpt-4.1-mini", "--runs-dir", tmp_path / "runs")
        assert result.exit_code == 1, result.output  # one sample failed: the run is resumable
        run_dir = run_dir_of(result)
        monkeypatch.setenv("OPENAI_BASE_URL", f"{other.url}/v1")
        moved = invoke("run", "--resume", run_dir)
        assert moved.exit_code == 2, moved.output
        (line,) = moved.stderr.splitlines()
        assert (f"openai:gpt-4.1-mini went to {first.url}/v1 (from environment OPENAI_BASE_URL) and would now go "
                f"to {other.url}/v1 (from environment OPENAI_BASE_URL)") in line
        assert other.requests == []
        first.responder = lambda request: Reply("[[ANSWER]]\nok")
        monkeypatch.setenv("OPENAI_BASE_URL", f"{first.url}/v1")
        resumed = invoke("run", "--resume", run_dir)
        assert resumed.exit_code == 0, resumed.output


# -- one settings precedence -------------------------------------------------------------------


def dry(tmp_path, *args):
    result = invoke("run", *args, "--prompt", PROMPT, "-m", "anthropic:claude-sonnet-5-5", "--dry-run", "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_flags_then_the_probe_set_then_run_then_the_default(tmp_path):
    (tmp_path / "probe.toml").write_text('[retrieval]\nkind = "none"\n[run]\nrepeats = 4\nmax_tokens = 50\n')
    config = ["--config", tmp_path / "probe.toml"]
    says_five = probeset(tmp_path, 5, name="five")
    data = dry(tmp_path, says_five, *config)
    assert data["repeats"] == 5 and data["settings"]["repeats"] == {"value": 5, "from": "probe set"}
    assert data["settings"]["max_tokens"] == {"value": 50, "from": "probe.toml [run]"}
    assert data["arms"][0]["output_tokens_max"] == 50 * 5 * 3
    data = dry(tmp_path, says_five, *config, "-n", "2", "--max-tokens", "60")
    assert data["settings"]["repeats"] == {"value": 2, "from": "flag"} and data["repeats"] == 2
    assert data["settings"]["max_tokens"] == {"value": 60, "from": "flag"}
    silent = probeset(tmp_path, name="silent")  # says no repeats of its own
    assert dry(tmp_path, silent, *config)["settings"]["repeats"] == {"value": 4, "from": "probe.toml [run]"}
    data = dry(tmp_path, silent, "--retrieval", "none")
    assert data["settings"]["repeats"] == {"value": 3, "from": "default"}
    assert data["settings"]["concurrency"] == {"value": 8, "from": "default"}
    assert data["settings"]["models"] == {"value": ["anthropic:claude-sonnet-5-5"], "from": "flag"}
    text = invoke("run", says_five, *config, "--prompt", PROMPT, "-m", "anthropic:claude-sonnet-5-5", "--dry-run")
    assert ("settings: max_tokens 50 (probe.toml [run]); repeats 5 (probe set); models anthropic:claude-sonnet-5-5 "
            "(flag); the rest defaults") in unwrapped(text.stdout)


def test_the_manifest_says_where_each_setting_came_from(tmp_path):
    import promptprobe

    with LocalServer() as server:
        spec = f"openai:m@{server.url}/v1"
        (tmp_path / "probe.toml").write_text(f'[retrieval]\nkind = "none"\n[run]\nrepeats = 4\nconcurrency = 2\n'
                                             f'models = ["{spec}"]\n')
        result = invoke("run", probeset(tmp_path, 2), "--prompt", PROMPT, "--config", tmp_path / "probe.toml",
                        "--runs-dir", tmp_path / "runs", "--temperature", "0.5")
        assert result.exit_code == 0, result.output
        api = promptprobe.run(probeset(tmp_path), [str(PROMPT)], config=tmp_path / "probe.toml",
                              runs_dir=tmp_path / "api", max_tokens=40)
    manifest = json.loads((run_dir_of(result) / "manifest.json").read_text())
    settings = manifest["settings"]
    assert manifest["repeats"] == 2 and settings["repeats"] == {"value": 2, "from": "probe set"}
    assert settings["concurrency"] == {"value": 2, "from": "probe.toml [run]"}
    assert settings["temperature"] == {"value": 0.5, "from": "flag"}
    assert settings["models"] == {"value": [spec], "from": "probe.toml [run]"}
    assert settings["umask"] == {"value": "077", "from": "default"}
    assert len(server.requests) == 2 * 3 + 4 * 3  # the CLI run at 2 repeats, the API run at [run]'s 4
    api_settings = json.loads((api.path / "manifest.json").read_text())["settings"]
    assert api_settings["max_tokens"] == {"value": 40, "from": "argument"}
    assert api_settings["repeats"] == {"value": 4, "from": "probe.toml [run]"}


def test_a_password_in_a_models_url_reaches_no_file_of_the_run(tmp_path):
    with LocalServer() as server:
        spec = f"openai:m@{server.url.replace('http://', 'http://alice:hunter2-passphrase@')}/v1?api-key=k3y-0123456789ab"
        result = invoke("run", "--retrieval", "none", probeset(tmp_path, 1), "--prompt", PROMPT, "-m", spec,
                        "--runs-dir", tmp_path / "runs")
        assert result.exit_code == 0, result.output
        assert len(server.requests) == 3
        dry = invoke("run", "--retrieval", "none", probeset(tmp_path, 1), "--prompt", PROMPT, "-m", spec,
                     "--dry-run", "-o", tmp_path / "plan.json")
        assert dry.exit_code == 0, dry.output
    run_dir = run_dir_of(result)
    (model,) = json.loads((run_dir / "manifest.json").read_text())["models"]
    assert model["endpoint"]["url"] == f"{server.url}/v1?api-key=REMOVED"
    written = b"".join(p.read_bytes() for p in [*run_dir.rglob("*"), tmp_path / "plan.json"] if p.is_file())
    assert b"hunter2-passphrase" not in written and b"k3y-0123456789ab" not in written


def test_a_password_and_key_in_the_retrieval_url_reach_no_file_of_the_run(tmp_path, retrieval_server):
    config = write_config(tmp_path / "probe.toml", retrieval_server.url.replace("http://", "http://alice:hunter2-passphrase@"))
    config.write_text(config.read_text().replace('/search"', '/search?api_key=r3trieval-0123456789"'))
    with LocalServer() as model:
        result = invoke("run", probeset(tmp_path, 1), "--prompt", PROMPT, "-m", f"openai:m@{model.url}/v1",
                        "--config", config, "--runs-dir", tmp_path / "runs")
        assert result.exit_code == 0, result.output
    assert "api_key=r3trieval-0123456789" in retrieval_server.requests[0].path  # the search got it
    run_dir = run_dir_of(result)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["target"]["retrieval"]["url"] == f"{retrieval_server.url}/search?api_key=REMOVED"
    written = b"".join(p.read_bytes() for p in run_dir.rglob("*") if p.is_file()) + result.output.encode()
    assert b"hunter2-passphrase" not in written and b"r3trieval-0123456789" not in written
