"""Planning: what a probe needs before the prompt changes, as `probe plan` and the API give it. A
room below the views.

The statistics are promptprobe.stats.planning's and stats.sequential's (the planner the repeats
hint beside an undecided verdict asks too); this room checks the flags, picks the plan they ask
for, runs it and returns its view object, `PlanView`: the JSON key for key, and the figures the
text prints beside it. promptprobe.views.plan only lays that object out, as text or JSON.

Modules: `inputs` (the flags checked), `samples` (samples per arm; repeats or cases of a probe
set), `detectable` (the smallest change n detects), `gate` (an any-of-k gate), `sequential` (what
`--until-decided` costs), `choose` (which of them the flags ask for), `view` (the view object).
"""

from .choose import choose_plan
from .detectable import plan_mdd
from .gate import plan_gate
from .inputs import check_flags
from .samples import plan_sample_size
from .sequential import plan_sequential
from .view import PlanView

__all__ = [
    "PlanView",
    "check_flags",
    "choose_plan",
    "plan_gate",
    "plan_mdd",
    "plan_sample_size",
    "plan_sequential",
]
