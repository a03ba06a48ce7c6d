"""Expected sources: where each of a case's `must_retrieve` ids ranked in the passages a sample
got. `retrieval_hit` needs every expected id, within the first K passages with `--top-k K`."""

from typing import Any

from ..probeset import Case
from .base import Check, Metric, SampleView, details


def ranks(expected: tuple[str, ...], passage_ids: list[str]) -> dict[str, int | None]:
    """1-based rank of each expected id (None when it was not retrieved)."""
    position = {}
    for rank, passage_id in enumerate(passage_ids, 1):
        position.setdefault(passage_id, rank)
    return {expected_id: position.get(expected_id) for expected_id in expected}


def hit(sample: dict[str, Any], case: Case, top_k: int | None) -> bool:
    found = details(sample, "retrieval").get("ranks")
    if found is None:  # recorded before ranks existed: read the passage ids
        found = ranks(case.must_retrieve, (sample.get("retrieval") or {}).get("passage_ids") or [])
    return all(
        r is not None and (top_k is None or r <= top_k) for r in (found.get(e) for e in case.must_retrieve)
    )


class RetrievalCheck(Check):
    key = "retrieval"
    metrics = (
        Metric(
            "retrieval_hit",
            True,
            "every must_retrieve id was retrieved (within the first K with --top-k)",
            lambda case, settings: bool(case.must_retrieve),
            lambda sample, case, settings: hit(sample, case, settings.top_k),
            recompute_on=("top_k",),
        ),
    )

    def evaluate(self, view: SampleView) -> dict[str, Any] | None:
        if not view.case.must_retrieve:
            return None
        return {"ranks": ranks(view.case.must_retrieve, [str(p["id"]) for p in view.passages])}
