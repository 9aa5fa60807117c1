"""What is not the book is never a search hit, an answer or in a summary: an EPUB's contents pages and a Project
Gutenberg edition's header and licence (issue 27, "books as people bring them").

Both stay in the stored text, so every position is exact and the reader shows them, but they lie outside the
files' bodies and are never chunked. Tested on EPUB, HTML and a folder of chapters built here the way Project
Gutenberg's files are (a START line after the header, an END line before "Section 1. General Terms of Use"), and
on the shared EPUBs, whose contents pages (nav documents in the spine, Moby-Dick's "Brief Contents",
linear-algebra's part pages) were 45 chunks.
"""

from __future__ import annotations

from pathlib import Path

from typing import Any

import pytest
from conftest import shared_path
from fakellm import Reply, fake_llm
from hashembed import HashingEmbedder
from test_sources_hostile import build_epub, xhtml

from chapterverse.chunking import chunk_document
from chapterverse import Library, ProviderConfig, Span
from chapterverse.llm.client import ChatProvider
from chapterverse.llm.summaries import document_summaries, segment_inputs, summarize_document
from chapterverse.sources import ParsedDocument, ParsedFile, TocEntry, read_source
from chapterverse.sources.book import read_book

HEADER = ("<h2>The Project Gutenberg eBook of The Keeper of Skerryvore</h2>"
          "<p>This ebook is for the use of anyone anywhere in the United States and most other parts of the world "
          "at no cost and with almost no restrictions whatsoever. You may copy it, give it away or re-use it under "
          "the terms of the Project Gutenberg License included with this ebook or online at www.gutenberg.org.</p>"
          "<p>Title: The Keeper of Skerryvore</p><p>Author: Anonymous</p>"
          "<div><span>*** START OF THE PROJECT GUTENBERG EBOOK THE KEEPER OF SKERRYVORE ***</span></div>")
LICENCE_TERMS = (
    "By reading or using any part of this Project Gutenberg electronic work, you indicate that you have read, "
    "understand, agree to and accept all the terms of this license and intellectual property agreement.",
    "If you do not agree to abide by all the terms of this agreement, you must cease using and return or destroy "
    "all copies of Project Gutenberg electronic works in your possession.",
    "If you paid a fee for obtaining a copy of or access to a Project Gutenberg electronic work and you do not "
    "agree to be bound by the terms of this agreement, you may obtain a refund from the person or entity to whom "
    "you paid the fee.",
    "There are a lot of things you can do with Project Gutenberg electronic works if you follow the terms of this "
    "agreement and help preserve free future access to Project Gutenberg electronic works.",
    "The Project Gutenberg Literary Archive Foundation owns a compilation copyright in the collection of Project "
    "Gutenberg electronic works.",
    "Nearly all the individual works in the collection are in the public domain in the United States.",
    "If an individual work is unprotected by copyright law in the United States and you are located in the United "
    "States, we do not claim a right to prevent you from copying, distributing, performing, displaying or creating "
    "derivative works based on the work as long as all references to Project Gutenberg are removed.",
    "The copyright laws of the place where you are located also govern what you can do with this work.",
)
LICENCE = ("<div><span>*** END OF THE PROJECT GUTENBERG EBOOK THE KEEPER OF SKERRYVORE ***</span></div>"
           "<p>Updated editions will replace the previous one—the old editions will be renamed.</p>"
           '<h2 id="licence">THE FULL PROJECT GUTENBERG LICENSE</h2>'
           "<p>Section 1. General Terms of Use and Redistributing Project Gutenberg electronic works</p>"
           + "".join(f"<p>1.{n}. {LICENCE_TERMS[n % 8]} {LICENCE_TERMS[(n + 3) % 8]}</p>" for n in range(40)))
