"""Questions as a long book raises them, made from the development sets.

A short story or a SQuAD article answers its own questions, and a question of another document shares few
of its words, so a reader judged on them learns that evidence sharing the question's words means an answer.
In a long book every question finds such sentences. Two constructions bring that into the sets:

- :func:`without_evidence`: a question asked of its own document with the paragraphs holding its answer
  removed (FairytaleQA: its ``cor_section`` sections; SQuAD: the paragraph of each answer span). The
  document still knows the question's people and places, but not the answer: an in-domain absent question.
- :func:`long_documents`: several documents of a set joined into one, so each question faces the word-sharing
  sentences of many stories or articles.

Both return ordinary :class:`.answers.AnswerSet` objects, for ``bench answers`` and ``chapterverse_dev fit-answers``.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..sources.base import ParsedDocument, ParsedFile
from .answers import AnswerQuestion, AnswerSet, holds_gold, sample_questions
from .retrieval import BenchDocument

__all__ = ["without_evidence", "long_documents", "combined", "removed_text"]

PARAGRAPH_BREAK = "\n\n"


def removed_text(text: str, ranges: Sequence[tuple[int, int]]) -> str:
    """``text`` without the paragraphs (blank-line separated) that the character ``ranges`` touch."""
    cuts: list[tuple[int, int]] = []
    for start, end in ranges:
        before = text.rfind(PARAGRAPH_BREAK, 0, start)
        after = text.find(PARAGRAPH_BREAK, max(start, end - 1))
        cuts.append((0 if before < 0 else before, len(text) if after < 0 else after))
    kept: list[str] = []
    position = 0
    for start, end in sorted(cuts):
        if start > position:
            kept.append(text[position:start])
        position = max(position, end)
    kept.append(text[position:])
    return "".join(kept).strip()


def without_evidence(answer_set: AnswerSet, limit: int | None, seed: int) -> AnswerSet:
    """For ``limit`` sampled questions with known evidence, a copy of their document without the paragraphs
    holding it, and the question asked of that copy as an absent question.

    A question whose gold answer still occurs word for word in the rest of the document is left out: it is
    not absent there, and counting it either way would blur what the set measures.
    """
    parsed = {d.source: d.parsed for d in answer_set.documents if d.parsed is not None}
    usable = [q for q in answer_set.questions if q.answers and q.evidence and q.source in parsed]
    documents: list[BenchDocument] = []
    questions: list[AnswerQuestion] = []
    for question in sample_questions(usable, limit, seed):
        original = parsed[question.source]
        assert original is not None
        text = removed_text(original.files[0].text, question.evidence)
        if not text or holds_gold(text, question.answers):
            continue
        source = f"{question.source}#without:{question.id}"
        documents.append(BenchDocument(source, ParsedDocument(
            title=original.title, format=original.format, files=[ParsedFile(text, title=original.files[0].title)])))
        questions.append(AnswerQuestion(f"without-evidence:{question.id}", question.text, source))
    return AnswerSet(f"{answer_set.name}[without evidence]", documents, questions)


def long_documents(answer_set: AnswerSet, per_document: int) -> AnswerSet:
    """The set with every ``per_document`` consecutive documents joined into one (blank lines between them,
    the questions' evidence moved with their text); absent questions are drawn from the other long documents."""
    documents: list[BenchDocument] = []
    moved: dict[str, tuple[str, int]] = {}
    parts = [d for d in answer_set.documents if d.parsed is not None]
    for first in range(0, len(parts), per_document):
        group = parts[first:first + per_document]
        source = f"{answer_set.name}/long-{first // per_document + 1}"
        texts: list[str] = []
        offset = 0
        for document in group:
            assert document.parsed is not None
            moved[document.source] = (source, offset)
            texts.append(document.parsed.files[0].text)
            offset += len(texts[-1]) + len(PARAGRAPH_BREAK)
        title = f"{answer_set.name}: documents {first + 1}-{first + len(group)}"
        documents.append(BenchDocument(source, ParsedDocument(
            title=title, format="text", files=[ParsedFile(PARAGRAPH_BREAK.join(texts), title=title)])))
    questions = [AnswerQuestion(q.id, q.text, moved[q.source][0], q.answers,
                                tuple((a + moved[q.source][1], b + moved[q.source][1]) for a, b in q.evidence))
                 for q in answer_set.questions if q.source in moved]
    return AnswerSet(f"{answer_set.name}[{per_document} a document]", documents, questions,
                     draws_absent=len(documents) > 1)


def combined(main: AnswerSet, extra: AnswerSet) -> AnswerSet:
    """``main`` with the documents and questions of ``extra`` added (its absent questions asked beside the
    drawn ones): how ``bench answers --in-domain-absent`` measures both kinds of absent question at once."""
    return AnswerSet(f"{main.name}+{extra.name}", [*main.documents, *extra.documents],
                     [*main.questions, *extra.questions], main.library_scope, main.draws_absent)
