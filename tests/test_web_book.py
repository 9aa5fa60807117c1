"""A book is a book (issue 15), in a real Chromium against a real server: an EPUB opens at its first page with
text and says what a picture page is; citations of one chapter are told apart by a snippet; segment summaries
sit in the contents panel with tags that open their passage; Markdown underlines are not shown raw; a PDF
without labels shows its printed page numbers. Screenshots go to ``artifacts/screenshots/``."""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import shared_path
from serverutil import Server, running_server, settings_for
from textpdf import text_pdf
from test_web_reader import (  # noqa: F401  (fixtures used by name)
    BrowserPage,
    _chromium,
    api_json,
    assert_highlight,
    browser,
    browser_page,
    expect,
    marks_text,
    open_reader,
    tag_for,
)

from chapterverse.llm.summaries import summarize_document

COVER_XHTML = """<?xml version="1.0" encoding="utf-8"?>
<!DOCTYPE html>
<html xmlns="http://www.w3.org/1999/xhtml"><head><title>Cover</title></head>
<body><div><img src="cover.png" alt=""/></div></body></html>"""
CHAPTER_SENTENCE = "The harbour master kept the logbook in a glass case by the door."
CHAPTER_XHTML = f"""<?xml version="1.0" encoding="utf-8"?>
<!DOCTYPE html>
<html xmlns="http://www.w3.org/1999/xhtml"><head><title>Chapter 1</title></head>
<body><h1>Chapter 1. The Case</h1><p>{CHAPTER_SENTENCE}</p><p>Visitors read it on Sundays.</p></body></html>"""

SETEXT_MD = """The Keeper's Almanac
====================

Tides
-----

The spring tide came at dawn and covered the lower steps.

***

The neap tide left the reef dry until noon.
"""


def write_epub_with_cover(path: Path) -> Path:
    """An EPUB whose first spine item is a cover: an image and no text."""
    opf = """<?xml version="1.0" encoding="utf-8"?>
<package xmlns="http://www.idpf.org/2007/opf" version="3.0" unique-identifier="uid">
  <metadata xmlns:dc="http://purl.org/dc/elements/1.1/">
    <dc:identifier id="uid">urn:uuid:3f1e0c2a-8a4e-4c3e-9a55-2f1f4ad1c015</dc:identifier>
    <dc:title>The Harbour Logbook</dc:title><dc:language>en</dc:language>
    <meta property="dcterms:modified">2025-01-01T00:00:00Z</meta>
  </metadata>
  <manifest>
    <item id="nav" href="nav.xhtml" media-type="application/xhtml+xml" properties="nav"/>
    <item id="cover" href="cover.xhtml" media-type="application/xhtml+xml"/>
    <item id="img" href="cover.png" media-type="image/png" properties="cover-image"/>
    <item id="ch1" href="ch1.xhtml" media-type="application/xhtml+xml"/>
  </manifest>
  <spine><itemref idref="cover"/><itemref idref="ch1"/></spine>
</package>"""
    nav = """<?xml version="1.0" encoding="utf-8"?>
<!DOCTYPE html>
<html xmlns="http://www.w3.org/1999/xhtml" xmlns:epub="http://www.idpf.org/2007/ops"><head><title>Contents</title>
</head><body><nav epub:type="toc"><ol><li><a href="ch1.xhtml">Chapter 1. The Case</a></li></ol></nav></body></html>"""
    container = """<?xml version="1.0"?>
<container version="1.0" xmlns="urn:oasis:names:tc:opendocument:xmlns:container">
  <rootfiles><rootfile full-path="OEBPS/content.opf" media-type="application/oebps-package+xml"/></rootfiles>
</container>"""
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(zipfile.ZipInfo("mimetype"), "application/epub+zip", compress_type=zipfile.ZIP_STORED)
        for name, text in (("META-INF/container.xml", container), ("OEBPS/content.opf", opf),
                           ("OEBPS/nav.xhtml", nav), ("OEBPS/cover.xhtml", COVER_XHTML),
                           ("OEBPS/ch1.xhtml", CHAPTER_XHTML)):
            z.writestr(name, text, compress_type=zipfile.ZIP_DEFLATED)
        z.writestr("OEBPS/cover.png", b"\x89PNG\r\n\x1a\n", compress_type=zipfile.ZIP_STORED)
    return path