"""The END line and the licence after it, 14 k characters: a reading segment of its own, as the real one (18 k)."""
CHAPTERS = {
    "The Lamp Room": "The keeper climbed the hundred steps each evening to trim the great brass lamp. Its wick "
                     "burned whale oil until the supply ship brought paraffin in the autumn.",
    "The Wreck of the Marjorie": "A schooner named Marjorie struck the reef during the equinoctial gale. The "
                                 "keeper rowed out alone and carried four fishermen to the rock before dawn.",
    "The Relief Boat": "The relief boat came on the first calm Tuesday of every month. It carried letters, "
                       "flour, tobacco and a new assistant who had never seen the open sea.",
}
"""Chapter titles, and words found only in each chapter's text."""
CONTENTS_ONLY = "Illustrated Frontispiece Engraving"
"""Words of a contents entry whose page says nothing else (a plate): they are found in the contents alone."""
LICENCE_WORDS = "agree abide terms agreement cease destroy copies possession"


def _chapter(title: str, prose: str, *, footer: str = "") -> str:
    """A chapter of 8 k characters: a book of three is long enough to have several reading segments."""
    sentences = ("The rock lay twelve miles from the mainland.", "Gannets nested on the ledges below the gallery.",
                 "Fog horns sounded through the long winter nights.", "The keeper wrote the weather in his log.")
    paragraphs = "".join(f"<p>{prose} {sentences[n % 4]} It was the {n}th day of his watch.</p>" for n in range(36))
    return xhtml(f"<h1>{title}</h1>{paragraphs}{footer}", title)


def _contents(hrefs: dict[str, str]) -> str:
    """A contents page as many EPUBs have one in the reading order: a heading and a list of links."""
    items = "".join(f'<li><a href="{href}">{title}</a></li>' for title, href in hrefs.items())
    return xhtml(f"<h1>Contents</h1><ul><li><a href='c1.xhtml'>{CONTENTS_ONLY}</a></li>{items}</ul>", "Contents")


def gutenberg_epub(path: Path) -> Path:
    """A Project Gutenberg EPUB: a cover, the header and title page in the first document, a contents page and
    the nav document in the spine, three chapters, the END line and the licence after the last one's text."""
    hrefs = {title: f"c{n}.xhtml" for n, title in enumerate(CHAPTERS, 1)}
    chapters = {"cover.xhtml": xhtml("<p>THE KEEPER OF SKERRYVORE</p>"),
                "title.xhtml": xhtml(f"{HEADER}<h1>THE KEEPER OF SKERRYVORE</h1><p>A Tale of the Lights</p>"),
                "contents.xhtml": _contents(hrefs)}
    last = list(CHAPTERS)[-1]
    for title, href in hrefs.items():
        chapters[href] = _chapter(title, CHAPTERS[title], footer=LICENCE if title == last else "")
    entries = {**hrefs, "THE FULL PROJECT GUTENBERG LICENSE": f"{hrefs[last]}#licence"}
    nav = "<ol>" + "".join(f'<li><a href="{href}">{title}</a></li>' for title, href in entries.items()) + "</ol>"
    spine = ['<itemref idref="c0"/>', '<itemref idref="c1"/>', '<itemref idref="nav"/>', '<itemref idref="c2"/>',
             *(f'<itemref idref="c{n}"/>' for n in range(3, 3 + len(CHAPTERS)))]
    return build_epub(path, chapters, nav=nav, spine=spine)


def _chunk_texts(document: ParsedDocument) -> list[str]:
    return [document.files[c.file_index].text[c.start:c.end] for c in chunk_document(document)]


def _assert_only_the_book(chunks: list[str]) -> None:
    """Every chapter is in the chunks; no chunk holds the header, the licence or a contents list."""
    for title, prose in CHAPTERS.items():
        assert any(title in chunk for chunk in chunks) and any(prose in chunk for chunk in chunks), title
    for chunk in chunks:
        assert "Gutenberg" not in chunk and "agreement" not in chunk and CONTENTS_ONLY not in chunk, chunk
        assert sum(title in chunk for title in CHAPTERS) <= 1, f"a contents list: {chunk}"


