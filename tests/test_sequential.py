"""`probe run --until-decided`: the exact boundary against brute-force enumeration of every
fair-coin walk, the run against the local test server, the run directory, report/compare/resume
on a sequential run, and the plan against an independent simulation of the run's own rule."""

import itertools
import json
import math
import random
from fractions import Fraction

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import run_dir_of, write_probeset
from servers import LocalServer, Reply

from promptprobe.cli import main
from promptprobe.jsonio import read_jsonl
from promptprobe.stats.sequential import (
    _walk,
    budget,
    coupled_rates,
    design_point_counts,
    false_alarm_ceiling,
    first_decisions,
    look,
    rounds_for_power,
)

# -- the boundary, exactly --------------------------------------------------------------------


def every_walk(discordant):
    """Every sequence of fair coins for these per-round discordant counts, as per-round counts
    of pairs favouring B (one row per sequence, each with probability 2^-total)."""
    total = sum(discordant)
    coins = np.array(list(itertools.product([0, 1], repeat=total)), dtype=np.int64)
    edges = np.cumsum([0, *discordant])
    b_higher = np.stack([coins[:, edges[i] : edges[i + 1]].sum(axis=1) for i in range(len(discordant))], axis=1)
    return np.tile(discordant, (len(coins), 1)), b_higher


def undecided_path(discordant):
    """B-favouring counts that keep the lead at 0 or 1: a walk that never decides."""
    lead, b_higher = 0, []
    for d in discordant:
        b = (d + (1 if lead <= 0 else -1) * (d % 2)) // 2
        b_higher.append(b)
        lead += 2 * b - d
    return b_higher


WALKS = [
    ([2, 3, 1, 4], 0.2, 4, 1),
    ([3, 3, 3, 3, 3], 0.1, 5, 2),
    ([1, 4, 0, 5, 2, 3], 0.25, 6, 1),
    ([5, 5, 5], 0.05, 3, 1),
    ([4, 4, 4, 4], 0.3, 4, 2),
    ([4, 6, 5], 0.05, 3, 2),
]


@pytest.mark.parametrize("discordant,alpha,cap,min_rounds", WALKS)
def test_the_boundary_spends_exactly_what_enumeration_of_every_walk_gives(discordant, alpha, cap, min_rounds):
    counts, b_higher = every_walk(discordant)
    stops, _ = first_decisions(counts, b_higher, alpha, cap, min_rounds)
    looks = list(_walk([discordant], [undecided_path(discordant)], alpha, cap, min_rounds))
    assert len(looks) == len(discordant)  # the reference walk never decides
    for k, seen in enumerate(looks, start=1):
        crossed = Fraction(int(((stops > 0) & (stops <= k)).sum()), len(stops))  # exact
        assert float(crossed) == pytest.approx(seen.spent[0], abs=1e-15)
        assert crossed <= Fraction(budget(alpha, k, cap))  # at most alpha·(k/C)^1.5 by round k
    assert Fraction(int((stops > 0).sum()), len(stops)) <= Fraction(alpha)


@pytest.mark.parametrize("discordant,alpha,cap,min_rounds", WALKS)
def test_the_boundary_is_the_nearest_the_budget_allows(discordant, alpha, cap, min_rounds):
    # A boundary one pair nearer (or any boundary where there is none) would spend more than the
    # budget of its look: no alpha its own spending schedule allows is left unused.
    counts, b_higher = every_walk(discordant)
    stops, _ = first_decisions(counts, b_higher, alpha, cap, min_rounds)
    lead = np.abs(np.cumsum(2 * b_higher - counts, axis=1))
    looks = list(_walk([discordant], [undecided_path(discordant)], alpha, cap, min_rounds))
    total = len(counts)
    for k, seen in enumerate(looks, start=1):
        if k < min_rounds:
            continue
        alive = (stops == 0) | (stops >= k)
        nearer = int(seen.needed[0]) - 1 if seen.needed[0] else int(lead[alive, k - 1].max())
        if nearer < 1:
            continue
        before = Fraction(int(((stops > 0) & (stops < k)).sum()), total)
        wider = Fraction(int((alive & (lead[:, k - 1] >= nearer)).sum()), total)
        assert before + wider > Fraction(budget(alpha, k, cap))


