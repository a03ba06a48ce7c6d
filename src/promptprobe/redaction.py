"""Secrets out of everything written: the values of the API keys and retrieval tokens in use are
replaced wherever they appear (an error body from a gateway that echoes the key, an exception
message, a model that repeats it), in run files, exports and the lines the CLI prints.

Each secret is searched in every form a server or a client commonly gives it: as it is,
JSON-escaped (`\\/` for `/`, `\\uXXXX` for any character, letters included, escaped again
when a JSON text sits inside another), URL-encoded (`%XX` for any byte, in either case, `+` for
a space), any mix of these character by character, and base64-encoded (standard and URL-safe,
at each of the three alignments a secret can have inside a longer base64 text, as in an
`Authorization: Basic` header, and broken into lines anywhere, as MIME and PEM do), hex-encoded
(its UTF-8 bytes, either case), upper-, lower- or mixed-cased, reversed, and broken by line breaks
anywhere (as written, reversed or in hex). Scrub first, then cut: a snippet is taken from text
already scrubbed, so no cut can leave half a secret.

A JSON or server-sent-events body is also checked after scrubbing by decoding it: if a secret
can still be read from it (a streamed answer that spelled the key across several events), the
body is withheld rather than written (`clean_body`).
"""

import base64
import builtins
import json
import re
import threading
from typing import Any

MIN_SECRET_LENGTH = 8  # shorter values would redact ordinary words


# JSON escapes may be escaped again (a body kept as a JSON string: `\\u002d`), so any run of
# backslashes introduces one.
ESCAPE = r"\\\\*"
# Where base64 may be broken into lines (MIME's 76 columns, PEM's 64): a line break as written, or
# JSON-escaped.
WRAP = r"(?:\r?\n|(?:\\+r)?\\+n)?"


def _char_pattern(char: str) -> str:
    """A character as written, JSON-escaped (\\uXXXX in either case, \\/ for a slash) or
    URL-encoded (%XX in either case, + for a space): every character may be written either way,
    letters and digits included (`\\u0073\\u006b` is `sk`, so is `%73%6B`)."""
    options = {re.escape(char)}
    code = ord(char)
    if code < 0x10000:
        options.add(f"{ESCAPE}u(?i:{code:04x})")
    else:  # a surrogate pair
        high, low = 0xD800 + ((code - 0x10000) >> 10), 0xDC00 + ((code - 0x10000) & 0x3FF)
        options.add(f"{ESCAPE}u(?i:{high:04x}){ESCAPE}u(?i:{low:04x})")
    if char == "/":
        options.add(f"{ESCAPE}/")
    if char == " ":
        options.add(r"\+")
    options.add("".join(f"%(?i:{byte:02x})" for byte in char.encode("utf-8")))
    return "(?:" + "|".join(sorted(options)) + ")"


def _base64_forms(secret: str) -> set[str]:
    """The base64 text of the secret at each alignment, without the edge characters that depend
    on the bytes around it."""
    data = secret.encode("utf-8")
    forms = set()
    for offset in range(3):
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            text = encode(b"\0" * offset + data).decode("ascii").rstrip("=")
            start = (offset * 4 + 2) // 3  # characters carrying only (some of) the prefix
            end = ((offset + len(data)) * 4) // 3  # characters fully inside the secret's bytes
            core = text[start:end]
            if len(core) >= MIN_SECRET_LENGTH:
                forms.add(core)
    return forms


def _hex_form(secret: str) -> str:
    return secret.encode("utf-8").hex()


def pattern_of(secret: str) -> str:
    """A regular expression matching every written form of a secret: as is, JSON-escaped,
    URL-encoded, character by character in any mix, in any case, reversed, hex-encoded (either
    case) and base64 at any alignment, each broken into lines anywhere or not."""
    written = "(?i:" + WRAP.join(_char_pattern(c) for c in secret) + ")"
    backwards = "(?i:" + WRAP.join(_char_pattern(c) for c in reversed(secret)) + ")"
    hexed = "(?i:" + WRAP.join(_hex_form(secret)) + ")"
    encoded = [
        WRAP.join(re.escape(c) for c in form) for form in sorted(_base64_forms(secret), key=len, reverse=True)
    ]
    return "|".join([written, backwards, hexed, *encoded])


# The escapes of printable ASCII (the secrets the prefilter serves are ASCII): `\\u0073`, `%73`, `\\/`.
ESCAPED = re.compile(r"\\\\*u00([2-7][0-9a-fA-F])|%([2-7][0-9a-fA-F])|\\\\*(/)")


def _unescaped(match: re.Match[str]) -> str:
    hexa, percent, slash = match.groups()
    return slash or chr(int(hexa or percent, 16))


def _unwrapped(value: str) -> str:
    """The text without line breaks, as written or JSON-escaped (str.replace: ten times faster
    than a pattern), and without backslashes, which base64 never holds."""
    for piece in ("\r", "\n", "\\r", "\\n", "\\"):
        value = value.replace(piece, "")
    return value