def test_epub_contents_pages_and_gutenberg_licence_are_not_chunked(tmp_path: Path) -> None:
    document = read_source(gutenberg_epub(tmp_path / "keeper.epub"))
    labels = [file.label for file in document.files]
    assert labels == ["cover.xhtml", "title.xhtml", "nav.xhtml", "contents.xhtml", "c1.xhtml", "c2.xhtml",
                      "c3.xhtml"]
    _assert_only_the_book(_chunk_texts(document))
    title_page = document.files[1]
    assert title_page.body is not None and title_page.text[title_page.body[0]:].strip().startswith(
        "THE KEEPER OF SKERRYVORE\n\nA Tale of the Lights")
    assert [file.body for file in document.files[2:4]] == [(0, 0), (0, 0)]


def test_search_never_finds_the_contents_or_the_licence_and_positions_stay_exact(tmp_path: Path) -> None:
    """Chapter titles are found in their chapters, not in the contents list; a contents entry with no chapter text
    and the licence's words find nothing of them; the stored text is still every character of each page."""
    path = gutenberg_epub(tmp_path / "keeper.epub")
    library = Library(tmp_path / "lib", embedder=HashingEmbedder())
    [result] = library.ingest([path])
    doc_id = result.document.id
    files = library.store.files(doc_id)
    texts = {f.id: library.store.file(f.id).text for f in files}
    assert [text for text in texts.values()] == [file.text for file in read_source(path).files]
    outside = {f.id for f in files if f.label in ("cover.xhtml", "nav.xhtml", "contents.xhtml")}
    for title, prose in CHAPTERS.items():
        hits = library.search(title, k=5)
        assert hits and prose in hits[0].text and not [hit for hit in hits if hit.chunk.file_id in outside]
    for query in (CONTENTS_ONLY, LICENCE_WORDS, "Project Gutenberg License ebook gutenberg.org"):
        for hit in library.search(query, k=10):
            assert hit.chunk.file_id not in outside and "Gutenberg" not in hit.text, (query, hit.text)
            assert "agreement" not in hit.text and CONTENTS_ONLY not in hit.text, (query, hit.text)
    last = files[-1]
    licence_at = texts[last.id].index("Section 1. General Terms of Use")
    assert library.resolve(Span(last.id, licence_at, licence_at + 9)).text == "Section 1"


def test_extractive_summaries_quote_no_licence_sentence(tmp_path: Path) -> None:
    """The licence is a reading segment of its own (the nav lists it); its summary quotes nothing."""
    library = Library(tmp_path / "lib", embedder=HashingEmbedder())
    [result] = library.ingest([gutenberg_epub(tmp_path / "keeper.epub")])
    summarize_document(library, result.document.id, None)
    summaries = [s.text or "" for s in document_summaries(library, result.document.id, ["extractive"])]
    assert any("keeper" in summary for summary in summaries)
    assert len(summaries) >= 2 and not [s for s in summaries if "agree" in s or "Gutenberg" in s], summaries


def test_a_models_summaries_and_evidence_never_read_the_licence_or_the_contents(tmp_path: Path) -> None:
    """A chat model summarising the book (and the agent's tools, which give chosen segments as evidence) reads
    only what chunks hold: the licence's segment is not sent at all, and no prompt holds a contents list."""
    library = Library(tmp_path / "lib", embedder=HashingEmbedder())
    [result] = library.ingest([gutenberg_epub(tmp_path / "keeper.epub")])
    doc_id = result.document.id
    inputs = segment_inputs(library, doc_id)
    assert [bool(i.tagged_text) for i in inputs] == [True, True, False]
    prompts: list[str] = []

    def summarizer(request: dict[str, Any]) -> Reply:
        prompts.append(request["messages"][-1]["content"])
        return Reply.text("The keeper tends the light.")

    with fake_llm(handler=summarizer) as fake:
        config = ProviderConfig(base_url=fake.base_url, model="fake-model", max_retries=1, retry_base_s=0.01,
                                timeout_s=10)
        counts = summarize_document(library, doc_id, ChatProvider(config))
    assert counts["done"] == 3 and len(prompts) == 2
    assert any(prose in prompt for prompt in prompts for prose in CHAPTERS.values())
    for prompt in prompts:
        assert "General Terms of Use" not in prompt and "agreement" not in prompt and CONTENTS_ONLY not in prompt
        assert "GUTENBERG" not in prompt, "the header's START line, the nav's entry for the licence, its heading"


