"""`probe run --dry-run`: the plan, and its estimated tokens and cost, before any model is called.

The retrieval is fetched once per question (read-only: nothing is written) so that the estimate
counts the passages, usually most of a RAG call's input; `fetch=False` skips it and the result
says so. Apart from that nothing is called: no model, no batch API, no credential lookup (the
models' endpoints are worked out by the SDKs' rules, not by building clients). The messages are
assembled as the run would assemble them ([assemble] function included) and counted at about 4
characters a token; every reply is assumed to use `max_tokens`, an upper bound.

Memory does not depend on the number of repeats: each case is priced once per arm.
"""

import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..assemble import AssembleError, default_messages, production_assembler
from ..config import TargetConfig, settle_repeats
from ..endpoints import protect, resolve
from ..errors import InputError, StartError
from ..models import ModelSpec
from ..probeset import Case, ProbeSet
from ..prompts import PromptVersion, check_prompts, fill
from ..providers import refuse_batch
from ..retrievers import Passage, RetrievalError, make_retriever
from .cost import PriceTable, Tokens, estimate_tokens, load_prices, price_sentence, refuse_unknown
from .plan import Arm, make_arms
from .retry import Attempted, RetryPolicy, call_with_retries
from .run import LARGE_PLAN, RunOptions

# A dry run gives a retrieval that fails one quick retry, not the run's full patience.
FETCH_POLICY = RetryPolicy(max_attempts=2, backoff_initial=0.5, max_retry_wait=2.0)
NO_FETCH = "--no-retrieval-fetch"


def fetch_passages(
    probeset: ProbeSet, config: TargetConfig, concurrency: int = 8, policy: RetryPolicy = FETCH_POLICY
) -> dict[str, list[Passage]]:
    """Each question's passages, retrieved once through the target's retrieval path (nothing is
    written). A retrieval that fails is a StartError naming the case, as a run's would be."""
    retriever = make_retriever(config.retrieval, config.base_dir)

    def fetch(case: Case) -> list[Passage]:
        try:
            passages, _, _ = call_with_retries(
                lambda: retriever.retrieve(case.question, case.history),
                policy,
                threading.Event(),
                retryable_kinds=(RetrievalError,),
            )
        except Attempted as failure:
            raise StartError(
                f"dry run: the retrieval failed for case {case.id!r} ({failure.error}); nothing else was "
                f"called ({NO_FETCH} prices the plan without the passages)"
            ) from None
        return list(passages)

    try:
        with ThreadPoolExecutor(max_workers=max(1, min(concurrency, len(probeset.cases)))) as pool:
            return dict(zip((c.id for c in probeset.cases), pool.map(fetch, probeset.cases), strict=True))
    finally:
        retriever.close()


def dry_run(
    probeset: ProbeSet,
    prompts: Sequence[PromptVersion],
    models: Sequence[ModelSpec],
    config: TargetConfig,
    options: RunOptions,
    fetch: bool = True,
) -> dict[str, Any]:
    """The plan priced without a call (retrieval fetched read-only unless not `fetch`)."""
    problems = check_prompts(prompts, probeset.cases, config.vars)
    if problems:
        raise InputError("\n".join(problems))
    if options.batch:
        refuse_batch(models)
    arms = make_arms(prompts, models)
    repeats, settings = settle_repeats(config, probeset, options.repeats, options.settings)
    prices = load_prices(config.prices)
    kind = config.retrieval.get("kind", "none")
    fetched = fetch_passages(probeset, config, options.concurrency) if fetch and kind != "none" else None
    function = config.assemble_function
    assemble = production_assembler(function) if function else default_messages
    max_tokens = options.params.max_tokens
    rows = []
    for arm in arms:
        per_case = [
            _input_tokens(assemble, arm.prompt, case, (fetched or {}).get(case.id, []), config.vars)
            for case in probeset.cases
        ]
        rows.append(_arm_row(arm, len(probeset.cases) * repeats, sum(per_case) * repeats, prices, options))
    judge_rows = _judge_rows(config, models, len(arms) * len(probeset.cases) * repeats, fetched, options)
    costs = [row["cost_usd"] for row in rows + judge_rows]
    total_cost = None if None in costs else sum(costs)
    calls = sum(r["calls"] for r in rows) + sum(r["calls"] for r in judge_rows)
    passages = sum(len(p) for p in (fetched or {}).values())
    passage_tokens = sum(estimate_tokens(p.text) for ps in (fetched or {}).values() for p in ps)
    return {
        "probeset": probeset.name,
        "cases": len(probeset.cases),
        "repeats": repeats,
        "arms": rows,
        "judges": judge_rows,
        "calls": calls,
        "retrievals": len(probeset.cases) * repeats,
        "retrieval": {
            "kind": kind,
            "fetched": fetched is not None,
            "questions": len(fetched) if fetched is not None else 0,
            "passages": passages,
            "passage_tokens": passage_tokens,
            "skipped": None if fetched is not None or kind == "none" else f"{NO_FETCH} was given",
        },
        "cost_usd": total_cost,
        "cost_unknown": [r["cost_unknown"] for r in rows + judge_rows if r["cost_unknown"]],
        "settings": settings,
        "needs_yes": calls > LARGE_PLAN,
        "notes": _notes(kind, fetched is not None, max_tokens, options.batch)
        + (
            # The run itself refuses this (config.with_retrieval); the plan should not hide it.
            ["there is no probe.toml here: the run itself needs --config FILE or --retrieval none"]
            if config.path is None and not config.retrieval_given
            else []
        ),
    }


