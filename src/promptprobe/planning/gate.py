"""An any-of-k gate's chance of blocking a case, k = 1..K (`probe plan --gate-any-of K --p X`)."""

from ..stats.planning import gate_block_probability
from .inputs import check_flags
from .view import PlanView


def plan_gate(p: float, k: int) -> PlanView:
    check_flags(p=p)
    blocks = {str(i): gate_block_probability(p, i) for i in range(1, k + 1)}
    return PlanView("gate", {"p": p, "block_probability": blocks})
