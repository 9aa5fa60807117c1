"""Position tags: ``[f{file}-{start}-{end}]`` names a span of one file's canonical text.

``file`` is a library-wide file id (not a spine index or page number), ``start``/``end`` are
Python code-point offsets, end exclusive. Tags are opaque to models: they are copied, never computed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import TagError

__all__ = ["Span", "ResolvedSpan", "TAG_PATTERN", "parse_tag", "find_tags", "defang_tags", "paragraph_spans", "without_nul"]

TAG_PATTERN = re.compile(r"\[f(\d{1,15})-(\d{1,15})-(\d{1,15})\]")
_BARE_TAG = re.compile(r"^\[?f(\d{1,15})-(\d{1,15})-(\d{1,15})\]?$")
"""Numbers are capped at 15 digits: no real file or offset is larger, and huge ones must not reach int()."""


@dataclass(frozen=True, slots=True, order=True)
class Span:
    """An exact character range of one stored file."""

    file: int
    start: int
    end: int

    @property
    def tag(self) -> str:
        return f"[f{self.file}-{self.start}-{self.end}]"

    @property
    def key(self) -> str:
        """The tag without brackets, as used in URLs and ``data-tag`` attributes."""
        return f"f{self.file}-{self.start}-{self.end}"


@dataclass(slots=True)
class ResolvedSpan:
    """The exact text a tag names, with its document, file and contents' path: what ``Library.resolve``
    returns, what a citation shows and what the reader's ``/api/resolve`` sends (less ``source``)."""

    tag: str
    """The tag's key (``Span.key``)."""
    doc_id: int
    doc_title: str
    file: int
    start: int
    end: int
    text: str
    toc_path: list[str]
    file_title: str
    label: str
    source: str
    """The document's source: its file, or its knowledge-base source."""


def parse_tag(text: str) -> Span:
    """Parse ``[f5-120-140]`` or ``f5-120-140``; raise TagError on anything else."""
    match = _BARE_TAG.match(text.strip())
    if not match:
        raise TagError(f"malformed tag {text!r}: expected [f<file>-<start>-<end>]")
    file, start, end = (int(g) for g in match.groups())
    if end <= start:
        raise TagError(f"malformed tag {text!r}: end must be greater than start")
    return Span(file, start, end)


def find_tags(text: str) -> list[Span]:
    """Every well-formed tag in ``text`` in order of appearance (duplicates kept)."""
    return [Span(int(a), int(b), int(c)) for a, b, c in TAG_PATTERN.findall(text) if int(c) > int(b)]


_TAG_LIKE = re.compile(r"\[(\s*[fF]\s*\d)")


def defang_tags(source_text: str) -> str:
    """Make tag-like strings *inside source text* unusable as citations before a model sees them.

    A book may contain ``[f1-0-25]`` literally (or an injected "cite [f0-0-10]"); if it reached the
    model verbatim it would count as evidence. Only tags chapterverse appends are real, so the ones in
    the text get a fullwidth bracket (``［f1-0-25]``), which reads the same and never parses.
    """
    return _TAG_LIKE.sub(r"［\1", source_text)


_BLANK_LINES = re.compile(r"\n(?:[^\S\n]*\n)+")
"""A line break and one or more blank lines after it: empty, or only spaces and tabs (as in CommonMark)."""


def paragraph_spans(text: str) -> list[tuple[int, int]]:
    """Spans of the paragraphs of a canonical text: runs separated by blank lines, trimmed.

    Canonical texts separate blocks with ``\\n\\n``; this is the one place that definition lives. A line of
    only spaces is blank too: Markdown kept as written (the Divina Commedia's ``" \\n"`` between stanzas and
    cantos) would otherwise be six paragraphs of up to 460 k characters.
    """
    spans: list[tuple[int, int]] = []
    start = 0
    for blank in _BLANK_LINES.finditer(text):
        _add_trimmed(text, start, blank.start(), spans)
        start = blank.end()
    _add_trimmed(text, start, len(text), spans)
    return spans


def _add_trimmed(text: str, start: int, end: int, spans: list[tuple[int, int]]) -> None:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    if end > start:
        spans.append((start, end))


def without_nul(text: str) -> str:
    """``text`` with every NUL (U+0000) replaced by U+FFFD, the replacement character.

    PostgreSQL text cannot hold NUL, and a library must read the same on every store, so no store keeps it.
    U+FFFD is one code point, as NUL is: every offset into the text, hence every tag, stays valid.
    """
    return text.replace("\x00", "\ufffd")
