"""Retrieval drift: the cases whose most frequent retrieved passages differ between two runs."""

from collections import Counter
from typing import Any

from ..counts import CountsTable


def drift(a: CountsTable, b: CountsTable) -> list[dict[str, Any]]:
    """Cases whose most frequent retrieval snapshot differs between two runs."""
    changes = []
    for case_id in a.case_order:
        snap_a, snap_b = a.snapshots.get(case_id), b.snapshots.get(case_id)
        if not snap_a or not snap_b:
            continue
        ids_a = list(Counter(snap_a).most_common(1)[0][0])
        ids_b = list(Counter(snap_b).most_common(1)[0][0])
        if ids_a == ids_b:
            continue
        moved = [
            {"id": i, "from": ids_a.index(i) + 1, "to": ids_b.index(i) + 1}
            for i in ids_a
            if i in ids_b and ids_a.index(i) != ids_b.index(i)
        ]
        changes.append(
            {
                "case_id": case_id,
                "added": [i for i in ids_b if i not in ids_a],
                "dropped": [i for i in ids_a if i not in ids_b],
                "moved": moved,
            }
        )
    return changes
