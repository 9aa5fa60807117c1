"""PDF reader: one file per page, the outline as TOC. pypdfium2 first, pypdf when pdfium cannot.

Page text is pdfium's text layer with line breaks kept as single newlines. pdfium marks a word it
re-joined across a line-end hyphen with U+0002 ("cap\\x02ture"); that marker is dropped, so the
canonical text reads "capture", which is what a reader (and a search) expects. Blank lines only
appear where the PDF's text layer has empty lines; no layout analysis guesses paragraphs.

Encrypted files are opened with the given password (also in its SASLprep form, which AES-256 PDFs
require) or none; if pdfium refuses, pypdf gets a try (it accepts some owner passwords pdfium does not).
A page pdfium cannot load or extract is read with pypdf, or kept empty with a warning.

pdfium is not thread-safe, so every pdfium call here runs under one process-wide lock.

Neither parser is handed a file that cannot be a PDF: one without ``%PDF-`` in its first 1024 bytes (pdfium's own
rule) is refused before either reads it (``check_pdf_header``, which ``sources.open_source`` applies before the
file is hashed). pypdf, the fallback, reads lines backwards from the end a byte at a time until it meets
``%%EOF`` and then ``startxref``, and rebuilds a broken cross-reference table from the whole file in memory; so it
gets a file only when its last ``PYPDF_TAIL_BYTES`` hold that trailer, each keyword starting a line, and the file
is at most ``MAX_PYPDF_BYTES``. A file pdfium cannot read and pypdf may not is refused with both reasons.
"""

from __future__ import annotations

import itertools
import re
import stringprep
import threading
import unicodedata
from collections.abc import Iterator
from pathlib import Path

import pypdf
import pypdfium2 as pdfium
import pypdfium2.raw as pdfium_c
from pypdf.generic import Destination

from ..errors import EncryptedSourceError, SourceError
from .base import ParsedDocument, ParsedFile, TocEntry
from .files import Source, SourceFile, opened
from .pdf_front import leave_out_front_matter
from .pdf_running_lines import mark_running_lines

__all__ = ["read_pdf", "check_pdf_header", "clean_page_text", "MAX_TOC_DEPTH", "MAX_TOC_ENTRIES",
           "HEADER_BYTES", "PYPDF_TAIL_BYTES", "MAX_PYPDF_BYTES"]

MAX_TOC_DEPTH = 16
MAX_TOC_ENTRIES = 10_000
"""Outlines are attacker-controlled trees; beyond these bounds they are noise (pdfium also breaks cycles)."""

# U+0002: pdfium's "hyphen removed at line end" marker; U+FFFE the same in get_text_range; the rest
# are C0 controls that are never text. Tab and newline survive.
_DROP_CHARS = dict.fromkeys([c for c in range(32) if c not in (9, 10)] + [0xFFFE, 0xFFFF])
_BLANK_RUNS = re.compile(r"\n{3,}")
_PDFIUM_LOCK = threading.Lock()
HEADER_BYTES = 1024
"""Where a PDF's ``%PDF-`` must start: pdfium opens no file without it there."""
PYPDF_TAIL_BYTES = 64 * 1024
"""How far from the end pypdf may have to look for the trailer it starts from (``startxref``, offset, ``%%EOF``)."""
MAX_PYPDF_BYTES = 256 * 1024 * 1024
"""The largest file given to pypdf: it reads a broken file whole into memory to rebuild its cross-references."""
_TRAILER = re.compile(rb"(?:^|[\r\n])startxref[ \t\r\n\f\x00]*[+-]?\d+[ \t\r\n\f\x00]*%%EO")
"""The end of a PDF as pypdf finds it: ``startxref`` at a line's start, the offset, then ``%%EOF`` (whose last
letter a truncated file may lack)."""


class _PdfiumFailed(Exception):
    """pdfium could not open the file for a reason other than the password."""


class _NotForPypdf(Exception):
    """The file is not one pypdf may read in bounded time and memory (``_pypdf_reader`` says why)."""


class _PasswordRejected(Exception):
    """pdfium says the file is encrypted and the password (or none) does not open it."""


