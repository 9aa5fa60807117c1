"""Answers and their shape. Without a model, answers are extractive: retrieved sentences, each with its own tag.

An extractive answer never paraphrases: every sentence in it is an exact span of a retrieved
passage, so it is verified by construction. When nothing clears the relevance threshold the
answer says so and shows nothing as the source's words.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from .analysis import content_words, query_terms
from .chunking import sentence_spans
from .library import Hit, Library
from .positions import Span

__all__ = ["AnswerResult", "CitationOut", "extractive_answer", "NOT_FOUND_PREFIX", "EXTRACTIVE_THRESHOLD"]

NOT_FOUND_PREFIX = "Not found in"
EXTRACTIVE_THRESHOLD = 0.30
"""Minimum fused retrieval score for a passage to be quoted (fused scores lie in 0..1)."""
MAX_SENTENCES = 3
RELATIVE_CUTOFF = 0.8
SENTENCE_REACH = 400
"""A further sentence is shown only when it scores at least this share of the best one."""


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


def _sentence_scores(library: Library, question: str, sentences: Sequence[str], ranks: Sequence[int]) -> list[float]:
    """Blend of meaning (cosine to the question) and shared content terms, with a small prior for passage rank."""
    languages = library.store.languages()
    terms = set(query_terms(question, languages))
    vectors = library.embedder.embed([question, *sentences])
    cosines = vectors[1:] @ vectors[0]
    scores = []
    for sentence, cosine, rank in zip(sentences, cosines.tolist(), ranks):
        overlap = len(set(query_terms(sentence, languages)) & terms) / max(len(terms), 1)
        scores.append(0.6 * cosine + 0.4 * overlap + 0.05 / (rank + 1))
    return scores


def _is_prose(sentence: str, languages: Sequence[str]) -> bool:
    """Headings and fragments are not answers."""
    return (not sentence.lstrip().startswith("#") and len(sentence.split()) >= 4
            and len(content_words(sentence, languages)) >= 2)


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
    found: list[tuple[Hit, Span, str, int]] = []
    file_texts: dict[int, str] = {}
    for rank, hit in enumerate(relevant):
        chunk = hit.chunk
        if chunk.file_id not in file_texts:
            file_texts[chunk.file_id] = library.store.file(chunk.file_id).text
        text = file_texts[chunk.file_id]
        # Sentences of the file around the chunk, so a chunk cut mid-sentence still yields whole sentences.
        for start, end in sentence_spans(text, max(0, chunk.start - SENTENCE_REACH), chunk.end + SENTENCE_REACH):
            if end <= chunk.start or start >= chunk.end:
                continue
            sentence = text[start:end]
            if _is_prose(sentence, languages):
                found.append((hit, Span(chunk.file_id, start, end), sentence, rank))
    scores = _sentence_scores(library, question, [f[2] for f in found], [f[3] for f in found]) if found else []
    ranked = _distinct(sorted(((sc, h, sp) for sc, (h, sp, _, _) in zip(scores, found)), key=lambda c: -c[0]))
    best = [c for c in ranked if c[0] >= RELATIVE_CUTOFF * ranked[0][0]][:MAX_SENTENCES] if ranked else []
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
    """Drop sentences found twice through overlapping chunks."""
    seen: set[Span] = set()
    kept = []
    for cand in candidates:
        if cand[2] not in seen:
            seen.add(cand[2])
            kept.append(cand)
    return kept
