"""The clouds through the SDKs' own client classes, over real sockets to a local server: Azure
OpenAI (deployment path, api-key header, api-version query), Amazon Bedrock (a real SigV4
signature, the invoke URL, the Bedrock body) and Google Vertex (the rawPredict path, a bearer
token); a missing cloud library is one sentence naming the extra; no credential reaches the run."""

import json
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner
from conftest import ROOT, run_dir_of, write_probeset
from servers import LocalServer

from promptprobe.cli import main
from promptprobe.jsonio import read_jsonl
from promptprobe.models import parse_model_spec

PROMPT = str(ROOT / "prompts" / "always-header.md")
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"


def run(tmp_path, spec: str, server: LocalServer, config: str = ""):
    probeset = write_probeset(tmp_path / "p.toml", [("c1", "What is the refund policy?", None)])
    args = ["run", str(probeset), "--prompt", PROMPT, "-m", spec, "--runs-dir", str(tmp_path / "runs"), "-n", "2"]
    if config:
        (tmp_path / "probe.toml").write_text(config + '\n[retrieval]\nkind = "none"\n')
        args += ["--config", str(tmp_path / "probe.toml")]
    else:
        args += ["--retrieval", "none"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    return run_dir_of(result)


def everything_written(run_dir) -> bytes:
    return b"".join(p.read_bytes() for p in run_dir.rglob("*") if p.is_file())


def test_azure_calls_the_deployment_with_the_api_key_header_and_version(tmp_path, monkeypatch):
    monkeypatch.setenv("AZURE_OPENAI_API_KEY", "azure-secret-key-1234567890")
    with LocalServer() as server:
        run_dir = run(tmp_path, f"azure:support-gpt4o@{server.url}", server)
        configured = run(tmp_path, f"azure:support-gpt4o@{server.url}", server,
                         f'[run]\nmodels = [{{ spec = "azure:support-gpt4o@{server.url}", api_version = "2025-04-01-preview" }}]')
    first = server.requests[0]
    assert first.path == "/openai/deployments/support-gpt4o/chat/completions?api-version=2024-10-21"
    assert first.headers["api-key"] == "azure-secret-key-1234567890" and "authorization" not in first.headers
    assert server.requests[-1].path.endswith("?api-version=2025-04-01-preview")
    samples = read_jsonl(run_dir / "samples.jsonl")
    assert [s["header"]["header"] for s in samples] == ["present", "present"]
    manifest = json.loads((configured / "manifest.json").read_text())
    assert manifest["models"][0]["api_version"] == "2025-04-01-preview"
    assert manifest["models"][0]["api_key_env"] == "AZURE_OPENAI_API_KEY"
    assert b"azure-secret-key-1234567890" not in everything_written(run_dir)


def test_bedrock_signs_with_sigv4_and_sends_the_bedrock_body(tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", AWS_SECRET)
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    with LocalServer() as server:
        run_dir = run(tmp_path, f"bedrock:anthropic.claude-sonnet-4-5-v1:0@{server.url}", server)
    request = server.requests[0]
    assert request.path in ("/model/anthropic.claude-sonnet-4-5-v1:0/invoke", "/model/anthropic.claude-sonnet-4-5-v1%3A0/invoke")
    authorization = request.headers["authorization"]
    assert authorization.startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")
    assert "/eu-west-1/bedrock/aws4_request" in authorization and "Signature=" in authorization
    assert "x-amz-date" in request.headers
    body = request.json
    assert body["anthropic_version"] and "model" not in body  # the version travels in the body, the model in the path
    assert body["messages"][-1]["content"] == "What is the refund policy?"
    samples = read_jsonl(run_dir / "samples.jsonl")
    assert all(s["error"] is None and s["header"]["header"] == "present" for s in samples)
    assert AWS_SECRET.encode() not in everything_written(run_dir)


def test_vertex_calls_raw_predict_with_the_token_project_and_region(tmp_path, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_VERTEX_ACCESS_TOKEN", "ya29.vertex-token-abcdefghij")
    with LocalServer() as server:
        run_dir = run(tmp_path, f"vertex:claude-sonnet-4-5@20250929@{server.url}", server,
                      f'[run]\nmodels = [{{ spec = "vertex:claude-sonnet-4-5@20250929@{server.url}", '
                      'project = "acme-prod", region = "europe-west1" }]')
    request = server.requests[0]
    assert request.path == ("/projects/acme-prod/locations/europe-west1/publishers/anthropic/models/"
                            "claude-sonnet-4-5@20250929:rawPredict")
    assert request.headers["authorization"] == "Bearer ya29.vertex-token-abcdefghij"
    assert request.json["anthropic_version"] and "model" not in request.json
    assert all(s["error"] is None for s in read_jsonl(run_dir / "samples.jsonl"))
    assert b"ya29.vertex-token-abcdefghij" not in everything_written(run_dir)


def test_vertex_without_a_region_is_one_sentence(tmp_path, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_VERTEX_ACCESS_TOKEN", "ya29.vertex-token-abcdefghij")
    monkeypatch.delenv("CLOUD_ML_REGION", raising=False)
    probeset = write_probeset(tmp_path / "p.toml", [("c1", "q", None)])
    result = CliRunner().invoke(main, ["run", str(probeset), "--prompt", PROMPT, "-m", "vertex:claude-sonnet-4-5",
                                       "--retrieval", "none", "--runs-dir", str(tmp_path / "runs")])
    assert result.exit_code == 3 and "no region for Vertex" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not (tmp_path / "runs").exists()


def test_specs_parse_with_at_signs_in_model_ids_and_azure_needs_its_endpoint():
    vertex = parse_model_spec("vertex:claude-sonnet-4-5@20250929")
    assert vertex.model == "claude-sonnet-4-5@20250929" and vertex.base_url is None
    proxied = parse_model_spec("vertex:claude-sonnet-4-5@20250929@https://proxy.example/v1")
    assert proxied.model == "claude-sonnet-4-5@20250929" and proxied.base_url == "https://proxy.example/v1"
    bedrock = parse_model_spec("bedrock:anthropic.claude-sonnet-4-5-v1:0")
    assert bedrock.model == "anthropic.claude-sonnet-4-5-v1:0" and bedrock.key_env is None
    from promptprobe.errors import InputError

    with pytest.raises(InputError, match="azure:DEPLOYMENT@https://RESOURCE.openai.azure.com"):
        parse_model_spec("azure:gpt-4o")


@pytest.mark.parametrize(("spec", "blocked", "extra"), [
    ("bedrock:anthropic.claude-sonnet-4-5-v1:0", "boto3", "bedrock"),
    ("vertex:claude-sonnet-4-5", "google.auth", "vertex"),
])
def test_a_missing_cloud_library_names_the_extra(tmp_path, spec, blocked, extra):
    probeset = write_probeset(tmp_path / "p.toml", [("c1", "q", None)])
    # The library is made unimportable in a fresh interpreter, as on a machine without the extra.
    script = (f"import sys; sys.modules[{blocked!r}] = None; sys.modules['google'] = None\n"
              "from promptprobe.entry import main; sys.argv[0] = 'probe'; main()")
    env = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_VERTEX_ACCESS_TOKEN",)}
    env.update(AWS_ACCESS_KEY_ID="AKIDEXAMPLE", AWS_SECRET_ACCESS_KEY=AWS_SECRET, AWS_REGION="us-east-1",
               CLOUD_ML_REGION="us-east5")
    result = subprocess.run([sys.executable, "-c", script, "run", str(probeset), "--prompt", PROMPT, "-m", spec,
                             "--retrieval", "none", "--runs-dir", str(tmp_path / "runs")],
                            capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 3, result.stderr
    assert f"pip install 'promptprobe[{extra}]'" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists()


def test_bedrock_without_a_region_is_one_sentence(tmp_path, monkeypatch):
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", AWS_SECRET)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    probeset = write_probeset(tmp_path / "p.toml", [("c1", "q", None)])
    result = CliRunner().invoke(main, ["run", str(probeset), "--prompt", PROMPT, "-m", "bedrock:anthropic.claude-v1:0",
                                       "--retrieval", "none", "--runs-dir", str(tmp_path / "runs")])
    assert result.exit_code == 3 and len(result.stderr.strip().splitlines()) == 1
    assert "no region for Bedrock (set region in the model's table in probe.toml, AWS_REGION" in result.stderr
    assert AWS_SECRET not in result.stderr


def cloud_run(tmp_path, spec: str, config: str = ""):
    probeset = write_probeset(tmp_path / "p.toml", [("c1", "q", None)])
    args = ["run", str(probeset), "--prompt", PROMPT, "-m", spec, "--runs-dir", str(tmp_path / "runs"), "-n", "1"]
    if config:
        (tmp_path / "probe.toml").write_text(config + '\n[retrieval]\nkind = "none"\n')
        return CliRunner().invoke(main, [*args, "--config", str(tmp_path / "probe.toml")])
    return CliRunner().invoke(main, [*args, "--retrieval", "none"])


@pytest.fixture
def no_aws(tmp_path, monkeypatch):
    """No AWS credentials anywhere the chain looks (and no instance metadata to ask)."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
                 "AWS_BEARER_TOKEN_BEDROCK", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                 "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_WEB_IDENTITY_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def test_bedrock_without_credentials_is_one_sentence_before_any_call(tmp_path, no_aws, monkeypatch):
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    with LocalServer() as server:
        result = cloud_run(tmp_path, f"bedrock:anthropic.claude-v1:0@{server.url}")
    assert result.exit_code == 3, result.output
    assert "no AWS credentials for Bedrock" in result.stderr and "AWS_ACCESS_KEY_ID" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not (tmp_path / "runs").exists()
    assert server.requests == []  # found out before the run, not as a failed sample per call


def test_bedrock_with_a_missing_aws_profile_is_one_sentence(tmp_path, no_aws, monkeypatch):
    monkeypatch.setenv("AWS_PROFILE", "no-such-profile")
    for region in (None, "eu-west-1"):
        if region:
            monkeypatch.setenv("AWS_REGION", region)
        result = cloud_run(tmp_path, "bedrock:anthropic.claude-v1:0@http://127.0.0.1:9")
        assert result.exit_code == 3 and "Traceback" not in result.output, result.output
        assert "no-such-profile" in result.stderr and len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("region", ["../../x", "us east 1", "us-east-1/evil", "ÜS"])
def test_a_malformed_region_is_bad_input_and_never_looked_up(tmp_path, monkeypatch, region):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", AWS_SECRET)
    monkeypatch.setenv("ANTHROPIC_VERTEX_ACCESS_TOKEN", "ya29.vertex-token-abcdefghij")
    for spec in ("bedrock:anthropic.claude-v1:0", "vertex:claude-sonnet-4-5"):
        table = f'[run]\nmodels = [{{ spec = "{spec}", region = {json.dumps(region)}, project = "p" }}]'
        result = cloud_run(tmp_path, spec, table)
        assert result.exit_code == 2 and "Traceback" not in result.output, result.output
        assert f"region {region!r} (from the model's table in probe.toml) is not a region name" in result.stderr
        assert not (tmp_path / "runs").exists()


def test_vertex_with_a_token_but_no_project_is_one_sentence(tmp_path, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_VERTEX_ACCESS_TOKEN", "ya29.vertex-token-abcdefghij")
    monkeypatch.setenv("CLOUD_ML_REGION", "us-east5")
    monkeypatch.delenv("ANTHROPIC_VERTEX_PROJECT_ID", raising=False)
    with LocalServer() as server:
        result = cloud_run(tmp_path, f"vertex:claude-sonnet-4-5@{server.url}")
    assert result.exit_code == 3, result.output
    assert "no project for Vertex" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert server.requests == [] and not (tmp_path / "runs").exists()
