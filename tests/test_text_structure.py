"""Plain-text and Markdown books have the structure their printed books have (issue 29).

Against real texts: small public-domain excerpts committed in tests/data/plaintext (Project Gutenberg's A Christmas
Carol, #46, with its header, licence and "STAVE ONE" headings as the Markdown edition prints them, a transcriber's
note added; Virgil's Eclogues I-III in Latin with bare Roman numerals; Dr Jekyll and Mr Hyde, #43, with the
contents list that comes back as its chapter headings) and the shared books (Divina Commedia, Longfellow's
translation, the Don Quijote chapter folder). The title page, the contents list and the licence are never chunked,
so no search or answer can show them, and every chunk still resolves to exactly its text.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import shared_path
from hashembed import HashingEmbedder

from chapterverse.chunking import chunk_document
from chapterverse import Library, Span
from chapterverse.sources import ParsedDocument, read_source
from chapterverse.sources.book import read_book
from chapterverse.sources.text import decode_text, txt_headings

DATA = Path(__file__).parent / "data" / "plaintext"


def _chunk_texts(document: ParsedDocument) -> list[str]:
    return [document.files[c.file_index].text[c.start:c.end] for c in chunk_document(document)]


def _ingested(tmp_path: Path, path: Path) -> tuple[Library, int]:
    library = Library(tmp_path / "lib", embedder=HashingEmbedder())
    [result] = library.ingest([path])
    return library, result.document.id


def _assert_exact(library: Library, doc_id: int, original: str) -> None:
    """The stored text is the file's, character for character, and every chunk resolves to its own text."""
    [file] = library.store.files(doc_id)
    assert library.store.file(file.id).text == original
    for chunk in library.store.chunks(doc_id=doc_id):
        assert library.resolve(Span(chunk.file_id, chunk.start, chunk.end)).text == chunk.text
        assert original[chunk.start:chunk.end] == chunk.text


def test_gutenberg_header_gives_title_and_author_and_stave_headings_the_toc(tmp_path: Path) -> None:
    path = DATA / "Christmas_Carol.md"
    document = read_source(path)
    assert document.title == "A Christmas Carol" and document.metadata["creator"] == "Charles Dickens"
    text = document.files[0].text
    assert [(e.title, e.level) for e in document.toc] == [
        ("STAVE ONE MARLEY'S GHOST", 0), ("STAVE TWO THE FIRST OF THE THREE SPIRITS", 0),
        ("STAVE THREE THE SECOND OF THE THREE SPIRITS", 0), ("STAVE FOUR THE LAST OF THE SPIRITS", 0),
        ("STAVE FIVE THE END OF IT", 0)]
    assert all(text[e.offset:].startswith("STAVE ") for e in document.toc)
    chunks = _chunk_texts(document)
    assert chunks and any("MARLEY was dead" in chunk for chunk in chunks)
    for chunk in chunks:
        assert "Gutenberg" not in chunk and "Transcriber" not in chunk and "IN PROSE" not in chunk, chunk

    library, doc_id = _ingested(tmp_path, path)
    original, _ = decode_text(path.read_bytes())
    _assert_exact(library, doc_id, original)
    assert library.document(doc_id).title == "A Christmas Carol"
    marley = next(c for c in library.store.chunks(doc_id=doc_id) if "MARLEY was dead" in c.text)
    assert library.resolve(Span(marley.file_id, marley.start, marley.end)).toc_path == ["STAVE ONE MARLEY'S GHOST"]
    hits = library.search("Project Gutenberg License eBook United States", k=5)
    assert hits and all("Gutenberg" not in hit.text for hit in hits)


def test_roman_numerals_alone_are_the_eclogues(tmp_path: Path) -> None:
    path = DATA / "Eclogues_Latin.txt"
    document = read_source(path)
    assert [(e.title, e.level) for e in document.toc] == [
        ("I. MELIBOEUS, TITYRUS", 0), ("II. ALEXIS", 0), ("III. MENALCAS, DAMOETAS, PALAEMON", 0)]
    library, doc_id = _ingested(tmp_path, path)
    _assert_exact(library, doc_id, path.read_text(encoding="utf-8"))
    corydon = next(c for c in library.store.chunks(doc_id=doc_id) if "Formosum pastor Corydon" in c.text)
    assert library.resolve(Span(corydon.file_id, corydon.start, corydon.end)).toc_path == ["II. ALEXIS"]


