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
from .xhtml import Heading, html_to_text, xhtml_to_text

__all__ = ["read_markdown", "read_txt", "read_html", "decode_text", "markdown_headings", "txt_headings",
           "MAX_TEXT_BYTES"]

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
_TXT_KEYWORD = re.compile(
    r"^(?:[\w’' ]{1,30}:\s*)?(?:(?P<major>part|book|volume|libro|parte|livre|teil)|chapter|canto|section|act|"
    r"scene|prologue|epilogue|preface|introduction|appendix|cap[ií]tulo|chapitre|kapitel)\b", re.IGNORECASE)


def decode_text(data: bytes) -> tuple[str, str]:
    """Decode as UTF-8 (BOM stripped); if that fails, cp1252, and as a last resort latin-1, which
    never fails. Returns (text, encoding). Line endings become "\\n".

    Strict UTF-8 first because valid UTF-8 is almost never accidental; cp1252 covers the "smart
    quotes" of Windows-made files; latin-1 maps every byte so nothing is ever replaced by U+FFFD.
    A UTF-32 or UTF-16 byte-order mark (what Windows tools write for "Unicode") is believed when the
    rest decodes with it; binary data is the caller's to refuse (:func:`_read_text`: NUL characters).
    """
    for bom, encoding in _UNICODE_BOMS:
        if data.startswith(bom):
            try:
                text = data.decode(encoding)
            except UnicodeDecodeError:
                break
            return text.replace("\r\n", "\n").replace("\r", "\n"), encoding
    for encoding in ("utf-8-sig", "cp1252", "latin-1"):
        try:
            text = data.decode(encoding)
        except UnicodeDecodeError:
            continue
        return text.replace("\r\n", "\n").replace("\r", "\n"), encoding.removesuffix("-sig")
    raise AssertionError("latin-1 decodes any bytes")


def read_markdown(source: Source) -> ParsedDocument:
    """A Markdown file as one file; ATX (``#``) and setext (underlined) headings become the TOC."""
    with opened(source, limit=MAX_TEXT_BYTES) as file:
        text, warnings = _read_text(file)
    return _document(file.path, "markdown", text, markdown_headings(text), warnings)


def read_txt(source: Source) -> ParsedDocument:
    """A plain-text file as one file; lines that look like headings become the TOC.

    The title is the first line when it is short: a plain-text book opens with its title page,
    while its first heading-like line is usually a part or chapter ("INFERNO").
    """
    with opened(source, limit=MAX_TEXT_BYTES) as file:
        text, warnings = _read_text(file)
    document = _document(file.path, "text", text, txt_headings(text), warnings)
    first_line = next((line.strip() for line in text.split("\n", 50) if line.strip()), "")
    document.title = document.files[0].title = first_line if 0 < len(first_line) <= 100 else file.path.stem
    return document


def read_html(source: Source) -> ParsedDocument:
    """A standalone HTML/XHTML file as one file; its ``<h1>``..``<h6>`` become the TOC."""
    with opened(source, limit=MAX_TEXT_BYTES) as file:
        data = file.read()
    path = file.path
    parsed = (xhtml_to_text if path.suffix.lower() == ".xhtml" else html_to_text)(data, path)
    headings = [heading for heading in parsed.headings if heading.title]
    document = _document(path, "html", parsed.text, headings, [])
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


def _document(path: Path, fmt: str, text: str, headings: list[Heading], warnings: list[str]) -> ParsedDocument:
    """One-file document; TOC levels are shifted so the shallowest heading is level 0."""
    top = min((heading.level for heading in headings), default=0)
    toc = [TocEntry(heading.title, heading.level - top, 0, heading.offset) for heading in headings]
    title = headings[0].title if headings else path.stem
    files = [ParsedFile(text, title=title, label=path.name, has_text=bool(text.strip()))]
    return ParsedDocument(title=title, format=fmt, files=files, toc=toc, warnings=warnings)


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
    """Lines standing alone between blank lines that read like headings.

    Two kinds: keyword lines ("Chapter I", "Canto XII", "Inferno: Canto I", "PART ONE") and short
    all-caps lines ("INFERNO"). Parts, books and volumes and the all-caps lines are level 0, other
    keyword lines level 1, so a book of parts and chapters gets two levels. Simple on purpose: a
    wrong guess costs a TOC entry, never text.
    """
    headings: list[Heading] = []
    lines = _lines(text)
    for index, (offset, line) in enumerate(lines):
        title = line.strip()
        if not title or len(title) > 80:
            continue
        isolated = (index == 0 or not lines[index - 1][1].strip()) and (
            index + 1 == len(lines) or not lines[index + 1][1].strip())
        if not isolated:
            continue
        keyword = _TXT_KEYWORD.match(title)
        if keyword or _is_caps_title(title):
            level = 1 if keyword and not keyword.group("major") else 0
            headings.append(Heading(level, title, offset + line.index(title[0])))
    return headings


def _is_caps_title(title: str) -> bool:
    letters = [ch for ch in title if ch.isalpha()]
    return len(letters) >= 3 and len(title.split()) <= 8 and all(ch.isupper() for ch in letters)
