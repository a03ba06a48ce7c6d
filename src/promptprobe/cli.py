"""The `probe` command: parse flags, call one library function, print."""

import functools
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from . import __version__
from .errors import InputError, ProbeError
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


@click.group(
    epilog="Example: probe run probes/refusal-header.toml --prompt prompts/always-header.md"
)
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


@main.command(
    epilog="Example: probe classify output.txt   |   probe classify runs/20261129T120000-x-abc123"
)
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
