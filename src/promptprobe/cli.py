"""The `probe` command: parse flags, call one library function, print."""

import functools
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from . import __version__
from .errors import InputError, ProbeError, StartError
from .header import HeaderConfig
from .probeset import load_probeset


def handle_errors(func: Callable[..., Any]) -> Callable[..., Any]:
    """Turn domain errors into one line on stderr and DESIGN.md's exit code."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except ProbeError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(exc.exit_code)

    return wrapper


@click.group(epilog="Example: probe run probes/refusal-header.toml --prompt prompts/always-header.md")
@click.version_option(__version__, prog_name="probe")
def main() -> None:
    """Probe prompt versions and models through a RAG system's real retrieval path.

    Records raw outputs byte for byte, classifies their protocol header and reports rates
    with Wilson intervals, so two versions are called different only when the sample can
    tell them apart.
    """


@main.command(epilog="Example: probe check probes/*.toml")
@click.argument("probesets", nargs=-1, required=True, type=click.Path(path_type=Path))
def check(probesets: tuple[Path, ...]) -> None:
    """Validate probe sets (schema, unknown keys, duplicate ids and questions)."""
    bad = 0
    for path in probesets:
        try:
            probeset = load_probeset(path)
        except InputError as exc:
            bad += 1
            click.echo(f"error: {exc}", err=True)
            continue
        click.echo(f"ok: {probeset.name} ({len(probeset.cases)} cases, {probeset.repeats} repeats)")
    if bad:
        sys.exit(InputError.exit_code)


def header_override(markers: str | None, no_answer: str | None) -> HeaderConfig | None:
    """A HeaderConfig from `--markers A,B --no-answer B`, or None when neither is given."""
    if markers is None and no_answer is None:
        return None
    marker_list = tuple(m for m in (markers or "").split(",") if m) or HeaderConfig().markers
    if no_answer is None:
        default = HeaderConfig().no_answer
        no_answer = default if default in marker_list else marker_list[-1]
    return HeaderConfig(markers=marker_list, no_answer=no_answer)


@main.command(epilog="Example: probe classify output.txt   |   probe classify runs/20261129T120000-x-abc123")
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--markers", help="Comma-separated header markers (default: the config's).")
@click.option("--no-answer", help="Which marker means no answer.")
@handle_errors
def classify(paths: tuple[Path, ...], markers: str | None, no_answer: str | None) -> None:
    """Print the header classification of files as JSON lines; a run is reclassified offline."""
    from .classifying import classify_path

    override = header_override(markers, no_answer)
    failed = 0
    for path in paths:
        try:
            for line in classify_path(path, override):
                click.echo(json.dumps(line, ensure_ascii=False))
        except InputError as exc:
            failed += 1
            click.echo(f"error: {exc}", err=True)
    if failed:
        sys.exit(InputError.exit_code)


def _models(specs: tuple[str, ...], config: Any) -> list[Any]:
    from .models import parse_model_spec

    if not specs:
        return list(config.run.models)
    # A spec also listed in probe.toml keeps its api_key_env from there.
    configured = {m.spec: m for m in config.run.models}
    return [configured.get(spec) or parse_model_spec(spec) for spec in specs]


@main.command(
    epilog="Example: probe run probes/refusal-header.toml --prompt prompts/exception-only.md "
    "--prompt prompts/always-header.md --model anthropic:claude-sonnet-4-5"
)
@click.argument("probeset_path", metavar="PROBESET", type=click.Path(path_type=Path))
@click.option(
    "--prompt",
    "prompt_paths",
    multiple=True,
    type=click.Path(path_type=Path),
    help="A prompt version file; repeat for several.",
)
@click.option(
    "--model",
    "model_specs",
    multiple=True,
    help="anthropic:MODEL, openai:MODEL or openai:MODEL@BASE_URL; repeat for several.",
)
@click.option(
    "-n", "--repeats", type=click.IntRange(min=1), help="Repeats per case (default: config, then probe set)."
)
@click.option(
    "--config", "config_path", type=click.Path(path_type=Path), help="Target config (default ./probe.toml)."
)
@click.option("--runs-dir", type=click.Path(path_type=Path), default=Path("runs"), show_default=True)
@click.option("--temperature", type=click.FloatRange(min=0), help="Sent only when given.")
@click.option("--max-tokens", type=click.IntRange(min=1), help="Default 1024.")
@click.option("--seed", type=int, help="Sent where the API has a seed (OpenAI); recorded.")
@click.option("--concurrency", type=click.IntRange(min=1), help="Calls in flight (default 8).")
@click.option("--stream/--no-stream", default=None, help="Use the streaming API.")
@click.option(
    "--format", "fmt", type=click.Choice(["table", "md", "json"]), default="table", show_default=True
)
@handle_errors
def run(
    probeset_path: Path,
    prompt_paths: tuple[Path, ...],
    model_specs: tuple[str, ...],
    repeats: int | None,
    config_path: Path | None,
    runs_dir: Path,
    temperature: float | None,
    max_tokens: int | None,
    seed: int | None,
    concurrency: int | None,
    stream: bool | None,
    fmt: str,
) -> None:
    """Run every case x repeat x prompt x model through the target; print the run and its report."""
    from .config import load_config
    from .prompts import load_prompt
    from .providers import GenerationParams
    from .report import build_report, render_report
    from .runner import Runner, RunOptions

    config = load_config(config_path)
    probeset = load_probeset(probeset_path)
    prompts = [load_prompt(p) for p in prompt_paths]
    settings = config.run
    params = GenerationParams(
        max_tokens=max_tokens or settings.max_tokens,
        temperature=temperature if temperature is not None else settings.temperature,
        seed=seed if seed is not None else settings.seed,
        stream=stream if stream is not None else settings.stream,
        timeout=settings.timeout,
    )
    options = RunOptions(
        repeats=repeats or settings.repeats,
        params=params,
        concurrency=concurrency or settings.concurrency,
        max_attempts=settings.max_attempts,
        runs_dir=runs_dir,
        seed=params.seed,
    )
    runner = Runner(probeset, prompts, _models(model_specs, config), config, options)
    try:
        with _progress(runner.counts["planned"]) as bar:
            runner.on_sample = lambda record: bar.update(1)
            outcome = runner.run()
    except KeyboardInterrupt:
        where = runner.store.path if runner.store else "nowhere (nothing was recorded)"
        click.echo(f"interrupted: {runner.counts['recorded']} samples recorded in {where}", err=True)
        sys.exit(130)
    click.echo(f"run: {outcome.path}")
    click.echo(render_report(build_report(outcome.path), fmt))
    if outcome.errors:
        click.echo(
            f"error: {outcome.errors} of {outcome.planned} samples failed after retries "
            f"(see {outcome.path / 'samples.jsonl'})",
            err=True,
        )
        sys.exit(1)


@main.command(epilog="Example: probe report runs/20261129T120000-refusal-header-1a2b3c --format md")
@click.argument("run_dir", metavar="RUN", type=click.Path(path_type=Path))
@click.option(
    "--format", "fmt", type=click.Choice(["table", "md", "json"]), default="table", show_default=True
)
@handle_errors
def report(run_dir: Path, fmt: str) -> None:
    """Per arm: rates with Wilson intervals and design effects; per case: header counts."""
    from .report import build_report, render_report

    click.echo(render_report(build_report(run_dir), fmt))


@main.command(
    epilog="Examples: probe compare 'RUN#prompt=exception-only' 'RUN#prompt=always-header'   |   "
    "probe compare runs/OLD runs/NEW --metric refusal_recall --fail-if-worse"
)
@click.argument("a")
@click.argument("b")
@click.option("--metric", default="header_present", show_default=True, help="Any metric of the report.")
@click.option("--all", "all_metrics", is_flag=True, help="Compare every metric in one table.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--fail-if-worse", is_flag=True, help="Exit 4 when B is reliably worse than A (CI gates).")
@handle_errors
def compare(a: str, b: str, metric: str, all_metrics: bool, as_json: bool, fail_if_worse: bool) -> None:
    """Are two arms different? A and B are RUN, RUN#prompt=NAME, RUN#model=SPEC or both."""
    from .compare import compare_runs, render_comparison, worse
    from .report import METRIC_NAMES

    results = compare_runs(a, b, list(METRIC_NAMES) if all_metrics else [metric])
    if as_json:
        payload = results if all_metrics else results[0]
        click.echo(json.dumps(payload, ensure_ascii=False, indent=2))
    else:
        click.echo(render_comparison(results))
    if fail_if_worse and any(worse(r) for r in results):
        sys.exit(4)


