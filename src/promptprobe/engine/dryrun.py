"""`probe run --dry-run`: the plan, and its estimated tokens and cost, without a single call.

Memory does not depend on the number of repeats: each case is priced once per arm.
"""

from collections.abc import Sequence
from typing import Any

from ..config import TargetConfig
from ..models import ModelSpec
from ..probeset import ProbeSet
from ..prompts import PromptVersion, render_prompt
from .cost import Tokens, estimate_tokens, load_prices
from .plan import make_arms
from .run import LARGE_PLAN, RunOptions


def dry_run(
    probeset: ProbeSet,
    prompts: Sequence[PromptVersion],
    models: Sequence[ModelSpec],
    config: TargetConfig,
    options: RunOptions,
) -> dict[str, Any]:
    arms = make_arms(prompts, models)
    repeats = options.repeats or config.run.repeats or probeset.repeats
    prices = load_prices(config.prices)
    max_tokens = options.params.max_tokens
    rows = []
    total_cost: float | None = 0.0
    for arm in arms:
        system = estimate_tokens(render_prompt(arm.prompt, []))
        per_case = [
            system + estimate_tokens(case.question) + sum(estimate_tokens(t["content"]) for t in case.history)
            for case in probeset.cases
        ]
        input_tokens = sum(per_case) * repeats
        output_tokens = max_tokens * len(probeset.cases) * repeats
        price = prices.lookup(arm.model)
        cost = price.cost_of(Tokens(input_tokens, 0, 0, output_tokens), options.batch) if price else None
        if cost is None:
            total_cost = None
        elif total_cost is not None:
            total_cost += cost
        rows.append(
            {
                "prompt": arm.prompt.name,
                "model": arm.model.label,
                "calls": len(probeset.cases) * repeats,
                "input_tokens": input_tokens,
                "output_tokens_max": output_tokens,
                "cost_usd": cost,
                "price": None
                if price is None
                else {
                    "input": price.input,
                    "output": price.output,
                    "source": price.source,
                    **({"batch": price.batch} if options.batch else {}),
                },
            }
        )
    calls = sum(r["calls"] for r in rows)
    return {
        "probeset": probeset.name,
        "cases": len(probeset.cases),
        "repeats": repeats,
        "arms": rows,
        "calls": calls,
        "retrievals": len(probeset.cases) * repeats,
        "cost_usd": total_cost,
        "needs_yes": calls > LARGE_PLAN,
        "notes": [
            "input tokens are estimated at 4 characters a token on the prompt, history and question; "
            "retrieved passages are not fetched in a dry run and come on top",
            f"output tokens assume every reply uses max_tokens ({max_tokens}): an upper bound",
            *(
                ["priced at the batch rate (--batch): each price times its batch share"]
                if options.batch
                else []
            ),
        ],
    }


def render_dry_run(result: dict[str, Any]) -> str:
    from ..views.tables import table

    def money(value: float | None) -> str:
        return "cost unknown" if value is None else f"${value:,.4f}"

    lines = [
        f"dry run: {result['probeset']}, {result['cases']} cases x {result['repeats']} repeats, "
        f"{len(result['arms'])} arms: {result['calls']:,} model calls and "
        f"{result['retrievals']:,} retrievals",
        "",
        table(
            [
                [
                    r["prompt"],
                    r["model"],
                    f"{r['calls']:,}",
                    f"{r['input_tokens']:,}",
                    f"{r['output_tokens_max']:,}",
                    money(r["cost_usd"]),
                ]
                for r in result["arms"]
            ],
            ["prompt", "model", "calls", "input tokens (est.)", "output tokens (max)", "cost (est.)"],
        ),
        "",
        f"estimated total: {money(result['cost_usd'])}",
    ]
    lines += [f"note: {n}" for n in result["notes"]]
    if result["needs_yes"]:
        lines.append("this plan is over 100,000 calls: probe run needs --yes to start it")
    return "\n".join(lines)
