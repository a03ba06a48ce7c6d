"""What a run costs: the price table, --dry-run, --max-cost, and tokens, latency and cost per
arm in the report."""

import json
from datetime import UTC, date, datetime

import pytest
from click.testing import CliRunner
from conftest import ROOT, run_dir_of, write_config, write_probeset
from servers import LocalServer, Reply, openai_body

from promptprobe.cli import main
from promptprobe.endpoints import resolve
from promptprobe.engine.cost import load_prices, run_day, usage_tokens
from promptprobe.errors import InputError
from promptprobe.models import parse_model_spec

PROMPT = str(ROOT / "prompts" / "always-header.md")


def library_price(model_id: str, provider: str) -> tuple[float, float]:
    """genai-prices' own figures for a model per million tokens (its calc_price on 1,000 tokens each
    way, a prompt of a probe's size, below any long-context tier)."""
    from genai_prices import Usage, calc_price

    found = calc_price(Usage(input_tokens=1000, output_tokens=1000), model_id, provider_id=provider)
    return float(found.input_price * 1000), float(found.output_price * 1000)


def test_a_built_in_price_comes_from_genai_prices_for_its_exact_model_id_or_a_dated_snapshot_of_it():
    prices = load_prices()
    assert prices.taken.startswith("genai-prices ")  # the source, its version and the date of its data
    # Each row is what the library itself charges for that model, by its own calculation.
    for spec, model_id in (("anthropic:claude-sonnet-5-5", "claude-sonnet-5-5"), ("openai:gpt-4.1-mini", "gpt-4.1-mini"),
                           ("anthropic:claude-opus-4-6", "claude-opus-4-6"), ("openai:o3", "o3")):
        price = prices.lookup(parse_model_spec(spec))
        assert (price.input, price.output) == library_price(model_id, spec.split(":")[0]), spec
        assert price.source == f"built-in, {prices.taken}"
    # OpenAI models have prices now, and the dated snapshot the library lists is its model's.
    mini = prices.lookup(parse_model_spec("openai:gpt-4.1-mini-2025-04-14"))
    assert (mini.row, mini.rule) == ("openai:gpt-4.1-mini", "listed as gpt-4.1-mini")
    sonnet = prices.lookup(parse_model_spec("anthropic:claude-sonnet-4-5-20250929"))
    assert (sonnet.row, sonnet.rule) == ("anthropic:claude-sonnet-4-5",
                                         "dated snapshot of claude-sonnet-4-5; base tier: prompts under 200,000 tokens")
    assert (sonnet.input, sonnet.output) == library_price("claude-sonnet-4-5", "anthropic")
    # A price that changed on a date is the one in effect today, and says since when.
    assert prices.lookup(parse_model_spec("anthropic:claude-opus-4-6")).taken == "2026-03-13"
    # A newer model of a family is never priced as its older namesake.
    assert prices.lookup(parse_model_spec("anthropic:claude-opus-5-5")).output == 20.0  # not opus-5's 25
    assert prices.lookup(parse_model_spec("anthropic:claude-haiku-5-5")) is None  # tiered from 100,000 tokens: no guess
    # The library matches by prefix (it prices claude-opus-4-1-fast as claude-opus-4-1); probe does not.
    assert library_price("claude-opus-4-1-fast", "anthropic") == library_price("claude-opus-4-1", "anthropic")
    for spec in ("anthropic:claude-opus-4-9", "anthropic:claude-opus-4-1-fast", "openai:gpt-4.1-mini-fast",
                 "anthropic:claude-sonnet-4-5-2025", "anthropic:claude-sonnet-4-5-latest"):
        match = prices.match(parse_model_spec(spec))
        assert match.price is None and match.reason.startswith(f"cost unknown for {spec}: "), spec
        assert "[prices]" in match.reason
    assert prices.lookup(parse_model_spec("openai:llama3@http://localhost:11434/v1")) is None
    assert prices.lookup(parse_model_spec("openai:gpt-4.1-mini@http://localhost:11434/v1")) is None  # not OpenAI's


