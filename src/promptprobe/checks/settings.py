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
class JudgeConfig:
    """A judged check ([[check]] kind = "judge"): a model grades each output against a rubric.
    The rubric's exact text and sha256 are kept here, so that a run or a classification layer
    records what its judgments were asked with."""

    name: str
    model: str  # a spec, or the NAME of one of the run's models
    rubric: str  # the file as given
    rubric_text: str
    pass_label: str
    fail_label: str
    repeats: int = 1
    labels_file: str | None = None  # hand labels (CSV), relative to the config's folder
    description: str = ""

    @property
    def rubric_sha256(self) -> str:
        import hashlib

        return hashlib.sha256(self.rubric_text.encode("utf-8")).hexdigest()

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": "judge",
            "model": self.model,
            "rubric": self.rubric,
            "rubric_sha256": self.rubric_sha256,
            "rubric_text": self.rubric_text,
            "labels": {"pass": self.pass_label, "fail": self.fail_label},
            "repeats": self.repeats,
            "labels_file": self.labels_file,
            "description": self.description,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "JudgeConfig":
        labels = data.get("labels") or {}
        return cls(
            data["name"],
            data["model"],
            data.get("rubric", ""),
            data.get("rubric_text", ""),
            labels.get("pass", "PASS"),
            labels.get("fail", "FAIL"),
            int(data.get("repeats", 1)),
            data.get("labels_file"),
            data.get("description", ""),
        )


@dataclass(frozen=True)
class CheckSettings:
    header: HeaderConfig = field(default_factory=HeaderConfig)
    filter: FilterConfig | None = None
    citations: CitationConfig | None = None
    top_k: int | None = None  # retrieval_hit counts an expected id only within the first K
    user: tuple[UserCheckConfig, ...] = ()  # [[check]]: checks of the user's own
    judges: tuple[JudgeConfig, ...] = ()  # [[check]] kind = "judge": checks a model grades

    def to_dict(self) -> dict[str, Any]:
        return {
            "header": self.header.to_dict(),
            "filter": self.filter.to_dict() if self.filter else None,
            "citations": self.citations.to_dict() if self.citations else None,
            "top_k": self.top_k,
            **({"user": [c.to_dict() for c in self.user]} if self.user else {}),
            **({"judges": [c.to_dict() for c in self.judges]} if self.judges else {}),
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
            judges=tuple(JudgeConfig.from_dict(c) for c in data.get("judges") or ()),
        )

    def judge(self, name: str) -> JudgeConfig | None:
        return next((j for j in self.judges if j.name == name), None)

    def functions(self) -> list[str]:
        """The production functions (`module:function`) these checks call."""
        return ([self.filter.function] if self.filter else []) + [c.function for c in self.user]

    def with_top_k(self, top_k: int | None) -> "CheckSettings":
        return self if top_k is None else replace(self, top_k=top_k)
