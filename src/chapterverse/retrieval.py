"""Hybrid retrieval: BM25 over stemmed terms fused with dense cosine similarity.

Why not reciprocal-rank fusion: RRF throws away score magnitudes, so a strong lexical match and a
weak one count the same, and it loses to BM25 alone on the Spanish and Italian SQuAD sets. We fuse
*normalized scores* instead, and scale the lexical side by how much of the query the library's
vocabulary actually covers: a Spanish question against English text matches almost no terms, so
its lexical evidence is worthless and the dense side decides (cross-lingual retrieval).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from .analysis import content_words, query_terms
from .embeddings import Embedder
from .store import ChunkRecord, SQLiteStore

__all__ = ["Retriever", "ScoredChunk", "FusionWeights"]


@dataclass(frozen=True, slots=True)
class FusionWeights:
    """How lexical and dense scores combine; tuned on the dev question sets (see docs/BENCHMARKS.md)."""

    lexical: float = 0.5
    candidates: int = 60
    heading: float = 0.5


@dataclass(slots=True)
class ScoredChunk:
    chunk: ChunkRecord
    score: float
    lexical: float = 0.0
    dense: float = 0.0
    extras: dict[str, float] = field(default_factory=dict)


class _DenseIndex:
    """All vectors in one matrix, reloaded when the store's generation moves (any chunk write)."""

    def __init__(self) -> None:
        self.generation = -1
        self.ids = np.zeros(0, np.int64)
        self.docs = np.zeros(0, np.int64)
        self.matrix = np.zeros((0, 0), np.float32)
        self.row_of: dict[int, int] = {}
        self._lock = threading.Lock()

    def refresh(self, store: SQLiteStore) -> None:
        generation = store.generation()
        if generation == self.generation:
            return
        with self._lock:
            if generation == self.generation:
                return
            ids, docs, matrix = store.load_vectors()
            self.ids, self.docs, self.matrix = ids, docs, matrix
            self.row_of = {int(cid): row for row, cid in enumerate(ids)}
            self.generation = generation


class Retriever:
    """Searches one store with one embedder; thread-safe for concurrent readers."""

    def __init__(self, store: SQLiteStore, embedder: Embedder, weights: FusionWeights | None = None) -> None:
        self.store = store
        self.embedder = embedder
        self.weights = weights or FusionWeights()
        self._dense = _DenseIndex()

    # -- single methods -----------------------------------------------------------------------
    def lexical(self, query: str, *, k: int, doc_ids: Sequence[int] | None = None) -> list[tuple[int, float]]:
        terms = query_terms(query, self.store.languages())
        return self.store.lexical_search(terms, k=k, doc_ids=doc_ids, heading_weight=self.weights.heading)

    def dense(self, query: str, *, k: int, doc_ids: Sequence[int] | None = None,
              query_vector: np.ndarray | None = None) -> list[tuple[int, float]]:
        self._dense.refresh(self.store)
        index = self._dense
        if not len(index.ids):
            return []
        vector = query_vector if query_vector is not None else self.embedder.embed_query(query)
        scores = index.matrix @ vector
        if doc_ids is not None:
            scores = np.where(np.isin(index.docs, np.asarray(doc_ids, np.int64)), scores, -np.inf)
        k = min(k, len(scores))
        top = np.argpartition(-scores, k - 1)[:k]
        top = top[np.argsort(-scores[top])]
        return [(int(index.ids[i]), float(scores[i])) for i in top if np.isfinite(scores[i])]

    # -- fusion -------------------------------------------------------------------------------
    def search(self, query: str, *, k: int = 5, doc_ids: Sequence[int] | None = None,
               threshold: float | None = None, mmr: float | None = None) -> list[ScoredChunk]:
        """The best ``k`` chunks by fused score; ``mmr`` (0..1, e.g. 0.7) trades relevance for diversity."""
        n = max(self.weights.candidates, k)
        vector = self.embedder.embed_query(query)
        lexical = dict(self.lexical(query, k=n, doc_ids=doc_ids))
        dense = dict(self.dense(query, k=n, doc_ids=doc_ids, query_vector=vector))
        candidate_ids = list(dict.fromkeys([*lexical, *dense]))
        if not candidate_ids:
            return []
        cosines = self._cosines(candidate_ids, vector)
        coverage = self._coverage(query)
        top_lexical = max(lexical.values(), default=0.0)
        fused: dict[int, tuple[float, float, float]] = {}
        for cid in candidate_ids:
            lex = lexical.get(cid, 0.0) / top_lexical if top_lexical > 0 else 0.0
            weight = self.weights.lexical * coverage
            fused[cid] = (weight * lex + (1 - weight) * cosines[cid], lex, cosines[cid])
        ranked = sorted(fused, key=lambda c: fused[c][0], reverse=True)
        if threshold is not None:
            ranked = [c for c in ranked if fused[c][0] >= threshold]
        chosen = self._mmr(ranked, fused, vector, k, mmr) if mmr is not None else ranked[:k]
        records = self.store.chunks_by_ids(chosen)
        return [ScoredChunk(records[c], *fused[c]) for c in chosen if c in records]

    def _cosines(self, chunk_ids: Sequence[int], vector: np.ndarray) -> dict[int, float]:
        self._dense.refresh(self.store)
        rows = [self._dense.row_of.get(c) for c in chunk_ids]
        known = [r for r in rows if r is not None]
        values = self._dense.matrix[known] @ vector if known else np.zeros(0, np.float32)
        lookup = dict(zip(known, values.tolist()))
        return {c: (lookup[r] if r is not None else 0.0) for c, r in zip(chunk_ids, rows)}

    def _coverage(self, query: str) -> float:
        """Share of the query's content words that occur in the library at all (0..1)."""
        languages = self.store.languages()
        stems_of = {w: query_terms(w, languages) for w in content_words(query, languages) if len(w) > 1}
        if not stems_of:
            return 0.0
        known = self.store.known_terms(sorted({s for stems in stems_of.values() for s in stems}))
        return sum(1 for stems in stems_of.values() if known.intersection(stems)) / len(stems_of)

    def _mmr(self, ranked: list[int], fused: dict[int, tuple[float, float, float]], vector: np.ndarray,
             k: int, balance: float) -> list[int]:
        rows = {c: self._dense.row_of[c] for c in ranked if c in self._dense.row_of}
        chosen: list[int] = []
        pool = [c for c in ranked if c in rows][: max(k * 5, 20)]
        while pool and len(chosen) < k:
            def gain(c: int) -> float:
                if not chosen:
                    return fused[c][0]
                sims = self._dense.matrix[[rows[s] for s in chosen]] @ self._dense.matrix[rows[c]]
                return balance * fused[c][0] - (1 - balance) * float(sims.max())
            best = max(pool, key=gain)
            chosen.append(best)
            pool.remove(best)
        return chosen
