"""Checks of your own: a [[check]] function becomes a metric that report, compare (and the Holm
family of --all), the gate, sequential runs, why, the HTML and export all show with no other
change; it sees a read-only view of the sample with the case's own data; None means "does not
apply"; a check that raises is that sample's error of kind `check`, and `probe classify RUN`
runs the fixed function again offline as a new classification."""

import csv
import io
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import ROOT, run_dir_of
from servers import LocalServer, Reply

from promptprobe.cli import main
from promptprobe.config import load_config
from promptprobe.errors import InputError
from promptprobe.jsonio import read_jsonl
from promptprobe.pack import read_raw

PROBE = str(Path(sys.executable).parent / "probe")

PROBESET = '''name = "prices"
repeats = 2

[[case]]
id = "team-price"
question = "How much is the Team plan?"
tags = ["pricing"]
data = { price = 20, currency = "USD" }

[[case]]
id = "enterprise-price"
question = "How much is the Enterprise plan?"
tags = ["pricing"]
data = { price = 0, currency = "USD" }

[[case]]
id = "sso"
question = "Do you support Okta?"
'''

CHECKS = '''
SEEN = []


def quotes_price(sample):
    """Whether the reply quotes the case's own price; does not apply to cases without one."""
    SEEN.append(sample)
    price = sample["case"]["data"].get("price")
    if not price:
        return None
    return f"${price}" in sample["text"]


def no_apology(sample):
    return "sorry" not in sample["text"].lower()
'''


def reply_for(request):
    text = request.json["messages"][-1]["content"]
    prompt = request.json["messages"][0]["content"]
    if "Team" in text:
        return Reply("[[ANSWER]]\nTeam is $20 per user." if "v2" in prompt else "[[ANSWER]]\nSorry, I do not know.")
    return Reply("[[ANSWER]]\nYes.")


def setup(tmp_path: Path, checks: str = CHECKS) -> tuple[str, Path]:
    module = f"mychecks_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{module}.py").write_text(checks)
    (tmp_path / "prices.toml").write_text(PROBESET)
    (tmp_path / "v1.md").write_text("You are the help desk (v1).\n")
    (tmp_path / "v2.md").write_text("You are the help desk (v2).\n")
    (tmp_path / "probe.toml").write_text(f'''[retrieval]
kind = "none"

[[check]]
name = "quotes_price"
function = "{module}:quotes_price"
description = "the reply quotes the case's own price"

[[check]]
name = "apologised"
function = "{module}:no_apology"
higher_is_better = true
description = "the reply does not apologise"
''')
    return module, tmp_path / "probe.toml"


def run(tmp_path: Path, server: LocalServer, *args: str):
    return CliRunner().invoke(main, ["run", str(tmp_path / "prices.toml"), "--prompt", str(tmp_path / "v1.md"),
                                     "--prompt", str(tmp_path / "v2.md"), "-m", f"openai:m@{server.url}/v1",
                                     "--config", str(tmp_path / "probe.toml"), "--runs-dir", str(tmp_path / "runs"),
                                     *args])


