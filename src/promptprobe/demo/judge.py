"""The SIMULATED judge of the demo: the demo server answers a judged check's request (the fixed
system message of checks/judge.py) by looking at the output under judgment, knowing the truth
(`answers`: the reply cites a passage and does not decline), and saying it right with the
probabilities of [judge] in behaviour.toml: `sensitivity` for a reply that answers,
`specificity` for one that does not. Each judgment is drawn from the seed, the question, the
output and how many times that (question, output) was judged before, so the same outputs judged
in the same order give the same judgments, run after run."""

import hashlib
import random
import re
from typing import Any

SYSTEM_START = "You grade one output"
LABELS = re.compile(r"exactly (.+?) or exactly (.+?)\.$")
OUTPUT = re.compile(r"<output-([0-9a-f]+)>\n(.*)\n</output-\1>", re.DOTALL)
QUESTION = re.compile(r"^The customer asked: (.*)$", re.MULTILINE)
CITATION = re.compile(r"\[\d+\]")
DECLINES = ("I'm sorry", "抱歉", "[[NO_ANSWER]]", "[[NO ANSWER]]")


def answers(output: str) -> bool:
    """The truth the simulated judge is wrong about: the reply cites a passage and does not decline."""
    return bool(CITATION.search(output)) and not any(word in output for word in DECLINES)


def judged(messages: list[dict[str, Any]]) -> tuple[str, str, str, str] | None:
    """(question, output, pass label, fail label) of a judge's request; None for any other request."""
    system = str(messages[0].get("content", "")) if messages else ""
    if not system.startswith(SYSTEM_START) or len(messages) < 2:
        return None
    labels = LABELS.search(system)
    user = str(messages[-1].get("content", ""))
    output = OUTPUT.search(user)
    if labels is None or output is None:
        return None
    question = QUESTION.search(user)
    return (question.group(1) if question else ""), output.group(2), labels.group(1), labels.group(2)


def judge_key(request: tuple[str, str, str, str]) -> str:
    question, output, _, _ = request
    return "judge:" + hashlib.sha256(f"{question}\0{output}".encode()).hexdigest()


def judgment(request: tuple[str, str, str, str], behaviour: Any, occurrence: int) -> str:
    """The simulated judge's reply: one line of reasoning, then its label on a line of its own."""
    question, output, pass_label, fail_label = request
    rng = random.Random(f"{behaviour.seed}:{judge_key(request)}:{occurrence}")
    truth = answers(output)
    right = rng.random() < (behaviour.judge_sensitivity if truth else behaviour.judge_specificity)
    says_pass = truth if right else not truth
    reason = "It cites a passage that answers it." if says_pass else "It does not answer from the passages."
    return f"{reason}\n{pass_label if says_pass else fail_label}"
