"""XHTML/HTML to canonical text, with the offsets of anchors and headings.

Canonical text is what citations point into, so it must be plain text that reads well: blocks
(paragraphs, headings, list items, table rows ...) are separated by exactly one blank line, inline
whitespace collapses to one space, ``<br>`` is a single newline, markup never survives.

The tree is walked with an explicit stack (never recursion), and the parsers keep libxml2's
safety limits (``huge_tree=False``): a document nested deeper than 256 elements or with a text
node over 10 MB is refused with SourceTooLargeError instead of being silently truncated.
"""

from __future__ import annotations

import html.entities
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from lxml import etree

from ..errors import SourceError, SourceTooLargeError

__all__ = ["Heading", "HtmlText", "parse_xml", "parse_html", "xhtml_to_text", "html_to_text", "element_to_text",
           "collapsed_text", "local_name"]

_EPUB_TYPE = "{http://www.idpf.org/2007/ops}type"

_BLOCK_TAGS = frozenset({
    "address", "article", "aside", "blockquote", "body", "caption", "center", "dd", "details", "dialog",
    "div", "dl", "dt", "fieldset", "figcaption", "figure", "footer", "form", "h1", "h2", "h3", "h4", "h5",
    "h6", "header", "hgroup", "hr", "html", "legend", "li", "main", "nav", "ol", "option", "p", "pre",
    "section", "summary", "table", "tbody", "tfoot", "thead", "tr", "ul",
    "text",  # SVG <text>: fixed-layout pages carry their words in positioned SVG text runs
})
_CELL_TAGS = frozenset({"td", "th"})
# Not reading text: code, styling, metadata, media fallbacks, ruby readings, MathML source annotations.
_SKIP_TAGS = frozenset({
    "head", "script", "style", "template", "noscript", "title", "rp", "rt", "annotation", "annotation-xml",
    "video", "audio", "canvas", "iframe",
})
_HEADING_LEVELS = {f"h{n}": n for n in range(1, 7)}


@dataclass(slots=True)
class Heading:
    """An ``<h1>``..``<h6>`` with its whitespace-collapsed title and the offset where it starts."""

    level: int
    title: str
    offset: int


@dataclass(slots=True)
class HtmlText:
    """Canonical text of one (X)HTML document and where its anchors and headings land in it."""

    text: str
    anchors: dict[str, int] = field(default_factory=dict)
    """``id=`` (and ``<a name=>``) -> offset where that element's content starts."""
    headings: list[Heading] = field(default_factory=list)
    title: str = ""
    """The ``<head><title>``, whitespace-collapsed; "" when absent."""
    links: list[tuple[int, int, str]] = field(default_factory=list)
    """``(start, end, href)`` of the text of every ``<a href>``: how much of a page only points elsewhere."""
    navs: list[tuple[int, int]] = field(default_factory=list)
    """``(start, end)`` of the text of every ``<nav>`` (a contents list, landmarks, a page list)."""


def _check_limits(parser: etree.XMLParser | etree.HTMLParser, source: str | Path) -> None:
    """libxml2 truncates at its resource limits; a truncated text would be silently wrong, so refuse."""
    for error in parser.error_log:
        if error.type_name == "ERR_RESOURCE_LIMIT":
            raise SourceTooLargeError(source, f"markup exceeds parser limits ({error.message.strip()})")


def parse_xml(data: bytes, source: str | Path) -> etree._Element | None:
    """Parse XML forgivingly and safely: recover from errors, no DTD, no entity expansion, no network.

    Returns None when nothing could be recovered.
    """
    return _parse_xml(data, source)[0]


def _parse_xml(data: bytes, source: str | Path) -> tuple[etree._Element | None, bool]:
    """The recovered root, and whether the parse was clean (no errors beyond warnings)."""
    parser = etree.XMLParser(recover=True, huge_tree=False, resolve_entities=False, no_network=True,
                             load_dtd=False, remove_pis=True)
    try:
        root = etree.fromstring(data, parser)
    except etree.XMLSyntaxError:
        return None, False
    _check_limits(parser, source)
    clean = all(error.level <= etree.ErrorLevels.WARNING for error in parser.error_log)
    return root, clean


def parse_html(data: bytes, source: str | Path) -> etree._Element | None:
    """Parse HTML with lxml's HTML parser; UTF-8 when the bytes decode as UTF-8, else the declared charset."""
    try:
        data.decode("utf-8")
        encoding: str | None = "utf-8"
    except UnicodeDecodeError:
        encoding = None
    parser = etree.HTMLParser(recover=True, no_network=True, remove_pis=True, encoding=encoding)
    try:
        root = etree.fromstring(data.removeprefix(b"\xef\xbb\xbf"), parser)
    except etree.XMLSyntaxError:
        return None
    _check_limits(parser, source)
    return root


