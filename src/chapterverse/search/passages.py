"""Search hits shown as whole sentences, for people reading a list of results.

A retrieval chunk starts and ends where its 512-code-point window fell, often mid-sentence: Moby-Dick's
"white whale" hit began "who turned out to be the chief-mate.", and a reader shown that cannot tell who spoke.
``search`` (the command and the reader's ``/api/search``) shows instead the sentences the chunk cuts, widened
to their start and end when those lie within ``REACH`` code points (a sentence never crosses a blank line),
else narrowed to the nearest whole sentence inside the chunk. The tag names exactly what is shown, so
``resolve`` and the reader's highlight agree with it. What the indexes hold, and the chunks the knowledge-base
API and the model's tools see, stay the chunks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..chunking import sentence_spans
from ..positions import Span, defang_tags

if TYPE_CHECKING:
    from ..library import Library
    from .retrieval import Hit

__all__ = ["REACH", "ShownPassage", "search_results", "shown_passages", "whole_sentences"]

REACH = 240
"""How far (code points) a shown passage may reach past its chunk to finish a sentence: one long sentence."""


@dataclass(frozen=True, slots=True)
class ShownPassage:
    """What a search result shows: the exact span and its text (``canonical[start:end]``)."""

    span: Span
    text: str


def whole_sentences(text: str, start: int, end: int, reach: int = REACH) -> tuple[int, int]:
    """``text[start:end]`` widened (or narrowed) to whole sentences: the span a search result shows.

    The sentences are found in a window ``reach`` code points wider than the span on each side; the window's
    first and last sentences may be cut by the window itself rather than by the text, so the span is widened
    to them only where the window reached the text's own start or end."""
    low, high = max(0, start - reach), min(len(text), end + reach)
    sentences = sentence_spans(text, low, high)
    inside = [i for i, s in enumerate(sentences) if s[1] > start and s[0] < end]
    if not inside:
        return start, end
    first, last = inside[0], inside[-1]
    first_is_whole = sentences[first][0] >= start or first > 0 or low == 0
    last_is_whole = sentences[last][1] <= end or last < len(sentences) - 1 or high == len(text)
    shown_start = sentences[first][0] if first_is_whole else sentences[first + 1][0] if first < last else start
    shown_end = sentences[last][1] if last_is_whole else sentences[last - 1][1] if last > first else end
    return (shown_start, shown_end) if shown_start < shown_end else (start, end)


def shown_passages(hits: Sequence[Hit], file_text: Callable[[int], str]) -> list[ShownPassage]:
    """The passage each hit shows, reading each file's canonical text once (``file_text(file_id)``)."""
    texts: dict[int, str] = {}
    shown = []
    for hit in hits:
        file_id = hit.chunk.file_id
        if file_id not in texts:
            texts[file_id] = file_text(file_id)
        canonical = texts[file_id]
        start, end = whole_sentences(canonical, hit.chunk.start, hit.chunk.end)
        shown.append(ShownPassage(Span(file_id, start, end), canonical[start:end]))
    return shown


def search_results(library: Library, hits: Sequence[Hit]) -> list[dict[str, Any]]:
    """What a search shows for each hit, the command (and its ``--json``) and the reader's ``/api/search``
    alike: the tag and text of its whole sentences, its book, contents path and printed page, its score."""
    pages = library.printed_pages(hits)
    shown = shown_passages(hits, lambda file_id: library.store.file(file_id).text)
    return [{"tag": p.span.key, "doc_id": h.chunk.doc_id, "doc_title": h.doc_title, "toc_path": h.chunk.title_path,
             "page": pages.get(h.chunk.file_id), "text": defang_tags(p.text), "score": round(h.score, 4)}
            for h, p in zip(hits, shown, strict=True)]
