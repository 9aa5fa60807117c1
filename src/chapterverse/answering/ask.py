"""One answer turn, whoever answers it: the dispatcher the CLI, the web reader, the knowledge-base API's tool loop,
the benchmarks and Python's :func:`ask` all call.

Without a model (``provider`` None) the extractive reader answers: the source's own sentences (:mod:`.extractive`).
With one, the model answers through retrieval tools (:class:`.model_turn.ModelTurn`) and only tags seen in this turn's
evidence are kept. When the model fails (a :class:`ProviderError`, after the client's retries), the answer is
extractive after all, with a notice saying why; text the model had already shown stays shown, so the extractive
answer then arrives only in the result. The same happens when too little of the model's answer has a citation
that supports it (:func:`verified_enough`): its text is never shown as the answer. Every path streams the same events, :class:`AnswerMeta` first and
:class:`AnswerDone` last; :func:`ask` returns the result they end with.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING

from ..errors import ProviderError
from ..llm.limits import Deadline
from .extractive import extractive_answer
from .model_turn import AgentSettings, ModelTurn, too_late, turn_deadline
from .question import Question, as_question
from .result import AnswerDelta, AnswerDone, AnswerEvent, AnswerMeta, AnswerResult

if TYPE_CHECKING:
    from ..library import Library
    from ..llm.provider_config import ProviderConfig
    from ..llm.summaries import SummaryJobs

__all__ = ["ask", "answer_events", "extractive_ahead", "verified_enough", "FALLBACK_NOTICE", "UNVERIFIED_NOTICE", "MIN_SUPPORTED_SHARE"]

log = logging.getLogger(__name__)

FALLBACK_NOTICE = "The model could not answer ({error}); this is an extractive answer from the retrieved passages."
"""The notice of an answer the reader gave because the model failed; ``error`` is the model's error."""

UNVERIFIED_NOTICE = ("The model's answer could not be verified ({which} had a citation that supports it); this is an "
                     "extractive answer from the retrieved passages.")
"""The notice of an answer the reader gave because too little of the model's answer was supported; ``which``
says how much was: "none of its sentences", "only 1 of its 4 sentences"."""

MIN_SUPPORTED_SHARE = 0.5
"""Least share of a model's claims (sentences with a citation that supports them, and claims without one) that
must be supported for its text to stand as the answer; below it, and always when none is, the answer is the
extractive reader's (:func:`verified_enough`)."""


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


def answer_events(library: Library, question: str | Question, *, doc_id: int | None = None,
                  provider: ProviderConfig | None = None, selection: ProviderConfig | None = None,
                  history: Sequence[dict[str, str]] = (), settings: AgentSettings | None = None,
                  summary_jobs: SummaryJobs | None = None, started: float | None = None,
                  ahead: Future[AnswerResult] | None = None) -> Iterator[AnswerEvent]:
    """Answer ``question`` about one document (or the whole library when ``doc_id`` is None).

    ``question``: a text, or one read already (:func:`.question.as_question`); it is read once here and every
    path below (the reader, the model's turn, the extractive answer that replaces it) takes that reading.
    ``selection`` is the model that picks the segments worth reading (``provider`` when None), ``settings`` and
    ``summary_jobs`` the model agent's (:class:`.model_turn.AgentSettings`, the process's summary jobs when None).
    The model's deadline counts from ``started`` (``time.monotonic()``: when the question was given; now when
    None); an extractive answer that still ends past it says so in its notice. ``ahead`` is this question's
    extractive answer begun beforehand (:func:`extractive_ahead`): every extractive answer here is that one.
    """
    question = as_question(question, library.store.languages())
    if provider is None:
        yield AnswerMeta(mode="extractive")
        result = _extractive(library, question, doc_id, notice=None, ahead=ahead)
        yield AnswerDelta(result.answer)
        yield AnswerDone(result)
        return
    yield AnswerMeta(mode="llm")
    deadline = turn_deadline(provider, started)
    if deadline.passed:  # a slow start took the model's time: not even its client is made
        log.warning("the deadline passed before the model was asked, answering extractively")
        result = _extractive(library, question, doc_id, ahead=ahead,
                             notice=FALLBACK_NOTICE.format(error=too_late(deadline, provider.model)))
        yield AnswerDelta(result.answer)
        yield from _late(iter([AnswerDone(result)]), deadline)
        return
    turn = ModelTurn(library, question, doc_id, provider, selection=selection, history=history, settings=settings,
                     summary_jobs=summary_jobs, started=started)
    try:
        for event in turn.run():
            if isinstance(event, AnswerDone) and not verified_enough(event.result):
                yield from _late(_unverified(library, question, doc_id, event.result, shown=turn.shown,
                                             ahead=ahead), turn.deadline)
                return
            yield event
    except ProviderError as exc:
        log.warning("model failed, answering extractively: %s", exc)
        result = _extractive(library, question, doc_id, notice=FALLBACK_NOTICE.format(error=exc), ahead=ahead)
        if not turn.shown:
            yield AnswerDelta(result.answer)
        yield from _late(iter([AnswerDone(result)]), turn.deadline)


