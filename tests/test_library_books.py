"""Every real book ingests into one library with exact positions; re-ingest is a no-op.

Embedding is not what these tests are about (retrieval tests use the real embedder), so they use a
deterministic hashing embedder to keep the whole shelf under a minute.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import shared_path
from hashembed import HashingEmbedder

from chapterverse import Library, Span

pytestmark = pytest.mark.slow  # every shared book ingested: half a minute and more


@pytest.fixture(scope="module")
def shelf(tmp_path_factory: pytest.TempPathFactory) -> tuple[Library, dict[str, int]]:
    books = shared_path("books")
    library = Library(tmp_path_factory.mktemp("shelf"), embedder=HashingEmbedder())
    paths = sorted(books.glob("epub/*.epub")) + sorted(books.glob("pdf/*.pdf")) + sorted(books.glob("text/*"))
    ids: dict[str, int] = {}
    for path in paths:
        for result in library.ingest([path]):
            ids[result.document.source] = result.document.id
    return library, ids


def test_every_book_ingests_with_exact_chunk_positions(shelf: tuple[Library, dict[str, int]]) -> None:
    library, ids = shelf
    assert {"moby-dick.epub", "freeculture.pdf", "divina-commedia-it.md", "mahabharata.epub"} <= set(ids)
    assert library.store.integrity_problems() == []
    for doc in library.documents():
        assert doc.chunks > 0 or doc.source == "sous-le-vent.epub", doc.source
        for chunk in library.store.chunks(doc_id=doc.id, limit=25):
            assert library.resolve(Span(chunk.file_id, chunk.start, chunk.end)).text == chunk.text


def test_reingest_is_a_no_op(shelf: tuple[Library, dict[str, int]]) -> None:
    library, _ = shelf
    generation = library.store.generation()
    results = library.ingest([shared_path("books", "epub", "moby-dick.epub"), shared_path("books", "pdf")])
    assert [r.changed for r in results] == [False, False, False]
    assert library.store.generation() == generation


def _toc_hits(library: Library, doc_id: int) -> tuple[int, int]:
    toc = library.store.toc(doc_id)
    hits = 0
    for entry in toc:
        text = library.store.file(entry.file_id).text[entry.offset:entry.offset + len(entry.title) + 40]
        if re.sub(r"\W+", "", entry.title.lower())[:20] in re.sub(r"\W+", "", text.lower()):
            hits += 1
    return hits, len(toc)


def test_toc_entries_resolve_to_their_headings(shelf: tuple[Library, dict[str, int]]) -> None:
    library, ids = shelf
    hits, total = _toc_hits(library, ids["moby-dick.epub"])
    assert total >= 140 and hits >= 139
    toc = library.store.toc(ids["don-quixote-en.epub"])
    assert max(t.level for t in toc) >= 1, "nested parts"
    children = ids["childrens-literature.epub"]
    toc = library.store.toc(children)
    assert library.document(children).files == 3 and len(toc) >= 30
    deep = [t for t in toc if t.offset > 0]
    assert len({t.offset for t in deep}) >= 20, "anchors inside files resolve to distinct offsets"
    for entry in deep:
        assert library.store.file(entry.file_id).text[entry.offset - 2:entry.offset] == "\n\n", entry.title


def test_pdf_pages_are_files_with_outline(shelf: tuple[Library, dict[str, int]]) -> None:
    library, ids = shelf
    doc = library.document(ids["freeculture.pdf"])
    assert doc.files == 352
    assert len(library.store.toc(doc.id)) >= 53
    first_page = library.store.files(doc.id)[0]
    assert first_page.ordinal == 0 and first_page.label


def test_search_and_resolve_on_a_real_book(shelf: tuple[Library, dict[str, int]]) -> None:
    library, ids = shelf
    hits = library.search("Call me Ishmael", k=3, doc_ids=[ids["moby-dick.epub"]])
    assert any("Ishmael" in h.text for h in hits)
    resolved = library.resolve(hits[0].tag)
    assert resolved.text == hits[0].text and resolved.doc_title


def test_changing_the_embedding_model_reembeds_everything(tmp_path: Path) -> None:
    demo = Path(__file__).resolve().parents[1] / "src" / "chapterverse" / "demo"
    first = Library(tmp_path, embedder=HashingEmbedder())
    first.ingest([demo])

    class Other(HashingEmbedder):
        name = "test-hashing-other"

    second = Library(tmp_path, embedder=Other())
    assert second.writer.reembed_if_model_changed() == second.documents()[0].chunks
    assert second.store.get_meta("embedding_model") == "test-hashing-other"
    assert second.ingest([demo])[0].changed is False
    assert second.search("cat called Admiral", k=1)[0].text