class Prefilter:
    """A fast test that a text cannot hold any form of the secrets, so that the full pattern (an
    alternation at every character, ten times slower) runs only on the rare text that might.

    The escapes are decoded (cheap: ordinary text has few) and line breaks dropped, then the
    middle of each secret (in lower case, forwards, backwards and in hex, in the lower-cased
    text), and of each of its base64 forms (as it is), is looked for: an escape that begins before
    a secret's written form can swallow at most its first few characters, and one that ends after
    it its last few, so the middle is always there.
    Secrets holding a character the decoding itself would change (`%`, `\\`, `+`, a space, or
    anything not ASCII), or too short to have a middle of 8, are not filtered: every text goes
    to the full pattern."""

    def __init__(self, secrets: list[str]) -> None:
        self.always = any(
            len(s) < 16 or not s.isascii() or any(c in s for c in "%\\+ ") for s in secrets
        )
        exact = {secret[4:-4] for secret in secrets}
        middles = {m.lower() for m in exact} | {m.lower()[::-1] for m in exact}
        middles |= {_hex_form(m) for m in exact}
        encoded = {form[2:-2] for secret in secrets for form in _base64_forms(secret)}
        self.written = re.compile("|".join(re.escape(m) for m in sorted(middles, key=len, reverse=True)))
        self.encoded = re.compile("|".join(re.escape(e) for e in sorted(encoded, key=len, reverse=True)))

    def possible(self, value: str) -> bool:
        if self.always:
            return True
        unwrapped = _unwrapped(value)
        decoded = ESCAPED.sub(_unescaped, value) if "\\" in value or "%" in value else value
        if self.written.search(_unwrapped(decoded).lower() if decoded is not value else unwrapped.lower()):
            return True
        return self.encoded.search(unwrapped) is not None


class Scrubber:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.secrets: dict[str, str] = {}  # value -> the name of its variable
        self.short: dict[str, str] = {}  # too short to scrub: name -> value, for a warning
        self._pattern: re.Pattern[str] | None = None
        self._order: list[str] = []  # the secret names, in the order of the pattern's groups
        self._quick: Prefilter | None = None

    def add(self, name: str, value: str | None) -> None:
        if not value:
            return
        with self.lock:
            if len(value) < MIN_SECRET_LENGTH:
                self.short[name] = value
                return
            if value in self.secrets:
                return
            self.secrets[value] = name
            # One group per secret, longest first, so a match names the secret it found.
            ordered = sorted(self.secrets, key=len, reverse=True)
            self._order = [self.secrets[secret] for secret in ordered]
            self._pattern = re.compile("|".join(f"({pattern_of(secret)})" for secret in ordered))
            self._quick = Prefilter(ordered)

    def known(self) -> dict[str, str]:
        """The secrets scrubbed now (value -> the name of its variable), for a worker process to
        scrub its own messages with before it cuts them."""
        with self.lock:
            return dict(self.secrets)

    def take_warnings(self) -> list[str]:
        """One line per secret too short to be scrubbed reliably, each said once."""
        with self.lock:
            short, self.short = self.short, {}
        return [
            f"{name} is shorter than {MIN_SECRET_LENGTH} characters: it cannot be scrubbed reliably from run "
            "files and exports (every word that matches it would be removed too)"
            for name in sorted(short)
        ]

    def text(self, value: str) -> str:
        pattern, quick = self._pattern, self._quick
        if pattern is None or (quick is not None and not quick.possible(value)):
            return value
        return pattern.sub(lambda m: f"[{self._order[(m.lastindex or 1) - 1]} removed]", value)

    def bytes(self, value: bytes) -> bytes:
        if self._pattern is None:
            return value
        # Bytes that are not UTF-8 are scrubbed byte for byte (each invalid byte kept as is).
        text = value.decode("utf-8", "surrogateescape")
        scrubbed = self.text(text)
        return value if scrubbed == text else scrubbed.encode("utf-8", "surrogateescape")

    def found_in(self, value: str) -> bool:
        pattern, quick = self._pattern, self._quick
        if pattern is None or (quick is not None and not quick.possible(value)):
            return False
        return pattern.search(value) is not None

    def clean_body(
        self, body: builtins.bytes, text: str | None = None
    ) -> tuple[builtins.bytes | None, str | None]:
        """(the scrubbed body, None), or (None, why) when a secret can still be read from it once
        decoded, or when the answer `text` held a secret and the body is a stream that carried it
        in pieces (each piece too short to recognise)."""
        scrubbed = self.bytes(body)
        if self._pattern is None:
            return scrubbed, None
        decoded_text = scrubbed.decode("utf-8", "replace")
        decoded = _decoded_strings(decoded_text)
        if any(self.found_in(value) for value in decoded):
            return None, "a secret could still be read from it after scrubbing"
        if text is not None and self.found_in(text) and _is_stream(decoded_text):
            return None, "a secret was spelled across several stream events"
        return scrubbed, None


def _is_stream(text: str) -> bool:
    return any(line.startswith(("data:", "event:")) for line in text.splitlines()[:5])


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def _decoded_strings(text: str) -> list[str]:
    """The string values of a JSON document, or of each `data:` event of a server-sent stream."""
    documents = []
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")):
        documents.append(stripped)
    else:
        documents += [line[5:].strip() for line in text.splitlines() if line.startswith("data:")]
    values: list[str] = []
    for document in documents:
        try:
            values += _strings(json.loads(document))
        except ValueError:
            continue  # not JSON: the byte forms above are all there is to check
    return values


# One per process: every key a provider or retriever reads from the environment is added here.
SCRUBBER = Scrubber()