@pytest.mark.parametrize("alpha", [0.05, 0.1, 0.2, 0.25, 0.3])
@pytest.mark.parametrize("discordant", [0, 1, 2, 3, 4, 5])
def test_the_ceiling_is_the_largest_mirror_closed_set_of_walks_within_alpha(discordant, alpha):
    # Every set of coin sequences that holds each sequence's mirror image (B and A swapped), by
    # brute force: the most such a set can weigh without exceeding alpha.
    sequences = list(itertools.product([0, 1], repeat=discordant))
    mirrored = {tuple(sorted([s, tuple(1 - c for c in s)])) for s in sequences}
    weight = Fraction(1, len(sequences))
    best = Fraction(0)
    for chosen in itertools.product([False, True], repeat=len(mirrored)):
        mass = weight * sum(len(set(pair)) for pair, taken in zip(mirrored, chosen, strict=True) if taken)
        if mass <= Fraction(alpha):
            best = max(best, mass)
    assert Fraction(false_alarm_ceiling(discordant, alpha)) == best


@pytest.mark.parametrize("discordant,alpha,cap,min_rounds", WALKS)
def test_the_rule_decides_mirror_images_alike_and_spends_at_most_the_ceiling(discordant, alpha, cap, min_rounds):
    counts, b_higher = every_walk(discordant)
    stops, directions = first_decisions(counts, b_higher, alpha, cap, min_rounds)
    mirror_stops, mirror_directions = first_decisions(counts, counts - b_higher, alpha, cap, min_rounds)
    assert np.array_equal(stops, mirror_stops) and np.array_equal(directions, -mirror_directions)
    spent = Fraction(int((stops > 0).sum()), len(stops))
    assert spent <= Fraction(false_alarm_ceiling(sum(discordant), alpha)) <= Fraction(alpha)


def test_false_alarms_over_random_discordant_counts_by_exact_enumeration():
    # 2 questions with rates 0.3 and 0.8 under both arms, 3 rounds: every outcome of every
    # (question, round, arm), weighted by its probability; alpha 0.25 so the cap can decide.
    alpha, cap, rates = 0.25, 3, [0.3, 0.8]
    cells = [(q, r) for r in range(cap) for q in range(len(rates))]
    outcomes = list(itertools.product([(0, 0), (0, 1), (1, 0), (1, 1)], repeat=len(cells)))
    weights, discordant, b_higher = [], [], []
    for outcome in outcomes:
        weight = Fraction(1)
        per_round_d, per_round_b = [0] * cap, [0] * cap
        for (q, r), (a, b) in zip(cells, outcome, strict=True):
            p = Fraction(rates[q]).limit_denominator(10)
            weight *= (p if a else 1 - p) * (p if b else 1 - p)
            per_round_d[r] += a != b
            per_round_b[r] += b and not a
        weights.append(weight)
        discordant.append(per_round_d)
        b_higher.append(per_round_b)
    stops, _ = first_decisions(np.array(discordant), np.array(b_higher), alpha, cap, 1)
    false_alarm = sum(w for w, s in zip(weights, stops, strict=True) if s > 0)
    assert sum(weights) == 1 and 0 < false_alarm <= alpha


def test_the_stage_wise_p_is_valid_and_decides_exactly_when_the_rule_does():
    discordant, alpha, cap = [3, 4, 3, 4], 0.2, 4
    counts, b_higher = every_walk(discordant)
    p_at_stop = np.ones(len(counts))
    decided = np.zeros(len(counts), dtype=bool)
    for k, seen in enumerate(_walk(counts, b_higher, alpha, cap, 1), start=1):
        stopping = seen.decided | (k == cap)
        p_at_stop[seen.rows[stopping]] = seen.p_value[stopping]
        decided[seen.rows[seen.decided]] = True
        assert np.all(seen.p_value[seen.decided] <= budget(alpha, k, cap))
        assert np.all(seen.p_value[~seen.decided] > budget(alpha, k, cap) * (1 - 1e-12))
    assert np.array_equal(decided, p_at_stop <= alpha)
    for u in np.unique(p_at_stop):  # P(p <= u) <= u under the null, exactly
        assert Fraction(int((p_at_stop <= u).sum()), len(p_at_stop)) <= Fraction(float(u)) * (1 + Fraction(1, 10**9))


def test_one_run_looks_as_the_simulated_batch_decides():
    rng = np.random.default_rng(5)
    discordant = rng.binomial(6, 0.5, size=(200, 8))
    b_higher = rng.binomial(discordant, 0.7)
    stops, directions = first_decisions(discordant, b_higher, 0.05, 8, 2)
    for i in range(200):
        rounds = stops[i] or 8
        seen = look(list(discordant[i, :rounds]), list(b_higher[i, :rounds]), 0.05, 8, 2)
        assert seen.round == rounds and seen.stop
        assert seen.decision == ({1: "B>A", -1: "A>B"}.get(int(directions[i])))


def test_a_decided_run_cannot_take_another_round():
    with pytest.raises(ValueError, match="already decided at round 2"):
        look([6, 6, 6], [6, 6, 3], 0.05, 10, 2)


