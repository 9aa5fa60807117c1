"""Training groups for the reading model: a question with the sentences of its document that answer it and
the ones that only look as if they might.

Each :class:`Group` is one question and up to :data:`GROUP_SIZE` sentences of its own document. An
answerable group's first sentence holds the gold answer (inside the gold evidence where the set marks it);
the others are the document's sentences that share the most of the question's words without holding the
answer, and a couple drawn at random. An absent group asks the question of the sentences sharing its words
outside its evidence: a book knows the question's people and places but does not say the answer, which is
what makes a reader that only counts shared words sure of a wrong answer.

The sentences are the ones the chunker cuts (:func:`chapterverse.chunking.sentences.sentence_spans`), so the
model learns on what it is shown at run time.

:func:`reader_groups` makes groups of another kind, from the extractive reader's own readings (what ``bench
fit-answers`` collects): the gold sentence against the candidates the reader ranks best without holding the
answer, the confusions a second stage over the reader would have to undo.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from chapterverse.analysis import content_words
from chapterverse.answering.model import ReaderModel
from chapterverse.chunking.sentences import sentence_spans
from chapterverse.bench.answers import AnswerQuestion, AnswerSet, holds_gold
from .fit_answers import TrainingData

__all__ = ["GROUP_SIZE", "Group", "groups_of", "reader_groups"]

GROUP_SIZE = 8
"""Sentences per answerable group: the gold one, :data:`HARD` word-sharing ones and the rest at random."""
HARD = 5
MAX_SENTENCE_CHARS = 400
"""A sentence longer than this is cut here: the model reads 64 tokens of question and sentence."""


@dataclass(frozen=True, slots=True)
class Group:
    question: str
    sentences: tuple[str, ...]
    answerable: bool
    """True: ``sentences[0]`` holds the answer and the others do not. False: none does."""
    source: str


@dataclass(slots=True)
class _Document:
    sentences: list[tuple[int, int, str]]
    words: list[frozenset[str]]


def _document(text: str, languages: Sequence[str]) -> _Document:
    sentences = [(a, b, text[a:b][:MAX_SENTENCE_CHARS]) for a, b in sentence_spans(text) if b - a > 15]
    return _Document(sentences, [frozenset(content_words(s, languages)) for _, _, s in sentences])


def _inside(span: tuple[int, int], ranges: Sequence[tuple[int, int]]) -> bool:
    return any(span[0] < end and start < span[1] for start, end in ranges)


def _by_shared_words(question: AnswerQuestion, document: _Document, languages: Sequence[str],
                     keep: Iterable[int]) -> list[int]:
    asked = frozenset(content_words(question.text, languages))
    return sorted(keep, key=lambda i: -len(asked & document.words[i]))


def _groups_for(question: AnswerQuestion, document: _Document, languages: Sequence[str], rng: random.Random,
                absent_share: float) -> list[Group]:
    holding = [i for i, (_, _, s) in enumerate(document.sentences) if holds_gold(s, question.answers)]
    if question.evidence:
        holding = [i for i in holding if _inside(document.sentences[i][:2], question.evidence)]
    if not holding:
        return []
    others = [i for i, (_, _, s) in enumerate(document.sentences) if not holds_gold(s, question.answers)]
    ranked = _by_shared_words(question, document, languages, others)
    gold = _by_shared_words(question, document, languages, holding)[0]
    hard = ranked[:HARD]
    rest = [i for i in others if i not in hard]
    chosen = hard + rng.sample(rest, min(len(rest), GROUP_SIZE - 1 - len(hard)))
    groups = [Group(question.text, tuple(document.sentences[i][2] for i in [gold, *chosen]), True, question.source)]
    if rng.random() < absent_share:
        outside = [i for i in ranked if not question.evidence
                   or not _inside(document.sentences[i][:2], question.evidence)][:GROUP_SIZE]
        if outside:
            groups.append(Group(question.text, tuple(document.sentences[i][2] for i in outside), False,
                                question.source))
    return groups


def groups_of(answer_set: AnswerSet, languages: Sequence[str], *, seed: int = 0,
              absent_share: float = 0.3) -> list[Group]:
    """The groups of every answerable question of ``answer_set`` whose gold answer a sentence holds."""
    rng = random.Random(seed)
    texts = {d.source: d.parsed.files[0].text for d in answer_set.documents if d.parsed is not None}
    documents: dict[str, _Document] = {}
    groups: list[Group] = []
    for question in answer_set.questions:
        if not question.answers or question.source not in texts:
            continue
        if question.source not in documents:
            documents[question.source] = _document(texts[question.source], languages)
        groups.extend(_groups_for(question, documents[question.source], languages, rng, absent_share))
    return groups


def reader_groups(data: TrainingData, model: ReaderModel, *, absent: int, seed: int = 0) -> list[Group]:
    """Groups from the reader's readings: for an answerable question, the gold-holding candidate ``model``
    ranks best, then the :data:`GROUP_SIZE` - 1 other candidates it ranks best; for up to ``absent`` questions
    their document does not answer (drawn with ``seed``), the candidates it ranks best."""
    answerable: list[Group] = []
    unanswered: list[Group] = []
    for reading, labels, answers_it, kind in zip(data.readings, data.labels, data.answerable, data.kinds):
        order = [int(i) for i in np.argsort(-reading.ranking_scores(model), kind="stable")]
        texts = [candidate.text[:MAX_SENTENCE_CHARS] for candidate in reading.candidates]
        gold = [i for i in order if labels[i]]
        if answers_it and gold:
            others = [i for i in order if not labels[i]][:GROUP_SIZE - 1]
            answerable.append(Group(reading.question.text, tuple(texts[i] for i in [gold[0], *others]), True, kind))
        elif not answers_it and order:
            unanswered.append(Group(reading.question.text, tuple(texts[i] for i in order[:GROUP_SIZE]), False, kind))
    random.Random(seed).shuffle(unanswered)
    return answerable + unanswered[:absent]
