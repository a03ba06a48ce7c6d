"""What the checks are configured with: header markers, production's filter, the citation
pattern and the retrieval top-k. Recorded in the manifest and in each reclassification."""

import re
from dataclasses import dataclass, field, replace
from typing import Any

from ..errors import InputError

DEFAULT_MARKERS = ("[[ANSWER]]", "[[NO_ANSWER]]")
DEFAULT_NO_ANSWER = "[[NO_ANSWER]]"
DEFAULT_CITATION_PATTERN = r"\[(\d+)\]"
DEFAULT_CHECK_TIMEOUT = 30.0  # seconds a [[check]] function may take on one sample


@dataclass(frozen=True)
class HeaderConfig:
    markers: tuple[str, ...] = DEFAULT_MARKERS
    no_answer: str = DEFAULT_NO_ANSWER
    allow_leading_whitespace: bool = False

    def __post_init__(self) -> None:
        if not self.markers or any(not isinstance(m, str) or not m for m in self.markers):
            raise InputError("header markers must be a non-empty list of non-empty strings")
        if self.no_answer not in self.markers:
            raise InputError(
                f"header no_answer {self.no_answer!r} is not one of the markers {list(self.markers)}"
            )

    def to_dict(self) -> dict[str, Any]:
        return {
            "markers": list(self.markers),
            "no_answer": self.no_answer,
            "allow_leading_whitespace": self.allow_leading_whitespace,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> "HeaderConfig":
        data = data or {}
        return cls(
            markers=tuple(data.get("markers", DEFAULT_MARKERS)),
            no_answer=data.get("no_answer", DEFAULT_NO_ANSWER),
            allow_leading_whitespace=bool(data.get("allow_leading_whitespace", False)),
        )


@dataclass(frozen=True)
class FilterConfig:
    """Production's own post-filter: f(raw_text) -> {"text", "status"} or (text, status)."""

    function: str
    no_answer_status: str = "no_answer"

    def to_dict(self) -> dict[str, Any]:
        return {"function": self.function, "no_answer_status": self.no_answer_status}


@dataclass(frozen=True)
class CitationConfig:
    """Citations like [2]: the pattern's first group is the passage number (1-based)."""

    pattern: str = DEFAULT_CITATION_PATTERN

    def __post_init__(self) -> None:
        try:
            compiled = re.compile(self.pattern)
        except re.error as exc:
            raise InputError(f"[citations] pattern {self.pattern!r} is not a valid regex ({exc})") from None
        if compiled.groups < 1:
            raise InputError(f"[citations] pattern {self.pattern!r} needs a group around the number")

    def to_dict(self) -> dict[str, Any]:
        return {"pattern": self.pattern}


@dataclass(frozen=True)
class UserCheckConfig:
    name: str
    function: str  # module:function
    higher_is_better: bool = True
    description: str = ""
    timeout: float = DEFAULT_CHECK_TIMEOUT  # seconds per sample; past it the call is stopped

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "function": self.function,
            "higher_is_better": self.higher_is_better,
            "description": self.description,
            "timeout": self.timeout,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "UserCheckConfig":
        return cls(
            data["name"],
            data["function"],
            bool(data.get("higher_is_better", True)),
            data.get("description", ""),
            float(data.get("timeout", DEFAULT_CHECK_TIMEOUT)),
        )


@dataclass(frozen=True)
class CheckSettings:
    header: HeaderConfig = field(default_factory=HeaderConfig)
    filter: FilterConfig | None = None
    citations: CitationConfig | None = None
    top_k: int | None = None  # retrieval_hit counts an expected id only within the first K
    user: tuple[UserCheckConfig, ...] = ()  # [[check]]: checks of the user's own

    def to_dict(self) -> dict[str, Any]:
        return {
            "header": self.header.to_dict(),
            "filter": self.filter.to_dict() if self.filter else None,
            "citations": self.citations.to_dict() if self.citations else None,
            "top_k": self.top_k,
            **({"user": [c.to_dict() for c in self.user]} if self.user else {}),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> "CheckSettings":
        data = data or {}
        filter_data = data.get("filter")
        citations = data.get("citations")
        return cls(
            header=HeaderConfig.from_dict(data.get("header")),
            filter=FilterConfig(**filter_data) if filter_data else None,
            citations=CitationConfig(**citations) if citations else None,
            top_k=data.get("top_k"),
            user=tuple(UserCheckConfig.from_dict(c) for c in data.get("user") or ()),
        )

    def functions(self) -> list[str]:
        """The production functions (`module:function`) these checks call."""
        return ([self.filter.function] if self.filter else []) + [c.function for c in self.user]

    def with_top_k(self, top_k: int | None) -> "CheckSettings":
        return self if top_k is None else replace(self, top_k=top_k)
