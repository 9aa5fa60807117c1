"""Candidate answer sentences: the whole sentences around the retrieved passages that could be an answer.

A sentence is a candidate only if it is prose a person would accept as an answer: never a heading or a
TOC title, a chapter-argument line ("Which treats of ..."), a footnote fragment that starts with a note or
page number, front matter (licences, ISBNs, transcriber's notes), or a sentence that only repeats the
question's own words. Everything else is left to the learned model in :mod:`.model`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from ..analysis import content_words, word_tokens
from ..chunking import sentence_spans
from ..positions import Span
from ..search.retrieval import Hit
from .question import Question
from .reader_library import ReaderLibrary

__all__ = ["Candidate", "gather_candidates", "is_answer_prose", "definition_candidates", "definition_pattern"]

MAX_SENTENCE_CHARS = 600
"""Longer "sentences" are unsplit blocks (tables, verse without punctuation): not shown as one answer."""
SENTENCE_REACH = MAX_SENTENCE_CHARS + 40
"""Characters read around each passage: a sentence that overlaps the passage and is short enough to be shown
lies whole in that window, however the passage cut it. The window's own first and last sentences are never
candidates (:func:`_window_sentences`); the 40 spare keep a whole one there out of reach of the passage."""
MAX_DEFINITIONS = 4
"""Sentences of the form "X was a ..." added for "Who/What is X?", first in reading order (introductions)."""
DEFINITION_DOCUMENTS = 2
"""Documents searched for them: the question's own, or the two best-retrieved of a library-wide question."""

_CHAPTER_LINE = re.compile(
    r"^(chapter|capitulo|capitolo|canto|book|part|libro|parte|chapitre|kapitel|section|seccion)\s+"
    r"([0-9]+|[ivxlc]+)\b.{0,80}$"
    r"|^(which|wherein|in which) (treats|is related|relates|is told|tells|contains)\b"
    r"|^(que trata|donde se (cuenta|prosigue|declara)|en que se|de lo que|del (famoso|gracioso))\b"
    r"|^(nel quale|dove si|in cui si)\b")
_NOTE_START = re.compile(r"^\s*[\[(]?\d{1,3}[\])]?(\s|\.\s|$)|^\s*[*†‡§]")
_FRONT_MATTER = re.compile(
    r"copyright|isbn|all rights reserved|project gutenberg|creative commons|licen[cs]e|transcriber|"
    r"produced by|this e-?book|public domain|printed in|derechos reservados|tutti i diritti", re.IGNORECASE)


_TERMINAL = re.compile(r"[.!?…:;»\"”’)\]]\s*$")
_LONG_WORD = re.compile(r"[^\W\d_][\w'’-]{3,}")


def _title_like(sentence: str) -> bool:
    """A line without closing punctuation whose longer words are mostly capitalised: a title page's
    "The Adventures of Sherlock Holmes" or a heading the TOC does not list."""
    words = _LONG_WORD.findall(sentence)
    return (not _TERMINAL.search(sentence) and bool(words)
            and sum(w[0].isupper() for w in words) >= 0.75 * len(words))


@dataclass(slots=True)
class Candidate:
    """One sentence of a file near a retrieved passage."""

    hit: Hit
    rank: int
    """Place of the passage it came from in the retrieval ranking (0 = best)."""
    span: Span
    text: str
    before: str
    """The sentence before it in the same paragraph ("" at a paragraph's start): answers often span two."""
    after: str
    first_in_paragraph: bool
    context: tuple[int, int] | None = None
    """[start, end) of the sentence with ``before`` and ``after`` around it in its file (None: the sentence's)."""


def is_answer_prose(sentence: str, question: Question, languages: Sequence[str], titles: frozenset[str]) -> bool:
    """Whether ``sentence`` may be shown as an answer at all (see the module docstring)."""
    stripped = sentence.strip()
    if stripped.startswith("#") or len(stripped) > MAX_SENTENCE_CHARS:
        return False
    words = content_words(stripped, languages)
    if len(stripped.split()) < 4 or len(words) < 2:
        return False
    flat = " ".join(word_tokens(stripped))
    if (flat in titles or _title_like(stripped) or _CHAPTER_LINE.match(flat) or _NOTE_START.match(stripped)
            or _FRONT_MATTER.search(stripped)):
        return False
    return any(w not in question.words for w in words)


