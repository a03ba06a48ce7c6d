"""The demo target: a SIMULATED help-desk model behind the OpenAI Chat Completions wire format.

Provider APIs cannot be reached offline and no small packaged model follows a header
protocol, so the demo serves a documented, seeded behaviour model (behaviour.toml). The
real `openai` provider calls it over HTTP, so a demo run takes the same code path as a real one.
Every reply names itself SIMULATED in its `model` field and an `x-promptprobe-simulated` header.
Its knowledge base, probe set, prompts, target config and post-filter ship in this package, so
`probe demo` works from any directory.
"""

import hashlib
import json
import random
import re
import threading
import time
from dataclasses import dataclass, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..tokens import tokenize
from ..tomlfile import parse_toml
from .batches import BatchRequestError, DemoBatches
from .judge import answers, judge_key, judged, judgment

DATA = resources.files(__name__)

SIMULATED = "SIMULATED by promptprobe demo"
PASSAGE = re.compile(r"^\[(\d+)\] (.*?)(?=^\[\d+\] |\Z)", re.DOTALL | re.MULTILINE)
CJK = re.compile(r"[\u4e00-\u9fff]")
ALWAYS = re.compile(r"first line of every reply", re.IGNORECASE)
# Words that shape a question without naming what it is about.
QUESTION_WORDS = frozenset("how much many long often get got work works done tell know need".split())


@dataclass(frozen=True)
class Behaviour:
    seed: int
    answer_threshold: float
    wrong_decision: float
    always: dict[str, float]
    exception: dict[str, float]
    pointer_marker_first: float
    pointer_otherwise: float
    judge_sensitivity: float = 0.90  # the SIMULATED judge's chance to be right on a reply that answers
    judge_specificity: float = 0.85  # ... on one that does not (demo/judge.py)


