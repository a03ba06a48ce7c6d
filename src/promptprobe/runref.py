"""Run references: how a command names a run, and the list of runs (`probe runs`).

A RUN argument is a run directory's path, its id (the directory's name), a unique prefix of
the id, `latest` (the newest run) or `latest~N` (the N-th before it), or a run's URL in a runs
store (`s3://BUCKET/PREFIX/RUN`, RUN any of those forms). Ids are looked up in the runs directory
or store (runstore.location: `--runs-dir`, else `PROBE_RUNS_DIR`, else probe.toml's `[run]
runs_dir`, else `./runs`); a run of a store is read from its verified copy in the local cache.
An unknown or ambiguous reference is an InputError (exit 2) that lists the candidates.
"""

import os
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import InputError
from .paths import RunFileRefused, is_dir, shown
from .runstore.remote import Store, is_store, run_ids

if TYPE_CHECKING:
    from .runstore import Location

LATEST = re.compile(r"latest(?:~(\d+))?")
ENV = "PROBE_RUNS_DIR"


def runs_dir(given: Any = None) -> "Location":
    """The runs directory or store (runstore.location)."""
    from .runstore import location

    return location(given)


@dataclass(frozen=True)
class RunInfo:
    path: Path
    id: str
    probeset: str
    arms: list[str]
    status: str
    samples: int
    planned: int | None
    errors: int
    created: str
    pairs: tuple[tuple[str, str], ...] = ()  # each arm's (prompt, model name), in arm order
    sequential: bool = False  # rounds until decided: `planned` is a cap, not a target
    verdict: dict[str, Any] | None = None  # a two-arm run's headline verdict (views/runs.py)
    incomplete: bool = False  # no manifest: stopped (or still) being created; `latest` skips it
    url: str = ""  # a run of a store: its URL (`path` is its copy in the cache)
    problem: str = ""  # a damaged run (a file of it a link or not a regular file): the sentence saying so

    def to_dict(self) -> dict[str, Any]:
        return {
            "run": self.url or str(self.path),
            "id": self.id,
            "probeset": self.probeset,
            "arms": self.arms,
            "status": self.status,
            "samples": self.samples,
            "planned": self.planned,
            "errors": self.errors,
            "created": self.created,
            "verdict": self.verdict,
            "problem": self.problem or None,
        }


def _tally(path: Path) -> dict[str, int] | None:
    """Samples and failed samples as samples.jsonl holds them now (None: it cannot be read)."""
    from .engine.store import iter_samples

    recorded = errors = 0
    try:
        for sample in iter_samples(path, lambda message: None):
            recorded += 1
            errors += bool(sample.get("error"))
    except RunFileRefused:
        raise  # damage: the run is listed with it
    except InputError:
        return None
    return {"recorded": recorded, "errors": errors}


def _info(path: Path, url: str = "") -> RunInfo | None:
    """What `probe runs` shows of one run directory (None: not a readable run)."""
    from .engine.store import load_manifest, run_state

    try:
        manifest = load_manifest(path)
    except RunFileRefused as exc:
        return damaged(_unstarted_info(path, "damaged"), exc)
    except InputError:
        return _unstarted(path)
    counts = manifest.get("counts") or {}
    try:
        status = run_state(path, manifest)
        if manifest.get("status") == "running":
            # Running or killed: the manifest's counts are those of its start, the file's are current.
            counts = {**counts, **(_tally(path) or {})}
    except RunFileRefused as exc:
        status, problem = "damaged", str(exc)
    else:
        problem = ""
    pairs = tuple(
        (str(a.get("prompt")), str(a.get("model"))) for a in manifest.get("arms") or [] if isinstance(a, dict)
    )
    arms = [f"{prompt} x {model}" for prompt, model in pairs]
    return RunInfo(
        path=path,
        id=path.name,
        probeset=str(manifest["probeset"].get("name") or "?"),
        arms=arms,
        status=status,
        samples=int(counts.get("recorded") or 0),
        planned=counts.get("planned"),
        errors=int(counts.get("errors") or 0),
        created=str(manifest.get("created") or ""),
        pairs=pairs,
        sequential=bool(manifest.get("sequential")),
        url=url,
        problem=problem,
    )


def damaged(info: RunInfo, exc: RunFileRefused) -> RunInfo:
    """The run listed as damaged, with the sentence naming the file (`latest` may name it: a
    reader then refuses it in that sentence)."""
    return replace(info, status="damaged", problem=str(exc), incomplete=False)


def _unstarted(path: Path) -> RunInfo | None:
    """A directory a run was being created in when it was killed (or still is): listed, marked
    `incomplete` (or `starting`), so that it is seen and can be deleted."""
    from .engine.store import started_only, starting_state

    if not started_only(path):
        return None
    return _unstarted_info(path, starting_state(path))


def _unstarted_info(path: Path, status: str) -> RunInfo:
    """What the directory's name tells of a run whose manifest cannot be read."""
    stamp = path.name.split("-", 1)[0]
    created = ""
    if len(stamp) == 15:
        created = f"{stamp[:4]}-{stamp[4:6]}-{stamp[6:8]}T{stamp[9:11]}:{stamp[11:13]}:{stamp[13:15]}Z"
    name = path.name.split("-", 1)[1].rsplit("-", 1)[0] if path.name.count("-") >= 2 else "?"
    return RunInfo(path=path, id=path.name, probeset=name, arms=[], status=status,
                   samples=0, planned=None, errors=0, created=created, incomplete=True)


