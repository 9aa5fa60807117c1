"""Cutting canonical texts into exact spans: retrieval chunks, sentences and reading segments.

Everything here returns offsets into the canonical texts and never builds chunk text, so ``text[start:end]``
is always the piece itself, and splitting a 1.2 M-character book takes a fraction of a second.

- :func:`split_text` / :func:`chunk_document`: retrieval chunks of at most ``chunk_size`` code points.
- :func:`sentence_spans`: sentences, for quoting and scoring evidence.
- :func:`build_segments`: reading segments of ~20 k characters that follow the TOC, and
  :func:`tagged_source_text`, the text of a segment with a position tag after every paragraph.
"""

from __future__ import annotations

import bisect
import itertools
import math
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from .positions import Span, defang_tags, paragraph_spans

if TYPE_CHECKING:  # at run time it would import every reader (pypdf, ...) just for an annotation
    from .sources.base import ParsedDocument

__all__ = [
    "DEFAULT_SEPARATORS",
    "ChunkSpec",
    "SegmentSpec",
    "build_segments",
    "chunk_document",
    "segment_paragraphs",
    "sentence_spans",
    "split_text",
    "tagged_source_text",
    "tagged_text",
]

_CLOSERS = re.escape("\"'”’»)]}」』")

DEFAULT_SEPARATORS: tuple[str | re.Pattern[str], ...] = (
    "\n\n",
    "\n",
    re.compile(rf"[.?!…‽][{_CLOSERS}]*\s+|[。！？][{_CLOSERS}]*\s*"),
    re.compile(rf"[;:][{_CLOSERS}]*\s+|[；：]"),
    re.compile(rf",[{_CLOSERS}]*\s+|[，、]"),
    " ",
    "",
)
"""Boundary levels, coarsest first: blank line, line, sentence end, clause, comma, space, any character.

A plain string is a literal separator (``""`` means "between any two characters"); a compiled pattern
matches a separator. A piece boundary lies right after the separator.
"""


# --------------------------------------------------------------------------------------------------------------
# split_text


def _is_continuation(text: str, i: int) -> bool:
    """True when a cut before ``text[i]`` would split a grapheme (combining mark, ZWJ sequence, selector)."""
    if i <= 0 or i >= len(text):
        return False
    ch = text[i]
    return (unicodedata.category(ch) in ("Mn", "Mc", "Me") or ch in "\u200d\ufe0e\ufe0f"
            or "\U0001f3fb" <= ch <= "\U0001f3ff" or text[i - 1] == "\u200d")


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
                if m.end() >= lo and _rstrip(text, s, m.end()) <= hi:
                    best = m.end()
            return best
        if not self.literal:
            b = hi
            while b > lo and _is_continuation(text, b):
                b -= 1
            return b
        size = len(self.literal)
        idx = text.rfind(self.literal, s, hi + size)
        while idx >= 0 and idx + size >= lo:
            if _rstrip(text, s, idx + size) <= hi:
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
            while b < hi and _is_continuation(text, b):
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


def _rstrip(text: str, start: int, end: int) -> int:
    while end > start and text[end - 1].isspace():
        end -= 1
    return end


def _lstrip(text: str, start: int, end: int) -> int:
    while start < end and text[start].isspace():
        start += 1
    return start


def split_text(
    text: str,
    *,
    chunk_size: int = 512,
    overlap: int = 64,
    separators: Sequence[str | re.Pattern[str]] = DEFAULT_SEPARATORS,
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
    """
    if chunk_size <= 0:
        raise ValueError(f"chunk_size must be positive, got {chunk_size}")
    if not 0 <= overlap < chunk_size:
        raise ValueError(f"overlap must be in [0, chunk_size), got {overlap} with chunk_size={chunk_size}")
    seps = _compile(tuple(separators))
    n_end = _rstrip(text, 0, len(text))
    s = _lstrip(text, 0, n_end)
    spans: list[tuple[int, int]] = []
    prev_end = 0
    while s < n_end:
        if n_end - s <= chunk_size:
            spans.append((s, n_end))
            break
        hi = s + chunk_size
        lo = max(s + chunk_size // 4, prev_end + 1, s + 1)
        cut = next(b for b in (sep.last(text, s, lo, hi) for sep in seps) if b is not None)
        end = _rstrip(text, s, cut)
        spans.append((s, end))
        prev_end = end
        nxt = _overlap_start(text, seps, s, end, overlap) if overlap else cut
        s = _lstrip(text, max(nxt, s + 1), n_end)
    return spans


def _overlap_start(text: str, seps: tuple[_Sep, ...], s: int, end: int, overlap: int) -> int:
    """Where the chunk after ``text[s:end]`` starts: a boundary ``overlap // 2`` to ``overlap`` before ``end``."""
    lo = max(s + 1, end - overlap)
    hi = max(lo, end - overlap // 2)
    for sep in seps:
        b = sep.first(text, s, lo, hi)
        if b is not None:
            return b
    return lo


# --------------------------------------------------------------------------------------------------------------
# chunk_document


@dataclass(frozen=True, slots=True)
class ChunkSpec:
    """One retrieval chunk: ``doc.files[file_index].text[start:end]``. Its index is its place in the list."""

    file_index: int
    start: int
    end: int


def chunk_document(doc: ParsedDocument, *, chunk_size: int = 512, overlap: int = 64) -> list[ChunkSpec]:
    """The chunks of a document in reading order; a chunk never crosses a file boundary, nor leaves a file's
    ``body`` (a PDF page's running header and footer are not content).

    Pre-chunked documents keep one chunk per :class:`PreChunk`, spanning its whole (trimmed) file text
    whatever its length; a pre-chunk whose text is only whitespace has nothing to cite and is skipped.
    """
    if doc.prechunked is not None:
        specs = []
        for pre in doc.prechunked:
            text = doc.files[pre.file_index].text
            end = _rstrip(text, 0, len(text))
            start = _lstrip(text, 0, end)
            if end > start:
                specs.append(ChunkSpec(pre.file_index, start, end))
        return specs
    specs = []
    for i, file in enumerate(doc.files):
        lo, hi = file.body or (0, len(file.text))
        specs += [ChunkSpec(i, lo + start, lo + end)
                  for start, end in split_text(file.text[lo:hi], chunk_size=chunk_size, overlap=overlap)]
    return specs


# --------------------------------------------------------------------------------------------------------------
# sentence_spans

_TERMINATOR = re.compile(rf"[.?!‽…]+[{_CLOSERS}]*|[。！？]+[{_CLOSERS}]*")
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
    nxt = _lstrip(text, after, block_end)
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
                s, e = cur, _rstrip(text, cur, m.end())
                if e > s:
                    spans.append((s, e))
                cur = _lstrip(text, m.end(), b_end)
        if cur < b_end:
            spans.append((cur, b_end))
    return spans


# --------------------------------------------------------------------------------------------------------------
# build_segments


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
    while x > flo and _is_continuation(text, x):
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