def _late(events: Iterator[AnswerEvent], deadline: Deadline) -> Iterator[AnswerEvent]:
    """``events``, their result's notice saying how far past ``deadline`` the extractive answer ended, if it
    did: it is given all the same (it is the source's own text), never silently late."""
    for event in events:
        if isinstance(event, AnswerDone) and deadline.elapsed > deadline.seconds:
            over = deadline.elapsed - deadline.seconds
            note = f"It ended {over:.1f} s past {deadline.describe()}."
            event.result.notice = f"{event.result.notice} {note}" if event.result.notice else note
        yield event


def verified_enough(result: AnswerResult) -> bool:
    """Whether a model's answer may stand as it is: it says the source does not hold the answer (``found``
    false), or at least one of its sentences, and MIN_SUPPORTED_SHARE of its claims, have a citation that
    supports them. Its unsupported sentences are then shown marked; otherwise the extractive reader answers."""
    if not result.found:
        return True
    supported = len(result.supported_sentences)
    claims = supported + len(result.unsupported_sentences)
    return supported > 0 and supported >= MIN_SUPPORTED_SHARE * claims


def _unverified(library: Library, question: Question, doc_id: int | None, model: AnswerResult, *,
                shown: bool, ahead: Future[AnswerResult] | None) -> Iterator[AnswerEvent]:
    """The extractive answer in place of a model's answer that could not be verified, saying so; the model's
    text and what the verifier found in it stay in ``metadata`` (``model_answer``, ``model_supported_sentences``,
    ``model_unsupported_sentences``, ``model_dropped_tags``).
    Text the model had shown stays shown, so the extractive answer then arrives only in the result."""
    supported = len(model.supported_sentences)
    claims = supported + len(model.unsupported_sentences)
    log.info("model answer not verified (%d of %d sentences supported), answering extractively", supported, claims)
    which = f"only {supported} of its {claims} sentences" if supported else "none of its sentences"
    notice = UNVERIFIED_NOTICE.format(which=which)
    result = _extractive(library, question, doc_id, notice=f"{model.notice} {notice}" if model.notice else notice,
                         ahead=ahead)
    result.metadata = {**result.metadata, **model.metadata, "model_answer": model.answer,
                       "model_supported_sentences": model.supported_sentences,
                       "model_unsupported_sentences": model.unsupported_sentences,
                       "model_dropped_tags": model.dropped_tags}
    if not shown:
        yield AnswerDelta(result.answer)
    yield AnswerDone(result)


def extractive_ahead(library: Library, question: str | Question, doc_id: int | None) -> Future[AnswerResult]:
    """Begin the extractive answer to ``question`` in the background, for :func:`answer_events`'s ``ahead``:
    a model's turn cut at its deadline then gives way to an answer that is ready (or nearly), and the embedding
    model, the indexes and the imports it needs load while the model is asked, not after it was stopped."""
    future: Future[AnswerResult] = Future()

    def run() -> None:
        try:
            future.set_result(_extractive(library, question, doc_id, notice=None))
        except BaseException as exc:  # handed to whoever takes the answer, where it is reported
            future.set_exception(exc)

    threading.Thread(target=run, name="extractive-ahead", daemon=True).start()
    return future


def _extractive(library: Library, question: str | Question, doc_id: int | None, notice: str | None,
                ahead: Future[AnswerResult] | None = None) -> AnswerResult:
    """The extractive reader's answer, scoped to the document (named in "Not found in ...") when there is one;
    ``ahead``'s when it was begun beforehand."""
    if ahead is not None:
        result = ahead.result()
        result.notice = notice
        return result
    scope = library.document(doc_id).title if doc_id is not None else None
    result = extractive_answer(library, question, doc_ids=[doc_id] if doc_id is not None else None,
                               scope_title=scope)
    result.notice = notice
    return result
