"""The format readers on real books: every book parses, TOCs land on their headings, offsets hold."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from conftest import shared_path

from chapterverse import SourceError
from chapterverse.errors import UnsupportedFormatError
from chapterverse.sources import SUPPORTED_SUFFIXES, ParsedDocument, iter_folder, read_source

EPUBS = ["accessible_epub_3", "childrens-literature", "don-quixote-en", "epub30-spec", "linear-algebra",
         "moby-dick", "sherlock-holmes", "sous-le-vent"]


def _norm(text: str) -> str:
    return " ".join(text.casefold().split())


def title_at(document: ParsedDocument, entry_index: int, slack: int = 80) -> bool:
    """Whether a TOC entry's title is written at its offset: the case- and whitespace-normalised
    title occurs in ``text[offset : offset + len(title) + slack]`` (slack covers a label such as
    "Chapter 6." before the title, or a line break inside it)."""
    entry = document.toc[entry_index]
    text = document.files[entry.file_index].text
    return _norm(entry.title) in _norm(text[entry.offset:entry.offset + len(entry.title) + slack])


def _words(text: str) -> set[str]:
    return set(re.findall(r"\w+", text.casefold()))


def assert_well_formed(document: ParsedDocument) -> None:
    """Invariants every reader owes: TOC entries point inside their file, blocks are separated by
    exactly one blank line, and the document has at least one file."""
    assert document.files
    for entry in document.toc:
        assert 0 <= entry.file_index < len(document.files), entry
        assert 0 <= entry.offset <= len(document.files[entry.file_index].text), entry
        assert entry.level >= 0 and entry.title.strip()
    if document.format in ("epub", "html", "pdf"):
        for parsed in document.files:
            assert "\n\n\n" not in parsed.text


def test_supported_suffixes() -> None:
    assert {".epub", ".pdf", ".md", ".markdown", ".txt", ".html", ".htm", ".xhtml", ".jsonl"} == SUPPORTED_SUFFIXES


def test_unsupported_and_missing_files(tmp_path: Path) -> None:
    (tmp_path / "book.docx").write_bytes(b"PK")
    with pytest.raises(UnsupportedFormatError, match="docx"):
        read_source(tmp_path / "book.docx")
    with pytest.raises(SourceError, match="No such file"):
        read_source(tmp_path / "missing.epub")
    (tmp_path / "folder.md").mkdir()
    with pytest.raises(SourceError, match="directory"):
        read_source(tmp_path / "folder.md")


def test_suffix_is_case_insensitive(tmp_path: Path) -> None:
    (tmp_path / "NOTES.MD").write_text("# Title\n\nBody.\n", encoding="utf-8")
    assert read_source(tmp_path / "NOTES.MD").format == "markdown"


def test_iter_folder_is_sorted_posix_and_skips_hidden(tmp_path: Path) -> None:
    for name in ["b.md", "a/z.txt", "a/b/c.epub", ".hidden.md", ".git/config.md", "a/.cache/x.txt", "image.png",
                 "Z.PDF"]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x", encoding="utf-8")
    listed = list(iter_folder(tmp_path))
    assert [source for _, source in listed] == ["Z.PDF", "a/b/c.epub", "a/z.txt", "b.md"]
    assert all(path == tmp_path / source for path, source in listed)
    with pytest.raises(SourceError):
        list(iter_folder(tmp_path / "b.md"))


@pytest.mark.parametrize("name", EPUBS)
def test_every_epub_book_parses(name: str) -> None:
    document = read_source(shared_path("books", "epub", f"{name}.epub"))
    assert_well_formed(document)
    assert document.format == "epub" and document.title
    assert document.toc, "every sample book has a nav or NCX"
    assert not document.warnings
    assert all(parsed.label for parsed in document.files)


def test_moby_dick_toc_lands_on_headings() -> None:
    path = shared_path("books", "epub", "moby-dick.epub")
    started = time.perf_counter()
    document = read_source(path)
    assert time.perf_counter() - started < 3.0
    assert len(document.files) == 144
    assert document.metadata == {"creator": "Herman Melville", "language": "en-US"}
    assert len(document.toc) >= 140
    matched = [i for i in range(len(document.toc)) if title_at(document, i)]
    # The two misses are the image-only title page and the unheaded copyright page.
    assert len(matched) >= len(document.toc) - 2
    chapter = next(entry for entry in document.toc if entry.title.startswith("Chapter 1."))
    assert document.files[chapter.file_index].text.startswith("Chapter 1. Loomings.\n\nCall me Ishmael.")


def test_don_quixote_toc_is_nested_and_noterefs_stay_readable() -> None:
    document = read_source(shared_path("books", "epub", "don-quixote-en.epub"))
    assert max(entry.level for entry in document.toc) >= 1
    assert {entry.level for entry in document.toc} >= {0, 1, 2}
    matched = sum(title_at(document, i) for i in range(len(document.toc)))
    assert matched >= len(document.toc) - 6
    chapter = next(f for f in document.files if f.label == "text/chapter-1-3.xhtml")
    assert re.search(r"\S\[\d+\] ", chapter.text), "endnote references read as [n]"
    assert "<" not in chapter.text


def test_childrens_literature_deep_anchors() -> None:
    """3 spine items; the nav's entries point at anchors deep inside the one big file.

    The nav's toc list has 22 links plus 9 unlinked author groupings (which take their first
    story's position); the nav's other links are 2 landmarks and a 92-entry page list, which are
    not TOC.
    """
    document = read_source(shared_path("books", "epub", "childrens-literature.epub"))
    assert len(document.files) == 3
    assert len(document.toc) == 31
    assert max(entry.level for entry in document.toc) == 3
    deep = [entry for entry in document.toc if entry.offset > 0]
    assert len(deep) == 30 and len({entry.offset for entry in deep}) == 21
    close = 0
    for entry in document.toc:
        window = document.files[entry.file_index].text[entry.offset:entry.offset + len(entry.title) + 80]
        # Story headings are just their number ("190"); chapter headings reword ("1." for "I.").
        starts_alike = window.casefold().startswith(entry.title.split()[0].casefold())
        close += starts_alike or len(_words(entry.title) & _words(window)) >= 0.5 * len(_words(entry.title))
    assert close >= 22  # misses: the author groupings, whose name is not a heading


def test_sous_le_vent_fixed_layout_has_little_text() -> None:
    document = read_source(shared_path("books", "epub", "sous-le-vent.epub"))
    assert any(not parsed.has_text for parsed in document.files)
    assert "SOUS LE VENT" in document.files[0].text


@pytest.mark.slow
def test_mahabharata_scale() -> None:
    path = shared_path("books", "epub", "mahabharata.epub")
    started = time.perf_counter()
    document = read_source(path)
    assert time.perf_counter() - started < 30.0
    assert len(document.files) == 2014
    assert sum(len(parsed.text) for parsed in document.files) > 6_000_000
    assert_well_formed(document)
    assert re.search("[\u0900-\u097f]", document.files[-1].text)


def test_freeculture_pdf() -> None:
    document = read_source(shared_path("books", "pdf", "freeculture.pdf"))
    assert_well_formed(document)
    assert len(document.files) == 352
    assert document.title == "Free Culture"
    # The outline has 58 bookmarks; 5 are web links ("*lessig.org") with no page, so they are dropped.
    assert len(document.toc) == 53
    assert [entry.file_index for entry in document.toc[:3]] == [0, 8, 11]
    assert all(entry.offset == 0 for entry in document.toc)
    assert [parsed.label for parsed in document.files[:3]] == ["1", "2", "3"]
    page = document.files[30].text
    assert "\r" not in page and "\x02" not in page
    assert "capture" in page, "words re-joined across a line-end hyphen read whole"


def test_geotopo_pdf_has_page_labels_and_outline() -> None:
    document = read_source(shared_path("books", "pdf", "geotopo-de.pdf"))
    assert_well_formed(document)
    assert len(document.files) == 117
    assert len(document.toc) == 35
    assert [parsed.label for parsed in document.files[:4]] == ["i", "ii", "iii", "1"]
    assert max(entry.level for entry in document.toc) >= 1


def test_divina_commedia_markdown() -> None:
    document = read_source(shared_path("books", "text", "divina-commedia-it.md"))
    assert document.format == "markdown" and document.title == "LA DIVINA COMMEDIA"
    text = document.files[0].text
    cantos = [entry for entry in document.toc if entry.title.startswith("Canto")]
    assert len(cantos) == 100
    for entry in document.toc:
        assert text[entry.offset:].startswith(entry.title) or text[entry.offset:].lstrip("# ").startswith(entry.title)
    assert "\r" not in text


def test_longfellow_txt_headings() -> None:
    document = read_source(shared_path("books", "text", "divine-comedy-en-longfellow.txt"))
    assert document.format == "text" and document.title == "The Divine Comedy"
    text = document.files[0].text
    assert not text.startswith("\ufeff") and "\r" not in text
    cantos = [entry for entry in document.toc if "Canto" in entry.title]
    assert len(cantos) == 100
    assert {entry.level for entry in document.toc} == {0, 1}
    assert all(text[entry.offset:].startswith(entry.title) for entry in document.toc)


def test_don_quijote_folder() -> None:
    folder = shared_path("books", "text", "don-quijote-es")
    listed = list(iter_folder(folder))
    assert len(listed) > 100
    assert [source for _, source in listed] == sorted(source for _, source in listed)
    assert listed[1][1].startswith("01-Primera_Parte/")
    for path, _ in listed:
        document = read_source(path)
        assert_well_formed(document)
        assert document.files[0].text.strip()
    chapter = read_source(folder / "01-Primera_Parte" / "01-Capítulo_1.md")
    assert chapter.title == "Capítulo I"
    assert chapter.files[0].text[chapter.toc[0].offset:].startswith("Capítulo I\n")