@main.command(
    epilog="Examples: probe plan --p1 0.85 --p2 1.0   |   probe plan --n 30 --p1 0.85   |   "
    "probe plan --gate-any-of 5 --p 0.87"
)
@click.option("--p1", type=click.FloatRange(0, 1), help="Rate of one version.")
@click.option("--p2", type=click.FloatRange(0, 1), help="Rate of the other version.")
@click.option("--n", "n", type=click.IntRange(min=1), help="Samples per arm you can afford (with --p1).")
@click.option(
    "--alpha", type=click.FloatRange(0, 1, min_open=True, max_open=True), default=0.05, show_default=True
)
@click.option(
    "--power", type=click.FloatRange(0, 1, min_open=True, max_open=True), default=0.8, show_default=True
)
@click.option("--cases", type=click.IntRange(min=1), help="Cases in the probe set (to turn n into repeats).")
@click.option("--icc", type=click.FloatRange(0, 1), help="Expected intra-case correlation (with --cases).")
@click.option(
    "--gate-any-of",
    "gate_k",
    type=click.IntRange(min=1),
    help="Gate failing a case when any of K runs fails.",
)
@click.option("--p", "p", type=click.FloatRange(0, 1), help="Per-run success rate (with --gate-any-of).")
@click.option("--json", "as_json", is_flag=True)
@handle_errors
def plan(
    p1: float | None,
    p2: float | None,
    n: int | None,
    alpha: float,
    power: float,
    cases: int | None,
    icc: float | None,
    gate_k: int | None,
    p: float | None,
    as_json: bool,
) -> None:
    """Sample size to tell p1 from p2; smallest difference an n detects; any-of-k gate blocking."""
    from .planning import plan_gate, plan_mdd, plan_sample_size, render_plan

    if gate_k is not None:
        if p is None:
            raise InputError("--gate-any-of needs --p (the per-run success rate)")
        result = plan_gate(p, gate_k)
    elif n is not None:
        if p1 is None:
            raise InputError("--n needs --p1 (the rate you have now)")
        result = plan_mdd(n, p1, alpha, power)
    elif p1 is not None and p2 is not None:
        if (cases is None) != (icc is None):
            raise InputError("--cases and --icc go together")
        result = plan_sample_size(p1, p2, alpha, power, cases, icc)
    else:
        raise InputError("give --p1 and --p2, or --n and --p1, or --gate-any-of K and --p")
    click.echo(json.dumps(result) if as_json else render_plan(result))


