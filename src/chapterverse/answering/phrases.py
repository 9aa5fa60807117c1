"""The answer phrase inside the best sentence, so the reader and the CLI can emphasise it.

The phrase is the run of the sentence's words that the question does not already contain (stopwords may
sit inside a run, never at its ends), preferring a run that fits the question's kind (a name for who, a
date or number for when and how many) and that sits next to the question's words. It is always an exact
sub-span of the sentence, so it is a citable tag of its own.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ..analysis import content_words, normalize
from .question import Question

__all__ = ["answer_phrase"]

_WORD = re.compile(r"\w[\w'’-]*", re.UNICODE)
MAX_PHRASE_WORDS = 10


def answer_phrase(sentence: str, question: Question, languages: Sequence[str]) -> tuple[int, int] | None:
    """Offsets of the answer phrase inside ``sentence``, or None when every word is the question's."""
    words = [(m.start(), m.end(), m.group(0)) for m in _WORD.finditer(sentence)]
    content = set(content_words(sentence, languages))
    known = [normalize(w) in question.words for _, _, w in words]
    runs = _runs(words, known, content)
    if not runs:
        return None
    best = max(runs, key=lambda run: _run_score(run, words, known, question))
    return words[best[0]][0], words[best[1]][1]


def _runs(words: Sequence[tuple[int, int, str]], known: Sequence[bool], content: set[str]) -> list[tuple[int, int]]:
    """Maximal runs of words the question lacks, trimmed to start and end on a content word."""
    runs: list[tuple[int, int]] = []
    i = 0
    while i < len(words):
        if known[i]:
            i += 1
            continue
        j = i
        while j + 1 < len(words) and not known[j + 1]:
            j += 1
        lo, hi = i, j
        while lo <= hi and normalize(words[lo][2]) not in content:
            lo += 1
        while hi >= lo and normalize(words[hi][2]) not in content:
            hi -= 1
        if lo <= hi:
            runs.append((lo, min(hi, lo + MAX_PHRASE_WORDS - 1)))
        i = j + 1
    return runs


def _run_score(run: tuple[int, int], words: Sequence[tuple[int, int, str]], known: Sequence[bool],
               question: Question) -> float:
    lo, hi = run
    texts = [w for _, _, w in words[lo:hi + 1]]
    fits = {
        "who": any(t[:1].isupper() for t in texts[1:] or texts) and lo > 0,
        "when": any(t.isdigit() or t[:1].isupper() for t in texts),
        "number": any(any(c.isdigit() for c in t) for t in texts),
    }.get(question.kind, False)
    near = (lo > 0 and known[lo - 1]) or (hi + 1 < len(words) and known[hi + 1])
    return 2.0 * fits + 1.0 * near + min(hi - lo + 1, 4) * 0.25