def load_behaviour(path: str | Path | None = None) -> Behaviour:
    """The behaviour file: the packaged one, or the user's."""
    if path is None:
        data = DATA.joinpath("behaviour.toml").read_bytes()
        source = Path("behaviour.toml")
    else:
        source = Path(path)
        try:
            data = source.read_bytes()
        except OSError as exc:
            raise InputError(f"{source}: cannot read ({exc.strerror})") from None
    table = parse_toml(data, source)
    try:
        behaviour = Behaviour(
            seed=int(table["seed"]),
            answer_threshold=float(table["decide"]["answer_threshold"]),
            wrong_decision=float(table["decide"]["wrong_decision"]),
            always={k: float(v) for k, v in table["always_header"].items()},
            exception={k: float(v) for k, v in table["exception_only"].items()},
            pointer_marker_first=float(table["pointer"]["marker_first"]),
            pointer_otherwise=float(table["pointer"]["otherwise"]),
            judge_sensitivity=float(table.get("judge", {}).get("sensitivity", 0.90)),
            judge_specificity=float(table.get("judge", {}).get("specificity", 0.85)),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(f"{source}: missing or bad behaviour setting ({exc})") from None
    for name, table_ in (("always_header", behaviour.always), ("exception_only", behaviour.exception)):
        if sum(table_.values()) > 1 + 1e-9:
            raise InputError(f"{source}: the [{name}] probabilities add up to more than 1")
    return behaviour


def _pick(rng: random.Random, table: dict[str, float], rest: str) -> str:
    roll = rng.random()
    for name, probability in table.items():
        if roll < probability:
            return name
        roll -= probability
    return rest


def _best_passage(question: str, system: str) -> tuple[int | None, str, float]:
    """The numbered passage that covers most of the question's words, and that share."""
    wanted = set(tokenize(question))
    best: tuple[int | None, str, float] = (None, "", 0.0)
    for match in PASSAGE.finditer(system):
        words = set(tokenize(match.group(2)))
        share = len(wanted & words) / len(wanted) if wanted else 0.0
        if share > best[2]:
            best = (int(match.group(1)), match.group(2).strip(), share)
    return best


def _unknown_terms(question: str, system: str) -> list[str]:
    """Latin words of the question that no passage contains: the docs do not cover them."""
    known = set(tokenize(" ".join(m.group(2) for m in PASSAGE.finditer(system))))
    return [
        w
        for w in tokenize(question)
        if w.isascii() and len(w) >= 3 and w not in QUESTION_WORDS and w not in known
    ]


def _answer_sentence(question: str, passage: str) -> str:
    body = passage.split("\n", 1)[-1] if passage.startswith("#") else passage
    sentences = [s.strip() for s in re.split(r'(?<=[.!?。！？])(?![”"’])\s*', body) if s.strip()]
    wanted = set(tokenize(question))
    return max(sentences, key=lambda s: len(wanted & set(tokenize(s))), default=body.strip())


def generate(messages: list[dict[str, Any]], behaviour: Behaviour, occurrence: int) -> str:
    """One simulated reply; deterministic given the messages, the seed and the occurrence."""
    digest = hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()
    rng = random.Random(f"{behaviour.seed}:{digest}:{occurrence}")
    system = "\n".join(str(m.get("content", "")) for m in messages if m.get("role") == "system")
    question = str(next((m["content"] for m in reversed(messages) if m.get("role") == "user"), ""))
    chinese = bool(CJK.search(question))
    number, passage, share = _best_passage(question, system)
    answer = (
        number is not None and share >= behaviour.answer_threshold and not _unknown_terms(question, system)
    )
    if rng.random() < behaviour.wrong_decision:
        answer = not answer and number is not None
    if answer:
        body = f"{_answer_sentence(question, passage)} [{number}]"
    elif chinese:
        body = "抱歉，帮助中心没有相关信息。"
    else:
        body = "I'm sorry, our help center doesn't cover that."
    pointer = (
        "您可以发送邮件至 support@acme.example 联系人工客服。"
        if chinese
        else "You can reach a person at support@acme.example."
    )
    if ALWAYS.search(system):
        header = "[[ANSWER]]" if answer else "[[NO_ANSWER]]"
        text = body if answer else f"{body} {pointer}"
        style = _pick(rng, behaviour.always, "omitted")
        return {
            "present": f"{header}\n{text}",
            "decorated": f"**{header}**\n{text}",
            "leading_blank_line": f"\n{header}\n{text}",
            "omitted": text,
        }[style]
    if "[[NO_ANSWER]]" in system and not answer:
        style = _pick(rng, behaviour.exception, "omitted")
        chance = behaviour.pointer_marker_first if style == "first_line" else behaviour.pointer_otherwise
        close = f" {pointer}" if rng.random() < chance else ""
        return {
            "first_line": f"[[NO_ANSWER]]\n{body}{close}",
            "after_pointer": f"{body} {pointer}\n[[NO_ANSWER]]\n",
            "at_end": f"{body}{close} [[NO_ANSWER]]",
            "fenced": f"{body}\n```\n[[NO_ANSWER]]\n```\n{pointer if close else ''}".rstrip("\n"),
            "near_miss": f"[[NO ANSWER]]\n{body}{close}",
            "omitted": f"{body}{close}",
        }[style]
    return body if answer else f"{body} {pointer}"


class DemoServer:
    """Serves `POST /v1/chat/completions` (plain and `stream: true`), `GET /v1/models`, and the
    Batch API's files and batches (demo/batches.py)."""

    def __init__(self, host: str = "127.0.0.1", port: int = 8765, behaviour: Behaviour | None = None) -> None:
        self.behaviour = behaviour or load_behaviour()
        self.seen: dict[str, int] = {}
        self.lock = threading.Lock()
        self.requests = 0
        self.batches = DemoBatches(self.reply)
        demo = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body go out in separate writes: without this each reply waits ~40 ms
            # for the client's delayed ACK.
            disable_nagle_algorithm = True

            def log_message(self, *args: Any) -> None:
                """Requests are recorded by the client; the console stays readable."""

            def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
                self.send_response(status)
                self.send_header("content-type", content_type)
                self.send_header("content-length", str(len(body)))
                self.send_header("x-promptprobe-simulated", "true")
                self.send_header("x-request-id", f"req_demo_{demo.requests:06d}")
                self.end_headers()
                self.wfile.write(body)

            def _error(self, status: int, message: str) -> None:
                error = {"error": {"message": message, "type": "invalid_request_error"}}
                self._send(status, json.dumps(error).encode())

            def _batch_api(self, body: bytes) -> bool:
                """Answer a batch API request (files, batches); False when the path is not one."""
                route = demo.batches.route(self.command, self.path.split("?")[0].rstrip("/"))
                if route is None:
                    return False
                try:
                    reply, content_type = demo.batches.handle(*route, self.headers, body)
                except BatchRequestError as exc:
                    self._error(exc.status, str(exc))
                else:
                    self._send(200, reply, content_type)
                return True

            def do_GET(self) -> None:
                if self._batch_api(b""):
                    return
                if self.path.rstrip("/") == "/v1/models":
                    models = {
                        "object": "list",
                        "data": [{"id": "acme-helpdesk", "object": "model", "owned_by": SIMULATED}],
                    }
                    self._send(200, json.dumps(models).encode())
                else:
                    self._error(404, f"no route {self.path}")

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length)
                if self._batch_api(body):
                    return
                try:
                    request = json.loads(body)
                    messages = request["messages"]
                except (ValueError, KeyError, TypeError):
                    self._error(400, "body must be JSON with 'messages'")
                    return
                if self.path.rstrip("/") != "/v1/chat/completions":
                    self._error(404, f"no route {self.path}")
                    return
                body, content_type = demo.reply(request, messages)
                self._send(200, body, content_type)

        self.httpd = ThreadingHTTPServer((host, port), Handler)
        self.httpd.daemon_threads = True
        self.thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def reply(self, request: dict[str, Any], messages: list[dict[str, Any]]) -> tuple[bytes, str]:
        judging = judged(messages)  # a judged check's request: the server plays the judge
        key = (
            judge_key(judging)
            if judging
            else hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()
        )
        with self.lock:
            self.seen[key] = self.seen.get(key, 0) + 1
            occurrence = self.seen[key]
            self.requests += 1
        if judging:
            text = judgment(judging, self.behaviour, occurrence)
        else:
            text = generate(messages, self.behaviour, occurrence)
        model = f"{request.get('model', 'acme-helpdesk')} ({SIMULATED})"
        created = int(time.time())
        ident = f"chatcmpl-demo{self.requests:06d}"
        words = len(text.split())
        usage = {
            "prompt_tokens": sum(len(str(m.get("content", "")).split()) for m in messages),
            "completion_tokens": words,
        }
        usage["total_tokens"] = usage["prompt_tokens"] + words
        if request.get("stream"):
            return _stream(ident, created, model, text, usage, request), "text/event-stream"
        completion = {
            "id": ident,
            "object": "chat.completion",
            "created": created,
            "model": model,
            "system_fingerprint": "promptprobe-demo-simulated",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                    "logprobs": None,
                }
            ],
            "usage": usage,
        }
        return json.dumps(completion, ensure_ascii=False).encode("utf-8"), "application/json"

    def start(self) -> "DemoServer":
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        return self

    def serve_forever(self) -> None:
        self.httpd.serve_forever()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _stream(
    ident: str, created: int, model: str, text: str, usage: dict[str, int], request: dict[str, Any]
) -> bytes:
    def event(choices: list[dict[str, Any]], extra: dict[str, Any] | None = None) -> str:
        chunk = {
            "id": ident,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "system_fingerprint": "promptprobe-demo-simulated",
            "choices": choices,
            **(extra or {}),
        }
        return f"data: {json.dumps(chunk, ensure_ascii=False)}\n\n"

    parts = [event([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}])]
    for start in range(0, len(text), 8):  # several small deltas, as real servers send
        parts.append(
            event([{"index": 0, "delta": {"content": text[start : start + 8]}, "finish_reason": None}])
        )
    parts.append(event([{"index": 0, "delta": {}, "finish_reason": "stop"}]))
    if (request.get("stream_options") or {}).get("include_usage"):
        parts.append(event([], {"usage": usage}))
    parts.append("data: [DONE]\n\n")
    return "".join(parts).encode("utf-8")


