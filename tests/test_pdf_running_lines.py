"""Running headers and footers of PDF pages stay in the stored text but out of the chunks; printed page numbers
label the pages of a PDF without labels (issue 15)."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import shared_path
from hashembed import HashingEmbedder

from chapterverse.chunking import chunk_document
from chapterverse import Library
from chapterverse.sources.base import ParsedDocument, ParsedFile
from chapterverse.sources.pdf import read_pdf
from chapterverse.sources.pdf_running_lines import mark_running_lines

BODY = [
    "The keeper climbed the stair at dusk.\nShe lit the lamp and wound the clock.\nThe lens began to turn.",
    "A ship passed the reef at nine.\nIts crew waved at the tower.\nThe keeper waved back.",
    "At midnight the fog came in.\nShe rang the bell every minute.\nNo ship answered.",
    "By morning the fog had lifted.\nThe gulls came back to the rock.\nShe slept until noon.",
    "The supply boat came on Thursday.\nIt brought paraffin and letters.\nOne letter was from her sister.",
    "Her sister wrote about the town.\nThe harbour had a new quay.\nThe museum wanted the logbook.",
]


def book(pages: list[str]) -> ParsedDocument:
    return ParsedDocument("Keeper", "pdf", [ParsedFile(text, label=str(i + 1)) for i, text in enumerate(pages)])


def printed(index: int) -> int:
    """Printed numbers start at 11 on the first page (front matter unnumbered in this PDF)."""
    return index + 11


def test_headers_and_footers_stay_in_the_text_but_leave_the_chunks() -> None:
    pages = [(f"{printed(i)} THE KEEPER OF GULL ROCK\n" if i % 2 else f"CHAPTER ONE {printed(i)}\n") + body
             + "\nhttps://example.org/keeper" for i, body in enumerate(BODY)]
    parsed = mark_running_lines(book(pages))
    for page, file in zip(pages, parsed.files):
        assert file.text == page
        assert file.body is not None and file.text[file.body[0]:file.body[1]] in BODY
    chunks = chunk_document(parsed, chunk_size=200, overlap=20)
    texts = [parsed.files[c.file_index].text[c.start:c.end] for c in chunks]
    assert texts == BODY
    assert [f.label for f in parsed.files] == [str(printed(i)) for i in range(len(BODY))]


def test_a_footer_glued_to_the_last_words_is_cut_at_the_page_number() -> None:
    pages = [body + f"\n{printed(i)} FREE KEEPER" for i, body in enumerate(BODY)]
    pages[3] = BODY[3] + f"mid{printed(3)} FREE KEEPER"
    parsed = mark_running_lines(book(pages))
    start, end = parsed.files[3].body or (0, 0)
    assert parsed.files[3].text[start:end] == BODY[3] + "mid"


def test_numbers_in_the_text_are_not_taken_for_page_numbers() -> None:
    pages = [body + f"\nDefinition {7 * i + 3}" for i, body in enumerate(BODY)]
    parsed = mark_running_lines(book(pages))
    assert all(f.body in (None, (0, len(f.text))) for f in parsed.files)
    assert [f.label for f in parsed.files] == [str(i + 1) for i in range(len(BODY))]


def test_labels_of_the_pdf_itself_are_kept() -> None:
    pages = [f"{printed(i)} KEEPER\n" + body for i, body in enumerate(BODY)]
    parsed = book(pages)
    for i, file in enumerate(parsed.files):
        file.label = ["i", "ii", "iii", "1", "2", "3"][i]
    mark_running_lines(parsed)
    assert [f.label for f in parsed.files] == ["i", "ii", "iii", "1", "2", "3"]
    assert all(f.body and f.text[f.body[0]:f.body[1]] in BODY for f in parsed.files)


def test_free_culture_reads_as_printed(tmp_path: Path) -> None:
    """The book prints "134 FREE CULTURE" and a URL under page 146 of the PDF, which has no page labels."""
    path = shared_path("books", "pdf", "freeculture.pdf")
    parsed = read_pdf(path)
    page = parsed.files[145]
    assert page.label == "134"
    assert page.text.endswith("134 FREE CULTURE\n<http://free-culture.org/get-it>")
    assert page.body is not None and not page.text[page.body[0]:page.body[1]].endswith("CULTURE")
    library = Library(tmp_path / "lib", embedder=HashingEmbedder())
    [result] = library.ingest([path])
    chunks = library.store.chunks(doc_id=result.document.id)
    assert chunks and not [c.text for c in chunks if "free-culture.org/get-it" in c.text]
    # Left in: two pages whose text layer puts the header between a figure's labels, mid-page (of 130 or so).
    headed = [c.text for c in chunks if re.search(r"^\d+ FREE CULTURE$", c.text, re.M)]
    assert len(headed) <= 2, headed
    hits = library.search("FREE CULTURE get-it", k=3)
    assert all("get-it" not in h.text for h in hits)
    stored = {f.ordinal: f for f in library.store.files(result.document.id)}
    assert stored[145].label == "134"
    for c in chunks[:200]:
        assert library.resolve(f"f{c.file_id}-{c.start}-{c.end}").text == c.text
