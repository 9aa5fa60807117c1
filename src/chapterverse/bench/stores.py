"""The store benchmark: SQLite vs PostgreSQL ingest throughput, query latency and HNSW recall.

Synthetic on purpose, so it needs no model and no data set and runs the same everywhere:

- **text**: every chunk is 80 words drawn from a Zipf(1.1) distribution over 40,000 made-up words that
  Snowball leaves unchanged, so term and document frequencies look like a real library's;
- **vectors**: random unit vectors (512 dimensions, the default embedder's), which is the *worst* case
  for HNSW: real embeddings cluster, random ones do not;
- **queries**: six words (two common, three mid-frequency, one rare); the query vector is a noisy copy of
  a stored vector (cosine ~0.75 to it, the way a question resembles its passage) for the latency and
  "near" recall figures, and a fresh random vector for the "random" recall figure (no true neighbour).

Stores, per size: SQLite (numpy dense search over the loaded matrix); PostgreSQL loaded without the HNSW
index (exact dense scans); the same database after building the index; and a fresh PostgreSQL database
with the index maintained during ingest. Latencies are per call to the store or the Retriever, in this
process, against a server on the same machine (no network), after one warm-up query.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from ..analysis import index_terms, query_terms
from ..embeddings import Embedder
from ..search.retrieval import Retriever
from ..store import NewChunk, NewDocument, NewFile, SQLiteStore

__all__ = ["Latency", "StoreResult", "run_store_bench", "format_table", "compare_retrieval", "format_comparison",
           "compare_text_search", "main"]

DIM = 512
WORDS_PER_CHUNK = 80
CHUNKS_PER_DOCUMENT = 500
VOCABULARY = 40_000
CANDIDATES = 60
"""What a hybrid search asks each side for (FusionWeights.candidates)."""


@dataclass(slots=True)
class Latency:
    p50_ms: float
    p99_ms: float

    @classmethod
    def of(cls, seconds: Sequence[float]) -> Latency:
        ms = sorted(s * 1000 for s in seconds)
        return cls(statistics.median(ms), ms[min(len(ms) - 1, int(round(0.99 * (len(ms) - 1))))])

    def __str__(self) -> str:
        return f"{self.p50_ms:.1f} / {self.p99_ms:.1f}"


@dataclass(slots=True)
class StoreResult:
    store: str
    chunks: int
    ingest_chunks_per_s: float | None = None
    index_build_s: float | None = None
    lexical: Latency | None = None
    dense: Latency | None = None
    hybrid: Latency | None = None
    recall_near: float | None = None
    recall_random: float | None = None
    anchor_found: float | None = None
    """Share of ``near`` queries whose source vector (cosine ~0.75, the clear nearest) is in the HNSW top 10."""
    notes: list[str] = field(default_factory=list)


# ------------------------------------------------------------------------------------------------ data


class _FixedEmbedder(Embedder):
    """The Retriever needs an embedder; the benchmark always passes query vectors, so this is never asked."""

    name = "bench-random"

    def __init__(self) -> None:
        self._dim = DIM

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        raise AssertionError("the store benchmark passes query vectors")


def _vocabulary(rng: np.random.Generator) -> list[str]:
    """Made-up words the English stemmer leaves alone (so query terms equal index terms)."""
    onsets, vowels, codas = list("bdfgklmnprstvz"), ["a", "e", "i", "o", "u", "ai", "ou"], list("kmnprtxz")
    words: dict[str, None] = {}
    while len(words) < VOCABULARY:
        n = int(rng.integers(2, 4))
        word = "".join(onsets[rng.integers(len(onsets))] + vowels[rng.integers(len(vowels))] for _ in range(n))
        word += codas[rng.integers(len(codas))]
        if index_terms(word, "english") == word:
            words[word] = None
    return list(words)


def _unit(rng: np.random.Generator, n: int) -> np.ndarray:
    vectors = rng.standard_normal((n, DIM)).astype(np.float32)
    unit: np.ndarray = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    return unit


@dataclass(slots=True)
class _Corpus:
    documents: list[NewDocument]
    vectors: np.ndarray
    questions: list[str]
    near: np.ndarray
    random: np.ndarray
    anchors: np.ndarray
    """Row of the stored vector each ``near`` query was made from."""


def _corpus(size: int, queries: int, seed: int) -> _Corpus:
    rng = np.random.default_rng(seed)
    words = _vocabulary(rng)
    ranks = np.minimum(rng.zipf(1.1, size * WORDS_PER_CHUNK), VOCABULARY) - 1
    vectors = _unit(rng, size)
    documents = []
    for first in range(0, size, CHUNKS_PER_DOCUMENT):
        count = min(CHUNKS_PER_DOCUMENT, size - first)
        texts = [" ".join(words[r] for r in ranks[(first + i) * WORDS_PER_CHUNK:(first + i + 1) * WORDS_PER_CHUNK])
                 for i in range(count)]
        text = "\n\n".join(texts)
        chunks, offset = [], 0
        for i, chunk_text in enumerate(texts):
            chunks.append(NewChunk(0, offset, offset + len(chunk_text), f"bench/{first // CHUNKS_PER_DOCUMENT:05d}",
                                   i, index_terms(chunk_text, "english")))
            offset += len(chunk_text) + 2
        documents.append(NewDocument(
            source=f"bench/{first // CHUNKS_PER_DOCUMENT:05d}", title=f"Bench document {first}", format="text",
            content_hash=f"{seed}-{size}-{first}", size_bytes=len(text.encode()), language="english",
            files=[NewFile(text)], toc=[], segments=[], chunks=chunks, vectors=vectors[first:first + count]))
    questions = []
    for _ in range(queries):
        picks = [*rng.integers(0, 100, 2), *rng.integers(100, 5000, 3), *rng.integers(5000, VOCABULARY, 1)]
        questions.append(" ".join(words[p] for p in picks))
    anchors = rng.integers(0, size, queries)
    near = vectors[anchors] + _unit(rng, queries) * 0.9
    near /= np.linalg.norm(near, axis=1, keepdims=True)
    return _Corpus(documents, vectors, questions, near.astype(np.float32), _unit(rng, queries), anchors)


# ------------------------------------------------------------------------------------------------ measuring


def _timed(calls: Sequence[Callable[[], Any]]) -> Latency:
    calls[0]()  # warm-up: caches, the SQLite matrix, prepared plans
    seconds = []
    for call in calls:
        t0 = time.perf_counter()
        call()
        seconds.append(time.perf_counter() - t0)
    return Latency.of(seconds)


def _ingest(store: Any, corpus: _Corpus) -> float:
    store.check_embedding_model(_FixedEmbedder.name, DIM)
    t0 = time.perf_counter()
    for doc in corpus.documents:
        store.add_document(doc)
    return len(corpus.vectors) / (time.perf_counter() - t0)


def _queries(store: Any, corpus: _Corpus, result: StoreResult) -> None:
    retriever = Retriever(store, _FixedEmbedder())
    languages = store.languages()
    terms = [query_terms(q, languages) for q in corpus.questions]
    pairs = list(zip(corpus.questions, corpus.near))
    result.lexical = _timed([partial(store.lexical_search, t, k=CANDIDATES) for t in terms])
    result.dense = _timed([partial(retriever.dense, "", k=CANDIDATES, query_vector=v) for v in corpus.near])
    result.hybrid = _timed([partial(retriever.search, q, k=5, query_vector=v) for q, v in pairs])


def _recall(store: Any, corpus: _Corpus, ids: np.ndarray, queries: np.ndarray, k: int = 10) -> float:
    """Recall@k of HNSW against exact search."""
    exact = np.argsort(-(corpus.vectors @ queries.T), axis=0)[:k].T
    found = 0
    for row, query in enumerate(queries):
        got = {cid for cid, _ in store.dense_search(query, k=k)}
        found += len(got & {int(ids[i]) for i in exact[row]})
    return found / (k * len(queries))


def _anchor_found(store: Any, corpus: _Corpus, ids: np.ndarray, k: int = 10) -> float:
    hits = sum(int(ids[a]) in {cid for cid, _ in store.dense_search(q, k=k)}
               for q, a in zip(corpus.near, corpus.anchors))
    return hits / len(corpus.near)


@contextmanager
def _pg_schema(url: str, name: str, **options: Any) -> Iterator[Any]:
    """A PostgresStore in a fresh schema ``name`` of the database at ``url``, dropped afterwards."""
    import psycopg
    from urllib.parse import quote

    from ..store.postgres import PostgresStore

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")
        conn.execute(f"CREATE SCHEMA {name}")
    store = PostgresStore(f"{url}{'&' if '?' in url else '?'}options={quote(f'-csearch_path={name},public')}",
                          **options)
    try:
        yield store
    finally:
        store.close()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {name} CASCADE")


def _bench_size(size: int, pg_url: str | None, queries: int, seed: int, incremental_max: int,
                log: Callable[[str], None]) -> list[StoreResult]:
    from ..store.postgres import PostgresStore

    log(f"[{size}] generating {size} chunks")
    corpus = _corpus(size, queries, seed)
    results = []
    with tempfile.TemporaryDirectory(prefix="cv-store-bench-") as tmp:
        sqlite = SQLiteStore(Path(tmp) / "bench.sqlite3")
        row = StoreResult("sqlite", size)
        log(f"[{size}] sqlite ingest")
        row.ingest_chunks_per_s = _ingest(sqlite, corpus)
        log(f"[{size}] sqlite queries")
        _queries(sqlite, corpus, row)
        row.notes.append("dense: numpy over the in-memory matrix")
        results.append(row)
        sqlite.close()
    if pg_url is None:
        return results
    with _pg_schema(pg_url, f"bench_{size}", vector_index=False) as pg:
        exact = StoreResult("postgres, no index", size)
        log(f"[{size}] postgres ingest (no index)")
        exact.ingest_chunks_per_s = _ingest(pg, corpus)
        with pg.transaction() as tx:  # keep statistics fresh, as autovacuum would shortly after a bulk load
            tx.execute("ANALYZE")
        log(f"[{size}] postgres queries (exact)")
        _queries(pg, corpus, exact)
        exact.notes.append("dense: exact scan in the database")
        results.append(exact)
        hnsw = StoreResult("postgres + HNSW", size)
        log(f"[{size}] postgres HNSW build")
        t0 = time.perf_counter()
        with pg.transaction() as tx:
            tx.execute("SET LOCAL maintenance_work_mem = '1GB'")
            pg.create_vector_index()
        hnsw.index_build_s = time.perf_counter() - t0
        log(f"[{size}] postgres queries (HNSW)")
        _queries(pg, corpus, hnsw)
        ids = pg.load_vectors()[0]
        hnsw.recall_near = _recall(pg, corpus, ids, corpus.near)
        hnsw.recall_random = _recall(pg, corpus, ids, corpus.random)
        hnsw.anchor_found = _anchor_found(pg, corpus, ids)
        sweep = []
        for ef in (40, 200, 400):
            other = PostgresStore(pg.url, ef_search=ef)
            sweep.append(f"ef_search {ef}: {_recall(other, corpus, ids, corpus.near):.3f} / "
                         f"{_recall(other, corpus, ids, corpus.random):.3f} / {_anchor_found(other, corpus, ids):.3f}")
            other.close()
        hnsw.notes.append("recall@10 near / random / source found at " + ", ".join(sweep))
        results.append(hnsw)
    if size <= incremental_max:
        with _pg_schema(pg_url, f"bench_{size}_live", vector_index=True) as live:
            row = StoreResult("postgres, HNSW during ingest", size)
            log(f"[{size}] postgres ingest (HNSW maintained)")
            row.ingest_chunks_per_s = _ingest(live, corpus)
            results.append(row)
    return results


def run_store_bench(sizes: Sequence[int] = (10_000, 100_000), *, pg_url: str | None = None, queries: int = 200,
                    seed: int = 7, incremental_max: int = 10**9,
                    log: Callable[[str], None] = lambda line: print(line, flush=True)) -> list[StoreResult]:
    """Benchmark both stores at each size and print the table; ``pg_url=None`` runs SQLite only.

    ``pg_url`` must name a database where the ``vector`` extension exists (``scripts/pg.sh start`` prints
    one); the benchmark works in its own schemas (``bench_<size>``...) and drops them afterwards. The
    "HNSW during ingest" row (slow: pgvector inserts one vector at a time into the graph) runs only for
    sizes up to ``incremental_max``.
    """
    results: list[StoreResult] = []
    for size in sizes:
        results += _bench_size(size, pg_url, queries, seed, incremental_max, log)
    log(format_table(results, queries))
    return results


class _MemoEmbedder(Embedder):
    """Wraps an embedder so two libraries built from the same texts embed each text once."""

    def __init__(self, inner: Embedder) -> None:
        self.inner, self.name, self._dim = inner, inner.name, inner.dim
        self.batch_size = inner.batch_size
        self._memo: dict[str, np.ndarray] = {}

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        missing = [t for t in dict.fromkeys(texts) if t not in self._memo]
        if missing:
            self._memo.update(zip(missing, self.inner.embed(missing)))
        return np.stack([self._memo[t] for t in texts]) if texts else np.zeros((0, self.dim), np.float32)

    def embed_query(self, text: str) -> np.ndarray:
        key = "\0query\0" + text
        if key not in self._memo:
            self._memo[key] = self.inner.embed_query(text)
        return self._memo[key]

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        raise AssertionError("embed() is overridden")


def compare_retrieval(sets: Sequence[Any], pg_url: str, *, limit: int | None = None, k: int = 5,
                      log: Callable[[str], None] = lambda line: print(line, flush=True)) -> list[tuple[str, Any, Any]]:
    """The retrieval benchmark (:mod:`chapterverse.bench.retrieval`) on the same sets over SQLite and PostgreSQL.

    Both libraries get the same documents, chunks and vectors (one embedder, each text embedded once), so
    any difference comes from the stores: PostgreSQL's HNSW (approximate) dense search and the lexical
    edge cases listed in docs/DEPLOY.md. Returns (set name, SQLite report, PostgreSQL report) per set.
    """
    from ..embeddings import load_embedder
    from ..library import Library
    from .retrieval import _parsed_hash, run_benchmark

    embedder = _MemoEmbedder(load_embedder(None))
    reports = []
    for number, bench in enumerate(sets):
        with tempfile.TemporaryDirectory(prefix="cv-compare-") as tmp, \
                _pg_schema(pg_url, f"compare_{number}") as pg:
            libraries = [Library(Path(tmp), embedder=embedder), Library(Path(tmp), embedder=embedder, store=pg)]
            doc_ids: list[dict[str, int]] = [{}, {}]
            for side, library in enumerate(libraries):
                log(f"{bench.name}: building the {('SQLite', 'PostgreSQL')[side]} library")
                for doc in bench.documents:
                    if doc.path is not None:
                        doc_ids[side][doc.source] = library.writer.ingest_file(doc.path, source=doc.source).document.id
                    else:
                        record = library.writer.add_parsed(doc.parsed, source=doc.source,
                                                    content_hash=_parsed_hash(doc.parsed),
                                                    size_bytes=len(doc.parsed.files[0].text.encode()))
                        doc_ids[side][doc.source] = record.id
            found = [run_benchmark(bench, lib, ids, k=k, limit=limit) for lib, ids in zip(libraries, doc_ids)]
            reports.append((bench.name, found[0], found[1]))
            log(format_comparison(reports[-1:]))
    return reports


class _ConstantEmbedder(Embedder):
    """Libraries for lexical-only comparisons need vectors of some kind, not good ones."""

    name = "constant"

    def __init__(self) -> None:
        self._dim = 8

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        return np.ones((len(texts), 8))


def compare_text_search(sets: Sequence[tuple[Any, str]], pg_url: str, *, limit: int | None = 600,
                        log: Callable[[str], None] = lambda line: print(line, flush=True)) -> list[str]:
    """Lexical ranking alone on each (set, PostgreSQL text search configuration): this store's BM25 over our
    stems vs PostgreSQL's own ``to_tsvector(config, text)`` ranked by ``ts_rank`` and by ``ts_rank_cd``.

    The native query is ``plainto_tsquery(config, question)`` with its ANDs turned into ORs (any word may
    match, as in BM25). Returns Markdown rows: set | questions | method | hit@1 / hit@5 / MRR@10.
    """
    import psycopg

    from ..analysis import query_terms
    from ..library import Library
    from .retrieval import _first_hit, _parsed_hash, _passages

    lines = []
    for bench, config in sets:
        with tempfile.TemporaryDirectory() as tmp, _pg_schema(pg_url, "text_search") as pg:
            library = Library(Path(tmp), embedder=_ConstantEmbedder(), store=pg)
            ids = {d.source: library.writer.add_parsed(d.parsed, source=d.source, content_hash=_parsed_hash(d.parsed),
                                                size_bytes=0).id for d in bench.documents if d.parsed is not None}
            passages = _passages(library, sorted(ids.values()))
            questions = [q for q in bench.questions if q.source in ids][:limit]
            languages = pg.languages()
            ranks: dict[str, list[int]] = {"BM25 (simple over our stems)": [], f"ts_rank ({config})": [],
                                           f"ts_rank_cd ({config})": []}
            log(f"{bench.name}: {len(questions)} questions")
            with psycopg.connect(pg.url, autocommit=True) as conn:
                for q in questions:
                    hits = pg.lexical_search(query_terms(q.text, languages), k=10, heading_weight=0.0)
                    ranks["BM25 (simple over our stems)"].append(_first_hit(q, ids[q.source], [c for c, _ in hits],
                                                                            passages))
                    for rank in ("ts_rank", "ts_rank_cd"):
                        rows = conn.execute(
                            f"WITH q AS (SELECT nullif(replace(plainto_tsquery('{config}', %s)::text, '&', '|'), '')"
                            f"::tsquery AS q) SELECT c.id FROM chunks c, q WHERE to_tsvector('{config}', c.text) @@ q.q"
                            f" ORDER BY {rank}(to_tsvector('{config}', c.text), q.q) DESC, c.id LIMIT 10",
                            (q.text,)).fetchall()
                        ranks[f"{rank} ({config})"].append(_first_hit(q, ids[q.source], [r[0] for r in rows],
                                                                      passages))
            for method, found in ranks.items():
                n = max(len(found), 1)
                lines.append(f"| {bench.name} | {len(found)} | {method} | {sum(r == 0 for r in found) / n:.3f} / "
                             f"{sum(0 <= r < 5 for r in found) / n:.3f} / "
                             f"{sum(1 / (r + 1) for r in found if 0 <= r < 10) / n:.3f} |")
                log(lines[-1])
    return lines


def format_comparison(reports: Sequence[tuple[str, Any, Any]]) -> str:
    """(set, SQLite report, PostgreSQL report) rows as a Markdown table of hit@1 / hit@k / MRR@10."""
    lines = ["| set | questions | method | SQLite hit@1 / hit@5 / MRR@10 | PostgreSQL hit@1 / hit@5 / MRR@10 |",
             "|---|---:|---|---|---|"]
    for name, lite, pg in reports:
        for method in lite.methods:
            a, b = lite.methods[method], pg.methods[method]
            lines.append(f"| {name} | {lite.questions} | {method} | {a.hit_at_1:.3f} / {a.hit_at_k:.3f} / "
                         f"{a.mrr_at_10:.3f} | {b.hit_at_1:.3f} / {b.hit_at_k:.3f} / {b.mrr_at_10:.3f} |")
    return "\n".join(lines)


def format_table(results: Sequence[StoreResult], queries: int) -> str:
    """The results as a Markdown table (latencies are p50 / p99 in ms over ``queries`` queries)."""
    def cell(value: Any, fmt: str = "{}") -> str:
        return "–" if value is None else fmt.format(value)

    lines = [
        f"| chunks | store | ingest chunks/s | index build s | lexical k={CANDIDATES} ms | dense k={CANDIDATES} ms"
        " | hybrid k=5 ms | HNSW recall@10 near / random | source found |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        recall = "–" if r.recall_near is None else f"{r.recall_near:.3f} / {r.recall_random:.3f}"
        lines.append(f"| {r.chunks:,} | {r.store} | {cell(r.ingest_chunks_per_s, '{:,.0f}')} "
                     f"| {cell(r.index_build_s, '{:.1f}')} | {cell(r.lexical)} | {cell(r.dense)} | {cell(r.hybrid)} "
                     f"| {recall} | {cell(r.anchor_found, '{:.3f}')} |")
    lines.append(f"\nLatencies: p50 / p99 in ms over {queries} queries per cell; one process, server on the same host.")
    lines += [f"- {r.chunks:,} chunks, {r.store}: {note}" for r in results for note in r.notes]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m chapterverse.bench.stores --sizes 10000 100000 --pg-url postgresql://...``"""
    parser = argparse.ArgumentParser(prog="chapterverse-bench-stores", description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--pg-url", default=None, help="a database with the vector extension (scripts/pg.sh start)")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--incremental-max", type=int, default=10**9, metavar="CHUNKS",
                        help="measure ingest with the HNSW index maintained only up to this size")
    args = parser.parse_args(argv)
    run_store_bench(args.sizes, pg_url=args.pg_url, queries=args.queries, seed=args.seed,
                    incremental_max=args.incremental_max)


if __name__ == "__main__":
    main()