@browser
def test_an_epub_opens_at_its_first_page_with_text(reader_server: Any, browser_page: BrowserPage,
                                                    tmp_path: Path) -> None:
    doc_id = reader_server.ingest(write_epub_with_cover(tmp_path / "logbook.epub"))
    files = api_json(reader_server, f"/api/documents/{doc_id}")["files"]
    assert [f["has_text"] for f in files] == [False, True], "the test needs a cover without text first"
    page = browser_page.page
    open_reader(page, reader_server, doc_id)
    text = page.locator("[data-cv-text]")
    expect(text).to_contain_text(CHAPTER_SENTENCE)
    assert text.get_attribute("data-file") == str(files[1]["id"])
    browser_page.shot(page, "book-epub-opens-at-text")

    page.locator("[data-cv-prev]").click()  # back to the cover: a picture, not a scanned page
    expect(text).to_contain_text("This part is a picture (a cover or an illustration)")
    expect(text).not_to_contain_text("scanned image")
    browser_page.shot(page, "book-epub-cover")
    browser_page.assert_clean()


@pytest.fixture
def keeper(reader_server: Any, tmp_path: Path) -> int:
    path = tmp_path / "almanac.md"
    path.write_text(SETEXT_MD, encoding="utf-8")
    return int(reader_server.ingest(path))


@browser
def test_markdown_underlines_are_not_shown_raw(reader_server: Any, browser_page: BrowserPage, keeper: int) -> None:
    page = browser_page.page
    open_reader(page, reader_server, keeper)
    shown = page.locator("[data-cv-text]").inner_text()
    assert "Tides" in shown and "---" not in shown and "===" not in shown and "***" not in shown
    rule = page.locator("[data-cv-text] .cv-md-rule")  # the thematic break, drawn as a line, its *** unseen
    assert rule.evaluate("el => getComputedStyle(el, '::before').borderTopWidth") == "1px"
    assert rule.text_content() == "***"
    tag = tag_for(reader_server, keeper, "Tides", "lower steps.")  # across the underline: still exact
    open_reader(page, reader_server, keeper, f"#{tag}")
    assert_highlight(page, reader_server, tag)
    assert marks_text(page) == reader_server.resolve(tag)["text"]
    browser_page.shot(page, "book-markdown-setext")
    browser_page.assert_clean()


@browser
def render_answer(page: Any, result: dict[str, Any]) -> Any:
    """Render an answer the way the reader's answer panel does, above the open book, and return the locator of
    its footnotes' snippets."""
    page.evaluate("""async (result) => {
        const { renderResult } = await import('/static/answer.js');
        const box = document.createElement('div');
        box.dataset.cvTestAnswer = '';
        document.querySelector('[data-cv-text]').prepend(box);
        renderResult(box, result, { docId: 0 });
    }""", result)
    return page.locator("[data-cv-test-answer] [data-cv-source-snippet]")


def test_citations_of_one_chapter_show_which_passage(reader_server: Any, browser_page: BrowserPage,
                                                      keeper: int) -> None:
    first = reader_server.resolve(tag_for(reader_server, keeper, "The spring tide"))
    second = reader_server.resolve(tag_for(reader_server, keeper, "The neap tide"))
    assert first["toc_path"] == second["toc_path"], "the test needs two passages of one chapter"
    result = {"answer": f"At dawn [{first['tag']}] and at noon [{second['tag']}].", "mode": "extractive",
              "found": True, "citations": [{**c, "tag": c["tag"], "n": n} for n, c in enumerate((first, second), 1)]}
    page = browser_page.page
    open_reader(page, reader_server, keeper)
    snippets = render_answer(page, result)
    expect(snippets).to_have_count(2)
    assert snippets.all_text_contents() == [f"“{first['text']}”", f"“{second['text']}”"]
    titles = page.locator("[data-cv-test-answer] .cv-source-title").all_text_contents()
    assert titles[0] == titles[1], "same chapter, same title: the snippet is what tells them apart"
    labels = [page.locator("[data-cv-test-answer] a.cv-footnote").nth(i).get_attribute("aria-label") for i in (0, 1)]
    assert labels[0] != labels[1] and "The spring tide" in (labels[0] or "")
    browser_page.shot(page, "book-footnote-snippets")
    browser_page.assert_clean()


