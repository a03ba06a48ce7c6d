"""For the viewer's tests: runs recorded for real (the OpenAI SDK against the local model server),
the viewer served by uvicorn in a thread on a free port, and Chromium through playwright."""

import hashlib
import shutil
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from conftest import write_probeset
from servers import LocalServer, Reply

from promptprobe.config import load_config
from promptprobe.engine.run import RunOptions, run_probe
from promptprobe.models import parse_model_spec
from promptprobe.probeset import load_probeset
from promptprobe.prompts import load_prompt

GOOD, LATE = "[[ANSWER]]\nYes, that works.\n", "Yes, that works.\n[[ANSWER]]\n"
SORRY = "Sorry, I cannot help. Please write to support@acme.example today.\n"
PLAIN = "Just an answer, without its header.\n"
HOSTILE = [
    "<script>alert('x')</script>",
    '"><img src=x onerror=alert(1)>',
    "\x1b[31mred\x1b[0m and a bell\x07 and a NUL\x00 end",
    "[[NO_ANSWER]]<svg onload=alert(2)>\u202eevil",
]


def ab_replies(cases: int, repeats: int) -> dict[str, list[str]]:
    """old passes cases 0, 1 and 5; new passes 2, 3, 4 and 5 (discordant both ways)."""
    old = [GOOD if i in (0, 1, 5) else LATE for i in range(cases) for _ in range(repeats)]
    new = [GOOD if i in (2, 3, 4, 5) else (SORRY if i == 0 else PLAIN) for i in range(cases) for _ in range(repeats)]
    return {"old": old, "new": new}


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip


def browser_missing() -> str | None:
    """Why the browser tests cannot run here, or None."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright for Python is not installed (pip install -e '.[dev]')"
    if CHROMIUM is None:
        return "Chromium is not installed (apt-get install chromium); playwright's own browsers are not used"
    return None


def record(
    folder: Path,
    replies: dict[str, list[str]],
    cases: list[tuple[str, str]],
    repeats: int = 1,
    models: list[str] | None = None,
) -> Path:
    """A run in folder/runs: prompt NAME answers (case i, repeat r) with replies[NAME][(i*repeats+r) % len];
    `models`: model names (each spec `openai:NAME@<server>/v1`), one arm per prompt x model."""
    folder.mkdir(parents=True, exist_ok=True)
    probeset = load_probeset(
        write_probeset(folder / "p.toml", [(case_id, q, None) for case_id, q in cases], repeats=repeats)
    )
    index = {q: i for i, (_, q) in enumerate(cases)}
    prompts = []
    for name in replies:
        (folder / f"{name}.md").write_text(f"VERSION={name}\n")
        prompts.append(load_prompt(folder / f"{name}.md"))
    seen: dict = {}
    lock = threading.Lock()

    def reply(request):
        name = request.json["messages"][0]["content"].split("=")[1].strip()
        case = index[request.json["messages"][-1]["content"]]
        with lock:
            key = (name, case, request.json["model"])
            seen[key] = seen.get(key, -1) + 1
            texts = replies[name]
            return Reply(texts[(case * repeats + seen[key]) % len(texts)])

    with LocalServer(reply) as server:
        specs = [parse_model_spec(f"openai:{m}@{server.url}/v1") for m in (models or ["m"])]
        return run_probe(
            probeset,
            prompts,
            specs,
            load_config(None),
            RunOptions(runs_dir=folder / "runs", seed=3, concurrency=1),
        ).path


def tree_digest(folder: Path) -> str:
    """Every file's path, mode and bytes under a folder: to show nothing was written."""
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        if path.is_file() and path.name != ".lock":
            digest.update(str(path.relative_to(folder)).encode())
            digest.update(oct(path.stat().st_mode).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


@contextmanager
def serving(runs_dir: Path, warm: bool = False) -> Iterator[str]:
    """The viewer over runs_dir on a free loopback port (uvicorn in a thread); yields its base URL
    once it accepts connections."""
    import uvicorn

    from promptprobe.viewer.app import create_app

    server = uvicorn.Server(
        uvicorn.Config(
            create_app(runs_dir, warm=warm, poll_ms=300), host="127.0.0.1", port=0, log_level="warning"
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:  # readiness, not a guess: uvicorn sets it once the socket listens
        assert thread.is_alive() and time.monotonic() < deadline, "the viewer did not start"
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@contextmanager
def still_running(run: Path, planned: int) -> Iterator[Path]:
    """The run made one still being written: its manifest says running with `planned` samples, and
    its lock is held (as a live `probe run` holds it) until the block ends."""
    import fcntl
    import json
    import os

    manifest = json.loads((run / "manifest.json").read_text())
    manifest.update(status="running", finished=None, counts={**manifest["counts"], "planned": planned})
    (run / "manifest.json").write_text(json.dumps(manifest))
    with open(run / ".lock", "w") as lock:
        lock.write(str(os.getpid()))
        lock.flush()
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield run
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