@dataclass
class DemoResult:
    run_dir: Path
    text: str
    errors: int


PROMPTS = ("exception-only", "always-header")
DEMO_LABELS = "demo-labels.csv"  # the demo's hand labels, in the runs folder
DEMO_POLL_INTERVAL = 0.1  # seconds: the demo's batches end at their first look


def demo_inputs() -> tuple[Any, Any, list[Any]]:
    """The packaged target config, probe set and the two prompt versions."""
    from ..config import load_config
    from ..probeset import load_probeset
    from ..prompts import load_prompt

    with resources.as_file(DATA) as folder:
        config = load_config(folder / "probe.toml")
        probeset = load_probeset(folder / "refusal-header.toml")
        prompts = [load_prompt(folder / "prompts" / f"{name}.md") for name in PROMPTS]
    return config, probeset, prompts


def run_demo(
    runs_dir: Path, port: int = 0, stream: bool = False, progress: Any = None, batch: bool = False
) -> DemoResult:
    """Start the demo server; probe both example prompts through the local retriever; report and
    compare them; decide the same comparison sequentially; stop the server (also on failure).
    With `batch`, both runs go through the server's Batch API (one batch per sequential round)."""
    from ..comparison import compare_runs
    from ..engine.run import ProbeRun, RunOptions
    from ..engine.sequential import SequentialRule, SequentialRun
    from ..models import parse_model_spec
    from ..providers.base import GenerationParams
    from ..views.compare import render_comparison
    from ..views.report import build_report, render_report
    from ..views.tables import wrap
    from ..views.why import explain, render_why

    config, probeset, prompts = demo_inputs()
    try:
        server = DemoServer("127.0.0.1", port).start()
    except OSError as exc:
        raise InputError(f"cannot start the demo server on port {port} ({exc.strerror})") from None
    try:
        model = parse_model_spec(f"openai:acme-helpdesk@{server.url}")
        options = RunOptions(
            concurrency=config.run.concurrency,
            params=GenerationParams(stream=stream),
            runs_dir=runs_dir,
            seed=1,
            batch=batch,
            poll_interval=DEMO_POLL_INTERVAL,
            judge_concurrency=1,  # the simulated judge's draws land on the same samples each run
        )
        config = _judged_by(config, model, runs_dir / DEMO_LABELS)
        fixed = ProbeRun(probeset, prompts, [model], config, options)
        outcome = _run(fixed, progress)
        label_demo_run(outcome.path, runs_dir / DEMO_LABELS)
        rule = SequentialRule(metric="header_present")
        # The sequential run decides on header_present: it is not judged (the demo stays fast).
        unjudged = replace(config, checks=replace(config.checks, judges=()))
        sequential = SequentialRun.new(probeset, prompts, [model], unjudged, options, rule)
        decided = _run(sequential, progress)
    finally:
        server.stop()
    a, b = (f"{outcome.path}#prompt={name}" for name in PROMPTS)
    report = render_report(build_report(outcome.path))
    compared = compare_runs(a, b, ["header_present"])
    comparison = render_comparison(compared)
    why = render_why(explain(a, "header_present"), top=3)
    seq_a, seq_b = (f"{decided.path}#prompt={name}" for name in PROMPTS)
    seq_result = compare_runs(seq_a, seq_b, ["header_present"])["results"][0]
    seq_view = build_report(decided.path)["sequential"]
    per_arm = decided.recorded // 2
    via = [f"via the batch API: {_batch_count(outcome.path)} batch(es)"] if batch else []
    text = "\n".join(
        [
            f"run: {outcome.path}",
            *via,
            report,
            "",
            f"$ probe compare '{a}' '{b}'",
            comparison,
            "",
            f"$ probe why '{a}'",
            why,
            "",
            f"$ probe run ... --until-decided   (run: {decided.path})",
            *([f"via the batch API: {_batch_count(decided.path)} batch(es), one a round"] if batch else []),
            wrap(
                f"sequential: {seq_result['words']['headline']}, decided at round "
                f"{seq_view['rounds']} (cap {seq_view['max_rounds']} rounds): {decided.recorded} samples "
                f"({per_arm} per arm). {_same_power(compared['results'][0], rule)}"
            ),
        ]
    )
    return DemoResult(outcome.path, text, outcome.errors + decided.errors)