def test_a_run_is_priced_as_of_its_own_day():
    # o3's price fell on 2025-06-10: a run of the day before keeps the old price in its report.
    o3 = parse_model_spec("openai:o3")
    before = load_prices(day=date(2025, 6, 9)).lookup(o3)
    after = load_prices(day=date(2025, 6, 10)).lookup(o3)
    for price, day in ((before, datetime(2025, 6, 9, 12, tzinfo=UTC)), (after, datetime(2025, 6, 10, 12, tzinfo=UTC))):
        from genai_prices import Usage, calc_price

        found = calc_price(Usage(input_tokens=1000, output_tokens=1000), "o3", provider_id="openai",
                           genai_request_timestamp=day)
        assert (price.input, price.output) == (float(found.input_price * 1000), float(found.output_price * 1000))
    assert before.input > after.input and (before.taken, after.taken) == (None, "2025-06-10")
    assert run_day({"created": "2025-06-09T23:59:59.000Z"}) == date(2025, 6, 9) and run_day({}) is None
    # The user's [prices] entry is the user's word for that spec as written (and its dated snapshots).
    extended = load_prices({"openai:llama3@http://localhost:11434/v1": {"input": 0, "output": 0},
                            "openai:gpt-4.1-mini": {"input": 0.5, "output": 2},
                            "anthropic:claude-sonnet-5-5": {"input": 1, "output": 2}})
    assert extended.lookup(parse_model_spec("openai:llama3@http://localhost:11434/v1")).cost(10**6, 10**6) == 0
    assert extended.lookup(parse_model_spec("openai:llama3@http://localhost:11435/v1")) is None  # another server
    mini = extended.lookup(parse_model_spec("openai:gpt-4.1-mini-2025-04-14"))
    assert (mini.input, mini.row, mini.source, mini.taken) == (0.5, "openai:gpt-4.1-mini", "probe.toml", None)
    assert extended.lookup(parse_model_spec("openai:gpt-4.1-mini-fast")) is None
    assert extended.lookup(parse_model_spec("anthropic:claude-sonnet-5-5")).input == 1  # overrides the table
    with pytest.raises(InputError, match="must be a number of USD >= 0"):
        load_prices({"openai:x": {"input": -1, "output": 1}})
    with pytest.raises(InputError, match="must be a model spec"):
        load_prices({"gpt-4": {"input": 1, "output": 1}})


def test_list_prices_apply_only_on_the_providers_own_endpoint():
    prices = load_prices()
    spec = parse_model_spec("anthropic:claude-sonnet-5-5")
    own = resolve(spec, {})
    assert (own.url, own.source, own.own) == ("https://api.anthropic.com", "default", True)
    assert prices.match(spec, own).price.input == 2.0
    proxy = resolve(spec, {"ANTHROPIC_BASE_URL": "https://llm-proxy.internal/anthropic"})
    assert (proxy.url, proxy.source, proxy.own) == (
        "https://llm-proxy.internal/anthropic", "environment ANTHROPIC_BASE_URL", False)
    match = prices.match(spec, proxy)
    assert match.price is None
    assert match.reason.startswith("cost unknown for anthropic:claude-sonnet-5-5: its calls go to "
                                   "https://llm-proxy.internal/anthropic (from environment ANTHROPIC_BASE_URL), "
                                   "not to Anthropic's own endpoint")
    # The provider's own host written out is still its own endpoint; a look-alike host is not.
    assert resolve(spec, {"ANTHROPIC_BASE_URL": "https://api.anthropic.com/"}).own
    assert not resolve(spec, {"ANTHROPIC_BASE_URL": "https://api.anthropic.com.evil.example"}).own
    assert not resolve(spec, {"ANTHROPIC_BASE_URL": "http://api.anthropic.com"}).own
    assert not resolve(parse_model_spec("anthropic:claude-sonnet-5-5@https://api.anthropic.com:8443"), {}).own
    # Batch prices follow the same rule: half of a price that applies, nothing where none does.
    assert prices.match(spec, own).price.batch == 0.5


