"""A production chat widget's post-filter, as a team would have it: it looks at the first line
only, strips a header there, logs the status, and shows the visitor the rest."""


def filter_reply(raw_text):
    first, newline, rest = raw_text.partition("\n")
    if first == "[[NO_ANSWER]]":
        return {"text": rest, "status": "refused"}
    if first == "[[ANSWER]]":
        return {"text": rest, "status": "answered"}
    return {"text": raw_text, "status": "answered"}


def filter_as_tuple(raw_text):
    result = filter_reply(raw_text)
    return result["text"], result["status"]


def broken_filter(raw_text):
    raise ValueError("widget crashed on this reply")


def noisy_filter(raw_text):
    print(f"filter_reply: {len(raw_text)} chars")  # production's own debug line, on stdout
    return filter_reply(raw_text)
