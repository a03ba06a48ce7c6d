"""What `probe label` asks a person: the judged outputs of a check that have no hand label yet,
one per distinct output text, the arms taken in turn, each shown as `probe show` shows it with
the judge's replies kept back until the person has answered; and the labels file they go to."""

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .counts import classifications, merged_samples, settings_of
from .engine.store import load_manifest
from .errors import InputError
from .judged import JudgedArm, JudgedSample, judge_config, judged_samples
from .judgments import read_location
from .pack import read_raw


@dataclass(frozen=True)
class ToLabel:
    """One output a person is asked to label: what `probe label` shows, the judge's replies kept
    back until the person has answered."""

    arm: JudgedArm
    sample: JudgedSample
    question: str
    visible: str  # the raw output with invisible characters spelled out, as `probe show` shows it
    replies: tuple[str | None, ...]  # the judge's raw replies (None: the judgment failed)

    def row(self, label: str) -> dict[str, str]:
        """The labels file's row for this output."""
        return {
            "sample_id": self.sample.sample_id,
            "sha256": self.sample.sha256 or "",
            "case_id": self.sample.case_id,
            "prompt": self.arm.prompt,
            "model": self.arm.model,
            "label": label,
        }


def labels_path(run: str | Path, check: str, given: str | Path | None = None) -> Path:
    """The labels file of a judged check: the one given, else the check's `labels_file`."""
    if given is not None:
        return Path(given)
    run_dir = Path(run)
    numbers = classifications(run_dir)
    settings = settings_of(run_dir, load_manifest(run_dir), numbers[-1] if numbers else None)
    config = judge_config(settings, check, run_dir)
    if not config.labels_file:
        raise InputError(
            f'[[check]] {check} names no labels_file: give --labels FILE (and labels_file = "FILE" '
            "in probe.toml, so that report reads it)"
        )
    return Path(config.labels_file)


def to_label(run: str | Path, check: str, labels_file: str | Path | None = None) -> list[ToLabel]:
    """The judged outputs of `check` that have no hand label yet, taking the arms in turn (so
    that each arm gets labels early); one per distinct output text (a label by sha256 covers
    every sample with that text)."""
    from .views.show import decoded, visible

    run_dir = Path(run)
    path = labels_path(run_dir, check, labels_file)
    arms = judged_samples(run_dir, check, labels_file=path)
    manifest = load_manifest(run_dir)
    from .probeset import parse_probeset

    cases = {
        c.id: c
        for c in parse_probeset(
            manifest["probeset"]["source"].encode("utf-8"), Path(manifest["probeset"]["path"])
        ).cases
    }
    queues = [[(arm, s) for s in arm.samples if s.hand_label is None] for arm in arms]
    found: list[ToLabel] = []
    seen: set[str | None] = set()
    samples = {s["sample_id"]: s for s in merged_samples(run_dir, None, lambda message: None)}
    while any(queues):
        for queue in queues:
            if not queue:
                continue
            arm, sample = queue.pop(0)
            if sample.sha256 in seen:
                continue
            seen.add(sample.sha256)
            raw = read_raw(run_dir, samples[sample.sample_id])
            replies = tuple(_reply(run_dir, line) for line in sample.replies)
            found.append(ToLabel(arm, sample, cases[sample.case_id].question, visible(decoded(raw)), replies))
    return found


def _reply(run_dir: Path, line: dict[str, Any] | None) -> str | None:
    if not line or not line.get("reply"):
        return None
    return read_location(run_dir, line["reply"]).decode("utf-8", "replace")