@browser
def test_summaries_in_the_contents_panel_open_their_passages(reader_server: Any, browser_page: BrowserPage,
                                                             keeper: int) -> None:
    page = browser_page.page
    open_reader(page, reader_server, keeper)
    expect(page.locator("[data-cv-summaries]")).to_contain_text(f"chapterverse summarize --doc {keeper}")

    summarize_document(reader_server.server.state.reader, keeper, None)
    open_reader(page, reader_server, keeper)
    summaries = page.locator("[data-cv-summary]")
    expect(summaries.first).to_be_attached()
    segments = api_json(reader_server, f"/api/documents/{keeper}/summaries")["segments"]
    assert summaries.count() == len([s for s in segments if s["summary"]]) > 0
    summaries.first.locator("summary").click()
    link = summaries.first.locator("a.cv-summary-tag").first
    tag = link.get_attribute("data-tag")
    assert tag and f"[{tag}]" in segments[0]["summary"]
    link.click()
    assert_highlight(page, reader_server, tag)
    assert page.url.endswith(f"#{tag}")
    browser_page.shot(page, "book-summaries")
    browser_page.assert_clean()


@browser
@pytest.mark.slow
def test_a_pdf_without_labels_shows_its_printed_page_numbers(reader_server: Any, browser_page: BrowserPage) -> None:
    doc_id = reader_server.ingest(shared_path("books", "pdf", "freeculture.pdf"))
    files = api_json(reader_server, f"/api/documents/{doc_id}")["files"]
    page_146 = next(f for f in files if f["ordinal"] == 145)
    assert page_146["label"] == "134"
    page = browser_page.page
    open_reader(page, reader_server, doc_id, f"#f{page_146['id']}")
    expect(page.locator("[data-cv-page-label]")).to_have_text(f"p. 134 · 146 of {len(files)}")
    assert page.locator("[data-cv-file-select] option:checked").text_content() == "Page 134"
    browser_page.shot(page, "book-pdf-page-label")
    browser_page.assert_clean()


@browser
def test_library_search_opens_a_passage_highlighted(reader_server: Any, browser_page: BrowserPage,
                                                     keeper: int) -> None:
    page = browser_page.page
    page.goto(f"{reader_server.base_url}/")
    page.fill("[data-cv-search-input]", "neap tide reef dry until noon")
    page.press("[data-cv-search-input]", "Enter")
    expect(page.locator("[data-cv-search-results] a.cv-search-link").first).to_be_visible()
    hit = page.locator(f"[data-cv-search-results] a[href^='/read/{keeper}#']").first  # other tests' books too
    tag = hit.get_attribute("data-tag")
    assert tag and "neap tide" in reader_server.resolve(tag)["text"]
    expect(hit.locator("code")).to_have_text(f"[{tag}]")
    expect(hit).to_contain_text("The Keeper's Almanac")
    browser_page.shot(page, "library-search")
    hit.click()
    expect(page).to_have_url(f"{reader_server.base_url}/read/{keeper}#{tag}")
    assert_highlight(page, reader_server, tag)
    browser_page.assert_clean()


