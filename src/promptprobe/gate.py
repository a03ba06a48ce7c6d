"""The CI gate: each prompt as it is at a baseline git ref against the working tree, in one run.

`gate()` takes each prompt's bytes at BASELINE_REF (`git show REF:./PATH`) and from the working
tree, probes both versions on every model of the config in one paired run, and compares each
model's baseline arm with its candidate arm, every pair and metric one adjusted family (the
comparison's own multiplicity machinery), so the job's false-alarm rate stays at alpha however many
prompts, models and metrics it checks. A prompt absent at the ref is new: reported, not gated. A
prompt whose bytes did not change is reported and not probed (both arms would be the same prompt).
Samples that failed after retries count against their arm on every metric, the verdicts are decided
on what was recorded, and the summary says how many; `strict` makes them fail the gate (exit 1).
"""

import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import InputError, StartError
from .prompts import PromptVersion, load_prompt, prompt_from_bytes

NEW, UNCHANGED, GATED = "new", "unchanged", "gated"


@dataclass(frozen=True)
class GatedPrompt:
    """One prompt of the gate: what happened to it and the arm names of its two versions."""

    path: str
    status: str  # GATED, NEW (absent at the ref) or UNCHANGED (same bytes: nothing to compare)
    name: str = ""  # the stem the arms are named by: NAME.baseline, NAME.candidate
    baseline: PromptVersion | None = None
    candidate: PromptVersion | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "status": self.status,
            "baseline": None
            if self.baseline is None
            else {"name": self.baseline.name, "sha256": self.baseline.sha256},
            "candidate": None
            if self.candidate is None
            else {"name": self.candidate.name, "sha256": self.candidate.sha256},
        }


@dataclass(frozen=True)
class GateResult:
    """What `probe gate` decided, and every word its table, markdown and comment show."""

    baseline_ref: str
    probeset: str
    prompts: list[GatedPrompt]
    alpha: float
    strict: bool
    run: Path | None = None
    samples: dict[str, int] = field(default_factory=lambda: {"planned": 0, "recorded": 0, "errors": 0})
    comparison: dict[str, Any] | None = None
    models: list[str] = field(default_factory=list)

    @property
    def results(self) -> list[dict[str, Any]]:
        return self.comparison["results"] if self.comparison else []

    @property
    def worse(self) -> bool:
        return any(r["worse"] for r in self.results)

    @property
    def exit_code(self) -> int:
        """4 when a candidate is reliably worse; 1 under `strict` when samples failed; else 0."""
        if self.worse:
            return 4
        return 1 if self.strict and self.samples["errors"] else 0

    def failures(self) -> list[str]:
        return [r["words"]["failure"] for r in self.results if r["worse"]]

    def summary(self) -> str:
        """The gate's outcome in one or two sentences."""
        gated = [p for p in self.prompts if p.status == GATED]
        if not gated:
            return f"nothing to gate: no prompt changed since {self.baseline_ref}"
        n = len(self.results)
        family = f"{n} comparison{'' if n == 1 else 's'}, one family at {self.alpha:g}"
        if self.worse:
            worst = sorted({r["pair"] for r in self.results if r["worse"]})
            where = ", ".join(worst)
            text = f"worse: a candidate is reliably worse than {self.baseline_ref} ({where}; {family})"
        else:
            text = f"not worse: no candidate is reliably worse than {self.baseline_ref} ({family})"
        errors = self.samples["errors"]
        if errors:
            policy = "--strict fails on them" if self.strict else "decided on what was recorded"
            text += (
                f". {errors} of {self.samples['recorded']} samples failed after retries: each counts "
                f"against its arm, {policy}"
            )
        return text

    @property
    def verdict(self) -> str:
        """The gate's outcome in two words: worse, not worse, or nothing to gate."""
        if self.worse:
            return "worse"
        return "not worse" if self.results else "nothing to gate"

    def notes(self) -> list[str]:
        """What became of the prompts that were not gated."""
        said = {
            NEW: f"new in this change (absent at {self.baseline_ref}), not gated",
            UNCHANGED: f"unchanged since {self.baseline_ref}, not probed",
        }
        return [f"{p.path}: {said[p.status]}" for p in self.prompts if p.status in said]

    def rows(self) -> list[dict[str, str]]:
        """One row a pair and metric, in words: worse first, then better, then can't tell yet."""
        order = {"worse": 0, "better": 1, "same": 2}
        rows = []
        for r in self.results:
            prompt, _, model = r["pair"].rpartition(" on ")
            words = r["words"]
            rows.append(
                {
                    "prompt": prompt,
                    "model": model,
                    "metric": _metric(r),
                    "baseline": _rate(r["a"]),
                    "candidate": _rate(r["b"]),
                    "change": f"{_points(r)}, {words['interval']}",
                    "verdict": {"worse": "worse", "better": "better"}.get(words["kind"], words["verdict"]),
                    "kind": words["kind"],
                }
            )
        return sorted(rows, key=lambda row: order[row["kind"]])

    def to_dict(self) -> dict[str, Any]:
        return {
            "baseline_ref": self.baseline_ref,
            "probeset": self.probeset,
            "run": None if self.run is None else str(self.run),
            "models": self.models,
            "prompts": [p.to_dict() for p in self.prompts],
            "samples": self.samples,
            "alpha": self.alpha,
            "strict": self.strict,
            "worse": self.worse,
            "verdict": self.verdict,
            "exit_code": self.exit_code,
            "summary": self.summary(),
            "notes": self.notes(),
            "rows": self.rows(),
            "comparison": self.comparison,
        }


