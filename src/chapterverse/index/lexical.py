"""A persistent BM25 index kept beside the SQLite file: memory-mapped postings of stems and stem prefixes.

Why not the simple way (build the postings in memory from ``store.lexical_rows()`` whenever the store
changes): that build is Python string work over every token of the library, about 15 s at 100 k chunks,
paid at the first query after every start and after every write; at 1 M chunks it does not fit a query at
all, and the fallback (FTS5 ``bm25()``) took 120-180 ms a query. This index keeps the postings in ``.npy``
files that the OS pages in on demand, follows the store by its generation counter like
:mod:`chapterverse.index.vectors` (:class:`chapterverse.index.files.FollowedIndex`), and only appends what changed.

*What is stored, and what is not.* Per segment (a run of consecutive chunk ids): the chunk, document and
file id and the BM25 length of each row; a vocabulary of keys (``s:<stem>`` and ``p:<prefix>``, one
namespace for both rankings) sorted by a 64-bit hash, with the UTF-8 text of each key to verify a hit; and
per key its postings: row numbers and term frequencies (heading occurrences weighted), 4 bytes a posting.
Everything that depends on the whole library (document frequencies, the number of live chunks, the average
length) is computed when searching or when a snapshot is made, never stored: so appending a document or
masking a removed one leaves every stored number valid, and scores equal those of a fresh in-memory build
bit for bit (the same float64 operations in the same order).

Layout of the directory (default ``<library>.lexical/`` beside ``<library>.sqlite3``)::

    manifest.json          format, heading weight, prefix length, store generation, segments, removed docs
    s000001.ids.npy        int64 chunk id of each row (ascending)
    s000001.docs.npy       int64 document id of each row
    s000001.files.npy      int64 file id of each row
    s000001.lengths.npy    float64 BM25 length of each row (body terms + heading weight * heading terms)
    s000001.keys.npy       uint64 hash of each key, ascending
    s000001.text.npy       uint8 the keys' UTF-8 bytes, end to end, in hash order
    s000001.offsets.npy    int64 where each key's bytes start in ``text`` (one more entry: the end)
    s000001.ptr.npy        int64 where each key's postings start (one more entry: the end)
    s000001.rows.npy       uint16 row of each posting, ascending within a key (int32 in larger segments)
    s000001.tf.npy         uint16 twice the term frequency (float32 or float64 where halves are not exact)

*Updates.* Chunk ids only grow, so after a write the index appends segments built from the chunks newer
than the largest id it holds, and records documents that no longer exist as removed (their rows are masked
and leave every statistic). A chunk whose metadata was edited in place (``Store.update_chunk_metadata``) keeps
its id, so no append sees it: an index of a generation before the store's latest edit is rebuilt (1.9 s at
20,000 chunks, 5.4 s at 50,000 on two busy cores; a per-row mask and a segment of edited rows would avoid it).
A segment whose removed rows pass ``dead_share`` is rebuilt from the store's rows
of its id range; past ``max_small`` small segments, each run of adjacent ones is rebuilt into full ones. Counts that
disagree with the store, a changed format, or files that do not match the manifest rebuild from the store;
the retriever has a library above ``FusionWeights.max_memory_chunks`` rebuilt by a background thread
(:meth:`LexicalIndex.view_or_build`) and answers from the store's own BM25 until it is done.

*Crash safety and concurrency* are those of the vector index: files are written under temporary names,
fsynced and renamed, the manifest last; searches read an immutable snapshot; writers in different
processes serialize on ``flock`` of ``.lock`` in the directory.

Stores that lend no :class:`~chapterverse.store.IndexFeed` (PostgreSQL) get the same structure in memory,
rebuilt from ``lexical_rows()`` when their generation moves.
"""

from __future__ import annotations

import hashlib
import importlib
import logging
import math
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from itertools import chain
from operator import itemgetter
from pathlib import Path
from typing import Any

import numpy as np

from ..store import ChunkStore, IndexFeed
from .files import CorruptIndex, FollowedIndex, Refresh, load_npy, save_npy

__all__ = ["LexicalIndex", "LexicalSettings", "LexicalView", "LexicalStats", "Postings", "TermMatches",
           "default_directory", "FORMAT"]

FORMAT = 2
"""Version of the on-disk layout and of the terms in it; another version is rebuilt, never read. 2: the terms
hold the joined forms of hyphenated words (``analysis.compound_words``), which the store's rows got by its
migration 5; files of format 1 hold the terms from before."""
_STEM, _PREFIX = "s:", "p:"
_ROW_ARRAYS = {"ids": "<i8", "docs": "<i8", "files": "<i8", "lengths": "<f8"}
_LOG = logging.getLogger(__name__)
KEYS_KEPT = 4_096
"""Keys whose postings' places a :class:`LexicalView` keeps (a few hundred bytes each); past this it starts over."""

