"""The judgments beside a page of outputs (the viewer's case page): for each group of identical
outputs and each judged check, how many judgments said pass, fail or failed, whether they split
(a pass and a fail for the same output), and the judge's distinct replies with their counts.
Read-only: it reads the judgments file the counted classification names."""

from collections import Counter
from pathlib import Path
from typing import Any

from ..judgments import judgments_source, latest_judgments, read_location
from ..pack import RawUnreadable

REPLIES_SHOWN = 5  # distinct replies shown per output and check
REPLY_CHARS = 2000  # of each reply


def judged_groups(
    run_dir: Path, settings: Any, classification: int | None, groups: list[dict[str, Any]]
) -> None:
    """Add `judged` to each group of a page (in place): per judged check its counts, split mark
    and replies. Groups list at most their first sample ids: the counts are over those."""
    if not settings.judges or not groups:
        return
    lines = latest_judgments(run_dir, judgments_source(run_dir, classification))
    for group in groups:
        group["judged"] = [
            _check(run_dir, config, lines, group.get("sample_ids") or []) for config in settings.judges
        ]


def _check(
    run_dir: Path, config: Any, lines: dict[tuple[str, str, int], dict[str, Any]], ids: list[str]
) -> dict[str, Any]:
    counts: Counter = Counter()
    replies: Counter = Counter()
    refs: dict[str, dict[str, Any]] = {}
    split = 0
    for sid in ids:
        labels = set()
        for index in range(1, config.repeats + 1):
            line = lines.get((sid, config.name, index))
            label = (line or {}).get("label")
            counts[label if label in ("pass", "fail") else "failed"] += 1
            labels.add(label)
            if line and line.get("reply"):
                key = line["reply"]["sha256"]
                replies[key] += 1
                refs[key] = line["reply"]
        split += {"pass", "fail"} <= labels
    shown = []
    for key, count in replies.most_common(REPLIES_SHOWN):
        try:
            text = read_location(run_dir, refs[key]).decode("utf-8", "replace")
        except RawUnreadable as exc:
            text = f"(the reply cannot be read: {exc})"
        shown.append({"text": text[:REPLY_CHARS], "count": count, "cut": len(text) > REPLY_CHARS})
    return {
        "check": config.name,
        "judge": config.model,
        "pass": counts["pass"],
        "fail": counts["fail"],
        "failed": counts["failed"],
        "split_samples": split,
        "split": split > 0 or (counts["pass"] > 0 and counts["fail"] > 0),
        "replies": shown,
        "more_replies": max(0, len(replies) - REPLIES_SHOWN),
    }
