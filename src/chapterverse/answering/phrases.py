"""The answer phrase inside the best sentence, so the reader and the CLI can emphasise it.

The phrase is a run of the sentence's words that the question does not already contain (stopwords may
sit inside a run, never at its ends) and that has what the question's kind asks for: a name for who and
for "what is X called", a date or time for when, a number for how many. Other questions (what, why, how,
where) get no phrase: a run of new words is not an answer to them often enough, and a wrongly emphasised
phrase misleads more than none. It is always an exact sub-span of the sentence, a citable tag of its own.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ..analysis import content_words, normalize
from .features import NUMBER_WORDS, TIME_WORDS, text_stems
from .question import Question

__all__ = ["answer_phrase"]

_WORD = re.compile(r"\w[\w'’-]*", re.UNICODE)
MAX_PHRASE_WORDS = 10
_DATE_GLUE = frozenset({"of", "de", "del", "di", "the", "el", "il"})
_NAME_GLUE = frozenset({"of", "de", "del", "di", "da", "van", "von", "la", "le"})
_ORDINAL = re.compile(r"\d+(st|nd|rd|th)|\w+(th|st|nd|rd)|first|second|third|primero|segundo|primo|secondo")


def answer_phrase(sentence: str, question: Question, languages: Sequence[str]) -> tuple[int, int] | None:
    """Offsets of the answer phrase inside ``sentence``, or None when no run of new words has what the
    question's kind asks for."""
    kind = "who" if question.kind == "name" else question.kind  # a name is asked for as "who" asks
    if kind not in ("who", "when", "number"):
        return None
    words = [(m.start(), m.end(), m.group(0)) for m in _WORD.finditer(sentence)]
    content = set(content_words(sentence, languages))
    terms = set(question.terms)
    langs = tuple(languages)
    known = [normalize(w) in question.words or bool(text_stems(w, langs) & terms) for _, _, w in words]
    fitting = [run for run in _runs(words, known, content) if _fits(kind, run, words)]
    if not fitting:
        return None
    lo, hi = max(fitting, key=lambda run: _nearness(run, known) + _has_digit(run, words))
    lo, hi = _expression(kind, lo, hi, words, known)
    return words[lo][0], words[hi][1]


def _fits(kind: str, run: tuple[int, int], words: Sequence[tuple[int, int, str]]) -> bool:
    """Whether the run holds what ``kind`` asks for (a name never counts as the sentence's first word)."""
    lo, hi = run
    if kind == "who":
        return any(w[:1].isupper() for i, (_, _, w) in enumerate(words[lo:hi + 1], start=lo) if i > 0)
    flat = [normalize(w) for _, _, w in words[lo:hi + 1]]
    if kind == "when":
        return any(any(c.isdigit() for c in w) or w in TIME_WORDS for w in flat)
    return any(any(c.isdigit() for c in w) or w in NUMBER_WORDS for w in flat)


def _has_digit(run: tuple[int, int], words: Sequence[tuple[int, int, str]]) -> float:
    """A run with a digit (a year, an amount) answers when and how many more surely than a time word."""
    return float(any(c.isdigit() for _, _, w in words[run[0]:run[1] + 1] for c in w))


def _is_core(kind: str, i: int, words: Sequence[tuple[int, int, str]]) -> bool:
    """The word is what ``kind`` asks for: a name (never the sentence's first word), a digit, a number or
    time word."""
    word = words[i][2]
    if kind == "who":
        return i > 0 and word[:1].isupper()
    flat = normalize(word)
    return any(c.isdigit() for c in word) or flat in (TIME_WORDS if kind == "when" else NUMBER_WORDS)


def _is_part(kind: str, i: int, words: Sequence[tuple[int, int, str]]) -> bool:
    """The word continues the expression: the rest of a name, or "of" and ordinals inside a date."""
    if _is_core(kind, i, words):
        return True
    flat = normalize(words[i][2])
    if kind == "when":
        return flat in _DATE_GLUE or bool(_ORDINAL.fullmatch(flat))
    return kind == "who" and flat in _NAME_GLUE


def _expression(kind: str, lo: int, hi: int, words: Sequence[tuple[int, int, str]],
                known: Sequence[bool]) -> tuple[int, int]:
    """The answer inside the run: its first name, date or number and the words that continue it ("the
    fourteenth of November, 1911"; "six hours": a number takes the new word after it, its unit)."""
    first = next(i for i in range(lo, hi + 1) if _is_core(kind, i, words))
    start = end = first
    while start - 1 >= lo and _is_part(kind, start - 1, words):
        start -= 1
    while end + 1 <= hi and _is_part(kind, end + 1, words):
        end += 1
    while start < end and not _is_core(kind, start, words) and not _ORDINAL.fullmatch(normalize(words[start][2])):
        start += 1
    while end > start and not _is_core(kind, end, words):
        end -= 1
    if kind == "number" and end + 1 <= hi and not known[end + 1]:
        end += 1
    return start, end


def _nearness(run: tuple[int, int], known: Sequence[bool]) -> float:
    """Runs next to the question's words first, then longer ones (up to four words)."""
    lo, hi = run
    near = (lo > 0 and known[lo - 1]) or (hi + 1 < len(known) and known[hi + 1])
    return 1.0 * near + min(hi - lo + 1, 4) * 0.25


def _runs(words: Sequence[tuple[int, int, str]], known: Sequence[bool], content: set[str]) -> list[tuple[int, int]]:
    """Maximal runs of words the question lacks, trimmed to start and end on a content word, and cut into
    windows of at most :data:`MAX_PHRASE_WORDS` (so a date at the end of a long run is still inside one)."""
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
        for start in range(lo, hi + 1, MAX_PHRASE_WORDS):
            end = min(hi, start + MAX_PHRASE_WORDS - 1)
            while end > start and normalize(words[end][2]) not in content:
                end -= 1
            runs.append((start, end))
        i = j + 1
    return runs