Row = tuple[int, int, int, str, str]
"""(chunk id, doc id, file id, terms, heading terms), as ``lexical_rows()`` returns them."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LexicalSettings:
    """BM25 parameters (the first four come from :class:`~chapterverse.search.retrieval.FusionWeights`) and upkeep."""

    heading: float = 0.5
    """A heading term counts this much of a body term (stored in the term frequencies)."""
    prefix: int = 5
    """Letters of a stem that the prefix ranking compares (stored in the keys)."""
    k1: float = 1.2
    b: float = 0.75
    segment_rows: int = 65_536
    """Rows per segment built from the store: bounds the memory of a build (about 350 MB of Python strings)
    while keeping the per-segment overhead of a query (one vocabulary lookup) small."""
    max_small: int = 8
    """More segments under half of ``segment_rows`` than this are rebuilt into full ones."""
    dead_share: float = 0.20
    """A segment whose rows of removed documents pass this share is rebuilt without them."""

    @property
    def stored(self) -> tuple[float, int]:
        """What the files depend on; ``k1`` and ``b`` are applied when searching."""
        return (self.heading, self.prefix)


def default_directory(feed: IndexFeed, settings: LexicalSettings | None = None) -> Path:
    """``library.sqlite3`` -> ``library.lexical/`` (other heading weights or prefix lengths get their own)."""
    settings = settings or LexicalSettings()
    suffix = "" if settings.stored == LexicalSettings().stored else f"-h{settings.heading:g}-p{settings.prefix}"
    return feed.path.with_name(f"{feed.path.stem}.lexical{suffix}")


@dataclass(frozen=True, slots=True)
class LexicalStats:
    rows: int
    live: int
    segments: int
    postings: int
    keys: int
    generation: int
    bytes_on_disk: int
    persistent: bool
    last_refresh: Refresh
    """What the latest refresh that changed anything did (load, append, rebuild...)."""


# ----------------------------------------------------------------------------------------------------------
# segments: building and looking up


def _hash(key: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little")


@dataclass(frozen=True, slots=True)
class _Segment:
    name: str
    ids: np.ndarray
    docs: np.ndarray
    files: np.ndarray
    lengths: np.ndarray
    keys: np.ndarray
    text: np.ndarray
    offsets: np.ndarray
    ptr: np.ndarray
    rows: np.ndarray
    """Row of each posting: uint16 in segments of up to 65,536 rows (all that the store feed builds), else int32."""
    tf: np.ndarray
    """Term frequency of each posting, encoded by :func:`_encode_tf`."""

    @property
    def size(self) -> int:
        return len(self.ids)

    def find(self, hashes: np.ndarray, encoded: Sequence[bytes]) -> list[tuple[int, int, int]]:
        """(which wanted key, start, end of its postings) of the wanted keys this segment holds."""
        vocabulary = len(self.keys)
        if not vocabulary:
            return []
        start = np.searchsorted(self.keys, hashes)
        hits = np.flatnonzero(self.keys[np.minimum(start, vocabulary - 1)] == hashes)
        at = start[hits]
        found = []
        for i, key, lo, hi, first, last in zip(hits.tolist(), at.tolist(), self.offsets[at].tolist(),
                                                self.offsets[at + 1].tolist(), self.ptr[at].tolist(),
                                                self.ptr[at + 1].tolist()):
            if self.text[lo:hi].tobytes() == encoded[i]:
                found.append((i, first, last))
            else:
                found.extend(self._collided(i, key + 1, hashes[i], encoded[i]))
        return found

    def _collided(self, wanted: int, at: int, digest: np.uint64, key: bytes) -> list[tuple[int, int, int]]:
        """The key among the later ones with the same hash (two keys of one segment share a 64-bit hash)."""
        while at < len(self.keys) and self.keys[at] == digest:
            lo, hi = self.offsets[at:at + 2].tolist()
            if self.text[lo:hi].tobytes() == key:
                return [(wanted, *self.ptr[at:at + 2].tolist())]
            at += 1
        return []


def _runs(sorted_keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct values, how often each occurs) of a sorted array."""
    if not len(sorted_keys):
        return sorted_keys, np.zeros(0, np.int64)
    first = np.empty(len(sorted_keys), bool)
    first[0] = True
    np.not_equal(sorted_keys[1:], sorted_keys[:-1], out=first[1:])
    starts = np.flatnonzero(first)
    return sorted_keys[starts], np.diff(starts, append=len(sorted_keys))


def _collapse(body: np.ndarray, heading: np.ndarray, weight: float) -> tuple[np.ndarray, np.ndarray]:
    """Distinct (key, row) pairs and their term frequency: body occurrences count 1, heading ones ``weight``.

    The heading weight is added once per occurrence, after the body count, which is the order in which a
    weighted ``np.bincount`` over body then heading tokens sums them: the float64 results are identical.
    """
    pairs, counts = _runs(np.sort(body))
    tf = counts.astype(np.float64)
    if not len(heading):
        return pairs, tf
    heading_pairs, heading_counts = _runs(np.sort(heading))
    merged = np.union1d(pairs, heading_pairs)
    total = np.zeros(len(merged))
    total[np.searchsorted(merged, pairs)] = tf
    at = np.searchsorted(merged, heading_pairs)
    for nth in range(int(heading_counts.max())):
        chosen = at[heading_counts > nth]
        total[chosen] = total[chosen] + weight
    return merged, total


class _Numbering(dict[str, int]):
    """Numbers each term at its first lookup, in order of first appearance: one dict operation per token
    (``dict.fromkeys`` then a lookup per token took two)."""

    def __missing__(self, term: str) -> int:
        self[term] = number = len(self)
        return number


