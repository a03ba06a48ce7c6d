"""The Python API misused the way a notebook or a test file misuses it: counts given as whole
floats, run paths holding '#', spaces or non-ASCII letters, results read after their run
directory was deleted. Each is either done right or a domain error in one sentence."""

import json

from conftest import ROOT, write_probeset
from servers import LocalServer

import promptprobe

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
