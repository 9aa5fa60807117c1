"""What every answer path returns: the answer text, its citations and how sure the reader is, and the events
that stream it (:func:`.ask.answer_events`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

__all__ = ["AnswerResult", "AnswerSpanOut", "AnswerState", "CitationOut", "NOT_FOUND_PREFIX", "UNSURE_PREFIX",
           "AnswerMeta", "AnswerDelta", "AnswerDone", "AnswerEvent"]

NOT_FOUND_PREFIX = "Not found in"
UNSURE_PREFIX = "No direct answer found; passages that may help:"

AnswerState = Literal["answered", "unsure", "not_found"]
"""*answered*: the answer with its citations; *unsure*: no answer the reader would stand by, but passages
that may help (cited, ``found`` false); *not_found*: nothing relevant ("Not found in ...")."""


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
    """Extractive answers: the calibrated probability that the answer the reader would show holds the
    answer (0..1), which sets :attr:`state`. None where a model wrote the answer."""
    answer_spans: list[AnswerSpanOut] = field(default_factory=list)
    state: AnswerState | None = None
    """answered / unsure / not_found; left None it follows ``found`` (a model's answer is never unsure).
    ``found`` is true only for answered."""

    def __post_init__(self) -> None:
        if self.state is None:
            self.state = "answered" if self.found else "not_found"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(slots=True)
class AnswerMeta:
    """First event of a turn: who answers (``extractive`` or ``llm``); a ``notice``, when set, is shown first."""

    mode: str
    notice: str | None = None


@dataclass(slots=True)
class AnswerDelta:
    """Text of the answer as it is shown, in order (one delta for an extractive answer)."""

    text: str


@dataclass(slots=True)
class AnswerDone:
    """Last event of a turn: the verified result."""

    result: AnswerResult


AnswerEvent = AnswerMeta | AnswerDelta | AnswerDone
