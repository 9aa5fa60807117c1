"""Books of the shapes new readers bring, read as the printed book is: its title, its contents, and only its text.

Small texts in tests/data/shapes (see its README): a Markdown book whose first line is its title in capitals, then
an illustration's caption, a contents list and a list of illustrations before its first heading; a Latin book
whose headings are a Roman numeral with a title or a numeral alone; and a PDF as Project Gutenberg typesets
them, whose outline names its list of figures and its licence ("PG License."). What is not the book stays in
the stored text (positions are exact) but is never chunked, so never a search hit or an answer.
"""

from __future__ import annotations

import json
from pathlib import Path

from hashembed import HashingEmbedder
from textpdf import text_pdf
from typer.testing import CliRunner

from chapterverse.chunking import chunk_document
from chapterverse.cli import app
from chapterverse import Library, Span
from chapterverse.sources import ParsedDocument, open_source, read_source

SHAPES = Path(__file__).parent / "data" / "shapes"
CHIMES = SHAPES / "the-chimes.md"
ODES = SHAPES / "horace-odes-la.txt"


def read(path: Path) -> ParsedDocument:
    with open_source(path) as file:
        return read_source(file)


def chunk_texts(document: ParsedDocument) -> list[str]:
    return [document.files[c.file_index].text[c.start:c.end] for c in chunk_document(document)]


def test_a_markdown_book_is_titled_by_its_title_line_not_its_first_heading() -> None:
    book = read(CHIMES)
    assert book.title == "THE CHIMES"
    assert [entry.title for entry in book.toc] == ["FIRST QUARTER", "SECOND QUARTER", "THIRD QUARTER",
                                                   "FOURTH QUARTER"]


def test_a_list_of_illustrations_is_not_chunked() -> None:
    texts = chunk_texts(read(CHIMES))
    assert texts and not any("LIST OF ILLUSTRATIONS" in t or "White Whale" in t or "CONTENTS" in t for t in texts)
    assert any("Toby Veck, whom" in t for t in texts)


def test_numerals_with_a_title_and_numerals_alone_are_one_run_of_headings() -> None:
    book = read(ODES)
    assert [entry.title for entry in book.toc] == ["I. AD MAECENATEM", "II.", "III. AD NAVEM QVA VEHEBATVR VERGILIVS",
                                                   "IV.", "V. AD PYRRHAM", "VI."]
    assert len({entry.level for entry in book.toc}) == 1
    text = book.files[0].text
    assert all(text[entry.offset:].startswith(entry.title.split()[0]) for entry in book.toc)


def test_a_single_file_takes_the_title_given_and_gives_it_back(tmp_path: Path) -> None:
    lib = str(tmp_path / "lib")
    runner = CliRunner()

    def ingest(*args: str) -> dict[str, object]:
        result = runner.invoke(app, ["ingest", str(ODES), *args, "--json", "--library", lib])
        assert result.exit_code == 0, result.output
        [doc] = json.loads(result.output)["documents"]
        return dict(doc)

    named = ingest("--title", "Odes, Book I")
    assert named["title"] == "Odes, Book I" and named["changed"]
    assert ingest("--title", "Odes, Book I")["changed"] is False
    assert ingest()["title"] == "Q. HORATI FLACCI CARMINA"


GUTENBERG_PDF = [
    "The Project Gutenberg EBook of Plane Figures, by A. Surveyor\nThis eBook is for the use of anyone anywhere.",
    "List of Figures\nFig. 1. A right triangle 3\nFig. 2. The circle and its chord 4\nFig. 3. A white whale 5",
    "CHAPTER I. TRIANGLES\nA triangle has three sides and three angles,\nwhich together make two right angles.",
    "CHAPTER II. CIRCLES\nEvery chord of a circle is shorter than\nits diameter, save the diameter itself.",
    "PG License.\nSection 1. General Terms of Use and Redistributing Project\nGutenberg-tm electronic works.",
]