@main.command("demo-server", epilog="Example: probe demo-server --port 8765")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True)
@click.option(
    "--behaviour", type=click.Path(path_type=Path), help="A behaviour file (default: the packaged one)."
)
@handle_errors
def demo_server(host: str, port: int, behaviour: Path | None) -> None:
    """Serve the SIMULATED help-desk model over the OpenAI Chat Completions wire format."""
    from .demo import DemoServer, load_behaviour

    try:
        server = DemoServer(host, port, load_behaviour(behaviour))
    except OSError as exc:
        raise StartError(f"cannot listen on {host}:{port} ({exc.strerror})") from None
    click.echo(
        f"SIMULATED model (not a real LLM) serving Chat Completions at {server.url}; Ctrl-C stops it",
        err=True,
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        click.echo("stopped", err=True)
    finally:
        server.httpd.server_close()


@main.command(epilog="Example: probe demo")
@click.option("--runs-dir", type=click.Path(path_type=Path), default=Path("runs"), show_default=True)
@click.option(
    "--port", type=click.IntRange(0, 65535), default=0, help="Demo server port (default: any free)."
)
@click.option("--stream", is_flag=True, help="Use the streaming API.")
@handle_errors
def demo(runs_dir: Path, port: int, stream: bool) -> None:
    """Offline end to end: refusal-header.toml x 3 repeats x 2 prompts on the SIMULATED model."""
    from .demo import run_demo

    result = run_demo(Path.cwd(), runs_dir, port, stream, progress=_progress)
    click.echo(result.text)
    if result.errors:
        sys.exit(1)


class _NoProgress:
    """Stands in for the progress bar when stderr is not a terminal (CI logs, pipes)."""

    def __enter__(self) -> "_NoProgress":
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def update(self, steps: int) -> None:
        return None


def _progress(length: int) -> Any:
    """click's progress bar on stderr, only on a terminal."""
    if not sys.stderr.isatty():
        return _NoProgress()
    return click.progressbar(length=length, label="samples", file=sys.stderr)


def _sample_filters(func: Callable[..., Any]) -> Callable[..., Any]:
    func = click.option(
        "--header",
        type=click.Choice(["present", "absent", "misplaced", "error"]),
        help="Only samples whose header is this (or that failed).",
    )(func)
    func = click.option("--case", help="Only this case.")(func)
    func = click.option("--sample", help="Only this sample id.")(func)
    return func


@main.command(epilog="Example: probe show runs/20261129T120000-refusal-header-1a2b3c --header misplaced")
@click.argument("run_dir", metavar="RUN", type=click.Path(path_type=Path))
@_sample_filters
@handle_errors
def show(run_dir: Path, sample: str | None, case: str | None, header: str | None) -> None:
    """Raw outputs with invisible characters made visible (CR, BOM, zero-width, trailing spaces)."""
    from .export import show as show_samples

    click.echo(show_samples(run_dir, sample, case, header))


@main.command(
    epilog="Example: probe export runs/20261129T120000-refusal-header-1a2b3c --case price-enterprise"
)
@click.argument("run_dir", metavar="RUN", type=click.Path(path_type=Path))
@_sample_filters
@click.option("--format", "fmt", type=click.Choice(["md", "json"]), default="md", show_default=True)
@handle_errors
def export(run_dir: Path, sample: str | None, case: str | None, header: str | None, fmt: str) -> None:
    """An incident attachment: question, retrieval, classification and the exact raw output."""
    from .export import export as export_samples

    click.echo(export_samples(run_dir, sample, case, header, fmt), nl=False)
