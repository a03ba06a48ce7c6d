"""Synthetic run directories for the scale benchmarks: a manifest and samples.jsonl lines shaped
like a real run's (retrieval, response, raw, header, checks), written fast."""

import hashlib
import json
import random
from pathlib import Path

from promptprobe.checks import CheckSettings, outcomes
from promptprobe.checks.header import classify
from promptprobe.jsonio import dumps_line, dumps_pretty
from promptprobe.probeset import parse_probeset
from promptprobe.totals import count_and_keep

HEADER_SETTINGS = {
    "markers": ["[[ANSWER]]", "[[NO_ANSWER]]"],
    "no_answer": "[[NO_ANSWER]]",
    "allow_leading_whitespace": False,
}
CHECKS = {"header": HEADER_SETTINGS, "filter": None, "citations": None, "top_k": None}


def run_manifest(
    source: str,
    case_ids: list[str],
    prompts: list[str],
    model: str,
    repeats: int,
    samples: int,
    seed: int = 1,
) -> dict:
    """The manifest of a finished run of `prompts` x one OpenAI `model`, every sample recorded."""
    provider, name = model.split(":", 1)
    return {
        "schema_version": 2,
        "tool": "promptprobe",
        "created": "2026-11-30T00:00:00.000Z",
        "finished": "2026-11-30T01:00:00.000Z",
        "status": "complete",
        "probeset": {
            "name": "synthetic",
            "path": "probes/synthetic.toml",
            "sha256": hashlib.sha256(source.encode()).hexdigest(),
            "copy": "probeset.toml",
            "source": source,
            "cases": case_ids,
        },
        "prompts": [
            {"name": p, "path": f"prompts/{p}.md", "sha256": "0" * 64, "copy": f"prompts/{p}.md"}
            for p in prompts
        ],
        "models": [
            {
                "spec": model,
                "provider": provider,
                "model": name,
                "base_url": None,
                "api_key_env": "OPENAI_API_KEY",
            }
        ],
        "arms": [{"arm": i + 1, "prompt": p, "model": model} for i, p in enumerate(prompts)],
        "header": HEADER_SETTINGS,
        "checks": CHECKS,
        "repeats": repeats,
        "seed": seed,
        "counts": {"planned": samples, "recorded": samples, "errors": 0},
    }


def make_run(
    path: Path,
    samples: int,
    cases: int = 20,
    arms: int = 2,
    seed: int = 1,
    output: str | None = None,
    totals: bool = False,
) -> Path:
    """A complete run of `samples` samples over `cases` cases and `arms` prompts; with `output`,
    each sample's raw text is that text, in a pack (raw/pack-000001.bin, raw/index.jsonl) as a
    run writes it; without, the records point at raw files that do not exist. With `totals`, its
    manifest keeps the per-arm totals `probe run` keeps at a run's end (a pass over the run)."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "raw").mkdir(exist_ok=True)
    case_ids = [f"case-{i:03d}" for i in range(cases)]
    source = "".join(
        f'[[case]]\nid = "{c}"\nquestion = "Question number {i}?"\n'
        f'expect = "{"no_answer" if i % 2 else "answer"}"\n'
        f'must_retrieve = ["doc-{i % 7}"]\n\n'
        for i, c in enumerate(case_ids)
    )
    prompts = [f"prompt-{a}" for a in range(arms)]
    repeats = max(1, samples // (cases * arms))
    manifest = run_manifest(
        source, case_ids, prompts, "openai:gpt-4.1-mini", repeats, repeats * cases * arms, seed=seed
    )
    (path / "manifest.json").write_text(dumps_pretty(manifest))
    rng = random.Random(seed)
    headers = [
        classify(t) for t in ("[[ANSWER]]\nok", "[[NO_ANSWER]]\nsorry", "sorry\n[[NO_ANSWER]]", "plain")
    ]
    probeset = parse_probeset(source.encode(), Path("synthetic.toml"))
    settings = CheckSettings.from_dict(manifest["checks"])
    recorded_outcomes = {}  # what the executor records with each sample, per (case, header)
    data = output.encode("utf-8") if output is not None else b""
    digest = hashlib.sha256(data).hexdigest()
    pack = open(path / PACK, "wb") if output is not None else None
    index = open(path / "raw" / "index.jsonl", "wb") if output is not None else None
    with open(path / "samples.jsonl", "wb") as out:
        for repeat in range(1, repeats + 1):
            for i, case_id in enumerate(case_ids):
                for a, prompt in enumerate(prompts):
                    sid = f"{case_id}.r{repeat}.a{a + 1}"
                    which = rng.randrange(4) if a else rng.randrange(2)
                    header = headers[which]
                    record = {
                        "sample_id": sid,
                        "case_id": case_id,
                        "repeat": repeat,
                        "prompt": prompt,
                        "model": "openai:gpt-4.1-mini",
                        "started_at": "2026-11-30T00:00:00.000Z",
                        "latency_ms": rng.randrange(300, 3000),
                        "attempts": 1,
                        "attempts_log": [],
                        "retrieval": {
                            "passage_ids": [f"doc-{(i + k) % 7}" for k in range(3)],
                            "scores": [12.5, 9.25, 3.0],
                            "sha256": "ab" * 32,
                            "empty": False,
                        },
                        "response": {
                            "stop_reason": "stop",
                            "usage": {"prompt_tokens": 812, "completion_tokens": 96, "total_tokens": 908},
                            "request_id": f"req_{rng.getrandbits(64):016x}",
                            "model": "gpt-4.1-mini-2025-04-14",
                            "body": f"raw/{sid}.body",
                        },
                        "raw": {"path": f"raw/{sid}.txt", "sha256": "cd" * 32, "bytes": 412},
                        **(packed(pack, index, sid, data, digest) if pack is not None else {}),
                        "header": header,
                        "checks": {"retrieval": {"ranks": {f"doc-{i % 7}": 1}}},
                        "error": None,
                    }
                    key = (i, which)
                    if key not in recorded_outcomes:
                        recorded_outcomes[key] = outcomes(record, probeset.cases[i], settings)
                    record["outcomes"] = recorded_outcomes[key]
                    out.write(dumps_line(record))
    for handle in (pack, index):
        if handle is not None:
            handle.close()
    if totals:
        count_and_keep(path)
    return path


PACK = "raw/pack-000001.bin"


def packed(pack, index, sid: str, data: bytes, digest: str) -> dict:
    """Append one sample's text to the pack and the index; its record's `raw` and `response.body`."""
    location = {"pack": PACK, "offset": pack.tell(), "bytes": len(data), "sha256": digest}
    pack.write(data)
    index.write(dumps_line({"sample_id": sid, "kind": "txt", **location}))
    return {"raw": location}


if __name__ == "__main__":
    import sys

    print(make_run(Path(sys.argv[1]), int(sys.argv[2])))
    print(json.dumps({"ok": True}))