def test_a_gutenberg_pdf_s_licence_and_list_of_figures_are_not_chunked(tmp_path: Path) -> None:
    path = text_pdf(tmp_path / "plane-figures.pdf", GUTENBERG_PDF, outline=[
        ("Title Page", 0), ("List of Figures", 1), ("Chapter I. Triangles", 2), ("Chapter II. Circles", 3),
        ("PG License.", 4)])
    book = read(path)
    texts = chunk_texts(book)
    assert any("three sides" in t for t in texts) and any("chord of a circle" in t for t in texts)
    assert not any("General Terms" in t or "Fig. 1" in t or "white whale" in t for t in texts), texts
    assert "PG License." in book.files[4].text  # kept in the stored text, positions exact
    library = Library(tmp_path / "lib", embedder=HashingEmbedder())
    library.ingest([path])
    assert all("Fig." not in hit.chunk.text for hit in library.search("white whale figures", k=5))


def test_an_epub_s_list_of_illustrations_without_links_is_not_chunked(tmp_path: Path) -> None:
    from test_sources_hostile import build_epub, xhtml

    plates = "".join(f"<p>{caption}</p>" for caption in (
        "The Bells of the Old Church, by Night", "Trotty Veck at the Church Door", "The White Whale of the Weathervane"))
    chapter = ("<h1>FIRST QUARTER</h1><p>Toby Veck, whom everybody called Trotty because of his pace, waited by "
               "the old church door in all weathers.</p>")
    path = build_epub(tmp_path / "chimes.epub", {
        "title.xhtml": xhtml("<h1>THE CHIMES</h1><p>A Goblin Story</p>"),
        "plates.xhtml": xhtml(f"<h2>LIST OF ILLUSTRATIONS</h2>{plates}"),
        "one.xhtml": xhtml(chapter), "two.xhtml": xhtml(chapter.replace("FIRST", "SECOND")),
        "three.xhtml": xhtml(chapter.replace("FIRST", "THIRD")), "four.xhtml": xhtml(chapter.replace("FIRST", "FOURTH"))})
    texts = chunk_texts(read(path))
    assert any("Toby Veck" in t for t in texts)
    assert not any("White Whale" in t or "LIST OF ILLUSTRATIONS" in t for t in texts), texts


def test_a_text_without_a_title_page_is_titled_by_its_file_name() -> None:
    """A text that opens with its first sentence (a paragraph a line, as corpus editions are) or with its first
    chapter's numeral has no title page: neither line is its title."""
    assert read(SHAPES / "boule-de-suif-fr.txt").title == "boule-de-suif-fr"
    assert read(SHAPES / "aesop-fables-en.txt").title == "aesop-fables-en"
    assert read(ODES).title == "Q. HORATI FLACCI CARMINA"


def test_part_titles_marked_up_as_their_chapters_hold_them() -> None:
    """"VOLUME I" underlined as "CHAPTER I" is, with no text of its own, is the part its chapters belong to: the
    contents show three volumes with their chapters under them, not eight entries in a row."""
    toc = read(SHAPES / "emma-volumes.md").toc
    top = min(entry.level for entry in toc if entry.title != "EMMA")
    assert [entry.title for entry in toc if entry.level == top] == ["VOLUME I", "VOLUME II", "VOLUME III"]
    assert [entry.title for entry in toc if entry.level == top + 1] == ["CHAPTER I", "CHAPTER II"] * 2 + ["CHAPTER I"]


def test_a_paragraph_a_line_book_s_numerals_with_their_summaries_are_its_chapters() -> None:
    """A corpus edition written a paragraph a line, no blank lines: "I." over its summary line, later "III An odd
    accident..." with the summary on the numeral's line. Each is a chapter, titled numeral and summary, cut to be
    read at a glance; the chapter's first line "I have told my reader" is prose, its "I" no numeral."""
    book = read(SHAPES / "fielding-tom-jones-en.txt")
    assert book.title == "fielding-tom-jones-en"
    assert [entry.title for entry in book.toc] == [
        "I. The introduction to the work, or bill of fare to the feast.",
        "II. A short description of squire Allworthy, and a fuller account of Miss…",
        "III An odd accident which befel Mr Allworthy at his return home. The decent…",
        "IV The reader's neck brought into danger by a description; his escape; and the…"]
    text = book.files[0].text
    assert [text[entry.offset:].split(None, 1)[0] for entry in book.toc] == ["I.", "II.", "III", "IV"]
    assert all(len(entry.title) <= 80 for entry in book.toc)