def _judged_by(config: Any, model: Any, labels: Path) -> Any:
    """The demo's config with its judged check, `answered`, as probe.toml would write it:

        [[check]]
        name = "answered"
        kind = "judge"
        model = "openai:acme-helpdesk@http://127.0.0.1:PORT/v1"   # the server this demo started
        rubric = "judges/answered.md"
        labels = { pass = "ANSWERED", fail = "REFUSED" }
        repeats = 2
        labels_file = "RUNS_DIR/demo-labels.csv"

    (kept out of the packaged probe.toml, which the CI example shares)."""
    from ..checks.settings import JudgeConfig

    rubric = DATA.joinpath("judges", "answered.md").read_text(encoding="utf-8")
    judge = JudgeConfig(
        "answered",
        model.spec,
        "judges/answered.md",
        rubric,
        "ANSWERED",
        "REFUSED",
        repeats=2,
        labels_file=str(labels),
        description="the reply answers from the help center (judged by the SIMULATED judge)",
    )
    return replace(config, checks=replace(config.checks, judges=(judge,)))


def label_demo_run(run_dir: Path, labels: Path) -> None:
    """Hand labels as a careful person would give them: the truth the SIMULATED judge is wrong
    about (demo/judge.py), for the output of the first repeat of every (arm, case), appended to
    `labels` by the output's sha256 (the demo's outputs are the same every run; which repeat
    gets which is not)."""
    from ..engine.store import iter_samples
    from ..labels import append_label, read_labels
    from ..pack import read_raw

    done = read_labels(labels)
    for sample in iter_samples(run_dir):
        sha256 = (sample.get("raw") or {}).get("sha256")
        if not sha256 or sample["repeat"] != 1 or done.of("", sha256):
            continue
        text = read_raw(run_dir, sample).decode("utf-8", "replace")
        label = "pass" if answers(text) else "fail"
        row = {"sha256": sha256, "case_id": sample["case_id"], "prompt": sample["prompt"], "label": label}
        append_label(labels, row)
        done.by_sha256[sha256] = label