def test_a_user_check_is_a_metric_everywhere(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    module, _ = setup(tmp_path)
    with LocalServer(reply_for) as server:
        result = run(tmp_path, server)
    assert result.exit_code == 0, result.output
    run_dir = run_dir_of(result)
    samples = read_jsonl(run_dir / "samples.jsonl")
    team = [s for s in samples if s["case_id"] == "team-price"]
    assert {s["prompt"]: s["checks"]["user"]["quotes_price"] for s in team} == {"v1": False, "v2": True}
    sso = next(s for s in samples if s["case_id"] == "sso")
    assert sso["checks"]["user"]["quotes_price"] is None and "quotes_price" not in sso["outcomes"]
    # The enterprise case has price 0: "does not apply", so quotes_price counts only team-price.
    report = json.loads(CliRunner().invoke(main, ["report", str(run_dir), "--json"]).stdout)
    by_prompt = {arm["prompt"]: arm["metrics"] for arm in report["arms"]}
    assert (by_prompt["v1"]["quotes_price"]["k"], by_prompt["v1"]["quotes_price"]["n"]) == (0, 2)
    assert (by_prompt["v2"]["quotes_price"]["k"], by_prompt["v2"]["quotes_price"]["n"]) == (2, 2)
    assert by_prompt["v1"]["apologised"]["n"] == 6
    assert "quotes_price" in CliRunner().invoke(main, ["report", str(run_dir)]).stdout
    # compare, --all (one Holm family with the built-in metrics), the gate.
    compared = json.loads(CliRunner().invoke(main, ["compare", f"{run_dir}#prompt=v1", f"{run_dir}#prompt=v2",
                                                    "--metric", "quotes_price", "--json"]).stdout)
    assert compared["metric"] == "quotes_price" and compared["b"]["k"] == 2
    family = json.loads(CliRunner().invoke(main, ["compare", f"{run_dir}#prompt=v1", f"{run_dir}#prompt=v2",
                                                  "--all", "--json"]).stdout)
    names = [r["metric"] for r in family["results"]]
    assert "quotes_price" in names and "apologised" in names and "header_present" in names
    assert all("p_adjusted" in r for r in family["results"])
    gate = CliRunner().invoke(main, ["compare", f"{run_dir}#prompt=v2", f"{run_dir}#prompt=v1", "--metric", "apologised",
                                     "--fail-if-worse"])
    assert gate.exit_code in (0, 4) and ("FAIL:" in gate.stderr) == (gate.exit_code == 4)
    # why, export, HTML.
    why = json.loads(CliRunner().invoke(main, ["why", f"{run_dir}#prompt=v1", "--metric", "apologised", "--json"]).stdout)
    assert why["metric"] == "apologised" and why["failing_samples"] == 2
    rows = list(csv.DictReader(io.StringIO(CliRunner().invoke(main, ["export", str(run_dir), "--format", "csv"]).stdout)))
    assert "quotes_price" in rows[0] and {r["quotes_price"] for r in rows if r["case_id"] == "sso"} == {""}
    html = CliRunner().invoke(main, ["report", str(run_dir), "--format", "html"]).stdout
    assert "quotes_price" in html and "the reply quotes the case&#39;s own price" in html
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["checks"]["user"][0] == {"name": "quotes_price", "function": f"{module}:quotes_price",
                                              "higher_is_better": True,
                                              "description": "the reply quotes the case's own price",
                                              "timeout": 30.0}


VIEW_CHECK = '''
def no_apology(sample):
    """Passes only when the view is complete and read-only all the way down (it runs in a worker
    process, so it says what it saw through its answer)."""
    assert set(sample) == {"question", "case", "text", "filtered_text", "passages", "header", "response"}
    if sample["case"]["id"] == "team-price":
        assert sample["case"]["tags"] == ("pricing",) and sample["case"]["data"]["currency"] == "USD"
    assert sample["header"]["header"] == "present" and sample["response"]["stop_reason"] == "stop"
    import operator

    for target, key in ((sample["case"]["data"], "price"), (sample, "text"), (sample["case"], "tags")):
        try:
            operator.setitem(target, key, 1)
        except TypeError:
            continue
        return False  # it could be changed
    return True


def quotes_price(sample):
    return None
'''


def test_the_view_a_check_gets_is_read_only_and_complete(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    setup(tmp_path, VIEW_CHECK)
    with LocalServer(reply_for) as server:
        result = run(tmp_path, server, "-n", "1")
    assert result.exit_code == 0, result.output
    samples = read_jsonl(run_dir_of(result) / "samples.jsonl")
    assert [s["checks"]["user"]["apologised"] for s in samples] == [True] * 6
    assert not any("user_errors" in s["checks"] for s in samples)


def test_a_check_that_raises_is_that_metrics_error_and_classify_runs_the_fix(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    broken = CHECKS.replace('return "sorry" not in', 'return sample["missing"] or "sorry" not in')
    module, config = setup(tmp_path, broken)
    with LocalServer(reply_for) as server:
        result = run(tmp_path, server, "-n", "1")
    assert result.exit_code == 1  # the check failed on every sample: counted, reported
    assert "your check apologised failed on 6 samples" in result.stderr
    run_dir = run_dir_of(result)
    samples = read_jsonl(run_dir / "samples.jsonl")
    for sample in samples:
        assert sample["error"] is None  # the sample itself is fine
        message = sample["checks"]["user_errors"]["apologised"]
        assert "raised KeyError: 'missing'" in message and f"{module}.py, line" in message
        assert sample["outcomes"]["apologised"] is False  # its unfavourable outcome
        assert "header_present" in sample["outcomes"]  # the other metrics are recorded
        assert read_raw(run_dir, sample)  # the raw output stays
    report = json.loads(CliRunner().invoke(main, ["report", str(run_dir), "--json"]).stdout)
    for arm in report["arms"]:
        assert arm["metrics"]["apologised"]["errors"] == 3 and arm["metrics"]["apologised"]["k"] == 0
        assert arm["metrics"]["header_present"]["errors"] == 0 and arm["errors"] == 0
        assert arm["check_errors"] == {"apologised": 3}
    (tmp_path / f"{module}.py").write_text(CHECKS)  # the check is fixed
    fixed = subprocess.run([PROBE, "classify", str(run_dir), "--json"], cwd=tmp_path, capture_output=True,
                           text=True, timeout=120)
    assert fixed.returncode == 0, fixed.stderr
    summary = json.loads(fixed.stdout)
    assert summary["classification"] == 1 and summary["reused"] is False
    report = json.loads(CliRunner().invoke(main, ["report", str(run_dir), "--json"]).stdout)
    assert report["classification"] == 1
    assert {arm["prompt"]: arm["metrics"]["apologised"]["k"] for arm in report["arms"]} == {"v1": 2, "v2": 3}
    assert all(arm["metrics"]["apologised"]["errors"] == 0 for arm in report["arms"])


def test_until_decided_on_a_user_check(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    setup(tmp_path)
    with LocalServer(reply_for) as server:
        result = run(tmp_path, server, "--until-decided", "--metric", "apologised", "--max-rounds", "3")
        unknown = run(tmp_path, server, "--until-decided", "--metric", "no_such_check")
    assert result.exit_code == 0, result.output
    rounds = read_jsonl(run_dir_of(result) / "sequential.jsonl")
    assert rounds and all(r["pairs"] == 3 for r in rounds)
    assert unknown.exit_code == 2 and "--metric no_such_check: unknown metric" in unknown.stderr


@pytest.mark.parametrize(("table", "message"), [
    ('name = "header_present"\nfunction = "m:f"', "is a built-in metric"),
    ('name = "Bad Name"\nfunction = "m:f"', "'name' must be lower-case"),
    ('name = "ok"\nfunction = "no-colon"', "'function' must be \"module:function\""),
    ('name = "ok"\nfunction = "m:f"\nhigher_is_better = "yes"', "'higher_is_better' must be true or false"),
    ('name = "ok"\nfunction = "m:f"\nweight = 2', "weight"),
    ('name = "ok"\nfunction = "m:f"\ntimeout = "30"', "'timeout' must be int or float"),
    ('name = "ok"\nfunction = "m:f"\ntimeout = 0', "'timeout' must be between 0.001 and 86400"),
    ('name = "ok"\nfunction = "m:f"\ntimeout = -1', "'timeout' must be between 0.001 and 86400"),
    ('name = "ok"\nfunction = "m:f"\ntimeout = nan', "'timeout' must be a finite number"),
    ('name = "ok"\nfunction = "m:f"\ntimeout = 1e9', "'timeout' must be between 0.001 and 86400"),
])
def test_a_bad_check_table_is_one_sentence(tmp_path, table, message):
    (tmp_path / "probe.toml").write_text(f"[[check]]\n{table}\n")
    with pytest.raises(InputError, match=message):
        load_config(tmp_path / "probe.toml")


def test_a_check_function_that_cannot_be_imported_stops_before_anything_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    setup(tmp_path)
    (tmp_path / "probe.toml").write_text('[retrieval]\nkind = "none"\n[[check]]\nname = "x"\nfunction = "nowhere_module:f"\n')
    with LocalServer(reply_for) as server:
        result = run(tmp_path, server)
    assert result.exit_code == 2 and "nowhere_module" in result.stderr and not (tmp_path / "runs").exists()


def test_case_data_must_be_a_table(tmp_path):
    (tmp_path / "p.toml").write_text('[[case]]\nid = "a"\nquestion = "q"\ndata = 3\n')
    result = CliRunner().invoke(main, ["check", str(tmp_path / "p.toml")])
    assert result.exit_code == 2 and "'data' must be a table" in result.stderr


def test_the_example_in_the_docs_runs(tmp_path, monkeypatch):
    import re

    text = (ROOT / "docs" / "checks.md").read_text().split("## Checks of your own", 1)[1]
    python = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    tomls = re.findall(r"```toml\n(.*?)```", text, re.S)
    module = f"docchecks_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{module}.py").write_text(python)
    (tmp_path / "probe.toml").write_text(tomls[0].replace("mychecks:", f"{module}:"))
    monkeypatch.chdir(tmp_path)
    config = load_config(tmp_path / "probe.toml")
    assert [c.name for c in config.checks.user] == ["quotes_price", "answers_in_chinese"]
    (tmp_path / "p.toml").write_text(tomls[1] + '\n[[case]]\nid = "zh"\nquestion = "怎么重置密码？"\ntags = ["zh"]\n')
    from promptprobe.checks import build_checks, run_checks
    from promptprobe.checks.base import SampleView
    from promptprobe.probeset import load_probeset

    cases = {c.id: c for c in load_probeset(tmp_path / "p.toml").cases}
    checks = build_checks(config.checks)
    from promptprobe.checks import close_checks

    def user(case_id, text):
        return run_checks(checks, SampleView(cases[case_id], text, [], {}, config.checks, {}))[1]["user"]

    assert user("team-price", "[[ANSWER]]\nTeam is $20 a month.") == {"quotes_price": True, "answers_in_chinese": None}
    assert user("team-price", "[[ANSWER]]\nIt depends.")["quotes_price"] is False
    assert user("zh", "[[ANSWER]]\n请在设置页面重置密码。") == {"quotes_price": None, "answers_in_chinese": True}
    close_checks(checks)


# -- your own checks cannot end, hang or corrupt a run (issue 25, item 1) ----------------------------

FAULTS = {
    # check name: (its body, what its error says; None: not an error)
    "interrupts": ("raise KeyboardInterrupt", "raised KeyboardInterrupt"),
    "base_exception": ("raise Odd('odd')", "raised Odd: odd"),
    "generator_exit": ("raise GeneratorExit", "raised GeneratorExit"),
    "exits_zero": ("sys.exit(0)", "called sys.exit(0)"),
    "exits_three": ("sys.exit(3)", "called sys.exit(3)"),
    "hangs": ("time.sleep(10**6)", "did not return within 0.5 s (its timeout); stopped"),
    "ends_its_process": ("os._exit(0)", "its process ended during the call (exit code 0)"),
    "kills_itself": ("os.kill(os.getpid(), signal.SIGKILL)", "its process ended during the call (killed by signal 9)"),
    "returns_an_int": ("return 5", "returned int; a check returns True, False or None"),
    "returns_a_string": ("return 'yes'", "returned str; a check returns True, False or None"),
    "unreadable_error": ("raise Unreadable()", "raised Unreadable: (its message could not be read)"),
    "reads_stdin": ("return input() == 'y'", "raised EOFError"),
    "changes_the_sample": ("sample['case']['data']['price'] = 1", "raised TypeError"),
    "prints_and_fails": ("print('noise from a check'); return 1.0", "it printed: noise from a check"),
    "prints": ("print('noise from a check'); sys.stderr.write('more noise'); os.write(1, b'raw noise'); return True", None),
}

FAULTY_CHECKS = "import os, signal, sys, time\n\n\nclass Odd(BaseException):\n    pass\n\n\n" \
    "class Unreadable(Exception):\n    def __str__(self):\n        raise RuntimeError('no')\n\n\n" + "\n\n".join(
        f"def {name}(sample):\n    {body}\n" for name, (body, _) in FAULTS.items())


def faulty_setup(tmp_path: Path, timeout: float = 0.5) -> None:
    module = f"faulty_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{module}.py").write_text(FAULTY_CHECKS)
    (tmp_path / "prices.toml").write_text(PROBESET)
    (tmp_path / "v1.md").write_text("You are the help desk (v1).\n")
    (tmp_path / "probe.toml").write_text('[retrieval]\nkind = "none"\n' + "".join(
        f'\n[[check]]\nname = "{name}"\nfunction = "{module}:{name}"\ntimeout = {timeout if name == "hangs" else 60}\n'
        for name in FAULTS))


def test_whatever_your_check_does_is_that_metrics_error_never_the_runs(tmp_path):
    """A real `probe run --json` with one check per fault: every sample recorded with its raw output
    and its other metrics, each fault the error of its own metric with the message kept, JSON alone
    on stdout, no traceback, exit 1 (some checks failed), status complete."""
    faulty_setup(tmp_path)
    with LocalServer(reply_for) as server:
        done = subprocess.run([PROBE, "run", "prices.toml", "--prompt", "v1.md", "-m", f"openai:m@{server.url}/v1",
                               "--runs-dir", "runs", "-n", "1", "--json"],
                              cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr
    result = json.loads(done.stdout)  # nothing a check printed reached stdout
    assert "noise" not in done.stdout + done.stderr and "Traceback" not in done.stderr
    assert result["status"] == "complete" and result["counts"] == {"planned": 3, "recorded": 3, "errors": 0}
    run_dir = tmp_path / result["run"]
    samples = read_jsonl(run_dir / "samples.jsonl")
    handled = 0
    for name, (_, said) in FAULTS.items():
        for sample in samples:
            errors = sample["checks"].get("user_errors", {})
            if said is None:
                ok = name not in errors and sample["checks"]["user"][name] is True
            else:
                ok = said in errors.get(name, "") and sample["outcomes"][name] is False
            assert ok, (name, errors.get(name), sample["checks"]["user"].get(name))
        handled += 1
    for sample in samples:
        assert sample["error"] is None and read_raw(run_dir, sample)
        assert sample["header"]["header"] == "present" and sample["outcomes"]["header_present"] is True
    arm = result["report"]["arms"][0]
    failing = [name for name, (_, said) in FAULTS.items() if said]
    assert arm["check_errors"] == dict.fromkeys(failing, 3)
    assert all(arm["metrics"][name]["errors"] == 3 and arm["metrics"][name]["k"] == 0 for name in failing)
    assert arm["metrics"]["prints"]["k"] == 3 and arm["metrics"]["prints"]["errors"] == 0
    for name in failing:
        assert f"your check {name} failed on 3 samples" in done.stderr
    print(f"user-check faults handled: {handled} / {len(FAULTS)}")


def wait_for(condition, what: str, seconds: float = 120.0):
    """Wait until `condition()` is true (a readiness signal), failing after `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


HANGING = '''import os, time


def hangs(sample):
    with open(os.environ["CHECK_STARTED"], "a") as handle:
        handle.write(f"{os.getpid()}\\n")
    time.sleep(10**6)
'''


def test_ctrl_c_while_your_check_hangs_is_interrupted_130_and_resume_finishes(tmp_path):
    module = f"hanging_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{module}.py").write_text(HANGING)
    (tmp_path / "prices.toml").write_text(PROBESET)
    (tmp_path / "v1.md").write_text("You are the help desk (v1).\n")
    (tmp_path / "probe.toml").write_text(
        f'[retrieval]\nkind = "none"\n[[check]]\nname = "hangs"\nfunction = "{module}:hangs"\ntimeout = 3600\n')
    started = tmp_path / "started"
    env = {**os.environ, "CHECK_STARTED": str(started)}
    with LocalServer(reply_for) as server:
        command = [PROBE, "run", "prices.toml", "--prompt", "v1.md", "-m", f"openai:m@{server.url}/v1",
                   "--runs-dir", "runs", "-n", "1"]
        # Its own session, as a shell job: Ctrl-C at a terminal signals the whole process group.
        process = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True, start_new_session=True)
        try:
            wait_for(lambda: started.is_file() and started.read_text().count("\n") >= 1, "a check to start")
            os.killpg(process.pid, signal.SIGINT)
            _, stderr = process.communicate(timeout=60)
        finally:
            if process.poll() is None:
                process.kill()
        assert process.returncode == 130, stderr
        assert "Traceback" not in stderr and "interrupted:" in stderr
        run_dir = next((tmp_path / "runs").iterdir())
        assert json.loads((run_dir / "manifest.json").read_text())["status"] == "interrupted"
        assert read_jsonl(run_dir / "samples.jsonl") == []  # the answers waiting on the check are not kept

        def gone(pid: int) -> bool:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return True
            return False

        for pid in map(int, started.read_text().split()):
            wait_for(lambda pid=pid: gone(pid), f"the check's worker {pid} to be stopped")
        (tmp_path / f"{module}.py").write_text("def hangs(sample):\n    return True\n")  # fixed
        resumed = subprocess.run([PROBE, "run", "--resume", str(run_dir)], cwd=tmp_path, env=env,
                                 capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    samples = read_jsonl(run_dir / "samples.jsonl")
    assert len(samples) == 3 and all(s["checks"]["user"]["hangs"] is True for s in samples)
    assert json.loads((run_dir / "manifest.json").read_text())["status"] == "complete"


@pytest.mark.parametrize(("module_text", "message"), [
    ("raise KeyboardInterrupt\n", "importing it raised KeyboardInterrupt"),
    ("import sys\nsys.exit(4)\n", "called sys.exit(4)"),
    ("def f(:\n", "syntax error"),
    ("x = 1\n", "has no 'f'"),
])
def test_a_check_module_that_fails_to_import_stops_the_run_before_it_starts(tmp_path, monkeypatch, module_text,
                                                                            message):
    """Imported in the worker process (as every call is): the probe's own process never runs it."""
    monkeypatch.chdir(tmp_path)
    module = f"broken_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{module}.py").write_text(module_text)
    (tmp_path / "prices.toml").write_text(PROBESET)
    (tmp_path / "v1.md").write_text("v1\n")
    (tmp_path / "probe.toml").write_text(f'[retrieval]\nkind = "none"\n[[check]]\nname = "x"\nfunction = "{module}:f"\n')
    with LocalServer(reply_for) as server:
        done = CliRunner().invoke(main, ["run", "prices.toml", "--prompt", "v1.md", "-m", f"openai:m@{server.url}/v1",
                                         "--runs-dir", "runs"])
    assert done.exit_code == 2, done.output
    assert done.exception is None or isinstance(done.exception, SystemExit)
    assert message in done.stderr and module not in sys.modules
    assert len([line for line in done.stderr.splitlines() if line.startswith("error:")]) == 1
    assert not (tmp_path / "runs").exists()


def test_a_check_module_that_hangs_while_importing_is_stopped(tmp_path, monkeypatch):
    from promptprobe.sandbox import Sandbox

    monkeypatch.chdir(tmp_path)
    module = f"slow_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{module}.py").write_text("import time\ntime.sleep(10**6)\n")
    with pytest.raises(InputError, match=rf"\[\[check\]\] x: function '{module}:f': did not finish importing within 0.5 s"):
        Sandbox([f"{module}:f"], ["[[check]] x: function"], start_limit=0.5)


def test_check_functions_are_imported_from_the_current_directory_first(tmp_path, monkeypatch):
    """As production code is: a module in the current directory wins over one of the same name
    elsewhere on the path."""
    from promptprobe.checks import build_checks, close_checks, run_checks
    from promptprobe.checks.base import SampleView
    from promptprobe.checks.settings import CheckSettings, UserCheckConfig
    from promptprobe.probeset import load_probeset

    module = f"shadowed_{uuid.uuid4().hex[:8]}"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / f"{module}.py").write_text("def f(sample):\n    return False\n")
    here = tmp_path / "here"
    here.mkdir()
    (here / f"{module}.py").write_text("def f(sample):\n    return True\n")
    (here / "p.toml").write_text('[[case]]\nid = "a"\nquestion = "q"\n')
    monkeypatch.syspath_prepend(str(elsewhere))
    monkeypatch.chdir(here)
    settings = CheckSettings(user=(UserCheckConfig("x", f"{module}:f"),))
    checks = build_checks(settings)
    try:
        case = load_probeset(here / "p.toml").cases[0]
        assert run_checks(checks, SampleView(case, "t", [], {}, settings, {}))[1]["user"] == {"x": True}
    finally:
        close_checks(checks)