def xhtml_to_text(data: bytes, source: str | Path) -> HtmlText:
    """Text of an XHTML document.

    Malformed XHTML (HTML5 tag soup saved as .xhtml) makes the XML parser drop content after the
    first error, so then the HTML parser reads it too and the longer text wins.
    """
    root, clean = _parse_xml(data, source)
    if root is not None and clean:
        return element_to_text(root)
    candidates = [element_to_text(tree) for tree in (root, parse_html(data, source)) if tree is not None]
    if not candidates:
        raise SourceError(source, "not parseable as XHTML or HTML")
    return max(candidates, key=lambda parsed: len(parsed.text))


def html_to_text(data: bytes, source: str | Path) -> HtmlText:
    """Text of an HTML document (tag soup allowed)."""
    root = parse_html(data, source)
    return HtmlText("") if root is None else element_to_text(root)


@lru_cache(maxsize=4096)
def local_name(tag: str) -> str:
    """``{namespace}p`` -> ``p``, lower-cased so XHTML and HTML trees compare alike (cached: a book
    has a few dozen distinct tags and hundreds of thousands of elements)."""
    return tag.rpartition("}")[2].lower()


def element_to_text(root: etree._Element) -> HtmlText:
    """Canonical text of the ``<body>`` (or the whole tree when there is none)."""
    body = _find_child(root, "body")
    builder = _TextBuilder()
    builder.walk(root if body is None else body)
    return builder.result(_head_title(root))


def _find_child(element: etree._Element, name: str) -> etree._Element | None:
    for child in element:
        if isinstance(child.tag, str) and local_name(child.tag) == name:
            return child
    return None


def _head_title(root: etree._Element) -> str:
    head = _find_child(root, "head")
    title = _find_child(head, "title") if head is not None else None
    return collapsed_text(title) if title is not None else ""


def collapsed_text(element: etree._Element) -> str:
    """All text inside ``element`` (not its tail), whitespace collapsed: for titles and labels."""
    return " ".join("".join(str(piece) for piece in element.itertext()).split())


def _semantics(element: etree._Element) -> list[str]:
    """The element's structural semantics: ``epub:type`` (XML or HTML parse) and ARIA ``role`` tokens."""
    values = [element.get(_EPUB_TYPE), element.get("epub:type"), element.get("role")]
    return " ".join(value for value in values if value).split()


def _is_pagebreak(element: etree._Element) -> bool:
    """Print page numbers ("169") are markers, not prose: their text would split sentences."""
    tokens = _semantics(element)
    return "pagebreak" in tokens or "doc-pagebreak" in tokens


def _is_note_marker(element: etree._Element, name: str) -> bool:
    """An endnote reference: ``<a epub:type="noteref">``, ``role="doc-noteref"``, or a linked ``<sup>``."""
    if name == "a":
        tokens = _semantics(element)
        return "noteref" in tokens or "doc-noteref" in tokens
    if name == "sup":
        return any(link.get("href") for link in element.iter("{*}a"))
    return False


@dataclass(slots=True)
class _OpenHeading:
    """A heading being read; its offset is known only once its first character is written."""

    element: etree._Element
    level: int
    offset: int | None = None
    part_index: int = 0


