"""`probe check` checks the target too: a probe.toml given with --config, as a file, or found in
the current directory is validated with every problem at once and the key meant for each near
miss; a probe.toml is never read as a probe set; probe sets get did-you-mean as well."""

import json

from click.testing import CliRunner
from conftest import ROOT, write_probeset

from promptprobe.cli import main

PROBESET = ROOT / "probes" / "refusal-header.toml"
BAD = """
[retreival]
kind = "http"

[run]
concurency = 4
repeats = 0
models = ["openai:m", "no-provider"]

[header]
marker = ["[[A]]"]

[prices]
"openai:m" = { input = -1, output = 1 }
"""


def check(*args, cwd=None):
    return CliRunner().invoke(main, ["check", *map(str, args)])


def test_a_bad_config_given_with_config_is_reported_every_problem_at_once(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text(BAD)
    result = check("--config", bad, PROBESET)
    assert result.exit_code == 2
    assert "ok: refusal-header (12 cases, 3 repeats)" in result.stdout  # the probe set itself is fine
    errors = result.stderr.splitlines()
    assert errors == [
        f"error: {bad}: unknown key 'retreival' (did you mean 'retrieval'?) (expected one of: assemble, check, "
        "citations, filter, header, prices, retrieval, run, vars)",
        f"error: {bad} [header]: unknown key 'marker' (did you mean 'markers'?) (expected one of: "
        "allow_leading_whitespace, markers, no_answer)",
        f"error: {bad} [run]: unknown key 'concurency' (did you mean 'concurrency'?) (expected one of: batch, cache, "
        "concurrency, max_attempts, max_retry_wait, max_tokens, models, repeats, rpm, runs_dir, seed, stream, temperature, "
        "timeout, umask)",
        f"error: {bad} [run]: model 'no-provider': expected PROVIDER:MODEL, e.g. anthropic:claude-sonnet-5-5 or "
        "openai:llama3@http://localhost:11434/v1",
        f"error: {bad} [run]: 'repeats' must be between 1 and 1e+06, got 0",
        f"error: {bad} [prices] 'openai:m': 'input' must be a number of USD >= 0, got -1",
    ]
    data = json.loads(check("--config", bad, PROBESET, "--json").stdout)
    (target,) = [r for r in data["probesets"] if r["kind"] == "target config"]
    assert target["ok"] is False and len(target["problems"]) == 6


def test_probe_toml_given_as_a_file_is_checked_as_the_target(tmp_path):
    good = tmp_path / "probe.toml"
    good.write_text('[retrieval]\nkind = "none"\n[run]\nmodels = ["anthropic:claude-sonnet-5-5"]\n[vars]\nproduct = "Acme"\n')
    result = check(good, PROBESET)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0] == f'ok: target config {good} (retrieval "none", 1 model in [run])'
    good.write_text(BAD)
    result = check(good)
    assert result.exit_code == 2
    assert "did you mean 'retrieval'?" in result.stderr and "'case'" not in result.stderr  # not read as a probe set
    # Under another name, a file with the target's tables and no [[case]] is a target config too.
    other = tmp_path / "staging.toml"
    other.write_text('[retrieval]\nkind = "none"\n[header]\nmarkers = ["[[A]]", "[[N]]"]\nno_answer = "[[N]]"\n')
    assert check(other).stdout.startswith(f'ok: target config {other} (retrieval "none", 0 models in [run])')
    assert check(other, "--format", "md").stdout.splitlines()[2].startswith(f"| {other} | target config | yes |")


def test_the_probe_toml_of_the_current_directory_is_checked(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "probe.toml").write_text("[retrieval]\nkind = 'none'\n[vars]\nproduct = 'Acme'\n[run]\nrepets = 3\n")
    (tmp_path / "prompt.md").write_text("Answer about {{product}}.\n")
    result = check(PROBESET, "prompt.md")
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        "error: probe.toml [run]: unknown key 'repets' (did you mean 'repeats'?) (expected one of: batch, cache, "
        "concurrency, max_attempts, max_retry_wait, max_tokens, models, repeats, rpm, runs_dir, seed, stream, temperature, "
        "timeout, umask)"
    ]
    # Its [vars] still let the prompt's {{product}} be checked.
    (tmp_path / "probe.toml").write_text("[retrieval]\nkind = 'none'\n[vars]\nproduct = 'Acme'\n")
    assert check(PROBESET, "prompt.md").exit_code == 0


def test_a_probe_set_key_near_miss_says_which_key_was_meant(tmp_path):
    path = write_probeset(tmp_path / "p.toml", [("a", "What is it?", None)], extra="")
    path.write_text(path.read_text().replace("repeats = 1", "repeat = 2") + 'expected = "answer"\n')
    result = check(path)
    assert result.exit_code == 2
    assert "unknown key 'repeat' (did you mean 'repeats'?)" in result.stderr
    assert "case 'a': unknown key 'expected' (did you mean 'expect'?)" in result.stderr


def test_a_target_config_given_where_a_probe_set_belongs_is_said_to_be_one(tmp_path):
    config = tmp_path / "probe.toml"
    config.write_text('[retrieval]\nkind = "none"\n')
    result = CliRunner().invoke(main, ["run", str(config), "--prompt", str(ROOT / "prompts" / "always-header.md"),
                                       "--dry-run"])
    assert result.exit_code == 2
    assert result.stderr == (f"error: {config} is a target config (probe.toml), not a probe set: give it as "
                             f"--config {config}, and the probe set (the questions) first\n")