def _numbered(terms: Iterable[str], stems: _Numbering, tokens: int) -> np.ndarray:
    """The number of each of ``tokens`` stems in rows of single-space-joined stems (analysis.index_terms).
    Split row by row, the strings stay in cache: one split of all the rows joined took 1.4x as long."""
    return np.fromiter(map(stems.__getitem__, chain.from_iterable(map(str.split, terms))), np.int32, tokens)


def _segment_arrays(rows: Sequence[Row], settings: LexicalSettings) -> dict[str, np.ndarray]:
    """Every array of one segment, built from its rows (``lexical_rows`` order: ascending chunk id).

    Stems and prefixes are collapsed apart (no key is both) and placed into one key order at the end: sorting
    and scanning two arrays of one key per token each costs half as much as one array of both."""
    n = len(rows)
    ids = np.fromiter((r[0] for r in rows), np.int64, n)
    docs = np.fromiter((r[1] for r in rows), np.int64, n)
    files = np.fromiter((r[2] for r in rows), np.int64, n)
    counts = np.fromiter((r[3].count(" ") + 1 if r[3] else 0 for r in rows), np.int64, n)
    heading_counts = np.fromiter((r[4].count(" ") + 1 if r[4] else 0 for r in rows), np.int64, n)
    stems = _Numbering()
    body_stems = _numbered(map(itemgetter(3), rows), stems, int(counts.sum()))
    heading_stems = _numbered(map(itemgetter(4), rows), stems, int(heading_counts.sum()))
    prefixes: dict[str, int] = {}
    prefix_of = np.fromiter((prefixes.setdefault(t[:settings.prefix], len(prefixes)) for t in stems),
                            np.int64, len(stems))
    encoded = [(_STEM + t).encode() for t in stems] + [(_PREFIX + p).encode() for p in prefixes]
    hashes = np.fromiter(map(_hash, encoded), np.uint64, len(encoded))
    order = np.argsort(hashes, kind="stable")
    rank = np.empty(len(order), np.int64)
    rank[order] = np.arange(len(order))
    stem_rank, prefix_rank = rank[:len(stems)], rank[len(stems):]
    stem_prefix_rank = prefix_rank[prefix_of]
    width = max(n, 1)
    body_rows = np.repeat(np.arange(n, dtype=np.int64), counts)
    heading_rows = np.repeat(np.arange(n, dtype=np.int64), heading_counts)
    by_stem = _collapse(stem_rank[body_stems] * width + body_rows, stem_rank[heading_stems] * width + heading_rows,
                        settings.heading)
    by_prefix = _collapse(stem_prefix_rank[body_stems] * width + body_rows,
                          stem_prefix_rank[heading_stems] * width + heading_rows, settings.heading)
    ptr, postings, tf = _in_key_order([by_stem, by_prefix], width, len(encoded),
                                      np.uint16 if n <= 1 << 16 else np.int32)
    ordered = [encoded[i] for i in order.tolist()]
    offsets = np.concatenate([[0], np.cumsum([len(k) for k in ordered], dtype=np.int64)]).astype(np.int64)
    return {
        "ids": ids, "docs": docs, "files": files, "lengths": counts + settings.heading * heading_counts,
        "keys": hashes[order], "text": np.frombuffer(b"".join(ordered), np.uint8), "offsets": offsets,
        "ptr": ptr, "rows": postings, "tf": _encode_tf(tf),
    }