def gather_candidates(library: ReaderLibrary, hits: Sequence[Hit], question: Question,
                      languages: Sequence[str]) -> list[Candidate]:
    """The distinct answer-prose sentences that overlap each passage, best passage first, then any sentences
    that introduce the subject of a "Who/What is X?" question (:func:`definition_candidates`)."""
    texts: dict[int, str] = {}
    titles: dict[int, frozenset[str]] = {}
    seen: set[Span] = set()
    out: list[Candidate] = []
    for rank, hit in enumerate(hits):
        chunk = hit.chunk
        if chunk.file_id not in texts:
            texts[chunk.file_id] = library.store.file(chunk.file_id).text
        if chunk.doc_id not in titles:
            names = [hit.doc_title, *(t.title for t in library.store.toc(chunk.doc_id))]
            titles[chunk.doc_id] = frozenset(" ".join(word_tokens(name)) for name in names)
        text = texts[chunk.file_id]
        spans, whole = _window_sentences(text, chunk.start, chunk.end)
        for i in whole:
            start, end = spans[i]
            span = Span(chunk.file_id, start, end)
            if end <= chunk.start or start >= chunk.end or span in seen:
                continue
            seen.add(span)
            sentence = text[start:end]
            if not is_answer_prose(sentence, question, languages, titles[chunk.doc_id]):
                continue
            before = _neighbour(text, spans, i - 1, start)
            after = _neighbour(text, spans, i + 1, end)
            context = (spans[i - 1][0] if before else start, spans[i + 1][1] if after else end)
            out.append(Candidate(hit, rank, span, sentence, before, after, first_in_paragraph=not before,
                                 context=context))
    return out + definition_candidates(library, hits, question, languages, seen, titles)


def _window_sentences(text: str, start: int, end: int) -> tuple[list[tuple[int, int]], range]:
    """The sentences of the window ``SENTENCE_REACH`` code points around ``text[start:end]``, and which of
    them are whole.

    The window's edges fall wherever the arithmetic puts them, mid-word as often as not, and the splitter
    starts its first sentence and ends its last one there: Don Quijote's "-Si por buena fama ... -dijo el
    bachiller-, solo vuestra merced ..." became "achiller-, solo vuestra merced ...". So those two are not
    whole unless the window reached the text's own start or end; they stay in the list only as the
    neighbours of the sentences next to them."""
    low, high = max(0, start - SENTENCE_REACH), min(len(text), end + SENTENCE_REACH)
    spans = sentence_spans(text, low, high)
    return spans, range(1 if low > 0 else 0, len(spans) - 1 if high < len(text) else len(spans))


def _neighbour(text: str, spans: Sequence[tuple[int, int]], i: int, edge: int) -> str:
    """The sentence at ``spans[i]`` when it is in the same paragraph as the one ending/starting at ``edge``."""
    if not 0 <= i < len(spans):
        return ""
    start, end = spans[i]
    between = text[end:edge] if end <= edge else text[edge:start]
    return "" if "\n\n" in between else text[start:end]


_COPULA = r"(?:was|is|were|are|became|es|era|fue|son|eran|e|è|fu|sono|erano|est|était|ist|war)"
_ARTICLE = r"(?:a|an|the|un|una|uno|el|la|los|las|il|lo|gli|une|ein|eine|um|uma)"


@lru_cache(maxsize=256)
def definition_pattern(subject_pattern: str) -> re.Pattern[str]:
    """ "X, a ...", "X was the ...", "X es un ...": the forms that introduce X."""
    return re.compile(rf"\b{subject_pattern}\b(?:\s*,\s*|\s+{_COPULA}\s+){_ARTICLE}\s", re.IGNORECASE)


def definition_candidates(library: ReaderLibrary, hits: Sequence[Hit], question: Question, languages: Sequence[str],
                          known: set[Span], titles: dict[int, frozenset[str]]) -> list[Candidate]:
    """For "Who/What is X?": the first sentences of the documents that say "X, a ..." or "X was a ...".

    Retrieval finds the passages that mention X most, which for a main character is anywhere in the book;
    the sentence that introduces X is found by its form instead, wherever it is. ``titles`` are the TOC
    titles of each document of ``hits``, as :func:`gather_candidates` read them."""
    if not question.subject_pattern or not hits:
        return []
    found = definition_pattern(question.subject_pattern)
    best_hit: dict[int, Hit] = {}
    for hit in hits:
        best_hit.setdefault(hit.chunk.doc_id, hit)
    out: list[Candidate] = []
    for doc_id, hit in list(best_hit.items())[:DEFINITION_DOCUMENTS]:
        for record in library.store.files(doc_id):
            text = library.store.file(record.id).text
            for match in found.finditer(text):
                candidate = _sentence_at(text, record.id, match.start(), hit, len(hits))
                if candidate is None or candidate.span in known:
                    continue
                if is_answer_prose(candidate.text, question, languages, titles[doc_id]):
                    known.add(candidate.span)
                    out.append(candidate)
                if len(out) >= MAX_DEFINITIONS:
                    return out
    return out


def _sentence_at(text: str, file_id: int, offset: int, hit: Hit, rank: int) -> Candidate | None:
    """The sentence of ``text`` that contains ``offset``, as a candidate ranked after every passage."""
    start = text.rfind("\n\n", 0, offset) + 1
    end = text.find("\n\n", offset)
    spans = sentence_spans(text, start, len(text) if end < 0 else end)
    for i, (start, end) in enumerate(spans):
        if start <= offset < end:
            before, after = _neighbour(text, spans, i - 1, start), _neighbour(text, spans, i + 1, end)
            context = (spans[i - 1][0] if before else start, spans[i + 1][1] if after else end)
            return Candidate(hit, rank, Span(file_id, start, end), text[start:end], before, after,
                             first_in_paragraph=not before, context=context)
    return None
