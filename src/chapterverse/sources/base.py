"""What every format reader produces: a ParsedDocument of canonical texts and a TOC.

Readers are pure: bytes on disk in, ParsedDocument out, or a typed SourceError. Nothing here
touches the store, so a reader that fails can never leave a half-written document behind.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..positions import without_nul

__all__ = ["ParsedFile", "TocEntry", "PreChunk", "ParsedDocument"]


@dataclass(slots=True)
class ParsedFile:
    """One file of a document: an EPUB spine item, a PDF page, a whole Markdown file, one JSONL line.

    ``text`` is the canonical text that positions point into; blocks are separated by a blank line. It never
    holds NUL (replaced by U+FFFD, see ``without_nul``), so what is chunked, embedded and hashed is exactly
    what every store keeps.
    """

    text: str
    title: str = ""
    label: str = ""
    """EPUB: the spine item's href. PDF: the page label ("iv", "12"), else the 1-based page number."""
    has_text: bool = True
    """False for a PDF page without a text layer (scanned image)."""
    body: tuple[int, int] | None = None
    """The part of ``text`` that is content, [start, end), when it is not all of it: a PDF page's running
    header and footer lie outside (``sources.pdf_running_lines``), as do a Project Gutenberg edition's header
    and licence (``sources.structure.gutenberg_spans``), and all of an EPUB's contents page (an empty body,
    ``sources.navigation``). They stay in ``text``, so positions are exact, but are never chunked, so never
    searched, cited or summarised."""
    left_out: list[tuple[int, int]] = field(default_factory=list)
    """Sorted, disjoint ranges inside ``body`` that are not content either: a contents list inside an EPUB page
    (``sources.navigation``). Not chunked, as what lies outside ``body``."""

    def __post_init__(self) -> None:
        self.text = without_nul(self.text)

    def narrow(self, start: int, end: int) -> None:
        """Keep as ``body`` only what lies both in it and in [start, end) (nothing, when they do not meet)."""
        lo, hi = self.body or (0, len(self.text))
        lo = max(lo, start)
        self.body = (lo, max(lo, min(hi, end)))

    def content(self) -> list[tuple[int, int]]:
        """The ranges of ``text`` that are content, in order: ``body`` less what is ``left_out``."""
        lo, hi = self.body or (0, len(self.text))
        ranges = []
        for start, end in self.left_out:
            if start > lo:
                ranges.append((lo, min(start, hi)))
            lo = max(lo, end)
        ranges.append((lo, hi))
        return [(start, end) for start, end in ranges if end > start]


@dataclass(slots=True)
class TocEntry:
    """A TOC node pointing at (file index within the document, code-point offset in that file)."""

    title: str
    level: int
    file_index: int
    offset: int


@dataclass(slots=True)
class PreChunk:
    """A chunk that arrives already cut (JSONL line, API item): it stays exactly one chunk."""

    file_index: int
    source: str
    chunk_index: int
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class ParsedDocument:
    """A readable document. ``prechunked`` is set only for pre-chunked input (one file per chunk)."""

    title: str
    format: str
    files: list[ParsedFile]
    toc: list[TocEntry] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
    prechunked: list[PreChunk] | None = None
    warnings: list[str] = field(default_factory=list)
    """Recoverable problems, e.g. "nav is broken, TOC built from spine order and headings"."""