@browser
def test_library_filters_and_groups_by_folder(reader_server: Any, browser_page: BrowserPage,
                                              tmp_path: Path) -> None:
    folder = tmp_path / "sea-stories"
    folder.mkdir()
    (folder / "gull.md").write_text("# The Gull\n\nA gull sat on the lamp room rail.\n", encoding="utf-8")
    (folder / "tide.md").write_text("# The Tide\n\nThe tide turned at four.\n", encoding="utf-8")
    reader_server.ingest(folder)
    page = browser_page.page
    page.goto(f"{reader_server.base_url}/")
    group = page.locator(f"[data-cv-doc-group='{folder.as_posix()}']")
    expect(group.locator(".cv-doc-title")).to_have_text(["The Gull", "The Tide"])
    expect(group.locator(".cv-doc-group-title")).to_have_text(f"{folder.as_posix()}/ (2 documents)")
    page.fill("[data-cv-doc-filter]", "gull sea-stories")
    expect(page.locator(".cv-doc-title")).to_have_text(["The Gull"])
    browser_page.shot(page, "library-filter")
    page.fill("[data-cv-doc-filter]", "no such book anywhere")
    expect(page.locator("[data-cv-no-match]")).to_be_visible()
    browser_page.assert_clean()


@browser
def test_searching_inside_a_book_opens_the_passage(reader_server: Any, browser_page: BrowserPage, keeper: int) -> None:
    page = browser_page.page
    open_reader(page, reader_server, keeper)
    page.fill("[data-cv-book-search]", "neap tide reef")
    page.press("[data-cv-book-search]", "Enter")
    hits = page.locator("[data-cv-book-results] a.cv-search-link")
    expect(hits.first).to_be_visible()
    tags = [hits.nth(i).get_attribute("data-tag") for i in range(hits.count())]
    assert all(reader_server.resolve(t)["doc_id"] == keeper for t in tags if t), "only this book's passages"
    tag = tags[0]
    assert tag and "neap tide" in reader_server.resolve(tag)["text"]
    marked = hits.first.locator("mark.cv-search-term").all_inner_texts()  # the query's words stand out
    assert {m.lower() for m in marked} >= {"neap", "tide"}, marked
    hits.first.click()
    expect(page).to_have_url(f"{reader_server.base_url}/read/{keeper}#{tag}")
    assert_highlight(page, reader_server, tag)
    browser_page.shot(page, "book-search")
    browser_page.assert_clean()


@pytest.fixture
def labelled_pdf(reader_server: Any, tmp_path: Path) -> int:
    return int(reader_server.ingest(text_pdf(tmp_path / "lamp-keeper.pdf")))


@browser
def test_search_hits_in_a_pdf_name_the_printed_page(reader_server: Any, browser_page: BrowserPage,
                                                      labelled_pdf: int) -> None:
    """The library's search and the book's own both say where a PDF hit is: its chapter and the page number
    the book prints there (label "1" on the PDF's second page)."""
    page = browser_page.page
    page.goto(f"{reader_server.base_url}/")
    page.fill("[data-cv-search-input]", "paraffin lamp dusk lens")
    page.press("[data-cv-search-input]", "Enter")
    hit = page.locator(f"[data-cv-search-results] a[href^='/read/{labelled_pdf}#']").first
    expect(hit.locator(".cv-search-where")).to_have_text("lamp-keeper › Chapter One: The Lamp, p. 1")
    browser_page.shot(page, "library-search-pdf-page")
    open_reader(page, reader_server, labelled_pdf)
    page.fill("[data-cv-book-search]", "paraffin lamp dusk lens")
    page.press("[data-cv-book-search]", "Enter")
    where = page.locator("[data-cv-book-results] a.cv-search-link .cv-search-where").first
    expect(where).to_have_text("Chapter One: The Lamp, p. 1")
    browser_page.assert_clean()


