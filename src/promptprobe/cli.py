"""The `probe` command: parse flags, call one library function, print.

Every command that prints takes `--format` (table, md, json, and html where it applies;
`--json` is `--format json`); JSON goes to stdout alone. Domain errors become one line on
stderr and the exit code of docs/cli.md: 0 ok, 1 some samples failed, 2 bad input, 3 could not
start, 4 `compare --fail-if-worse` found B worse.
"""

import functools
import math
import os
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from . import collector
from .checks import metric_names
from .errors import InputError, ProbeError, StartError
from .jsonio import dumps_line, dumps_pretty
from .limits import LIMITS
from .paths import is_dir, is_file, renamed, typed
from .redaction import SCRUBBER
from .terminal import neutralised
from .version import __version__


class MetricName(click.ParamType):
    """A built-in metric, or the name of a [[check]] of the run's own (checked where the run is known)."""

    name = "metric"

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return "METRIC"

    def shell_complete(self, ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
        from click.shell_completion import CompletionItem

        return [CompletionItem(name) for name in metric_names() if name.startswith(incomplete)]


METRIC = MetricName()
METRICS_HELP = f"Metrics: {', '.join(metric_names())}, or the name of one of your [[check]]s."


def say(
    text: str, err: bool = False, nl: bool = True, colour: bool = False, before: str = "", after: str = ""
) -> None:
    """Print: every line probe prints goes through here, scrubbed of secrets and with control
    characters spelled out (a model's output cannot write the clipboard or clear the screen);
    `before`/`after` carry probe's own cursor controls, `colour` keeps its own colours."""
    click.echo(before + neutralised(SCRUBBER.text(text), keep_colour=colour) + after, err=err, nl=nl)


def echo_error(message: str) -> None:
    for line in SCRUBBER.text(renamed(str(message))).splitlines() or [""]:
        say(f"error: {line}", err=True)


def handle_errors(func: Callable[..., Any]) -> Callable[..., Any]:
    """Turn domain errors into one line on stderr and their exit code."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except ProbeError as exc:
            echo_error(str(exc))
            sys.exit(exc.exit_code)

    return wrapper


# A file name's suffix picks the format of -o FILE unless --format says otherwise.
SUFFIX_FORMATS = {
    ".json": "json",
    ".md": "md",
    ".markdown": "md",
    ".html": "html",
    ".htm": "html",
    ".csv": "csv",
    ".jsonl": "jsonl",
    ".txt": "table",
}


def format_of(output: Path, formats: tuple[str, ...]) -> str | None:
    """The format -o FILE's suffix names (None: no suffix, the command's default); a suffix
    naming a form the command does not have is refused (exit 2) with the forms it has."""
    suffix = output.suffix.lower()
    if not suffix:
        return None
    named = SUFFIX_FORMATS.get(suffix)
    if named in formats:
        return named
    command = f"probe {click.get_current_context().info_name}"
    forms = [
        f"{form} ({', '.join(s for s, f in SUFFIX_FORMATS.items() if f == form)})"
        for form in formats
        if form in SUFFIX_FORMATS.values()
    ]
    listing = ", ".join(forms[:-1]) + f" or {forms[-1]}" if len(forms) > 1 else forms[0]
    what = named or f"{suffix} files"
    raise InputError(
        f"-o {output}: {command} cannot write {what}; it writes {listing}, so name the file for one of "
        "those (or choose with --format)"
    )


def output_options(
    formats: tuple[str, ...] = ("table", "md", "json"), default: str = "table"
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The one output convention of every command that prints: --format FORMAT (one of
    `formats`), --json (= --format json), and -o FILE, whose suffix picks the format unless
    --format says otherwise (written 0600)."""

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(func)
        def wrapper(*args: Any, fmt: str | None, as_json: bool, output: Path | None, **kwargs: Any) -> Any:
            chosen = "json" if as_json else fmt
            if chosen is None and output is not None:
                try:
                    chosen = format_of(output, formats)
                except InputError as exc:
                    echo_error(str(exc))
                    sys.exit(exc.exit_code)
            return func(*args, fmt=chosen or default, output=output, **kwargs)

        wrapper = click.option(
            "-o",
            "--output",
            "output",
            type=click.Path(path_type=Path, dir_okay=False),
            help="Write to FILE (mode 0600) instead of stdout; its suffix picks the format.",
        )(wrapper)
        wrapper = click.option("--json", "as_json", is_flag=True, help="Same as --format json.")(wrapper)
        wrapper = click.option(
            "--format",
            "fmt",
            type=click.Choice(formats),
            default=None,
            help=f"Output format (default {default}; with -o, the file's suffix); json prints JSON only.",
        )(wrapper)
        wrapper.formats = formats  # type: ignore[attr-defined]  # read by the docs test
        wrapper.default_format = default  # type: ignore[attr-defined]
        return wrapper

    return decorate


def emit(text: str, output: Path | None = None, newline: bool = True, colour: bool = False) -> None:
    """Print (see `say`), or write -o FILE (0600, scrubbed of secrets like everything probe
    writes, its bytes otherwise as they are)."""
    if output is None:
        say(text, nl=newline, colour=colour)
        return
    if newline and not text.endswith("\n"):
        text += "\n"
    write_private(output, SCRUBBER.text(text).encode("utf-8"))
    say(f"wrote {output}", err=True)


def emit_stream(pieces: Iterator[str], output: Path | None = None) -> None:
    """`emit` for output made a piece at a time (a large export): each piece is scrubbed and
    written as it comes, so memory does not grow with the output. The file is created only when
    the first piece arrives, so an error before it leaves none behind."""
    if output is None:
        for piece in pieces:
            say(piece, nl=False)
        return
    fd = None
    try:
        for piece in pieces:
            if fd is None:
                fd = _open_private(output)
            view = memoryview(SCRUBBER.text(piece).encode("utf-8"))
            while view:
                view = view[os.write(fd, view) :]
        if fd is None:
            fd = _open_private(output)
    except OSError as exc:
        raise InputError(f"-o {output}: cannot write ({exc.strerror})") from None
    finally:
        if fd is not None:
            os.close(fd)
    say(f"wrote {output}", err=True)


def _open_private(output: Path) -> int:
    fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # an existing file keeps its mode otherwise
    return fd


def runs_dir_option(func: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--runs-dir",
        help="The runs directory, or a runs store s3://BUCKET/PREFIX, where runs are written and run ids, "
        "`latest` and `latest~N` are looked up (default $PROBE_RUNS_DIR, else probe.toml's [run] runs_dir, "
        "else ./runs).",
    )(func)


def runs_dir_of(given: Any, config: Any = None) -> Any:
    """The runs directory or store (runstore.location); `config`: the target config whose
    [run] runs_dir applies when neither --runs-dir nor $PROBE_RUNS_DIR is given."""
    from .runstore import location

    if config is not None:
        return location(given, config.run.runs_dir, config.base_dir)
    return location(given)


def resolve_run(reference: str | Path, runs_dir: Any, writing: bool = False) -> Path:
    from .runref import resolve

    return resolve(reference, runs_dir, writing)


def write_private(output: Path, data: bytes) -> None:
    """A file only its owner can read (0600): reports and exports hold production answers."""
    try:
        fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.fchmod(fd, 0o600)  # an existing file keeps its mode otherwise
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
    except OSError as exc:
        raise InputError(f"-o {output}: cannot write ({exc.strerror})") from None


