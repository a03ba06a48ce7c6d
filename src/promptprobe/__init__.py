"""promptprobe: probe a retrieval-augmented chat system's prompt versions and models."""

__version__ = "0.1.0"
