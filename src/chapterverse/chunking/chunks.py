"""Retrieval chunks: a canonical text cut into spans of at most ``chunk_size`` code points.

Offsets only, never chunk text, so ``text[start:end]`` is always the chunk itself, and splitting a
1.2 M-character book takes a fraction of a second. :func:`split_text` cuts one text;
:func:`chunk_document` cuts a parsed document file by file, in reading order.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from .boundaries import CLOSERS, is_continuation, trimmed_end, trimmed_start

if TYPE_CHECKING:  # at run time it would import every reader (pypdf, ...) just for an annotation
    from ..sources.base import ParsedDocument

__all__ = ["DEFAULT_SEPARATORS", "ChunkSpec", "chunk_document", "split_text"]


def _class_first(*branches: tuple[str, str]) -> re.Pattern[str]:
    """The pattern ``[first]rest|[first]rest|...`` (``first``: the body of a character class, disjoint between
    branches) written to begin with one character class, the union of the ``first`` ones.

    Python's ``re`` then skips in C to the next character of that class instead of trying every branch at every
    position (2.5 against 6.8 us for 530 characters of prose here, sentence ends). A look-behind enters each
    branch only after its own class, so it matches exactly where, and as far as, the plain alternation does.
    """
    union = "".join(first for first, _ in branches)
    return re.compile(f"[{union}](?:" + "|".join(f"(?<=[{first}]){rest}" for first, rest in branches) + ")")


DEFAULT_SEPARATORS: tuple[str | re.Pattern[str], ...] = (
    "\n\n",
    "\n",
    _class_first((".?!…‽", rf"[{CLOSERS}]*\s+"), ("。！？", rf"[{CLOSERS}]*\s*")),
    _class_first((";:", rf"[{CLOSERS}]*\s+"), ("；：", "")),
    _class_first((",", rf"[{CLOSERS}]*\s+"), ("，、", "")),
    " ",
    "",
)
"""Boundary levels, coarsest first: blank line, line, sentence end, clause, comma, space, any character.

