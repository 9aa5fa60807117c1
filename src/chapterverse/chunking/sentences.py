"""Sentences: the exact spans :func:`sentence_spans` finds, for quoting and scoring evidence."""

from __future__ import annotations

import re

from ..positions import paragraph_spans
from .boundaries import CLOSERS, trimmed_end, trimmed_start

__all__ = ["sentence_spans"]

_TERMINATOR = re.compile(rf"[.?!‽…]+[{CLOSERS}]*|[。！？]+[{CLOSERS}]*")
_CJK_TERMINATORS = "。！？"
_WORD_BEFORE = re.compile(r"[^\W\d_](?:[\w.]*\w)?$")
_TITLES = frozenset([
    "mr", "mrs", "ms", "mx", "messrs", "dr", "drs", "prof", "profs", "st", "ste", "sr", "sra", "srta", "sres", "srs",
    "jr", "mt", "ft", "capt", "col", "gen", "gov", "lt", "sgt", "cmdr", "adm", "rev", "hon", "fr", "msgr", "mme",
    "mlle", "mons", "ud", "uds", "vd", "vds", "dña", "sig", "sigg", "dott", "avv", "ing", "cf", "vs", "viz",
])
"""Lower-cased words whose period does not end the sentence before a capital: "Mr. Ahab", "Sra. Pérez"."""
_BEFORE_NUMBERS = frozenset([
    "no", "nos", "nr", "vol", "vols", "fig", "figs", "eq", "ch", "chap", "sec", "art", "pp", "p", "op", "ca",
    "approx", "jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep", "sept", "oct", "nov", "dec",
])
"""Lower-cased words whose period does not end the sentence before a digit: "No. 5", "pp. 12", "Jan. 3"."""


def _is_break(text: str, m: re.Match[str], block_end: int) -> bool:
    """Does the terminator run ``m`` end a sentence?"""
    after = m.end()
    if text[m.start()] in _CJK_TERMINATORS:
        return True
    if after < block_end and not text[after].isspace():
        return False  # "3.14", "e.g.,", "...and"
    nxt = trimmed_start(text, after, block_end)
    if nxt >= block_end:
        return True
    if text[nxt].islower():
        return False  # "etc. and", '"What?" said he'
    if m.group() == ".":
        word = _WORD_BEFORE.search(text, max(0, m.start() - 24), m.start())
        if word:
            w = word.group()
            lower = w.lower()
            if (lower in _TITLES or "." in w or (len(w) == 1 and w.isupper() and w != "I")
                    or (lower in _BEFORE_NUMBERS and text[nxt].isdigit())):
                return False  # "Mr. Ahab", "U.S. Navy", "J. Smith", "No. 5"
    return True


def sentence_spans(text: str, start: int = 0, end: int | None = None) -> list[tuple[int, int]]:
    """Exact spans of the sentences of ``text[start:end]`` (offsets into ``text``), trimmed and non-empty.

    A blank line always ends a sentence; a single newline does not (wrapped lines). A sentence ends after
    ``.``, ``?``, ``!``, ``…`` or a run of them (and ``。！？`` without a following space), plus closing quotes
    or brackets, when whitespace and then a non-lowercase character follow: so ``"What?" said he`` and
    ``etc. and`` stay one sentence, as do ``Mr. Ahab``, ``U.S. Navy`` and initials such as ``J. Smith``.
    Inverted ``¿``/``¡`` simply open the next sentence. Every non-whitespace character of the range lies
    in exactly one span.
    """
    end = len(text) if end is None else min(end, len(text))
    start = max(0, start)
    spans: list[tuple[int, int]] = []
    if end <= start:
        return spans
    for b_start, b_end in paragraph_spans(text[start:end]):
        b_start += start
        b_end += start
        cur = b_start
        for m in _TERMINATOR.finditer(text, b_start, b_end):
            if _is_break(text, m, b_end):
                s, e = cur, trimmed_end(text, cur, m.end())
                if e > s:
                    spans.append((s, e))
                cur = trimmed_start(text, m.end(), b_end)
        if cur < b_end:
            spans.append((cur, b_end))
    return spans

