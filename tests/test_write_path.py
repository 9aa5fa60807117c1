"""What the write path keeps: a changed document embeds only its new text and a long embedding that is interrupted
resumes where it stopped (the library keeps each batch as it comes, a small write none), on both stores; SQLite's
full-text index, brought up to date when it is read, answers as one built from the chunks."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from hashembed import HashingEmbedder
from pgfixture import location, pg_schema_url, pg_url  # noqa: F401  (fixtures)

from chapterverse import Library
from chapterverse.sources import ParsedDocument, ParsedFile
from chapterverse.sources.base import TocEntry
from chapterverse.store import SQLiteStore, open_store
from chapterverse.store.records import kept_vector

WORDS = "keeper lamp storm gull tide rope harbour island signal winter cliff wave".split()


class CountingEmbedder(HashingEmbedder):
    """Counts the texts it is asked to embed; fails once its count would pass ``fail_after``."""

    def __init__(self, fail_after: int | None = None) -> None:
        self.embedded: list[str] = []
        self.calls = 0
        self.fail_after = fail_after

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        if self.fail_after is not None and len(self.embedded) + len(texts) > self.fail_after:
            raise KeyboardInterrupt  # what an interrupted ingest sees
        self.embedded.extend(texts)
        self.calls += 1
        return super()._embed_batch(texts)


def _paragraphs(seed: int, count: int) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, 90)).capitalize() + "." for _ in range(count)]


@pytest.fixture
def opened(location: str, tmp_path: Path) -> Iterator[tuple[Library, CountingEmbedder]]:
    embedder = CountingEmbedder()
    library = Library(tmp_path / "home", embedder=embedder, store=open_store(location))
    yield library, embedder
    library.close()


def test_a_changed_document_embeds_only_its_new_text(opened: tuple[Library, CountingEmbedder],
                                                     tmp_path: Path) -> None:
    library, embedder = opened
    book = tmp_path / "book.md"
    first = _paragraphs(1, 12)
    book.write_text("\n\n".join(first), encoding="utf-8")
    library.ingest([book])
    chunks = library.store.count_chunks()
    assert len(embedder.embedded) == chunks > 5

    book.write_text("\n\n".join(first + _paragraphs(2, 1)), encoding="utf-8")  # one paragraph appended
    embedder.embedded.clear()
    library.ingest([book])
    assert 0 < len(embedder.embedded) < 4  # the chunks that changed, not the book again
    assert library.store.integrity_problems() == []
    ids, _, matrix = library.store.vectors_since(0)
    expected = HashingEmbedder().embed([c.text for c in library.store.chunks()])
    assert ids.tolist() == [c.id for c in library.store.chunks()] and np.array_equal(matrix, kept_vector(expected))


def _parsed(seed: int, files: int) -> ParsedDocument:
    texts = ["\n\n".join(_paragraphs(seed * 10 + n, 1 + n)) for n in range(files)]
    return ParsedDocument(title=f"Document {seed}", format="text",
                          files=[ParsedFile(t, title=f"part {n}", label=str(n)) for n, t in enumerate(texts)],
                          toc=[TocEntry(f"Part {n}", 1, n, 0) for n in range(files)], metadata={"seed": seed})


def test_documents_prepared_together_are_those_prepared_one_by_one_embedded_in_one_call(
        opened: tuple[Library, CountingEmbedder]) -> None:
    library, embedder = opened
    parsed = [_parsed(seed, files) for seed, files in ((1, 1), (2, 3), (3, 2))]
    options = [{"source": f"doc{n}.txt", "content_hash": f"hash{n}", "size_bytes": 10 * n, "dynamic": n == 1,
                "ephemeral": n == 2, "metadata": {"n": n}} for n in range(len(parsed))]
    one_by_one = [library.writer.prepare(p, **o) for p, o in zip(parsed, options)]
    embedder.embedded.clear()
    calls = embedder.calls
    together = library.writer.embed_prepared([library.writer.prepare_unembedded(p, **o)
                                       for p, o in zip(parsed, options)])
    assert embedder.calls == calls + 1
    assert len(embedder.embedded) == sum(len(d.chunks) for d in one_by_one) > len(parsed)
    for alone, batched in zip(one_by_one, together):
        assert dataclasses.replace(batched, vectors=None) == dataclasses.replace(alone, vectors=None)
        assert np.array_equal(batched.vectors, alone.vectors) and len(alone.vectors) == len(alone.chunks)


def test_many_small_documents_prepared_together_cache_nothing_until_written(
        opened: tuple[Library, CountingEmbedder]) -> None:
    """Over one embedder batch in all, but each document small: like each alone, no cache write before the store's."""
    library, embedder = opened
    paragraphs = _paragraphs(7, 300)
    docs = library.writer.embed_prepared([
        library.writer.prepare_unembedded(ParsedDocument(title=f"note {n}", format="kb", files=[ParsedFile(text)]),
                                   source=f"note{n}", content_hash=f"h{n}", size_bytes=len(text))
        for n, text in enumerate(paragraphs)])
    texts = [d.files[c.file_ordinal].text[c.start:c.end] for d in docs for c in d.chunks]
    assert sorted(embedder.embedded) == sorted(texts) and len(texts) > 256 and embedder.calls >= 2
    hashes = [hashlib.sha256(text.encode()).hexdigest() for text in texts]
    assert library.store.cached_vectors(embedder.name, hashes) == {}