@browser
def test_footnote_quotes_do_not_double_the_books_own(reader_server: Any, browser_page: BrowserPage,
                                                     tmp_path: Path) -> None:
    """Dialogue is cited with its own quotation marks, a sentence that ends one keeps its single closing mark,
    and plain narration gets the marks that say it is a quotation."""
    path = tmp_path / "dialogue.md"
    path.write_text("# At the Rock\n\n“Have you seen the light?” asked the pilot.\n\n"
                    "She said it was “the brightest on the coast.”\n\nThe fog lifted at noon.\n", encoding="utf-8")
    doc = int(reader_server.ingest(path))
    tags = [tag_for(reader_server, doc, "“Have you seen the light?”"), tag_for(reader_server, doc, "the brightest", "coast.”"),
            tag_for(reader_server, doc, "The fog lifted at noon.")]
    cited = [reader_server.resolve(tag) for tag in tags]
    result = {"answer": " ".join(f"Said [{c['tag']}]." for c in cited), "mode": "extractive", "found": True,
              "citations": [{**c, "n": n} for n, c in enumerate(cited, 1)]}
    page = browser_page.page
    open_reader(page, reader_server, doc)
    snippets = render_answer(page, result)
    assert snippets.all_text_contents() == ["“Have you seen the light?”", "“the brightest on the coast.”",
                                            "“The fog lifted at noon.”"]
    browser_page.shot(page, "book-footnote-quotes")
    browser_page.assert_clean()


def test_a_folder_ingested_by_name_groups_by_that_name(reader_server: Any, tmp_path: Path) -> None:
    """``chapterverse ingest DIR`` stores sources relative to DIR ("01.md"): the folder is kept beside them."""
    folder = tmp_path / "don-quijote-es"
    (folder / "notas").mkdir(parents=True)
    (folder / "01.md").write_text("# Capítulo I\n\nEn un lugar de la Mancha.\n", encoding="utf-8")
    (folder / "notas" / "n1.md").write_text("# Nota\n\nUna nota.\n", encoding="utf-8")
    results = reader_server.server.state.reader.ingest([folder])
    assert [r.document.source for r in results] == ["01.md", "notas/n1.md"]
    listed = {d["id"]: d for d in api_json(reader_server, "/api/documents")["documents"]}
    assert [listed[r.document.id]["folder"] for r in results] == ["don-quijote-es", "don-quijote-es/notas"]


@browser
@pytest.mark.slow
def test_an_epubs_own_contents_page_links_to_its_parts(reader_server: Any, browser_page: BrowserPage) -> None:
    """Moby-Dick's "Brief Contents" and "Contents" pages were plain text (the trial on a fresh clone): their
    lines now open the part they name, a highlight inside a contents page stays exact, and a chapter's own
    text gets no links."""
    doc_id = reader_server.ingest(shared_path("books", "epub", "moby-dick.epub"))
    files = {f["title"]: f["id"] for f in api_json(reader_server, f"/api/documents/{doc_id}")["files"]}
    page = browser_page.page
    open_reader(page, reader_server, doc_id, f"#f{files['Brief Contents']}")
    links = page.locator("[data-cv-text] a.cv-contents-link")
    expect(links).to_have_count(4)
    assert links.all_text_contents() == ["Original Transcriber’s Notes", "Etymology",
                                         "Extracts (Supplied by a Sub-Sub-Librarian)", "Copyright Page"]
    browser_page.shot(page, "book-epub-brief-contents")
    links.filter(has_text="Etymology").click()
    text = page.locator("[data-cv-text]")
    expect(text).to_have_attribute("data-file", str(files["ETYMOLOGY."]))
    expect(text).to_contain_text("Supplied by a Late Consumptive Usher to a Grammar School")
    assert page.url.endswith(f"/read/{doc_id}#f{files['ETYMOLOGY.']}-0")

    open_reader(page, reader_server, doc_id, f"#f{files['Contents']}")
    expect(links).to_have_count(142)
    chapter = links.filter(has_text="Chapter 12. Biographical.")
    chapter.click()
    expect(text).to_have_attribute("data-file", str(files["Chapter 12. Biographical."]))
    expect(text).to_contain_text("Queequeg was a native of Rokovoko")
    expect(links).to_have_count(0)

    contents = api_json(reader_server, f"/api/files/{files['Contents']}")["text"]
    start = contents.index("Chapter 8. The Pulpit.")
    end = contents.index("Chapter 9. The Sermon.") + len("Chapter 9. The Sermon.")
    tag = f"f{files['Contents']}-{start}-{end}"
    open_reader(page, reader_server, doc_id, f"#{tag}")
    expect(page.locator("mark.cv-highlight").first).to_be_visible()
    assert marks_text(page) == reader_server.resolve(tag)["text"]
    assert page.locator("a.cv-contents-link mark.cv-highlight").count() == 2
    browser_page.assert_clean()