def finite(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    """A float flag that must be a finite number (click lets nan and inf through)."""
    if value is not None and not math.isfinite(value):
        raise click.BadParameter(f"must be a finite number, got {value}")
    return value


class _Examples:
    """Help whose epilog ("Examples: A   |   B") prints each example whole on a line of its own:
    click's re-wrapping breaks a path at its hyphens (prompts/always-\nheader.md), which a
    reader then cannot paste back."""

    epilog: str | None

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        label, _, rest = (self.epilog or "").partition(": ")
        if not label.startswith("Example") or not rest:
            super().format_epilog(ctx, formatter)  # type: ignore[misc]
            return
        examples = [example.strip() for example in rest.split("   |   ")]
        formatter.write_paragraph()
        with formatter.indentation():
            formatter.write_text("Examples:" if len(examples) > 1 else "Example:")
            with formatter.indentation():
                for example in examples:
                    formatter.write(f"{'':>{formatter.current_indent}}{example}\n")


class ProbeCommand(_Examples, click.Command):
    pass


class ProbeGroup(_Examples, click.Group):
    command_class = ProbeCommand


@click.group(
    cls=ProbeGroup, epilog="Example: probe run probes/refusal-header.toml --prompt prompts/always-header.md"
)
@click.version_option(__version__, prog_name="probe")
def main() -> None:
    """Probe prompt versions and models through a RAG system's real retrieval path.

    Records raw outputs byte for byte, classifies their protocol header and reports rates
    with Wilson intervals, so two versions are called different only when the sample can
    tell them apart. Formats and statistics: docs/ in the repository.
    """
    if click.get_current_context().invoked_subcommand != "run":
        collector.release()  # `probe run` releases it once its providers are built


# -- init / check / classify --------------------------------------------------------------


@main.command(epilog="Example: probe init   |   probe init probe-work --force")
@click.argument("directory", metavar="[DIR]", required=False, default=".", type=click.Path(path_type=Path))
@click.option("--force", is_flag=True, help="Overwrite files that already exist.")
@handle_errors
def init(directory: Path, force: bool) -> None:
    """Start probing in a repository: a commented probe.toml, a probe set (probes/example.toml)
    and a prompt (prompts/assistant.md) in DIR (default: here), which `probe check` accepts and
    `probe run --dry-run` plans. Refuses to overwrite a file unless --force."""
    from .scaffold import init_project

    written = init_project(directory, force)
    say("\n".join(f"wrote {path}" for path in written))
    # Quoted for the shell: the line is meant to be pasted as it is (a folder may hold a space).
    where = "" if directory == Path(".") else f"cd {typed(directory)} && "
    say(
        f"next: {where}probe check probe.toml probes/example.toml prompts/assistant.md\n"
        "      probe run probes/example.toml --prompt prompts/assistant.md --dry-run\n"
        "then point [retrieval] in probe.toml at your system's search and [run] models at your model"
    )


@main.command(epilog="Example: probe check probe.toml probes/*.toml prompts/*.md")
@click.argument("paths", metavar="FILE...", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--config",
    "config_path",
    type=click.Path(path_type=Path),
    help="The target config to check, whose [vars] the prompts may use (default ./probe.toml when there "
    "is one).",
)
@output_options(("table", "md", "json"))
@handle_errors
def check(paths: tuple[Path, ...], config_path: Path | None, fmt: str, output: Path | None) -> None:
    """Validate the target config (probe.toml: every problem at once, with the key meant for a
    near miss such as [retreival]), probe sets (.toml: schema, unknown keys, regexes, duplicate
    ids and questions) and prompts (any other file: placeholders, and a value for each variable
    in every case).

    A .toml file named probe.toml, or with the target's tables and no [[case]], is checked as a
    target config. Every problem of a file is reported at once, each naming the file and the
    case, table or line.
    """
    from .check import check_files, describe

    results = check_files(list(paths), config_path)
    if fmt == "json":
        emit(dumps_pretty({"probesets": results}), output)
    elif fmt == "md":
        lines = ["| file | kind | ok | cases | repeats | problems |", "|---|---|---|---:|---:|---|"]
        for r in results:
            problems = "<br>".join(p.replace("|", "\\|") for p in r.get("problems", [])) or "-"
            ok = "yes" if r["ok"] else "no"
            counts = f"{r.get('cases', '-')} | {r.get('repeats', '-')}"
            lines.append(f"| {r['path']} | {r['kind']} | {ok} | {counts} | {problems} |")
        emit("\n".join(lines), output)
    else:
        oks = [describe(r) for r in results if r["ok"]]
        if oks:
            emit("\n".join(oks), output)
        for result in results:
            for problem in result.get("problems", []):
                echo_error(problem)
    if not all(r["ok"] for r in results):
        sys.exit(InputError.exit_code)


def header_override(markers: str | None, no_answer: str | None) -> Any:
    """A HeaderConfig from `--markers A,B --no-answer B`, or None when neither is given."""
    from .checks.settings import HeaderConfig

    if markers is None and no_answer is None:
        return None
    marker_list = tuple(m for m in (markers or "").split(",") if m) or HeaderConfig().markers
    if no_answer is None:
        default = HeaderConfig().no_answer
        no_answer = default if default in marker_list else marker_list[-1]
    return HeaderConfig(markers=marker_list, no_answer=no_answer)


@main.command(
    epilog="Examples: probe classify output.txt   |   probe classify runs/20261129T120000-x-abc123 "
    "--markers '[[ANSWER]],[[NO_ANSWER]],[[ESCALATE]]'"
)
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--markers", help="Comma-separated header markers (default: the run's or the built-in).")
@click.option("--no-answer", help="Which marker means no answer.")
@click.option(
    "--config",
    "config_path",
    type=click.Path(path_type=Path),
    help="A probe.toml whose [header], [filter] and [citations] a run is reclassified with.",
)
@click.option("--top-k", type=click.IntRange(min=1), help="retrieval_hit only within the first K passages.")
@runs_dir_option
@output_options(("json", "table", "md"), default="json")
@handle_errors
def classify(
    paths: tuple[Path, ...],
    markers: str | None,
    no_answer: str | None,
    config_path: Path | None,
    top_k: int | None,
    runs_dir: Path | None,
    fmt: str,
    output: Path | None,
) -> None:
    """A file: print its header classification as JSON, one line per file.

    A run directory: re-run every check offline from raw/ (no network call), write it as a new
    numbered classification beside the old ones and say what moved; report and compare use the
    latest one.
    """

    from .classifying import classify_file, describe_reclassification, is_run, reclassify_run
    from .counts import settings_of
    from .engine.store import load_manifest

    override = header_override(markers, no_answer)
    failed = 0
    printed: list[str] = []
    for path in paths:
        try:
            if not is_file(path) and not is_run(path):
                # A run id, a prefix of one, latest, latest~N; a run of a store is claimed to be written.
                path = resolve_run(path, runs_dir, writing=True)
            if is_run(path):
                settings = settings_of(path, load_manifest(path), None)
                if config_path is not None:
                    from .config import load_config

                    settings = load_config(config_path).checks
                if override is not None:
                    settings = replace(settings, header=override)
                from .runstore import release_claims, send_up

                try:
                    result = reclassify_run(path, settings.with_top_k(top_k))
                    send_up(path)  # a run of a store gets its new classification there
                finally:
                    release_claims()
                printed.append(dumps_pretty(result) if fmt == "json" else describe_reclassification(result))
            elif is_dir(path):
                raise InputError(f"{path}: a directory that is not a run (no manifest.json)")
            else:
                line = classify_file(path, override)
                where = f" ({line['where']}, line {line['line']})" if line["where"] else ""
                if fmt == "json":
                    printed.append(dumps_line(line).decode("utf-8").rstrip("\n"))
                elif fmt == "md":
                    printed.append(f"- `{path}`: **{line['header']}**{where}")
                else:
                    printed.append(f"{path}: {line['header']}{where}")
        except InputError as exc:
            failed += 1
            echo_error(str(exc))
    if printed:
        emit("\n".join(printed), output)
    if failed:
        sys.exit(InputError.exit_code)


# -- run ------------------------------------------------------------------------------------


QUIET_REPEAT = 300.0  # seconds: off a terminal, an unchanged progress line is repeated this seldom


class Progress:
    """Samples done of the total, errors so far, the rate and the time left: one line kept up to
    date on a terminal; off a terminal (CI logs) one line every few seconds on stderr
    (PROBE_PROGRESS_INTERVAL seconds, default 5). `at_most`: the total is a cap (a sequential
    run usually stops before it)."""

    def __init__(self, total: int, interval: float | None = None, at_most: bool = False) -> None:
        if interval is None:
            try:
                interval = float(os.environ.get("PROBE_PROGRESS_INTERVAL", "5"))
            except ValueError:
                interval = 5.0  # a malformed setting: the default
        self.total = total
        self.at_most = at_most
        self.done = 0
        self.errors = 0
        self.started = time.monotonic()
        self.interval = interval
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.terminal = sys.stderr.isatty()
        self.thread: threading.Thread | None = None
        self.shown = 0.0
        self.batch_line: str | None = None

    def __enter__(self) -> "Progress":
        self.thread = threading.Thread(target=self._report, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        if self.terminal:
            say(self.line(), err=True, before="\r", after="\x1b[K")

    def batches(self, text: str) -> None:
        """How the batches of a batch run are doing: shown with (and instead of the rate in) the line."""
        with self.lock:
            self.batch_line = text
            if self.terminal:
                say(self.line(), err=True, nl=False, before="\r", after="\x1b[K")

    def say(self, message: str) -> None:
        """A line of its own (the progress line is redrawn after it on a terminal)."""
        with self.lock:
            say(message, err=True, before="\r\x1b[K" if self.terminal else "")

    def update(self, record: dict[str, Any]) -> None:
        with self.lock:
            self.done += 1
            self.errors += bool(record.get("error"))
            now = time.monotonic()
            if self.terminal and now - self.shown > 0.1:
                self.shown = now
                say(self.line(), err=True, nl=False, before="\r", after="\x1b[K")

    def line(self) -> str:
        elapsed = max(1e-9, time.monotonic() - self.started)
        rate = self.done / elapsed
        total = f"at most {self.total}" if self.at_most else str(self.total)
        text = (
            f"progress: {self.done}/{total} samples, {self.errors} "
            f"error{'' if self.errors == 1 else 's'}, {rate:.1f} samples/s"
        )
        left = self.total - self.done
        if self.batch_line:
            errors = f"{self.errors} error{'' if self.errors == 1 else 's'}"
            return f"progress: {self.done}/{total} samples recorded, {errors}; {self.batch_line}"
        if rate > 0 and left > 0 and not self.at_most:
            seconds = round(left / rate)
            text += f", about {seconds // 60}:{seconds % 60:02d} left"
        return text

    def _report(self) -> None:
        last, last_at = "", 0.0
        while not self.stop.wait(self.interval):
            if self.terminal:
                continue
            line, now = self.line(), time.monotonic()
            # A log gets a line when something moved, and a sign of life now and then: a batch
            # run can wait hours without anything to say.
            if line != last or now - last_at >= QUIET_REPEAT:
                say(line, err=True)
                last, last_at = line, now


@contextmanager
def interruptible(
    cancel: Callable[[], None], started: Callable[[], bool] = lambda: True
) -> Iterator[list[int]]:
    """First Ctrl-C (or SIGTERM): cancel the run, which then finishes its manifest; a second
    one: exit at once (the run is then detected as killed and `--resume` finishes it). Before the
    run has `started` (its directory not yet created: the checks of the target), there is nothing
    to finish, and the check in progress (a retrieval that hangs) is abandoned at once."""
    received: list[int] = []

    def handler(signum: int, frame: Any) -> None:
        if received:
            os._exit(128 + signum)
        received.append(signum)
        if not started():
            raise KeyboardInterrupt
        say("interrupted: finishing the samples in flight (Ctrl-C again to quit at once)", err=True)
        cancel()

    if threading.current_thread() is not threading.main_thread():
        yield received  # signals reach only the main thread (e.g. under a test runner)
        return
    # A run started with Ctrl-C ignored (nohup, a background job) keeps ignoring it; SIGTERM stops it.
    signals = [s for s in (signal.SIGINT, signal.SIGTERM) if signal.getsignal(s) is not signal.SIG_IGN]
    previous = {sig: signal.signal(sig, handler) for sig in signals}
    try:
        yield received
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


@main.command(
    epilog="Examples: probe run probes/refusal-header.toml --prompt prompts/exception-only.md "
    "--prompt prompts/always-header.md --model anthropic:claude-sonnet-5-5   |   "
    "probe run --resume runs/20261129T120000-refusal-header-1a2b3c"
)
@click.argument("probeset_path", metavar="PROBESET", type=click.Path(path_type=Path), required=False)
@click.option(
    "--prompt",
    "prompt_paths",
    multiple=True,
    help="A prompt version file, or NAME=PATH to name it; repeat for several.",
)
@click.option(
    "-m",
    "--model",
    "model_specs",
    multiple=True,
    help="anthropic:MODEL, openai:MODEL[@BASE_URL], azure:DEPLOYMENT@ENDPOINT, bedrock:MODEL or "
    "vertex:MODEL; NAME=SPEC names its arm (RUN#model=NAME); repeat for several.",
)
@click.option(
    "-n",
    "--repeats",
    type=click.IntRange(*LIMITS["repeats"]),
    help="Repeats per case (default: the probe set's repeats, else [run] repeats, else 3).",
)
@click.option(
    "--config", "config_path", type=click.Path(path_type=Path), help="Target config (default ./probe.toml)."
)
@click.option(
    "--retrieval",
    "retrieval_kind",
    type=click.Choice(["none"]),
    help="none: probe without retrieval (the model gets no passages); otherwise the config says how.",
)
@runs_dir_option
@click.option(
    "--resume",
    "resume_path",
    metavar="RUN",
    help="Finish RUN (a path, an id, latest, a run's s3:// URL) from its own manifest: run exactly the "
    "samples missing or failed; on a batch run, collect its batches.",
)
@click.option(
    "--temperature",
    type=click.FloatRange(*LIMITS["temperature"]),
    callback=finite,
    help="Sent only when given.",
)
@click.option("--max-tokens", type=click.IntRange(*LIMITS["max_tokens"]), help="Default 1024.")
@click.option(
    "--seed",
    type=click.IntRange(*LIMITS["seed"]),
    help="Sent where the API has a seed (OpenAI); also orders the plan.",
)
@click.option(
    "--concurrency", type=click.IntRange(*LIMITS["concurrency"]), help="Calls in flight (default 8)."
)
@click.option("--stream/--no-stream", default=None, help="Use the streaming API.")
@click.option(
    "--timeout",
    type=click.FloatRange(0, LIMITS["timeout"][1], min_open=True),
    callback=finite,
    help="Deadline for one call, body included, in seconds (default 120).",
)
@click.option(
    "--max-attempts",
    type=click.IntRange(*LIMITS["max_attempts"]),
    help="Calls per sample before it fails (default 6).",
)
@click.option(
    "--max-retry-wait",
    type=click.FloatRange(*LIMITS["max_retry_wait"]),
    callback=finite,
    help="Longest wait between attempts, in seconds (default 60).",
)
@click.option(
    "--rpm",
    type=click.FloatRange(*LIMITS["rpm"]),
    callback=finite,
    help="Requests per minute per provider (default: no limit).",
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="Print the plan, tokens and cost: fetches each question's retrieval once (read-only) to "
    "count the passages, calls no model.",
)
@click.option(
    "--no-retrieval-fetch",
    "no_retrieval_fetch",
    is_flag=True,
    help="With --dry-run or --max-cost: estimate without fetching the retrieval (the passages are left out).",
)
@click.option(
    "--max-cost",
    type=click.FloatRange(min=0),
    callback=finite,
    help="USD: refuse to start above it; stop scheduling when recorded usage reaches it.",
)
@click.option("--yes", is_flag=True, help="Run a plan of more than 100,000 calls.")
@click.option(
    "--batch/--no-batch",
    default=None,
    help="Send every call through the providers' batch APIs (half price, results within 24 h); "
    "Ctrl-C detaches, --resume collects.",
)
@click.option(
    "--cache/--no-cache",
    default=None,
    help="Mark the system prompt and conversation cacheable (Anthropic; OpenAI caches by itself).",
)
@click.option(
    "--cancel",
    "cancel_batches",
    is_flag=True,
    help="With --resume on a batch run: cancel its outstanding batches and collect what finished.",
)
@click.option(
    "--poll-interval",
    type=click.FloatRange(*LIMITS["poll_interval"]),
    callback=finite,
    help="--batch: seconds between looks at a batch in progress (default 30).",
)
@click.option("--share", is_flag=True, help="Make the run readable by others (default: 0700/0600).")
@click.option("--top-k", type=click.IntRange(min=1), help="retrieval_hit only within the first K passages.")
@click.option(
    "--until-decided",
    is_flag=True,
    help="Two arms: run in rounds and stop as soon as the sequential test decides.",
)
@click.option(
    "--alpha",
    type=click.FloatRange(0, 0.5, min_open=True),
    callback=finite,
    default=0.05,
    show_default=True,
    help="False-alarm rate of --until-decided.",
)
@click.option(
    "--metric",
    type=METRIC,
    default="header_present",
    show_default=True,
    help="The metric --until-decided decides on. " + METRICS_HELP,
)
@click.option("--min-rounds", type=click.IntRange(min=1), default=2, show_default=True)
@click.option(
    "--max-rounds",
    type=click.IntRange(min=1),
    help="Cap of --until-decided in rounds (default: from --detect).",
)
@click.option(
    "--detect",
    type=click.FloatRange(0, 100, min_open=True),
    callback=finite,
    default=15.0,
    show_default=True,
    help="--until-decided: the smallest difference worth finding, in points; the cap is the rounds "
    "that find it with 80% power.",
)
@output_options()
@handle_errors
@click.pass_context
def run(
    ctx: click.Context,
    output: Path | None,
    retrieval_kind: str | None,
    probeset_path: Path | None,
    prompt_paths: tuple[str, ...],
    model_specs: tuple[str, ...],
    repeats: int | None,
    config_path: Path | None,
    runs_dir: Path | None,
    resume_path: Path | None,
    temperature: float | None,
    max_tokens: int | None,
    seed: int | None,
    concurrency: int | None,
    stream: bool | None,
    timeout: float | None,
    max_attempts: int | None,
    max_retry_wait: float | None,
    rpm: float | None,
    dry_run: bool,
    no_retrieval_fetch: bool,
    max_cost: float | None,
    yes: bool,
    batch: bool | None,
    cache: bool | None,
    cancel_batches: bool,
    poll_interval: float | None,
    share: bool,
    top_k: int | None,
    until_decided: bool,
    alpha: float,
    metric: str,
    min_rounds: int,
    max_rounds: int | None,
    detect: float,
    fmt: str,
) -> None:
    """Run every case x repeat x prompt x model through the target; print the run and its report.

    \b
    --resume RUN finishes a run from its own manifest; of the other flags it takes only
    --concurrency, --rpm, --timeout, --max-attempts, --max-retry-wait and --max-cost (how it
    calls, not what it measures), --poll-interval and --cancel (batch runs), and the output
    flags, and refuses the rest.
    """

    if cancel_batches and resume_path is None:
        raise InputError("--cancel cancels the outstanding batches of a run: give it with --resume RUN")
    if resume_path is not None:
        from .runstore import end_sent, release_claims

        try:
            path = resolve_run(resume_path, runs_dir, writing=True)
            if end_sent(path):
                say(f"{resume_path}: the run had finished on this machine; its end is sent to the store now, "
                    "and it is complete", err=True)
                return
            _resume(ctx, path, fmt, output)
        finally:
            release_claims()  # a run of a store claimed, then refused: given back at once
        return
    if probeset_path is None:
        raise InputError("give a probe set (probe run PROBESET --prompt FILE), or --resume RUN")
    if until_decided and repeats is not None:
        raise InputError(
            "-n/--repeats is for a fixed run: --until-decided asks round by round up to its cap "
            "(--detect sizes it, --max-rounds sets it)"
        )
    planned = _planned(ctx.params)
    rule = _sequential_rule(ctx.params) if until_decided else None
    fetch = not no_retrieval_fetch
    if dry_run:
        _print_dry_run(planned, rule, fetch, fmt, output, max_cost)
        return
    if no_retrieval_fetch and max_cost is None:
        raise InputError(
            "--no-retrieval-fetch is for the estimate of --dry-run or --max-cost: give one of them"
        )
    _start(planned, rule, max_cost, fetch, fmt, output)


# The flags of `probe run` that are run options (engine.run.options_from), by their parameter names.
OPTION_FLAGS = (
    "repeats", "max_tokens", "temperature", "seed", "stream", "timeout", "cache", "concurrency",
    "max_attempts", "max_retry_wait", "rpm", "batch", "poll_interval", "max_cost", "top_k", "share", "yes",
)  # fmt: skip


def _planned(params: dict[str, Any]) -> tuple[Any, list[Any], list[Any], Any, Any]:
    """(probe set, prompts, models, config, run options) of a new run from `probe run`'s flags."""
    from .config import Precedence, load_config, models_setting, with_retrieval
    from .engine.run import options_from
    from .prompts import load_prompt

    config = with_retrieval(load_config(params["config_path"]), params["retrieval_kind"], params["dry_run"])
    probeset = _probeset(params["probeset_path"])
    prompts = [load_prompt(p) for p in params["prompt_paths"]]
    precedence = Precedence.of(config, probeset)
    flags = {name: params[name] for name in OPTION_FLAGS}
    where = runs_dir_of(params["runs_dir"], config)
    options = options_from(config.run, where, precedence=precedence, **flags)
    models = config.models_for(params["model_specs"])
    options.settings["models"] = models_setting(params["model_specs"], models, precedence)
    return probeset, prompts, models, config, options


def _sequential_rule(params: dict[str, Any]) -> Any:
    """The rule of --until-decided from its flags."""
    from .engine.sequential import SequentialRule

    return SequentialRule(
        metric=params["metric"],
        alpha=params["alpha"],
        min_rounds=params["min_rounds"],
        max_rounds=params["max_rounds"],
        detect=params["detect"] / 100,
    )


def _print_dry_run(
    planned: tuple[Any, ...], rule: Any, fetch: bool, fmt: str, output: Path | None, max_cost: float | None
) -> None:
    """--dry-run: the plan, tokens and cost (of a fixed run, or of a sequential run to its cap);
    with --max-cost, refused exactly as the run would refuse it."""
    collector.release()  # no provider is built: start-up is over
    from .engine.dryrun import check_max_cost, render_dry_run
    from .engine.dryrun import dry_run as price_plan
    from .engine.sequential import dry_run_sequential

    if rule is not None:
        if max_cost is not None:  # as the run refuses it: a cap cannot hold without a price
            from .engine.cost import load_prices, refuse_unknown

            _, _, models, config, _ = planned
            refuse_unknown(load_prices(config.prices), models)
        result = dry_run_sequential(*planned, rule, fetch=fetch)
    elif max_cost is not None:  # the run's own check: no price, or an estimate above the cap
        result = check_max_cost(*planned, fetch=fetch)
    else:
        result = price_plan(*planned, fetch=fetch)
    emit(dumps_pretty(result) if fmt == "json" else render_dry_run(result), output)


def _start(
    planned: tuple[Any, ...], rule: Any, max_cost: float | None, fetch: bool, fmt: str, output: Path | None
) -> None:
    """Run a new run to its end (or its sequential rule's stop) and print it."""
    if rule is not None:
        from .engine.sequential import SequentialRun

        runner = SequentialRun.new(*planned, rule)
        collector.release()
        say(runner.describe(), err=True)
        _execute(runner, fmt, runner.plan.samples, output)
        return
    from .engine.run import ProbeRun

    if max_cost is not None:
        from .engine.dryrun import check_max_cost

        check_max_cost(*planned, fetch=fetch)
    runner = ProbeRun(*planned)
    collector.release()
    _execute(runner, fmt, runner.plan.samples, output)


def _probeset(path: Path) -> Any:
    """The probe set at `path`; a target config given in its place is said to be one."""
    from .check import looks_like_target
    from .probeset import ProbeSetInvalid, load_probeset

    try:
        return load_probeset(path)
    except ProbeSetInvalid:
        if looks_like_target(path):
            raise InputError(
                f"{path} is a target config (probe.toml), not a probe set: give it as --config {path}, "
                "and the probe set (the questions) first"
            ) from None
        raise


def _given(ctx: click.Context, name: str) -> bool:
    """Whether a flag was given on the command line or in the environment (not its default)."""
    source = ctx.get_parameter_source(name)
    return source in (click.core.ParameterSource.COMMANDLINE, click.core.ParameterSource.ENVIRONMENT)


# --resume takes these (how the run calls) and refuses every other flag (what it measures).
RESUME_FLAGS = {
    "concurrency": "--concurrency",
    "rpm": "--rpm",
    "timeout": "--timeout",
    "max_attempts": "--max-attempts",
    "max_retry_wait": "--max-retry-wait",
    "max_cost": "--max-cost",
}
OUTPUT_PARAMS = {"fmt", "as_json", "output", "resume_path", "runs_dir", "cancel_batches", "poll_interval"}


def _resume(ctx: click.Context, resume_path: Path, fmt: str, output: Path | None) -> None:
    from .engine.run import RunOptions, resume_run

    refused = [
        "PROBESET" if param.name == "probeset_path" else (param.opts[0] if param.opts else param.name)
        for param in ctx.command.params
        if param.name not in RESUME_FLAGS and param.name not in OUTPUT_PARAMS and _given(ctx, param.name)
    ]
    if refused:
        raise InputError(
            f"--resume RUN takes everything else from the run's own manifest; it accepts only "
            f"{', '.join(RESUME_FLAGS.values())}, not {', '.join(refused)}"
        )
    changes = {name: ctx.params[name] for name in RESUME_FLAGS if _given(ctx, name)}
    base = RunOptions(cancel_batches=ctx.params["cancel_batches"])
    if ctx.params["poll_interval"] is not None:
        base = replace(base, poll_interval=ctx.params["poll_interval"])
    runner = resume_run(resume_path, base, changes=changes)
    collector.release()
    if base.cancel_batches and not runner.options.batch:
        raise InputError(f"{resume_path}: --cancel is for batch runs; this run called live")
    for name, change in runner.changes.items():
        say(
            f"resume: {RESUME_FLAGS[name]} {change['to']:g} from now on (the run had {change['from']})",
            err=True,
        )
    sequential = runner.previous.get("sequential")
    if sequential:
        from .engine.sequential import DEFAULT_DETECT, SequentialRule, SequentialRun

        rule = SequentialRule(
            sequential["metric"],
            sequential["alpha"],
            sequential["min_rounds"],
            sequential["max_rounds"],
            detect=sequential.get("detect", DEFAULT_DETECT),
        )
        runner = SequentialRun(runner, rule)
        say(runner.describe(), err=True)
    _execute(runner, fmt, runner.plan.samples, output)


# What a run prints at its end (the report, its comparison): imported while the calls run, once
# the first sample is recorded (the first calls are out and the process mostly waits on the
# network), instead of before the first call (0.1-0.2 s).
END_OF_RUN_MODULES = ("promptprobe.api", "promptprobe.views.report", "promptprobe.arms")


class _ImportMeanwhile:
    """Imports modules in a background thread the first time it is called (an import the main
    thread needs meanwhile waits for it under the import lock, as any import does)."""

    def __init__(self, modules: tuple[str, ...]) -> None:
        self.modules = modules
        self.started = threading.Event()

    def before(self, then: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
        """`then`, with the imports started the first time it is called."""

        def call(record: dict[str, Any]) -> None:
            self()
            then(record)

        return call

    def __call__(self) -> None:
        if not self.started.is_set():
            self.started.set()
            threading.Thread(target=self._load, name="probe-imports", daemon=True).start()

    def _load(self) -> None:
        import importlib

        for name in self.modules:
            try:
                importlib.import_module(name)
            except Exception:  # the main thread's own import raises it again, where it is reported
                return


def _execute(runner: Any, fmt: str, total: int, output: Path | None = None) -> None:
    import_meanwhile = _ImportMeanwhile(END_OF_RUN_MODULES)
    for warning in SCRUBBER.take_warnings():
        say(f"warning: {warning}", err=True)

    outcome = None
    sequential = hasattr(runner, "rule")
    with Progress(total, at_most=sequential) as progress, interruptible(
        runner.cancel, lambda: runner.store is not None
    ) as received:
        runner.on_record = import_meanwhile.before(progress.update)
        # Where the run is, as soon as it exists: another terminal can follow or resume it.
        runner.on_start = lambda path: progress.say(f"run: {getattr(runner.store, 'where', path)}")
        runner.on_batches = progress.batches
        try:
            outcome = runner.execute()
        except KeyboardInterrupt:
            received.append(signal.SIGINT)
    path = outcome.path if outcome else (runner.store.path if runner.store else None)
    if received and path is None:
        say("interrupted: nothing was recorded (no run directory was created)", err=True)
        sys.exit(128 + received[0])
    if received or (outcome and outcome.status == "interrupted" and not outcome.stopped_by):
        where = path or "nowhere (nothing was recorded)"
        recorded = outcome.recorded if outcome else runner.tally.recorded
        detached = outcome.detached if outcome else []
        if detached:
            say(
                f"detached: {recorded} samples recorded in {where}; {len(detached)} batch(es) keep "
                f"running at the provider ({', '.join(detached[:3])}{', ...' if len(detached) > 3 else ''}): "
                f"probe run --resume {typed(where)} collects them (add --cancel to cancel them)",
                err=True,
            )
        else:
            say(
                f"interrupted: {recorded} samples recorded in {where}; "
                f"probe run --resume {typed(where)} finishes it",
                err=True,
            )
        sys.exit(128 + (received[0] if received else signal.SIGINT))
    assert outcome is not None
    from .api import RunResult
    from .views.report import render_report

    result = RunResult.of(outcome)
    if fmt == "json":
        emit(dumps_pretty(result.to_dict()), output)
    else:
        emit(render_report(result.report.to_dict(), fmt) + _end_comparisons(outcome.path), output)
    if outcome.stopped_by == "max_cost":
        echo_error(
            f"stopped at --max-cost: {outcome.recorded} of {outcome.planned} samples recorded; "
            f"probe run --resume {typed(outcome.path)} --max-cost USD continues"
        )
        sys.exit(1)
    failed_checks: Counter[str] = Counter()
    for arm in result.report.arms:
        failed_checks.update(arm.get("check_errors") or {})
    for name, n in sorted(failed_checks.items()):
        echo_error(
            f"your check {name} failed on {n} samples (checks.user_errors in "
            f"{outcome.path / 'samples.jsonl'}); each counts as its unfavourable outcome"
        )
    failed_judgments: Counter[str] = Counter()
    for arm in result.report.arms:
        failed_judgments.update(arm.get("judge_errors") or {})
    for name, n in sorted(failed_judgments.items()):
        echo_error(
            f"the judge of {name} failed or gave no readable label on {n} samples (judgments.jsonl in "
            f"{outcome.path}); each counts as a fail"
        )
    if outcome.errors:
        echo_error(
            f"{outcome.errors} of {outcome.recorded} samples failed after retries "
            f"(see {outcome.path / 'samples.jsonl'}); they stay in every denominator"
        )
    if outcome.errors or failed_checks or failed_judgments:
        sys.exit(1)


def _end_comparisons(path: Path) -> str:
    """A run of two or more prompts or models ends with its comparison in words."""
    from .arms import end_comparisons, render_end

    try:
        return render_end(end_comparisons(path))
    except ProbeError as exc:  # the run stands; only its closing comparison could not be made
        return f"\n(no comparison: {exc})"


# -- report / compare / plan ----------------------------------------------------------------


@main.command(
    epilog="Examples: probe report latest --format md   |   probe report latest -o report.html   |   "
    "probe report 20261129T120000-refusal --by tag"
)
@click.argument("run_ref", metavar="RUN")
@click.option("--by", "by", type=click.Choice(["tag"]), help="Also each metric per case tag.")
@click.option(
    "--classification", type=click.IntRange(min=1), help="Use reclassification N (default: the latest)."
)
@click.option("--top-k", type=click.IntRange(min=1), help="retrieval_hit only within the first K passages.")
@runs_dir_option
@output_options(("table", "md", "json", "html"))
@handle_errors
def report(
    run_ref: str,
    by: str | None,
    classification: int | None,
    top_k: int | None,
    runs_dir: Path | None,
    fmt: str,
    output: Path | None,
) -> None:
    """Per arm: rates with Wilson intervals, design effects, failures, tokens, latency and cost;
    per case: header counts; what the retrieval did. RUN is a run directory, its id, a unique
    prefix of the id, latest or latest~N.

    \b
    DEFF: design effect, 1 + (m-1)·ICC: how much repeating a question inflates the variance.
    n_eff: effective sample size, n / DEFF: what the samples are worth as independent ones.
    95% adjusted: an interval for the rate over questions like these that keeps its coverage
    whatever the repeats (Wilson at n / DEFF with the ICC's 99% upper limit, t on G-1).
    """
    from .api import report as report_of

    path = resolve_run(run_ref, runs_dir)
    if fmt == "html":
        from .counts import build_counts
        from .views.html import report_html

        emit(report_html(build_counts(path, classification=classification, top_k=top_k)), output)
        return
    from .views.report import render_report

    result = report_of(path, by_tag=by == "tag", classification=classification, top_k=top_k)
    emit(render_report(result.to_dict(), fmt), output)


@main.command(
    epilog="Examples: probe compare 'latest#prompt=exception-only' 'latest#prompt=always-header'   |   "
    "probe compare latest~1 latest --metric refusal_recall --fail-if-worse"
)
@click.argument("a")
@click.argument("b", required=False)
@click.option(
    "--metric",
    "metrics",
    type=METRIC,
    multiple=True,
    help="The metric to compare (default header_present); repeat for several, which are then one "
    "family with adjusted p-values. " + METRICS_HELP,
)
@click.option(
    "--all",
    "all_metrics",
    is_flag=True,
    help="Compare every metric with samples on both sides (one family, adjusted p-values).",
)
@click.option(
    "--fail-if-worse",
    is_flag=True,
    help="Exit 4 when B is reliably worse than A on a metric (at the adjusted p when several).",
)
@click.option(
    "--alpha", type=click.FloatRange(0, 0.5, min_open=True), callback=finite, default=0.05, show_default=True
)
@click.option("--classification", type=click.IntRange(min=1), help="Use reclassification N of both runs.")
@click.option("--top-k", type=click.IntRange(min=1), help="retrieval_hit only within the first K passages.")
@runs_dir_option
@output_options(("table", "md", "json", "html"))
@handle_errors
def compare(
    a: str,
    b: str | None,
    metrics: tuple[str, ...],
    all_metrics: bool,
    fail_if_worse: bool,
    alpha: float,
    classification: int | None,
    top_k: int | None,
    runs_dir: Path | None,
    fmt: str,
    output: Path | None,
) -> None:
    """Are two arms different? A (baseline) and B (candidate) are RUN, RUN#prompt=NAME,
    RUN#model=NAME (or its spec) or both (RUN: a directory, an id or its prefix, latest,
    latest~N); differences are B - A. Two runs of several arms compare arm by arm: each arm of A
    with the arm of the same name in B, every pair and metric one family. One RUN alone: its two
    arms (a run of more lists the selectors to choose from)."""
    from .api import compare as compare_of
    from .views.compare import render_comparison

    result = compare_of(
        a,
        b,
        list(metrics) or ["header_present"],
        all_metrics=all_metrics,
        alpha=alpha,
        classification=classification,
        top_k=top_k,
        runs_dir=runs_dir,
    )
    comparison = result.data
    if fmt == "html":
        emit(result.html(), output)
    elif fmt == "json":
        emit(dumps_pretty(result.to_dict()), output)
    else:
        from .views.tables import color_enabled

        color = output is None and color_enabled(sys.stdout)
        emit(render_comparison(comparison, fmt, color=color), output, colour=color)
        for metric in comparison["results"]:
            if metric["a"]["errors"] or metric["b"]["errors"]:
                pair = f"{metric['pair']}: " if metric.get("pair") else ""
                say(
                    f"warning: {pair}{metric['metric']}: failed samples count against their arm "
                    f"(A {metric['a']['errors']}, B {metric['b']['errors']})",
                    err=True,
                )
    if fail_if_worse and result.worse:
        for line in result.failures():
            say(line, err=True)
        sys.exit(4)


@main.command(
    epilog="Examples: probe gate origin/main prompts/assistant.md --probeset probes/example.toml   |   "
    "probe gate origin/main prompts/*.md --metric refusal_recall --strict --format json"
)
@click.argument("baseline_ref", metavar="BASELINE_REF")
@click.argument("prompts", metavar="PROMPT...", nargs=-1, required=True)
@click.option(
    "--probeset", type=click.Path(path_type=Path), help="The probe set (default: the only one in probes/)."
)
@click.option(
    "--config", "config_path", type=click.Path(path_type=Path), help="Target config (default ./probe.toml)."
)
@click.option(
    "-m", "--model", "model_specs", multiple=True, help="A model spec or NAME=SPEC (default: [run] models)."
)
@click.option(
    "--metric",
    "metrics",
    type=METRIC,
    multiple=True,
    help="Gate on these (default: every metric). " + METRICS_HELP,
)
@click.option(
    "--alpha",
    type=click.FloatRange(0, 0.5, min_open=True),
    callback=finite,
    default=0.05,
    show_default=True,
    help="The job's false-alarm rate, over every prompt, model and metric.",
)
@click.option(
    "--strict", is_flag=True, help="Fail (exit 1) when samples failed after retries, even if not worse."
)
@click.option(
    "--retrieval",
    "retrieval_kind",
    type=click.Choice(["none"]),
    help="none: probe without retrieval (the model gets no passages); otherwise the config says how.",
)
@click.option("-n", "--repeats", type=click.IntRange(*LIMITS["repeats"]), help="Repeats per case.")
@click.option(
    "--max-attempts", type=click.IntRange(*LIMITS["max_attempts"]), help="Calls per sample (default 6)."
)
@click.option(
    "--concurrency", type=click.IntRange(*LIMITS["concurrency"]), help="Calls in flight (default 8)."
)
@click.option(
    "--max-cost", type=click.FloatRange(min=0), callback=finite, help="USD: refuse to start above it."
)
@click.option(
    "--comment",
    is_flag=True,
    help="On a GitHub runner: the table in the job summary and in one pull-request comment per probe "
    "set, updated in place on each push (needs GITHUB_TOKEN).",
)
@click.option(
    "--artifact", default="promptprobe", show_default=True, help="The artifact the comment links to."
)
@runs_dir_option
@output_options()
@handle_errors
def gate(
    baseline_ref: str,
    prompts: tuple[str, ...],
    probeset: Path | None,
    config_path: Path | None,
    model_specs: tuple[str, ...],
    metrics: tuple[str, ...],
    alpha: float,
    strict: bool,
    retrieval_kind: str | None,
    repeats: int | None,
    max_attempts: int | None,
    concurrency: int | None,
    max_cost: float | None,
    comment: bool,
    artifact: str,
    runs_dir: Path | None,
    fmt: str,
    output: Path | None,
) -> None:
    """The CI gate: each PROMPT as it is at BASELINE_REF (git show) against the working tree, on
    every model, in one paired run; each model's baseline and candidate compared, every prompt, model
    and metric one adjusted family. A prompt absent at the ref is new and not gated. Exit 0 not
    worse, 4 a candidate is reliably worse (a FAIL: line each), 1 with --strict when samples failed
    after retries, 2 bad input, 3 could not start."""
    from .gate import gate as run_gate
    from .gate import probeset_of
    from .views.gate import render_gate

    options = dict(repeats=repeats, max_attempts=max_attempts, concurrency=concurrency, max_cost=max_cost)
    shown = ExitStack()  # the progress line, from when the gate has made its run's plan

    def watch(runner: Any) -> None:
        progress = shown.enter_context(Progress(runner.plan.samples))
        runner.on_record = progress.update
        runner.on_start = lambda path: progress.say(f"run: {path}")

    try:
        with shown:
            result = run_gate(
                baseline_ref,
                prompts,
                probeset_of(probeset),
                config=config_path,
                models=model_specs,
                metrics=metrics,
                alpha=alpha,
                strict=strict,
                runs_dir=runs_dir,
                run_options=options,
                watch=watch,
                retrieval=retrieval_kind,
            )
    except ProbeError as exc:
        if comment:
            from .gate import comment_failure

            for line in comment_failure(str(exc), probeset, artifact):
                say(line, err=True)
        raise
    if comment:
        from .gate import comment_result

        for line in comment_result(result, artifact):
            say(line, err=True)
    emit(dumps_pretty(result.to_dict()) if fmt == "json" else render_gate(result.to_dict(), fmt), output)
    for line in result.failures():
        say(line, err=True)
    sys.exit(result.exit_code)


@main.command(
    epilog="Examples: probe plan --p1 0.85 --p2 1.0   |   "
    "probe plan --p1 0.85 --p2 1.0 --cases 10 --icc 0.5   |   "
    "probe plan --n 30 --p1 0.85   |   probe plan --gate-any-of 5 --p 0.87   |   "
    "probe plan --sequential --p1 0.9 --p2 0.7 --cases 10"
)
@click.option("--p1", type=float, callback=finite, help="Rate of one version.")
@click.option("--p2", type=float, callback=finite, help="Rate of the other version.")
@click.option("--n", "n", type=click.IntRange(min=1), help="Samples per arm you can afford (with --p1).")
@click.option("--alpha", type=float, callback=finite, default=0.05, show_default=True, help="In (0, 0.5].")
@click.option("--power", type=float, callback=finite, default=0.8, show_default=True, help="In [0.5, 1).")
@click.option("--cases", type=click.IntRange(min=1), help="Cases in the probe set (to turn n into repeats).")
@click.option(
    "--icc", type=float, callback=finite, help="Expected intra-case correlation, in [0, 1] (with --cases)."
)
@click.option(
    "--cases-b",
    type=click.IntRange(min=1),
    help="Unpaired, with other questions on B's side: B's cases (default: as many as --cases).",
)
@click.option(
    "--gate-any-of",
    "gate_k",
    type=click.IntRange(min=1, max=1000),
    help="Gate failing a case when any of K runs fails.",
)
@click.option("--p", "p", type=float, callback=finite, help="Per-run success rate (with --gate-any-of).")
@click.option("--sequential", is_flag=True, help="Samples to a decision for --until-decided (with --cases).")
@click.option(
    "--detect",
    type=click.FloatRange(0, 100, min_open=True),
    callback=finite,
    default=15.0,
    show_default=True,
    help="With --sequential: the --detect of the run (its cap), in points.",
)
@output_options()
@handle_errors
def plan(
    p1: float | None,
    p2: float | None,
    n: int | None,
    alpha: float,
    power: float,
    cases: int | None,
    icc: float | None,
    cases_b: int | None,
    gate_k: int | None,
    p: float | None,
    sequential: bool,
    detect: float,
    fmt: str,
    output: Path | None,
) -> None:
    """Sample size to tell p1 from p2 (and repeats for the paired design); smallest difference
    an n detects; any-of-k gate blocking; rounds of a sequential run."""
    from .api import plan as plan_of
    from .views.plan import render_plan

    result = plan_of(
        p1,
        p2,
        n=n,
        alpha=alpha,
        power=power,
        cases=cases,
        icc=icc,
        gate_any_of=gate_k,
        p=p,
        sequential=sequential,
        detect=detect,
        cases_b=cases_b,
    )
    emit(render_plan(result.view, fmt), output)


# -- why ------------------------------------------------------------------------------------


@main.command(epilog="Example: probe why 'latest#prompt=exception-only'")
@click.argument("target", metavar="RUN[#ARM]")
@click.option("--metric", type=METRIC, default="header_present", show_default=True, help=METRICS_HELP)
@click.option("--top", type=click.IntRange(min=1), default=10, show_default=True, help="Phrases to show.")
@runs_dir_option
@output_options()
@handle_errors
def why(target: str, metric: str, top: int, runs_dir: Path | None, fmt: str, output: Path | None) -> None:
    """Phrases over-represented in the samples that failed a metric, against those that passed
    (Fisher's exact test, Benjamini-Hochberg adjusted), with example sample ids."""
    from .runref import resolve_selector
    from .views.why import explain, render_why

    emit(render_why(explain(resolve_selector(target, runs_dir), metric), fmt, top), output)


# -- demo -----------------------------------------------------------------------------------


@main.command("demo-server", epilog="Example: probe demo-server --port 8765")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True)
@click.option(
    "--behaviour", type=click.Path(path_type=Path), help="A behaviour file (default: the packaged one)."
)
@handle_errors
def demo_server(host: str, port: int, behaviour: Path | None) -> None:
    """Serve the SIMULATED help-desk model over the OpenAI Chat Completions wire format (and its
    Batch API, for probe run --batch)."""
    from .demo import DemoServer, load_behaviour

    try:
        server = DemoServer(host, port, load_behaviour(behaviour))
    except OSError as exc:
        raise StartError(f"cannot listen on {host}:{port} ({exc.strerror})") from None
    say(
        f"SIMULATED model (not a real LLM) serving Chat Completions at {server.url}; Ctrl-C stops it",
        err=True,
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        say("stopped", err=True)
    finally:
        server.httpd.server_close()


@main.command(epilog="Example: probe demo")
@runs_dir_option
@click.option(
    "--port", type=click.IntRange(0, 65535), default=0, help="Demo server port (default: any free)."
)
@click.option("--stream", is_flag=True, help="Use the streaming API.")
@click.option(
    "--batch", is_flag=True, help="Send the calls through the demo server's Batch API (as probe run --batch)."
)
@handle_errors
def demo(runs_dir: Path | None, port: int, stream: bool, batch: bool) -> None:
    """Offline end to end on the SIMULATED model: the example probe set under both example
    prompts, the report, the comparison, and the same comparison decided sequentially."""
    from .demo import run_demo

    if stream and batch:
        raise InputError("--stream and --batch: a batch answers whole replies, never streams; choose one")
    result = run_demo(runs_dir_of(runs_dir), port, stream, progress=Progress, batch=batch)
    say(result.text)
    if result.errors:
        sys.exit(1)


# -- show / export --------------------------------------------------------------------------


def _sample_filters(func: Callable[..., Any]) -> Callable[..., Any]:
    func = click.option(
        "--header",
        type=click.Choice(["present", "absent", "misplaced", "empty", "error"]),
        help="Only samples whose header is this (or that failed).",
    )(func)
    func = click.option("--case", help="Only this case.")(func)
    func = click.option("--sample", help="Only this sample id.")(func)
    return func


@main.command(epilog="Example: probe show latest --header misplaced")
@click.argument("run_ref", metavar="RUN")
@_sample_filters
@runs_dir_option
@output_options(("table", "md", "json"))
@handle_errors
def show(
    run_ref: str,
    sample: str | None,
    case: str | None,
    header: str | None,
    runs_dir: Path | None,
    fmt: str,
    output: Path | None,
) -> None:
    """Raw outputs with invisible characters made visible (CR, BOM, zero-width, trailing spaces)."""
    from .views.show import show as show_samples

    emit(show_samples(resolve_run(run_ref, runs_dir), sample, case, header, fmt), output)


@main.command(
    epilog="Examples: probe export latest --case price-enterprise -o incident.md   |   "
    "probe export latest --format csv -o samples.csv"
)
@click.argument("run_ref", metavar="RUN")
@_sample_filters
@runs_dir_option
@click.option("--arm", "arm", metavar="SELECTOR", help="Only this arm: N, prompt=NAME and/or model=NAME.")
@output_options(("md", "json", "jsonl", "csv", "table"), default="md")
@handle_errors
def export(
    run_ref: str,
    sample: str | None,
    case: str | None,
    header: str | None,
    runs_dir: Path | None,
    arm: str | None,
    fmt: str,
    output: Path | None,
) -> None:
    """An incident file (md, json): per case the question, expected outcome, passages, failed
    metrics and the outputs grouped by identical bytes with their counts and sample ids, with the
    run's provenance; or one row per sample (jsonl, csv, table; a fixed set of columns, listed
    in docs/cli.md) for pandas, DuckDB, Datasette or a spreadsheet. CSV cells a spreadsheet would
    run as a formula get a leading ' (OWASP)."""
    run_dir = resolve_run(run_ref, runs_dir)
    if fmt in ("jsonl", "csv", "table"):
        from .views.rows import iter_rows

        emit_stream(iter_rows(run_dir, fmt, sample, case, header, arm), output)
        return
    from .views.incident import export as export_samples

    emit(export_samples(run_dir, sample, case, header, fmt, arm), output, newline=False)


@main.command(epilog="Examples: probe verify latest   |   probe verify latest --format json")
@click.argument("run_ref", metavar="RUN")
@runs_dir_option
@output_options(("table", "json"))
@handle_errors
def verify(run_ref: str, runs_dir: Path | None, fmt: str, output: Path | None) -> None:
    """Check that what is on disk is what was recorded: every sample's raw bytes against their
    sha256 and byte count and their index lines, the index against the packs, the records against
    the plan (a sample twice, an arm or case not planned, an id out of place, a complete run
    lacking planned samples), torn or NUL-filled tails. Exit 0 when all holds, 1 when anything is
    wrong (each problem a line), 2 when RUN is not a run."""
    from .verify import as_json, describe, verify_run

    result = verify_run(resolve_run(run_ref, runs_dir))
    emit(as_json(result) if fmt == "json" else describe(result), output)
    if not result["ok"]:
        sys.exit(1)


@main.command(epilog="Example: probe migrate runs/20261129T120000-refusal-header-abc123")
@click.argument("run_ref", metavar="RUN")
@runs_dir_option
@output_options(("table", "json"))
@handle_errors
def migrate(run_ref: str, runs_dir: Path | None, fmt: str, output: Path | None) -> None:
    """Convert a run recorded before packs (one raw/ file per output, body and request) to packs:
    every byte kept, each blob checked by sha256 before its file is removed."""
    from .migrate import migrate_run
    from .runstore import is_store

    if is_store(run_ref) or (not is_dir(Path(run_ref)) and not isinstance(runs_dir_of(runs_dir), Path)):
        raise InputError(  # it would convert this machine's copy, not the run in the store
            f"{run_ref}: probe migrate converts a run on disk; for a run of a runs store, probe pull it, "
            "migrate it and probe push it"
        )
    result = migrate_run(resolve_run(run_ref, runs_dir))
    if fmt == "json":
        emit(dumps_pretty(result), output)
        return
    emit(f"{result['run']}: {result['packed']} blobs packed and checked by sha256; "
         f"{result['files_removed']} raw files removed", output)

# -- judge / label --------------------------------------------------------------------------


@main.command(epilog="Examples: probe judge latest --check grounded --repeats 3   |   "
              "probe judge latest --check grounded --rubric judges/grounded-v2.md")
@click.argument("run_ref", metavar="RUN")
@click.option("--check", "check", required=True, help="The judged check to grade again.")
@click.option("--rubric", type=click.Path(path_type=Path), help="Another rubric file (default: the check's).")
@click.option("--model", help="Another judge model: a spec, or a NAME of the run's models.")
@click.option("--repeats", type=click.IntRange(min=1), help="Judgments per output (default: the check's).")
@click.option("--max-cost", type=float, help="Stop judging once the judgments cost this many USD.")
@runs_dir_option
@output_options(("table", "json"))
@handle_errors
def judge(
    run_ref: str,
    check: str,
    rubric: Path | None,
    model: str | None,
    repeats: int | None,
    max_cost: float | None,
    runs_dir: Path | None,
    fmt: str,
    output: Path | None,
) -> None:
    """Grade the recorded outputs again (no call to the target) as a new classification layer;
    report, compare, show and export count the latest. Interrupted, the same command continues."""
    from .judge_run import judge_run

    run_dir = resolve_run(run_ref, runs_dir)
    try:
        result = judge_run(run_dir, check, rubric, model, repeats, max_cost, threading.Event())
    except KeyboardInterrupt:
        again = f"probe judge {typed(run_dir)} --check {check}"
        echo_error(f"interrupted: no classification was written; {again} with the same flags continues")
        sys.exit(130)
    if fmt == "json":
        emit(dumps_pretty(result), output)
    else:
        done = (
            f"classification {result['classification']} of {result['run']}: {check} judged again by "
            f"{result['model']} ({result['repeats']} per output); probe report and probe compare now count it"
            if result["classification"] is not None
            else f"{result['run']}: judging stopped ({result['stopped_by']}); no layer was written: "
            "the same command continues where it stopped"
        )
        emit(f"{done}\n{result['judged']} judgments made now, {result['judgments']} in all, "
             f"{result['failed']} failed or unreadable (each a fail)", output)
    if result["classification"] is None:
        sys.exit(1)


@main.command(epilog="Examples: probe label latest --check grounded   |   "
              "probe label latest --check grounded --template -o labels.csv")
@click.argument("run_ref", metavar="RUN")
@click.option("--check", "check", required=True, help="The judged check to label outputs of.")
@click.option("--labels", "labels_file", type=click.Path(path_type=Path),
              help="The labels file (default: the check's labels_file).")
@click.option("--template", is_flag=True, help="A CSV of every judged output, its label column empty.")
@click.option("-o", "--output", type=click.Path(path_type=Path), help="Where --template writes.")
@runs_dir_option
@handle_errors
def label(
    run_ref: str,
    check: str,
    labels_file: Path | None,
    template: bool,
    output: Path | None,
    runs_dir: Path | None,
) -> None:
    """Label judged outputs by hand, one at a time (pass, fail, skip, quit); each answer is
    appended to the labels file at once. The judge's reply is shown only after you answer."""
    from .judged import judged_samples
    from .labelling import labels_path, to_label
    from .labels import append_label
    from .labels import template as labels_template

    run_dir = resolve_run(run_ref, runs_dir)
    if template:
        rows = [
            {"sample_id": s.sample_id, "sha256": s.sha256 or "", "case_id": s.case_id,
             "prompt": arm.prompt, "model": arm.model}
            for arm in judged_samples(run_dir, check) for s in arm.samples
        ]
        emit(labels_template(rows), output, newline=False)
        return
    path = labels_path(run_dir, check, labels_file)
    queue = to_label(run_dir, check, path)
    if not queue:
        say(f"every judged output of {check} has a hand label in {path}")
        return
    answered = 0
    for number, item in enumerate(queue, 1):
        where = f"prompt {item.arm.prompt}  model {item.arm.model}"
        say(f"\n== {number} of {len(queue)}: {item.sample.sample_id}  {where}")
        say(f"question: {item.question}\n--- output (invisible characters shown) ---\n{item.visible}\n---")
        answers = click.Choice(["p", "f", "s", "q", "pass", "fail", "skip", "quit"])
        choice = click.prompt("pass, fail, skip or quit", type=answers, show_choices=False)[0]
        if choice == "q":
            break
        if choice in ("p", "f"):
            append_label(path, item.row("pass" if choice == "p" else "fail"))
            answered += 1
        said = ", ".join(r.strip().splitlines()[-1] if r and r.strip() else "(failed)" for r in item.replies)
        say(f"the judge said: {said or 'nothing (not judged)'}")
        for reply in dict.fromkeys(r.strip() for r in item.replies if r and r.strip()):
            say("  | " + "\n  | ".join(reply.splitlines()[-12:]))  # its reasoning, the end of it
    say(f"{answered} labels appended to {path}")


# -- view -----------------------------------------------------------------------------------


@main.command(epilog="Examples: probe view   |   probe view runs --port 8001")
@click.argument(
    "runs_folder", metavar="[RUNS_DIR]", required=False
)
@click.option(
    "--port", type=click.IntRange(0, 65535), default=8000, show_default=True, help="0: any free port."
)
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="The address to listen on; anything but loopback lets others on the network read every output.",
)
@click.option(
    "--allow-host",
    "allow_hosts",
    multiple=True,
    metavar="NAME",
    help="Also answer requests that name the viewer NAME (a DNS name you own; repeatable). "
    "Otherwise only the address it listens on is answered.",
)
@handle_errors
def view(runs_folder: Path | None, port: int, host: str, allow_hosts: tuple[str, ...]) -> None:
    """A local, read-only web viewer over the runs directory (RUNS_DIR, else $PROBE_RUNS_DIR, else
    ./runs): the runs (live while written), each run's verdicts, rates and case x arm grid, one
    case's outputs grouped by identical text, any two arms side by side with the cases where one
    fails and the other passes first, why phrases as filters, and incident files. Every page is
    also JSON at its address plus .json. Ctrl-C stops it (exit 130, as for every command; 143 for
    SIGTERM); started with Ctrl-C ignored (nohup, a background job), it keeps ignoring it."""
    try:
        import uvicorn  # noqa: F401
    except ImportError:
        raise StartError("probe view needs uvicorn and starlette: pip install 'promptprobe'") from None
    from .runstore.remote import run_ids
    from .viewer import serve

    folder = runs_dir_of(runs_folder)
    if not isinstance(folder, Path):
        run_ids(folder)  # a store out of reach, or no credentials: said now (exit 3), not per page
    elif not folder.is_dir():
        raise InputError(f"{folder}: no such runs directory (probe demo or probe run write one)")

    def ready(url: str) -> None:
        say(f"probe view: {folder} at {url} (read-only; Ctrl-C stops it)", err=True)

    try:
        stopped_by = serve(
            folder, host, port, on_ready=ready, allow_hosts=allow_hosts, on_exposed=lambda s: say(s, err=True)
        )
    except OSError as exc:
        raise StartError(f"cannot listen on {host}:{port} ({exc.strerror or exc})") from None
    if stopped_by is not None:
        say("interrupted", err=True)
        sys.exit(128 + stopped_by)


# -- runs -----------------------------------------------------------------------------------


@main.command(epilog="Examples: probe runs   |   probe runs --limit 5 --format json")
@click.option("--limit", type=click.IntRange(min=1), help="Only the N newest runs.")
@runs_dir_option
@output_options()
@handle_errors
def runs(limit: int | None, runs_dir: Path | None, fmt: str, output: Path | None) -> None:
    """The runs of the runs directory, newest first: id, probe set, arms, status, samples,
    errors, created. Any command that takes a RUN takes an id from here, a unique prefix of
    one, latest or latest~N."""
    from .runref import runs_dir as folder_of
    from .views.runs import render_runs, runs_view

    found = runs_view(runs_dir, limit)
    if not found and fmt != "json":
        emit(f"no runs in {folder_of(runs_dir)}", output)
        return
    emit(render_runs(found, fmt), output)
    for info in found:  # listed as damaged; what is wrong, one sentence each (JSON: `problem`)
        if info.problem and fmt != "json":
            say(f"warning: {info.problem}", err=True)


# -- push / pull ----------------------------------------------------------------------------


@main.command(epilog="Example: probe push latest s3://team-bucket/probe-runs")
@click.argument("run_ref", metavar="RUN")
@click.argument("store_url", metavar="STORE")
@runs_dir_option
@output_options(("table", "json"))
@handle_errors
def push(run_ref: str, store_url: str, runs_dir: str | None, fmt: str, output: Path | None) -> None:
    """Copy a finished run from disk into a runs store (s3://BUCKET/PREFIX) under its own id,
    every object read back and checked against its file's sha256."""
    from .runstore import Store, is_store
    from .runstore.transfer import push as push_run

    if not is_store(store_url):
        raise InputError(f"{store_url}: push copies a run into a runs store: give s3://BUCKET/PREFIX")
    url, copied = push_run(resolve_run(run_ref, runs_dir), Store.parse(store_url))
    said = "copied, every file checked by sha256" if copied else "already in the store, unchanged"
    emit(dumps_pretty({"run": url, "copied": copied}) if fmt == "json" else f"{url}: {said}", output)


@main.command(epilog="Example: probe pull s3://team-bucket/probe-runs/latest runs")
@click.argument("run_url", metavar="STORE/RUN")
@click.argument("runs_folder", metavar="DIR", required=False)
@output_options(("table", "json"))
@handle_errors
def pull(run_url: str, runs_folder: str | None, fmt: str, output: Path | None) -> None:
    """Copy a finished run of a runs store (RUN: an id, a prefix of one, latest or latest~N)
    into DIR/<run id> (DIR default ./runs), every file checked against the sha256 its index
    records."""
    from .runref import store_run_id
    from .runstore import Store, is_store
    from .runstore.transfer import pull as pull_run

    if not is_store(run_url) or "/" not in run_url.partition("://")[2].strip("/"):
        raise InputError(f"{run_url}: pull copies a run of a runs store: give s3://BUCKET/PREFIX/RUN")
    store_text, _, reference = run_url.rstrip("/").rpartition("/")
    store = Store.parse(store_text)
    run_id = store_run_id(store, reference)
    path = pull_run(store, run_id, Path(runs_folder or "runs"))
    pulled = {"run": str(path), "from": store.run_url(run_id)}
    emit(dumps_pretty(pulled) if fmt == "json" else str(path), output)
