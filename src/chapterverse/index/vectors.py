"""A persistent dense index kept beside the SQLite file: memory-mapped float32 matrices, opened in milliseconds.

Why not the simple way (load every BLOB into one matrix whenever the store changes): at 1 M chunks of 512
dimensions that is 2 GB read through SQLite on every start and after every write (12-34 s here), and one
exact scan costs what the memory bus allows (0.1 s here). This index keeps the vectors in ``.npy`` files that the OS
pages in on demand, follows the store by its generation counter, and only appends what changed.

Layout of the directory (default ``<library>.vectors/`` beside ``<library>.sqlite3``)::

    manifest.json              format, model, dim, store generation, largest chunk id, segments, removed docs
    s000001.vectors.npy        float32 (rows, dim), unit rows; memory-mapped
    s000001.ids.npy            int64 chunk id of each row
    s000001.docs.npy           int64 document id of each row
    s000001.order.npy          rows sorted by chunk id (lookups by id use binary search, no dict)

*Updates.* Chunk ids only grow, so after a write the index appends one segment with the vectors of chunks
newer than the largest id it holds, and records documents that no longer exist as removed (their rows are
masked). When removed rows pass ``dead_share`` of the index, the live rows are rewritten into one segment;
past ``max_segments``, the segments after the largest are merged into one. A changed embedding model, a
manifest that does not match its files, or counts that disagree with the store rebuild from the store: when
in doubt, rebuild.

*Crash safety.* Every file is written under a temporary name, fsynced and renamed into place; the manifest
is renamed last, so a crash leaves either the old index or the new one. Files are never modified after
they are named; a half-written or mismatched file fails validation on open and the index is rebuilt.

*Int8 codes* (:mod:`chapterverse.index.resident`). Once a process searches a second time, a background thread
quantizes the matrices into process memory, up to ``resident_bytes``; from then on a search scans the codes and
scores in float32 only the rows that can still make its top k (:func:`chapterverse.index.dense.top_candidates`:
the same results as the full scan, a quarter of the bytes read).

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
from typing import Any

import numpy as np

from ..errors import StoreError
from ..store import SQLiteStore, Store
from .dense import QuantizedRows, inner_products, top_candidates
from .files import CorruptIndex, FollowedIndex, Refresh, load_npy, read_snapshot, save_npy
from .resident import ResidentCodes
from .topk import top_k

__all__ = ["VectorIndex", "IndexSettings", "IndexStats", "default_directory", "FORMAT"]

FORMAT = 1
"""Version of the on-disk layout; another version is rebuilt, never read."""
_LOG = logging.getLogger(__name__)


def _physical_memory_bytes(default: int = 8 << 30) -> int:
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):  # pragma: no cover - platforms without sysconf
        return default


def default_directory(store: SQLiteStore) -> Path:
    """``library.sqlite3`` -> ``library.vectors/`` in the same folder."""
    return store.path.with_name(store.path.stem + ".vectors")


@dataclass(frozen=True, slots=True, kw_only=True)
class IndexSettings:
    """How the index keeps its files and its memory."""

    dead_share: float = 0.20
    """Rows of removed documents above this share of all rows trigger compaction."""
    max_segments: int = 16
    """More appended segments than this are merged (each is one more scan per query)."""
    page_rows: int = 65_536
    """Rows read from SQLite per page during a rebuild."""
    resident_bytes: int = field(default_factory=lambda: min(4 << 30, _physical_memory_bytes() // 8))
    """Int8 codes up to this total (default 4 GiB, or an eighth of the machine's memory where that is less: a
    byte per dimension and four per vector, 0.5 GB at 1 M x 512) are made in process memory once a process
    searches a second time (see :mod:`chapterverse.index.resident`). Larger indexes, and 0, scan every float32
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
    ids: np.ndarray
    docs: np.ndarray
    matrix: np.ndarray
    order: np.ndarray
    sorted_ids: np.ndarray
    codes: QuantizedRows | None = None
    """Set once the int8 codes of ``matrix`` are made (see :mod:`chapterverse.index.resident`)."""

    @property
    def rows(self) -> int:
        return len(self.ids)


@dataclass(frozen=True, slots=True)
class _Snapshot:
    generation: int
    model: str
    dim: int
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


@dataclass(frozen=True, slots=True)
class _StoreState:
    generation: int
    model: str
    dim: int
    max_id: int

    @classmethod
    def read(cls, store: SQLiteStore) -> _StoreState:
        max_id = store.max_chunk_id()
        dim = int(store.get_meta("embedding_dim") or 0)
        if not dim and max_id:  # vectors written without a recorded model: their own width decides
            dim = int(store.vectors_since(0, limit=1)[2].shape[1])
        return cls(store.generation(), store.get_meta("embedding_model") or "", dim, max_id)



