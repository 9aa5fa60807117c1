"""Reading segments: a document cut into ~20 k-character pieces that follow its TOC, and their tagged text.

:func:`build_segments` tiles a document in reading order (positions are ``(file_index, offset)``, never
text); :func:`tagged_source_text` is a segment's text with a position tag after every paragraph, what a
model reads when it summarizes or selects segments.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..positions import Span, defang_tags, paragraph_spans
from .boundaries import is_continuation

if TYPE_CHECKING:  # at run time it would import every reader (pypdf, ...) just for an annotation
    from ..sources.base import ParsedDocument

__all__ = ["SegmentSpec", "build_segments", "segment_paragraphs", "tagged_source_text", "tagged_text"]

@dataclass(slots=True)
class SegmentSpec:
    """A reading segment: the text from ``start`` to ``end`` (exclusive), each a ``(file_index, offset)``.

    ``title_path`` runs from the TOC root to the node, e.g. ``["PIRACY", "Chapter 1: Creators"]``. A batch
    of merged siblings is titled by their parent's path plus ``"<first title> – <last title>"`` (en dash);
    text before the first TOC entry, and a document without a TOC, are titled ``[doc.title]``. Pieces of a
    long untitled stretch all carry the stretch's path.
    """

    seq: int
    title_path: list[str]
    start: tuple[int, int]
    end: tuple[int, int]


class _Layout:
    """The document as one reading-order sequence: file ``i`` starts at global offset ``starts[i]``."""

    def __init__(self, texts: Sequence[str]) -> None:
        self.texts = texts
        self.starts: list[int] = []
        total = 0
        for t in texts:
            self.starts.append(total)
            total += len(t)
        self.total = total

    def to_global(self, file_index: int, offset: int) -> int:
        return self.starts[file_index] + offset

    def to_pos(self, g: int) -> tuple[int, int]:
        """Canonical ``(file_index, offset)`` of a global offset: a file start names the first file there."""
        if g >= self.total:
            return (len(self.texts) - 1, len(self.texts[-1]))
        i = bisect.bisect_left(self.starts, g)
        if i < len(self.starts) and self.starts[i] == g:
            return (i, 0)
        i = bisect.bisect_right(self.starts, g) - 1
        return (i, g - self.starts[i])

    def paragraph_starts(self, a: int, b: int) -> list[int]:
        """Global starts of the paragraphs (cut at ``[a, b)``) strictly inside ``(a, b)``."""
        out: list[int] = []
        first = bisect.bisect_right(self.starts, a) - 1
        for i in range(max(first, 0), len(self.texts)):
            g0 = self.starts[i]
            if g0 >= b:
                break
            lo, hi = max(a - g0, 0), min(b - g0, len(self.texts[i]))
            if hi > lo:
                out.extend(g0 + lo + s for s, _ in paragraph_spans(self.texts[i][lo:hi]))
        return [g for g in out if a < g < b]


@dataclass(slots=True)
class _Node:
    title: str
    level: float
    start: int
    end: int = 0
    children: list[_Node] | None = None


@dataclass(slots=True)
class _Unit:
    """A contiguous run to place into segments, before merging."""

    start: int
    end: int
    group: int  # id of the parent node: only units of one group merge
    group_path: list[str]
    label: str | None  # title within the group; None for a node's own text before its first child
    mergeable: bool = True

    @property
    def size(self) -> int:
        return self.end - self.start


_MAX_DEPTH = 32


def _toc_tree(doc: ParsedDocument, layout: _Layout) -> _Node:
    root = _Node(doc.title or "Untitled", -math.inf, 0, layout.total, [])
    entries = [e for e in doc.toc
               if 0 <= e.file_index < len(doc.files) and 0 <= e.offset <= len(doc.files[e.file_index].text)]
    entries.sort(key=lambda e: layout.to_global(e.file_index, e.offset))  # stable: parents stay first
    stack = [root]
    for e in entries:
        node = _Node(" ".join(e.title.split()) or "Untitled", e.level, layout.to_global(e.file_index, e.offset),
                     children=[])
        while stack[-1].level >= node.level or len(stack) > _MAX_DEPTH:  # a runaway TOC nests no deeper
            stack.pop()
        assert stack[-1].children is not None
        stack[-1].children.append(node)
        stack.append(node)

    def close(node: _Node) -> None:
        kids = node.children or []
        for k, child in enumerate(kids):
            child.end = kids[k + 1].start if k + 1 < len(kids) else node.end
            close(child)

    close(root)
    return root


def build_segments(
    doc: ParsedDocument,
    *,
    target_chars: int = 18_000,
    max_node_chars: int = 20_000,
    long_min: int = 30_000,
    long_max: int = 40_000,
    min_chars: int = 3_000,
) -> list[SegmentSpec]:
    """Cut a document into reading segments that follow its TOC; they tile it in reading order.

    - A TOC node (its entry plus everything up to the next entry of the same or a higher level) of at
      most ``max_node_chars`` is one segment; a larger one is split into its own leading text and its
      children, recursively.
    - Consecutive small siblings are merged greedily into batches of at most ``max_node_chars``, closed
      once they reach ``target_chars``.
    - A stretch over ``max_node_chars`` with no finer TOC (no TOC at all: the whole document) is cut at
      paragraph starts (falling back to a line, sentence, word, then any character) into the fewest
      balanced pieces of at most ``long_max``; pieces are at least ``long_min`` where the length allows
      (a 41 k stretch gives two pieces of ~20 k, not 40 k + 1 k).
    - A segment under ``min_chars`` (a part's title page before a long chapter) joins a neighbour when
      the result stays within ``max(long_max, max_node_chars)``, which is the bound on every segment.

    Entries pointing outside the document are dropped; entries are taken in reading order and nested
    by level. Sizes are in code points of canonical text, file boundaries adding nothing.
    """
    if not 0 < target_chars <= max_node_chars or not 0 < long_min <= long_max:
        raise ValueError("need 0 < target_chars <= max_node_chars and 0 < long_min <= long_max")
    texts = [f.text for f in doc.files]
    if not texts:
        return []
    layout = _Layout(texts)
    cap = max(long_max, max_node_chars)
    doc_title = doc.title or "Untitled"
    if layout.total <= max_node_chars:
        return [SegmentSpec(0, [doc_title], (0, 0), layout.to_pos(layout.total))]
    root = _toc_tree(doc, layout)
    units: list[_Unit] = []

    def long_units(a: int, b: int, group: int, group_path: list[str], label: str | None) -> None:
        cuts = [a, *_long_cuts(layout, a, b, long_min, long_max), b]
        for x, y in itertools.pairwise(cuts):
            units.append(_Unit(x, y, group, group_path, label, mergeable=False))

    def decompose(node: _Node, group: int, group_path: list[str], label: str | None) -> None:
        if node.end <= node.start:
            return
        if node.end - node.start <= max_node_chars:
            units.append(_Unit(node.start, node.end, group, group_path, label))
            return
        path = group_path + [label] if label is not None else [doc_title]
        kids = node.children or []
        if not kids:
            long_units(node.start, node.end, group, group_path, label if label is not None else doc_title)
            return
        own_end = kids[0].start
        if own_end - node.start > max_node_chars:
            long_units(node.start, own_end, id(node), path, None)
        elif own_end > node.start:
            units.append(_Unit(node.start, own_end, id(node), path, None))
        child_path = path if label is not None else []
        for child in kids:
            decompose(child, id(node), child_path, child.title)

    decompose(root, 0, [], None)
    batches = _pack(units, target_chars, max_node_chars)
    pieces = [(b[0].start, b[-1].end, _batch_title(b, doc_title), b[0].label is None) for b in batches]
    pieces = _absorb_small(pieces, min_chars, cap)
    return [SegmentSpec(seq, path, layout.to_pos(a), layout.to_pos(b))
            for seq, (a, b, path, _) in enumerate(pieces)]


def _pack(units: list[_Unit], target: int, limit: int) -> list[list[_Unit]]:
    batches: list[list[_Unit]] = []
    cur: list[_Unit] = []
    size = 0
    for u in units:
        fits = cur and u.mergeable and cur[-1].mergeable and u.group == cur[-1].group and size + u.size <= limit
        if cur and not fits:
            batches.append(cur)
            cur, size = [], 0
        cur.append(u)
        size += u.size
        if size >= target or not u.mergeable:
            batches.append(cur)
            cur, size = [], 0
    if cur:
        batches.append(cur)
    return batches


def _batch_title(batch: list[_Unit], doc_title: str) -> list[str]:
    labelled = [u for u in batch if u.label is not None]
    if not labelled:
        return list(batch[0].group_path) or [doc_title]
    group_path = labelled[0].group_path  # the root's leading text is titled [doc.title], its children []
    labels = [u.label for u in labelled if u.label is not None]
    if len(labels) == 1:
        return [*group_path, labels[0]]
    return [*group_path, f"{labels[0]} – {labels[-1]}"]


def _absorb_small(pieces: list[tuple[int, int, list[str], bool]], min_chars: int,
                  cap: int) -> list[tuple[int, int, list[str], bool]]:
    """Join each segment under ``min_chars`` to a neighbour: a node's leading text to the next, else the previous."""
    out: list[tuple[int, int, list[str], bool]] = []
    i = 0
    while i < len(pieces):
        a, b, path, leading = pieces[i]
        if b - a < min_chars and len(pieces) > 1:
            nxt = pieces[i + 1] if i + 1 < len(pieces) else None
            can_next = nxt is not None and nxt[1] - a <= cap
            can_prev = bool(out) and b - out[-1][0] <= cap
            if can_next and (leading or not can_prev):
                assert nxt is not None
                pieces[i + 1] = (a, nxt[1], nxt[2], leading)
                i += 1
                continue
            if can_prev:
                pa, _, ppath, pleading = out[-1]
                out[-1] = (pa, b, ppath, pleading)
                i += 1
                continue
        out.append((a, b, path, leading))
        i += 1
    return out


def _long_cuts(layout: _Layout, a: int, b: int, long_min: int, long_max: int) -> list[int]:
    """Global cut points strictly inside ``(a, b)`` giving the fewest balanced pieces of at most ``long_max``."""
    candidates = layout.paragraph_starts(a, b)
    cuts: list[int] = []
    cur = a
    while b - cur > long_max:
        remaining = b - cur
        piece = remaining / math.ceil(remaining / ((long_min + long_max) / 2))  # leaves room to align
        ideal = cur + piece
        lo = cur + (long_min if piece >= long_min else max(1, int(piece / 2)))
        hi = min(cur + long_max, b - 1)
        cut = _nearest(candidates, ideal, lo, hi)
        if cut is None:
            cut = _fallback_cut(layout, ideal, lo, hi)
        cuts.append(cut)
        cur = cut
    return cuts


def _nearest(sorted_points: list[int], ideal: float, lo: int, hi: int) -> int | None:
    inside = sorted_points[bisect.bisect_left(sorted_points, lo):bisect.bisect_right(sorted_points, hi)]
    return min(inside, key=lambda p: abs(p - ideal)) if inside else None


def _fallback_cut(layout: _Layout, ideal: float, lo: int, hi: int) -> int:
    """A cut near ``ideal`` after a newline, sentence end or space within the file holding it; else at ``ideal``."""
    g = int(ideal)
    i = bisect.bisect_right(layout.starts, g) - 1
    text, g0 = layout.texts[i], layout.starts[i]
    flo, fhi = max(lo - g0, 1), min(hi - g0, len(text) - 1)
    x = g - g0
    for sep in ("\n", ". ", " "):
        found = [p + len(sep) for p in (text.rfind(sep, flo, x), text.find(sep, x, fhi)) if p >= 0]
        found = [p for p in found if flo <= p <= fhi]
        if found:
            return g0 + min(found, key=lambda p: abs(p - x))
    while x > flo and is_continuation(text, x):
        x -= 1
    return g0 + x


# --------------------------------------------------------------------------------------------------------------
# paragraphs and tagged text of a segment


def segment_paragraphs(texts: Sequence[str], seg: SegmentSpec) -> list[tuple[int, int, int]]:
    """``(file_index, start, end)`` of each paragraph of the segment, clipped to its bounds, in reading order."""
    (f0, o0), (f1, o1) = seg.start, seg.end
    out: list[tuple[int, int, int]] = []
    for fi in range(f0, min(f1, len(texts) - 1) + 1):
        text = texts[fi]
        lo = o0 if fi == f0 else 0
        hi = min(o1 if fi == f1 else len(text), len(text))
        if hi > lo:
            out.extend((fi, lo + s, lo + e) for s, e in paragraph_spans(text[lo:hi]))
    return out


def tagged_text(paragraphs: Iterable[tuple[Span, str]]) -> str:
    """Each paragraph followed at once by its tag, blank-line separated: ``It was a dark night.[f5-120-140]``."""
    return "\n\n".join(f"{defang_tags(text)}{span.tag}" for span, text in paragraphs)


def tagged_source_text(texts: Sequence[str], file_ids: Sequence[int] | Mapping[int, int], seg: SegmentSpec) -> str:
    """The segment's text with a library-wide tag after every paragraph; ``file_ids[file_index]`` is the file id."""
    return tagged_text((Span(file_ids[fi], s, e), texts[fi][s:e]) for fi, s, e in segment_paragraphs(texts, seg))
