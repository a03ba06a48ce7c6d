"""The demo target's production post-filter, as Acme's chat widget would run it on each reply.

It reads only the start of the reply, after any leading whitespace: a header there decides the
logged status and is removed before the visitor sees the text; anything else is logged as
answered and shown as it is, so a misplaced marker reaches the visitor (`marker_leaked`) and a
refusal with a misplaced marker is logged as answered (`status_correct` fails). Being lenient
about leading whitespace, it logs some replies correctly that the header check calls misplaced.
"""

NO_ANSWER = "[[NO_ANSWER]]"
ANSWER = "[[ANSWER]]"


def filter_reply(raw_text: str) -> dict[str, str]:
    start = raw_text.lstrip()
    for marker, status in ((NO_ANSWER, "no_answer"), (ANSWER, "answered")):
        if start.startswith(marker):
            return {"text": start[len(marker) :].lstrip("\r\n"), "status": status}
    return {"text": raw_text, "status": "answered"}