def read_pdf(source: Source, *, password: str | None = None) -> ParsedDocument:
    """Read a PDF; EncryptedSourceError when the password does not open it, SourceError when unreadable.

    Running headers and footers are kept out of each page's body, and printed page numbers label the pages
    of a PDF without labels (``sources.pdf_running_lines``); so are a Project Gutenberg licence and the
    contents and lists of figures its outline names (``sources.pdf_front``)."""
    with opened(source) as file:
        check_pdf_header(file)
        return leave_out_front_matter(mark_running_lines(_read_pdf(file, password)))


def check_pdf_header(file: SourceFile) -> None:
    """SourceError unless ``%PDF-`` starts within the file's first ``HEADER_BYTES``: what pdfium needs to open it,
    checked before any parser (or the hash of a large file) reads the rest."""
    if file.size == 0:
        raise SourceError(file.path, "empty file (0 bytes), not a PDF")
    if b"%PDF-" not in file.head(HEADER_BYTES + 4):
        raise SourceError(file.path, f"not a PDF: no %PDF- header in its first {HEADER_BYTES} bytes")


def _pypdf_reader(file: SourceFile) -> pypdf.PdfReader:
    """pypdf's reader of the file; _NotForPypdf, before pypdf reads it, when the file is larger than it may read
    or its end lacks the trailer pypdf starts from (pypdf would then walk back through the whole file)."""
    if file.size > MAX_PYPDF_BYTES:
        raise _NotForPypdf(f"{file.size} bytes is more than the {MAX_PYPDF_BYTES} it reads")
    if not _TRAILER.search(file.tail(PYPDF_TAIL_BYTES)):
        raise _NotForPypdf(f"no startxref and %%EOF trailer in the last {PYPDF_TAIL_BYTES} bytes")
    return pypdf.PdfReader(file.stream(), strict=False)


def _read_pdf(file: SourceFile, password: str | None) -> ParsedDocument:
    try:
        parsed, failed_pages = _read_with_pdfium(file, password)
    except _PasswordRejected:
        return _read_encrypted_with_pypdf(file, password)
    except _PdfiumFailed as exc:
        return _read_with_pypdf(file, password, f"pdfium: {exc}")
    if failed_pages:
        _fill_pages_with_pypdf(file, password, parsed, failed_pages)
    return parsed


def _read_with_pdfium(file: SourceFile, password: str | None) -> tuple[ParsedDocument, dict[int, str]]:
    """Everything pdfium does for one file, under the lock."""
    with _PDFIUM_LOCK:
        document = _open_pdfium(file, password)
        try:
            return _read_pdfium_document(file.path, document)
        finally:
            document.close()


def _password_candidates(password: str | None) -> list[str | None]:
    if password is None:
        return [None]
    return list(dict.fromkeys([password, _saslprep(password)]))


def _saslprep(password: str) -> str:
    """RFC 4013 mapping + NFKC, as PDF 2.0 prescribes for AES-256 passwords ("SªSL\\xadprep" -> "SaSLprep")."""
    mapped = "".join(" " if stringprep.in_table_c12(ch) else ch for ch in password if not stringprep.in_table_b1(ch))
    return unicodedata.normalize("NFKC", mapped)


def _open_pdfium(file: SourceFile, password: str | None) -> pdfium.PdfDocument:
    """pdfium reads the opened file through its stream (``sources.files``), not by its name."""
    for candidate in _password_candidates(password):
        try:
            return pdfium.PdfDocument(file.stream(), password=candidate)
        except pdfium.PdfiumError as exc:
            if getattr(exc, "err_code", None) != pdfium_c.FPDF_ERR_PASSWORD:
                raise _PdfiumFailed(str(exc)) from exc
        except (OSError, ValueError) as exc:
            raise _PdfiumFailed(str(exc)) from exc
    raise _PasswordRejected()


def clean_page_text(raw: str) -> str:
    """Normalise a page's text layer: "\\n" line ends, no control characters or trailing blanks, at
    most one blank line in a row, nothing leading or trailing."""
    text = raw.replace("\r\n", "\n").replace("\r", "\n").translate(_DROP_CHARS)
    text = "\n".join(line.rstrip() for line in text.split("\n"))
    return _BLANK_RUNS.sub("\n\n", text).strip("\n")


