"""Format readers: a path in, a ParsedDocument (or a typed SourceError) out.

``read_source`` picks the reader by file extension; ``iter_folder`` lists the readable files of a
folder tree in a stable order, each with the source name it is stored under. ``open_source`` opens a file
for both (``sources.files``): only a regular file within its format's byte limit, beneath a server's
``Root`` when there is one, so that what is hashed and what is read are the same open file.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path

from ..errors import SourceError, UnsupportedFormatError
from .base import ParsedDocument, ParsedFile, PreChunk, TocEntry
from .epub import check_zip_end, read_epub
from .files import Root, SourceFile, open_file
from .jsonl import read_jsonl
from .pdf import check_pdf_header, read_pdf
from .text import MAX_TEXT_BYTES, read_html, read_markdown, read_txt

__all__ = [
    "ParsedDocument",
    "ParsedFile",
    "PreChunk",
    "TocEntry",
    "Root",
    "SourceFile",
    "SUPPORTED_SUFFIXES",
    "open_source",
    "read_source",
    "iter_folder",
    "unsupported_files",
]

_READERS: dict[str, Callable[[SourceFile], ParsedDocument]] = {
    ".epub": read_epub,
    ".md": read_markdown,
    ".markdown": read_markdown,
    ".txt": read_txt,
    ".html": read_html,
    ".htm": read_html,
    ".xhtml": read_html,
    ".jsonl": read_jsonl,
}
_TEXT_SUFFIXES = frozenset({".md", ".markdown", ".txt", ".html", ".htm", ".xhtml"})
"""Formats whose document is its text alone: without any it could never be found or cited, so it is refused.
(A PDF or EPUB without text still has pages to look at; a chapter of an ``--as-book`` folder may be empty.)"""
_BYTE_LIMITS = dict.fromkeys((*_TEXT_SUFFIXES, ".jsonl"), MAX_TEXT_BYTES)
"""Formats read whole into memory have a size limit, checked before a byte is read; EPUB and PDF are read through
their stream (with their own limits on what they expand to)."""
_SHAPE_CHECKS: dict[str, Callable[[SourceFile], None]] = {".pdf": check_pdf_header, ".epub": check_zip_end}
"""What a file of a format read through its stream must hold where its parser first looks (a PDF's header, a ZIP's
end record): checked on opening, so a file that is not one is refused before it is hashed or parsed."""
log = logging.getLogger(__name__)
SUPPORTED_SUFFIXES: frozenset[str] = frozenset({*_READERS, ".pdf"})


def open_source(path: str | Path, *, root: Root | None = None) -> SourceFile:
    """Open a file of a supported type for reading (``sources.files.open_file`` with its format's byte limit, then
    its shape check); UnsupportedFormatError before anything is opened when its extension is not one."""
    path = Path(path)
    suffix = _supported_suffix(path)
    file = open_file(path, root=root, limit=_BYTE_LIMITS.get(suffix))
    check = _SHAPE_CHECKS.get(suffix)
    try:
        if check is not None:
            check(file)
    except BaseException:
        file.close()
        raise
    return file


def read_source(source: str | Path | SourceFile, *, password: str | None = None) -> ParsedDocument:
    """Read one file by its extension (case-insensitive): a path, or a file from ``open_source``. ``password``
    only matters for PDFs."""
    if not isinstance(source, SourceFile):
        with open_source(source) as file:
            return read_source(file, password=password)
    path = source.path
    suffix = _supported_suffix(path)
    if suffix == ".pdf":
        return read_pdf(source, password=password)
    document = _READERS[suffix](source)
    if suffix in _TEXT_SUFFIXES and not any(file.has_text for file in document.files):
        raise SourceError(path, "no text to index (the file is empty, or holds only whitespace or markup)")
    return document


def _supported_suffix(path: Path) -> str:
    """The file's extension in lower case, or UnsupportedFormatError listing the ones read."""
    suffix = path.suffix.lower()
    if suffix not in SUPPORTED_SUFFIXES:
        supported = ", ".join(sorted(SUPPORTED_SUFFIXES))
        raise UnsupportedFormatError(path, f"unsupported file type {suffix or '(no extension)'!r}; "
                                           f"supported: {supported}")
    return suffix


def iter_folder(folder: str | Path, *, contained: bool = False) -> Iterator[tuple[Path, str]]:
    """Yield (path, source name) for every supported file under ``folder``, recursively.

    The source name is the POSIX path relative to ``folder``, so the same tree gets the same names
    on any OS. Order is by source name; hidden files and folders (".git", ".DS_Store") and files of
    other types are skipped; symlinked folders are not followed (no cycles).

    ``contained``: also skip symlinked files whose target lies outside ``folder`` (logged). A server
    indexing a folder on behalf of HTTP clients must only ever serve what is in it: ``ln -s /etc/passwd
    kb/pw.txt`` would otherwise publish the server's files to whoever may read the library.
    """
    root = Path(folder)
    inside = root.resolve()
    found: list[tuple[str, Path]] = []
    for path in _visible_files(root):
        if path.suffix.lower() not in SUPPORTED_SUFFIXES:
            continue
        if contained and _leads_out(path, inside):
            log.warning("%s: skipped, a symlink leading out of %s", path, root)
            continue
        found.append((path.relative_to(root).as_posix(), path))
    for source, path in sorted(found):
        yield path, source


def unsupported_files(folder: str | Path) -> list[Path]:
    """The files under ``folder`` that :func:`iter_folder` passes over for their type (hidden ones aside), in
    name order: what a user who ingested the folder and got nothing needs to be told."""
    return sorted(path for path in _visible_files(Path(folder)) if path.suffix.lower() not in SUPPORTED_SUFFIXES)


def _visible_files(root: Path) -> Iterator[Path]:
    """Every file under ``root`` outside hidden files and folders; symlinked folders are not followed."""
    if not root.is_dir():
        raise SourceError(root, "not a folder")
    for directory, subdirectories, filenames in os.walk(root):
        subdirectories[:] = [name for name in subdirectories if not name.startswith(".")]
        yield from (Path(directory, name) for name in filenames if not name.startswith("."))


def _leads_out(path: Path, inside: Path) -> bool:
    """True for a symlink whose target is not under ``inside`` (a broken or looping link counts as leading out)."""
    if not path.is_symlink():
        return False
    try:
        return not path.resolve(strict=True).is_relative_to(inside)
    except (OSError, RuntimeError):
        return True