def _same_power(fixed: dict[str, Any], rule: Any) -> str:
    """The sequential rule against the fixed paired plan of the same power, at the rates (and the
    spread between questions) the fixed run measured."""
    from ..planning import plan_sequential

    rate_a, rate_b = fixed["a"]["rate"], fixed["b"]["rate"]
    cases = len(fixed["paired"]["cases"])
    repeats = fixed["a"]["n"] // cases
    icc = sum(max(0.0, (fixed[arm]["deff"] - 1) / (repeats - 1)) for arm in ("a", "b")) / 2
    view = plan_sequential(
        rate_a, rate_b, cases, icc, rule.alpha, min_rounds=rule.min_rounds, detect=rule.detect
    )
    plan = view.data
    rates = f"{100 * rate_a:.0f}% vs {100 * rate_b:.0f}%, ICC {icc:.2f}"
    said = (
        f"At the rates above ({rates}) the rule decides with {100 * plan['power']:.0f}% power after "
        f"{plan['samples_per_arm']['mean']:.0f} samples per arm on average (simulated)"
    )
    same = plan["fixed_same_power"]
    if not same or not same["rounds"]:
        return said
    return (
        f"{said}; a fixed paired plan with {100 * same['power']:.0f}% power takes "
        f"{view.shown['same_power_samples']} per arm "
        f"({same['rounds']} repeat{'s' if same['rounds'] > 1 else ''})"
    )


def _batch_count(run_dir: Path) -> int:
    ledger = run_dir / "batches.jsonl"
    if not ledger.exists():
        return 0
    lines = [json.loads(line) for line in ledger.read_bytes().splitlines() if line.strip()]
    return len({entry["batch"] for entry in lines if entry.get("batch")})  # created batches only


def _run(runner: Any, progress: Any) -> Any:
    if progress is None:
        return runner.execute()
    with progress(runner.plan.samples, at_most=hasattr(runner, "rule")) as bar:
        runner.on_record = bar.update
        return runner.execute()