def _dead_masks(segments: Sequence[_Segment], dead_docs: np.ndarray) -> tuple[tuple[np.ndarray | None, ...], int]:
    masks: list[np.ndarray | None] = []
    dead_rows = 0
    for seg in segments:
        mask = np.isin(seg.docs, dead_docs) if len(dead_docs) else None
        if mask is not None and not mask.any():
            mask = None
        dead_rows += int(mask.sum()) if mask is not None else 0
        masks.append(mask)
    return tuple(masks), dead_rows


# ----------------------------------------------------------------------------------------------------------


class VectorIndex(FollowedIndex[_Snapshot, _StoreState]):
    """The dense index of one SQLite store. Thread-safe; see the module docstring for the design.

    >>> index = VectorIndex.open(store)           # milliseconds when the files match the store
    >>> index.search(query_vector, k=10)          # [(chunk_id, cosine), ...] best first
    """

    def __init__(self, store: Store, directory: str | Path | None = None, *,
                 settings: IndexSettings | None = None) -> None:
        if not isinstance(store, SQLiteStore):
            raise StoreError(f"{type(store).__name__}: the memory-mapped vector index serves SQLite libraries; "
                             "PostgreSQL searches its vectors in the database")
        super().__init__(Path(directory) if directory is not None else default_directory(store), store)
        self.store = store
        self.settings = settings or IndexSettings()
        self._snap: _Snapshot | None = None
        self._lock = threading.Lock()
        self._codes = ResidentCodes(self._lock, self.settings.resident_bytes, self._segments_now, self._swap_in,
                                    str(self.directory))

    what = "vector index"

    @classmethod
    def open(cls, store: Store, directory: str | Path | None = None, *,
             settings: IndexSettings | None = None) -> VectorIndex:
        """Open (or build) the index of ``store`` and bring it up to date."""
        index = cls(store, directory, settings=settings)
        index.refresh()
        return index

    # -- reads ------------------------------------------------------------------------------------------
    def search(self, vector: np.ndarray, k: int, doc_ids: Sequence[int] | None = None) -> list[tuple[int, float]]:
        """The ``k`` chunks most similar to ``vector`` (inner product = cosine of unit vectors), best first; ties
        by chunk id."""
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
            rows, scores = self._search_segment(seg, dead, q, k, want)
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
            block = np.array(seg.matrix[rows], np.float32)
            out.update(zip(ids.tolist(), block))
        return out

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
                        want: np.ndarray | None) -> tuple[np.ndarray | None, np.ndarray]:
        """(rows, scores) of the candidates of one segment: those the int8 codes leave, one doc filter's rows, or
        every row (rows None: a million-row ``arange`` per query costs milliseconds)."""
        if want is not None:
            allowed = np.isin(seg.docs, want)
            if dead is not None:
                allowed &= ~dead
            rows = np.flatnonzero(allowed)
            if seg.codes is not None and len(rows) * 8 > seg.rows:  # a broad filter: as a scan of every row
                narrowed = top_candidates(seg.codes, q, k, ~allowed)
                if narrowed is not None:
                    return narrowed, inner_products(seg.matrix[narrowed], q)
            return rows, inner_products(seg.matrix[rows], q)
        if seg.codes is not None:
            narrowed = top_candidates(seg.codes, q, k, dead)
            if narrowed is not None:
                return narrowed, inner_products(seg.matrix[narrowed], q)
        scores = inner_products(seg.matrix, q)
        if dead is not None:
            scores[dead] = -np.inf
        return None, scores

    @staticmethod
    def _locate(snap: _Snapshot, chunk_ids: list[int]) -> Iterator[tuple[_Segment, np.ndarray, np.ndarray]]:
        """(segment, rows, chunk ids) of the requested chunks that are live in each segment."""
        if not chunk_ids:
            return
        wanted = np.asarray(chunk_ids, np.int64)
        for seg, dead in zip(snap.segments, snap.dead):
            if not seg.rows:
                continue
            pos = np.searchsorted(seg.sorted_ids, wanted)
            pos = np.minimum(pos, seg.rows - 1)
            hit = seg.sorted_ids[pos] == wanted
            if not hit.any():
                continue
            rows = np.asarray(seg.order[pos[hit]], np.int64)
            ids = wanted[hit]
            if dead is not None:
                alive = ~dead[rows]
                rows, ids = rows[alive], ids[alive]
            if len(rows):
                yield seg, rows, ids

    # -- refresh ----------------------------------------------------------------------------------------
    def refresh(self) -> None:
        """Bring the index up to the store's generation: nothing, load, append, merge, compact or rebuild."""
        snap = self._snap
        if snap is not None and snap.generation == self.store.generation():
            return
        with self._lock:
            snap = self._snap
            if snap is not None and snap.generation == self.store.generation():
                return
            self._snap = self._with_resident(self._update(snap))
            self._codes.follow()

    def rebuild(self) -> None:
        """Discard the files and rebuild from the store."""
        with self._lock, read_snapshot(self.store), self._writing():
            self._snap = self._rebuild_from_store(self._snap, "asked")
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
        return _StoreState.read(self.store)

    def _matches(self, state: _StoreState, snap: _Snapshot) -> bool:
        return (snap.generation, snap.model, snap.dim, snap.store_max_id) == (
            state.generation, state.model, state.dim, state.max_id)

    def _unusable(self, state: _StoreState, snap: _Snapshot) -> bool:
        return (snap.model, snap.dim) != (state.model, state.dim) or snap.generation > state.generation

    def _apply_changes(self, snap: _Snapshot, state: _StoreState) -> _Snapshot:
        """Append the chunks newer than the index, mask removed documents, merge or compact when worthwhile."""
        store = self.store
        live_docs = store.document_ids()
        known = np.unique(np.concatenate([np.unique(s.docs) for s in snap.segments] or [np.zeros(0, np.int64)]))
        dead_docs = np.union1d(snap.dead_docs, np.setdiff1d(known, live_docs))
        ids, docs, matrix = store.vectors_since(snap.max_chunk_id)
        segments = list(snap.segments)
        next_segment = snap.next_segment
        if len(ids):
            segments.append(self._write_segment(f"s{next_segment:06d}", ids, docs, matrix))
            next_segment += 1
        # a segment of removed documents only (a book added, then removed) goes at once: nothing to rewrite
        segments = [seg for seg in segments if not (len(dead_docs) and np.isin(seg.docs, dead_docs).all())]
        masks, dead_rows = _dead_masks(segments, dead_docs)
        live = sum(s.rows for s in segments) - dead_rows
        chunks = store.count_chunks()
        if live != chunks:
            return self._rebuild_from_store(snap, f"{live} indexed vectors but {chunks} chunks in the store")
        new = replace(snap, generation=state.generation, store_max_id=state.max_id,
                      max_chunk_id=max(snap.max_chunk_id, int(ids[-1]) if len(ids) else 0), segments=tuple(segments),
                      dead_docs=dead_docs, dead=masks, live=live, next_segment=next_segment)
        if new.rows and dead_rows > self.settings.dead_share * new.rows:
            self._last_refresh = Refresh.COMPACTED
            new = self._rewrite(new, [True] * len(new.segments))
        elif len(new.segments) > self.settings.max_segments:
            self._last_refresh = Refresh.MERGED
            new = self._rewrite(new, _after_the_largest(new.segments))
        else:
            self._last_refresh = Refresh.APPENDED
        self._write_manifest(new)
        return new

    # -- (re)building -----------------------------------------------------------------------------------
    def _build_from_store(self, old: _Snapshot | None, reason: str) -> _Snapshot:
        """Read every vector from the store, page by page, into one new segment."""
        _LOG.info("%s: building the vector index (%s)", self.directory, reason)
        store = self.store
        state = _StoreState.read(store)
        next_segment = old.next_segment if old is not None else 1
        name = f"s{next_segment:06d}"
        target = self._new_vectors(name, store.count_chunks(), state.dim)
        ids_parts: list[np.ndarray] = []
        docs_parts: list[np.ndarray] = []
        filled = after = 0
        while True:
            ids, docs, matrix = store.vectors_since(after, limit=self.settings.page_rows)
            if not len(ids):
                break
            if filled + len(ids) > len(target):  # cannot happen inside one read transaction; stay safe anyway
                target = np.concatenate([np.asarray(target[:filled]), np.zeros((len(ids), state.dim), np.float32)])
            target[filled:filled + len(ids)] = matrix
            ids_parts.append(ids)
            docs_parts.append(docs)
            filled += len(ids)
            after = int(ids[-1])
        ids = np.concatenate(ids_parts) if ids_parts else np.zeros(0, np.int64)
        docs = np.concatenate(docs_parts) if docs_parts else np.zeros(0, np.int64)
        whole = target if filled == len(target) else np.asarray(target[:filled])
        segments = (self._write_segment(name, ids, docs, whole),) if filled else ()
        del whole
        del target
        self._drop_unsealed(name)
        return _Snapshot(generation=state.generation, model=state.model, dim=state.dim,
                         max_chunk_id=int(ids[-1]) if len(ids) else 0, store_max_id=state.max_id,
                         segments=segments, dead_docs=np.zeros(0, np.int64), dead=(None,) * len(segments),
                         live=filled, next_segment=next_segment + 1)

    def _rewrite(self, snap: _Snapshot, chosen: list[bool]) -> _Snapshot:
        """Rewrite the live rows of the ``chosen`` segments (a run at the end: rows stay in chunk id order) as one
        new segment."""
        picked = [(seg, dead) for seg, dead, c in zip(snap.segments, snap.dead, chosen) if c]
        kept = [(seg, dead) for seg, dead, c in zip(snap.segments, snap.dead, chosen) if not c]
        keep_rows = [np.flatnonzero(~dead) if dead is not None else np.arange(seg.rows) for seg, dead in picked]
        name = f"s{snap.next_segment:06d}"
        target = self._new_vectors(name, sum(len(r) for r in keep_rows), snap.dim)
        filled = 0
        for (seg, _), rows in zip(picked, keep_rows):
            for lo in range(0, len(rows), self.settings.page_rows):
                part = rows[lo:lo + self.settings.page_rows]
                target[filled:filled + len(part)] = seg.matrix[part]
                filled += len(part)
        ids = np.concatenate([seg.ids[r] for (seg, _), r in zip(picked, keep_rows)])
        docs = np.concatenate([seg.docs[r] for (seg, _), r in zip(picked, keep_rows)])
        merged = self._write_segment(name, ids, docs, target) if len(ids) else None
        del target
        self._drop_unsealed(name)
        segments = [seg for seg, _ in kept] + ([merged] if merged is not None else [])
        still_dead = np.intersect1d(snap.dead_docs, np.concatenate([s.docs for s in segments])) \
            if segments else np.zeros(0, np.int64)
        masks, dead_rows = _dead_masks(segments, still_dead)
        return replace(snap, segments=tuple(segments), dead_docs=still_dead, dead=masks,
                       live=sum(s.rows for s in segments) - dead_rows, next_segment=snap.next_segment + 1)

    def _write_segment(self, name: str, ids: np.ndarray, docs: np.ndarray, matrix: np.ndarray) -> _Segment:
        """Write one segment's files and map them back. A ``matrix`` that :meth:`_new_vectors` gave for this
        segment and that is full is its file already: sealed in place, not copied."""
        dim = matrix.shape[1] if matrix.ndim == 2 else 0
        ids = np.ascontiguousarray(ids, np.int64)
        by_id = np.argsort(ids, kind="stable")
        arrays: dict[str, np.ndarray] = {"ids": ids, "docs": np.ascontiguousarray(docs, np.int64), "order": by_id}
        if not self.persistent:
            return self._segment(name, np.array(matrix, np.float32), arrays)
        path = self.directory / f"{name}.vectors.npy"
        try:
            if self._is_unsealed(name, matrix):
                self._seal(matrix, self._unsealed(name), path)
            else:
                self._write_vectors(path, matrix, dim)
            for kind, array in arrays.items():
                save_npy(self.directory / f"{name}.{kind}.npy", array)
        except OSError as exc:
            _LOG.warning("%s: cannot write the vector index (%s); keeping it in memory", self.directory, exc)
            self.persistent = False
            return self._write_segment(name, ids, docs, matrix)
        vectors = load_npy(path, len(ids), "<f4", dim)
        return self._segment(name, vectors, arrays)

    @staticmethod
    def _segment(name: str, vectors: np.ndarray, arrays: dict[str, np.ndarray]) -> _Segment:
        ids, order = arrays["ids"], arrays["order"]
        return _Segment(name=name, ids=ids, docs=arrays["docs"], matrix=vectors, order=order, sorted_ids=ids[order])

    def _write_vectors(self, path: Path, matrix: np.ndarray, dim: int) -> None:
        tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
        out = np.lib.format.open_memmap(tmp, mode="w+", dtype="<f4", shape=(len(matrix), dim))
        step = self.settings.page_rows
        for lo in range(0, len(matrix), step):
            out[lo:lo + step] = matrix[lo:lo + step]
        self._seal(out, tmp, path)

    @staticmethod
    def _seal(written: np.ndarray, tmp: Path, path: Path) -> None:
        """Make the memory-mapped file ``tmp`` durable (flush, fsync), then name it ``path``."""
        assert isinstance(written, np.memmap)
        written.flush()
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)

    def _new_vectors(self, name: str, rows: int, dim: int) -> np.ndarray:
        """The matrix a new segment of ``rows`` vectors is filled in: the segment's own ``.npy`` file under a
        temporary name (memory stays flat, and :meth:`_write_segment` seals it instead of copying 2 KB a row
        once more: a third of the build at 100 k chunks), or RAM where the directory cannot be written."""
        if self.persistent:
            try:
                self.directory.mkdir(parents=True, exist_ok=True)
                return np.lib.format.open_memmap(self._unsealed(name), mode="w+", dtype="<f4", shape=(rows, dim))
            except OSError as exc:
                _LOG.warning("%s: cannot write the vector index (%s); keeping it in memory", self.directory, exc)
                self.persistent = False
        return np.zeros((rows, dim), np.float32)

    def _unsealed(self, name: str) -> Path:
        return self.directory / f"{name}.vectors.npy.tmp-filling-{os.getpid()}"

    def _is_unsealed(self, name: str, matrix: np.ndarray) -> bool:
        """Whether ``matrix`` is the file :meth:`_new_vectors` opened for segment ``name`` (callers pass it whole
        or as a plain array: a memory-mapped slice of it would not fill its file)."""
        return (isinstance(matrix, np.memmap) and matrix.filename is not None
                and os.path.abspath(matrix.filename) == os.path.abspath(self._unsealed(name)))

    def _drop_unsealed(self, name: str) -> None:
        """Remove the file of a segment that was not sealed (fewer rows than expected, or nothing to write)."""
        try:
            self._unsealed(name).unlink(missing_ok=True)
        except OSError:  # an unwritable directory (nothing was written there), or mapped elsewhere: collected later
            pass

    # -- manifest ---------------------------------------------------------------------------------------
    def _manifest(self, snap: _Snapshot) -> dict[str, Any]:
        return {
            "format": FORMAT, "model": snap.model, "dim": snap.dim, "dtype": "float32",
            "generation": snap.generation, "max_chunk_id": snap.max_chunk_id, "store_max_id": snap.store_max_id,
            "live": snap.live,
            "next_segment": snap.next_segment,
            "segments": [{"name": s.name, "rows": s.rows, "id_sum": int(s.ids.sum())} for s in snap.segments],
            "dead_docs": snap.dead_docs.tolist(),
        }

    def _from_manifest(self, raw: dict[str, Any], state: _StoreState) -> _Snapshot | None:
        model, dim = state.model, state.dim
        if raw.get("format") != FORMAT or raw.get("model") != model or raw.get("dim") != dim:
            return None
        if any(entry.get("clustered") for entry in raw["segments"]):
            return None  # rows stored list by list for IVF (removed): rebuilt in chunk id order
        segments = []
        for entry in raw["segments"]:
            name, rows = str(entry["name"]), int(entry["rows"])
            base = self.directory / name
            arrays = {"ids": load_npy(Path(f"{base}.ids.npy"), rows, "<i8"),
                      "docs": load_npy(Path(f"{base}.docs.npy"), rows, "<i8"),
                      "order": load_npy(Path(f"{base}.order.npy"), rows, "<i8")}
            if int(arrays["ids"].sum()) != int(entry["id_sum"]):
                raise CorruptIndex(f"{name}: chunk ids do not match the manifest")
            vectors = load_npy(Path(f"{base}.vectors.npy"), rows, "<f4", dim)
            segments.append(self._segment(name, vectors, arrays))
        dead_docs = np.asarray(raw["dead_docs"], np.int64)
        masks, dead_rows = _dead_masks(segments, dead_docs)
        live = sum(s.rows for s in segments) - dead_rows
        if live != int(raw["live"]):
            raise CorruptIndex(f"{live} live rows, manifest says {raw['live']}")
        return _Snapshot(generation=int(raw["generation"]), model=model, dim=dim,
                         max_chunk_id=int(raw["max_chunk_id"]), store_max_id=int(raw["store_max_id"]),
                         segments=tuple(segments), dead_docs=dead_docs,
                         dead=masks, live=live, next_segment=int(raw["next_segment"]))


def _after_the_largest(segments: Sequence[_Segment]) -> list[bool]:
    """The segments to merge when there are too many: those after the largest (appended since it was built), all
    of them when that leaves fewer than two. Merging a run at the end keeps every row in chunk id order."""
    largest = max(range(len(segments)), key=lambda i: segments[i].rows)
    after = [i > largest for i in range(len(segments))]
    return after if sum(after) >= 2 else [True] * len(segments)
