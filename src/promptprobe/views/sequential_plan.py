"""`probe plan --sequential`: what `--until-decided` costs (promptprobe.planning.sequential
simulates it), laid out as text."""

from ..planning import PlanView
from .tables import counted, wrap


def render_sequential_plan(view: PlanView) -> str:
    result, shown = view.data, view.shown
    r, samples = result["rounds"], result["samples_per_arm"]
    cases, cap = result["cases"], result["max_rounds"]
    rates = f"{100 * result['p1']:.0f}% vs {100 * result['p2']:.0f}%"
    lines = [
        f"--until-decided at {rates} with {counted(cases, 'case')} (ICC {result['icc']:g}, "
        f"alpha {result['alpha']:g}), "
        f"simulated {result['trials']} times with the run's own rule:",
        f"- samples per arm to the stop: mean {samples['mean']:.0f} (±{samples['mean_error']:.0f}), median "
        f"{samples['median']:.0f}, 90th percentile {samples['p90']:.0f} (rounds: mean {r['mean']:.1f}; "
        f"a round asks {'the case' if cases == 1 else f'each of the {cases} cases'} once per arm)",
    ]
    cap_words = f"the cap of {cap} rounds (--detect {100 * result['detect']:g})"
    if result["power"] is None:
        lines.append(
            f"- equal rates: a false alarm (a decision either way) within {cap_words} in "
            f"{100 * result['decided_share']:.1f}% (±{100 * result['decided_share_error']:.1f}) of runs (the "
            f"rule keeps it at most alpha, {result['alpha']:g}; the ± is the simulation's error)"
        )
    else:
        wrong = 100 * result["wrong_direction_share"]
        lines.append(
            f"- power (decided the right way within {cap_words}): {100 * result['power']:.1f}% "
            f"(±{100 * result['power_error']:.1f}); the wrong way: {wrong:.1f}%"
        )
    if not result["cap_reached"]:
        lines.append(
            f"- --detect {100 * result['detect']:g} would need more than {cap} rounds for 80% power; "
            "the simulation stopped there"
        )
    same = result["fixed_same_power"]
    if "same_power_samples" in shown:
        lines.append(
            f"- a fixed paired plan with the same power ({100 * same['power']:.0f}%): "
            f"{counted(same['rounds'], 'repeat')} ({counted(shown['same_power_samples'], 'sample')} per arm; "
            f"the sequential mean is {shown['same_power_ratio']:.2f}x that)"
        )
    if result["fixed_rounds"]:
        lines.append(
            f"- a fixed paired plan with {100 * result['fixed_power']:g}% power: "
            f"{counted(result['fixed_rounds'], 'repeat')} "
            f"({counted(shown['fixed_samples'], 'sample')} per arm)"
        )
    return wrap("\n".join(lines))