def _read_pdfium_document(path: Path, document: pdfium.PdfDocument) -> tuple[ParsedDocument, dict[int, str]]:
    """The document as pdfium reads it, plus the pages it could not read (index -> why)."""
    files: list[ParsedFile] = []
    failed: dict[int, str] = {}
    for index in range(len(document)):
        label = _pdfium_label(document, index)
        try:
            text = _pdfium_page_text(document, index)
        except pdfium.PdfiumError as exc:
            failed[index] = str(exc)
            text = ""
        files.append(ParsedFile(text, label=label, has_text=bool(text.strip())))
    if not files:
        raise SourceError(path, "the PDF has no pages")
    toc = list(itertools.islice(_pdfium_outline(document, len(files)), MAX_TOC_ENTRIES))
    return _document(path, files, toc, _pdfium_info(document), []), failed


def _pdfium_page_text(document: pdfium.PdfDocument, index: int) -> str:
    page = document[index]
    try:
        textpage = page.get_textpage()
        try:
            return clean_page_text(textpage.get_text_bounded())
        finally:
            textpage.close()
    finally:
        page.close()


def _pdfium_label(document: pdfium.PdfDocument, index: int) -> str:
    try:
        label = (document.get_page_label(index) or "").strip()
    except pdfium.PdfiumError:
        label = ""
    return label or str(index + 1)


def _pdfium_outline(document: pdfium.PdfDocument, page_count: int) -> Iterator[TocEntry]:
    for bookmark in document.get_toc(max_depth=MAX_TOC_DEPTH):
        title = " ".join((bookmark.get_title() or "").split())
        dest = bookmark.get_dest()
        page = dest.get_index() if dest is not None else None
        if title and page is not None and 0 <= page < page_count:
            yield TocEntry(title, bookmark.level, page, 0)


def _pdfium_info(document: pdfium.PdfDocument) -> dict[str, str]:
    try:
        info = document.get_metadata_dict(skip_empty=True)
    except pdfium.PdfiumError:
        return {}
    return {key: " ".join(str(value).split()) for key, value in info.items()}


def _document(path: Path, files: list[ParsedFile], toc: list[TocEntry], info: dict[str, str],
              warnings: list[str]) -> ParsedDocument:
    """Assemble the document: title from the info dictionary, else the file name."""
    for entry in toc:
        page = files[entry.file_index]
        page.title = page.title or entry.title
    metadata = {"creator": info["Author"]} if info.get("Author") else {}
    return ParsedDocument(title=info.get("Title") or path.stem, format="pdf", files=files, toc=toc,
                          metadata=metadata, warnings=warnings)


def _fill_pages_with_pypdf(file: SourceFile, password: str | None, document: ParsedDocument,
                           failed: dict[int, str]) -> None:
    """Give pages pdfium could not read to pypdf; a page neither reads stays empty, with a warning."""
    try:
        reader = _pypdf_reader(file)
        if reader.is_encrypted:
            _pypdf_decrypt(reader, password)
    except Exception:  # noqa: BLE001 - see _read_with_pypdf
        reader = None
    for index, why in failed.items():
        text = None
        if reader is not None:
            try:
                text = clean_page_text(reader.pages[index].extract_text() or "")
            except Exception:  # noqa: BLE001 - see _read_with_pypdf
                text = None
        if text is None:
            document.warnings.append(f"page {index + 1}: pdfium failed ({why}) and so did pypdf; kept empty")
            continue
        page = document.files[index]
        page.text, page.has_text = text, bool(text.strip())
        document.warnings.append(f"page {index + 1}: pdfium failed ({why}); read with pypdf")


