"""EPUB 2/3 reader on zipfile + lxml: spine items become files, the nav (or NCX) becomes the TOC.

Decisions worth knowing:

* Reading order is the spine's linear items, then its ``linear="no"`` items (notes, answer keys):
  they are still text a question can be about, but they come after the book proper.
* An item listed twice in the spine is read once; items missing from the archive or of a media
  type that is not a content document are skipped with a warning.
* The TOC comes from the EPUB 3 nav, else the NCX, else (with a warning) from headings in spine
  order. Entries pointing outside the spine are dropped; an anchor that names nothing resolves to
  the start of its file.
* The archive is untrusted: total uncompressed size and per-member compression ratio are capped
  (SourceTooLargeError), and hrefs are resolved inside the archive's namespace only ("../" that
  climbs above the root names nothing).
* A content document that META-INF/encryption.xml declares encrypted (other than font
  obfuscation) raises EncryptedSourceError unless its bytes are plainly markup anyway.
* What is not the book stays in the text, so positions are exact and the reader shows it, but outside the
  files' ``body``, so it is never chunked (never a search hit, an answer or in a summary), as an e-reader
  keeps it out of the reading flow: a contents page or a contents list inside a page (``sources.navigation``;
  the NCX too, should the spine list it as a page), and a Project Gutenberg edition's header and licence,
  before its START line and after its END line.
"""

from __future__ import annotations

import contextlib
import functools
import posixpath
import unicodedata
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

from lxml import etree

from ..errors import EncryptedSourceError, SourceError, SourceTooLargeError
from .base import ParsedDocument, ParsedFile, TocEntry
from .files import Source, SourceFile, opened
from .navigation import contents_lists, inward_ranges, is_contents_page
from .structure import front_lists, gutenberg_spans
from .xhtml import HtmlText, collapsed_text, html_to_text, local_name, parse_xml, xhtml_to_text

__all__ = ["read_epub", "resolve_href", "MAX_UNCOMPRESSED_BYTES", "MAX_COMPRESSION_RATIO"]

MAX_UNCOMPRESSED_BYTES = 512 * 1024 * 1024
MAX_COMPRESSION_RATIO = 200
"""Applies to members over RATIO_FLOOR_BYTES; small members may compress absurdly well legitimately."""
RATIO_FLOOR_BYTES = 1024 * 1024

_CONTAINER = "META-INF/container.xml"
_ENCRYPTION = "META-INF/encryption.xml"
_OPS_TYPE = "{http://www.idpf.org/2007/ops}type"
_XHTML_TYPES = frozenset({"application/xhtml+xml", "image/svg+xml", "application/x-dtbook+xml", "text/x-oeb1-document"})
_HTML_TYPES = frozenset({"text/html"})
_FONT_OBFUSCATION = frozenset({"http://www.idpf.org/2008/embedding", "http://ns.adobe.com/pdf/enc#RC"})


class _MemberError(Exception):
    """A member of the archive is missing or cannot be decompressed."""


@dataclass(slots=True)
class _Item:
    """A manifest item: its path inside the archive, as written in the OPF, and its media type."""

    path: str
    href: str
    media_type: str
    properties: frozenset[str]


@dataclass(slots=True)
class _RawEntry:
    """A TOC node before resolution: ``target`` is an archive path plus optional fragment, or None."""

    title: str
    level: int
    target: tuple[str, str] | None


@dataclass(slots=True)
class _Package:
    """What the OPF says: metadata, manifest, reading order and where the navigation documents are."""

    metadata: dict[str, str]
    spine: list[_Item]
    nav: _Item | None
    ncx: _Item | None
    warnings: list[str] = field(default_factory=list)


def read_epub(source: Source) -> ParsedDocument:
    """Read an EPUB; raise SourceError (or a subclass) when it is not a readable EPUB."""
    with opened(source) as file, _open_archive(file) as archive:
        path = file.path
        package = _read_package(archive, path)
        files, texts, paths = _read_spine(archive, path, package)
        toc, toc_warnings = _read_toc(archive, package, texts, paths)
    _leave_out_navigation(files, texts, paths, package)
    warnings = package.warnings + toc_warnings
    for index, parsed in enumerate(files):
        parsed.title = parsed.title or _toc_title(toc, index) or texts[index].title
    title = package.metadata.get("title") or path.stem
    metadata = {key: value for key, value in package.metadata.items() if key != "title"}
    return ParsedDocument(title=title, format="epub", files=files, toc=toc, metadata=metadata, warnings=warnings)


