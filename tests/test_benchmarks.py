"""Every script in benchmarks/ still runs (at a small size) and prints its table: they drive the
CLI and the statistics as a user would, so a change there can break them without any other test
noticing (run_speed.py once stopped at the no-retrieval rule). The figures themselves are not
checked here: speed is measured by running them in full."""

import subprocess
import sys

import pytest
from conftest import ROOT

SMALL = {
    "batch_scale.py": ["--samples", "200"],
    "compare_speed.py": ["--pairs", "1", "--demo-compares", "1"],
    "coverage.py": ["--smoke"],
    "effect_coverage.py": ["--trials", "20"],
    "export_scale.py": ["--samples", "200"],
    "gate_family.py": ["--trials", "20", "--pool-repeats", "4"],
    "pair_gate.py": ["--trials", "20"],
    "judge.py": ["--runs", "5"],
    "interval_agreement.py": ["--designs", "2", "--coverage-trials", "2"],
    "plan_power.py": ["--trials", "20", "--deep", "20", "--quick"],
    "run_speed.py": ["--runs", "1", "--delay-ms", "10", "--cases", "2", "--repeats", "2"],
    "scale.py": ["--quick"],
    "scrub_speed.py": ["--repeats", "2"],
    "sequential.py": ["--trials", "20", "--quick"],
    "store_speed.py": ["--runs", "1", "--delay-ms", "10", "--cases", "1"],
    "verdict_rules.py": [
        "--trials", "20", "--power-trials", "20", "--unequal-trials", "5", "--designs", "2", "--quick"
    ],
    "viewer.py": ["--samples", "2000", "--long-mb", "0.2"],
}


def test_every_benchmark_has_a_small_size_here():
    helpers = {"synthetic.py", "installed.py"}  # modules the scripts import, not benchmarks
    scripts = sorted(p.name for p in (ROOT / "benchmarks").glob("*.py") if p.name not in helpers)
    assert scripts == sorted(SMALL)  # a new benchmark gets a small size here


@pytest.mark.parametrize("name", sorted(SMALL))
def test_the_benchmark_runs_at_a_small_size_and_prints_its_table(tmp_path, name):
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / name), *SMALL[name]],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, (name, done.stderr[-2000:])
    assert "|---" in done.stdout and "Traceback" not in done.stderr, (done.stdout[-1000:], done.stderr[-1000:])