def test_the_cap_is_the_fewest_rounds_with_the_power_asked():
    cap = rounds_for_power(0.4, 6, trials=400)
    discordant, b_higher = design_point_counts(0.4, 6, range(1, cap.rounds + 1), 400, 20261130)

    def power(rounds):
        stops, directions = first_decisions(discordant[:, :rounds], b_higher[:, :rounds], 0.05, rounds, 2)
        return ((stops > 0) & (directions > 0)).mean()

    assert power(cap.rounds) == cap.power >= 0.8 > power(cap.rounds - 1)


def test_questions_are_paired_within_each_simulated_run():
    # Each question keeps its place under both arms: every run's mean difference is the effect,
    # give or take the effect's own spread over questions (whole-array ranks made it wander).
    rates_a, rates_b = coupled_rates(np.random.default_rng(3), 0.5, 0.6, 0.2, (4000, 12))
    for rates, mean in ((rates_a, 0.5), (rates_b, 0.6)):
        assert rates.mean() == pytest.approx(mean, abs=0.005)
        assert rates.var() == pytest.approx(0.2 * mean * (1 - mean), rel=0.05)  # the ICC
    assert np.all(np.argsort(rates_a, axis=1) == np.argsort(rates_b, axis=1))
    assert (rates_b - rates_a).mean(axis=1).std() < 0.01


# Reference values of the uniform mixture e = 2^d B(s+1, d-s+1), of the rule before the exact boundary
# (the benchmark shows it beside the boundary that replaced it).
UNIFORM = [((8, 8), 28.4444), ((7, 8), 3.5556), ((10, 12), 4.7739), ((15, 20), 3.2206)]


def test_the_mixture_the_boundary_replaced_keeps_its_reference_values():
    from promptprobe.stats.power import log_mixture_e

    s, d = np.array([sd[0] for sd, _ in UNIFORM]), np.array([sd[1] for sd, _ in UNIFORM])
    assert np.exp(log_mixture_e(s, d, 1.0)) == pytest.approx([e for _, e in UNIFORM], abs=1e-4)
    kt = [math.exp(d * math.log(2) + math.lgamma(s + 0.5) + math.lgamma(d - s + 0.5) - math.lgamma(d + 1)
                   - 2 * math.lgamma(0.5) + math.lgamma(1)) for s, d in ((0, 1), (3, 4), (8, 10))]
    assert np.exp(log_mixture_e(np.array([0, 3, 8]), np.array([1, 4, 10]), 0.5)) == pytest.approx(kt, rel=1e-9)


# -- runs ---------------------------------------------------------------------------------------


def prompt_replies(rates: dict[str, float], fail=lambda name, q: False):
    """Replies to prompts named by `VERSION=name`: each question's replies carry the header in
    the stated share of calls (deterministic: in round r when r * rate crosses a whole number)."""
    seen: dict = {}

    def reply(request):
        name = request.json["messages"][0]["content"].split("=")[1].strip()
        key = (name, request.json["messages"][-1]["content"])
        if fail(*key):
            return Reply(status=400, body=b'{"error": {"message": "bad request"}}')
        seen[key] = seen.get(key, 0) + 1
        count = seen[key]
        present = math.floor(count * rates[name]) > math.floor((count - 1) * rates[name])
        return Reply("[[ANSWER]]\nok" if present else "ok, no header")

    return reply