def test_a_library_rebuilt_summarises_anew_what_is_no_longer_content(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A library ingested before the licence was left out keeps its chunks, and its summaries, until
    ``ingest --force-rebuild``: then the licence's segment, which summaries are keyed by, is summarised anew."""
    import chapterverse.sources.epub as epub

    path = gutenberg_epub(tmp_path / "keeper.epub")
    library = Library(tmp_path / "lib", embedder=HashingEmbedder())
    with monkeypatch.context() as before:
        before.setattr(epub, "gutenberg_spans", lambda texts: None)
        [result] = library.ingest([path])
    summarize_document(library, result.document.id, None)
    assert "agree" in (document_summaries(library, result.document.id, ["extractive"])[-1].text or "")
    [result] = library.ingest([path], force_rebuild=True)
    summarize_document(library, result.document.id, None)
    summaries = document_summaries(library, result.document.id, ["extractive"])
    assert summaries[-1].text == "" and summaries[0].text and "keeper" in summaries[0].text


def test_a_chapter_that_lists_its_sections_keeps_its_text_but_not_the_list(tmp_path: Path) -> None:
    """A chapter's opening page with a paragraph and links to its sections (linear-algebra's chapter pages) is a
    chapter whose list of sections is left out; a chapter with many note references, and requirements that each
    name the section defining them, stay text: only a page or paragraphs that are mostly links are contents."""
    intro = ("We will motivate our study of lighthouses by studying the lamps of the northern coast, their wicks, "
             "their lenses and the keepers who trimmed them through the winter.")
    sections = "".join(f'<p><a href="s{n}.xhtml">Section {n} Gannets of the Bass Rock</a></p>' for n in range(1, 5))
    rules = "".join(f'<p>It must keep the lamp lit as defined in <a href="s{n}.xhtml">Section {n} Gannets of the '
                    'Bass Rock</a>.</p>' for n in range(1, 5))
    notes = " ".join(f'Sentence {n} of the chapter about gannets.<a epub:type="noteref" href="notes.xhtml#n{n}">'
                     f'{n}</a>' for n in range(1, 12))
    chapters = {"intro.xhtml": xhtml(f"<h1>Chapter 1</h1><p>{intro}</p>{sections}"),
                **{f"s{n}.xhtml": xhtml(f"<h1>Section {n}</h1><p>{notes}</p>{rules}") for n in range(1, 5)},
                "notes.xhtml": xhtml("".join(f'<p id="n{n}">Note {n}, a note of the text.</p>' for n in range(1, 12)))}
    document = read_source(build_epub(tmp_path / "book.epub", chapters))
    assert all(file.body is None for file in document.files)
    intro_page = document.files[0]
    [(start, end)] = intro_page.left_out
    assert intro_page.text[start:end].startswith("Section 1 Gannets") and intro_page.text[end:] == ""
    assert [file.left_out for file in document.files[1:]] == [[]] * 5
    chunks = _chunk_texts(document)
    assert any(intro in chunk for chunk in chunks) and any("Sentence 3 of the chapter" in c for c in chunks)
    assert any("It must keep the lamp lit as defined in Section 4" in chunk for chunk in chunks)
    assert not [chunk for chunk in chunks if "Section 1 Gannets of the Bass Rock\n\nSection 2" in chunk]


def test_chunks_keep_out_of_left_out_ranges_and_outside_the_body() -> None:
    """``ParsedFile.content`` is the body less what is left out, and no chunk reaches into what is not content,
    a contents entry starting inside a left-out list included."""
    assert ParsedFile("0123456789", body=(2, 9), left_out=[(0, 3), (5, 6), (8, 10)]).content() == [(3, 5), (6, 8)]
    assert ParsedFile("0123456789", body=(4, 4)).content() == [] and ParsedFile("").content() == []
    paragraphs = [f"Paragraph {n} tells of the keeper and the lamp on the rock." for n in range(12)]
    text = "\n\n".join(paragraphs)
    listed = (text.index("Paragraph 4"), text.index("Paragraph 7") - 2)
    file = ParsedFile(text, body=(text.index("Paragraph 1"), len(text) - 2), left_out=[listed])
    doc = ParsedDocument("t", "epub", [file], toc=[TocEntry("Five", 0, 0, text.index("Paragraph 5"))])
    specs = chunk_document(doc, chunk_size=120, overlap=20)
    assert specs and all(not (s.start < listed[1] and listed[0] < s.end) for s in specs)
    assert all(file.body is not None and file.body[0] <= s.start < s.end <= file.body[1] for s in specs)
    covered = " ".join(text[s.start:s.end] for s in specs)
    assert "Paragraph 3 " in covered and "Paragraph 7 " in covered and "Paragraph 5 " not in covered


def test_a_book_that_is_all_links_is_its_own_content(tmp_path: Path) -> None:
    """A glossary whose every entry links to others reads as contents, page by page; when that is all the book
    has, it is kept, or nothing of it could be found."""
    terms = ("Lamp", "Lens", "Wick", "Gallery", "Reef")
    entries = "".join(f'<p id="{term}"><a href="g.xhtml#{other}">{term}: see {other}</a></p>'
                      for term, other in zip(terms, terms[1:] + terms[:1]))
    document = read_source(build_epub(tmp_path / "glossary.epub", {"g.xhtml": xhtml(entries)}))
    assert document.files[0].body is None and document.files[0].left_out == []
    assert any("Wick: see Gallery" in chunk for chunk in _chunk_texts(document))


def test_html_gutenberg_edition_keeps_only_the_book(tmp_path: Path) -> None:
    body = HEADER + "".join(_chapter(title, prose).split("<body>")[1].split("</body>")[0]
                            for title, prose in CHAPTERS.items()) + LICENCE
    path = tmp_path / "keeper.html"
    path.write_text(f"<html><head><title>The Keeper</title></head><body>{body}</body></html>", encoding="utf-8")
    document = read_source(path)
    _assert_only_the_book(_chunk_texts(document))
    assert "Section 1. General Terms of Use" in document.files[0].text


def test_a_folder_of_gutenberg_chapters_leaves_out_the_licence_after_the_last(tmp_path: Path) -> None:
    """Chapter files of a Gutenberg edition: the START line in the first, the END line and licence in the last."""
    folder = tmp_path / "keeper"
    folder.mkdir()
    header = ("The Project Gutenberg eBook of The Keeper of Skerryvore\n\nTitle: The Keeper of Skerryvore\n\n"
              "*** START OF THE PROJECT GUTENBERG EBOOK THE KEEPER OF SKERRYVORE ***\n\n")
    licence = ("\n\n*** END OF THE PROJECT GUTENBERG EBOOK THE KEEPER OF SKERRYVORE ***\n\n"
               "Section 1. General Terms of Use and Redistributing Project Gutenberg electronic works\n\n"
               "1.A. By reading or using any part of this work, you indicate that you have read, understand, agree "
               "to and accept all the terms of this agreement.\n")
    for n, (title, prose) in enumerate(CHAPTERS.items(), 1):
        text = f"CHAPTER {n}\n\n{title}\n\n{prose}\n\n{prose} The rock lay twelve miles from the mainland.\n"
        (folder / f"{n:02d}.txt").write_text((header if n == 1 else "") + text
                                             + (licence if n == len(CHAPTERS) else ""), encoding="utf-8")
    _assert_only_the_book(_chunk_texts(read_book(folder)))


def test_markers_quoted_without_a_start_line_cut_nothing(tmp_path: Path) -> None:
    """An END line alone may be the book quoting one: nothing is cut without a START line."""
    text = ("<h1>Notes on e-texts</h1><p>Old files ended with a line such as:</p>"
            "<p>*** END OF THE PROJECT GUTENBERG EBOOK MOBY DICK ***</p><p>and then the licence followed it.</p>")
    path = tmp_path / "notes.html"
    path.write_text(f"<html><body>{text}</body></html>", encoding="utf-8")
    document = read_source(path)
    assert document.files[0].body is None
    assert "and then the licence followed it" in " ".join(_chunk_texts(document))


@pytest.mark.parametrize(("book", "contents_pages"), [
    ("moby-dick.epub", {"toc-short.xhtml", "toc.xhtml"}),
    ("accessible_epub_3.epub", {"bk01-toc.xhtml"}),
    ("childrens-literature.epub", {"nav.xhtml"}),
    ("epub30-spec.epub", {"xhtml/epub30-nav.xhtml"}),
    ("linear-algebra.epub", {"xhtml/nav.xhtml", "xhtml/fcla-xml-2.30li14.xhtml", "xhtml/fcla-xml-2.30li63.xhtml",
                             "xhtml/fcla-xml-2.30li98.xhtml", "xhtml/fcla-xml-2.30li110.xhtml"}),
    ("sherlock-holmes.epub", set()),
    ("don-quixote-en.epub", set()),
])
def test_shared_epubs_contents_pages_are_not_chunked(book: str, contents_pages: set[str]) -> None:
    """The nav documents in the spine and the pages that are mostly links into the book, and nothing else: a
    chapter's page listing its sections under a paragraph (linear-algebra) and endnotes (Don Quixote) stay."""
    document = read_source(shared_path("books", "epub", book))
    specs = chunk_document(document)
    chunked = {document.files[spec.file_index].label for spec in specs}
    empty = {file.label for file in document.files if file.body == (0, 0)}
    assert empty == contents_pages and not chunked & contents_pages


def test_contents_lists_inside_shared_pages_are_left_out_and_their_text_stays() -> None:
    """The EPUB specification's documents open with their title, editors and a table of contents; linear-algebra's
    chapters with a paragraph and their sections. The lists are not chunked, what is around them is."""
    spec = read_source(shared_path("books", "epub", "epub30-spec.epub"))
    chunks = _chunk_texts(spec)
    assert not [chunk for chunk in chunks if "1.1. Overview\n\n1.2. Roadmap" in chunk]
    assert any("Markus Gylling, DAISY Consortium" in chunk for chunk in chunks)
    assert any("› 1.1 Overview\n\nThe EPUB® specification is a distribution" in chunk for chunk in chunks)
    algebra = read_source(shared_path("books", "epub", "linear-algebra.epub"))
    chunks = _chunk_texts(algebra)
    assert any("We will motivate our study of linear algebra" in chunk for chunk in chunks)
    assert not [chunk for chunk in chunks if "Section WILA What is Linear Algebra?\n\nSection SSLE" in chunk]


def test_moby_dick_chapter_titles_find_their_chapters_not_the_contents() -> None:
    path = shared_path("books", "epub", "moby-dick.epub")
    document = read_source(path)
    chunks = _chunk_texts(document)
    assert any(chunk.startswith("Chapter 1. Loomings.\n\nCall me Ishmael.") for chunk in chunks)
    assert not [chunk for chunk in chunks if "Chapter 2. The Carpet-Bag." in chunk and "Loomings" in chunk]
    assert not [chunk for chunk in chunks if "Begin Reading Moby-Dick" in chunk or "Show detailed contents" in chunk]
