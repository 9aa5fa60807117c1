"""Answers and their shape. Without a model, answers are extractive: retrieved sentences, each with its own tag.

An extractive answer never paraphrases: every sentence in it is an exact span of a retrieved
passage, so it is verified by construction. When nothing clears the relevance threshold the
answer says so and shows nothing as the source's words.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from .analysis import content_words, normalize, query_terms
from .chunking import sentence_spans
from .library import Hit, Library
from .positions import Span

__all__ = ["AnswerResult", "CitationOut", "extractive_answer", "NOT_FOUND_PREFIX", "EXTRACTIVE_THRESHOLD"]

NOT_FOUND_PREFIX = "Not found in"
EXTRACTIVE_THRESHOLD = 0.30
"""Minimum fused retrieval score for a passage to be quoted (fused scores lie in 0..1)."""
MAX_SENTENCES = 3


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

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _sentence_score(sentence: str, terms: set[str], languages: Sequence[str], rank: int) -> float:
    words = set(query_terms(sentence, languages))
    overlap = len(words & terms) / max(len(terms), 1)
    return overlap + 0.15 / (rank + 1)


def extractive_answer(library: Library, question: str, *, doc_ids: Sequence[int] | None = None,
                      k: int = 5, threshold: float = EXTRACTIVE_THRESHOLD, scope_title: str | None = None,
                      hits: Sequence[Hit] | None = None) -> AnswerResult:
    """The sentences of the top passages that best answer ``question``, in reading order, each tagged."""
    hits = list(hits) if hits is not None else library.search(question, k=k, doc_ids=doc_ids)
    relevant = [h for h in hits if h.score >= threshold]
    if not relevant:
        where = scope_title or "this library"
        return AnswerResult(answer=f"{NOT_FOUND_PREFIX} {where}.", found=False, mode="extractive")
    languages = library.store.languages()
    terms = set(query_terms(question, languages))
    candidates: list[tuple[float, Hit, Span]] = []
    for rank, hit in enumerate(relevant):
        for start, end in sentence_spans(hit.text):
            sentence = hit.text[start:end]
            if len(content_words(sentence, languages)) < 3:
                continue
            span = Span(hit.chunk.file_id, hit.chunk.start + start, hit.chunk.start + end)
            candidates.append((_sentence_score(sentence, terms, languages, rank), hit, span))
    best = _distinct(sorted(candidates, key=lambda c: -c[0]))[:MAX_SENTENCES]
    if not best:
        best = [(relevant[0].score, relevant[0], relevant[0].span)]
    best.sort(key=lambda c: (c[2].file, c[2].start))
    citations: list[CitationOut] = []
    parts: list[str] = []
    for n, (_, hit, span) in enumerate(best, start=1):
        resolved = library.resolve(span)
        parts.append(f"{resolved.text}{span.tag}")
        citations.append(CitationOut(n=n, tag=span.key, doc_id=hit.chunk.doc_id, doc_title=hit.doc_title,
                                     text=resolved.text, toc_path=resolved.toc_path, file=span.file,
                                     start=span.start, end=span.end))
    return AnswerResult(answer=" ".join(parts), found=True, mode="extractive", citations=citations)


def _distinct(candidates: list[tuple[float, Hit, Span]]) -> list[tuple[float, Hit, Span]]:
    """Drop sentences repeated by chunk overlap (same text at overlapping positions)."""
    seen: set[str] = set()
    kept = []
    for cand in candidates:
        key = normalize(cand[1].text[cand[2].start - cand[1].chunk.start:cand[2].end - cand[1].chunk.start])
        if key not in seen:
            seen.add(key)
            kept.append(cand)
    return kept
