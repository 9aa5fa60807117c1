"""Navigation in an EPUB's pages: text that only points elsewhere in the book, which is not the book.

An e-reader keeps a book's contents out of its reading flow. Here they stay in the canonical text, so positions are
exact and the reader shows them, but out of the chunks (``ParsedFile.body`` and ``ParsedFile.left_out``), so a
question whose words are chapter titles finds the chapters, not a list of their titles. Two shapes, both measured
by how much of the text lies in ``<nav>`` elements and in links to the book's own documents:

- a contents page (:func:`is_contents_page`): most of the page is such text: the nav document when the spine
  lists it, Moby-Dick's "Brief Contents", linear-algebra's part pages listing their chapters;
- a contents list inside a page (:func:`contents_lists`): paragraphs in a row that are each mostly such text: the
  table of contents under a specification's title and editors, a chapter's list of its sections under its
  opening paragraph.

A paragraph of prose with links in it, endnotes with their back links, a bibliography of outside links stay.
"""

from __future__ import annotations

from collections.abc import Callable

from ..positions import paragraph_spans
from .xhtml import HtmlText

__all__ = ["CONTENTS_SHARE", "ENTRY_SHARE", "MIN_ENTRIES", "contents_lists", "inward_ranges", "is_contents_page"]

CONTENTS_SHARE = 0.6
"""A page is a contents page when at least this share of its visible characters lies in ``<nav>`` and links into
the book. linear-algebra's chapter pages (a paragraph, then their sections) are 0.41-0.44, its part pages
0.66-0.90, the nav documents 0.95-1.0."""
ENTRY_SHARE = 0.8
"""A paragraph is an entry of a contents list when at least this share of it lies in such text: a title that is
all link, not a requirement of the EPUB specification that names the section defining it ("It must process XHTML
Content Documents as defined in XHTML Content Documents — Reading System Conformance", 0.6-0.7)."""
MIN_ENTRIES = 3
"""A page needs a ``<nav>`` or this many links into the book to be a contents page, and a contents list inside a
page this many paragraphs in a row: a "Previous" and a "Next" link are no contents."""


def inward_ranges(parsed: HtmlText, inward: Callable[[str], bool]) -> list[tuple[int, int]]:
    """The text of every ``<nav>`` and of every link whose href ``inward`` says points into the book, as sorted,
    disjoint ranges of ``parsed.text``; empty unless there is a ``<nav>`` or ``MIN_ENTRIES`` such links."""
    links = [(start, end) for start, end, href in parsed.links if inward(href)]
    if len(links) < MIN_ENTRIES and not parsed.navs:
        return []
    merged: list[tuple[int, int]] = []
    for start, end in sorted(links + parsed.navs):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def is_contents_page(text: str, ranges: list[tuple[int, int]]) -> bool:
    """Whether ``CONTENTS_SHARE`` of the page's visible text lies in ``ranges`` (:func:`inward_ranges`)."""
    covered = sum(_visible(text[start:end]) for start, end in ranges)
    return bool(ranges) and covered >= CONTENTS_SHARE * _visible(text) > 0


def contents_lists(text: str, ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``[start, end)`` of each run of ``MIN_ENTRIES`` or more paragraphs in a row that are each mostly in
    ``ranges``: a contents list inside a page that is otherwise text."""
    lists: list[tuple[int, int]] = []
    run: list[tuple[int, int]] = []
    first = 0  # the first range that does not end before the paragraph: paragraphs come in order
    for start, end in [*paragraph_spans(text), (len(text), len(text))] if ranges else ():
        while first < len(ranges) and ranges[first][1] <= start:
            first += 1
        covered = sum(_visible(text[max(a, start):min(b, end)]) for a, b in _meeting(ranges, first, end))
        if end > start and covered >= ENTRY_SHARE * _visible(text[start:end]):
            run.append((start, end))
            continue
        if len(run) >= MIN_ENTRIES:
            lists.append((run[0][0], run[-1][1]))
        run = []
    return lists


def _meeting(ranges: list[tuple[int, int]], first: int, end: int) -> list[tuple[int, int]]:
    """``ranges[first:]`` up to the first that starts at ``end`` or after."""
    last = first
    while last < len(ranges) and ranges[last][0] < end:
        last += 1
    return ranges[first:last]


def _visible(text: str) -> int:
    """How many characters of ``text`` are not whitespace."""
    return len("".join(text.split()))
