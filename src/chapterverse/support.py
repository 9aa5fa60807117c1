"""Whether a cited span says what its sentence says: the check of each sentence-citation pair.

A tag that was retrieved this turn proves only that the model saw the span, not that the span holds what the
sentence around the tag claims: a sentence about chapter 2 can carry a chapter-1 span shown in the same tool
result. :func:`support_score` measures a pair by its words (stopwords of the span's language left out, Snowball
stems, so "burned" meets "burning"): the share of the sentence's content words that the span holds, and the
share that its best two consecutive sentences hold. A paraphrase of a passage finds most of its words in one
place; a sentence about another part of the book finds its people everywhere and the rest nowhere. The title
and contents path the span sits under count as part of every window ("In chapter 2, ...").

:func:`supports` weighs the two (:data:`LOCAL_WEIGHT`) against :data:`MIN_SUPPORT`, chosen on pairs built from
FairytaleQA's train stories and measured on its validation stories (``chapterverse bench support``). A sentence
in another language than its span shares no words with it and says nothing either way: it is not judged
(:func:`supports` returns True), nor is a sentence of fewer than :data:`MIN_JUDGED_WORDS` words.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from .analysis import content_words, detect_language, in_another_language, index_terms

__all__ = ["LOCAL_WEIGHT", "MIN_JUDGED_WORDS", "MIN_SUPPORT", "SupportScore", "support_score", "supports"]

LOCAL_WEIGHT = 1.25
"""Weight of the best window's share against the whole span's (1)."""

MIN_SUPPORT = 0.64
"""Least weighted share (0..1) of the sentence's content words for a span that supports it."""

MIN_JUDGED_WORDS = 6
"""A sentence of fewer words ("Yes, she did.", "Ishmael is poor.") is not judged: too little to tell by words,
and too short to count as a claim (``citations.MIN_CLAIM_WORDS``)."""

_WORD = re.compile(r"\w+")
_SENTENCE = re.compile(r"[^.!?…]+[.!?…]*")


@dataclass(frozen=True, slots=True)
class SupportScore:
    """How much of a sentence a span holds."""

    coverage: float
    """Share of the sentence's distinct content stems found anywhere in the span (or its heading)."""
    local: float
    """The same share in the span's best window of two consecutive sentences."""
    judged: bool = True
    """False when the words cannot tell: the sentence and the span are in different languages, or the sentence
    has fewer than MIN_JUDGED_WORDS words."""

    @property
    def support(self) -> float:
        """The weighted share :func:`supports` compares with MIN_SUPPORT."""
        return (self.coverage + LOCAL_WEIGHT * self.local) / (1 + LOCAL_WEIGHT)


def support_score(sentence: str, span_text: str, heading: str = "") -> SupportScore:
    """How well ``span_text`` (under ``heading``: its document title and contents path) holds ``sentence``,
    whose citation tags should already be removed."""
    if in_another_language(sentence, span_text):
        return SupportScore(1.0, 1.0, judged=False)
    language = detect_language(span_text)
    wanted = _stems(" ".join(content_words(sentence, [language])), language)
    if len(_WORD.findall(sentence)) < MIN_JUDGED_WORDS or not wanted:
        return SupportScore(1.0, 1.0, judged=False)
    around = _stems(heading, language) if heading else frozenset()
    coverage = len(wanted & (_stems(span_text, language) | around)) / len(wanted)
    local = max(len(wanted & (_stems(window, language) | around)) / len(wanted) for window in _windows(span_text))
    return SupportScore(coverage, local)


def supports(sentence: str, span_text: str, heading: str = "") -> bool:
    """Whether the span holds what the sentence says (:func:`support_score` against MIN_SUPPORT)."""
    score = support_score(sentence, span_text, heading)
    return not score.judged or score.support >= MIN_SUPPORT


def _windows(text: str) -> list[str]:
    """Each two consecutive sentences of ``text`` (the whole text when it has one)."""
    sentences = [s.strip() for s in _SENTENCE.findall(text) if s.strip()]
    return [" ".join(sentences[i:i + 2]) for i in range(max(1, len(sentences) - 1))] if sentences else [text]


@lru_cache(maxsize=1024)
def _stems(text: str, language: str) -> frozenset[str]:
    return frozenset(index_terms(text, language).split())
