"""What in a PDF is not the book, found by its outline: a Project Gutenberg licence, contents and lists of figures.

The text and EPUB readers keep a Gutenberg edition's licence and a book's contents list out of the chunks
(``sources.structure``, ``sources.navigation``); a PDF made by Project Gutenberg (its mathematics books are
typeset in LaTeX) prints the same, and its outline names the sections: "PG License.", "Contents", "List of
Figures". :func:`leave_out_front_matter` narrows the pages of those sections out of each page's ``body``; the
text stays, so positions are exact and the reader shows the pages, but they are never chunked, searched or cited.
A START and an END line in the text layer are honoured as in the other readers.
"""

from __future__ import annotations

import re

from .base import ParsedDocument, TocEntry
from .structure import gutenberg_spans

__all__ = ["leave_out_front_matter", "MAX_LIST_SHARE"]

_LICENCE = re.compile(r"^\W*(?:the\s+)?(?:full\s+)?(?:(?:project\s+gutenberg|pg)(?:['’]s)?\s+(?:e-?book\s+)?)?"
                      r"licen[cs]e(?:\s+agreement)?\W*$", re.IGNORECASE)
_LISTS = re.compile(r"^\W*(?:(?:table\s+of\s+)?contents|(?:list|table|index)\s+of\s+(?:the\s+)?(?:illustrations|figures|"
                    r"plates|tables|maps|engravings)|illustrations|[íi]ndice(?:\s+general)?|table\s+des\s+mati[èe]res|"
                    r"inhaltsverzeichnis|abbildungsverzeichnis|sommaire)\W*$", re.IGNORECASE)
MAX_LIST_SHARE = 0.1
"""A contents or figures section longer than this share of the pages (and more than two pages) is not a list:
the outline names a chapter so, and it stays."""
_NOT_WORD = re.compile(r"\W+")


def leave_out_front_matter(parsed: ParsedDocument) -> ParsedDocument:
    """Narrow the bodies of ``parsed``'s pages past its Gutenberg header and licence and its outline's licence,
    contents and list sections (see the module's notes)."""
    pages = parsed.files
    for page, span in zip(pages, gutenberg_spans([page.text for page in pages]) or ()):
        page.narrow(*span)
    entries = sorted(parsed.toc, key=lambda e: (e.file_index, e.offset))
    for number, entry in enumerate(entries):
        licence = bool(_LICENCE.match(entry.title))
        if not licence and not _LISTS.match(entry.title):
            continue
        following = next((e for e in entries[number + 1:] if e.file_index > entry.file_index
                          or e.file_index == entry.file_index and e.offset > entry.offset), None)
        end_page = following.file_index if following is not None else len(pages)
        if not licence and end_page - entry.file_index > max(2, MAX_LIST_SHARE * len(pages)):
            continue
        _leave_out(parsed, entry, following, end_page)
    return parsed


def _leave_out(parsed: ParsedDocument, entry: TocEntry, following: TocEntry | None, end_page: int) -> None:
    """Narrow out the section from ``entry``'s title to where ``following`` begins (its title on its page)."""
    pages = parsed.files
    first = pages[entry.file_index]
    first.narrow(0, _title_at(first.text, entry.title))
    for page in pages[entry.file_index + 1:end_page]:
        page.narrow(0, 0)
    if following is not None and following.file_index == entry.file_index:
        return
    if following is not None and end_page < len(pages):
        last = pages[end_page]
        last.narrow(_title_at(last.text, following.title), len(last.text))


def _title_at(text: str, title: str) -> int:
    """Where ``title`` is printed on the page (its first word at a line's start, the rest following, spaces
    and punctuation aside), else 0: the section is taken to begin at the page's top."""
    words = [w for w in _NOT_WORD.split(title) if w]
    if not words:
        return 0
    pattern = re.compile(r"^\W*" + r"\W+".join(re.escape(w) for w in words), re.IGNORECASE | re.MULTILINE)
    found = pattern.search(text)
    return found.start() if found else 0