def test_a_contents_list_that_comes_back_gives_the_chapters_and_is_not_one(tmp_path: Path) -> None:
    path = DATA / "jekyll-contents.txt"
    document = read_source(path)
    assert [e.title for e in document.toc] == [
        "STORY OF THE DOOR", "SEARCH FOR MR. HYDE", "DR. JEKYLL WAS QUITE AT EASE", "THE CAREW MURDER CASE"]
    text = document.files[0].text
    assert text.index("Contents") < text.index(" STORY OF THE DOOR") < document.toc[0].offset
    chunks = _chunk_texts(document)
    assert not any("Contents" in chunk or "Robert Louis Stevenson" in chunk for chunk in chunks)
    assert chunks[0].startswith("STORY OF THE DOOR\n\nMr. Utterson the lawyer")
    library, doc_id = _ingested(tmp_path, path)
    _assert_exact(library, doc_id, path.read_text(encoding="utf-8"))


def test_prose_lines_do_not_become_headings() -> None:
    """A short line of dialogue, a shout in capitals, "I." and "1." opening the items of a list, a sentence that
    begins with "Chapter 5": none is a heading."""
    prose = "He looked at the letter for a long time before he spoke again to the clerk.\n" * 6
    text = "\n\n".join([
        prose, "“Yes.”", prose, "HELP!", prose, "I.", "The first rule is to wait.", "II.",
        "The second rule is to wait longer.", "III.", "The third is to go.", prose,
        "1. Buy the flour.", "2. Mix it with water.", "3. Bake it.", prose,
        "Chapter 5 of the report said nothing of the kind.", prose, "THE END"])
    assert txt_headings(text) == []


def test_a_keyword_heading_with_its_title_in_capitals_needs_no_contents_list() -> None:
    """"Chapter 8 THE MERMAIDS' LAGOON": a keyword, a number and a title in capitals is a heading on its own;
    "Chapter 5 of the report" (lower case after the number) stays prose."""
    prose = "He looked at the letter for a long time before he spoke again to the clerk.\n" * 6
    text = "\n\n".join([
        "Chapter 1 PETER BREAKS THROUGH", prose, "Chapter 2 THE SHADOW", prose,
        "Chapter 5 of the report said nothing of the kind.", prose, "Chapter 3 THE MERMAIDS' LAGOON", prose])
    assert [heading.title for heading in txt_headings(text)] == [
        "Chapter 1 PETER BREAKS THROUGH", "Chapter 2 THE SHADOW", "Chapter 3 THE MERMAIDS' LAGOON"]


def test_a_file_name_s_underscores_are_spaces_in_the_fallback_title(tmp_path: Path) -> None:
    path = tmp_path / "Christmas_Carol_notes.md"
    path.write_text("Notes on the carol, written while reading it aloud.\n", encoding="utf-8")
    assert read_source(path).title == "Christmas Carol notes"


def test_divina_commedia_contents_list_is_not_chunked() -> None:
    document = read_source(shared_path("books", "text", "divina-commedia-it.md"))
    assert document.title == "LA DIVINA COMMEDIA"
    assert [e.title for e in document.toc if e.title.startswith("Canto")][:2] == ["Canto I", "Canto II"]
    assert len([e for e in document.toc if e.title.startswith("Canto")]) == 100
    assert "Contents" not in [e.title for e in document.toc]
    chunks = _chunk_texts(document)
    assert not any("- Canto I." in chunk or "Contents" in chunk for chunk in chunks)
    assert any(chunk.startswith("INFERNO") or "Nel mezzo del cammin" in chunk for chunk in chunks[:2])


@pytest.mark.slow  # a real book ingested
def test_divina_commedia_search_never_shows_a_heading_alone(tmp_path: Path) -> None:
    """A new user's "white whale" (not in the book) got ``INFERNO\n-------`` as a hit: the part's title was a
    chunk of its own. It now opens Canto I's first chunk, which is labelled Canto I as the chunks after it are."""
    path = shared_path("books", "text", "divina-commedia-it.md")
    library, doc_id = _ingested(tmp_path, path)
    for query in ("white whale", "INFERNO", "PARADISO"):
        for hit in library.search(query, k=3):
            worded = [line for line in hit.chunk.text.split("\n") if any(ch.isalnum() for ch in line)]
            assert len(worded) > 2, (query, hit.chunk.text)
    first, second = library.store.chunks(doc_id=doc_id)[:2]
    assert first.text.startswith("INFERNO\n-------") and "Nel mezzo del cammin" in first.text
    assert first.title_path == second.title_path and first.title_path[-1] == "Canto I"
    _assert_exact(library, doc_id, path.read_text(encoding="utf-8"))