class _Archive:
    """A zip opened for reading with safety caps, UTF-8 name repair and first-entry-wins lookups."""

    def __init__(self, zf: zipfile.ZipFile) -> None:
        self._zip = zf
        self._infos: dict[str, zipfile.ZipInfo] = {}
        for info in zf.infolist():
            for name in _name_variants(info):
                self._infos.setdefault(name, info)

    def __enter__(self) -> _Archive:
        return self

    def __exit__(self, *exc: object) -> None:
        self._zip.close()

    def has(self, name: str) -> bool:
        return name in self._infos

    def read(self, name: str) -> bytes:
        info = self._infos.get(name)
        if info is None:
            raise _MemberError(f"{name} is missing from the archive")
        try:
            with self._zip.open(info) as member:
                return member.read()
        except (zipfile.BadZipFile, zlib.error, EOFError, OSError, NotImplementedError, RuntimeError,
                ValueError) as exc:
            raise _MemberError(f"{name} cannot be decompressed ({exc})") from exc


def _name_variants(info: zipfile.ZipInfo) -> Iterator[str]:
    """The member's name as stored and normalised, plus its UTF-8 reading when the zip did not flag
    UTF-8 (zipfile then assumes cp437, but EPUB tools write UTF-8 either way)."""
    names = [info.filename]
    if not info.flag_bits & 0x800:
        with contextlib.suppress(UnicodeEncodeError, UnicodeDecodeError):
            names.append(info.filename.encode("cp437").decode("utf-8"))
    for name in names:
        yield name
        yield unicodedata.normalize("NFC", posixpath.normpath(name.lstrip("/")))


_ZIP_END = b"PK\x05\x06"
_ZIP_END_BYTES = 22 + 65_535
"""A ZIP archive ends with its end-of-central-directory record (signature ``_ZIP_END``, 22 bytes, then a comment of
at most 65,535): where ``zipfile`` looks for it, and all it reads of a file that has none."""


def check_zip_end(file: SourceFile) -> None:
    """SourceError unless the file's last bytes hold a ZIP end record: what ``zipfile`` looks for first, checked
    here before a large file is hashed whole."""
    if file.size == 0:
        raise SourceError(file.path, "empty file (0 bytes), not an EPUB")
    if _ZIP_END not in file.tail(_ZIP_END_BYTES):
        raise SourceError(file.path, f"not a readable ZIP archive, so not an EPUB (no end-of-archive record in its "
                                     f"last {_ZIP_END_BYTES} bytes)")


def _open_archive(file: SourceFile) -> _Archive:
    """The opened file as a ZIP archive, read through its stream (``sources.files``), not by its name."""
    path = file.path
    if file.size == 0:
        raise SourceError(path, "empty file (0 bytes), not an EPUB")
    try:
        zf = zipfile.ZipFile(file.stream())
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError) as exc:
        raise SourceError(path, f"not a readable ZIP archive, so not an EPUB ({exc})") from exc
    try:
        _check_sizes(path, zf.infolist())
    except SourceTooLargeError:
        zf.close()
        raise
    return _Archive(zf)


def _check_sizes(path: Path, infos: list[zipfile.ZipInfo]) -> None:
    """Refuse zip bombs before decompressing anything (zipfile never inflates past the declared size)."""
    total = sum(info.file_size for info in infos)
    if total > MAX_UNCOMPRESSED_BYTES:
        raise SourceTooLargeError(path, f"uncompressed size {total} bytes exceeds {MAX_UNCOMPRESSED_BYTES}")
    for info in infos:
        if info.file_size > RATIO_FLOOR_BYTES and info.file_size > MAX_COMPRESSION_RATIO * max(info.compress_size, 1):
            raise SourceTooLargeError(
                path, f"member {info.filename} expands {info.file_size // max(info.compress_size, 1)}:1 "
                      f"(limit {MAX_COMPRESSION_RATIO}:1)")


def resolve_href(base_dir: str, href: str) -> tuple[str, str] | None:
    """``chap%201.xhtml#a`` relative to ``base_dir`` -> (``OPS/chap 1.xhtml``, ``a``); None if it leaves the archive.

    External links (any scheme) and paths climbing above the archive root resolve to nothing.
    Paths are NFC-normalised (as are member names) so "u + combining diaeresis" finds "ü".
    """
    parts = urlsplit(href.strip())
    if parts.scheme or parts.netloc:
        return None
    relative = unquote(parts.path)
    if not relative:
        return None
    if relative.startswith("/"):
        joined = posixpath.normpath(relative.lstrip("/"))
    else:
        joined = posixpath.normpath(posixpath.join(base_dir, relative))
    if joined in (".", "..") or joined.startswith("../"):
        return None
    return unicodedata.normalize("NFC", joined), unquote(parts.fragment)


