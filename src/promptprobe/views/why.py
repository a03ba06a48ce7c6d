"""`probe why`: the phrases over-represented in the samples that failed a metric, against the
samples of the same arm(s) that passed it.

Each output is cut into phrases: runs of 1 to 8 words (lower-cased, punctuation dropped) and,
in CJK text, runs of 2 to 10 characters. A phrase counts once per sample. For every phrase in
at least two failing samples, Fisher's exact test (one-sided: more common among the failing)
compares its share of failing and passing samples; p-values are adjusted for the number of
phrases tested (Benjamini-Hochberg). Phrases found in exactly the same samples (overlapping
pieces of one sentence) are shown once, the longest first.
"""

import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from ..comparison.selectors import parse_selector, select_arm
from ..counts import CountsTable, build_counts, merged_samples
from ..errors import InputError
from ..jsonio import dumps_pretty
from ..pack import RawReader
from ..tokens import STOPWORDS

# A word, with the inner dots, apostrophes, @ and hyphens of e-mail addresses and contractions.
WORD = re.compile(r"\w+(?:[.'’@+-]\w+)*")
CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]+")
MAX_WORDS = 8
MAX_CJK = 10
MIN_FAILING = 2


def phrases(text: str) -> set[str]:
    """Every phrase of a text (word n-grams; character n-grams inside CJK runs)."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    found: set[str] = set()
    for line in folded.splitlines():
        words = WORD.findall(CJK.sub(" ", line))
        for n in range(1, MAX_WORDS + 1):
            for i in range(len(words) - n + 1):
                found.add(" ".join(words[i : i + n]))
        for run in CJK.findall(line):
            for n in range(2, MAX_CJK + 1):
                for i in range(len(run) - n + 1):
                    found.add(run[i : i + n])
    return found


def explain(
    target: str, metric: str = "header_present", alpha: float = 0.05, counts: CountsTable | None = None
) -> dict[str, Any]:
    """The why object of docs/json.md for RUN or RUN#prompt=...,model=... (`counts`: the run's
    table when already read)."""
    run_dir, filters = parse_selector(target)
    counts = counts or build_counts(run_dir)
    arm = select_arm(target, counts) if filters else None
    result = explain_scored(
        scored_samples(counts, arm, metric), metric, _arm_name(arm, counts) if arm else "all arms", alpha
    )
    result["warnings"] = list(counts.warnings)  # a torn last line, as report and compare say it
    return result


def scored_samples(counts: CountsTable, arm: Any, metric: str) -> Iterator[tuple[dict[str, Any], bool, str]]:
    """(sample, passed, output text) of each sample with an output that `metric` applies to,
    of one arm (or every arm when `arm` is None)."""
    if metric not in counts.metrics:
        raise InputError(f"unknown metric {metric!r} (known: {', '.join(counts.metrics)})")
    run_dir = Path(counts.run)
    rule = counts.metrics[metric]
    cases = counts.cases
    reader = RawReader(run_dir)
    for sample in merged_samples(run_dir, counts.classification, lambda message: None):
        if arm is not None and (sample["prompt"], sample["model"]) != (arm.prompt, arm.model):
            continue
        case = cases.get(sample["case_id"])
        if case is None or sample.get("error") or sample.get("raw") is None:
            continue  # no output to read phrases from
        if not rule.applies(case, counts.settings):
            continue
        recorded = sample.get("outcomes") or {}
        event = recorded[metric] if metric in recorded else rule.outcome(sample, case, counts.settings)
        if event is None:
            continue  # a user's check that does not apply to this sample
        text = reader.read(sample).decode("utf-8", "replace")  # RawUnreadable: one sentence
        yield sample, event == rule.higher_is_better, text


def explain_scored(
    scored: Iterable[tuple[dict[str, Any], bool, str]], metric: str, arm_name: str, alpha: float = 0.05
) -> dict[str, Any]:
    """The why object from scored samples (`scored_samples`)."""
    failing: list[tuple[str, set[str]]] = []
    passing: list[tuple[str, set[str]]] = []
    for sample, good, text in scored:
        (passing if good else failing).append((sample["sample_id"], phrases(text)))
    result: dict[str, Any] = {
        "metric": metric,
        "arm": arm_name,
        "failing_samples": len(failing),
        "passing_samples": len(passing),
        "phrases": [],
    }
    if not failing or not passing:
        result["note"] = "every sample with an output failed or every one passed: nothing to compare"
        return result
    in_failing = Counter(p for _, found in failing for p in found)
    in_passing = Counter(p for _, found in passing for p in found)
    candidates = [
        p
        for p, k in in_failing.items()
        if k >= MIN_FAILING and k / len(failing) > in_passing[p] / len(passing) and _says_something(p)
    ]
    if not candidates:
        return result
    from scipy.stats import false_discovery_control, fisher_exact

    n_fail, n_pass = len(failing), len(passing)
    tested = []
    for phrase in candidates:
        k_fail, k_pass = in_failing[phrase], in_passing[phrase]
        p = fisher_exact([[k_fail, n_fail - k_fail], [k_pass, n_pass - k_pass]], alternative="greater").pvalue
        tested.append((phrase, k_fail, k_pass, float(p)))
    adjusted = false_discovery_control([t[3] for t in tested], method="bh")
    rows = [
        (phrase, k_fail, k_pass, p, float(q))
        for (phrase, k_fail, k_pass, p), q in zip(tested, adjusted, strict=True)
    ]
    rows = _fold(rows)
    rows.sort(key=lambda r: (r[4], r[3], -(r[1] / n_fail - r[2] / n_pass), -len(r[0]), r[0]))
    seen: set[tuple[frozenset[str], frozenset[str]]] = set()
    for phrase, k_fail, k_pass, p, q in rows:
        # Overlapping pieces of one sentence occur in exactly the same samples: show the longest.
        where = (
            frozenset(sid for sid, found in failing if phrase in found),
            frozenset(sid for sid, found in passing if phrase in found),
        )
        if where in seen:
            continue
        seen.add(where)
        examples = sorted(where[0])[:2]
        result["phrases"].append(
            {
                "phrase": phrase,
                "failing": [k_fail, n_fail],
                "passing": [k_pass, n_pass],
                "p": p,
                "p_adjusted": q,
                "significant": q <= alpha,
                "examples": examples,
            }
        )
    return result


def _says_something(phrase: str) -> bool:
    """Not a phrase of stopwords, numbers and single letters only ("a", "you", "1")."""
    if CJK.fullmatch(phrase):
        return True
    return any(len(w) > 1 and not w.isdigit() and w not in STOPWORDS for w in phrase.split())


def _fold(rows: list[tuple[str, int, int, float, float]]) -> list[tuple[str, int, int, float, float]]:
    """Drop a phrase when a longer one containing it has the same counts (it says the same, more)."""
    by_counts: dict[tuple[int, int], list[str]] = {}
    for phrase, k_fail, k_pass, _, _ in rows:
        by_counts.setdefault((k_fail, k_pass), []).append(phrase)
    kept = []
    for row in rows:
        phrase, k_fail, k_pass = row[0], row[1], row[2]
        longer = [
            other
            for other in by_counts[(k_fail, k_pass)]
            if other != phrase and len(other) > len(phrase) and phrase in other
        ]
        if not longer:
            kept.append(row)
    return kept


def _arm_name(arm: Any, counts: Any) -> str:
    """The arm by what tells it apart in its run: its prompt, its model, or both."""
    if len({a.model for a in counts.arms}) == 1:
        return f"prompt {arm.prompt}"
    if len({a.prompt for a in counts.arms}) == 1:
        return f"model {arm.model}"
    return arm.label


def render_why(result: dict[str, Any], fmt: str = "table", top: int = 10) -> str:
    if fmt == "json":
        return dumps_pretty(result)
    from .tables import table, wrap

    lines = [
        f"{result['metric']} on {result['arm']}: {result['failing_samples']} samples failed, "
        f"{result['passing_samples']} passed"
    ]
    lines += [f"warning: {w}" for w in result.get("warnings") or []]
    if result.get("note"):
        return "\n".join([*lines, result["note"]])
    rows = result["phrases"][:top]
    if not rows:
        return "\n".join([*lines, "no phrase is over-represented in the failing samples"])
    significant = sum(r["significant"] for r in result["phrases"])
    if significant:
        lines.append(
            f"{significant} {'phrase' if significant == 1 else 'phrases'} over-represented at adjusted "
            "p <= 0.05 (Fisher, Benjamini-Hochberg)"
        )
    else:
        lines.append(
            "no phrase is over-represented at adjusted p <= 0.05 yet (Fisher, Benjamini-Hochberg): "
            "the leading ones below are not yet significant, so more samples would tell"
        )
    lines.append("")
    lines.append(
        table(
            [
                [
                    r["phrase"],
                    f"{r['failing'][0]}/{r['failing'][1]}",
                    f"{r['passing'][0]}/{r['passing'][1]}",
                    f"{r['p_adjusted']:.3g}",
                    ", ".join(r["examples"]),
                ]
                for r in rows
            ],
            ["phrase", "in failing", "in passing", "p adjusted", "examples"],
            fmt,
            optional=("examples",),
        )
    )
    return wrap("\n".join(lines), fmt)