def _metric(result: dict[str, Any]) -> str:
    return result["metric"] + ("" if result["higher_is_better"] else " (lower is better)")


def _rate(side: dict[str, Any]) -> str:
    return f"{side['k']}/{side['n']} ({100 * side['rate']:.0f}%)"


def _points(result: dict[str, Any]) -> str:
    from .comparison.words import in_points

    return in_points(result["effect"]["estimate"])


# -- the baseline's bytes -------------------------------------------------------------------------


def _git(args: list[str], cwd: Path) -> subprocess.CompletedProcess[bytes]:
    try:
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True, check=False)
    except OSError as exc:
        raise StartError(f"git could not be run ({exc}); the gate takes the baseline with git show") from None


def check_ref(ref: str, cwd: Path) -> None:
    """A ref this checkout has, or an InputError that says what to fetch."""
    if not ref or ref.startswith("-"):
        raise InputError(f"baseline ref {ref!r}: give a git ref such as origin/main")
    found = _git(["rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"], cwd)
    if found.returncode != 0:
        inside = _git(["rev-parse", "--is-inside-work-tree"], cwd)
        if inside.returncode != 0:
            raise InputError(f"{cwd}: not a git checkout, so there is no baseline {ref} to take prompts from")
        raise InputError(
            f"baseline ref {ref!r} is not a commit of this checkout: fetch it (actions/checkout with "
            "fetch-depth: 0, or git fetch origin BRANCH)"
        )


def baseline_bytes(ref: str, path: str, cwd: Path) -> bytes | None:
    """The file's bytes at `ref` (None: it does not exist there), exactly as committed."""
    relative = f"{ref}:./{path}" if not Path(path).is_absolute() else None
    if relative is None:
        top = _git(["rev-parse", "--show-toplevel"], cwd).stdout.decode().strip()
        try:
            relative = f"{ref}:{Path(path).resolve().relative_to(Path(top).resolve())}"
        except ValueError:
            raise InputError(f"{path}: outside this git checkout, so it has no baseline at {ref}") from None
    if _git(["cat-file", "-e", relative], cwd).returncode != 0:
        return None
    shown = _git(["cat-file", "blob", relative], cwd)
    if shown.returncode != 0:
        raise InputError(f"{path} at {ref}: {shown.stderr.decode(errors='replace').strip()}")
    return shown.stdout


def gated_prompts(ref: str, paths: Sequence[str], cwd: Path) -> list[GatedPrompt]:
    """Each prompt's two versions, named NAME.baseline and NAME.candidate (NAME its file stem)."""
    if not paths:
        raise InputError("give the prompt files to gate: probe gate BASELINE_REF PROMPT...")
    check_ref(ref, cwd)
    stems: dict[str, str] = {}
    found = []
    for path in dict.fromkeys(str(p) for p in paths):
        where = cwd / path
        if not where.is_file():
            raise InputError(f"{path}: no such prompt file in the working tree")
        stem = Path(path).stem
        if stem in stems:
            raise InputError(
                f"{stems[stem]} and {path} are both called {stem}: the gate names arms by the file's "
                "stem, so give prompts of different names"
            )
        stems[stem] = path
        before = baseline_bytes(ref, path, cwd)
        if before is None:
            found.append(GatedPrompt(path, NEW, stem))
            continue
        candidate = load_prompt(f"{stem}.candidate={where}")
        if before == candidate.source:
            found.append(GatedPrompt(path, UNCHANGED, stem))
            continue
        baseline = prompt_from_bytes(f"{stem}.baseline", Path(f"{ref}:{path}"), before)
        found.append(GatedPrompt(path, GATED, stem, baseline, candidate))
    return found


# -- the run and the comparison --------------------------------------------------------------------