def _read_xml(archive: _Archive, path: Path, name: str, what: str) -> etree._Element:
    try:
        data = archive.read(name)
    except _MemberError as exc:
        raise SourceError(path, f"{what}: {exc}") from exc
    try:
        root = parse_xml(data, name)
    except SourceError as exc:
        raise type(exc)(path, f"{what} {name}: {exc.reason}") from exc
    if root is None:
        raise SourceError(path, f"{what} {name} is not parseable XML")
    return root


def _read_package(archive: _Archive, path: Path) -> _Package:
    container = _read_xml(archive, path, _CONTAINER, "container")
    opf_name = _rootfile(container)
    if opf_name is None:
        raise SourceError(path, f"{_CONTAINER} names no package document (OPF)")
    opf = _read_xml(archive, path, opf_name, "package document")
    base_dir = posixpath.dirname(opf_name)
    manifest = _manifest(opf, base_dir)
    spine_element = _first(opf, "spine")
    spine, warnings = _spine(spine_element, manifest)
    nav = next((item for item in manifest.values() if "nav" in item.properties), None)
    ncx_id = spine_element.get("toc") if spine_element is not None else None
    ncx = manifest.get(ncx_id or "") or next(
        (item for item in manifest.values() if item.media_type == "application/x-dtbncx+xml"), None)
    return _Package(_metadata(opf), spine, nav, ncx, warnings)


def _rootfile(container: etree._Element) -> str | None:
    """The package document's path; the OPF media type wins when several renditions are listed."""
    rootfiles = [element for element in container.iter("{*}rootfile") if element.get("full-path")]
    rootfiles.sort(key=lambda element: element.get("media-type") != "application/oebps-package+xml")
    for element in rootfiles:
        resolved = resolve_href("", element.get("full-path", ""))
        if resolved is not None:
            return resolved[0]
    return None


def _first(root: etree._Element, name: str) -> etree._Element | None:
    return next(root.iter(f"{{*}}{name}"), None)


def _metadata(opf: etree._Element) -> dict[str, str]:
    """Title, creators ("; "-joined) and language from the Dublin Core metadata."""
    metadata_element = _first(opf, "metadata")
    if metadata_element is None:
        return {}

    def values(name: str) -> list[str]:
        found = (collapsed_text(element) for element in metadata_element.iter(f"{{*}}{name}"))
        return [value for value in found if value]

    result = {"title": next(iter(values("title")), ""), "creator": "; ".join(values("creator")),
              "language": next(iter(values("language")), "")}
    return {key: value for key, value in result.items() if value}


def _manifest(opf: etree._Element, base_dir: str) -> dict[str, _Item]:
    manifest: dict[str, _Item] = {}
    manifest_element = _first(opf, "manifest")
    for element in manifest_element.iter("{*}item") if manifest_element is not None else ():
        item_id, href = (element.get("id") or "").strip(), element.get("href") or ""
        resolved = resolve_href(base_dir, href) if item_id and href else None
        if resolved is None or item_id in manifest:
            continue
        manifest[item_id] = _Item(resolved[0], unquote(href.split("#")[0]),
                                  (element.get("media-type") or "").strip().lower(),
                                  frozenset((element.get("properties") or "").split()))
    return manifest


def _spine(spine_element: etree._Element | None, manifest: dict[str, _Item]) -> tuple[list[_Item], list[str]]:
    """Linear items in order, then non-linear ones; each item once."""
    if spine_element is None:
        return [], ["package document has no spine"]
    linear: list[_Item] = []
    non_linear: list[_Item] = []
    warnings: list[str] = []
    for itemref in spine_element.iter("{*}itemref"):
        item = manifest.get((itemref.get("idref") or "").strip())
        if item is None:
            warnings.append(f"spine references unknown manifest item {itemref.get('idref')!r}")
            continue
        (non_linear if itemref.get("linear", "yes").strip() == "no" else linear).append(item)
    ordered: dict[str, _Item] = {}
    for item in linear + non_linear:
        ordered.setdefault(item.path, item)
    return list(ordered.values()), warnings


def _optional_xml(archive: _Archive, name: str) -> etree._Element | None:
    """A member that helps but is not essential (nav, NCX, encryption.xml): None if absent or unusable."""
    try:
        return parse_xml(archive.read(name), name)
    except (_MemberError, SourceError):
        return None


