"""Secrets out of everything written: the values of the API keys and retrieval tokens in use
are replaced wherever they appear (an error body from a gateway that echoes the key, an
exception message), in run files and in the lines the CLI prints."""

import threading

MIN_SECRET_LENGTH = 8  # shorter values would redact ordinary words


class Scrubber:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.secrets: dict[str, str] = {}  # value -> the name of its variable

    def add(self, name: str, value: str | None) -> None:
        if value and len(value) >= MIN_SECRET_LENGTH:
            with self.lock:
                self.secrets[value] = name

    def text(self, value: str) -> str:
        for secret, name in self.secrets.items():
            if secret in value:
                value = value.replace(secret, f"[{name} removed]")
        return value

    def bytes(self, value: bytes) -> bytes:
        for secret, name in self.secrets.items():
            encoded = secret.encode("utf-8")
            if encoded in value:
                value = value.replace(encoded, f"[{name} removed]".encode())
        return value


# One per process: every key a provider or retriever reads from the environment is added here.
SCRUBBER = Scrubber()