def test_usage_tokens_for_both_apis():
    assert usage_tokens({"input_tokens": 100, "output_tokens": 20, "cache_read_input_tokens": 50}) == (150, 20)
    assert usage_tokens({"prompt_tokens": 120, "completion_tokens": 17, "total_tokens": 137}) == (120, 17)
    assert usage_tokens({}) == (0, 0)


def probeset(tmp_path, cases=10):
    return str(write_probeset(tmp_path / "p.toml", [(f"c{i}", f"question {i}", None) for i in range(cases)]))


def test_dry_run_prices_the_plan_without_a_call(tmp_path):
    result = CliRunner().invoke(main, ["run", probeset(tmp_path), "--prompt", PROMPT, "--prompt", f"b={PROMPT}",
                                       "--model", "anthropic:claude-sonnet-4-5", "--model", "openai:m@http://127.0.0.1:9/v1",
                                       "-n", "3", "--max-tokens", "100", "--dry-run", "--runs-dir", str(tmp_path / "runs")])
    assert result.exit_code == 0, result.output  # no key needed, nothing called, nothing written
    assert not (tmp_path / "runs").exists()
    assert "120 model calls and no retrieval" in result.stdout  # no config: the bare questions
    # ... which the run itself refuses without --retrieval none: the plan says so.
    assert "note: there is no probe.toml here: the run itself needs --config FILE or --retrieval none" in result.stdout
    assert "cost unknown" in result.stdout  # the local model has no price: never a guess
    # Which row priced each model, and when it was taken; why the other has none, naming it.
    source = load_prices().taken
    words = " ".join(result.stdout.split())  # the sentence is folded to the terminal's width
    assert f"price of anthropic:claude-sonnet-4-5: row anthropic:claude-sonnet-4-5 (built-in, {source}, base tier" in words
    assert "cost unknown for openai:m@http://127.0.0.1:9/v1: its calls go to http://127.0.0.1:9/v1 (from spec)" in result.stdout
    data = json.loads(CliRunner().invoke(main, ["run", probeset(tmp_path), "--prompt", PROMPT, "--model",
                                                "anthropic:claude-sonnet-4-5", "-n", "3", "--max-tokens", "100",
                                                "--dry-run", "--format", "json"]).stdout)
    (arm,) = data["arms"]
    assert arm["calls"] == 30 and arm["output_tokens_max"] == 3000
    prompt_tokens = -(-len((ROOT / "prompts" / "always-header.md").read_text()) // 4)
    assert arm["input_tokens"] >= 30 * prompt_tokens
    assert arm["cost_usd"] == pytest.approx((arm["input_tokens"] * 3 + 3000 * 15) / 1e6)
    assert data["cost_usd"] == arm["cost_usd"]
    assert arm["price"] == {
        "row": "anthropic:claude-sonnet-4-5", "input": 3.0, "output": 15.0, "cache_read": 0.3, "cache_write": 3.75,
        "source": f"built-in, {load_prices().taken}", "taken": None, "rule": "base tier: prompts under 200,000 tokens"}
    assert arm["cost_unknown"] is None and data["cost_unknown"] == []
    assert arm["endpoint"] == {"url": "https://api.anthropic.com", "from": "default", "provider_own": True}


def test_a_dry_run_without_retrieval_says_so_and_counts_in_words(tmp_path):
    # "1 arms: 4 model calls and 4 retrievals" under a plan that fetches nothing read wrong.
    result = CliRunner().invoke(main, ["run", probeset(tmp_path, cases=4), "--prompt", PROMPT, "--retrieval", "none",
                                       "--model", "anthropic:claude-sonnet-4-5", "-n", "1", "--dry-run"])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0] == "dry run: p, 4 cases x 1 repeat, 1 arm: 4 model calls and no retrieval"
    assert "no probe.toml here" not in result.stdout  # --retrieval none said it


def test_max_cost_refuses_a_plan_estimated_above_it(tmp_path):
    result = CliRunner().invoke(main, ["run", "--retrieval", "none", probeset(tmp_path), "--prompt", PROMPT, "--model",
                                       "anthropic:claude-sonnet-4-5", "--max-cost", "0.001",
                                       "--runs-dir", str(tmp_path / "runs")])
    assert result.exit_code == 2
    assert "above --max-cost $0.00" in result.stderr and not (tmp_path / "runs").exists()


