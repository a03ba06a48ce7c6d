"""How fast the secret scrubber reads what a run writes and prints.

Every byte probe writes or prints passes through it (promptprobe/redaction.py). Its full pattern
matches each character of each key as written, \\u-escaped or percent-encoded, and each base64
form broken into lines anywhere: an alternation at every character, slow on its own. A prefilter
(escapes decoded, line breaks dropped, then a plain search for each key's middle) lets the full
pattern run only on a text that may hold a key. This prints the throughput of both, on the texts
a run writes (a JSON reply with non-ASCII text escaped, the same as UTF-8, prose, a text that does
hold a key), with two keys registered, and what that costs per sample.

    .venv/bin/python benchmarks/scrub_speed.py [--repeats 20]
"""

import argparse
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from promptprobe.redaction import Scrubber  # noqa: E402

OPENAI = "sk-proj-" + "A1b2C3d4" * 5
ANTHROPIC = "sk-ant-api03-" + "x9Y8z7" * 6
WORDS = (
    "the plan costs twenty dollars per user per month and the enterprise tier is priced on request "
    "please contact sales für größere Teams 料金 100% [1] [2]"
).split()


def texts() -> dict[str, str]:
    random.seed(2)
    prose = "\n".join(" ".join(random.choice(WORDS) for _ in range(15)) for _ in range(600))
    reply = {"choices": [{"message": {"content": prose}}], "usage": {"prompt_tokens": 5}}
    return {
        "JSON reply, non-ASCII \\u-escaped": json.dumps(reply),
        "JSON reply, UTF-8": json.dumps(reply, ensure_ascii=False),
        "prose": prose,
        "JSON reply echoing a key \\u-escaped": json.dumps(reply).replace(
            "contact", "".join(f"\\u{ord(c):04x}" for c in OPENAI), 1
        ),
    }


def rate(function, text: str, repeats: int) -> float:
    best = float("inf")
    for _ in range(3):
        started = time.process_time()
        for _ in range(repeats):
            function(text)
        best = min(best, time.process_time() - started)
    return len(text.encode()) * repeats / 1e6 / max(best, 1e-9)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    scrubber = Scrubber()
    scrubber.add("OPENAI_API_KEY", OPENAI)
    scrubber.add("ANTHROPIC_API_KEY", ANTHROPIC)
    assert scrubber._pattern is not None
    full = scrubber._pattern
    print("| text | bytes | with the prefilter MB/s | full pattern alone MB/s |")
    print("|---|---:|---:|---:|")
    speeds = []
    for name, text in texts().items():
        filtered = rate(scrubber.text, text, args.repeats)
        alone = rate(lambda value: full.sub("x", value), text, args.repeats)
        speeds.append(filtered)
        print(f"| {name} | {len(text.encode()):,} | {filtered:.1f} | {alone:.1f} |")
    per_sample = 20_000  # a sample's request, reply body, text, record and retrieval line
    slowest = min(speeds[:3])
    print(
        f"\nabout {per_sample // 1000} KB written per sample: {per_sample / 1e6 / slowest * 1000:.2f} ms of "
        "scrubbing per sample at the slowest rate on texts without a key"
    )


if __name__ == "__main__":
    main()