@browser
def test_adding_by_path_is_offered_only_where_the_server_takes_paths(browser_page: BrowserPage,
                                                                     tmp_path: Path) -> None:
    """A server without a key and without --ingest_roots does not take paths: the reader offered "add a file or
    folder that is on the server" all the same, to answer with a 403. It is hidden there, shown on a server
    with --ingest_roots; on one that also has a key, a browser not given the key is asked for it when it adds a
    path."""
    page = browser_page.page
    jobs = page.locator("[data-cv-jobs]")
    with running_server(settings_for(tmp_path / "open", library=tmp_path / "open" / "library")) as server:
        page.goto(f"{server.url}/")
        expect(page.locator("[data-cv-upload-form]")).to_be_visible()
        expect(page.locator("[data-cv-path-form]")).to_be_hidden()
        assert httpx.get(f"{server.url}/api/settings").json()["path_ingest"] is False
        browser_page.shot(page, "library-add-by-path-off")
    with running_server(settings_for(tmp_path / "roots", library=tmp_path / "roots" / "library",
                                     ingest_roots=[tmp_path])) as server:
        page.goto(f"{server.url}/")
        expect(page.locator("[data-cv-path-form]")).to_be_visible()
    with running_server(settings_for(tmp_path / "keyed", library=tmp_path / "keyed" / "library",
                                     ingest_roots=[tmp_path], api_key="sesame-0123456789")) as server:
        page.goto(f"{server.url}/")
        page.fill("[data-cv-path-input]", str(tmp_path))
        page.locator("[data-cv-path-form] button[type=submit]").click()
        expect(jobs).to_contain_text("this server needs an access key: set it under Settings › This browser.")
    browser_page.assert_clean()


@browser
def test_markdown_with_space_only_blank_lines_opens_each_canto(reader_server: Any, browser_page: BrowserPage) -> None:
    """The Divina Commedia separates its stanzas and cantos with lines of one space (``" \\n"``): the reader
    showed six paragraphs of up to 460 k characters, so "Canto V" in the contents scrolled to the start of the
    Inferno (the list of cantos, drawn bold as a heading) and the title's ``====`` underline was shown raw.
    Each canto is now its own paragraph: the contents open it, and the underline is markup again."""
    doc_id = reader_server.ingest(shared_path("books", "text", "divina-commedia-it.md"))
    [meta] = api_json(reader_server, f"/api/documents/{doc_id}")["files"]
    stored = api_json(reader_server, f"/api/files/{meta['id']}")
    assert max(end - start for start, end in stored["paragraphs"]) < 2000
    page = browser_page.page
    open_reader(page, reader_server, doc_id)
    expect(page.locator("[data-cv-text] .cv-md-underline").first).to_be_attached()
    expect(page.locator("[data-cv-text] p").first).to_have_text("LA DIVINA COMMEDIA")
    page.locator("a.cv-toc-link", has_text="Canto V").first.click()
    offset = int(page.url.rsplit("-", 1)[1])
    assert stored["text"][offset:].startswith("Canto V")
    heading = page.locator(f"[data-cv-text] p[data-start='{offset}']")
    expect(heading).to_have_text("Canto V")
    expect(heading).to_be_in_viewport()
    expect(page.locator("[data-cv-text] p", has_text="Canto VI.").first).not_to_be_in_viewport()
    browser_page.shot(page, "book-markdown-canto-v")
    browser_page.assert_clean()


def settings_of(server: Server) -> Any:
    with server.client() as client:
        return client.get("/api/settings").json()