def list_runs(folder: str | Path | None = None, limit: int | None = None) -> list[RunInfo]:
    """The runs of a runs directory, newest first."""
    root = runs_dir(folder)
    if isinstance(root, Store):
        from .runstore import fetch_for_listing

        copies = fetch_for_listing(root)
        found = [info for copy in copies if (info := _info(copy, root.run_url(copy.name))) is not None]
        found.sort(key=lambda info: (info.created, info.id), reverse=True)
        return found[:limit] if limit else found
    if not is_dir(root):
        return []
    found = [info for child in root.iterdir() if child.is_dir() and (info := _info(child)) is not None]
    found.sort(key=lambda info: (info.created, info.id), reverse=True)
    return found[:limit] if limit else found


def resolve(reference: str | Path, folder: Any = None, writing: bool = False) -> Path:
    """The run directory a reference names (see the module's docstring). A run of a store is
    its copy in the read cache, or with `writing` its working copy, claimed for this process."""
    text = str(reference)
    if is_store(text):
        store_text, _, run = text.rstrip("/").rpartition("/")
        return _in_store(Store.parse(store_text), run, writing)
    path = Path(text)
    if is_dir(path):
        return path  # a directory given by path: its readers say whether it is a run
    root = runs_dir(folder)
    if isinstance(root, Store):
        return _in_store(root, text, writing)
    latest = LATEST.fullmatch(text)
    if latest:
        back = int(latest.group(1) or 0)
        runs = [info for info in list_runs(root) if not info.incomplete]
        if back >= len(runs):
            have = f"it has {len(runs)}" if runs else "it has none"
            raise InputError(f"{shown(text)}: there is no such run in {root} ({have})")
        return runs[back].path
    run, selector = split_selector(text)
    if selector:
        # `probe report RUN#prompt=v1`: the run is right, but this command takes no arm.
        found = resolve(run, folder)
        raise InputError(
            f"{shown(text)}: names one arm (#{selector}); this command takes a whole run: {found}"
        )
    if os.sep in text or text.startswith("."):
        raise InputError(f"{shown(path)}: no such run directory")
    candidates = (
        sorted(p for p in root.iterdir() if p.is_dir() and p.name.startswith(text)) if is_dir(root) else []
    )
    exact = [p for p in candidates if p.name == text]
    if exact:
        return exact[0]
    if len(candidates) == 1:
        return candidates[0]
    if not candidates:
        known = ", ".join(info.id for info in list_runs(root, 5))
        hint = f"; the newest: {known}" if known else f"; {root} holds no runs"
        raise InputError(f"{shown(text)}: no run directory or run id matches it in {shown(root)}{hint}")
    listing = ", ".join(p.name for p in candidates[:10]) + (" ..." if len(candidates) > 10 else "")
    raise InputError(f"{text}: matches {len(candidates)} runs in {root}: {listing}; give more of the id")


def store_run_id(store: "Store", text: str) -> str:
    """The id a reference names among the runs of a store (latest, latest~N, an id, a prefix)."""
    latest = LATEST.fullmatch(text)
    if latest:
        back = int(latest.group(1) or 0)
        runs = list_runs(store)
        if back >= len(runs):
            have = f"it has {len(runs)}" if runs else "it has none"
            raise InputError(f"{shown(text)}: there is no such run in {store} ({have})")
        return runs[back].id
    run, selector = split_selector(text)
    if selector:
        raise InputError(f"{shown(text)}: names one arm (#{selector}); this command takes a whole run")
    ids = run_ids(store)
    if text in ids:
        return text
    candidates = [run_id for run_id in ids if run_id.startswith(text)]
    if len(candidates) == 1:
        return candidates[0]
    if not candidates:
        hint = f"; the newest: {', '.join(ids[:5])}" if ids else f"; {store} holds no runs"
        raise InputError(f"{shown(text)}: no run id matches it in {store}{hint}")
    listing = ", ".join(candidates[:10]) + (" ..." if len(candidates) > 10 else "")
    raise InputError(f"{text}: matches {len(candidates)} runs in {store}: {listing}; give more of the id")


def _in_store(store: "Store", text: str, writing: bool) -> Path:
    from .runstore import claim, fetch

    run_id = store_run_id(store, text)
    return claim(store, run_id) if writing else fetch(store, run_id)


def split_selector(text: str) -> tuple[str, str]:
    """`RUN#arm` as (RUN, arm); arm is "" when there is none. A run directory's path may hold '#'
    itself (`~/C#/runs/...`): the run is the longest part before a '#' that is a directory."""
    if "#" not in text or is_dir(Path(text)):
        return text, ""
    cuts = [i for i, char in enumerate(text) if char == "#"]
    for cut in reversed(cuts):
        if is_dir(Path(text[:cut])):
            return text[:cut], text[cut + 1 :]
    return text[: cuts[0]], text[cuts[0] + 1 :]  # ids and `latest` hold no '#'


def resolve_selector(text: str, folder: str | Path | None = None) -> str:
    """`RUN#arm` with its RUN part resolved (the selector after `#` kept as given)."""
    run, selector = split_selector(text)
    return str(resolve(run, folder)) + ("#" + selector if selector else "")
