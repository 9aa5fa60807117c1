"""A persistent dense index of a SQLite library: the store's own vector file, memory-mapped, opened in milliseconds.

Why not the simple way (load every vector into one matrix whenever the store changes): at 1 M chunks of 512
dimensions that is 2 GB read on every start and after every write (12-34 s here through SQLite BLOBs), and one
exact scan costs what the memory bus allows (0.1 s here). The store keeps its vectors as rows of one flat
float16 file (:mod:`chapterverse.store.vectorfile`); this index maps those rows where they are (the OS pages
them in on demand), keeps which chunk each row holds, follows the store by its generation counter, and only
appends what changed. It holds no copy of a vector (a second copy would be a third of a library's bytes, and
writing it most of a build). Every score is float32: rows are upcast exactly
(:func:`chapterverse.index.dense.inner_products`).

Layout of the directory (default ``<library>.vectors/`` beside ``<library>.sqlite3``)::

    manifest.json              format, model, dim, the store's vector file, generation, largest chunk id,
                               segments (each: its first row in the vector file), removed docs
    r000001.ids.npy            int64 chunk id of each row of the segment's rows (-1: a row of no chunk)
    r000001.docs.npy           int64 document id of each row (-1: a row of no chunk)
    r000001.order.npy          rows sorted by chunk id (lookups by id use binary search, no dict)

*Updates.* Chunk ids only grow and the store appends their rows in that order, so after a write the index
appends one segment: the rows of chunks newer than the largest id it holds. Documents that no longer exist are
recorded as removed and their rows masked; the store copies the live rows to a new file once removed ones are a
fifth of it, and the index, seeing another file, rebuilds (reading only which chunk each row holds).
Past ``max_segments``, the segments after the largest are merged into one (no vector is copied: their rows
are next to each other in the file). A changed embedding model or vector file, a manifest that does not match
its files, or counts that disagree with the store rebuild from the store: when in doubt, rebuild. So does a
chunk edited in place since the index's generation (``Store.update_chunk_metadata``): its new vector is a new row
at the end of the file, which no append sees (a rebuild reads only which chunk each row holds: 9 ms at 20,000).

*Crash safety.* Every file is written under a temporary name, fsynced and renamed into place; the manifest
is renamed last, so a crash leaves either the old index or the new one. Files are never modified after
they are named; a half-written or mismatched file fails validation on open and the index is rebuilt. The rows
themselves are the store's, durable before the transaction that names them commits.

*Int8 codes* (:mod:`chapterverse.index.int8codes`). Once a process searches a second time, a background thread
quantizes the matrices into process memory, up to ``resident_bytes``; from then on a search scans the codes and
scores in float32 only the rows that can still make its top k (:func:`chapterverse.index.dense.top_candidates`:
the same results as the full scan, half the bytes read and no conversion).

*Concurrency.* Searches read an immutable snapshot (one attribute read), so any number of threads search
while one refreshes. Writers in different processes serialize on ``flock`` of ``.lock`` in the directory;
how the index follows the store is :class:`chapterverse.index.files.FollowedIndex`.

*Search is exact* (:mod:`chapterverse.index.dense`), whatever the size: the int8 first pass reads a quarter of
the bytes and changes no result. An approximate index (IVF, then HNSW) was measured and removed: on every
shared book (44,549 real vectors) inverted lists needed 158 of 422 lists for recall@10 0.95 and were no faster
than an exact scan, and at 100 k chunks their k-means took 14.7 s of each build (see docs/BENCHMARKS.md).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from ..errors import StoreError
from ..store import ChunkStore, IndexFeed, MetaStore
from ..store.vectorfile import VectorRows, map_rows, missing_file
from .dense import Beside, QuantizedRows, half_candidates, inner_products, to_single, top_candidates
from .files import CorruptIndex, FollowedIndex, Refresh, load_npy, save_npy
from .int8codes import ResidentCodes
from .topk import top_k

__all__ = ["VectorIndex", "VectorIndexStore", "IndexSettings", "IndexStats", "default_directory", "FORMAT"]


class VectorIndexStore(ChunkStore, MetaStore, Protocol):
    """What the dense index reads of its store: the chunks' ids, documents and generation, the recorded model."""