def test_longfellow_parts_cantos_and_contents() -> None:
    document = read_source(shared_path("books", "text", "divine-comedy-en-longfellow.txt"))
    assert document.title == "The Divine Comedy"
    assert [e.title for e in document.toc if e.level == 0] == ["INFERNO", "PURGATORIO", "PARADISO"]
    assert len([e for e in document.toc if "Canto" in e.title]) == 100
    chunks = _chunk_texts(document)
    assert not any("The Dark Forest. The Hill of Difficulty" in chunk for chunk in chunks), "a contents line"
    assert any("Midway upon the journey of our life" in chunk for chunk in chunks)


@pytest.mark.slow  # a real book ingested
def test_don_quijote_title_page_and_index_are_never_chunked(tmp_path: Path) -> None:
    """The issue's answer "de Miguel de Cervantes Saavedra (1605 — Primera parte)" came from the title page."""
    folder = shared_path("books", "text", "don-quijote-es")
    book = read_book(folder)
    assert "Índice" not in [e.title for e in book.toc] and "TASA" in [e.title for e in book.toc]
    chunks = _chunk_texts(book)
    assert not any("(1605 — Primera parte)" in chunk or "- Capítulo I - Que trata" in chunk for chunk in chunks)
    assert any("Juan Gallo de Andrada" in chunk for chunk in chunks), "the Tasa after the index is the book"
    library = Library(tmp_path / "lib", embedder=HashingEmbedder())
    [result] = library.ingest([folder], as_books=True)
    hits = library.search("Miguel de Cervantes Saavedra 1605 Primera parte", k=10)
    assert hits and not any("(1605 — Primera parte)" in hit.text for hit in hits)


@pytest.mark.parametrize("name", ["Christmas_Carol.md", "Eclogues_Latin.txt", "jekyll-contents.txt"])
def test_every_toc_entry_lies_in_the_body(name: str) -> None:
    document = read_source(DATA / name)
    lo, hi = document.files[0].body or (0, len(document.files[0].text))
    assert document.toc and all(lo <= e.offset < hi for e in document.toc)


def test_a_contents_section_of_prose_stays_content(tmp_path: Path) -> None:
    """A knowledge-base page whose "Contents" section says what is in the box is no contents list: all of it is
    chunked, and only a list of entries (here "- Shipping", "- Returns") is left out."""
    prose = tmp_path / "faq.md"
    prose.write_text("# Product FAQ\n\n## Contents\n\nThe box holds a charger and a cable.\n\nKeep the receipt.\n\n"
                     "## Shipping\n\nWe ship in two days.\n", encoding="utf-8")
    document = read_source(prose)
    assert document.files[0].body is None and [e.title for e in document.toc] == ["Product FAQ", "Contents", "Shipping"]
    assert any("charger" in chunk for chunk in _chunk_texts(document))
    listed = tmp_path / "faq2.md"
    listed.write_text("# Product FAQ\n\n## Contents\n\n- Shipping\n- Returns\n\n## Shipping\n\nWe ship in two days.\n\n"
                      "## Returns\n\nWithin thirty days.\n", encoding="utf-8")
    document = read_source(listed)
    assert document.title == "Product FAQ" and [e.title for e in document.toc] == ["Shipping", "Returns"]
    assert not any("- Returns" in chunk for chunk in _chunk_texts(document))


def test_a_gutenberg_text_s_production_credits_are_not_chunked(tmp_path: Path) -> None:
    """A short story with no headings opens, after its START line, with the edition's credits ("Produced by ...",
    thanks for the scans): they are not the story's words, so no passage cites them; the story is chunked whole."""
    prose = " ".join(["The lamp on the pier was lit at dusk, as it had been every evening since the war, and the "
                      "fishermen who came in late steered by it past the shoals."] * 30)
    path = tmp_path / "pier-lamp.txt"
    path.write_text("The Project Gutenberg EBook of The Pier Lamp, by A. Writer\n\nTitle: The Pier Lamp\n\n"
                    "*** START OF THIS PROJECT GUTENBERG EBOOK THE PIER LAMP ***\n\n\n\n\n"
                    "Produced by a volunteer of the Distributed Proofreading Team\nfrom scans a library made "
                    "available\n\n\n\n\nTHE PIER LAMP\n\nBy A. Writer\n\n\n" + prose + "\n\n"
                    "*** END OF THIS PROJECT GUTENBERG EBOOK THE PIER LAMP ***\n", encoding="utf-8")
    chunks = _chunk_texts(read_source(path))
    assert chunks and not [chunk for chunk in chunks if "Produced by" in chunk or "scans" in chunk]
    assert "".join(chunks).count("The lamp on the pier was lit at dusk") == 30