def test_max_cost_refuses_to_start_on_an_unknown_price_in_one_sentence(tmp_path, retrieval_server):
    config = write_config(tmp_path / "probe.toml", retrieval_server.url)
    for spec in ("openai:gpt-4.1-mini-fast", "anthropic:claude-opus-4-9", "openai:m@http://127.0.0.1:9/v1"):
        result = CliRunner().invoke(main, ["run", probeset(tmp_path), "--prompt", PROMPT, "--model", spec,
                                           "--config", str(config), "--max-cost", "5",
                                           "--runs-dir", str(tmp_path / "runs")])
        assert result.exit_code == 2, result.output
        (line,) = result.stderr.splitlines()
        assert line.startswith(f"error: --max-cost refuses to start: cost unknown for {spec}: ")
        assert f'"{spec}" = {{ input = USD, output = USD }}' in line  # says how to give the price
    assert retrieval_server.requests == [] and not (tmp_path / "runs").exists()  # refused before anything
    # Both models are named when both lack a price.
    result = CliRunner().invoke(main, ["run", "--retrieval", "none", probeset(tmp_path), "--prompt", PROMPT,
                                       "-m", "openai:gpt-5-pro-fast", "-m", "openai:o9-pro", "--max-cost", "5"])
    assert result.exit_code == 2 and "openai:gpt-5-pro-fast" in result.stderr and "openai:o9-pro" in result.stderr
    # A dry run with --max-cost refuses exactly as the run does: exit 2, the same sentence.
    for dry in ([], ["--dry-run"], ["--dry-run", "--until-decided"]):
        refused = CliRunner().invoke(main, ["run", "--retrieval", "none", probeset(tmp_path), "--prompt", PROMPT,
                                            "--prompt", f"b={PROMPT}", "-m", "openai:o9-pro", "--max-cost", "5", *dry])
        assert refused.exit_code == 2, refused.output
        assert refused.stderr == ("error: --max-cost refuses to start: cost unknown for openai:o9-pro: no built-in "
                                  "price for the exact model id o9-pro; give it under [prices] in probe.toml "
                                  '("openai:o9-pro" = { input = USD, output = USD })\n'), dry
    # A [prices] entry gives the price: the estimate is then checked against the cap.
    (tmp_path / "priced.toml").write_text('[retrieval]\nkind = "none"\n[prices]\n'
                                          '"openai:o9-pro" = { input = 15, output = 120 }\n')
    result = CliRunner().invoke(main, ["run", probeset(tmp_path), "--prompt", PROMPT, "-m", "openai:o9-pro",
                                       "--config", str(tmp_path / "priced.toml"), "--max-cost", "0.01"])
    assert result.exit_code == 2 and "above --max-cost $0.01" in result.stderr


def test_max_cost_stops_scheduling_when_recorded_usage_reaches_it(tmp_path):
    body = json.loads(openai_body("[[ANSWER]]\nok", "m", None))
    body["usage"] = {"prompt_tokens": 5000, "completion_tokens": 17, "total_tokens": 5017}
    with LocalServer(lambda r: Reply(body=json.dumps(body).encode())) as server:
        spec = f"openai:m@{server.url}/v1"
        (tmp_path / "probe.toml").write_text(f'[run]\nconcurrency = 1\n[prices]\n"{spec}" = {{ input = 1000, output = 1000 }}\n')
        result = CliRunner().invoke(main, ["run", probeset(tmp_path), "--prompt", PROMPT, "--model", spec,
                                           "--max-tokens", "17", "--max-cost", "9", "--config", str(tmp_path / "probe.toml"),
                                           "--runs-dir", str(tmp_path / "runs")])
    assert result.exit_code == 1, result.output
    assert "stopped at --max-cost" in result.stderr
    manifest = json.loads((run_dir_of(result) / "manifest.json").read_text())
    assert manifest["stopped_by"] == "max_cost" and manifest["status"] == "interrupted"
    assert 2 <= manifest["counts"]["recorded"] < 10  # 5.017 USD a call: stops once 9 is reached


