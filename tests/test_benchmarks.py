"""Every script in benchmarks/ still runs (at a small size) and prints its table: they drive the
CLI and the statistics as a user would, so a change there can break them without any other test
noticing (run_speed.py once stopped at the no-retrieval rule). The figures themselves are not
checked here: speed is measured by running them in full."""

import subprocess
import sys

from conftest import ROOT

SMALL = {
    "batch_scale.py": ["--samples", "200"],
    "compare_speed.py": ["--pairs", "3"],
    "effect_coverage.py": ["--trials", "20"],
    "export_scale.py": ["--samples", "200"],
    "gate_family.py": ["--trials", "20"],
    "pair_gate.py": ["--trials", "20"],
    "interval_agreement.py": ["--designs", "10", "--coverage-trials", "5"],
    "plan_power.py": ["--trials", "20", "--deep", "20"],
    "run_speed.py": ["--runs", "1"],
    "scale.py": ["--quick"],
    "scrub_speed.py": ["--repeats", "2"],
    "sequential.py": ["--trials", "20"],
    "verdict_rules.py": ["--trials", "20", "--power-trials", "20", "--unequal-trials", "5", "--designs", "2"],
    "viewer.py": ["--samples", "2000"],
}


def test_every_benchmark_runs_at_a_small_size_and_prints_its_table(tmp_path):
    scripts = sorted(p.name for p in (ROOT / "benchmarks").glob("*.py") if p.name != "synthetic.py")
    assert scripts == sorted(SMALL)  # a new benchmark gets a small size here
    # Two at a time: they are single-threaded, and this machine class has two cores.
    results = {}
    names = list(SMALL)
    for start in range(0, len(names), 2):
        running = {
            name: subprocess.Popen(
                [sys.executable, str(ROOT / "benchmarks" / name), *SMALL[name]],
                cwd=tmp_path,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for name in names[start : start + 2]
        }
        for name, process in running.items():
            out, err = process.communicate(timeout=300)
            results[name] = (process.returncode, out, err)
    for name, (code, out, err) in results.items():
        assert code == 0, (name, err[-2000:])
        assert "|---" in out and "Traceback" not in err, (name, out[-1000:], err[-1000:])
