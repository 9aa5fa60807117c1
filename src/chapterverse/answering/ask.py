"""``ask``: one question answered the way ``chapterverse ask`` answers it, for Python callers.

With a model (``provider``), the model answers through retrieval tools and only tags seen in this turn's evidence
are kept; without one, or when the model fails, the answer is extractive: the source's own sentences. The events
a front end streams (``llm.agent.answer_events``) end in the same :class:`AnswerResult` this returns.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from .result import AnswerResult

if TYPE_CHECKING:
    from ..library import Library
    from ..llm.config import ProviderConfig

__all__ = ["ask"]


def ask(library: Library, question: str, *, doc_id: int | None = None, provider: ProviderConfig | None = None,
        history: Sequence[dict[str, str]] = ()) -> AnswerResult:
    """The answer to ``question`` about document ``doc_id`` (the whole library when None), with its citations."""
    from ..llm.agent import AnswerDone, AgentSettings, answer_events

    settings = AgentSettings(auto_summarize=False)
    for event in answer_events(library, question, doc_id=doc_id, provider=provider, history=history,
                               settings=settings):
        if isinstance(event, AnswerDone):
            return event.result
    raise AssertionError("answer_events always ends with AnswerDone")