LEAKY = '''import os
import sys

KEY = os.environ["LEAKY_KEY"]


def long_message(sample):
    raise ValueError("x" * 975 + KEY)  # the key straddles the cut of a long message


def prints_then_fails(sample):
    print(KEY + "y" * 490)  # only the end of printed output is kept: the cut falls in the key
    raise RuntimeError("boom")


def writes_then_dies(sample):
    os.write(2, (KEY + "z" * 290 + "\\n").encode())  # the last line of its stderr, cut at 300
    os._exit(9)
'''


def test_no_cut_of_a_checks_message_keeps_part_of_a_key(tmp_path, monkeypatch):
    """The messages of a failing check are cut (a long exception, the end of what it printed, the
    last line of a dead worker's stderr): each is scrubbed first, so no part of a key is kept."""
    key = "sk-proj-Abc123XyZ789_secretvalue-42"
    monkeypatch.setenv("LEAKY_KEY", key)
    monkeypatch.chdir(tmp_path)
    module = f"leaky_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{module}.py").write_text(LEAKY)
    (tmp_path / "prices.toml").write_text(PROBESET)
    (tmp_path / "v1.md").write_text("You are the help desk (v1).\n")
    checks = "".join(f'[[check]]\nname = "{name}"\nfunction = "{module}:{name}"\n\n'
                     for name in ("long_message", "prints_then_fails", "writes_then_dies"))
    with LocalServer(reply_for) as server:
        (tmp_path / "probe.toml").write_text(
            f'[retrieval]\nkind = "none"\n\n[run]\nmodels = [{{ spec = "openai:m@{server.url}/v1", '
            f'api_key_env = "LEAKY_KEY" }}]\n\n{checks}')
        result = CliRunner().invoke(main, ["run", "prices.toml", "--prompt", "v1.md", "-n", "1",
                                           "--runs-dir", "runs"])
        assert key in server.requests[0].headers["authorization"]
    assert result.exit_code == 1, result.output
    samples = read_jsonl(run_dir_of(result) / "samples.jsonl")
    errors = samples[0]["checks"]["user_errors"]
    assert set(errors) == {"long_message", "prints_then_fails", "writes_then_dies"}
    assert "[LEAKY_KEY removed]" in errors["long_message"]
    written = b"".join(p.read_bytes() for p in (tmp_path / "runs").rglob("*") if p.is_file())
    for piece in (key[:20], key[-10:]):  # each half a cut could have kept
        assert piece.encode() not in written and piece not in result.output