A plain string is a literal separator (``""`` means "between any two characters"); a compiled pattern
matches a separator. A piece boundary lies right after the separator.
"""


@dataclass(frozen=True, slots=True)
class _Sep:
    literal: str | None
    pattern: re.Pattern[str] | None

    def last(self, text: str, s: int, lo: int, hi: int) -> int | None:
        """The last boundary ``b >= lo`` whose piece ``text[s:b]``, right-trimmed, ends by ``hi``.

        The separator itself may reach past ``hi`` when what passes is whitespace ("a b| c" fits "a b").
        """
        if self.pattern is not None:
            best = None
            for m in self.pattern.finditer(text, s, hi + 16):
                b = m.end()
                if b > hi and trimmed_end(text, s, b) > hi:
                    break  # trimmed ends only grow with b: no later match fits either
                if b >= lo:
                    best = b
            return best
        if not self.literal:
            b = hi
            while b > lo and is_continuation(text, b):
                b -= 1
            return b
        size = len(self.literal)
        idx = text.rfind(self.literal, s, hi + size)
        while idx >= 0 and idx + size >= lo:
            if trimmed_end(text, s, idx + size) <= hi:
                return idx + size
            idx = text.rfind(self.literal, s, idx + size - 1)
        return None

    def first(self, text: str, s: int, lo: int, hi: int) -> int | None:
        """The first boundary in ``[lo, hi]`` of a separator lying within ``text[s:hi]``."""
        if self.pattern is not None:
            for m in self.pattern.finditer(text, max(s, lo - 16), hi):
                if m.end() >= lo:
                    return m.end()
            return None
        if not self.literal:
            b = lo
            while b < hi and is_continuation(text, b):
                b += 1
            return b
        idx = text.find(self.literal, max(s, lo - len(self.literal)), hi)
        return idx + len(self.literal) if idx >= 0 else None


@lru_cache(maxsize=32)
def _compile(separators: tuple[str | re.Pattern[str], ...]) -> tuple[_Sep, ...]:
    seps = tuple(_Sep(None, s) if isinstance(s, re.Pattern) else _Sep(s, None) for s in separators)
    if not any(s.literal == "" for s in seps):
        seps += (_Sep("", None),)  # a hard cut is always possible
    return seps


def split_text(
    text: str,
    *,
    chunk_size: int = 512,
    overlap: int = 64,
    separators: Sequence[str | re.Pattern[str]] = DEFAULT_SEPARATORS,
    heading: int = 0,
) -> list[tuple[int, int]]:
    """Cut ``text`` into chunks of at most ``chunk_size`` code points; return their ``(start, end)`` spans.

    The result is what LangChain's RecursiveCharacterTextSplitter aims at, computed greedily on offsets:
    each chunk is as long as fits and ends at the coarsest separator level (see ``DEFAULT_SEPARATORS``)
    that still leaves it at least a quarter full, so a short heading is kept with the text after it instead
    of becoming a chunk of its own. The next chunk starts ``overlap // 2`` to ``overlap`` characters before
    the previous end, at the coarsest boundary found there (paragraph, line, sentence, word), so the
    overlap reads as whole words. Spans are trimmed of whitespace, never empty, in order; every
    non-whitespace character lies in at least one of them. A hard cut (no separator at all) never
    splits a combining mark or an emoji ZWJ sequence from its base when it can avoid it.

    ``text[:heading]`` is a heading: the first chunk also holds some of the text after it (when ``chunk_size``
    allows), so a heading longer than a quarter chunk (an underlined title) is not a chunk of its own.
    """
    if chunk_size <= 0:
        raise ValueError(f"chunk_size must be positive, got {chunk_size}")
    if not 0 <= overlap < chunk_size:
        raise ValueError(f"overlap must be in [0, chunk_size), got {overlap} with chunk_size={chunk_size}")
    seps = _compile(tuple(separators))
    n_end = trimmed_end(text, 0, len(text))
    s = trimmed_start(text, 0, n_end)
    spans: list[tuple[int, int]] = []
    prev_end = 0
    after_heading = trimmed_start(text, heading, n_end) + 1
    while s < n_end:
        if n_end - s <= chunk_size:
            spans.append((s, n_end))
            break
        hi = s + chunk_size
        lo = max(s + chunk_size // 4, prev_end + 1, s + 1)
        if not spans and after_heading <= hi:
            lo = max(lo, after_heading)
        cut = _last_boundary(text, seps, s, lo, hi)
        end = trimmed_end(text, s, cut)
        spans.append((s, end))
        prev_end = end
        nxt = _overlap_start(text, seps, s, end, overlap) if overlap else cut
        s = trimmed_start(text, max(nxt, s + 1), n_end)
    return spans


def _last_boundary(text: str, seps: tuple[_Sep, ...], s: int, lo: int, hi: int) -> int:
    """The chunk from ``s`` ends at the last boundary of the coarsest level with one (the last level, a hard cut,
    always has one)."""
    for sep in seps:
        b = sep.last(text, s, lo, hi)
        if b is not None:
            return b
    raise AssertionError("the last separator level always has a boundary")


def _overlap_start(text: str, seps: tuple[_Sep, ...], s: int, end: int, overlap: int) -> int:
    """Where the chunk after ``text[s:end]`` starts: a boundary ``overlap // 2`` to ``overlap`` before ``end``."""
    lo = max(s + 1, end - overlap)
    hi = max(lo, end - overlap // 2)
    for sep in seps:
        b = sep.first(text, s, lo, hi)
        if b is not None:
            return b
    return lo


@dataclass(frozen=True, slots=True)
class ChunkSpec:
    """One retrieval chunk: ``doc.files[file_index].text[start:end]``. Its index is its place in the list.

    ``label_offset``, when set, is where the contents path that labels the chunk is read instead of ``start``:
    a chunk that opens with headings of empty sections ("INFERNO" right above "Canto I") holds the text of the
    last of them, so it is labelled by that one ("Canto I"), as the chunks after it are.
    """

    file_index: int
    start: int
    end: int
    label_offset: int | None = None


def chunk_document(doc: ParsedDocument, *, chunk_size: int = 512, overlap: int = 64) -> list[ChunkSpec]:
    """The chunks of a document in reading order; a chunk never crosses a file boundary, nor leaves a file's
    content (``ParsedFile.content``: a PDF page's running header and footer, a Gutenberg licence, an EPUB's
    contents page or list are not content), nor is only a heading, unless the document has nothing else (a
    Markdown note that is one heading, "# Meeting moved to Friday", is still found).

    Pre-chunked documents keep one chunk per :class:`PreChunk`, spanning its whole (trimmed) file text
    whatever its length; a pre-chunk whose text is only whitespace has nothing to cite and is skipped.
    """
    if doc.prechunked is not None:
        specs = []
        for pre in doc.prechunked:
            text = doc.files[pre.file_index].text
            end = trimmed_end(text, 0, len(text))
            start = trimmed_start(text, 0, end)
            if end > start:
                specs.append(ChunkSpec(pre.file_index, start, end))
        return specs
    return (_book_chunks(doc, chunk_size, overlap, keep_lone_headings=False)
            or _book_chunks(doc, chunk_size, overlap, keep_lone_headings=True))


def _book_chunks(doc: ParsedDocument, chunk_size: int, overlap: int, *, keep_lone_headings: bool) -> list[ChunkSpec]:
    """Each range of a file's content cut at its contents entries into sections (:func:`_sections`), each section
    split; the first chunk of a section holds some text after its heading when the chunk size allows."""
    specs = []
    for i, file in enumerate(doc.files):
        toc_offsets = [t.offset for t in doc.toc if t.file_index == i]
        for lo, hi in file.content():
            pieces = _between_headings(lo, hi, toc_offsets)
            for a, label, b, headed in _sections(file.text, pieces, keep_lone_headings=keep_lone_headings):
                heading = _heading_end(file.text, label, b) - a if headed else 0
                specs += [ChunkSpec(i, a + start, a + end, label if a + start < label < a + end else None)
                          for start, end in split_text(file.text[a:b], chunk_size=chunk_size, overlap=overlap,
                                                       heading=heading)]
    return specs


_HEADING_MAX = 200
"""A section longer than this (trimmed) is never taken for a lone heading, whatever its lines."""


def _between_headings(lo: int, hi: int, toc_offsets: Iterable[int]) -> list[tuple[int, int, bool]]:
    """``[lo, hi)`` cut where a contents entry begins, so that no chunk runs from one chapter into the next:
    a chunk is labelled by the contents path of its start, and "Chapter 1" must not hold "Chapter 2"'s text.
    Each piece says whether a contents entry begins it (the first one may start before any)."""
    offsets = set(toc_offsets)
    cuts = sorted(o for o in offsets if lo < o < hi)
    edges = [lo, *cuts, hi]
    return [(a, b, a in offsets) for a, b in zip(edges, edges[1:])]


def _sections(text: str, pieces: list[tuple[int, int, bool]], *,
              keep_lone_headings: bool) -> list[tuple[int, int, int, bool]]:
    """The pieces to chunk, as ``(start, label, end, headed)``.

    A piece that is only its heading (a part's title right above its first chapter's, with its setext underline;
    a title page's one line) holds nothing to retrieve or cite, so it travels with the piece after it, which is
    labelled by its own heading (``label``); a lone heading with no piece after it in its file (the last line of
    a PDF page, a spine item of its own) is no chunk at all, unless ``keep_lone_headings``. Text before the first
    contents entry is never taken for a heading: nothing says it is one.
    """
    sections: list[tuple[int, int, int, bool]] = []
    pending: int | None = None
    for a, b, headed in pieces:
        if headed and _only_heading(text, a, b):
            pending = a if pending is None else pending
            continue
        sections.append((a if pending is None else pending, a, b, headed))
        pending = None
    if pending is not None and keep_lone_headings:
        sections.append((pending, pending, pieces[-1][1], True))
    return sections


def _only_heading(text: str, a: int, b: int) -> bool:
    """True when ``text[a:b]`` is at most one short line with a letter or digit in it: the heading, maybe with
    its setext underline or an ornament ("INFERNO\\n-------", "“PIRACY”\\n❚❘❙❚❘❙")."""
    end = trimmed_end(text, a, b)
    start = trimmed_start(text, a, end)
    if end - start > _HEADING_MAX:
        return False
    worded = [line for line in text[start:end].split("\n") if any(ch.isalnum() for ch in line)]
    return len(worded) <= 1


def _heading_end(text: str, at: int, end: int) -> int:
    """Where the heading at ``at`` ends: its first line, with the lines right under it that hold no letter or
    digit (a setext underline, an ornament)."""
    stop = _line_end(text, trimmed_start(text, at, end), end)
    while stop < end:
        below = _line_end(text, stop + 1, end)
        line = text[stop + 1:below]
        if not line.strip() or any(ch.isalnum() for ch in line):
            break
        stop = below
    return stop


def _line_end(text: str, i: int, end: int) -> int:
    found = text.find("\n", i, end)
    return end if found < 0 else found
