"""A folder of Markdown, TXT or HTML chapters read as one book (``chapterverse ingest --as-book``).

Ingested file by file, a novel split into chapter files becomes a hundred documents ("Capítulo I" twice, titles
like ``19-Capítulo_19``), and ``--doc`` can no longer scope a question to the novel. As a book it is one
document whose files are its chapters, in natural order (``2`` before ``10``, folders in the same order), each
cited by its path; the TOC is the chapters' own headings, under an entry per subfolder ("Primera Parte"), and a
chapter without a heading gets an entry named after its file.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from ..errors import SourceError
from .base import ParsedDocument, ParsedFile, TocEntry
from .structure import gutenberg_spans
from .text import read_html, read_markdown, read_txt, stem_title

__all__ = ["CHAPTER_READERS", "book_files", "natural_key", "pretty_name", "read_book"]

CHAPTER_READERS: dict[str, Callable[[Path], ParsedDocument]] = {
    ".md": read_markdown, ".markdown": read_markdown, ".txt": read_txt,
    ".html": read_html, ".htm": read_html, ".xhtml": read_html,
}
"""The chapter formats by suffix: each reader gives a single-file document."""

_OTHER_DOCUMENTS = frozenset({".epub", ".pdf", ".jsonl"})
_NUMBER_PREFIX = re.compile(r"^\d+[\s._-]+(?=\S)")


def natural_key(relative: Path) -> list[list[str | int]]:
    """Order by path component, digits compared as numbers: ``Capítulo_2`` before ``Capítulo_10``.

    Every component splits into text at even and numbers at odd positions, so two keys always compare.
    """
    return [[int(piece) if n % 2 else piece.casefold() for n, piece in enumerate(re.split(r"(\d+)", part))]
            for part in relative.parts]


def pretty_name(name: str) -> str:
    """A file or folder name as a title: ``01-Primera_Parte`` -> ``Primera Parte``."""
    return _NUMBER_PREFIX.sub("", name).replace("_", " ").strip() or name


def book_files(folder: Path) -> list[Path]:
    """The chapter files under ``folder``, recursively, in natural order; hidden files and folders skipped.

    SourceError when there are none, or when the folder also holds EPUB, PDF or JSONL documents, which are
    books or collections of their own and cannot be chapters.
    """
    if not folder.is_dir():
        raise SourceError(folder, "--as-book takes a folder of chapters")
    found: list[Path] = []
    others: list[str] = []
    for path in folder.rglob("*"):
        relative = path.relative_to(folder)
        if any(part.startswith(".") for part in relative.parts) or not path.is_file():
            continue
        suffix = path.suffix.lower()
        if suffix in CHAPTER_READERS:
            found.append(relative)
        elif suffix in _OTHER_DOCUMENTS:
            others.append(relative.as_posix())
    if others:
        raise SourceError(folder, f"a book's chapters are Markdown, TXT or HTML files; {', '.join(sorted(others))} "
                                  "cannot be one (ingest it on its own)")
    if not found:
        raise SourceError(folder, "no Markdown, TXT or HTML files to make a book of")
    return [folder / relative for relative in sorted(found, key=natural_key)]


def read_book(folder: str | Path, *, title: str | None = None) -> ParsedDocument:
    """The chapter files of ``folder`` as one document titled ``title`` (default: the folder's name)."""
    folder = Path(folder)
    files: list[ParsedFile] = []
    toc: list[TocEntry] = []
    formats: set[str] = set()
    warnings: list[str] = []
    opened: tuple[str, ...] = ()
    for index, path in enumerate(book_files(folder)):
        relative = path.relative_to(folder)
        chapter = CHAPTER_READERS[path.suffix.lower()](path)
        folders = relative.parts[:-1]
        shared = next((n for n, (a, b) in enumerate(zip(opened, folders)) if a != b), min(len(opened), len(folders)))
        toc += [TocEntry(pretty_name(name), level, index, 0) for level, name in enumerate(folders) if level >= shared]
        opened = folders
        entries = chapter.toc or [TocEntry(pretty_name(path.stem), 0, 0, 0)]
        toc += [TocEntry(e.title, len(folders) + e.level, index, e.offset) for e in entries]
        file = chapter.files[0]
        name = pretty_name(path.stem) if file.title in (path.stem, stem_title(path)) else file.title
        files.append(ParsedFile(file.text, title=name, label=relative.as_posix(), has_text=file.has_text,
                                body=file.body, left_out=file.left_out))
        formats.add(chapter.format)
        warnings += [f"{relative.as_posix()}: {warning}" for warning in chapter.warnings]
    for file, span in zip(files, gutenberg_spans([file.text for file in files]) or ()):
        file.narrow(*span)  # a Gutenberg edition cut into chapter files: the licence after END in the last one
    return ParsedDocument(title=title or pretty_name(folder.resolve().name), format=formats.pop() if len(formats) == 1
                          else "mixed", files=files, toc=toc, warnings=warnings)
