"""One answer turn, whoever answers it: the dispatcher the CLI, the web reader, the knowledge-base API's tool loop,
the benchmarks and Python's :func:`ask` all call.

Without a model (``provider`` None) the extractive reader answers: the source's own sentences (:mod:`.extractive`).
With one, the model answers through retrieval tools (:class:`.model_turn.ModelTurn`) and only tags seen in this turn's
evidence are kept. When the model fails (a :class:`ProviderError`, after the client's retries), the answer is
extractive after all, with a notice saying why; text the model had already shown stays shown, so the extractive
answer then arrives only in the result. Every path streams the same events, :class:`AnswerMeta` first and
:class:`AnswerDone` last; :func:`ask` returns the result they end with.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from ..errors import ProviderError
from .extractive import extractive_answer
from .model_turn import AgentSettings, ModelTurn
from .result import AnswerDelta, AnswerDone, AnswerEvent, AnswerMeta, AnswerResult

if TYPE_CHECKING:
    from ..library import Library
    from .model_turn import AgentSettings
    from ..llm.provider_config import ProviderConfig
    from ..llm.summaries import SummaryJobs

__all__ = ["ask", "answer_events", "FALLBACK_NOTICE"]

log = logging.getLogger(__name__)

FALLBACK_NOTICE = "The model could not answer ({error}); this is an extractive answer from the retrieved passages."
"""The notice of an answer the reader gave because the model failed; ``error`` is the model's error."""


def ask(library: Library, question: str, *, doc_id: int | None = None, provider: ProviderConfig | None = None,
        history: Sequence[dict[str, str]] = ()) -> AnswerResult:
    """The answer to ``question`` about document ``doc_id`` (the whole library when None), with its citations.

    No summary job is started for the document: a call that returns its answer would cut one off mid-way, and
    a benchmark's answers (``bench answers`` asks through here) would depend on how far background jobs had got."""
    settings = AgentSettings(auto_summarize=False)
    for event in answer_events(library, question, doc_id=doc_id, provider=provider, history=history,
                               settings=settings):
        if isinstance(event, AnswerDone):
            return event.result
    raise AssertionError("answer_events always ends with AnswerDone")


def answer_events(library: Library, question: str, *, doc_id: int | None = None,
                  provider: ProviderConfig | None = None, selection: ProviderConfig | None = None,
                  history: Sequence[dict[str, str]] = (), settings: AgentSettings | None = None,
                  summary_jobs: SummaryJobs | None = None) -> Iterator[AnswerEvent]:
    """Answer ``question`` about one document (or the whole library when ``doc_id`` is None).

    ``selection`` is the model that picks the segments worth reading (``provider`` when None), ``settings`` and
    ``summary_jobs`` the model agent's (:class:`.model_turn.AgentSettings`, the process's summary jobs when None).
    """
    if provider is None:
        yield AnswerMeta(mode="extractive")
        result = _extractive(library, question, doc_id, notice=None)
        yield AnswerDelta(result.answer)
        yield AnswerDone(result)
        return
    yield AnswerMeta(mode="llm")
    turn = ModelTurn(library, question, doc_id, provider, selection=selection, history=history, settings=settings,
                     summary_jobs=summary_jobs)
    try:
        yield from turn.run()
    except ProviderError as exc:
        log.warning("model failed, answering extractively: %s", exc)
        result = _extractive(library, question, doc_id, notice=FALLBACK_NOTICE.format(error=exc))
        if not turn.shown:
            yield AnswerDelta(result.answer)
        yield AnswerDone(result)


def _extractive(library: Library, question: str, doc_id: int | None, notice: str | None) -> AnswerResult:
    """The extractive reader's answer, scoped to the document (named in "Not found in ...") when there is one."""
    scope = library.document(doc_id).title if doc_id is not None else None
    result = extractive_answer(library, question, doc_ids=[doc_id] if doc_id is not None else None,
                               scope_title=scope)
    result.notice = notice
    return result