@browser
def test_settings_say_where_the_model_is_set_on_a_server_without_a_key(browser_page: BrowserPage,
                                                                       tmp_path: Path) -> None:
    """``chapterverse serve`` has no API key by default, and then the reader cannot change the model: the
    Settings dialog offered the fields anyway, and Save answered "Not saved: PUT /api/settings ... needs the
    server's API key". Without a key the fields are now shown disabled, with where the model is set, and Save
    keeps this browser's part; with a key they can be changed (and are)."""
    page = browser_page.page
    dialog = page.locator("[data-cv-settings]")
    with running_server(settings_for(tmp_path / "open", library=tmp_path / "open" / "library",
                                     llm_base_url="http://127.0.0.1:9/v1", llm_model="m")) as server:
        assert settings_of(server)["llm_editable"] is False
        page.goto(f"{server.url}/")
        page.locator("[data-cv-settings-open]").click()
        expect(dialog.locator("#cv-llm-base")).to_have_value("http://127.0.0.1:9/v1")
        expect(dialog.locator("#cv-llm-base")).to_be_disabled()
        expect(dialog.locator("[data-cv-llm-fixed]")).to_be_visible()
        expect(dialog.locator("[data-cv-llm-fixed]")).to_contain_text("--llm_base_url URL --llm_model NAME")
        browser_page.shot(page, "settings-without-server-key")
        dialog.locator("button[type=submit]").click()
        expect(dialog).to_be_hidden()
        expect(page.locator("[data-cv-toast]")).to_have_text("Settings saved.")
    key = "sesame-0123456789"
    with running_server(settings_for(tmp_path / "keyed", library=tmp_path / "keyed" / "library", api_key=key),
                        headers={"Authorization": f"Bearer {key}"}) as server:
        assert settings_of(server)["llm_editable"] is True
        page.goto(f"{server.url}/")
        page.locator("[data-cv-settings-open]").click()
        expect(dialog.locator("[data-cv-embedding]")).to_contain_text("dimensions")  # the settings are shown
        expect(dialog.locator("[data-cv-llm-fixed]")).to_be_hidden()
        dialog.locator("#cv-llm-base").fill("http://127.0.0.1:11434/v1")
        dialog.locator("#cv-llm-model").fill("qwen2.5")
        dialog.locator("#cv-server-key").fill(key)
        dialog.locator("button[type=submit]").click()
        expect(page.locator("[data-cv-toast]")).to_have_text("Settings saved.")
        saved = settings_of(server)["llm"]
        assert (saved["base_url"], saved["model"]) == ("http://127.0.0.1:11434/v1", "qwen2.5")
    browser_page.assert_clean()


@browser
def test_settings_cannot_be_typed_over_before_the_servers_values_arrive(browser_page: BrowserPage,
                                                                         tmp_path: Path) -> None:
    """The dialog opened with empty model fields and filled them when GET /api/settings answered, over
    anything typed meanwhile. The fields now wait, disabled, for the server's values (held back here)."""
    key = "sesame-0123456789"
    held: list[Any] = []
    with running_server(settings_for(tmp_path, library=tmp_path / "library", api_key=key,
                                     llm_base_url="http://127.0.0.1:9/v1", llm_model="m"),
                        headers={"Authorization": f"Bearer {key}"}) as server:
        page = browser_page.page
        opened: list[bool] = []  # the library's own look at the settings (is path ingest on?) goes through
        page.route("**/api/settings", lambda route: held.append(route) if route.request.method == "GET" and opened
                   else route.continue_())
        page.goto(f"{server.url}/")
        expect(page.locator("[data-cv-upload-form]")).to_be_visible()
        opened.append(True)
        page.locator("[data-cv-settings-open]").click()
        base = page.locator("[data-cv-settings] #cv-llm-base")
        for _ in range(100):
            if held:
                break
            page.wait_for_timeout(50)
        assert held, "the dialog did not ask for the settings"
        expect(base).to_be_disabled()
        expect(base).to_have_value("")
        held[0].continue_()
        expect(base).to_be_enabled()
        expect(base).to_have_value("http://127.0.0.1:9/v1")
    browser_page.assert_clean()
