"""One durable copy of each vector: the SQLite store's vector blocks, the embedding cache that holds only what the
library does not, and the migration that brings an older library file to that layout without losing a vector."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import numpy as np
from hashembed import HashingEmbedder

from chapterverse import Library
from chapterverse.index.lexical import LexicalIndex
from chapterverse.store import SQLiteStore
from chapterverse.store.sqlite import _M001_INITIAL
from chapterverse.index.vectors import VectorIndex

FILE_TEXT = "keeper lamp storm gull tide rope"
WORDS = "keeper lamp storm gull tide rope harbour island signal winter cliff wave".split()


class CountingEmbedder(HashingEmbedder):
    """Counts the texts it is asked to embed."""

    def __init__(self) -> None:
        self.embedded: list[str] = []

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        self.embedded.extend(texts)
        return super()._embed_batch(texts)


def half(vectors: np.ndarray) -> np.ndarray:
    """What the store reads back of float32 vectors: each value rounded to float16, as float32."""
    return np.asarray(vectors, np.float32).astype(np.float16).astype(np.float32)


def _paragraphs(seed: int, count: int) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, 90)).capitalize() + "." for _ in range(count)]


def _sql(library: Path, query: str) -> list[tuple[object, ...]]:
    with sqlite3.connect(library / "library.sqlite3") as db:
        return db.execute(query).fetchall()


def test_a_changed_document_embeds_only_its_new_text_and_the_cache_keeps_no_copy(tmp_path: Path) -> None:
    book = tmp_path / "book.md"
    first = _paragraphs(1, 12)
    book.write_text("\n\n".join(first), encoding="utf-8")
    embedder = CountingEmbedder()
    library = Library(tmp_path / "lib", embedder=embedder)
    library.ingest([book])
    chunks = library.store.count_chunks()
    assert len(embedder.embedded) == chunks and chunks > 5
    assert _sql(tmp_path / "lib", "SELECT count(*) FROM embedding_cache") == [(0,)]

    book.write_text("\n\n".join(first + _paragraphs(2, 1)), encoding="utf-8")  # one paragraph appended
    embedder.embedded.clear()
    library.ingest([book])
    assert 0 < len(embedder.embedded) < 4  # the chunks that changed, not the book again
    new_ids = [c.id for c in library.store.chunks()]
    assert library.store.integrity_problems() == []
    ids, _, matrix = library.store.vectors_since(0)
    assert ids.tolist() == new_ids
    expected = HashingEmbedder().embed([c.text for c in library.store.chunks()])
    assert np.array_equal(matrix, half(expected))  # reused vectors are the same text's vectors
    library.close()


def test_embedded_text_is_cached_until_written(tmp_path: Path) -> None:
    """Embedding survives an interrupted write (the cache holds it); once written, the library holds it alone."""
    library = Library(tmp_path / "lib", embedder=HashingEmbedder())
    texts = [f"passage {i} " + " ".join(_paragraphs(i, 1)) for i in range(300)]
    library.writer.embed_passages(texts)  # what prepare() does before the write
    hashes = [hashlib.sha256(t.encode()).hexdigest() for t in texts]
    assert len(library.store.cached_vectors(library.embedder.name, hashes)) == 300
    assert _sql(tmp_path / "lib", "SELECT count(*) FROM embedding_cache") == [(300,)]
    library.close()


def test_reembedding_keeps_one_copy_of_each_vector(tmp_path: Path) -> None:
    """A re-embedding long enough to be cached batch by batch leaves the library as the only holder of the new
    vectors once it has swapped them in."""
    book = tmp_path / "book.md"
    book.write_text("\n\n".join(f"Passage {i}. " + p for i, p in enumerate(_paragraphs(5, 400))), encoding="utf-8")
    Library(tmp_path / "lib", embedder=HashingEmbedder()).ingest([book])

    class Other(HashingEmbedder):
        name = "test-hashing-other"

    library = Library(tmp_path / "lib", embedder=Other())
    assert library.writer.reembed_if_model_changed() == library.store.count_chunks() > 256
    assert _sql(tmp_path / "lib", "SELECT count(*) FROM embedding_cache") == [(0,)]
    ids, _, matrix = library.store.vectors_since(0)
    assert np.array_equal(matrix, half(Other().embed([c.text for c in library.store.chunks()])))
    library.close()


def _schema_1_library(path: Path, *, dim: int) -> sqlite3.Connection:
    """A library file as the first release wrote it (schema 1), empty but for its embedding model ``m`` of ``dim``
    dimensions; autocommit, for the caller to fill."""
    db = sqlite3.connect(path, isolation_level=None)
    db.executescript(_M001_INITIAL + "\nPRAGMA user_version=1;")
    db.execute("INSERT INTO meta VALUES ('embedding_model', 'm'), ('embedding_dim', ?)", (str(dim),))
    return db


def test_an_older_library_file_is_migrated_with_every_vector(tmp_path: Path) -> None:
    """A schema-1 file (a vector row per chunk, an insert trigger for FTS5) opens as the current layout."""
    path = tmp_path / "library.sqlite3"
    db = _schema_1_library(path, dim=4)
    rng = np.random.default_rng(3)
    vectors = rng.standard_normal((7, 4)).astype("<f4")
    for doc in (1, 2):
        db.execute("INSERT INTO documents VALUES (?, ?, 't', 'txt', ?, 1, 'english', '{}', 0, 0, 'now')",
                   (doc, f"d{doc}", f"h{doc}"))
        db.execute("INSERT INTO files VALUES (?, ?, 0, '', '', 1, ?)", (doc, doc, FILE_TEXT))
    texts = ["keeper", "lamp", "storm", "gull", "tide", "rope", "keeper lamp"]
    for cid, text in enumerate(texts, start=1):
        doc = 1 if cid <= 4 else 2
        db.execute("INSERT INTO chunks(id, doc_id, file_id, start, \"end\", text, source, chunk_index, metadata,"
                   " title_path, terms, heading_terms) VALUES (?, ?, ?, ?, ?, ?, 's', ?, '{}', '[]', ?, '')",
                   (cid, doc, doc, FILE_TEXT.find(text), FILE_TEXT.find(text) + len(text), text, cid, text))
        if cid != 3:  # one chunk without a vector: the migration must not invent one
            db.execute("INSERT INTO vectors VALUES (?, ?)", (cid, vectors[cid - 1].tobytes()))
    held = hashlib.sha256(b"lamp").hexdigest()
    db.execute("INSERT INTO embedding_cache VALUES ('m', ?, ?), ('m', 'elsewhere', ?)",
               (held, vectors[1].tobytes(), vectors[0].tobytes()))
    db.close()

    store = SQLiteStore(path)
    ids, docs, matrix = store.vectors_since(0)
    assert ids.tolist() == [1, 2, 4, 5, 6, 7] and docs.tolist() == [1, 1, 1, 2, 2, 2]
    assert np.array_equal(matrix, half(vectors[[0, 1, 3, 4, 5, 6]]))
    assert store.integrity_problems() == ["1 chunks have no vector"]
    assert [r[0] for r in store.db.execute("SELECT text_hash FROM embedding_cache")] == ["elsewhere"]
    found = store.cached_vectors("m", [held, "elsewhere"])  # the library's own chunk answers for "lamp"
    assert np.array_equal(found[held], half(vectors[1])) and np.array_equal(found["elsewhere"], vectors[0])
    assert store.cached_vectors("other-model", [held]) == {}
    assert store.lexical_search(["lamp"], k=5)  # the store's own BM25 still answers
    store.close()


def test_index_files_follow_vector_blocks_across_writes(tmp_path: Path) -> None:
    """The memory-mapped indexes built from blocks match the store after appends and removals."""
    library = Library(tmp_path / "lib", embedder=HashingEmbedder())
    for n in range(3):
        (tmp_path / f"d{n}.md").write_text("\n\n".join(_paragraphs(10 + n, 6)), encoding="utf-8")
    library.ingest(sorted(tmp_path.glob("d*.md")))
    index = VectorIndex.open(library.store)
    library.remove(library.documents()[1].id)
    (tmp_path / "d3.md").write_text("\n\n".join(_paragraphs(20, 4)), encoding="utf-8")
    library.ingest([tmp_path / "d3.md"])
    index.refresh()
    ids, _, matrix = library.store.vectors_since(0)
    got = index.vectors(ids.tolist())
    assert sorted(got) == ids.tolist() and all(np.array_equal(got[i], row) for i, row in zip(ids.tolist(), matrix))
    lexical = LexicalIndex.open(library.store)
    assert lexical.stats().postings > 0
    library.close()


def test_a_migrated_library_gives_back_the_pages_its_vectors_held(tmp_path: Path) -> None:
    """Migration 4 moves every vector out of the SQLite file; the file then shrinks (VACUUM), so an upgraded
    library is not its old size plus the vector file."""
    path = tmp_path / "library.sqlite3"
    db = _schema_1_library(path, dim=512)
    db.execute("INSERT INTO documents VALUES (1, 'd', 't', 'txt', 'h', 1, 'english', '{}', 0, 0, 'now')")
    db.execute("INSERT INTO files VALUES (1, 1, 0, '', '', 1, ?)", (FILE_TEXT,))
    vectors = np.random.default_rng(5).standard_normal((2_000, 512)).astype("<f4")
    db.execute("BEGIN")  # one transaction: 4,000 commits of their own took a minute and a half on a busy disk
    for cid in range(1, 2_001):
        db.execute("INSERT INTO chunks(id, doc_id, file_id, start, \"end\", text, source, chunk_index, metadata,"
                   " title_path, terms, heading_terms) VALUES (?, 1, 1, 0, 6, 'keeper', 's', ?, '{}', '[]', 'keeper',"
                   " '')", (cid, cid))
        db.execute("INSERT INTO vectors VALUES (?, ?)", (cid, vectors[cid - 1].tobytes()))
    db.execute("COMMIT")
    db.close()
    before = path.stat().st_size
    store = SQLiteStore(path)
    assert np.array_equal(store.vectors_since(0)[2], half(vectors))
    assert before > vectors.nbytes and path.stat().st_size < before - vectors.nbytes
    assert store.integrity_problems() == []
    store.close()


SPANISH = "Capítulo uno. El ñandú cantó «canción» junto al río; después, silencio — fin. " * 3


def _chunk_rows(path: Path) -> list[tuple[object, ...]]:
    with sqlite3.connect(path) as db:
        return db.execute('SELECT id, start, "end", text, utf8_start, utf8_end FROM chunks ORDER BY id').fetchall()


def test_a_chunk_row_names_its_span_instead_of_copying_its_text(tmp_path: Path) -> None:
    """The library keeps each file's canonical text; a chunk row holds where its text is in it (UTF-8 bytes), not
    the text again, and every read gives back the exact span: a few chunks (read by their bytes) and many chunks
    of one file (read from the file's text once) alike, multi-byte letters included."""
    book = tmp_path / "libro.md"
    book.write_text("\n\n".join(SPANISH + p for p in _paragraphs(7, 30)), encoding="utf-8")
    library = Library(tmp_path / "lib", embedder=HashingEmbedder(), chunk_size=200, chunk_overlap=20)
    library.ingest([book])
    store = library.store
    rows = _chunk_rows(tmp_path / "lib" / "library.sqlite3")
    assert len(rows) > 20 and all(text == "" and lo is not None for _, _, _, text, lo, _ in rows)
    every = store.chunks()
    for chunk in every:
        canonical = store.file(chunk.file_id).text
        assert chunk.text == canonical[chunk.start:chunk.end] != ""
        assert library.resolve(f"f{chunk.file_id}-{chunk.start}-{chunk.end}").text == chunk.text
    few = store.chunks_by_ids([every[3].id, every[-2].id])
    assert [few[c].text for c in (every[3].id, every[-2].id)] == [every[3].text, every[-2].text]
    assert any(not c.text.isascii() for c in every)
    hits = library.search("ñandú canción", k=3)
    assert hits and all(h.text == store.file(h.chunk.file_id).text[h.chunk.start:h.chunk.end] for h in hits)
    assert store.integrity_problems() == []
    library.close()


def test_an_older_library_keeps_every_chunk_text_when_its_rows_become_spans(tmp_path: Path) -> None:
    """Opening a library whose chunk rows copy their text turns each copy that is its file's text at its position
    into the span's bytes; a row whose text is not (none is written so, but a damaged file may hold one) keeps its
    text. Either way each chunk reads back the text it had."""
    path = tmp_path / "library.sqlite3"
    db = _schema_1_library(path, dim=4)
    db.execute("INSERT INTO documents VALUES (1, 'd', 't', 'txt', 'h', 1, 'spanish', '{}', 0, 0, 'now')")
    db.execute("INSERT INTO files VALUES (1, 1, 0, '', '', 1, ?)", (SPANISH,))
    spans = [(0, 13), (14, 40), (30, 77), (77, 90), (5, 5)]
    texts = [SPANISH[a:b] for a, b in spans] + ["not the file's text"]
    for cid, ((start, end), text) in enumerate(zip([*spans, (0, 19)], texts), start=1):
        db.execute("INSERT INTO chunks(id, doc_id, file_id, start, \"end\", text, source, chunk_index, metadata,"
                   " title_path, terms, heading_terms) VALUES (?, 1, 1, ?, ?, ?, 's', ?, '{}', '[]', 'x', '')",
                   (cid, start, end, text, cid))
        db.execute("INSERT INTO vectors VALUES (?, ?)", (cid, np.ones(4, "<f4").tobytes()))
    db.close()

    store = SQLiteStore(path)
    assert [c.text for c in store.chunks()] == texts
    assert [store.chunks_by_ids([cid])[cid].text for cid in range(1, 7)] == texts
    rows = _chunk_rows(path)
    assert [r[3] for r in rows] == ["", "", "", "", "", "not the file's text"]
    assert [(r[4], r[5]) for r in rows[:4]] == [(len(SPANISH[:a].encode()), len(SPANISH[:b].encode()))
                                                 for a, b in spans[:4]]
    assert store.integrity_problems() == ["1 chunks do not match their file text at their position"]
    store.close()


_SCHEMA_6_FULL_TEXT = """
        CREATE VIRTUAL TABLE chunks_fts USING fts5(
            terms, heading_terms, content='chunks', content_rowid='id',
            tokenize='unicode61 remove_diacritics 2');
        CREATE VIRTUAL TABLE chunks_vocab USING fts5vocab(chunks_fts, 'row');
        CREATE TRIGGER chunks_ad AFTER DELETE ON chunks
        WHEN old.id <= (SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'fts_through') BEGIN
            INSERT INTO chunks_fts(chunks_fts, rowid, terms, heading_terms)
            VALUES ('delete', old.id, old.terms, old.heading_terms);
        END;
        INSERT INTO chunks_fts(chunks_fts) VALUES ('rebuild');
        INSERT OR REPLACE INTO meta(key, value) VALUES ('fts_through', (SELECT max(id) FROM chunks));
"""


def _as_schema_6(path: Path) -> None:
    """Rewrite a library file as schema 6 kept it: every chunk's terms in a column and in FTS5, and float32 rows in
    ``library.vectors-1.f32`` (these rows hold values of float16 precision, as a library's rows become)."""
    store = SQLiteStore(path)
    rows = store.lexical_rows()
    vectors, committed, dim = store.vector_file.current(store.db)
    assert vectors is not None
    store.close()
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("ALTER TABLE chunks DROP COLUMN own_terms")
    db.execute("ALTER TABLE chunks ADD COLUMN terms TEXT NOT NULL DEFAULT ''")
    db.executemany("UPDATE chunks SET terms=? WHERE id=?", [(r[3], r[0]) for r in rows])
    db.executescript(_SCHEMA_6_FULL_TEXT)
    np.fromfile(vectors, "<f2", committed * dim).astype("<f4").tofile(path.with_name("library.vectors-1.f32"))
    vectors.unlink()
    db.executemany("UPDATE vector_journal SET vectors=? WHERE row=?",  # journaled rows as float32 too
                   [(np.frombuffer(blob, "<f2").astype("<f4").tobytes(), row)
                    for row, blob in db.execute("SELECT row, vectors FROM vector_journal").fetchall()])
    db.execute("UPDATE meta SET value='library.vectors-1.f32' WHERE key='vector_file'")
    db.execute("PRAGMA user_version=6")
    db.close()


def test_a_library_of_schema_6_opens_without_its_copies_and_answers_alike(tmp_path: Path) -> None:
    """A library whose rows kept every chunk's terms (and FTS5 beside them) and whose vector file held float32 opens
    as the current layout: the terms column, the full-text index and the float32 file are gone, the vectors are
    the same float16 values, and every search, fused and the store's own BM25, answers exactly as before and as a
    library ingested today does."""
    import shutil

    from chapterverse.store.sqlite import SCHEMA_VERSION

    book = tmp_path / "book.md"
    book.write_text("# One\n\n" + "\n\n".join(_paragraphs(11, 20)) + "\n\n# Two\n\n" +
                    "\n\n".join(_paragraphs(12, 20)), encoding="utf-8")
    library = Library(tmp_path / "today", embedder=HashingEmbedder())
    library.ingest([book])
    queries = ["keeper of the lamp", "storm over the island", "winter cliff signal", "harbour"]
    expected = {q: [(h.chunk.id, h.score, h.rank_score) for h in library.search(q, k=5)] for q in queries}
    vectors = library.store.load_vectors()[2]
    library.close()
    shutil.copytree(tmp_path / "today", tmp_path / "old")
    path = tmp_path / "old" / "library.sqlite3"
    _as_schema_6(path)
    bm25 = "SELECT rowid, -bm25(chunks_fts, 1.0, 0.5) FROM chunks_fts WHERE chunks_fts MATCH ? ORDER BY 2 DESC, 1"
    with sqlite3.connect(path) as db:
        old_bm25 = {t: db.execute(bm25, (f'"{t}"',)).fetchall() for t in ("keeper", "storm", "cliff")}
    assert all(old_bm25.values())

    reopened = Library(tmp_path / "old", embedder=HashingEmbedder())
    assert {q: [(h.chunk.id, h.score, h.rank_score) for h in reopened.search(q, k=5)] for q in queries} == expected
    store = reopened.store
    for term, found in old_bm25.items():
        assert sorted(store.lexical_search([term], k=100), key=lambda h: (-h[1], h[0])) == found
    assert np.array_equal(store.load_vectors()[2], vectors)
    assert [p.name for p in path.parent.glob("library.vectors-*")] == ["library.vectors-2.f16"]
    columns = {r[1] for r in store.db.execute("PRAGMA table_info(chunks)")}
    tables = {r[0] for r in store.db.execute("SELECT name FROM sqlite_schema")}
    assert "terms" not in columns and not any(t.startswith("chunks_fts") for t in tables)
    assert store.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert store.db.execute("SELECT count(*) FROM chunks WHERE own_terms IS NOT NULL").fetchone()[0] == 0
    assert store.integrity_problems() == []
    reopened.close()
