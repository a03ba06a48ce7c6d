"""A newcomer's first steps: what `probe init` prints to do next works when pasted as it is."""

import os
import subprocess
import sys

from click.testing import CliRunner

from promptprobe.cli import main


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
