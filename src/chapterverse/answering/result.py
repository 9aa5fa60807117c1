"""What every answer path returns: the answer text, its citations and how sure the reader is, and the events
that stream it (:func:`.ask.answer_events`).

One pydantic model, the same object in every front end: the CLI's ``ask --json`` prints it, the reader's ask
stream ends with it, a chat keeps it and sends it back, and the server's OpenAPI document describes it from here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..citations import Citation

__all__ = ["AnswerResult", "AnswerSpanOut", "AnswerState", "NOT_FOUND_PREFIX", "UNSURE_PREFIX",
           "AnswerMeta", "AnswerStatus", "AnswerDelta", "AnswerDone", "AnswerEvent"]

NOT_FOUND_PREFIX = "Not found in"
UNSURE_PREFIX = "No direct answer found; passages that may help:"

AnswerState = Literal["answered", "unsure", "not_found"]
"""*answered*: the answer with its citations; *unsure*: no answer the reader would stand by, but passages
that may help (cited, ``found`` false); *not_found*: nothing relevant ("Not found in ...")."""

_KEPT = ConfigDict(extra="allow")
"""Answers are kept with their chats and read back by later versions: fields added later have defaults, and
ones a later version retires pass through, so an old chat is sent back as it was stored."""


class AnswerSpanOut(BaseModel):
    """The most likely answer phrase inside a shown sentence: an exact sub-span, so it is a tag of its own."""

    model_config = _KEPT

    tag: str
    text: str
    citation: int = Field(description="The n of the citation (shown sentence) that contains it.")


class AnswerResult(BaseModel):
    """What every answer path returns (the reader's ``done`` event, kept with the chat): ``answer`` holds its kept
    tags inline."""

    model_config = _KEPT

    answer: str
    found: bool
    mode: str
    citations: list[Citation] = Field(default_factory=list)
    notice: str | None = None
    dropped_tags: list[dict[str, str]] = Field(default_factory=list,
                                               description="{tag, reason} of each tag removed.")
    unsupported_sentences: list[str] = Field(default_factory=list)
    supported_sentences: list[str] = Field(
        default_factory=list, description="A model's sentences with a citation that holds what they say.")
    unverified_quotes: list[str] = Field(default_factory=list)
    tool_calls: list[dict[str, Any]] = Field(default_factory=list)
    usage: dict[str, int] = Field(default_factory=dict)
    metadata: dict[str, Any] = Field(default_factory=dict)
    confidence: float | None = Field(
        default=None, description="Extractive answers: the calibrated probability that the answer the reader would "
                                  "show holds the answer (0..1), which sets state; null for a model's answer.")
    answer_spans: list[AnswerSpanOut] = Field(default_factory=list)
    state: AnswerState | None = Field(
        default=None, description="answered; unsure (no answer, but the cited passages may help; found is false); "
                          "not_found. Left out, it follows found (a model's answer is never unsure); null only "
                          "in chats stored before the field existed.")

    @model_validator(mode="after")
    def _state_follows_found(self) -> AnswerResult:
        """Fill a missing ``state`` from ``found``, as derived rather than given: an answer stored without it is
        still sent back without it (``exclude_unset``)."""
        if self.state is None:
            self.state = "answered" if self.found else "not_found"
            self.model_fields_set.discard("state")
        return self

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


@dataclass(slots=True)
class AnswerMeta:
    """First event of a turn: who answers (``extractive`` or ``llm``); a ``notice``, when set, is shown first."""

    mode: str
    notice: str | None = None


@dataclass(slots=True)
class AnswerStatus:
    """The step a model's turn is on, while nothing of its answer shows yet: a sign of life for the front end.

    ``step`` is one of ``model`` (waiting for the model), ``search`` (reading the source for it), ``write`` (the
    model writes the answer); ``text`` says it in words (``searching the book: whale``)."""

    step: str
    text: str


@dataclass(slots=True)
class AnswerDelta:
    """Text of the answer as it is shown, in order (one delta for an extractive answer)."""

    text: str


@dataclass(slots=True)
class AnswerDone:
    """Last event of a turn: the verified result."""

    result: AnswerResult


AnswerEvent = AnswerMeta | AnswerStatus | AnswerDelta | AnswerDone
