"""A run's judged outputs as data: per arm and per judged check, every output that was judged
with its judgments and its hand label. The grader's reliability figures (agreement between
repeated judgments, sensitivity and specificity against hand labels, the corrected rate) are
computed from these lists (promptprobe.comparison.judge), and `probe label` walks them
(promptprobe.labelling).

`judged_samples(run)` reads the classification report and compare count (the latest unless
`classification` is given) and the hand labels of each check's `labels_file` (or `labels_file`
given here, for one check)."""

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .checks.judge import decide
from .checks.settings import JudgeConfig
from .counts import classifications, merged_samples, settings_of
from .engine.store import load_manifest
from .errors import InputError
from .judgments import judgments_source, latest_judgments
from .labels import HandLabels, read_labels
from .tomlfile import did_you_mean


@dataclass(frozen=True)
class JudgedSample:
    """One output and what its judge and a person said of it."""

    sample_id: str
    sha256: str | None  # of the output's raw bytes
    case_id: str
    judgments: tuple[str | None, ...]  # "pass", "fail", or None (failed, unreadable, not made), index order
    replies: tuple[
        dict[str, Any] | None, ...
    ]  # each judgment's line (its reply's path and sha256, its error)
    hand_label: str | None  # "pass", "fail", or None (not labelled)

    @property
    def outcome(self) -> bool:
        """The sample's outcome on the judged metric (checks/judge.py's rule)."""
        return decide(self.judgments, len(self.judgments))

    @property
    def votes(self) -> tuple[bool | None, ...]:
        """The judgments as promptprobe.stats.judge takes them: True pass, False fail, None failed."""
        return tuple(None if j is None else j == "pass" for j in self.judgments)

    @property
    def labelled(self) -> bool | None:
        """The hand label as promptprobe.stats.judge takes it (None: not labelled)."""
        return None if self.hand_label is None else self.hand_label == "pass"

    @property
    def split(self) -> bool:
        """Whether its judgments disagree (a pass and a fail among them)."""
        return {"pass", "fail"} <= set(self.judgments)

    def to_dict(self) -> dict[str, Any]:
        return {
            "sample_id": self.sample_id,
            "sha256": self.sha256,
            "case_id": self.case_id,
            "judgments": list(self.judgments),
            "hand_label": self.hand_label,
            "outcome": self.outcome,
            "split": self.split,
        }


@dataclass
class JudgedArm:
    """One arm's judged outputs on one judged check."""

    prompt: str
    model: str
    check: str
    judge_model: str
    repeats: int
    samples: list[JudgedSample] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "prompt": self.prompt,
            "model": self.model,
            "check": self.check,
            "judge_model": self.judge_model,
            "repeats": self.repeats,
            "samples": [s.to_dict() for s in self.samples],
        }


def judge_config(settings: Any, check: str, where: Path) -> JudgeConfig:
    """The judged check `check` of these settings; InputError naming the ones there are."""
    config = settings.judge(check)
    if config is None:
        names = [j.name for j in settings.judges]
        known = ", ".join(names) if names else 'none: its probe.toml has no [[check]] kind = "judge"'
        raise InputError(
            f"{where}: no judged check {check!r} (judged checks: {known}){did_you_mean(check, set(names))}"
        )
    return config


def judged_samples(
    run: str | Path,
    check: str | None = None,
    classification: int | None = None,
    labels_file: str | Path | None = None,
) -> list[JudgedArm]:
    """Per arm (manifest order) and per judged check (or only `check`): the outputs judged, each
    with its K judgments in index order and its hand label. Failed samples (no output) are not
    listed: they have nothing to judge (the metric counts them as fails)."""
    run_dir = Path(run)
    manifest = load_manifest(run_dir)
    numbers = classifications(run_dir)
    if classification is not None and classification not in numbers:
        raise InputError(f"{run_dir}: no classification {classification}")
    number = classification if classification is not None else (numbers[-1] if numbers else None)
    settings = settings_of(run_dir, manifest, number)
    configs = [judge_config(settings, check, run_dir)] if check else list(settings.judges)
    lines = latest_judgments(run_dir, judgments_source(run_dir, number))
    labels: dict[str, HandLabels] = {
        c.name: read_labels(
            labels_file if (labels_file and check) else c.labels_file, c.pass_label, c.fail_label
        )
        for c in configs
    }
    judge_models = {
        j["check"]: j["model"].get("name") or j["model"]["spec"] for j in manifest.get("judges") or []
    }
    arms = {
        (a["prompt"], a["model"], c.name): JudgedArm(
            a["prompt"], a["model"], c.name, judge_models.get(c.name, c.model), c.repeats
        )
        for c in configs
        for a in manifest["arms"]
    }
    for sample in merged_samples(run_dir, number, lambda message: None):
        if sample.get("error") or sample.get("raw") is None:
            continue
        sid, sha256 = sample["sample_id"], (sample.get("raw") or {}).get("sha256")
        for config in configs:
            arm = arms.get((sample["prompt"], sample["model"], config.name))
            if arm is None:
                continue
            found = [lines.get((sid, config.name, i)) for i in range(1, config.repeats + 1)]
            arm.samples.append(
                JudgedSample(
                    sid,
                    sha256,
                    sample["case_id"],
                    tuple(line.get("label") if line else None for line in found),
                    tuple(found),
                    labels[config.name].of(sid, sha256),
                )
            )
    return list(arms.values())
