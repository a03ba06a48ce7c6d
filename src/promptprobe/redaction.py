"""Secrets out of everything written: the values of the API keys and retrieval tokens in use are
replaced wherever they appear (an error body from a gateway that echoes the key, an exception
message, a model that repeats it), in run files, exports and the lines the CLI prints.

Each secret is searched in every form a server or a client commonly gives it: as it is,
JSON-escaped (`\\/` and `\\u002f` for `/`, `\\uXXXX` for any character), URL-encoded (`%2F`,
`+` for a space) and base64-encoded (standard and URL-safe, at each of the three alignments a
secret can have inside a longer base64 text, as in an `Authorization: Basic` header). Scrub first,
then cut: a snippet is taken from text already scrubbed, so no cut can leave half a secret.

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


def _char_pattern(char: str) -> str:
    """A character as written, JSON-escaped (\\uXXXX in either case, \\/ for a slash) or
    URL-encoded (%XX in either case, + for a space)."""
    if char.isalnum() and char.isascii():
        return re.escape(char)
    options = {re.escape(char)}
    code = ord(char)
    if code < 0x10000:
        options.add(f"\\\\u(?i:{code:04x})")
    if char == "/":
        options.add(r"\\/")
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


def pattern_of(secret: str) -> str:
    """A regular expression matching every written form of a secret."""
    written = "".join(_char_pattern(c) for c in secret)
    encoded = [re.escape(form) for form in sorted(_base64_forms(secret), key=len, reverse=True)]
    return "|".join([written, *encoded])


class Scrubber:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.secrets: dict[str, str] = {}  # value -> the name of its variable
        self.short: dict[str, str] = {}  # too short to scrub: name -> value, for a warning
        self._pattern: re.Pattern[str] | None = None
        self._order: list[str] = []  # the secret names, in the order of the pattern's groups

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
        pattern = self._pattern
        if pattern is None:
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
        return self._pattern is not None and self._pattern.search(value) is not None

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