def two_prompt_run(tmp_path, rates: dict[str, float], *extra: str, cases: int = 6, fail=lambda name, q: False,
                   server=None):
    """Prompts a and b (and more) on `cases` questions against `server`, or a server of their own."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    probeset = write_probeset(tmp_path / "p.toml", [(f"c{i}", f"question {i}", None) for i in range(cases)])
    prompts = []
    for name in rates:
        (tmp_path / f"{name}.md").write_text(f"VERSION={name}\n")
        prompts += ["--prompt", str(tmp_path / f"{name}.md")]

    def invoke(url):
        return CliRunner().invoke(main, ["run", "--retrieval", "none", str(probeset), *prompts, "--model", f"openai:m@{url}/v1",
                                         "--until-decided", "--runs-dir", str(tmp_path / "runs"), *extra])

    if server is not None:
        return invoke(server.url)
    with LocalServer(prompt_replies(rates, fail)) as own:
        return invoke(own.url)


def test_clearly_different_prompts_stop_early_with_the_right_verdict(tmp_path):
    result = two_prompt_run(tmp_path, {"a": 0.0, "b": 1.0}, "--max-rounds", "10")
    assert result.exit_code == 0, result.output
    assert "sequential: rounds of 6 cases x 2 arms on header_present" in result.stderr
    run = run_dir_of(result)
    rounds = read_jsonl(run / "sequential.jsonl")
    assert [r["round"] for r in rounds] == [1, 2]  # 6 discordant pairs a round; --min-rounds 2
    first, last = rounds
    assert first["lead_needed"] is None and first["decision"] is None  # round 1 is not looked at
    assert last["decision"] == "B>A" and last["stop"] is True and last["b_higher_total"] == 12
    assert last["lead"] == 12 >= last["lead_needed"]
    # 12 of 12 pairs one way: 2 of the 4096 equally likely walks; by round 2 of 10 the rule may
    # have spent 0.05·(2/10)^1.5.
    assert last["p_value"] == pytest.approx(2 / 4096) and last["alpha_budget"] == pytest.approx(0.05 * 0.2**1.5)
    samples = read_jsonl(run / "samples.jsonl")
    assert sorted(s["sample_id"] for s in samples) == sorted(
        f"c{i}.r{r}.a{a}" for i in range(6) for r in (1, 2) for a in (1, 2))  # exactly the completed rounds
    assert len(read_jsonl(run / "retrievals.jsonl")) == 12  # one per (case, round), shared by both arms
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["sequential"]["max_rounds"] == 10 and manifest["status"] == "complete"
    said = result.stdout.replace("\n  ", " ")  # lines wrapped at the terminal's width, joined
    assert ("sequential on header_present: b better: B>A (b's rate is higher), decided at round 2 (cap 10 rounds); "
            f"B leads by 12 of 12 discordant pairs (decides at {last['lead_needed']}); p = 0.000488") in said
    compare = CliRunner().invoke(main, ["compare", f"{run}#prompt=a", f"{run}#prompt=b", "--json"])
    data = json.loads(compare.stdout)
    assert data["design"] == "sequential" and data["verdict"] == "B>A"
    assert data["p_value"] == pytest.approx(last["p_value"])  # the stage-wise exact p
    assert any("fixed-n tests after optional stopping are not valid" in n for n in data["notes"])
    reverse = json.loads(CliRunner().invoke(main, ["compare", f"{run}#prompt=b", f"{run}#prompt=a", "--json"]).stdout)
    assert reverse["verdict"] == "A>B" and reverse["p_value"] == data["p_value"]
    # --all: the other metrics' fixed-n tests are said to be fixed-n once, not once a metric
    every = CliRunner().invoke(main, ["compare", f"{run}#prompt=a", f"{run}#prompt=b", "--all"]).stdout
    assert every.count("stopped on the sequential rule for header_present") == 1


def test_equal_prompts_run_to_the_cap_and_are_indistinguishable(tmp_path):
    result = two_prompt_run(tmp_path, {"a": 0.5, "b": 0.5}, "--max-rounds", "4")
    assert result.exit_code == 0, result.output
    rounds = read_jsonl(run_dir_of(result) / "sequential.jsonl")
    assert len(rounds) == 4 and rounds[-1]["decision"] == "indistinguishable" and rounds[-1]["stop"]
    assert all(r["decision"] is None for r in rounds[:-1])
    assert rounds[-1]["p_value"] == 1.0 and rounds[-1]["discordant_total"] == 0
    assert len(read_jsonl(run_dir_of(result) / "samples.jsonl")) == 4 * 6 * 2
    assert ("sequential on header_present: indistinguishable at the cap of 4 rounds; no lead of 0 discordant "
            "pairs") in result.stdout.replace("\n  ", " ")


def test_only_two_arms(tmp_path):
    result = two_prompt_run(tmp_path, {"a": 1.0, "b": 1.0, "c": 1.0})
    assert result.exit_code == 2 and "exactly two arms" in result.stderr


def test_an_arm_of_a_sequential_run_compared_across_runs_is_said_to_be_approximate(tmp_path):
    import shutil

    result = two_prompt_run(tmp_path, {"a": 0.0, "b": 1.0}, "--max-rounds", "10")
    assert result.exit_code == 0, result.output
    run = run_dir_of(result)
    other = shutil.copytree(run, tmp_path / "copy")
    across = CliRunner().invoke(main, ["compare", f"{run}#prompt=a", f"{other}#prompt=b", "--json"])
    within = CliRunner().invoke(main, ["compare", f"{run}#prompt=a", f"{run}#prompt=b", "--json"])
    assert across.exit_code == 0 and within.exit_code == 0, across.output + within.output
    notes = json.loads(across.stdout)["notes"]  # one metric: its result is the JSON
    said = "stopped on its sequential rule (--until-decided): its sample size depended on its outcomes"
    assert [n for n in notes if said in n] == [
        f"run {run.name} {said}, so this fixed-n test on it is approximate",
        f"run copy {said}, so this fixed-n test on it is approximate",
    ]
    assert not any(said in n for n in json.loads(within.stdout)["notes"])


def test_repeats_are_refused_with_until_decided_before_any_call(tmp_path):
    with LocalServer(prompt_replies({"a": 1.0, "b": 0.0})) as server:
        result = two_prompt_run(tmp_path, {"a": 1.0, "b": 0.0}, "-n", "5", server=server)
        assert server.requests == []
    assert result.exit_code == 2
    assert "-n/--repeats is for a fixed run: --until-decided asks round by round" in result.stderr
    assert not (tmp_path / "runs").exists()


def test_the_default_cap_is_shown_before_the_run_and_comes_from_detect(tmp_path):
    result = two_prompt_run(tmp_path, {"a": 0.0, "b": 1.0})
    assert result.exit_code == 0, result.output
    cap = rounds_for_power(0.15, 6)
    said = result.stderr.replace("\n", " ")
    assert f"or at the cap of {cap.rounds} rounds ({cap.rounds * 6} samples per arm" in said
    assert f"decide a 15-point difference in {100 * cap.power:.0f}% of simulated runs" in said
    manifest = json.loads((run_dir_of(result) / "manifest.json").read_text())
    assert manifest["sequential"]["max_rounds"] == cap.rounds and manifest["sequential"]["detect"] == 0.15
    assert manifest["sequential"]["spending"] == "alpha·(k/C)^1.5" and "mixture" not in manifest["sequential"]
    wider = two_prompt_run(tmp_path / "wider", {"a": 0.0, "b": 1.0}, "--detect", "40")
    assert f"the cap of {rounds_for_power(0.4, 6).rounds} rounds" in wider.stderr.replace("\n", " ")
    assert rounds_for_power(0.4, 6).rounds < cap.rounds


def test_a_metric_that_applies_to_no_case_is_refused_before_any_call(tmp_path):
    # No case has expect = "no_answer": every round would count 0 pairs of refusal_recall, to the cap.
    with LocalServer(prompt_replies({"a": 0.0, "b": 1.0})) as server:
        result = two_prompt_run(tmp_path, {"a": 0.0, "b": 1.0}, "--metric", "refusal_recall", "--max-rounds", "3",
                                server=server)
        assert server.requests == []
    assert result.exit_code == 2, result.output
    assert "--metric refusal_recall applies to no case of probe set p" in result.stderr
    assert not (tmp_path / "runs").exists()


def test_the_cap_is_sized_for_the_cases_the_metric_applies_to(tmp_path):
    # refusal_recall counts only the 6 cases that expect no_answer: a cap sized for all 12 pairs a
    # round would have well under 80% power at --detect.
    cases = [(f"c{i}", f"question {i}", "no_answer" if i % 2 else "answer") for i in range(12)]
    probeset = write_probeset(tmp_path / "p.toml", cases)
    for name in "ab":
        (tmp_path / f"{name}.md").write_text(f"VERSION={name}\n")
    result = CliRunner().invoke(main, ["run", "--retrieval", "none", str(probeset), "--prompt", str(tmp_path / "a.md"),
                                       "--prompt", str(tmp_path / "b.md"), "-m", "openai:m@http://127.0.0.1:9/v1",
                                       "--until-decided", "--metric", "refusal_recall", "--dry-run", "--json"])
    assert result.exit_code == 0, result.output
    assert rounds_for_power(0.15, 6).rounds > rounds_for_power(0.15, 12).rounds
    assert json.loads(result.stdout)["repeats"] == rounds_for_power(0.15, 6).rounds


def test_failed_samples_are_counted_of_the_samples_recorded_not_of_the_cap(tmp_path):
    # Prompt a fails on question 0 every time; the run decides at round 2 of a cap of 10.
    result = two_prompt_run(tmp_path, {"a": 0.0, "b": 1.0}, "--max-rounds", "10", "--max-attempts", "1",
                            fail=lambda name, question: name == "a" and question.endswith("question 0"))
    assert result.exit_code == 1, result.output
    assert "error: 2 of 24 samples failed after retries" in result.stderr
    rounds = read_jsonl(run_dir_of(result) / "sequential.jsonl")
    assert rounds[-1]["round"] == 2 and rounds[-1]["decision"] == "B>A"  # a failure counts against its arm


def interrupt_after_round_one_and_a_half(run):
    samples = read_jsonl(run / "samples.jsonl")
    keep = [s for s in samples if s["repeat"] == 1] + [s for s in samples if s["repeat"] == 2][:5]
    (run / "samples.jsonl").write_text("".join(json.dumps(s) + "\n" for s in keep))
    (run / "sequential.jsonl").write_text(json.dumps(read_jsonl(run / "sequential.jsonl")[0]) + "\n")
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["status"] = "interrupted"
    (run / "manifest.json").write_text(json.dumps(manifest))
    return manifest


def resume(run):
    return CliRunner().invoke(main, ["run", "--resume", str(run)])


def test_resume_continues_the_rounds_and_says_the_cap(tmp_path):
    with LocalServer(prompt_replies({"a": 0.5, "b": 0.5})) as server:  # a resumed run calls where it started
        result = two_prompt_run(tmp_path, {"a": 0.5, "b": 0.5}, "--max-rounds", "3", server=server)
        run = run_dir_of(result)
        interrupt_after_round_one_and_a_half(run)
        compared = json.loads(CliRunner().invoke(main, ["compare", f"{run}#prompt=a", f"{run}#prompt=b", "--json"]).stdout)
        assert compared["verdict"] == "indistinguishable" and compared["p_value"] == 1.0  # not stopped by its rule
        resumed = resume(run)
    assert resumed.exit_code == 0, resumed.output
    assert "or at the cap of 3 rounds" in resumed.stderr.replace("\n", " ")
    rounds = read_jsonl(run / "sequential.jsonl")
    assert [r["round"] for r in rounds] == [1, 2, 3] and rounds[-1]["decision"] == "indistinguishable"
    assert len(read_jsonl(run / "samples.jsonl")) == 3 * 6 * 2


def test_a_run_stopped_by_hand_shows_p_1_and_no_decision_in_every_view(tmp_path):
    # Round 1 alone has B ahead by 6 of 6 (a stage-wise p of 2/64 there), but the rule had not stopped.
    with LocalServer(prompt_replies({"a": 0.0, "b": 1.0})) as server:
        run = run_dir_of(two_prompt_run(tmp_path, {"a": 0.0, "b": 1.0}, "--max-rounds", "10", server=server))
        interrupt_after_round_one_and_a_half(run)
    assert read_jsonl(run / "sequential.jsonl")[-1]["p_value"] < 0.05
    report = json.loads(CliRunner().invoke(main, ["report", str(run), "--json"]).stdout)
    assert report["status"] == "interrupted" and report["sequential"]["p_value"] == 1.0
    said = CliRunner().invoke(main, ["report", str(run)]).stdout.replace("\n  ", " ")
    assert "1 of at most 10 rounds so far, not decided" in said and "p = 1)" in said
    compared = CliRunner().invoke(main, ["compare", f"{run}#prompt=a", f"{run}#prompt=b"]).stdout.replace("\n  ", " ")
    assert "decided by the sequential rule" not in compared
    assert "not decided; the run stopped before its rule did" in compared
    data = json.loads(CliRunner().invoke(main, ["compare", f"{run}#prompt=a", f"{run}#prompt=b", "--json"]).stdout)
    assert data["verdict"] == "indistinguishable" and data["p_value"] == 1.0 and data["better_arm"] is None


def test_resume_keeps_the_failed_samples_of_rounds_the_rule_has_counted(tmp_path):
    # Prompt a fails on question 0 every time: round 1's failure is in the pairs sequential.jsonl
    # counted, so a resume keeps it (in the denominator, against a) instead of dropping it.
    fail = lambda name, question: name == "a" and question.endswith("question 0")  # noqa: E731
    with LocalServer(prompt_replies({"a": 0.5, "b": 0.5}, fail)) as server:
        result = two_prompt_run(tmp_path, {"a": 0.5, "b": 0.5}, "--max-rounds", "3", "--max-attempts", "1",
                                server=server)
        run = run_dir_of(result)
        interrupt_after_round_one_and_a_half(run)
        resumed = resume(run)
    assert resumed.exit_code == 1, resumed.output
    samples = read_jsonl(run / "samples.jsonl")
    assert len(samples) == 3 * 6 * 2
    assert sorted(s["sample_id"] for s in samples if s["error"]) == ["c0.r1.a1", "c0.r2.a1", "c0.r3.a1"]
    set_aside = read_jsonl(run / "superseded.jsonl") if (run / "superseded.jsonl").exists() else []
    assert all(s["repeat"] == 2 for s in set_aside)  # only the round the rule had not counted is re-run
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["counts"] == {"planned": 36, "recorded": 36, "errors": 3}
    assert "3 of 36 samples failed after retries" in resumed.stderr


def test_a_run_killed_after_its_rule_stopped_resumes_to_complete_and_a_complete_one_is_left_alone(tmp_path):
    fail = lambda name, question: name == "a" and question.endswith("question 0")  # noqa: E731
    with LocalServer(prompt_replies({"a": 0.0, "b": 1.0}, fail)) as server:
        result = two_prompt_run(tmp_path, {"a": 0.0, "b": 1.0}, "--max-rounds", "10", "--max-attempts", "1",
                                server=server)
        run = run_dir_of(result)
        complete = (run / "manifest.json").read_bytes()
        samples = (run / "samples.jsonl").read_bytes()
        again = resume(run)  # decided and complete (2 failed samples the rule counted): nothing to do
        assert again.exit_code == 2 and "already stopped at round 2" in again.stderr
        assert (run / "manifest.json").read_bytes() == complete and (run / "samples.jsonl").read_bytes() == samples
        manifest = json.loads(complete)
        manifest.update(status="running", finished=None)  # killed after the stop was recorded
        (run / "manifest.json").write_text(json.dumps(manifest))
        (run / ".lock").unlink()
        calls = len(server.requests)
        finished = resume(run)
        assert len(server.requests) == calls  # nothing asked again
    assert finished.exit_code == 1, finished.output  # the 2 failed samples stay failed
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["counts"] == {"planned": 120, "recorded": 24, "errors": 2}
    assert (run / "samples.jsonl").read_bytes() == samples
    assert "B>A" in finished.stdout


def test_a_run_recorded_under_the_mixture_rule_is_read_but_not_continued(tmp_path):
    with LocalServer(prompt_replies({"a": 0.0, "b": 1.0})) as server:
        result = two_prompt_run(tmp_path, {"a": 0.0, "b": 1.0}, "--max-rounds", "3", server=server)
        run = run_dir_of(result)
        manifest = interrupt_after_round_one_and_a_half(run)
        old = manifest["sequential"]
        for key in ("rule", "spending"):
            old.pop(key)
        old.update(mixture="Beta(0.5, 0.5)", threshold=20.0)
        first = {"round": 1, "pairs": 6, "discordant": 6, "b_higher": 6, "a_higher": 0, "discordant_total": 6,
                 "b_higher_total": 6, "e_value": 128.0, "decision": None, "worse": False, "stop": False}
        line = dict(first, round=2, discordant_total=12, b_higher_total=12, e_value=9170.0, decision="B>A", stop=True)
        (run / "sequential.jsonl").write_text(json.dumps(first) + "\n" + json.dumps(line) + "\n")
        manifest["status"] = "complete"
        (run / "manifest.json").write_text(json.dumps(manifest))
        data = json.loads(CliRunner().invoke(main, ["compare", f"{run}#prompt=a", f"{run}#prompt=b", "--json"]).stdout)
        assert data["verdict"] == "B>A" and data["p_value"] == pytest.approx(1 / 9170) and data["e_value"] == 9170.0
        report = CliRunner().invoke(main, ["report", str(run)])
        assert "decided at round 2 (cap 3 rounds); e = 9.17e+03 >= 20" in report.stdout.replace("\n  ", " ")
        (run / "sequential.jsonl").write_text(json.dumps(first) + "\n")
        manifest["status"] = "interrupted"
        (run / "manifest.json").write_text(json.dumps(manifest))
        resumed = resume(run)
    assert resumed.exit_code == 2 and "recorded under the mixture e-value of an earlier promptprobe" in resumed.stderr


# -- the plan --------------------------------------------------------------------------------------


def test_plan_sequential_says_what_it_costs_beside_the_fixed_plan_of_the_same_power():
    result = CliRunner().invoke(main, ["plan", "--sequential", "--p1", "0.9", "--p2", "0.5", "--cases", "10",
                                       "--format", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert 2 <= data["rounds"]["median"] <= data["rounds"]["p90"] <= data["max_rounds"]
    assert data["samples_per_arm"]["median"] == 10 * data["rounds"]["median"]
    assert data["samples_per_arm"]["mean"] == pytest.approx(10 * data["rounds"]["mean"])
    assert data["power"] > 0.9 and data["fixed_rounds"] >= 1
    assert data["fixed_same_power"]["power"] == min(0.99, data["power"]) and data["fixed_same_power"]["rounds"] >= 1
    text = CliRunner().invoke(main, ["plan", "--sequential", "--p1", "0.9", "--p2", "0.5", "--cases", "10"]).output
    assert "samples per arm to the stop: mean" in text and "a fixed paired plan with the same power" in text


def test_plan_sequential_under_the_null_gives_its_false_alarms_with_their_simulation_error():
    # 5 cases at 50% vs 50%: 104 of 2,000 simulated runs decide, 5.2%, printed beside "at most alpha".
    args = ["plan", "--sequential", "--p1", "0.5", "--p2", "0.5", "--cases", "5"]
    data = json.loads(CliRunner().invoke(main, [*args, "--json"]).stdout)
    share, trials = data["decided_share"], data["trials"]
    assert share == 104 / 2000 and data["power"] is None
    assert data["decided_share_error"] == pytest.approx(1.96 * math.sqrt(share * (1 - share) / trials))
    text = " ".join(CliRunner().invoke(main, args).output.split())
    assert "5.2% (±1.0) of runs" in text


def test_plan_sequential_says_the_power_its_fixed_plan_is_for():
    # --power 0.95 sizes the fixed plan beside the sequential one; the line must not call it 80%.
    result = CliRunner().invoke(main, ["plan", "--sequential", "--p1", "0.9", "--p2", "0.7", "--cases", "10",
                                       "--power", "0.95"])
    assert result.exit_code == 0, result.output
    said = result.stdout.replace("\n  ", " ")
    fixed = json.loads(CliRunner().invoke(main, ["plan", "--sequential", "--p1", "0.9", "--p2", "0.7", "--cases", "10",
                                                 "--power", "0.95", "--json"]).stdout)["fixed_rounds"]
    assert f"a fixed paired plan with 95% power: {fixed} repeats" in said
    assert "with 80% power" not in said


def test_the_plan_is_what_an_independent_simulation_of_the_runs_rule_gives():
    # The run's own per-round `look`, driven one simulated run at a time on Python's random
    # numbers (not the plan's vectorised simulation), reproduces the plan's mean and power.
    from promptprobe.planning import plan_sequential

    p1, p2, cases, detect = 0.3, 0.7, 6, 0.4
    plan = plan_sequential(p1, p2, cases, 0.0, detect=detect).data
    cap, trials = plan["max_rounds"], 400
    rng = random.Random(11)
    rounds_taken, right = [], 0
    for _ in range(trials):
        discordant, b_higher = [], []
        while True:
            a = [rng.random() < p1 for _ in range(cases)]
            b = [rng.random() < p2 for _ in range(cases)]
            discordant.append(sum(x != y for x, y in zip(a, b, strict=True)))
            b_higher.append(sum(y and not x for x, y in zip(a, b, strict=True)))
            seen = look(discordant, b_higher, 0.05, cap, 2)
            if seen.stop:
                break
        rounds_taken.append(seen.round)
        right += seen.decision == "B>A"
    mean = np.mean(rounds_taken) * cases
    error = 1.96 * math.hypot(np.std(rounds_taken) * cases / math.sqrt(trials), plan["samples_per_arm"]["mean_error"] / 1.96)
    assert abs(mean - plan["samples_per_arm"]["mean"]) <= 1.5 * error
    power_error = 1.96 * math.sqrt(plan["power"] * (1 - plan["power"]) * (1 / trials + 1 / plan["trials"]))
    assert abs(right / trials - plan["power"]) <= 1.5 * power_error + 1e-9


def test_the_dry_run_prices_the_cap_and_the_manifest_says_where_the_rounds_came_from(tmp_path):
    """`--until-decided --dry-run` prices what the run can take (its cap of rounds, not the probe
    set's repeats) and refuses what the run refuses; the run records its rounds as the cap's, not
    the probe set's."""
    cap = rounds_for_power(0.15, 6).rounds
    dry = two_prompt_run(tmp_path / "dry", {"a": 0.0, "b": 1.0}, "--dry-run", "--json")
    assert dry.exit_code == 0, dry.output
    plan = json.loads(dry.stdout)
    assert plan["repeats"] == cap and plan["calls"] == 2 * 6 * cap
    assert plan["settings"]["repeats"] == {"value": cap, "from": "--until-decided cap at --detect 15"}
    assert any(f"priced at its cap of {cap} rounds" in note for note in plan["notes"])
    capped = json.loads(two_prompt_run(tmp_path / "capped", {"a": 0.0, "b": 1.0}, "--dry-run", "--json",
                                       "--max-rounds", "3").stdout)
    assert capped["calls"] == 2 * 6 * 3 and capped["settings"]["repeats"] == {"value": 3, "from": "flag"}
    unknown = two_prompt_run(tmp_path / "unknown", {"a": 0.0, "b": 1.0}, "--dry-run", "--metric", "nosuch")
    assert unknown.exit_code == 2 and "--metric nosuch: unknown metric" in unknown.stderr
    three = two_prompt_run(tmp_path / "three", {"a": 1.0, "b": 1.0, "c": 1.0}, "--dry-run")
    assert three.exit_code == 2 and "exactly two arms" in three.stderr
    result = two_prompt_run(tmp_path / "run", {"a": 0.0, "b": 1.0})
    assert result.exit_code == 0, result.output
    manifest = json.loads((run_dir_of(result) / "manifest.json").read_text())
    assert manifest["settings"]["repeats"] == {"value": cap, "from": "--until-decided cap at --detect 15"}