def test_an_interrupted_long_embedding_resumes_where_it_stopped(location: str, tmp_path: Path) -> None:
    """More than one batch to embed: the batches done before the interruption are not embedded again."""
    book = tmp_path / "long.md"
    book.write_text("\n\n".join(f"Passage {i}. " + p for i, p in enumerate(_paragraphs(3, 700))), encoding="utf-8")
    failing = CountingEmbedder(fail_after=600)
    library = Library(tmp_path / "home", embedder=failing, store=open_store(location))
    with pytest.raises(KeyboardInterrupt):
        library.ingest([book])
    assert library.documents() == []  # nothing half-written
    library.close()
    assert len(failing.embedded) >= 512  # the library embeds in batches of 256: two were done before it stopped

    resumed = CountingEmbedder()
    library = Library(tmp_path / "home", embedder=resumed, store=open_store(location))
    stored = library.ingest([book])[0].document
    assert stored.chunks > 600 and 0 < len(resumed.embedded) <= stored.chunks - 512
    assert library.store.integrity_problems() == []
    library.close()


def test_the_full_text_index_takes_what_was_written_since_it_was_read(tmp_path: Path) -> None:
    """The store's own BM25 (an FTS5 index derived from the chunks when it is read, never kept in the library file)
    answers for what was written since it was last read; removed chunks leave it; what it answers equals an index
    rebuilt from the chunks, on this connection and on the next."""
    store = SQLiteStore(tmp_path / "library.sqlite3")
    library = Library(tmp_path, embedder=HashingEmbedder(), store=store)
    texts = {name: "\n\n".join(_paragraphs(seed, 3)) + f" {name}marker" for seed, name in enumerate("abcde")}
    for name, text in texts.items():
        (tmp_path / f"{name}.md").write_text(text, encoding="utf-8")

    def ingest(name: str) -> int:
        return library.ingest([tmp_path / f"{name}.md"])[0].document.id

    def holding(term: str) -> list[int]:
        return sorted(cid for cid, _, _, terms, _ in store.lexical_rows() if term in terms.split())

    a, b = ingest("a"), ingest("b")
    assert sorted(cid for cid, _ in store.lexical_search(["amark"], k=50)) == holding("amark") != []
    library.remove(a)  # it was in the index: it leaves it
    c = ingest("c")
    library.remove(c)  # never read: it never reaches the index
    ingest("d")
    assert store.lexical_search(["amark"], k=50) == [] and store.lexical_search(["cmark"], k=50) == []
    found = store.lexical_search(["keeper", "dmark", "bmark"], k=50)
    assert sorted(cid for cid, _ in found) == sorted(set(holding("keeper") + holding("dmark") + holding("bmark")))
    assert store.document_frequencies(["dmark", "amark"]) == {"dmark": len(holding("dmark")), "amark": 0}
    assert store.integrity_problems() == []
    ingest("e")  # written after the last read: the rebuild below must answer as the follow-up does
    following = store.lexical_search(["keeper", "emark", "bmark"], k=50)
    store.rebuild_lexical_index()
    assert store.lexical_search(["keeper", "emark", "bmark"], k=50) == following and b in store.document_ids()
    store.close()  # the index is derived per connection: the next one derives it again
    assert store.lexical_search(["keeper", "emark", "bmark"], k=50) == following
    library.close()
