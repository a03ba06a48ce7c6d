import json
import os
import signal
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from servers import LocalServer, Reply, Request  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

# A test runner started with Ctrl-C ignored (a background job of a non-interactive shell, nohup)
# would pass the ignoring on to every probe a test starts, and a probe keeps ignoring Ctrl-C
# then: the tests that press Ctrl-C need it to arrive. (Those that test the ignoring set it.)
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

PASSAGES = {
    "default": [
        {"doc": "plans-and-pricing", "body": "Starter is free. Team is $20 per user per month.", "rel": 0.91},
        {"doc": "billing-changes", "body": "Downgrades take effect at the next invoice.", "rel": 0.55},
    ],
}


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    """No real keys or base URLs leak into a test; each test sets what it needs."""
    for name in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "ANTHROPIC_BASE_URL", "OPENAI_BASE_URL",
                 "ANTHROPIC_AUTH_TOKEN", "NO_COLOR", "PROBE_PROGRESS_INTERVAL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("COLUMNS", "100")  # tables and wrapped lines as on a 100-column terminal
    from promptprobe.redaction import SCRUBBER

    SCRUBBER.take_warnings()  # a short key another test used is not this test's warning
    # The secrets this test's runs add are forgotten after it, as they are when a `probe` process
    # ends: each added secret recompiles the pattern of all of them and a check's worker process
    # learns them one by one, so a worker process of the suite that kept every test's keys spent
    # minutes of CPU compiling patterns (and a key with a space made every scrub take the slow path).
    kept = (dict(SCRUBBER.secrets), SCRUBBER._pattern, list(SCRUBBER._order), SCRUBBER._quick)
    yield
    with SCRUBBER.lock:
        SCRUBBER.secrets, SCRUBBER._pattern, SCRUBBER._order, SCRUBBER._quick = kept


def search_reply(request: Request) -> Reply:
    """A production-like search endpoint: {"data": {"hits": [{doc, body, rel}]}}."""
    payload = request.json
    hits = PASSAGES["default"]
    if "history" in payload:
        hits = hits + [{"doc": "history-seen", "body": json.dumps(payload["history"]), "rel": 0.1}]
    return Reply(body=json.dumps({"data": {"hits": hits}, "query": payload["q"]}).encode())


@pytest.fixture
def retrieval_server():
    with LocalServer(search_reply) as server:
        yield server


@pytest.fixture
def model_server():
    with LocalServer() as server:
        yield server


def write_config(path: Path, retrieval_url: str, extra: str = "") -> Path:
    path.write_text(
        f"""
[retrieval]
kind = "http"
url = "{retrieval_url}/search"
body = {{ q = "{{question}}", k = 2 }}
results = "data.hits"
id = "doc"
text = "body"
score = "rel"

{extra}
""",
        encoding="utf-8",
    )
    return path


def write_probeset(path: Path, cases: list[tuple[str, str, str | None]], repeats: int = 1,
                   extra: str = "") -> Path:
    lines = [f"repeats = {repeats}"]
    for case_id, question, expect in cases:
        lines.append("[[case]]")
        lines.append(f"id = {json.dumps(case_id)}")
        lines.append(f"question = {json.dumps(question, ensure_ascii=False)}")
        if expect:
            lines.append(f'expect = "{expect}"')
    path.write_text("\n".join(lines) + "\n" + extra, encoding="utf-8")
    return path


def run_dir_of(result) -> Path:
    """The run directory `probe run` named on stderr (`run: PATH`) or in its JSON."""
    for line in result.stderr.splitlines() + result.stdout.splitlines():
        if line.startswith("run: "):
            return Path(line.removeprefix("run: "))
    return Path(json.loads(result.stdout)["run"])


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory):
    """`probe demo` once per test session: (the CliRunner result, the fixed run's directory)."""
    from click.testing import CliRunner

    from promptprobe.cli import main

    folder = tmp_path_factory.mktemp("demo")
    cwd = os.getcwd()
    os.chdir(folder)  # the demo's data ships in the package: any directory will do
    try:
        # 100 columns: the width the README's excerpt of the demo was printed at.
        result = CliRunner(env={"COLUMNS": "100"}).invoke(main, ["demo", "--runs-dir", str(folder / "runs")])
    finally:
        os.chdir(cwd)
    assert result.exit_code == 0, result.output
    return result, run_dir_of(result)