def _encrypted_paths(archive: _Archive) -> frozenset[str]:
    """Members that META-INF/encryption.xml declares encrypted, font obfuscation aside (fonts are harmless)."""
    root = _optional_xml(archive, _ENCRYPTION) if archive.has(_ENCRYPTION) else None
    encrypted: set[str] = set()
    for data in root.iter("{*}EncryptedData") if root is not None else ():
        method = _first(data, "EncryptionMethod")
        reference = _first(data, "CipherReference")
        target = resolve_href("", reference.get("URI", "")) if reference is not None else None
        if target is not None and (method is None or method.get("Algorithm") not in _FONT_OBFUSCATION):
            encrypted.add(target[0])
    return frozenset(encrypted)


def _read_spine(archive: _Archive, path: Path,
                package: _Package) -> tuple[list[ParsedFile], list[HtmlText], list[str]]:
    """Each readable spine item as a file, with its parsed text (anchors, headings) and archive path."""
    files: list[ParsedFile] = []
    texts: list[HtmlText] = []
    paths: list[str] = []
    encrypted = _encrypted_paths(archive)
    for item in package.spine:
        if item.media_type not in _XHTML_TYPES | _HTML_TYPES:
            kind = item.media_type or "no media type"
            package.warnings.append(f"spine item {item.href} ({kind}) is not a content document; skipped")
            continue
        try:
            data = archive.read(item.path)
        except _MemberError as exc:
            package.warnings.append(f"spine item skipped: {exc}")
            continue
        if item.path in encrypted and not data.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"<"):
            raise EncryptedSourceError(path, f"content document {item.path} is encrypted (DRM)")
        parsed = _content_text(path, item, data)
        title = parsed.headings[0].title if parsed.headings else ""
        files.append(ParsedFile(parsed.text, title=title, label=item.href, has_text=bool(parsed.text.strip())))
        texts.append(parsed)
        paths.append(item.path)
    if not files:
        details = f" ({'; '.join(package.warnings)})" if package.warnings else ""
        raise SourceError(path, f"no readable content documents in the spine{details}")
    return files, texts, paths


