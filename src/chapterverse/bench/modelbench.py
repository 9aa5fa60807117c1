"""A model's answers beside the extractive reader's, question by question in one run (``bench answers --llm-...``).

Each planned question is asked twice through :func:`chapterverse.answering.ask.ask`, the ``ask`` command's path:
by the extractive reader and by the model, in alternating order (so load that comes and goes falls on both). Per
answerer: how many answerable questions were **answered**, how many of those answers hold a gold answer (sets
with gold answer texts) and how many are **verified**
(:func:`answer_verified`, the one rule), the **unsupported sentences** of the answers shown and how many answers
have one, the
**fallbacks** (the model failed and the extractive reader answered), absent questions answered, and the p50 and
p95 time of an answer.

Sets: any of ``bench answers``'s, and :func:`kb_answer_set`, the generated knowledge base of ``bench kb`` (two
shops' orders, customers, products and FAQ), whose questions name no document and are asked of the whole library.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..answering import AnswerResult
from ..answering.ask import ask
from ..chunking import sentence_spans
from ..citations import strip_tags
from ..library import Library, Progress
from ..llm.provider_config import ProviderConfig
from ..sources.base import ParsedDocument, ParsedFile
from .answers import AnswerQuestion, AnswerSet, holds_gold, percentile, plan_questions, sample_questions
from .kbdata import kb_set
from .retrieval import BenchDocument

__all__ = ["EXTRACTIVE", "KB_SET", "ComparedAnswer", "ComparisonRow", "answer_verified", "kb_answer_set",
           "compare_answers", "comparison_rows"]

EXTRACTIVE = "extractive"
KB_SET = "kb"
"""The name of :func:`kb_answer_set`'s set, whose questions are asked of the whole library."""


def answer_verified(result: AnswerResult) -> bool:
    """Whether an answer counts as verified: answered, citing at least one span, every sentence that claims
    something cited. Its citations are verified already: only spans that resolve to stored text and were
    retrieved in this turn survive (``citations.verify_answer``; the extractive reader cites its own sentences)."""
    return result.state == "answered" and bool(result.citations) and not result.unsupported_sentences


def kb_answer_set() -> AnswerSet:
    """The knowledge base of ``bench kb`` as an answer set: each record a document titled by its source path,
    each question asked of the whole library; a question no record answers is absent. Its answerable questions
    carry their key (``"456"``, ``"PRD-204"``) as their only gold: what singles the answering record out."""
    data = kb_set()
    documents = [BenchDocument(doc.source, ParsedDocument(title=doc.source, format="text",
                                                          files=[ParsedFile(doc.text, title=doc.source)]))
                 for doc in data.documents]
    questions = [AnswerQuestion(q.id, q.text, q.gold[0] if q.gold else data.documents[0].source,
                                () if q.via == "none" else (q.key,))
                 for q in data.questions]
    return AnswerSet(KB_SET, documents, questions)


@dataclass(frozen=True, slots=True)
class ComparedAnswer:
    """One question as one answerer answered it."""

    question: AnswerQuestion
    answerer: str
    """``extractive``, or the model's name."""
    state: str
    verified: bool
    sentences: int
    unsupported: int
    fallback: bool
    ms: float
    right: bool | None
    """The answer holds a gold answer; None where the set has no gold answer texts (the knowledge base's)."""

    def to_json(self) -> dict[str, Any]:
        return {"id": self.question.id, "answerer": self.answerer, "absent": self.question.absent,
                "state": self.state, "verified": self.verified, "right": self.right, "sentences": self.sentences,
                "unsupported": self.unsupported, "fallback": self.fallback, "ms": round(self.ms, 1)}


def _compared(question: AnswerQuestion, answerer: str, result: AnswerResult, ms: float,
              gold: bool) -> ComparedAnswer:
    shown = strip_tags(result.answer).strip() if result.state == "answered" else ""
    return ComparedAnswer(question, answerer, str(result.state), answer_verified(result),
                          len(sentence_spans(shown)), len(result.unsupported_sentences) if shown else 0,
                          answerer != EXTRACTIVE and result.mode != "llm", ms,
                          bool(shown) and holds_gold(shown, question.answers) if gold else None)