def gate(
    baseline_ref: str,
    prompts: Sequence[str],
    probeset: str | Path,
    *,
    config: str | Path | None = None,
    models: Sequence[str] = (),
    metrics: Sequence[str] = (),
    alpha: float = 0.05,
    strict: bool = False,
    runs_dir: Any = None,  # a folder or a runs store s3://BUCKET/PREFIX; default as `probe run`
    run_options: dict[str, Any] | None = None,
    cwd: Path | None = None,
    watch: Callable[[Any], None] | None = None,
    retrieval: str | None = None,
) -> GateResult:
    """`probe gate`: every changed prompt's baseline and candidate on every model, one run, one
    family of comparisons (`metrics`: these, else every metric with samples on both sides).
    `watch` is given the run before it starts (the CLI hangs its progress line on it)."""
    from .config import Precedence, load_config, models_setting, with_retrieval
    from .counts import build_counts
    from .engine.run import ProbeRun, options_from
    from .probeset import load_probeset
    from .runstore import location

    if not 0 < alpha <= 0.5:
        raise InputError(f"--alpha must lie in (0, 0.5], got {alpha!r}")
    cwd = cwd or Path.cwd()
    found = gated_prompts(baseline_ref, prompts, cwd)
    # Without a retrieval path the gate must be told so, as `probe run` must (never silently).
    target = with_retrieval(load_config(Path(config) if config is not None else None), retrieval)
    loaded = load_probeset(Path(probeset))
    specs = target.models_for(list(models))
    base = GateResult(
        baseline_ref, str(probeset), found, alpha, strict, models=[m.name or m.spec for m in specs]
    )
    versions = [v for p in found if p.status == GATED for v in (p.baseline, p.candidate) if v is not None]
    if not versions:
        return base
    precedence = Precedence.of(target, loaded)
    where = location(runs_dir, target.run.runs_dir, target.base_dir)  # a folder, or a runs store
    options = options_from(target.run, where, precedence=precedence, **(run_options or {}))
    options.settings["models"] = models_setting(list(models), specs, precedence)
    if options.max_cost is not None:
        from .engine.dryrun import check_max_cost

        check_max_cost(loaded, versions, specs, target, options)
    runner = ProbeRun(loaded, versions, specs, target, options)
    if watch is not None:
        watch(runner)
    outcome = runner.execute()
    counts = build_counts(outcome.path)
    comparison = compare_pairs(outcome.path, counts, found, metrics, alpha)
    samples = {"planned": outcome.planned, "recorded": outcome.recorded, "errors": outcome.errors}
    return GateResult(
        baseline_ref, str(probeset), found, alpha, strict, outcome.path, samples, comparison, base.models
    )


def compare_pairs(
    run: Path, counts: Any, prompts: Sequence[GatedPrompt], metrics: Sequence[str], alpha: float
) -> dict[str, Any]:
    """Each gated prompt's baseline arm against its candidate arm on each model: one family."""
    from .comparison.pairs import Pair
    from .comparison.runs import compare_tables

    models = list(dict.fromkeys(arm.model for arm in counts.arms))  # arm names: NAME=SPEC's NAME
    by_name = {(arm.prompt, arm.model): arm for arm in counts.arms}
    pairs = []
    for prompt in prompts:
        if prompt.status != GATED or prompt.baseline is None or prompt.candidate is None:
            continue
        for model in models:
            a, b = by_name.get((prompt.baseline.name, model)), by_name.get((prompt.candidate.name, model))
            if a is None or b is None:
                raise StartError(f"{run}: the run has no {prompt.path} arm on {model}; it did not finish")
            pairs.append(Pair(a, b, f"{prompt.path} on {model}"))
    return compare_tables(
        str(run),
        str(run),
        counts,
        counts,
        list(metrics) or None,
        all_metrics=not metrics,
        alpha=alpha,
        hints=False,  # the repeats hint is a simulation per undecided row; the gate shows none
        pairs=pairs,
    )


def probeset_of(given: Path | None, cwd: Path | None = None) -> Path:
    """The probe set given, else the only one in probes/ (an InputError names the choice)."""
    if given is not None:
        return given
    found = sorted((cwd or Path.cwd()).glob("probes/*.toml"))
    if len(found) == 1:
        return found[0].relative_to(cwd or Path.cwd())
    listing = ", ".join(str(p.name) for p in found) or "none"
    raise InputError(f"give the probe set with --probeset (probes/*.toml holds {listing})")


# -- on a GitHub runner ------------------------------------------------------------------------------


def comment_result(result: GateResult, artifact: str, env: dict[str, str] | None = None) -> list[str]:
    """The gate's table in the job summary and in its pull-request comment; what was done, in words."""
    from .github import Runner, artifact_link, marker, post_comment, write_summary
    from .views.gate import render_markdown

    runner = Runner.from_environment(env)
    body = render_markdown(result.to_dict(), link=artifact_link(runner, artifact))
    write_summary(runner, body)
    return [post_comment(runner, marker(result.probeset), body).sentence()]


def comment_failure(
    message: str, probeset: Path | None, artifact: str, env: dict[str, str] | None = None
) -> list[str]:
    """The comment when the gate could not run: the reason (and on a fork, why it has no key)."""
    from .github import FORK_NOTE, Runner, artifact_link, marker, post_comment, write_summary

    runner = Runner.from_environment(env)
    if probeset is None:  # the one in probes/, as the gate would have chosen: the same comment
        try:
            probeset = probeset_of(None)
        except InputError:
            probeset = None
    lines = ["### promptprobe gate: could not run", "", message]
    if runner.fork:
        lines += ["", FORK_NOTE]
    link = artifact_link(runner, artifact)
    body = "\n".join(lines + (["", link] if link else [])) + "\n"
    write_summary(runner, body)
    return [post_comment(runner, marker(str(probeset or "probes")), body).sentence()]