def _leave_out_navigation(files: list[ParsedFile], texts: list[HtmlText], paths: list[str],
                          package: _Package) -> None:
    """Narrow each file's ``body`` to the book: nothing of a contents page, nothing outside a Gutenberg
    edition's START and END lines; a contents list inside a page is ``left_out`` (see the module's notes), and
    so is a list of illustrations in the front third of the spine that does not link to them.

    A book whose every page with text reads as contents (a glossary whose entries all link to each other) is
    its own content: then no page is left out, as a whole or in part."""
    in_spine = frozenset(paths)
    ncx = package.ncx.path if package.ncx is not None else None
    ranges = [inward_ranges(parsed, functools.partial(_in_spine, in_spine, posixpath.dirname(file_path)))
              for parsed, file_path in zip(texts, paths)]
    pages = [path == ncx or is_contents_page(parsed.text, found) for parsed, path, found in zip(texts, paths, ranges)]
    if all(page or not file.has_text for page, file in zip(pages, files)):
        pages, ranges = [False] * len(files), [[] for _ in files]
    front = max(1, len(files) // 3)
    for number, (file, parsed, page, found) in enumerate(zip(files, texts, pages, ranges)):
        if page:
            file.narrow(0, 0)
        else:
            lists = front_lists(parsed.text) if number < front else []
            file.left_out = _merged(contents_lists(parsed.text, found) + lists)
    for file, span in zip(files, gutenberg_spans([file.text for file in files]) or ()):
        file.narrow(*span)


def _merged(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``ranges`` sorted and disjoint, overlapping ones joined."""
    merged: list[tuple[int, int]] = []
    for start, end in sorted(ranges):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _in_spine(in_spine: frozenset[str], base_dir: str, href: str) -> bool:
    """Whether ``href``, in a document of ``base_dir``, points at a document of the spine (or into one)."""
    target = resolve_href(base_dir, href)
    return target is not None and target[0] in in_spine


def _content_text(path: Path, item: _Item, data: bytes) -> HtmlText:
    """One content document's text; its errors name the EPUB as the path and the member in the reason."""
    try:
        if item.media_type in _HTML_TYPES:
            return html_to_text(data, item.path)
        return xhtml_to_text(data, item.path)
    except SourceError as exc:
        raise type(exc)(path, f"{item.path}: {exc.reason}") from exc


def _read_toc(archive: _Archive, package: _Package, texts: list[HtmlText],
              paths: list[str]) -> tuple[list[TocEntry], list[str]]:
    """nav, else NCX, else headings; the first source that yields entries inside the spine wins."""
    index_of = {file_path: index for index, file_path in enumerate(paths)}
    tried: list[str] = []
    for item, reader in ((package.nav, _nav_entries), (package.ncx, _ncx_entries)):
        if item is None:
            continue
        root = _optional_xml(archive, item.path)
        raw = reader(root, posixpath.dirname(item.path)) if root is not None else []
        toc = _resolve(raw, index_of, texts)
        if toc:
            return toc, []
        tried.append(f"{item.href} is missing or broken")
    reason = "; ".join(tried) if tried else "no nav or NCX"
    return _toc_from_headings(texts, paths), [f"TOC built from spine order and headings ({reason})"]


def _nav_entries(root: etree._Element, base_dir: str) -> list[_RawEntry]:
    """Entries of the ``epub:type="toc"`` nav, depth-first; nested ``<ol>`` give deeper levels."""
    nav = next((element for element in root.iter("{*}nav")
                if "toc" in " ".join(filter(None, (element.get(_OPS_TYPE), element.get("epub:type")))).split()), None)
    top = _first(nav, "ol") if nav is not None else None
    if top is None:
        return []
    entries: list[_RawEntry] = []
    stack = [(_children_named(top, "li"), 0)]
    while stack:
        item = next(stack[-1][0], None)
        if item is None:
            stack.pop()
            continue
        level = stack[-1][1]
        label = next(_children_named(item, "a", "span"), None)
        if label is not None:
            href = label.get("href") if local_name(label.tag) == "a" else None
            target = resolve_href(base_dir, href) if href else None
            entries.append(_RawEntry(collapsed_text(label), level, target))
        sublist = next(_children_named(item, "ol"), None)
        if sublist is not None:
            stack.append((_children_named(sublist, "li"), level + 1))
    return entries


def _ncx_entries(root: etree._Element, base_dir: str) -> list[_RawEntry]:
    """Entries of the NCX navMap; navPoint nesting gives the level."""
    nav_map = _first(root, "navMap")
    if nav_map is None:
        return []
    entries: list[_RawEntry] = []
    stack = [(_children_named(nav_map, "navpoint"), 0)]
    while stack:
        point = next(stack[-1][0], None)
        if point is None:
            stack.pop()
            continue
        level = stack[-1][1]
        label = next((collapsed_text(text) for text in point.iterfind("{*}navLabel/{*}text")), "")
        content = next(point.iterfind("{*}content"), None)
        src = content.get("src") if content is not None else None
        entries.append(_RawEntry(label, level, resolve_href(base_dir, src) if src else None))
        stack.append((_children_named(point, "navpoint"), level + 1))
    return entries


def _children_named(element: etree._Element, *names: str) -> Iterator[etree._Element]:
    return (child for child in element if isinstance(child.tag, str) and local_name(child.tag) in names)


def _resolve(raw: list[_RawEntry], index_of: dict[str, int], texts: list[HtmlText]) -> list[TocEntry]:
    """Map entries to (file, offset). An unlinked heading borrows its first linked descendant's target."""
    toc: list[TocEntry] = []
    for position, entry in enumerate(raw):
        target = entry.target or _first_descendant_target(raw, position)
        if not entry.title or target is None or target[0] not in index_of:
            continue
        file_index = index_of[target[0]]
        offset = texts[file_index].anchors.get(target[1], 0) if target[1] else 0
        toc.append(TocEntry(entry.title, entry.level, file_index, offset))
    return toc


def _first_descendant_target(raw: list[_RawEntry], position: int) -> tuple[str, str] | None:
    level = raw[position].level
    for entry in raw[position + 1:]:
        if entry.level <= level:
            return None
        if entry.target is not None:
            return entry.target
    return None


def _toc_from_headings(texts: list[HtmlText], paths: list[str]) -> list[TocEntry]:
    """Headings of each file in spine order (h1 -> level 0); a file without headings gets one entry."""
    levels = [heading.level for parsed in texts for heading in parsed.headings]
    top = min(levels, default=1)
    toc: list[TocEntry] = []
    for index, parsed in enumerate(texts):
        if parsed.headings:
            toc.extend(TocEntry(h.title, h.level - top, index, h.offset) for h in parsed.headings if h.title)
        elif parsed.text.strip():
            toc.append(TocEntry(parsed.title or posixpath.basename(paths[index]), 0, index, 0))
    return toc


def _toc_title(toc: list[TocEntry], file_index: int) -> str:
    return next((entry.title for entry in toc if entry.file_index == file_index), "")