def test_a_resumed_run_keeps_its_max_cost_over_the_whole_run(tmp_path):
    # 5.017 USD a call, a cap of 9: the first run stops after 2; a resume spends nothing more
    # unless --max-cost raises the cap, and then only up to it (counting what was spent before).
    body = json.loads(openai_body("[[ANSWER]]\nok", "m", None))
    body["usage"] = {"prompt_tokens": 5000, "completion_tokens": 17, "total_tokens": 5017}
    with LocalServer(lambda r: Reply(body=json.dumps(body).encode())) as server:
        spec = f"openai:m@{server.url}/v1"
        (tmp_path / "probe.toml").write_text(f'[run]\nconcurrency = 1\n[prices]\n"{spec}" = {{ input = 1000, output = 1000 }}\n')
        first = CliRunner().invoke(main, ["run", probeset(tmp_path), "--prompt", PROMPT, "--model", spec,
                                          "--max-tokens", "17", "--max-cost", "9", "--config", str(tmp_path / "probe.toml"),
                                          "--runs-dir", str(tmp_path / "runs")])
        run = run_dir_of(first)
        calls = len(server.requests)
        again = CliRunner().invoke(main, ["run", "--resume", str(run)])
        assert again.exit_code == 1 and "stopped at --max-cost" in again.stderr, again.output
        assert len(server.requests) == calls == 2
        raised = CliRunner().invoke(main, ["run", "--resume", str(run), "--max-cost", "19"])
        assert raised.exit_code == 1 and "stopped at --max-cost" in raised.stderr, raised.output
        assert len(server.requests) == 4  # 4 x 5.017 reaches 19
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["parameters"]["max_cost"] == 19 and manifest["counts"]["recorded"] == 4


def test_report_shows_tokens_latency_and_cost_per_arm(tmp_path):
    with LocalServer(lambda r: Reply("[[ANSWER]]\nok", delay=0.02)) as server:
        spec = f"openai:m@{server.url}/v1"
        (tmp_path / "probe.toml").write_text(f'[prices]\n"{spec}" = {{ input = 2, output = 8 }}\n')
        priced = CliRunner().invoke(main, ["run", probeset(tmp_path, 4), "--prompt", PROMPT, "--model", spec,
                                           "--config", str(tmp_path / "probe.toml"), "--runs-dir", str(tmp_path / "a")])
        unpriced = CliRunner().invoke(main, ["run", "--retrieval", "none", probeset(tmp_path, 4), "--prompt", PROMPT, "--model", spec,
                                             "--runs-dir", str(tmp_path / "b")])
    # The manifest keeps each model's price as the run was priced: its row and source, or why none.
    priced_manifest = json.loads((run_dir_of(priced) / "manifest.json").read_text())
    assert priced_manifest["model_prices"] == [{"model": spec, "cost_unknown": None, "price": {
        "row": spec, "input": 2.0, "output": 8.0, "cache_read": None, "cache_write": 2.0, "source": "probe.toml",
        "taken": None, "rule": None}}]
    (unknown,) = json.loads((run_dir_of(unpriced) / "manifest.json").read_text())["model_prices"]
    assert unknown["price"] is None and unknown["cost_unknown"].startswith(f"cost unknown for {spec}: its calls go to")
    report = json.loads(CliRunner().invoke(main, ["report", str(run_dir_of(priced)), "--json"]).stdout)
    usage = report["arms"][0]["usage"]
    assert usage["input_tokens"] == 4 * 120 and usage["output_tokens"] == 4 * 17
    assert usage["cost_usd"] == pytest.approx((480 * 2 + 68 * 8) / 1e6)
    assert usage["latency_ms"]["median"] >= 20 and usage["latency_ms"]["p90"] >= usage["latency_ms"]["median"]
    text = CliRunner().invoke(main, ["report", str(run_dir_of(unpriced))]).stdout
    assert "cost unknown" in text and "latency median" in text and "tokens in" in text