def _arm_row(
    arm: Arm, calls: int, input_tokens: int, prices: PriceTable, options: RunOptions
) -> dict[str, Any]:
    """One arm's calls, tokens (output at most max_tokens a call) and cost, with its price."""
    output_tokens = options.params.max_tokens * calls
    protect(arm.model)
    endpoint = resolve(arm.model)
    match = prices.match(arm.model, endpoint)
    price = match.price
    cost = price.cost_of(Tokens(input_tokens, 0, 0, output_tokens), options.batch) if price else None
    return {
        "prompt": arm.prompt.name,
        "model": arm.model.label,
        "calls": calls,
        "input_tokens": input_tokens,
        "output_tokens_max": output_tokens,
        "cost_usd": cost,
        "price": None if price is None else price.to_dict(options.batch),
        "cost_unknown": match.reason,
        "endpoint": endpoint.to_dict(),
    }


def _judge_rows(
    config: TargetConfig,
    models: Sequence[ModelSpec],
    outputs: int,
    fetched: dict[str, list[Passage]] | None,
    options: RunOptions,
) -> list[dict[str, Any]]:
    """Each judged check priced: `repeats` judgments of every planned output, each sent the rubric,
    the passages and an output of at most max_tokens, and answering with at most max_tokens."""
    from .judging import resolve_judges

    prices = load_prices(config.prices)
    max_tokens = options.params.max_tokens
    passage_tokens = max(
        (sum(estimate_tokens(p.text) for p in found) for found in (fetched or {}).values()), default=0
    )
    rows = []
    for judge in resolve_judges(config.checks, models, config):
        calls = outputs * judge.config.repeats
        per_call = estimate_tokens(judge.config.rubric_text) + 100 + passage_tokens + max_tokens
        protect(judge.model)
        endpoint = resolve(judge.model)
        match = prices.match(judge.model, endpoint)
        tokens = Tokens(per_call * calls, 0, 0, max_tokens * calls)
        rows.append(
            {
                "check": judge.config.name,
                "model": judge.model.label,
                "calls": calls,
                "input_tokens": per_call * calls,
                "output_tokens_max": max_tokens * calls,
                "cost_usd": match.price.cost_of(tokens, options.batch) if match.price else None,
                "price": None if match.price is None else match.price.to_dict(options.batch),
                "cost_unknown": match.reason,
                "endpoint": endpoint.to_dict(),
            }
        )
    return rows


def check_max_cost(
    probeset: ProbeSet,
    prompts: Sequence[PromptVersion],
    models: Sequence[ModelSpec],
    config: TargetConfig,
    options: RunOptions,
    fetch: bool = True,
) -> dict[str, Any]:
    """Before a run with --max-cost: refuse a model without a price (before any retrieval), then
    a plan estimated above the cap; the estimate when it is within."""
    assert options.max_cost is not None
    from .judging import resolve_judges

    judges = [j.model for j in resolve_judges(config.checks, models, config)]
    refuse_unknown(load_prices(config.prices), [*models, *judges])
    estimate = dry_run(probeset, prompts, models, config, options, fetch=fetch)
    if estimate["cost_usd"] > options.max_cost:
        raise InputError(
            f"the estimated cost ${estimate['cost_usd']:.2f} is above --max-cost ${options.max_cost:.2f} "
            "(probe run --dry-run shows how it is made up)"
        )
    return estimate


