"""Plain-text readers: Markdown, TXT and standalone HTML, each one file with headings as TOC.

Markdown stays Markdown: the canonical text is the source with line endings normalised, so a
citation shows exactly what the author wrote. TXT has no markup, so its TOC is a heuristic.
"""

from __future__ import annotations

import codecs
import re
from pathlib import Path

from ..errors import SourceError
from .base import ParsedDocument, ParsedFile, TocEntry
from .files import Source, SourceFile, opened
from .structure import gutenberg_spans, text_structure, title_page
from .xhtml import Heading, html_to_text, xhtml_to_text

__all__ = ["read_markdown", "read_txt", "read_html", "decode_text", "markdown_headings", "txt_headings",
           "stem_title", "MAX_TEXT_BYTES"]

MAX_TEXT_BYTES = 256 * 1024 * 1024
"""A bigger text file is not a book; refusing it early keeps memory bounded."""

_UNICODE_BOMS = ((codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"),
                 (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))
"""UTF-32's marks first: its little-endian one starts with UTF-16's."""

_BINARY_CONTROL = re.compile("[\x00-\x08\x0e-\x1a\x1c-\x1f\x7f-\x9f]")
"""Control characters no text uses (tab, line breaks, form feed and the ESC of coloured logs are text)."""
_BINARY_SAMPLE, _BINARY_SHARE = 65_536, 20
"""A text is binary data when more than 1 in 20 of its first 64 Ki characters are such controls: random or
compressed bytes (a PDF, a ZIP) give about 1 in 4, UTF-16 without its mark 1 in 2, while a
stray NUL in a real text (a log's crash padding, an editor's slip) is read, as U+FFFD (``ParsedFile``)."""

_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_LIST_OR_QUOTE = re.compile(r"^ {0,3}(?:[-*+>]|\d+[.)])(?:\s|$)")


def decode_text(data: bytes) -> tuple[str, str]:
    """Decode as UTF-8; if that fails, cp1252, and as a last resort latin-1, which never fails.
    Returns (text, encoding). Line endings become "\\n"; the text starts after its byte-order marks.

    Strict UTF-8 first because valid UTF-8 is almost never accidental; cp1252 covers the "smart
    quotes" of Windows-made files; latin-1 maps every byte so nothing is ever replaced by U+FFFD.
    A UTF-32 or UTF-16 byte-order mark (what Windows tools write for "Unicode") is believed when the
    rest decodes with it; binary data is the caller's to refuse (:func:`_read_text`: NUL characters).
    UTF-8 marks are dropped before any of these, however many: a file that an editor saved with a second
    mark, or with a mark before cp1252 text, opened its first chunk with U+FEFF or "ï»¿". A document already
    stored keeps its text until its file changes (or ``--force-rebuild``), so the tags into it stay valid.
    """
    for bom, encoding in _UNICODE_BOMS:
        if data.startswith(bom):
            try:
                text = data.decode(encoding)
            except UnicodeDecodeError:
                break
            return _canonical(text), encoding
    unmarked = data
    while unmarked.startswith(codecs.BOM_UTF8):
        unmarked = unmarked[len(codecs.BOM_UTF8):]
    for encoding in ("utf-8", "cp1252", "latin-1"):
        try:
            text = unmarked.decode(encoding)
        except UnicodeDecodeError:
            continue
        return _canonical(text), encoding
    raise AssertionError("latin-1 decodes any bytes")


def _canonical(text: str) -> str:
    """Decoded text without leading byte-order marks, its line endings "\\n"."""
    return text.lstrip("\ufeff").replace("\r\n", "\n").replace("\r", "\n")


def read_markdown(source: Source) -> ParsedDocument:
    """A Markdown file as one file; ATX (``#``) and setext (underlined) headings become the TOC.

    With fewer than two such headings, the headings printed books use in plain text are looked for instead
    ("STAVE ONE" in capitals); a Gutenberg header, a title page and a contents list are handled as in TXT.
    """
    with opened(source, limit=MAX_TEXT_BYTES) as file:
        text, warnings = _read_text(file)
    headings = markdown_headings(text)
    structure = text_structure(text, headings)
    document = _document(file.path, "markdown", text, structure.headings, warnings, structure.body)
    _name(document, structure.title or _title_line(text, headings) or (headings[0].title if headings else None),
          structure.author)
    return document


def _title_line(text: str, headings: list[Heading]) -> str | None:
    """The first line of a Markdown book when it is its title page's title: a short line in capitals or title
    case, not itself a heading, before the first heading ("  A CHRISTMAS CAROL", an illustration's caption,
    then "## STAVE ONE"). A book whose first line is its ``# Title`` heading takes that heading instead."""
    stripped = text.lstrip()
    line = stripped.split("\n", 1)[0].strip().strip("*_").strip()
    offset = len(text) - len(stripped)
    if not headings or offset >= headings[0].offset or _ATX.match(line) or line.startswith(("[", "!", "<")):
        return None
    letters = [ch for ch in line if ch.isalpha()]
    return line if 0 < len(line) <= 100 and len(letters) >= 3 and all(ch.isupper() for ch in letters) else None


def read_txt(source: Source) -> ParsedDocument:
    """A plain-text file as one file; lines that look like headings become the TOC (:mod:`.structure`).

    The title is the Gutenberg header's, else the title page's (:func:`.structure.title_page`): its first line
    when it is short, or the line under an author's name: a plain-text book opens with its title page, while its
    first heading-like line is usually a part or chapter ("INFERNO"). A text that opens with a chapter's numeral
    or its first sentence has no title page, and is titled by its file's name. The licence, title page and
    contents list lie outside the file's ``body``, so they are never chunked.
    """
    with opened(source, limit=MAX_TEXT_BYTES) as file:
        text, warnings = _read_text(file)
    structure = text_structure(text)
    document = _document(file.path, "text", text, structure.headings, warnings, structure.body)
    page_title, page_author = title_page(text, structure.headings[0].offset if structure.headings else len(text))
    _name(document, structure.title or page_title or stem_title(file.path), structure.author or page_author)
    return document


def stem_title(path: Path) -> str:
    """The title a file without one gets: its name, underscores as spaces (``Christmas_Carol`` -> ``Christmas
    Carol``)."""
    return " ".join(path.stem.replace("_", " ").split()) or path.stem


def read_html(source: Source) -> ParsedDocument:
    """A standalone HTML/XHTML file as one file; its ``<h1>``..``<h6>`` become the TOC. A Project Gutenberg
    edition's header and licence, before its START line and after its END line, lie outside the ``body``."""
    with opened(source, limit=MAX_TEXT_BYTES) as file:
        data = file.read()
    path = file.path
    parsed = (xhtml_to_text if path.suffix.lower() == ".xhtml" else html_to_text)(data, path)
    headings = [heading for heading in parsed.headings if heading.title]
    book = gutenberg_spans([parsed.text])
    document = _document(path, "html", parsed.text, headings, [], book[0] if book else None)
    document.title = parsed.title or document.title
    return document


def _read_text(file: SourceFile) -> tuple[str, list[str]]:
    """The file's text, or SourceError when it is binary data, which cp1252/latin-1 would otherwise turn into a
    "document" of mojibake titled with NUL characters."""
    text, encoding = decode_text(file.read())
    sample = text[:_BINARY_SAMPLE]
    controls = len(_BINARY_CONTROL.findall(sample))
    if controls * _BINARY_SHARE > len(sample):
        raise SourceError(file.path, f"binary data, not text: {controls} of its first {len(sample)} characters are "
                                "NUL or other control characters (UTF-16 or UTF-32 text needs its byte-order mark)")
    warnings = [] if encoding == "utf-8" else [f"not valid UTF-8; decoded as {encoding}"]
    return text, warnings


def _document(path: Path, fmt: str, text: str, headings: list[Heading], warnings: list[str],
              body: tuple[int, int] | None = None) -> ParsedDocument:
    """One-file document; TOC levels are shifted so the shallowest heading is level 0."""
    top = min((heading.level for heading in headings), default=0)
    toc = [TocEntry(heading.title, heading.level - top, 0, heading.offset) for heading in headings]
    title = headings[0].title if headings else stem_title(path)
    files = [ParsedFile(text, title=title, label=path.name, has_text=bool(text.strip()), body=body)]
    return ParsedDocument(title=title, format=fmt, files=files, toc=toc, warnings=warnings)


def _name(document: ParsedDocument, title: str | None, author: str | None) -> None:
    """Give the document (and its one file) the title found in its header, and record the author."""
    if title:
        document.title = document.files[0].title = title
    if author:
        document.metadata["creator"] = author


def _lines(text: str) -> list[tuple[int, str]]:
    """(offset, line) for every line, without its newline."""
    lines: list[tuple[int, str]] = []
    position = 0
    for line in text.split("\n"):
        lines.append((position, line))
        position += len(line) + 1
    return lines


def markdown_headings(text: str) -> list[Heading]:
    """ATX and setext headings outside fenced code; offsets point at the heading line's start.

    A setext underline only counts under a single-line paragraph (not a list item or quote), which
    keeps "---" horizontal rules and underlined lists from turning into headings.
    """
    headings: list[Heading] = []
    fence: str | None = None
    lines = _lines(text)
    for index, (offset, line) in enumerate(lines):
        fence_match = _FENCE.match(line)
        if fence_match:
            marker = fence_match.group(1)
            if fence is None:
                fence = marker[0] * len(marker)
            elif marker.startswith(fence):
                fence = None
            continue
        if fence is not None:
            continue
        atx = _ATX.match(line)
        if atx and (atx.group(2) or "").strip():
            headings.append(Heading(len(atx.group(1)), atx.group(2).strip(), offset))
            continue
        setext = _SETEXT.match(line)
        if setext and index and _is_setext_title(lines, index - 1):
            previous_offset, previous = lines[index - 1]
            level = 1 if setext.group(1)[0] == "=" else 2
            headings.append(Heading(level, previous.strip(), previous_offset))
    return headings


def _is_setext_title(lines: list[tuple[int, str]], index: int) -> bool:
    line = lines[index][1]
    before = lines[index - 1][1] if index else ""
    return (bool(line.strip()) and not before.strip() and not _ATX.match(line)
            and not _LIST_OR_QUOTE.match(line) and not line.startswith(("    ", "\t")))


def txt_headings(text: str) -> list[Heading]:
    """The headings of a plain-text book: keyword lines ("Chapter I", "Canto XII", "Inferno: Canto I", "STAVE
    ONE"), numerals alone that count up like chapters ("II."), lines a contents list names, and a part's title
    in capitals above its first chapter ("INFERNO"). Parts are level 0, chapters 1."""
    return text_structure(text).headings