def test_classify_runs_the_checks_with_the_runs_keys_scrubbed(tmp_path, monkeypatch):
    """`probe classify RUN` runs the checks again in a process that built no provider: what a check
    says about the run's key (a model's api_key_env) is still scrubbed from the classification."""
    key = "sk-proj-Abc123XyZ789_secretvalue-42"
    monkeypatch.setenv("LEAKY_KEY", key)
    monkeypatch.chdir(tmp_path)
    module = f"leaky_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{module}.py").write_text("def says_nothing(sample):\n    return True\n")
    (tmp_path / "prices.toml").write_text(PROBESET)
    (tmp_path / "v1.md").write_text("You are the help desk (v1).\n")
    with LocalServer(reply_for) as server:
        (tmp_path / "probe.toml").write_text(
            f'[retrieval]\nkind = "none"\n\n[run]\nmodels = [{{ spec = "openai:m@{server.url}/v1", '
            f'api_key_env = "LEAKY_KEY" }}]\n\n[[check]]\nname = "says_nothing"\n'
            f'function = "{module}:says_nothing"\n')
        result = CliRunner().invoke(main, ["run", "prices.toml", "--prompt", "v1.md", "-n", "1",
                                           "--runs-dir", "runs"])
    assert result.exit_code == 0, result.output
    (tmp_path / f"{module}.py").write_text(
        "import os\n\n\ndef says_nothing(sample):\n    raise ValueError('my key is ' + os.environ['LEAKY_KEY'])\n")
    done = subprocess.run([PROBE, "classify", str(run_dir_of(result)), "--json"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    (classification,) = (run_dir_of(result) / "classifications").iterdir()
    written = classification.read_text()
    assert "my key is [LEAKY_KEY removed]" in written
    assert key not in written + done.stdout + done.stderr


FORMS_CHECK = '''
import os


def raises_hex(sample):
    raise ValueError("key in hex: " + os.environ["LEAKY_KEY"].encode().hex())


def raises_forms(sample):
    key = os.environ["LEAKY_KEY"]
    raise ValueError(f"upper {key.upper()} reversed {key[::-1]} split {key[:9]}\\n{key[9:]}")
'''


def test_a_check_that_raises_the_key_in_hex_upper_cased_reversed_or_split_keeps_none_of_it(tmp_path, monkeypatch):
    """Issue 37: the key in hex in a check's exception was kept in samples.jsonl."""
    key = "sk-proj-Abc123XyZ789_secretvalue-42"
    monkeypatch.setenv("LEAKY_KEY", key)
    monkeypatch.chdir(tmp_path)
    module = f"forms_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{module}.py").write_text(FORMS_CHECK)
    (tmp_path / "prices.toml").write_text(PROBESET)
    (tmp_path / "v1.md").write_text("You are the help desk (v1).\n")
    checks = "".join(f'[[check]]\nname = "{name}"\nfunction = "{module}:{name}"\n\n'
                     for name in ("raises_hex", "raises_forms"))
    with LocalServer(reply_for) as server:
        (tmp_path / "probe.toml").write_text(
            f'[retrieval]\nkind = "none"\n\n[run]\nmodels = [{{ spec = "openai:m@{server.url}/v1", '
            f'api_key_env = "LEAKY_KEY" }}]\n\n{checks}')
        result = CliRunner().invoke(main, ["run", "prices.toml", "--prompt", "v1.md", "-n", "1",
                                           "--runs-dir", "runs"])
    assert result.exit_code == 1, result.output
    errors = read_jsonl(run_dir_of(result) / "samples.jsonl")[0]["checks"]["user_errors"]
    assert "[LEAKY_KEY removed]" in errors["raises_hex"]
    assert errors["raises_forms"].count("[LEAKY_KEY removed]") == 3, errors["raises_forms"]
    written = b"".join(p.read_bytes() for p in (tmp_path / "runs").rglob("*") if p.is_file())
    hexed = key.encode().hex()
    for piece in (hexed[:24], hexed[-24:], key.upper()[:14], key[::-1][:14], key[9:23]):
        assert piece.encode() not in written.lower() if piece.islower() else piece.encode() not in written
        assert piece not in result.output
