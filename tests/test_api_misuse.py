"""The Python API misused the way a notebook or a test file misuses it: counts given as whole
floats, run paths holding '#', spaces or non-ASCII letters, results read after their run
directory was deleted. Each is either done right or a domain error in one sentence."""

import json
import shutil

import pytest
from click.testing import CliRunner
from conftest import ROOT, write_probeset
from servers import LocalServer, Reply

import promptprobe
from promptprobe.cli import main

PROMPT = ROOT / "prompts" / "always-header.md"


def test_whole_float_counts_run_like_their_ints(tmp_path):
    """repeats=2.0 once passed the check and then stopped the workers: a 'complete' run of 0 samples."""
    probeset = write_probeset(tmp_path / "p.toml", [("c0", "q0", None), ("c1", "q1", None)])
    with LocalServer() as server:
        result = promptprobe.run(probeset, prompts=[PROMPT], models=[f"openai:m@{server.url}/v1"],
                                 retrieval="none", runs_dir=tmp_path / "runs", repeats=2.0, concurrency=2.0,
                                 max_tokens=64.0, seed=7.0)
    assert result.status == "complete"
    assert result.counts == {"planned": 4, "recorded": 4, "errors": 0}
    assert all(type(v) is int for v in result.counts.values())
    manifest = json.loads((result.path / "manifest.json").read_text())
    parameters = manifest["parameters"]
    assert (parameters["max_tokens"], parameters["seed"], parameters["concurrency"]) == (64, 7, 2)
    assert all(type(parameters[k]) is int for k in ("max_tokens", "seed", "concurrency"))


def test_a_run_under_a_folder_holding_a_hash_is_selected_by_its_arms(tmp_path):
    """`~/C# proj/runs/RUN#prompt=v1` was cut at the first '#': "~/C: no such run directory"."""
    folder = tmp_path / "C# proj ü"
    folder.mkdir()
    (folder / "v1.md").write_text("help desk v1\n")
    (folder / "v2.md").write_text("help desk v2 first line of every reply\n")
    probeset = write_probeset(folder / "p.toml", [(f"c{i}", f"question {i}", None) for i in range(4)], repeats=2)

    def reply(request):
        return Reply("[[ANSWER]]\nok" if "v2" in request.json["messages"][0]["content"] else "ok")

    with LocalServer(reply) as server:
        result = promptprobe.run(probeset, prompts=[folder / "v1.md", folder / "v2.md"],
                                 models=[f"openai:m@{server.url}/v1"], retrieval="none", runs_dir=folder / "runs")
    a, b = f"{result.path}#prompt=v1", f"{result.path}#prompt=v2"
    comparison = promptprobe.compare(a, b)
    assert (comparison.results[0]["a"]["k"], comparison.results[0]["b"]["k"]) == (0, 8)
    printed = CliRunner().invoke(main, ["compare", a, b, "--json"])
    assert printed.exit_code == 0, printed.output
    assert json.loads(printed.stdout) == comparison.to_dict()
    why = CliRunner().invoke(main, ["why", a, "--json"])
    assert why.exit_code == 0, why.output
    assert json.loads(why.stdout)["arm"] == "prompt v1"


def test_a_loaded_run_deleted_since_says_so_instead_of_having_no_samples(tmp_path):
    probeset = write_probeset(tmp_path / "p.toml", [("c0", "q0", None)])
    with LocalServer() as server:
        result = promptprobe.run(probeset, prompts=[PROMPT], models=[f"openai:m@{server.url}/v1"],
                                 retrieval="none", runs_dir=tmp_path / "runs")
    loaded = promptprobe.load(result.path)
    assert len(list(loaded.samples())) == 1
    shutil.rmtree(result.path)
    with pytest.raises(promptprobe.InputError, match="not a run directory"):
        loaded.samples()
    with pytest.raises(promptprobe.InputError, match="not a run directory"):
        result.report.html()
    assert "always-header" in str(result.report)  # the numbers already read stay readable