def _input_tokens(
    assemble: Any, prompt: PromptVersion, case: Case, passages: list[Passage], variables: dict[str, str]
) -> int:
    """The estimated input tokens of one call: the messages as the run would assemble them."""
    text = fill(prompt.text, {**variables, **case.variables})
    try:
        messages = assemble(text, case.question, passages, case.history)
    except AssembleError as exc:
        raise InputError(f"dry run: case {case.id!r}: {exc}") from None
    return sum(estimate_tokens(m["content"]) for m in messages)


def _notes(kind: str, fetched: bool, max_tokens: int, batch: bool) -> list[str]:
    if kind == "none":
        retrieval = "input tokens are estimated at 4 characters a token on the messages (no retrieval)"
    elif fetched:
        retrieval = (
            "input tokens are estimated at 4 characters a token on the messages, with the passages "
            "each question's retrieval returned now (fetched once per question, read-only)"
        )
    else:
        retrieval = (
            f"retrieval was not fetched ({NO_FETCH}): input tokens leave out the passages, which come on top"
        )
    return [
        retrieval,
        f"output tokens assume every reply uses max_tokens ({max_tokens}): an upper bound",
        *(["priced at the batch rate (--batch): each price times its batch share"] if batch else []),
    ]


def render_dry_run(result: dict[str, Any]) -> str:
    from ..views.tables import table, wrap

    def money(value: float | None) -> str:
        return "cost unknown" if value is None else f"${value:,.4f}"

    retrieval = result["retrieval"]
    def count(n: int, noun: str) -> str:
        return f"{n:,} {noun}{'' if n == 1 else 's'}"

    fetches = (
        "no retrieval" if retrieval["kind"] == "none" else f"{count(result['retrievals'], 'retrieval')}"
    )
    lines = [
        f"dry run: {result['probeset']}, {count(result['cases'], 'case')} x "
        f"{count(result['repeats'], 'repeat')}, {count(len(result['arms']), 'arm')}: "
        f"{count(result['calls'], 'model call')} and {fetches}",
    ]
    if retrieval["fetched"]:
        lines.append(
            f"retrieval fetched once per question ({retrieval['questions']} questions, "
            f"{retrieval['passages']} passages, about {retrieval['passage_tokens']:,} tokens)"
        )
    elif retrieval["skipped"]:
        lines.append(f"retrieval not fetched ({retrieval['skipped']}): the estimate leaves out the passages")
    lines += [
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
    ]
    if result.get("judges"):
        rows = [
            [r["check"], r["model"], f"{r['calls']:,}", f"{r['input_tokens']:,}"]
            + [f"{r['output_tokens_max']:,}", money(r["cost_usd"])]
            for r in result["judges"]
        ]
        headers = ["judged check", "judge", "calls", "input tokens (est.)", "output tokens (max)"]
        headers.append("cost (est.)")
        lines += ["", table(rows, headers)]
    lines += ["", f"estimated total: {money(result['cost_usd'])}"]
    seen: set[str] = set()
    for row in result["arms"] + result.get("judges", []):
        if row["model"] not in seen:
            seen.add(row["model"])
            lines.append(price_sentence(row["model"], row["endpoint"], row["price"], row["cost_unknown"]))
    lines.append(_settings_line(result["settings"]))
    lines += [f"note: {n}" for n in result["notes"]]
    if result["needs_yes"]:
        lines.append("this plan is over 100,000 calls: probe run needs --yes to start it")
    return wrap("\n".join(lines))


def _settings_line(settings: dict[str, Any]) -> str:
    """`settings: repeats 5 (probe set), max_tokens 100 (flag); the rest defaults`."""

    def shown(value: Any) -> str:
        if isinstance(value, list):
            return ", ".join(str(v) for v in value) or "none"
        return str(value)

    chosen = [
        f"{name} {shown(s['value'])} ({s['from']})" for name, s in settings.items() if s["from"] != "default"
    ]
    return "settings: " + ("; ".join(chosen) + "; the rest defaults" if chosen else "all defaults")
