"""``ingest --as-book`` (issue 15): a folder of Markdown/TXT/HTML chapters is one document, chapters in natural
order, a TOC from their headings under one entry per subfolder, cited exactly, re-ingested only when changed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hashembed import HashingEmbedder
from typer.testing import CliRunner

from chapterverse.cli import app
from chapterverse import InputError, Library, SourceError, Span
from chapterverse.sources.book import natural_key, pretty_name, read_book


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")
    return root


@pytest.fixture
def novel(tmp_path: Path) -> Path:
    """Notes without a heading, two parts whose chapters sort wrongly as plain strings, TXT and HTML chapters,
    and files that are no chapters (hidden, an image)."""
    return _write(tmp_path / "el-hidalgo", {
        "00-Notes.md": "Transcribed from a public-domain edition.\n",
        "01-Primera_Parte/2-Capitulo_2.md": "Capítulo II\n-----------\n\nSalió el hidalgo de su aldea.\n",
        "01-Primera_Parte/10-Capitulo_10.md": "# Capítulo X\n\nDe lo que más le avino.\n\n## Nota\n\nUna nota.\n",
        "01-Primera_Parte/1-Capitulo_1.md": "# Capítulo I\n\nEn un lugar de la Mancha vivía un hidalgo.\n",
        "02-Segunda_Parte/1-Capitulo_1.txt": "CAPÍTULO PRIMERO\n\nEl cura y el barbero visitaron a don Quijote.\n",
        "02-Segunda_Parte/2-Capitulo_2.html": "<html><body><h1>Capítulo II</h1><p>Sancho en casa.</p></body></html>",
        "02-Segunda_Parte/.draft.md": "# not a chapter\n",
        "cover.png": "not text",
    })


def test_natural_order_compares_numbers_as_numbers() -> None:
    names = ["Capitulo_10.md", "Capitulo_2.md", "capitulo_1.md", "10", "9", "a"]
    assert sorted(names, key=lambda n: natural_key(Path(n))) == [
        "9", "10", "a", "capitulo_1.md", "Capitulo_2.md", "Capitulo_10.md"]
    assert natural_key(Path("01-Parte/2.md")) < natural_key(Path("01-Parte/10.md")) < natural_key(Path("02-Parte/1.md"))
    assert pretty_name("01-Primera_Parte") == "Primera Parte" and pretty_name("2024") == "2024"


def test_the_chapters_are_the_files_in_natural_order_with_a_toc_from_their_headings(novel: Path) -> None:
    book = read_book(novel, title="El ingenioso hidalgo")
    assert book.title == "El ingenioso hidalgo" and book.format == "mixed"
    assert [f.label for f in book.files] == [
        "00-Notes.md", "01-Primera_Parte/1-Capitulo_1.md", "01-Primera_Parte/2-Capitulo_2.md",
        "01-Primera_Parte/10-Capitulo_10.md", "02-Segunda_Parte/1-Capitulo_1.txt", "02-Segunda_Parte/2-Capitulo_2.html"]
    assert [(e.title, e.level, e.file_index) for e in book.toc] == [
        ("Notes", 0, 0),
        ("Primera Parte", 0, 1), ("Capítulo I", 1, 1), ("Capítulo II", 1, 2), ("Capítulo X", 1, 3), ("Nota", 2, 3),
        ("Segunda Parte", 0, 4), ("CAPÍTULO PRIMERO", 1, 4), ("Capítulo II", 1, 5)]
    nota = book.toc[5]
    assert book.files[3].text[nota.offset:].startswith("## Nota")
    assert [f.title for f in book.files][:2] == ["Notes", "Capítulo I"]
    assert read_book(novel).title == "el-hidalgo"


def test_a_book_is_one_document_cited_exactly_and_re_ingested_only_when_changed(novel: Path, tmp_path: Path) -> None:
    library = Library(tmp_path / "lib", embedder=HashingEmbedder())
    [result] = library.ingest([novel], as_books=True, title="El ingenioso hidalgo")
    doc = result.document
    assert result.changed and doc.title == "El ingenioso hidalgo" and doc.source == "el-hidalgo" and doc.files == 6
    assert [d.id for d in library.documents()] == [doc.id]
    chunk = next(c for c in library.store.chunks(doc_id=doc.id) if "avino" in c.text)
    resolved = library.resolve(Span(chunk.file_id, chunk.start, chunk.end))
    assert resolved.text == chunk.text and resolved.toc_path == ["Primera Parte", "Capítulo X"]
    assert library.store.file(chunk.file_id).label == "01-Primera_Parte/10-Capitulo_10.md"

    assert not library.ingest([novel], as_books=True, title="El ingenioso hidalgo")[0].changed
    (novel / "01-Primera_Parte" / "2-Capitulo_2.md").write_text("# Capítulo II\n\nOtro texto.\n", encoding="utf-8")
    changed = library.ingest([novel], as_books=True, title="El ingenioso hidalgo")[0]
    retitled = library.ingest([novel], as_books=True, title="Don Quijote")[0]
    assert changed.changed and retitled.changed and retitled.document.title == "Don Quijote"
    assert [d.id for d in library.documents()] == [retitled.document.id]


def test_what_cannot_be_a_book_is_refused(tmp_path: Path) -> None:
    library = Library(tmp_path / "lib", embedder=HashingEmbedder())
    mixed = _write(tmp_path / "mixed", {"1.md": "# One\n\nText.\n", "2.pdf": "%PDF-1.4"})
    empty = _write(tmp_path / "empty", {"notes.png": "x"})
    for folder, reason in ((mixed, "2.pdf cannot be one"), (empty, "no Markdown, TXT or HTML"),
                           (mixed / "1.md", "takes a folder")):
        with pytest.raises(SourceError, match=reason):
            library.ingest([folder], as_books=True)
    with pytest.raises(InputError, match="a title names one book"):
        library.ingest([mixed], title="Without --as-book")
    with pytest.raises(InputError, match="a title names one book"):
        library.ingest([mixed, empty], as_books=True, title="Two folders")
    assert library.documents() == []


def test_the_cli_ingests_a_book_and_refuses_a_title_without_one(novel: Path, tmp_path: Path) -> None:
    lib = str(tmp_path / "lib")
    runner = CliRunner()
    result = runner.invoke(app, ["ingest", "--as-book", str(novel), "--title", "El ingenioso hidalgo", "--json",
                                 "--library", lib])
    assert result.exit_code == 0, result.output
    [doc] = json.loads(result.output)["documents"]
    assert doc["title"] == "El ingenioso hidalgo" and doc["files"] == 6 and doc["changed"]
    assert len(json.loads(runner.invoke(app, ["docs", "--json", "--library", lib]).output)["documents"]) == 1
    refused = runner.invoke(app, ["ingest", str(novel), "--title", "T", "--library", lib])
    assert refused.exit_code == 2 and "a title names one book" in refused.output