def _plan(answer_set: AnswerSet, doc_ids: dict[str, int], limit: int | None,
          seed: int) -> list[tuple[AnswerQuestion, int | None]]:
    """(question, the document it is asked of, None for the whole library)."""
    if answer_set.name == KB_SET:
        return [(q, None) for q in sample_questions(answer_set.questions, limit, seed)]
    return [(q, doc_ids[q.source] if scope == "document" else None)
            for q, scope in plan_questions(answer_set, limit, seed) if q.source in doc_ids]


def compare_answers(answer_set: AnswerSet, library: Library, doc_ids: dict[str, int], provider: ProviderConfig, *,
                    limit: int | None = None, seed: int = 0,
                    progress: Progress | None = None) -> list[ComparedAnswer]:
    """Every planned question asked by the extractive reader and by the model (alternating which goes first),
    after one untimed question each (loading the embedder and the indexes, the model's first prompt)."""
    plan = _plan(answer_set, doc_ids, limit, seed)
    answerers: list[tuple[str, ProviderConfig | None]] = [(EXTRACTIVE, None), (provider.model, provider)]
    if plan:
        for _, config in answerers:
            ask(library, plan[0][0].text, doc_id=plan[0][1], provider=config)
    answers: list[ComparedAnswer] = []
    for number, (question, doc_id) in enumerate(plan):
        if progress:
            progress(f"asking {answer_set.name}", number, len(plan))
        for name, config in answerers if number % 2 == 0 else reversed(answerers):
            started = time.perf_counter()
            result = ask(library, question.text, doc_id=doc_id, provider=config)
            answers.append(_compared(question, name, result, (time.perf_counter() - started) * 1000,
                                     gold=answer_set.name != KB_SET))
    if progress:
        progress(f"asking {answer_set.name}", len(plan), len(plan))
    return answers


@dataclass(frozen=True, slots=True)
class ComparisonRow:
    """One answerer's figures over one set."""

    answerer: str
    questions: int
    absent: int
    answered: float
    """Share of the answerable questions answered."""
    right: float | None
    """Share of the answerable questions whose answer holds a gold answer; None without gold texts."""
    verified: float
    """Share of the answerable questions answered with a verified answer (:func:`answer_verified`)."""
    unsupported: int
    """Unsupported sentences (claims with no citation) in the answers shown."""
    with_unsupported: int
    shown: int
    """Answers shown (answered), and how many of them have an unsupported sentence."""
    fallbacks: int
    absent_answered: float | None
    ms_p50: float
    ms_p95: float

    def to_json(self) -> dict[str, Any]:
        return {"answerer": self.answerer, "questions": self.questions, "absent": self.absent,
                "answered": round(self.answered, 4), "right": None if self.right is None else round(self.right, 4),
                "verified": round(self.verified, 4),
                "unsupported_sentences": self.unsupported, "answers_with_unsupported": self.with_unsupported,
                "answers_shown": self.shown, "fallbacks": self.fallbacks,
                "absent_answered": None if self.absent_answered is None else round(self.absent_answered, 4),
                "ms_p50": round(self.ms_p50, 1), "ms_p95": round(self.ms_p95, 1)}


def _share(flags: Sequence[bool]) -> float:
    return sum(flags) / len(flags) if flags else 0.0


def comparison_rows(answers: Sequence[ComparedAnswer]) -> list[ComparisonRow]:
    """One row per answerer, in the order they first answered."""
    rows = []
    for answerer in dict.fromkeys(a.answerer for a in answers):
        mine = [a for a in answers if a.answerer == answerer]
        answerable = [a for a in mine if not a.question.absent]
        absent = [a for a in mine if a.question.absent]
        times = [a.ms for a in mine]
        rows.append(ComparisonRow(
            answerer, len(answerable), len(absent),
            answered=_share([a.state == "answered" for a in answerable]),
            right=None if any(a.right is None for a in answerable) else _share([bool(a.right) for a in answerable]),
            verified=_share([a.verified for a in answerable]),
            unsupported=sum(a.unsupported for a in mine), with_unsupported=sum(a.unsupported > 0 for a in mine),
            shown=sum(a.state == "answered" for a in mine),
            fallbacks=sum(a.fallback for a in mine),
            absent_answered=_share([a.state == "answered" for a in absent]) if absent else None,
            ms_p50=statistics.median(times) if times else 0.0, ms_p95=percentile(times, 0.95)))
    return rows