def test_chapter_titles_without_numerals_and_an_author_above_the_title(tmp_path: Path) -> None:
    """A book whose tales are titled by a line alone between blank lines, nothing else, under a title page that
    names its authors first ("Brüder Grimm", then "Kinder- und Hausmärchen"): the title is the book's, the authors
    are its creator, the four tales are its contents; its lines of dialogue and verse are not, and a passage is
    cited in the tale it belongs to."""
    path = SHAPES / "grimm-maerchen-de.txt"
    book = read(path)
    assert (book.title, book.metadata.get("creator")) == ("Kinder- und Hausmärchen", "Brüder Grimm")
    assert [entry.title for entry in book.toc] == ["Der Froschkönig oder der eiserne Heinrich", "Rotkäppchen",
                                                   "Hänsel und Gretel", "Die Bremer Stadtmusikanten"]
    library = Library(tmp_path / "lib", embedder=HashingEmbedder())
    library.ingest([path])
    [hit] = [hit for hit in library.search("Käppchen von rotem Samt", k=5) if "rotem Samt" in hit.chunk.text][:1]
    resolved = library.resolve(Span(hit.chunk.file_id, hit.chunk.start, hit.chunk.end))
    assert (resolved.doc_title, resolved.toc_path) == ("Kinder- und Hausmärchen", ["Rotkäppchen"])


def test_a_contents_entry_finds_its_heading_whatever_the_apostrophe_s_place() -> None:
    """The front contents list says "TOAD'S ADVENTURES", the heading in the text "TOADS' ADVENTURES": the chapter
    is found, as an e-reader finds it, and its text is not counted in the chapter before; a line of prose that
    starts with the same words ("Toad's adventures, the Rat said, ...") is no heading."""
    book = read(SHAPES / "grahame-willows-en.txt")
    assert [entry.title for entry in book.toc] == ["Chapter 1 THE RIVER BANK", "Chapter 2 THE OPEN ROAD",
                                                   "Chapter 3 THE WILD WOOD", "Chapter 4 TOADS' ADVENTURES"]
    text = book.files[0].text
    assert text[book.toc[-1].offset:].startswith("Chapter 4 TOADS' ADVENTURES\n")


def test_a_numeral_alone_over_its_title_line_is_one_chapter_and_the_contents_are_flat() -> None:
    """" I" alone, then " Introduction" two lines below (as the contents list " I Introduction" shows): one chapter
    "I Introduction", level with "II Mr. Bedford Meets ..." and the "Epilogue", not a numeral under a section."""
    book = read(SHAPES / "wells-first-men-en.txt")
    assert [entry.title for entry in book.toc] == [
        "I Introduction", "II Mr. Bedford Meets Mr. Cavor at Lympne", "III The First Making of Cavorite",
        "IV Inside the Sphere", "Epilogue"]
    assert len({entry.level for entry in book.toc}) == 1
    text = book.files[0].text
    assert [text[entry.offset:].split(None, 1)[0] for entry in book.toc] == ["I", "II", "III", "IV", "Epilogue"]


def test_a_french_edition_s_chapters_with_footnote_marks_subtitles_and_a_title_page(tmp_path: Path) -> None:
    """An edition's title page ("TOME XXXIII", then "TOME XXXIII." / "ROMANS. TOME I.") is no part of the book;
    "CHAPITRE III[1]." with a footnote's mark is a chapter; every bare "CHAPITRE N." takes the subtitle under it,
    whether in title case or not, so the labels read alike; a passage is cited in its chapter."""
    path = SHAPES / "voltaire-zadig-fr.txt"
    book = read(path)
    assert book.title == "Zadig"
    assert [entry.title for entry in book.toc] == [
        "CHAPITRE I. Le borgne.", "CHAPITRE II Le nez.", "CHAPITRE III. Le chien et le cheval.",
        "CHAPITRE IV. Le Ministre.", "CHAPITRE V. Comment Zadig jugea les procès, et de la manière dont il fut reçu…"]
    assert len({entry.level for entry in book.toc}) == 1
    library = Library(tmp_path / "lib", embedder=HashingEmbedder())
    library.ingest([path])
    [hit] = [hit for hit in library.search("la lune du miel", k=5) if "lune du miel" in hit.chunk.text][:1]
    resolved = library.resolve(Span(hit.chunk.file_id, hit.chunk.start, hit.chunk.end))
    assert resolved.toc_path == ["CHAPITRE III. Le chien et le cheval."]