def _in_key_order(groups: Sequence[tuple[np.ndarray, np.ndarray]], width: int, vocabulary: int,
                  row_type: type[np.integer[Any]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(``ptr``, rows, term frequencies) of groups of sorted (key * width + row) pairs that share no key: the
    postings of every key in key order, each key's run of pairs copied to where ``ptr`` puts it."""
    bounds = [np.searchsorted(pairs, np.arange(vocabulary + 1, dtype=np.int64) * width) for pairs, _ in groups]
    per_key = np.sum([np.diff(b) for b in bounds], axis=0)
    ptr = np.concatenate([[0], np.cumsum(per_key, dtype=np.int64)]).astype(np.int64)
    rows = np.empty(int(ptr[-1]), row_type)
    tf = np.empty(int(ptr[-1]), np.float64)
    for (pairs, group_tf), at_key in zip(groups, bounds):
        # a key's run starts at at_key[key] in its group and at ptr[key] in the postings
        at = np.arange(len(pairs)) + np.repeat(ptr[:-1] - at_key[:-1], np.diff(at_key))
        rows[at] = pairs % width
        tf[at] = group_tf
    return ptr, rows, tf


def _encode_tf(tf: np.ndarray) -> np.ndarray:
    """The smallest exact form of float64 term frequencies: half-units in uint16 (body counts and the default
    heading weight 0.5), else float32, else float64. :func:`_decode_tf` gives back the very same float64s."""
    halves = tf * 2
    if not len(tf) or (halves.max() < 1 << 16 and np.array_equal(halves, np.round(halves))):
        return halves.astype(np.uint16)
    single = tf.astype(np.float32)
    return single if np.array_equal(single, tf) else tf


def _decode_tf(stored: np.ndarray) -> np.ndarray:
    return stored * 0.5 if stored.dtype == np.uint16 else stored.astype(np.float64)


# ----------------------------------------------------------------------------------------------------------
# the immutable view searches run against


@dataclass(frozen=True, slots=True)
class _Snapshot:
    generation: int
    store_max_id: int
    """The store's largest chunk id when the snapshot was made (a cheap identity check on open)."""
    max_chunk_id: int
    """The largest chunk id the index has read (rows of removed documents included)."""
    segments: tuple[_Segment, ...]
    dead_docs: np.ndarray
    next_segment: int


class LexicalView:
    """BM25 over the live chunks of one snapshot: what one query reads, consistent from start to end.

    ``ids``, ``docs`` and ``files`` describe the live chunks in id order, and :meth:`scores` returns one float32
    per live chunk: exactly the arrays an in-memory build from ``lexical_rows()`` would give.
    """

    def __init__(self, snap: _Snapshot, settings: LexicalSettings) -> None:
        self.generation = snap.generation
        self.snapshot = snap
        self.settings = settings
        self.segments = snap.segments
        self._where: list[np.ndarray | int] = []
        """Per segment: the live position of row 0 (no removed rows), or each row's position (-1: removed)."""
        parts: dict[str, list[np.ndarray]] = {"ids": [], "docs": [], "files": [], "lengths": []}
        base = 0
        for seg in self.segments:
            dead = np.isin(seg.docs, snap.dead_docs) if len(snap.dead_docs) else None
            if dead is None or not dead.any():
                self._where.append(base)
                live = slice(None)
                base += seg.size
            else:
                alive = ~dead
                where = np.cumsum(alive, dtype=np.int64) - 1 + base
                where[dead] = -1
                self._where.append(where)
                live = alive  # type: ignore[assignment]
                base += int(alive.sum())
            for name, values in parts.items():
                values.append(np.asarray(getattr(seg, name)[live]))
        self.ids, self.docs, self.files, lengths = (_joined(parts[k], dtype) for k, dtype in
                                                    (("ids", np.int64), ("docs", np.int64), ("files", np.int64),
                                                     ("lengths", np.float64)))
        self.live = base
        self._placed: dict[str, list[tuple[int, int, int]]] = {}
        """Key -> (segment number, start, end) of its postings in each segment that holds it (:meth:`_find`)."""
        average = float(lengths.mean()) if len(lengths) else 1.0
        self._norm = settings.k1 * (1 - settings.b + settings.b * lengths / max(average, 1e-9))

    def __len__(self) -> int:
        return self.live

    def scores(self, terms: Sequence[str], *, prefix: bool, read: Postings | None = None) -> np.ndarray:
        """BM25 of every live chunk for ``terms`` (stems, or stem prefixes with ``prefix``), zero where none match.
        ``read``: the search's postings read so far (:class:`Postings`), to read none twice."""
        kind = _PREFIX if prefix else _STEM
        found = [(pos, tf) for pos, tf in (read or Postings(self)).of([kind + t for t in dict.fromkeys(terms)])
                 if len(pos)]
        out = np.zeros(self.live, np.float32)
        if not found:
            return out
        s = self.settings
        df = np.array([len(pos) for pos, _ in found], np.int64)
        n = max(self.live, 1)
        idf = np.log1p((n - df + 0.5) / (df + 0.5))  # Lucene's BM25 idf: never negative
        for (pos, tf), weight in zip(found, idf):
            numerator = tf * weight
            numerator *= s.k1 + 1
            denominator = self._norm[pos]
            denominator += tf
            numerator /= denominator
            out[pos] += numerator.astype(np.float32)
        return out

    def term_matches(self, terms: Sequence[str], chunk_ids: Sequence[int], *, prefix: bool) -> TermMatches:
        """How often each of ``terms`` (stems, or stem prefixes) occurs in each of ``chunk_ids``, and in how many
        live chunks: a passage's own lexical evidence, whatever else the library holds.

        Each chunk is looked up by binary search in each term's postings (all segments' at once), so a common
        term costs a few probes instead of a pass over all its postings. Chunks the snapshot does not hold match
        nothing."""
        return self._matches([(_PREFIX if prefix else _STEM) + t for t in terms], chunk_ids, Postings(self))

    def word_matches(self, stems: Sequence[str], prefixes: Sequence[str], chunk_ids: Sequence[int],
                     read: Postings | None = None) -> tuple[TermMatches, TermMatches]:
        """:meth:`term_matches` of ``stems`` and of ``prefixes`` (``read``: as for :meth:`scores`)."""
        both = self._matches([_STEM + t for t in stems] + [_PREFIX + t for t in prefixes], chunk_ids,
                             read or Postings(self))
        cut = len(stems)
        return (TermMatches(both.df[:cut], both.tf[:, :cut]), TermMatches(both.df[cut:], both.tf[:, cut:]))

    def _matches(self, keys: Sequence[str], chunk_ids: Sequence[int], read: Postings) -> TermMatches:
        wanted = np.asarray(chunk_ids, np.int64)
        df = np.zeros(len(keys), np.int64)
        tf = np.zeros((len(wanted), len(keys)))
        if self.live and len(wanted):
            at = np.minimum(np.searchsorted(self.ids, wanted), self.live - 1)
            which = np.flatnonzero(self.ids[at] == wanted)  # the chunks the snapshot holds, at positions ``own``
            own = at[which]
        else:
            which = own = np.zeros(0, np.int64)
        for i, (pos, frequencies) in enumerate(read.of(keys)):
            df[i] = len(pos)
            if len(pos) and len(own):
                probes = np.minimum(np.searchsorted(pos, own), len(pos) - 1)
                hit = pos[probes] == own
                tf[which[hit], i] = frequencies[probes[hit]]
        return TermMatches(df, tf)

    def _joined_postings(self, keys: Sequence[str]) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per key: (live positions, ascending, and float64 term frequencies) over all segments, written in place
        where no segment the key occurs in has removed rows."""
        spans: list[list[tuple[int, int, int]]] = [[] for _ in keys]
        for at, i, lo, hi in self._find(keys):
            spans[i].append((at, lo, hi))
        out = []
        for key, placed in zip(keys, spans):
            if not all(isinstance(self._where[at], int) for at, _, _ in placed):
                parts = self._postings([key])[0]
                out.append((_joined([pos for pos, _ in parts], np.int64), _joined([tf for _, tf in parts], np.float64)))
                continue
            pos = np.empty(sum(hi - lo for _, lo, hi in placed), np.int64)
            tf = np.empty(len(pos))
            end = 0
            for at, lo, hi in placed:
                seg, start, end = self.segments[at], end, end + hi - lo
                np.add(seg.rows[lo:hi], self._where[at], out=pos[start:end], dtype=np.int64)
                stored = seg.tf[lo:hi]
                if stored.dtype == np.uint16:
                    np.multiply(stored, 0.5, out=tf[start:end], dtype=np.float64)  # as _decode_tf
                else:
                    tf[start:end] = stored
            out.append((pos, tf))
        return out

    def _postings(self, keys: Sequence[str]) -> list[list[tuple[np.ndarray, np.ndarray]]]:
        """Per key, per segment that holds it: (live positions, float64 term frequencies)."""
        parts: list[list[tuple[np.ndarray, np.ndarray]]] = [[] for _ in keys]
        for at, i, lo, hi in self._find(keys):
            seg, where = self.segments[at], self._where[at]
            rows, tf = seg.rows[lo:hi], seg.tf[lo:hi]
            if isinstance(where, int):
                parts[i].append((rows.astype(np.int64) + where, _decode_tf(tf)))
            else:
                pos = where[rows]
                alive = pos >= 0
                parts[i].append((pos[alive], _decode_tf(tf[alive])))
        return parts

    def _find(self, keys: Sequence[str]) -> Iterator[tuple[int, int, int, int]]:
        """(segment number, which key, start, end of the key's postings there) wherever a key occurs, segments in
        order for each key. Where a key's postings lie is kept for the view's life (:data:`KEYS_KEPT` keys):
        finding one costs a hash and a binary search in every segment, and questions share their common words."""
        found = self._placed
        missing = [key for key in dict.fromkeys(keys) if key not in found]
        if missing:
            placed: dict[str, list[tuple[int, int, int]]] = {key: [] for key in missing}
            encoded = [k.encode() for k in missing]
            hashes = np.fromiter(map(_hash, encoded), np.uint64, len(encoded))
            for at, seg in enumerate(self.segments):
                for i, lo, hi in seg.find(hashes, encoded):
                    placed[missing[i]].append((at, lo, hi))
            if len(found) + len(placed) > KEYS_KEPT:
                found = self._placed = placed  # a search on another thread keeps the dict it holds
            else:
                found.update(placed)
        for i, key in enumerate(keys):
            for at, lo, hi in found[key]:
                yield at, i, lo, hi

    def rarity(self, terms: Sequence[str]) -> list[float]:
        """Each stem's BM25 idf over the live chunks, divided by the idf of a stem found nowhere (0..1].

        The reader weighs question words with it; dividing by the largest possible idf makes the weight mean
        the same in a ten-chunk library and in a million-chunk one."""
        n = max(self.live, 1)
        ceiling = math.log1p((n + 0.5) / 0.5)
        out = []
        for parts in self._postings([_STEM + t for t in terms]):
            df = sum(len(pos) for pos, _ in parts)
            out.append(math.log1p((n - df + 0.5) / (df + 0.5)) / ceiling)
        return out


@dataclass(frozen=True, slots=True)
class TermMatches:
    """:meth:`LexicalView.term_matches`: per term, and per chunk and term."""

    df: np.ndarray
    """Live chunks that hold each term."""
    tf: np.ndarray
    """Frequency of each term in each chunk (rows: chunks, columns: terms; heading occurrences weighted)."""


class Postings:
    """The postings one search reads from a :class:`LexicalView`: per key, the live positions that hold it
    (ascending, all segments) and its term frequencies there, each key read once though the search asks for its
    keys twice (its BM25 rankings, then its candidates' word matches)."""

    __slots__ = ("_view", "_read")

    def __init__(self, view: LexicalView) -> None:
        self._view = view
        self._read: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    def of(self, keys: Sequence[str]) -> list[tuple[np.ndarray, np.ndarray]]:
        """(positions, float64 term frequencies) of each key (``s:`` stems, ``p:`` prefixes), in order."""
        missing = [key for key in dict.fromkeys(keys) if key not in self._read]
        self._read.update(zip(missing, self._view._joined_postings(missing)))
        return [self._read[key] for key in keys]


def _joined(parts: Sequence[np.ndarray], dtype: Any) -> np.ndarray:
    """One array of ``parts`` (no copy when there is one)."""
    if len(parts) == 1:
        return parts[0]
    return np.concatenate(parts) if parts else np.zeros(0, dtype)


# ----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _StoreState:
    generation: int
    max_id: int
    last_edit: int

    @classmethod
    def read(cls, store: ChunkStore, feed: IndexFeed | None) -> _StoreState:
        """The store's generation, and its largest chunk id and latest in-place edit where the index follows it
        by appending (``feed``)."""
        if feed is None:
            return cls(store.generation(), 0, 0)
        return cls(store.generation(), store.max_chunk_id(), feed.last_edit())


class LexicalIndex(FollowedIndex[_Snapshot, _StoreState]):
    """The BM25 index of one store. Thread-safe; see the module docstring for the design.

    >>> index = LexicalIndex.open(store)          # milliseconds when the files match the store
    >>> view = index.view()                       # the current snapshot
    >>> view.scores(["whale"], prefix=False)      # one BM25 score per live chunk, ``view.ids`` order
    """

    def __init__(self, store: ChunkStore, directory: str | Path | None = None, *,
                 settings: LexicalSettings | None = None) -> None:
        feed = store.index_feed
        settings = settings or LexicalSettings()
        super().__init__(Path(directory) if directory is not None else (
            default_directory(feed, settings) if feed is not None else Path()), feed)
        self.store = store
        self.settings = settings
        self._view: LexicalView | None = None
        self._lock = threading.Lock()
        self._builder: threading.Thread | None = None
        self._build_limit: int | None = None
        """While set (under the lock), a refresh that needs a full build of more chunks than this raises _Deferred."""

    what = "lexical index"

    @classmethod
    def open(cls, store: ChunkStore, directory: str | Path | None = None, *,
             settings: LexicalSettings | None = None) -> LexicalIndex:
        """Open (or build) the index of ``store`` and bring it up to date."""
        index = cls(store, directory, settings=settings)
        index.refresh()
        return index

    # -- reads ------------------------------------------------------------------------------------------
    def view(self) -> LexicalView:
        """The up-to-date snapshot: what one query should read from start to end."""
        self.refresh()
        view = self._view
        assert view is not None
        return view

    def view_or_build(self, limit: int) -> LexicalView | None:
        """:meth:`view`, except that an index to build from scratch for more than ``limit`` chunks (a first start
        after an upgrade, a damaged index) is built by a background thread: None until it is ready, so that the
        caller answers from the store's own BM25 meanwhile instead of making a query wait minutes."""
        if self.is_current():
            return self._view
        if self.building:
            return None
        with self._lock:
            if self.is_current():
                return self._view
            if self.building:
                return None
            self._build_limit = limit
            try:
                self._view = LexicalView(self._update(self._snapshot()), self.settings)
            except _Deferred:
                self._view = None  # never serve a snapshot that no longer matches the store
                self._builder = threading.Thread(target=self._build_in_background, name="lexical-index-build",
                                                 daemon=True)
                self._builder.start()
                return None
            finally:
                self._build_limit = None
        return self._view

    @property
    def building(self) -> bool:
        """Whether a background thread is building the index now."""
        builder = self._builder
        return builder is not None and builder.is_alive()

    def _build_in_background(self) -> None:
        try:
            self.refresh()
        except Exception:  # the next query tries again (and reports it the same way)
            _LOG.exception("%s: building the lexical index failed", self.directory)

    def is_current(self) -> bool:
        """Whether a search now would not need a refresh first."""
        return self._view is not None and self._view.generation == self.store.generation()

    def stats(self) -> LexicalStats:
        view = self.view()
        segments = view.segments
        return LexicalStats(rows=sum(s.size for s in segments), live=view.live, segments=len(segments),
                            postings=sum(len(s.rows) for s in segments), keys=sum(len(s.keys) for s in segments),
                            generation=view.generation, bytes_on_disk=self._bytes_on_disk(),
                            persistent=self.persistent, last_refresh=self._last_refresh)

    # -- refresh ----------------------------------------------------------------------------------------
    def refresh(self) -> None:
        """Bring the index up to the store's generation: nothing, load, append, compact, merge or rebuild."""
        if self.is_current():
            return
        with self._lock:
            if self.is_current():
                return
            self._view = LexicalView(self._update(self._snapshot()), self.settings)

    def _snapshot(self) -> _Snapshot | None:
        return self._view.snapshot if self._view is not None else None

    def _rows_since(self, after: int, *, through: int | None = None) -> list[Row]:
        """``segment_rows`` of the chunks with ``after`` < id (<= ``through``), from the store's feed."""
        return self._incremental_feed.lexical_rows_since(after, through=through, limit=self.settings.segment_rows)

    # -- following the store (the order of the steps: FollowedIndex._update) ---------------------------
    def _read_state(self) -> _StoreState:
        return _StoreState.read(self.store, self._feed)

    def _matches(self, state: _StoreState, snap: _Snapshot) -> bool:
        return (snap.generation, snap.store_max_id) == (state.generation, state.max_id)

    def _apply_changes(self, snap: _Snapshot, state: _StoreState) -> _Snapshot:
        """Append the chunks newer than the index, mask removed documents, compact or merge where worthwhile."""
        store = self.store
        known = np.unique(np.concatenate([np.unique(s.docs) for s in snap.segments] or [np.zeros(0, np.int64)]))
        dead_docs = np.union1d(snap.dead_docs, np.setdiff1d(known, store.document_ids()))
        segments, next_segment, max_id = self._append(list(snap.segments), snap.next_segment, snap.max_chunk_id)
        new = replace(snap, generation=state.generation, store_max_id=state.max_id, max_chunk_id=max_id,
                      segments=tuple(segments), dead_docs=dead_docs, next_segment=next_segment)
        live = _live_rows(new)
        chunks = store.count_chunks()
        if live != chunks:
            return self._rebuild_from_store(snap, f"{live} indexed chunks but {chunks} in the store")
        self._last_refresh = Refresh.APPENDED
        new = self._maintain(new)
        self._write_manifest(new)
        return new

    def _append(self, segments: list[_Segment], next_segment: int, after: int) -> tuple[list[_Segment], int, int]:
        """Segments of the chunks with ids above ``after``, ``segment_rows`` at a time."""
        while True:
            rows = self._rows_since(after)
            if not rows:
                return segments, next_segment, after
            segments.append(self._write_segment(f"s{next_segment:06d}", self._built(rows)))
            next_segment += 1
            after = int(rows[-1][0])

    def _maintain(self, snap: _Snapshot) -> _Snapshot:
        """Rebuild segments that are mostly removed rows, then runs of many small segments."""
        s = self.settings
        segments = list(snap.segments)
        next_segment = snap.next_segment
        for i, seg in enumerate(segments):
            dead = int(np.isin(seg.docs, snap.dead_docs).sum()) if len(snap.dead_docs) else 0
            if dead > s.dead_share * seg.size:
                rebuilt, next_segment = self._from_range(seg, seg, next_segment)
                segments[i:i + 1] = rebuilt
                self._last_refresh = Refresh.COMPACTED
                return self._maintain(self._with(snap, segments, next_segment))
        small = [seg.size < s.segment_rows // 2 for seg in segments]
        if sum(small) > s.max_small:
            for first, last in reversed(_runs_of_true(small)):  # from the end: earlier indices stay valid
                rebuilt, next_segment = self._from_range(segments[first], segments[last], next_segment)
                segments[first:last + 1] = rebuilt
            self._last_refresh = Refresh.MERGED
        return self._with(snap, segments, next_segment)

    def _with(self, snap: _Snapshot, segments: list[_Segment], next_segment: int) -> _Snapshot:
        """``snap`` with other segments; removed documents no segment holds any more are forgotten."""
        held = np.concatenate([s.docs for s in segments]) if segments else np.zeros(0, np.int64)
        return replace(snap, segments=tuple(segments), next_segment=next_segment,
                       dead_docs=np.intersect1d(snap.dead_docs, held))

    def _from_range(self, first: _Segment, last: _Segment, next_segment: int) -> tuple[list[_Segment], int]:
        """New segments for the live chunks whose ids lie from ``first``'s first row to ``last``'s last."""
        after, through = int(first.ids[0]) - 1, int(last.ids[-1])
        built: list[_Segment] = []
        while True:
            rows = self._rows_since(after, through=through)
            if not rows:
                return built, next_segment
            built.append(self._write_segment(f"s{next_segment:06d}", self._built(rows)))
            next_segment += 1
            after = int(rows[-1][0])

    # -- (re)building -----------------------------------------------------------------------------------
    def _build_from_store(self, old: _Snapshot | None, reason: str) -> _Snapshot:
        """Every chunk's terms, ``segment_rows`` at a time, into new segments."""
        if self._build_limit is not None and self.store.count_chunks() > self._build_limit:
            raise _Deferred(reason)
        _LOG.info("%s: building the lexical index (%s)", self.directory, reason)
        state = _StoreState.read(self.store, self._feed)
        next_segment = old.next_segment if old is not None else 1
        if self.incremental:
            segments, next_segment, max_id = self._append([], next_segment, 0)
        else:
            rows = self.store.lexical_rows()
            step = self.settings.segment_rows
            segments = [self._write_segment(f"s{next_segment + i:06d}", self._built(rows[lo:lo + step]))
                        for i, lo in enumerate(range(0, len(rows), step))]
            next_segment += len(segments)
            max_id = int(rows[-1][0]) if rows else 0
        return _Snapshot(generation=state.generation, store_max_id=state.max_id, max_chunk_id=max_id,
                         segments=tuple(segments), dead_docs=np.zeros(0, np.int64), next_segment=next_segment)

    def _built(self, rows: Sequence[Row]) -> dict[str, np.ndarray]:
        """The arrays of a segment of ``rows``; built in 4 KB pages when they go to files (see :func:`_small_pages`)."""
        if not self.persistent:
            return _segment_arrays(rows, self.settings)
        with _small_pages():
            return _segment_arrays(rows, self.settings)

    def _write_segment(self, name: str, arrays: dict[str, np.ndarray]) -> _Segment:
        """Write one segment's files and map them back (or keep the arrays, in memory only)."""
        if self.persistent:
            try:
                self.directory.mkdir(parents=True, exist_ok=True)
                for kind, array in arrays.items():
                    save_npy(self.directory / f"{name}.{kind}.npy", array)
            except OSError as exc:
                _LOG.warning("%s: cannot write the lexical index (%s); keeping it in memory", self.directory, exc)
                self.persistent = False
        if not self.persistent:
            return _Segment(name=name, **arrays)
        return self._map_segment(name, _shape_of(arrays))

    def _map_segment(self, name: str, shape: dict[str, Any]) -> _Segment:
        """Memory-map one segment's files, checking each against the shape the manifest recorded."""
        rows, keys, postings = int(shape["rows"]), int(shape["keys"]), int(shape["postings"])
        base = self.directory / name
        arrays = {kind: load_npy(Path(f"{base}.{kind}.npy"), rows, dtype) for kind, dtype in _ROW_ARRAYS.items()}
        arrays["keys"] = load_npy(Path(f"{base}.keys.npy"), keys, "<u8")
        arrays["offsets"] = load_npy(Path(f"{base}.offsets.npy"), keys + 1, "<i8")
        arrays["ptr"] = load_npy(Path(f"{base}.ptr.npy"), keys + 1, "<i8")
        arrays["text"] = load_npy(Path(f"{base}.text.npy"), int(shape["text"]), "|u1")
        if shape["row_type"] not in ("<u2", "<i4") or shape["tf"] not in ("<u2", "<f4", "<f8"):
            raise CorruptIndex(f"{name}: unknown posting types {shape['row_type']}, {shape['tf']}")
        arrays["rows"] = load_npy(Path(f"{base}.rows.npy"), postings, str(shape["row_type"]))
        arrays["tf"] = load_npy(Path(f"{base}.tf.npy"), postings, str(shape["tf"]))
        segment = _Segment(name=name, **arrays)
        if int(segment.ids.sum()) != int(shape["id_sum"]):
            raise CorruptIndex(f"{name}: chunk ids do not match the manifest")
        if segment.ptr[-1] != postings or segment.offsets[-1] != len(segment.text):
            raise CorruptIndex(f"{name}: postings do not match the manifest")
        return segment

    # -- manifest ---------------------------------------------------------------------------------------
    def _manifest(self, snap: _Snapshot) -> dict[str, Any]:
        return {
            "format": FORMAT, "heading": self.settings.heading, "prefix": self.settings.prefix,
            "generation": snap.generation, "store_max_id": snap.store_max_id, "max_chunk_id": snap.max_chunk_id,
            "next_segment": snap.next_segment, "live": _live_rows(snap),
            "segments": [{"name": s.name, **_shape_of(_arrays_of(s))} for s in snap.segments],
            "dead_docs": snap.dead_docs.tolist(),
        }

    def _from_manifest(self, raw: dict[str, Any], state: _StoreState) -> _Snapshot | None:
        if raw.get("format") != FORMAT or (raw.get("heading"), raw.get("prefix")) != self.settings.stored:
            return None
        segments = tuple(self._map_segment(str(entry["name"]), entry) for entry in raw["segments"])
        snap = _Snapshot(generation=int(raw["generation"]), store_max_id=int(raw["store_max_id"]),
                         max_chunk_id=int(raw["max_chunk_id"]), segments=segments,
                         dead_docs=np.asarray(raw["dead_docs"], np.int64), next_segment=int(raw["next_segment"]))
        if _live_rows(snap) != int(raw["live"]):
            raise CorruptIndex(f"{_live_rows(snap)} live rows, manifest says {raw['live']}")
        return snap


@contextmanager
def _small_pages() -> Iterator[None]:
    """numpy's arrays allocated in 4 KB pages for the block (its default asks the kernel for 2 MB pages).

    A segment's build allocates and sorts arrays of a few tokens' worth each (hundreds of MB at 100 k chunks) and
    drops them once its files are written and mapped back; where the kernel compacts memory on demand for huge
    pages (``transparent_hugepage/defrag = madvise``, common and this machine's setting) those faults cost more
    than the TLB misses huge pages save (docs/BENCHMARKS.md). Arrays that live on (int8 codes, in-memory
    segments) keep the default.
    """
    toggle = getattr(importlib.import_module("numpy._core.multiarray"), "_set_madvise_hugepage", None)
    if toggle is None:  # pragma: no cover - a numpy without the switch
        yield
        return
    previous = toggle(False)
    try:
        yield
    finally:
        toggle(previous)


class _Deferred(Exception):
    """A full build was needed where :meth:`LexicalIndex.view_or_build` hands it to a background thread."""


def _arrays_of(segment: _Segment) -> dict[str, np.ndarray]:
    return {name: getattr(segment, name) for name in ("ids", "keys", "text", "rows", "tf")}


def _shape_of(arrays: dict[str, np.ndarray]) -> dict[str, Any]:
    """What the manifest records of a segment, to check its files against on open."""
    return {"rows": len(arrays["ids"]), "keys": len(arrays["keys"]), "text": len(arrays["text"]),
            "postings": len(arrays["rows"]), "row_type": arrays["rows"].dtype.str, "tf": arrays["tf"].dtype.str,
            "id_sum": int(arrays["ids"].sum())}


def _runs_of_true(flags: Sequence[bool]) -> list[tuple[int, int]]:
    """(first, last) index of each run of two or more consecutive true flags."""
    runs: list[tuple[int, int]] = []
    start: int | None = None
    for i, flag in enumerate([*flags, False]):
        if flag and start is None:
            start = i
        elif not flag and start is not None:
            if i - 1 > start:
                runs.append((start, i - 1))
            start = None
    return runs


def _live_rows(snap: _Snapshot) -> int:
    dead = sum(int(np.isin(s.docs, snap.dead_docs).sum()) for s in snap.segments) if len(snap.dead_docs) else 0
    return sum(s.size for s in snap.segments) - dead
