"""What every answer path returns: the answer text, its citations and how sure the reader is."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["AnswerResult", "AnswerSpanOut", "CitationOut", "NOT_FOUND_PREFIX"]

NOT_FOUND_PREFIX = "Not found in"


@dataclass(slots=True)
class CitationOut:
    n: int
    tag: str
    doc_id: int
    doc_title: str
    text: str
    toc_path: list[str] = field(default_factory=list)
    file: int = 0
    start: int = 0
    end: int = 0


@dataclass(slots=True)
class AnswerSpanOut:
    """The most likely answer phrase inside a shown sentence: an exact sub-span, so it is a tag of its own."""

    tag: str
    text: str
    citation: int
    """The ``n`` of the citation (shown sentence) that contains it."""


@dataclass(slots=True)
class AnswerResult:
    """What every answer path returns; its JSON is the CLI's ``ask --json`` and the server's ``done`` event."""

    answer: str
    found: bool
    mode: str
    citations: list[CitationOut] = field(default_factory=list)
    notice: str | None = None
    dropped_tags: list[dict[str, str]] = field(default_factory=list)
    unsupported_sentences: list[str] = field(default_factory=list)
    unverified_quotes: list[str] = field(default_factory=list)
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    usage: dict[str, int] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    confidence: float | None = None
    """Extractive answers: the calibrated probability that the shown sentences answer the question (0..1);
    ``found`` is ``confidence >= 0.5``. None where a model wrote the answer."""
    answer_spans: list[AnswerSpanOut] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)