class _TextBuilder:
    """Streams text out of a tree, deciding separators lazily so blocks get exactly one blank line.

    Separators are owed, not written: a block boundary owes "\\n\\n", a ``<br>`` owes "\\n", inline
    whitespace owes " ". The debt is paid only when real content follows, so nothing trails and
    anchors/headings resolve to where their first character actually lands.
    """

    def __init__(self) -> None:
        self._parts: list[str] = []
        self._length = 0
        self._owe_break = False
        self._owe_newline = False
        self._owe_space = False
        self._pre_depth = 0
        self._pending_anchors: list[str] = []
        self._anchors: dict[str, int] = {}
        self._open_headings: list[_OpenHeading] = []
        self._headings: list[Heading] = []
        self._bracketed: list[etree._Element] = []
        self._open_links: list[tuple[etree._Element, int, str | None]] = []
        self._links: list[tuple[int, int, str]] = []
        self._navs: list[tuple[int, int]] = []

    def walk(self, top: etree._Element) -> None:
        """Visit ``top`` and its descendants in document order without recursion."""
        top_name = local_name(top.tag)
        self._open(top, top_name)
        stack = [(top, top_name, iter(top))]
        while stack:
            element, name, children = stack[-1]
            child = next(children, None)
            if child is None:
                stack.pop()
                self._close(element, name)
                if stack:
                    self._text(element.tail)
                continue
            if not isinstance(child.tag, str):
                self._non_element(child)
                continue
            child_name = local_name(child.tag)
            if child_name in _SKIP_TAGS or (child.attrib and _is_pagebreak(child)):
                self._register_anchor(child, child_name)
                self._text(child.tail)
            else:
                self._open(child, child_name)
                stack.append((child, child_name, iter(child)))

    def result(self, title: str) -> HtmlText:
        text = "".join(self._parts)
        for name in self._pending_anchors:
            self._anchors.setdefault(name, len(text))
        return HtmlText(text, self._anchors, self._headings, title, self._links, self._navs)

    def _non_element(self, node: etree._Element) -> None:
        """Comments and processing instructions vanish; undeclared entities (``&nbsp;`` with no DTD) decode."""
        if isinstance(node, etree._Entity):
            self._text(html.entities.html5.get(f"{node.name};", ""))
        self._text(node.tail)

    def _open(self, element: etree._Element, name: str) -> None:
        if element.attrib:
            self._register_anchor(element, name)
        if name in _BLOCK_TAGS:
            self._block()
        elif name == "br":
            self._line_break()
        elif name in _CELL_TAGS:
            self._owe_space = True
        elif name == "tspan" and element.get("y") is not None:
            self._line_break()
        if name == "pre":
            self._pre_depth += 1
        if name in _HEADING_LEVELS:
            self._open_headings.append(_OpenHeading(element, _HEADING_LEVELS[name]))
        href = element.get("href") if name == "a" else None
        if href or name == "nav":
            self._open_links.append((element, self._length, href))
        if not self._bracketed and _is_note_marker(element, name):
            label = collapsed_text(element)
            if label and not label.startswith(("[", "(")):
                self._bracketed.append(element)
                self._content("[")
        self._text(element.text)

    def _close(self, element: etree._Element, name: str) -> None:
        if self._bracketed and self._bracketed[-1] is element:
            self._bracketed.pop()
            self._content("]")
        if self._open_headings and self._open_headings[-1].element is element:
            self._finish_heading()
        if self._open_links and self._open_links[-1][0] is element:
            _, start, href = self._open_links.pop()
            self._finish_link(start, href)
        if name == "pre":
            self._pre_depth -= 1
        if name in _BLOCK_TAGS:
            self._block()
        elif name in _CELL_TAGS:
            self._owe_space = True

    def _finish_heading(self) -> None:
        heading = self._open_headings.pop()
        if heading.offset is None:
            return
        title = " ".join("".join(self._parts[heading.part_index:]).split())
        self._headings.append(Heading(heading.level, title, heading.offset))

    def _finish_link(self, start: int, href: str | None) -> None:
        """Record where the text of a link (``href``) or a ``<nav>`` (None) lies; ``start`` may sit before a
        separator it owed, which is whitespace, so it is never counted as the link's."""
        if self._length > start:
            if href is None:
                self._navs.append((start, self._length))
            else:
                self._links.append((start, self._length, href))

    def _register_anchor(self, element: etree._Element, name: str) -> None:
        for key in (element.get("id"), element.get("name") if name == "a" else None):
            if key and key not in self._anchors:
                self._pending_anchors.append(key)

    def _block(self) -> None:
        self._owe_break = True
        self._owe_newline = self._owe_space = False

    def _line_break(self) -> None:
        """``<br>`` inside a paragraph is one newline; two in a row end the paragraph."""
        if self._owe_break or not self._length:
            return
        if self._owe_newline:
            self._block()
        else:
            self._owe_newline, self._owe_space = True, False

    def _text(self, text: str | None) -> None:
        if not text:
            return
        if self._pre_depth:
            self._pre_text(text)
            return
        words = text.split()
        if text[0].isspace():
            self._owe_space = True
        if words:
            self._content(" ".join(words))
            self._owe_space = text[-1].isspace()

    def _pre_text(self, text: str) -> None:
        """Preformatted text keeps its lines and indentation; blank lines still separate paragraphs."""
        for index, line in enumerate(text.replace("\r\n", "\n").replace("\r", "\n").split("\n")):
            if index:
                self._line_break()
            content = line.rstrip()
            if content:
                self._content(content)
            if len(content) < len(line):
                self._owe_space = True

    def _content(self, text: str) -> None:
        if self._owe_break:
            if self._length:
                self._emit("\n\n")
        elif self._owe_newline:
            self._emit("\n")
        elif self._owe_space and self._length:
            self._emit(" ")
        self._owe_break = self._owe_newline = self._owe_space = False
        self._resolve_pending()
        self._emit(text)

    def _resolve_pending(self) -> None:
        for key in self._pending_anchors:
            self._anchors.setdefault(key, self._length)
        self._pending_anchors.clear()
        for heading in self._open_headings:
            if heading.offset is None:
                heading.offset, heading.part_index = self._length, len(self._parts)

    def _emit(self, text: str) -> None:
        self._parts.append(text)
        self._length += len(text)