def _read_encrypted_with_pypdf(file: SourceFile, password: str | None) -> ParsedDocument:
    """pdfium refused the password; pypdf opens some files pdfium will not (owner passwords).
    If pypdf cannot either, the answer the user needs is about the password, not about pypdf."""
    try:
        return _read_with_pypdf(file, password, "pdfium rejected the password")
    except SourceError as exc:
        if not password:
            reason = "a password is needed to open it"
        elif isinstance(exc.__cause__, pypdf.errors.DependencyError):
            reason = "pdfium rejected the password and pypdf needs the optional 'cryptography' package to try it"
        else:
            reason = "the password given does not open it"
        raise EncryptedSourceError(file.path, f"encrypted; {reason}") from exc


def _read_with_pypdf(file: SourceFile, password: str | None, why_not_pdfium: str) -> ParsedDocument:
    """The fallback reader. pypdf raises many untyped exceptions on broken files; all of them are
    mapped to SourceError here, the one boundary where pypdf is called."""
    path = file.path
    try:
        reader = _pypdf_reader(file)
        if reader.is_encrypted and not _pypdf_decrypt(reader, password):
            reason = "the password given does not open it" if password else "a password is needed to open it"
            raise EncryptedSourceError(path, f"encrypted; {reason}")
        warnings = [f"read with pypdf ({why_not_pdfium})"]
        labels = _pypdf_labels(reader)
        files = [_pypdf_page(reader, index, labels, warnings) for index in range(len(reader.pages))]
        if not files:
            raise SourceError(path, "the PDF has no pages")
        toc = list(itertools.islice(_pypdf_outline(reader, len(files)), MAX_TOC_ENTRIES))
        info = {key.lstrip("/"): " ".join(str(value).split()) for key, value in (reader.metadata or {}).items()}
    except _NotForPypdf as exc:
        raise SourceError(path, f"not a readable PDF ({why_not_pdfium}; not given to pypdf: {exc})") from exc
    except SourceError:
        raise
    except pypdf.errors.DependencyError as exc:
        raise EncryptedSourceError(path, f"encrypted with a cipher that needs an optional package ({exc})") from exc
    except Exception as exc:  # noqa: BLE001 - pypdf's failure modes on fuzzed input are untyped
        raise SourceError(path, f"not a readable PDF ({why_not_pdfium}; pypdf: {type(exc).__name__}: {exc})") from exc
    return _document(path, files, toc, info, warnings)


def _pypdf_decrypt(reader: pypdf.PdfReader, password: str | None) -> bool:
    return any(reader.decrypt(candidate or "") for candidate in _password_candidates(password))


def _pypdf_labels(reader: pypdf.PdfReader) -> list[str]:
    """Page labels, or none when the label tree is broken (page numbers then serve)."""
    try:
        return [str(label).strip() for label in reader.page_labels]
    except Exception:  # noqa: BLE001 - see _read_with_pypdf
        return []


def _pypdf_page(reader: pypdf.PdfReader, index: int, labels: list[str], warnings: list[str]) -> ParsedFile:
    label = (labels[index] if index < len(labels) else "") or str(index + 1)
    try:
        text = clean_page_text(reader.pages[index].extract_text() or "")
    except pypdf.errors.DependencyError:
        raise
    except Exception as exc:  # noqa: BLE001 - see _read_with_pypdf
        warnings.append(f"page {index + 1} text could not be extracted ({type(exc).__name__}); kept empty")
        text = ""
    return ParsedFile(text, label=label, has_text=bool(text.strip()))


def _pypdf_outline(reader: pypdf.PdfReader, page_count: int) -> Iterator[TocEntry]:
    """Walk pypdf's nested-list outline with an explicit stack, bounded in depth and cycle-safe."""
    stack: list[tuple[Iterator[object], int]] = [(iter(reader.outline), 0)]
    seen: set[int] = set()
    while stack:
        node = next(stack[-1][0], None)
        if node is None:
            stack.pop()
            continue
        level = stack[-1][1]
        if isinstance(node, list):
            if level + 1 < MAX_TOC_DEPTH and id(node) not in seen:
                seen.add(id(node))
                stack.append((iter(node), level + 1))
            continue
        if not isinstance(node, Destination):
            continue
        title = " ".join(str(node.title or "").split())
        page = reader.get_destination_page_number(node)
        if title and page is not None and 0 <= page < page_count:
            yield TocEntry(title, level, page, 0)