FORMAT = 2
"""Version of the on-disk layout; another version is rebuilt, never read (1 kept its own float32 copy)."""
_LOG = logging.getLogger(__name__)


def _physical_memory_bytes(default: int = 8 << 30) -> int:
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):  # pragma: no cover - platforms without sysconf
        return default


def default_directory(feed: IndexFeed) -> Path:
    """``library.sqlite3`` -> ``library.vectors/`` in the same folder."""
    return feed.path.with_name(feed.path.stem + ".vectors")


@dataclass(frozen=True, slots=True, kw_only=True)
class IndexSettings:
    """How the index keeps its files and its memory."""

    max_segments: int = 16
    """More appended segments than this are merged (each is one more scan per query)."""
    resident_bytes: int = field(default_factory=lambda: min(4 << 30, _physical_memory_bytes() // 8))
    """Int8 codes up to this total (default 4 GiB, or an eighth of the machine's memory where that is less: a
    byte per dimension and four per vector, 0.5 GB at 1 M x 512) are made in process memory once a process
    searches a second time (see :mod:`chapterverse.index.int8codes`). Larger indexes, and 0, scan every float32
    row of the map (memory the kernel can reclaim and processes share)."""


@dataclass(frozen=True, slots=True)
class IndexStats:
    rows: int
    live: int
    segments: int
    generation: int
    bytes_on_disk: int
    persistent: bool
    resident: bool
    """Every segment has its int8 codes in process memory (see ``IndexSettings.resident_bytes``)."""
    last_refresh: Refresh
    """What the latest refresh that changed anything did (load, append, rebuild...)."""


# ----------------------------------------------------------------------------------------------------------
# immutable in-memory view


@dataclass(frozen=True, slots=True)
class _Segment:
    name: str
    start: int
    """Its first row in the store's vector file: ``matrix`` is rows ``start .. start + rows - 1``."""
    ids: np.ndarray
    docs: np.ndarray
    matrix: np.ndarray
    order: np.ndarray
    sorted_ids: np.ndarray
    codes: QuantizedRows | None = None
    """Set once the int8 codes of ``matrix`` are made (see :mod:`chapterverse.index.int8codes`)."""

    @property
    def rows(self) -> int:
        return len(self.ids)


@dataclass(frozen=True, slots=True)
class _Snapshot:
    generation: int
    model: str
    dim: int
    vector_file: str
    """The store's vector file the segments map (another one: rebuild)."""
    max_chunk_id: int
    """The largest chunk id the index has read (rows of removed documents included)."""
    store_max_id: int
    """The store's largest chunk id when the snapshot was made (a cheap identity check on open)."""
    segments: tuple[_Segment, ...]
    dead_docs: np.ndarray
    dead: tuple[np.ndarray | None, ...]
    """Per segment: bool mask of rows whose document was removed (None: none)."""
    live: int
    next_segment: int

    @property
    def rows(self) -> int:
        return sum(s.rows for s in self.segments)

    @property
    def end(self) -> int:
        """The row after the last one a segment maps."""
        return self.segments[-1].start + self.segments[-1].rows if self.segments else 0


@dataclass(frozen=True, slots=True)
class _StoreState:
    generation: int
    model: str
    dim: int
    max_id: int
    vector_file: Path | None
    committed: int
    """Rows of ``vector_file`` that committed writes filled."""
    last_edit: int

    @classmethod
    def read(cls, store: VectorIndexStore, feed: IndexFeed) -> _StoreState:
        max_id = store.max_chunk_id()
        path, committed, width = feed.vector_file_state()
        dim = int(store.get_meta("embedding_dim") or 0) or width  # no recorded model: the rows' own width
        return cls(store.generation(), store.get_meta("embedding_model") or "", dim, max_id, path, committed,
                   feed.last_edit())

    @property
    def file_name(self) -> str:
        return self.vector_file.name if self.vector_file is not None else ""


def _dead_masks(segments: Sequence[_Segment], dead_docs: np.ndarray) -> tuple[tuple[np.ndarray | None, ...], int]:
    masks: list[np.ndarray | None] = []
    dead_rows = 0
    for seg in segments:
        dead = seg.docs < 0  # rows of documents added and removed between two refreshes
        if len(dead_docs):
            dead |= np.isin(seg.docs, dead_docs)
        count = int(dead.sum())
        dead_rows += count
        masks.append(dead if count else None)
    return tuple(masks), dead_rows


# ----------------------------------------------------------------------------------------------------------


class VectorIndex(FollowedIndex[_Snapshot, _StoreState]):
    """The dense index of a store that lends it an :class:`~chapterverse.store.IndexFeed` (SQLite). Thread-safe;
    see the module docstring for the design.

    >>> index = VectorIndex.open(store)           # milliseconds when the files match the store
    >>> index.search(query_vector, k=10)          # [(chunk_id, cosine), ...] best first
    """

    def __init__(self, store: VectorIndexStore, directory: str | Path | None = None, *,
                 settings: IndexSettings | None = None) -> None:
        feed = store.index_feed
        if feed is None:
            raise StoreError(f"{type(store).__name__}: the memory-mapped vector index serves SQLite libraries; "
                             "PostgreSQL searches its vectors in the database")
        super().__init__(Path(directory) if directory is not None else default_directory(feed), feed)
        self.store = store
        self.settings = settings or IndexSettings()
        self._snap: _Snapshot | None = None
        self._lock = threading.Lock()
        self._codes = ResidentCodes(self._lock, self.settings.resident_bytes, self._segments_now, self._swap_in,
                                    str(self.directory))

    what = "vector index"

    @classmethod
    def open(cls, store: VectorIndexStore, directory: str | Path | None = None, *,
             settings: IndexSettings | None = None) -> VectorIndex:
        """Open (or build) the index of ``store`` and bring it up to date."""
        index = cls(store, directory, settings=settings)
        index.refresh()
        return index

    # -- reads ------------------------------------------------------------------------------------------
    def search(self, vector: np.ndarray, k: int, doc_ids: Sequence[int] | None = None,
               beside: Beside[Any] | None = None) -> list[tuple[int, float]]:
        """The ``k`` chunks most similar to ``vector`` (inner product = cosine of unit vectors), best first; ties
        by chunk id. ``beside``: work of the caller's own that a scan split over the cores runs on this thread
        meanwhile (:class:`~chapterverse.index.dense.Beside`: its ``result()`` runs it then where no scan did)."""
        snap = self._current()
        self._codes.note_search()
        q = self._query(vector, snap)
        if k <= 0 or snap.live == 0:
            return []
        want = None
        if doc_ids is not None:
            want = np.unique(np.asarray(list(doc_ids), np.int64))
            if not len(want):
                return []
        found_ids: list[np.ndarray] = []
        found_scores: list[np.ndarray] = []
        for seg, dead in zip(snap.segments, snap.dead):
            rows, scores = self._search_segment(seg, dead, q, k, want, beside)
            top = top_k(scores, k)
            found_ids.append(seg.ids[top if rows is None else rows[top]])
            found_scores.append(scores[top])
        if not found_ids:
            return []
        ids = np.concatenate(found_ids)
        scores = np.concatenate(found_scores)
        top = top_k(scores, k)
        return [(int(i), float(s)) for i, s in zip(ids[top], scores[top])]

    def cosines(self, chunk_ids: Sequence[int], vector: np.ndarray) -> dict[int, float]:
        """Inner product of ``vector`` with each chunk's vector; 0.0 for chunks the index does not hold."""
        snap = self._current()
        q = self._query(vector, snap)
        out = dict.fromkeys((int(c) for c in chunk_ids), 0.0)
        for seg, rows, ids in self._locate(snap, list(out)):
            for cid, score in zip(ids.tolist(), inner_products(seg.matrix[rows], q).tolist()):
                out[cid] = score
        return out

    def vectors(self, chunk_ids: Sequence[int]) -> dict[int, np.ndarray]:
        """Float32 copies of the vectors of the chunks the index holds (for MMR)."""
        snap = self._current()
        out: dict[int, np.ndarray] = {}
        for seg, rows, ids in self._locate(snap, [int(c) for c in chunk_ids]):
            block = to_single(seg.matrix[rows])
            out.update(zip(ids.tolist(), block))
        return out

    def rows(self, chunk_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(a float32 matrix with each chunk's vector as a row, whether the index holds each chunk), in the order
        of ``chunk_ids`` (repeats allowed); rows of chunks it does not hold are zero."""
        snap = self._current()
        wanted = np.asarray(chunk_ids, np.int64)
        located = list(self._located(snap, wanted))
        if len(located) == 1 and len(located[0][2]) == len(wanted):  # one segment holds them all
            seg, rows, _ = located[0]
            return to_single(seg.matrix[rows]), np.ones(len(wanted), bool)
        width = snap.dim or next((seg.matrix.shape[1] for seg in snap.segments if seg.rows), 0)
        matrix = np.zeros((len(wanted), width), np.float32)
        held = np.zeros(len(wanted), bool)
        for seg, rows, at in located:
            matrix[at] = to_single(seg.matrix[rows])
            held[at] = True
        return matrix, held

    def __len__(self) -> int:
        return self._current().live

    def stats(self) -> IndexStats:
        snap = self._current()
        return IndexStats(
            rows=snap.rows, live=snap.live, segments=len(snap.segments), generation=snap.generation,
            bytes_on_disk=self._bytes_on_disk(),
            persistent=self.persistent, resident=self._codes.holds(snap.segments), last_refresh=self._last_refresh,
        )

    def wait_resident(self, timeout: float | None = None) -> bool:
        """Make the int8 codes of every segment now, as a second search would, and wait until that is done
        (benchmarks, tests); False when the index is searched in float32 only (codes above ``resident_bytes``,
        a failed attempt) or ``timeout`` passed."""
        self._current()
        done = self._codes.wait(timeout)
        with self._lock:
            snap = self._snap
            assert snap is not None
            return done and self._codes.holds(snap.segments)

    def _current(self) -> _Snapshot:
        self.refresh()
        snap = self._snap
        assert snap is not None
        return snap

    @staticmethod
    def _query(vector: np.ndarray, snap: _Snapshot) -> np.ndarray:
        q = np.asarray(vector, np.float32).reshape(-1)
        if snap.dim and len(q) != snap.dim:
            raise ValueError(f"query vector has dimension {len(q)}, the index holds {snap.dim}")
        return q

    def _search_segment(self, seg: _Segment, dead: np.ndarray | None, q: np.ndarray, k: int,
                        want: np.ndarray | None, beside: Beside[Any] | None = None
                        ) -> tuple[np.ndarray | None, np.ndarray]:
        """(rows, scores) of the candidates of one segment: those the int8 codes leave, one doc filter's rows, or
        every row (rows None: a million-row ``arange`` per query costs milliseconds)."""
        if want is not None:
            allowed = np.isin(seg.docs, want)
            if dead is not None:
                allowed &= ~dead
            rows = np.flatnonzero(allowed)
            if len(rows) * 8 > seg.rows:  # a broad filter: as a scan of every row
                narrowed = self._first_pass(seg, q, k, ~allowed, beside)
                if narrowed is not None:
                    return narrowed, inner_products(seg.matrix[narrowed], q)
            return rows, inner_products(seg.matrix[rows], q)
        narrowed = self._first_pass(seg, q, k, dead, beside)
        if narrowed is not None:
            return narrowed, inner_products(seg.matrix[narrowed], q)
        scores = inner_products(seg.matrix, q)
        if dead is not None:
            scores[dead] = -np.inf
        return None, scores

    @staticmethod
    def _first_pass(seg: _Segment, q: np.ndarray, k: int, dead: np.ndarray | None,
                    beside: Beside[Any] | None = None) -> np.ndarray | None:
        """The rows that can make the top ``k``, from the int8 codes, or before they exist from SimSIMD's
        half-precision products (a tenth of numpy's conversion of every value); None: scan every row."""
        if seg.codes is not None:
            return top_candidates(seg.codes, q, k, dead, beside)
        return half_candidates(seg.matrix, q, k, dead)

    @staticmethod
    def _locate(snap: _Snapshot, chunk_ids: list[int]) -> Iterator[tuple[_Segment, np.ndarray, np.ndarray]]:
        """(segment, rows, chunk ids) of the requested chunks that are live in each segment."""
        wanted = np.asarray(chunk_ids, np.int64)
        for seg, rows, at in VectorIndex._located(snap, wanted):
            yield seg, rows, wanted[at]

    @staticmethod
    def _located(snap: _Snapshot, wanted: np.ndarray) -> Iterator[tuple[_Segment, np.ndarray, np.ndarray]]:
        """(segment, rows, positions in ``wanted``) of the chunks of ``wanted`` that are live in each segment."""
        if not len(wanted):
            return
        for seg, dead in zip(snap.segments, snap.dead):
            if not seg.rows:
                continue
            pos = np.minimum(np.searchsorted(seg.sorted_ids, wanted), seg.rows - 1)
            hit = seg.sorted_ids[pos] == wanted
            rows = np.asarray(seg.order[pos], np.int64)
            if dead is not None:
                hit &= ~dead[rows]
            at = np.flatnonzero(hit)
            if len(at):
                yield seg, rows[at], at

    # -- refresh ----------------------------------------------------------------------------------------
    def refresh(self) -> None:
        """Bring the index up to the store's generation: nothing, load, append, merge or rebuild."""
        snap = self._snap
        if snap is not None and snap.generation == self.store.generation():
            return
        with self._lock:
            snap = self._snap
            if snap is not None and snap.generation == self.store.generation():
                return
            try:
                updated = self._update(snap)
            except FileNotFoundError:  # the store moved to a new vector file (deleting the one this read named)
                try:
                    updated = self._update(snap)
                except FileNotFoundError as exc:
                    raise missing_file(exc) from exc
            self._snap = self._with_resident(updated)
            self._codes.follow()

    def _segments_now(self) -> Sequence[_Segment] | None:
        return self._snap.segments if self._snap is not None else None

    def _swap_in(self) -> None:
        if self._snap is not None:
            self._snap = self._with_resident(self._snap)

    def _with_resident(self, snap: _Snapshot) -> _Snapshot:
        """``snap`` with every segment whose int8 codes are made searching them first."""
        codes = [self._codes.codes_of(seg.name) for seg in snap.segments]
        if all(seg.codes is made for seg, made in zip(snap.segments, codes)):
            return snap
        return replace(snap, segments=tuple(replace(seg, codes=made) for seg, made in zip(snap.segments, codes)))

    # -- following the store (the order of the steps: FollowedIndex._update) ---------------------------
    def _read_state(self) -> _StoreState:
        return _StoreState.read(self.store, self._incremental_feed)

    def _matches(self, state: _StoreState, snap: _Snapshot) -> bool:
        return (snap.generation, snap.model, snap.dim, snap.store_max_id, snap.vector_file) == (
            state.generation, state.model, state.dim, state.max_id, state.file_name)

    def _unusable(self, state: _StoreState, snap: _Snapshot) -> bool:
        return ((snap.model, snap.dim, snap.vector_file) != (state.model, state.dim, state.file_name)
                or super()._unusable(state, snap))

    def _apply_changes(self, snap: _Snapshot, state: _StoreState) -> _Snapshot:
        """Append the rows of chunks newer than the index, mask removed documents, merge when worthwhile."""
        store = self.store
        live_docs = store.document_ids()
        known = np.unique(np.concatenate([np.unique(s.docs) for s in snap.segments] or [np.zeros(0, np.int64)]))
        dead_docs = np.union1d(snap.dead_docs, np.setdiff1d(known[known >= 0], live_docs))
        found = self._incremental_feed.vector_rows_since(snap.max_chunk_id)
        if len(found.rows) and int(found.rows[0]) < snap.end:
            return self._rebuild_from_store(snap, "rows appended before the index's last row")
        segments = list(snap.segments)
        next_segment = snap.next_segment
        if len(found.ids):
            segments.append(self._write_segment(f"r{next_segment:06d}", found, state))
            next_segment += 1
        # a segment of removed documents only (a book added, then removed) goes at once: nothing to rewrite
        segments = [seg for seg in segments if not _all_dead(seg, dead_docs)]
        masks, dead_rows = _dead_masks(segments, dead_docs)
        live = sum(s.rows for s in segments) - dead_rows
        chunks = store.count_chunks()
        if live != chunks:
            return self._rebuild_from_store(snap, f"{live} indexed vectors but {chunks} chunks in the store")
        new = replace(snap, generation=state.generation, store_max_id=state.max_id,
                      max_chunk_id=max(snap.max_chunk_id, int(found.ids[-1]) if len(found.ids) else 0),
                      segments=tuple(segments), dead_docs=dead_docs, dead=masks, live=live, next_segment=next_segment)
        if len(new.segments) > self.settings.max_segments:
            self._last_refresh = Refresh.MERGED
            new = self._merge(new, _after_the_largest(new.segments), state)
        else:
            self._last_refresh = Refresh.APPENDED
        self._write_manifest(new)
        return new

    # -- (re)building -----------------------------------------------------------------------------------
    def _build_from_store(self, old: _Snapshot | None, reason: str) -> _Snapshot:
        """One segment of every row of the store's vector file that holds a chunk's vector (no vector is read:
        only which chunk each row holds)."""
        _LOG.info("%s: building the vector index (%s)", self.directory, reason)
        state = _StoreState.read(self.store, self._incremental_feed)
        next_segment = old.next_segment if old is not None else 1
        found = self._incremental_feed.vector_rows_since(0)
        segments = (self._write_segment(f"r{next_segment:06d}", found, state),) if len(found.ids) else ()
        masks, dead_rows = _dead_masks(segments, np.zeros(0, np.int64))
        return _Snapshot(generation=state.generation, model=state.model, dim=state.dim,
                         vector_file=state.file_name, max_chunk_id=int(found.ids[-1]) if len(found.ids) else 0,
                         store_max_id=state.max_id, segments=segments, dead_docs=np.zeros(0, np.int64),
                         dead=masks, live=len(found.ids), next_segment=next_segment + 1)

    def _merge(self, snap: _Snapshot, chosen: list[bool], state: _StoreState) -> _Snapshot:
        """The ``chosen`` segments (a run at the end, so their rows follow each other in the file) as one: their
        chunk and document ids side by side, rows between them (of documents added and removed between two
        refreshes) as rows of no chunk."""
        picked = [seg for seg, c in zip(snap.segments, chosen) if c]
        kept = [seg for seg, c in zip(snap.segments, chosen) if not c]
        held = [(seg, np.flatnonzero(seg.ids >= 0)) for seg in picked]
        rows = VectorRows(state.vector_file, state.committed, snap.dim, np.concatenate([s.ids[at] for s, at in held]),
                          np.concatenate([s.docs[at] for s, at in held]),
                          np.concatenate([s.start + at for s, at in held]))
        merged = self._write_segment(f"r{snap.next_segment:06d}", rows, state)
        segments = [*kept, merged]
        still_dead = np.intersect1d(snap.dead_docs, np.concatenate([s.docs for s in segments]))
        masks, dead_rows = _dead_masks(segments, still_dead)
        return replace(snap, segments=tuple(segments), dead_docs=still_dead, dead=masks,
                       live=sum(s.rows for s in segments) - dead_rows, next_segment=snap.next_segment + 1)

    def _write_segment(self, name: str, found: VectorRows, state: _StoreState) -> _Segment:
        """The segment of the rows ``found`` names (from the lowest to the highest: rows between them that hold
        no chunk are marked -1), its id files written, its rows mapped from the store's vector file. Rows follow
        chunk ids but for an edited chunk's (``Store.update_chunk_metadata``), written after every other."""
        start = int(found.rows.min())
        stop = int(found.rows.max()) + 1
        ids = np.full(stop - start, -1, np.int64)
        docs = np.full(stop - start, -1, np.int64)
        ids[found.rows - start] = found.ids
        docs[found.rows - start] = found.docs
        arrays: dict[str, np.ndarray] = {"ids": ids, "docs": docs, "order": np.argsort(ids, kind="stable")}
        if self.persistent:
            try:
                for kind, array in arrays.items():
                    save_npy(self.directory / f"{name}.{kind}.npy", array)
            except OSError as exc:
                _LOG.warning("%s: cannot write the vector index (%s); keeping it in memory", self.directory, exc)
                self.persistent = False
        return self._segment(name, start, arrays, state)

    @staticmethod
    def _segment(name: str, start: int, arrays: dict[str, np.ndarray], state: _StoreState) -> _Segment:
        ids, order = arrays["ids"], arrays["order"]
        if state.vector_file is None or start + len(ids) > state.committed:
            raise CorruptIndex(f"{name}: rows {start}..{start + len(ids)} are not in the store's vector file")
        matrix = np.asarray(map_rows(state.vector_file, start, start + len(ids), state.dim))
        return _Segment(name=name, start=start, ids=ids, docs=arrays["docs"], matrix=matrix, order=order,
                        sorted_ids=ids[order])

    # -- manifest ---------------------------------------------------------------------------------------
    def _manifest(self, snap: _Snapshot) -> dict[str, Any]:
        return {
            "format": FORMAT, "model": snap.model, "dim": snap.dim, "vector_file": snap.vector_file,
            "generation": snap.generation, "max_chunk_id": snap.max_chunk_id, "store_max_id": snap.store_max_id,
            "live": snap.live,
            "next_segment": snap.next_segment,
            "segments": [{"name": s.name, "start": s.start, "rows": s.rows, "id_sum": int(s.ids.sum())}
                         for s in snap.segments],
            "dead_docs": snap.dead_docs.tolist(),
        }

    def _from_manifest(self, raw: dict[str, Any], state: _StoreState) -> _Snapshot | None:
        model, dim = state.model, state.dim
        if (raw.get("format"), raw.get("model"), raw.get("dim"), raw.get("vector_file")) != (
                FORMAT, model, dim, state.file_name):
            return None
        segments = []
        for entry in raw["segments"]:
            name, rows = str(entry["name"]), int(entry["rows"])
            base = self.directory / name
            arrays = {"ids": load_npy(Path(f"{base}.ids.npy"), rows, "<i8"),
                      "docs": load_npy(Path(f"{base}.docs.npy"), rows, "<i8"),
                      "order": load_npy(Path(f"{base}.order.npy"), rows, "<i8")}
            if int(arrays["ids"].sum()) != int(entry["id_sum"]):
                raise CorruptIndex(f"{name}: chunk ids do not match the manifest")
            segments.append(self._segment(name, int(entry["start"]), arrays, state))
        dead_docs = np.asarray(raw["dead_docs"], np.int64)
        masks, dead_rows = _dead_masks(segments, dead_docs)
        live = sum(s.rows for s in segments) - dead_rows
        if live != int(raw["live"]):
            raise CorruptIndex(f"{live} live rows, manifest says {raw['live']}")
        return _Snapshot(generation=int(raw["generation"]), model=model, dim=dim, vector_file=state.file_name,
                         max_chunk_id=int(raw["max_chunk_id"]), store_max_id=int(raw["store_max_id"]),
                         segments=tuple(segments), dead_docs=dead_docs,
                         dead=masks, live=live, next_segment=int(raw["next_segment"]))


def _all_dead(seg: _Segment, dead_docs: np.ndarray) -> bool:
    return bool(((seg.docs < 0) | np.isin(seg.docs, dead_docs)).all())


def _after_the_largest(segments: Sequence[_Segment]) -> list[bool]:
    """The segments to merge when there are too many: those after the largest (appended since it was built), all
    of them when that leaves fewer than two. Merging a run at the end keeps every row in chunk id order."""
    largest = max(range(len(segments)), key=lambda i: segments[i].rows)
    after = [i > largest for i in range(len(segments))]
    return after if sum(after) >= 2 else [True] * len(segments)
