"""A newcomer's first steps: what `probe init` prints to do next works when pasted as it is."""

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner
from conftest import ROOT, write_probeset
from servers import LocalServer, Reply, openai_body

from promptprobe.cli import main

PROMPT = ROOT / "prompts" / "always-header.md"


def test_the_next_step_probe_init_prints_runs_when_pasted_into_a_shell(tmp_path):
    """`probe init 'new proj ü'` printed `cd new proj ü && ...`: bash says "too many arguments"."""
    folder = tmp_path / "new proj ü"
    result = CliRunner().invoke(main, ["init", str(folder)])
    assert result.exit_code == 0, result.output
    line = next(x for x in result.output.splitlines() if x.startswith("next: ")).removeprefix("next: ")
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "probe").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m promptprobe.entry "$@"\n')
    (shim / "probe").chmod(0o755)
    env = {**os.environ, "PATH": f"{shim}{os.pathsep}{os.environ['PATH']}"}
    pasted = subprocess.run(["bash", "-c", line], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=120)
    assert pasted.returncode == 0, pasted.stderr
    assert "ok: example (4 cases, 3 repeats)" in pasted.stdout


def test_the_resume_line_after_max_cost_pastes_under_a_runs_dir_with_a_space(tmp_path):
    """`--runs-dir 'my runs'` printed `probe run --resume my runs/RUN --max-cost USD continues`."""
    body = json.loads(openai_body("[[ANSWER]]\nok", "m", None))
    body["usage"] = {"prompt_tokens": 5000, "completion_tokens": 17, "total_tokens": 5017}
    probeset = write_probeset(tmp_path / "p.toml", [(f"c{i}", f"question {i}", None) for i in range(10)])
    with LocalServer(lambda r: Reply(body=json.dumps(body).encode())) as server:
        spec = f"openai:m@{server.url}/v1"
        (tmp_path / "probe.toml").write_text(
            f'[retrieval]\nkind = "none"\n[run]\nconcurrency = 1\n[prices]\n"{spec}" = {{ input = 1000, output = 1000 }}\n'
        )
        result = CliRunner().invoke(main, ["run", str(probeset), "--prompt", str(PROMPT), "--model", spec,
                                           "--max-tokens", "17", "--max-cost", "9", "--config",
                                           str(tmp_path / "probe.toml"), "--runs-dir", str(tmp_path / "my runs")])
    assert result.exit_code == 1, result.output
    line = next(x for x in result.stderr.splitlines() if "--resume" in x)
    words = shlex.split(line.split("; ", 1)[1])
    assert words[:3] == ["probe", "run", "--resume"] and words[4:6] == ["--max-cost", "USD"]
    assert (Path(words[3]) / "manifest.json").is_file()
