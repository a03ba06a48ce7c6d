"""The comparison: is B (the candidate) different from A (the baseline)? A room below the views.

`verdict` means one thing in every design: `B>A` / `A>B` say which arm's *rate* is reliably
higher, whatever the metric's direction; `worse` says B is reliably worse in the metric's
direction (B's rate lower where higher is better, higher where lower is better). The design
decides the test (promptprobe.stats.verdict): paired when both sides asked the same set of
questions (any order, any repeats), unpaired otherwise; a sequential run's own decision when it
stopped on its rule. The effect shown is B - A measured the way the test compares (within cases
when paired), so its sign is the verdict's direction; Newcombe's interval on the pooled counts
stays beside it, labelled. Several metrics at once get adjusted p-values (Westfall-Young min-P
over relabellings within cases when paired, Holm otherwise: promptprobe.stats.multiplicity),
and the verdicts (and so the gate) use the adjusted ones. Boschloo's exact p is shown where it
is affordable and never decides.

`settle` says what a result decided: `verdict`, `worse`, `better_arm`, `decided_by`, and the
interval beside the verdict (promptprobe.stats.agreement: one that covers its target, made to agree
with the verdict), at the level the verdict was decided at (under
several metrics alpha·p/p_adjusted, so that it excludes 0 exactly when p_adjusted decides);
`words.describe` then puts every word a reader sees into `words`. The views
(promptprobe.views.compare, html, the viewer) only lay out the objects built here.

Modules: `side` (an arm's counts on a metric, paired or not), `selectors` and `pairs` (which arms),
`metric` (one metric compared), `settle` (what it decided, the interval beside it), `family`
(several metrics adjusted together), `hints` (what an undecided verdict would need), `sequential`
(a run stopped on its rule), `drift` (retrieval drift), `rates` (one arm's rate and intervals),
`words` (every word a reader sees), `interim` (whether the verdicts are final yet: a fixed-size
run still running is not), `runs` (two runs' arms compared: the entry point). The names this
package gives load their module when first asked for (`settle` the function is not among them:
it is its module's name).
"""

import importlib
from typing import Any

# Loaded when first asked for: a report needs `rates` and `judge`, not the verdicts' numpy (0.1 s).
_HOME = {
    "adjust": "family",
    "compare_sides": "metric",
    "pair_arms": "pairs",
    "metric_object": "rates",
    "compare_runs": "runs",
    "compare_tables": "runs",
    "parse_selector": "selectors",
    "select_arm": "selectors",
    "better_arm": "settle",
    "effective_alpha": "settle",
    "finish": "settle",
    "is_worse": "settle",
    "Side": "side",
    "is_paired": "side",
}


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_HOME[name]}", __name__), name)


__all__ = [
    "Side",
    "adjust",
    "better_arm",
    "compare_runs",
    "compare_sides",
    "compare_tables",
    "effective_alpha",
    "finish",
    "is_paired",
    "is_worse",
    "metric_object",
    "pair_arms",
    "parse_selector",
    "select_arm",
]
