"""The readers on synthetic inputs: exact canonical text, hostile archives, bad encodings, bad JSONL."""

from __future__ import annotations

import json
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pypdf
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pypdf.generic import NameObject

from chapterverse import SourceError
from chapterverse.errors import BadLinesError, SourceTooLargeError
from chapterverse.positions import paragraph_spans
from chapterverse.sources import read_source
from chapterverse.sources.jsonl import MAX_CHUNK_INDEX, read_jsonl
from chapterverse.sources.epub import resolve_href
from chapterverse.sources.pdf import _pypdf_outline
from chapterverse.sources.xhtml import html_to_text, xhtml_to_text

XHTML = ('<?xml version="1.0" encoding="utf-8"?>\n<html xmlns="http://www.w3.org/1999/xhtml" '
         'xmlns:epub="http://www.idpf.org/2007/ops"><head><title>{title}</title></head><body>{body}</body></html>')
CONTAINER = ('<?xml version="1.0"?><container version="1.0" xmlns="urn:oasis:names:tc:opendocument:xmlns:container">'
             '<rootfiles><rootfile full-path="OPS/package.opf" media-type="application/oebps-package+xml"/>'
             '</rootfiles></container>')


def xhtml(body: str, title: str = "t") -> str:
    return XHTML.format(title=title, body=body)


def build_epub(path: Path, chapters: dict[str, str], *, nav: str | None = None, spine: list[str] | None = None,
               extra: dict[str, bytes | str] | None = None, manifest_extra: str = "") -> Path:
    """A minimal EPUB 3: ``chapters`` maps hrefs (relative to OPS/) to XHTML; ``nav`` is the nav's
    ``<ol>`` markup (no nav document when None); ``spine`` lists itemrefs (default: every chapter)."""
    ids = {href: f"c{i}" for i, href in enumerate(chapters)}
    items = "".join(f'<item id="{ids[h]}" href="{h}" media-type="application/xhtml+xml"/>' for h in chapters)
    if nav is not None:
        items += '<item id="nav" href="nav.xhtml" media-type="application/xhtml+xml" properties="nav"/>'
    itemrefs = spine if spine is not None else [f'<itemref idref="{ids[h]}"/>' for h in chapters]
    opf = ('<?xml version="1.0"?><package xmlns="http://www.idpf.org/2007/opf" version="3.0">'
           '<metadata xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:title>Test Book</dc:title>'
           '<dc:creator>A. Author</dc:creator><dc:language>en</dc:language></metadata>'
           f'<manifest>{items}{manifest_extra}</manifest><spine>{"".join(itemrefs)}</spine></package>')
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("mimetype", "application/epub+zip", compress_type=zipfile.ZIP_STORED)
        zf.writestr("META-INF/container.xml", CONTAINER)
        zf.writestr("OPS/package.opf", opf)
        for href, content in chapters.items():
            zf.writestr(f"OPS/{unquote(href)}", content)
        if nav is not None:
            zf.writestr("OPS/nav.xhtml", xhtml(f'<nav epub:type="toc">{nav}</nav>'))
        for name, data in (extra or {}).items():
            zf.writestr(name, data)
    return path


# --- XHTML -> canonical text -------------------------------------------------------------------

def test_blocks_inline_whitespace_and_breaks() -> None:
    body = ("<h1 id='top'>Chapter <em>One</em></h1>\n  <p>Hello,\n\t<b>world</b>!  Two<br/>lines</p>"
            "<div>outer <p>inner</p> tail</div><ul><li>one</li><li>two</li></ul>"
            "<table><tr><td>a</td><td>b</td></tr></table><p>&#233;&amp;&lt;b&gt;&nbsp;x</p>")
    parsed = xhtml_to_text(xhtml(body).encode(), "t.xhtml")
    assert parsed.text == ("Chapter One\n\nHello, world! Two\nlines\n\nouter\n\ninner\n\ntail\n\none\n\ntwo\n\n"
                           "a b\n\né&<b> x")
    assert parsed.headings[0].title == "Chapter One" and parsed.headings[0].offset == 0
    assert parsed.anchors["top"] == 0
    assert parsed.title == "t"
    paragraphs = [parsed.text[start:end] for start, end in paragraph_spans(parsed.text)]
    assert paragraphs[:2] == ["Chapter One", "Hello, world! Two\nlines"]


def test_anchor_offsets_point_at_content() -> None:
    body = "<p>intro</p><section id='s2'><h2>Second</h2><p>x <a name='mid'/>y <span id='z'>zed</span></p></section>"
    parsed = xhtml_to_text(xhtml(body).encode(), "t.xhtml")
    assert parsed.text[parsed.anchors["s2"]:].startswith("Second")
    assert parsed.text[parsed.anchors["mid"]:].startswith("y zed")
    assert parsed.text[parsed.anchors["z"]:] == "zed"
    assert [(h.level, h.title) for h in parsed.headings] == [(2, "Second")]
    assert parsed.text[parsed.headings[0].offset:].startswith("Second")


def test_noterefs_pagebreaks_and_pre() -> None:
    body = ('<p>Word<a epub:type="noteref" href="n.xhtml#n1">12</a> and<sup><a href="#n2">3</a></sup> '
            'x<sup>2</sup> <a role="doc-noteref" href="#n">[4]</a></p><p>a <span epub:type="pagebreak" '
            'id="p7" title="7">7</span>b</p><pre>  line one\n    indented\n\n\n\nafter</pre>')
    parsed = xhtml_to_text(xhtml(body).encode(), "t.xhtml")
    assert parsed.text == "Word[12] and[3] x2 [4]\n\na b\n\n  line one\n    indented\n\nafter"
    assert parsed.text[parsed.anchors["p7"]:].startswith("b")


def test_html_soup_and_undeclared_entities() -> None:
    soup = b"<html><body><p>one<p>two &nbsp;&eacute;<br>three<div>four</body>"
    assert html_to_text(soup, "s.html").text == "one\n\ntwo \xe9\nthree\n\nfour"
    broken_xhtml = xhtml("<p>unclosed <b>bold</p><p>still here &nbsp; &copy;</p>").encode()
    assert "still here" in xhtml_to_text(broken_xhtml, "b.xhtml").text


def test_entities_are_never_expanded_or_fetched() -> None:
    """Billion laughs is refused at once; an external entity (XXE) is never loaded."""
    laughs = "".join(f'<!ENTITY lol{i} "{f"&lol{i - 1};" * 10}">' for i in range(1, 10))
    bomb = (f'<?xml version="1.0"?><!DOCTYPE html [<!ENTITY lol0 "lol">{laughs}]>'
            '<html xmlns="http://www.w3.org/1999/xhtml"><body><p>a &lol9; b</p></body></html>')
    started = time.perf_counter()
    with pytest.raises(SourceTooLargeError, match="amplification"):
        xhtml_to_text(bomb.encode(), "bomb.xhtml")
    assert time.perf_counter() - started < 1.0
    xxe = ('<?xml version="1.0"?><!DOCTYPE html [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>'
           '<html xmlns="http://www.w3.org/1999/xhtml"><body><p>a &xxe; c</p></body></html>')
    assert xhtml_to_text(xxe.encode(), "xxe.xhtml").text == "a c"


def test_deep_nesting_is_refused_not_crashed(tmp_path: Path) -> None:
    deep = "<html><body>" + "<div>" * 10_000 + "deep" + "</div>" * 10_000 + "<p>after</p></body></html>"
    (tmp_path / "deep.html").write_text(deep, encoding="utf-8")
    with pytest.raises(SourceTooLargeError, match=r"deep\.html"):
        read_source(tmp_path / "deep.html")
    epub = build_epub(tmp_path / "deep.epub", {"c.xhtml": xhtml("<div>" * 10_000 + "x" + "</div>" * 10_000)})
    with pytest.raises(SourceTooLargeError, match=r"deep\.epub: OPS/c\.xhtml: markup exceeds parser limits") as caught:
        read_source(epub)
    assert caught.value.path == str(epub)
    fine = "<html><body>" + "<span>" * 200 + "deep" + "</span>" * 200 + "</body></html>"
    assert html_to_text(fine.encode(), "ok.html").text == "deep"


def test_hostile_markup_gives_plain_text(tmp_path: Path) -> None:
    body = ("<script>alert('x')</script><style>p{color:red}</style>"
            "<p onclick=\"steal()\">Safe <img src='x' onerror='alert(1)'/>text "
            "<a href=\"javascript:alert(2)\">link</a><iframe src='http://evil'>frame</iframe></p>"
            "<svg onload='alert(3)'><text>drawn</text></svg><noscript>no</noscript><template><p>t</p></template>"
            "<!-- <p>comment</p> --><p><![CDATA[raw]]></p><object data='x.swf'>fallback</object>")
    epub = build_epub(tmp_path / "hostile.epub", {"c.xhtml": xhtml(body, title="Evil")})
    document = read_source(epub)
    assert document.files[0].text == "Safe text link\n\ndrawn\n\nraw\n\nfallback"
    html = tmp_path / "hostile.html"
    html.write_text(f"<html><head><title>Evil</title><script>x()</script></head><body>{body}</body></html>",
                    encoding="utf-8")
    text = read_source(html).files[0].text
    for needle in ("alert", "onerror", "javascript", "steal", "color:red", "<", "comment"):
        assert needle not in text


# --- EPUB structure and safety ----------------------------------------------------------------

def test_epub_nav_toc_spine_order_and_metadata(tmp_path: Path) -> None:
    chapters = {
        "one.xhtml": xhtml("<h1>One</h1><p>first</p><h2 id='deep'>Deep part</h2><p>more</p>"),
        "two%20words.xhtml": xhtml("<h1>Two</h1><p>second</p>"),
        "notes.xhtml": xhtml("<h1>Notes</h1><p>non-linear</p>"),
    }
    nav = ('<ol><li><a href="one.xhtml">One</a><ol><li><a href="one.xhtml#deep">Deep part</a></li>'
           '<li><a href="one.xhtml#nowhere">Missing anchor</a></li></ol></li>'
           '<li><a href="two%20words.xhtml">Two</a></li><li><a href="http://example.com/x">External</a></li>'
           '<li><a href="../../../etc/passwd">Escape</a></li></ol>')
    spine = ['<itemref idref="c2" linear="no"/>', '<itemref idref="c0"/>', '<itemref idref="c1"/>',
             '<itemref idref="c0"/>']
    document = read_source(build_epub(tmp_path / "b.epub", chapters, nav=nav, spine=spine))
    assert document.title == "Test Book"
    assert document.metadata == {"creator": "A. Author", "language": "en"}
    assert [f.label for f in document.files] == ["one.xhtml", "two words.xhtml", "notes.xhtml"]
    assert [f.title for f in document.files] == ["One", "Two", "Notes"]
    toc = [(e.title, e.level, e.file_index) for e in document.toc]
    assert toc == [("One", 0, 0), ("Deep part", 1, 0), ("Missing anchor", 1, 0), ("Two", 0, 1)]
    deep = document.toc[1]
    assert document.files[0].text[deep.offset:].startswith("Deep part")
    assert document.toc[2].offset == 0
    assert not document.warnings


def test_epub_without_nav_falls_back_to_headings(tmp_path: Path) -> None:
    epub = build_epub(tmp_path / "b.epub", {"a.xhtml": xhtml("<h2>Alpha</h2><p>x</p><h3>Sub</h3>"),
                                            "b.xhtml": xhtml("<p>no heading</p>", title="Bee")})
    document = read_source(epub)
    toc = [(e.title, e.level, e.file_index) for e in document.toc]
    assert toc == [("Alpha", 0, 0), ("Sub", 1, 0), ("Bee", 0, 1)]
    assert any("TOC built from spine order and headings" in w for w in document.warnings)


def test_epub_broken_nav_falls_back(tmp_path: Path) -> None:
    nav = "<ol><li><a href='gone.xhtml'>Gone</a></li></ol>"
    epub = build_epub(tmp_path / "b.epub", {"a.xhtml": xhtml("<h1>Alpha</h1>")}, nav=nav)
    document = read_source(epub)
    assert [e.title for e in document.toc] == ["Alpha"]
    assert document.warnings


def test_path_traversal_stays_inside_the_archive(tmp_path: Path) -> None:
    assert resolve_href("OPS", "../../etc/passwd") is None
    assert resolve_href("OPS", "../x.xhtml#a") == ("x.xhtml", "a")
    assert resolve_href("OPS", "/OPS/../../etc/passwd") is None
    assert resolve_href("OPS", "sub/./../c%C3%A9.xhtml") == ("OPS/cé.xhtml", "")
    assert resolve_href("", "javascript:alert(1)") is None
    manifest = ('<item id="evil" href="../../../../etc/passwd" media-type="application/xhtml+xml"/>'
                '<item id="evil2" href="../../secret.xhtml" media-type="application/xhtml+xml"/>')
    epub = build_epub(tmp_path / "t.epub", {"ok.xhtml": xhtml("<h1>Fine</h1>")}, manifest_extra=manifest,
                      spine=['<itemref idref="evil"/>', '<itemref idref="c0"/>', '<itemref idref="evil2"/>'],
                      extra={"../secret.xhtml": xhtml("<p>SECRET</p>")})
    document = read_source(epub)
    assert [f.label for f in document.files] == ["ok.xhtml"]
    assert "SECRET" not in document.files[0].text and "root:" not in document.files[0].text


def test_zip_bomb_is_refused(tmp_path: Path) -> None:
    path = build_epub(tmp_path / "bomb.epub", {"a.xhtml": xhtml("<p>x</p>")})
    with zipfile.ZipFile(path, "a", zipfile.ZIP_DEFLATED) as zf, zf.open("OPS/zeros.xhtml", "w") as member:
        block = bytes(1 << 20)
        for _ in range(200):
            member.write(block)
    started = time.perf_counter()
    with pytest.raises(SourceTooLargeError, match=r"zeros\.xhtml"):
        read_source(path)
    assert time.perf_counter() - started < 2.0, "refused from the central directory, before inflating"


@pytest.mark.parametrize(("content", "reason"), [
    (b"", "empty file"),
    (b"PK\x03\x04 truncated garbage", "not a readable ZIP"),
    (b"%PDF-1.4 not a zip", "not a readable ZIP"),
])
def test_corrupt_epubs(tmp_path: Path, content: bytes, reason: str) -> None:
    (tmp_path / "bad.epub").write_bytes(content)
    with pytest.raises(SourceError, match=reason):
        read_source(tmp_path / "bad.epub")


def test_epub_without_container_or_opf(tmp_path: Path) -> None:
    with zipfile.ZipFile(tmp_path / "a.epub", "w") as zf:
        zf.writestr("mimetype", "application/epub+zip")
    with pytest.raises(SourceError, match=r"container\.xml"):
        read_source(tmp_path / "a.epub")
    with zipfile.ZipFile(tmp_path / "b.epub", "w") as zf:
        zf.writestr("META-INF/container.xml", CONTAINER)
    with pytest.raises(SourceError, match=r"package\.opf"):
        read_source(tmp_path / "b.epub")


def test_drm_encrypted_content_is_refused(tmp_path: Path) -> None:
    encryption = ('<encryption xmlns="urn:oasis:names:tc:opendocument:xmlns:container" '
                  'xmlns:enc="http://www.w3.org/2001/04/xmlenc#"><enc:EncryptedData>'
                  '<enc:EncryptionMethod Algorithm="http://www.w3.org/2001/04/xmlenc#aes128-cbc"/>'
                  '<enc:CipherData><enc:CipherReference URI="OPS/a.xhtml"/></enc:CipherData>'
                  '</enc:EncryptedData></encryption>')
    epub = build_epub(tmp_path / "drm.epub", {"a.xhtml": "\x8f\x01binary"},
                      extra={"META-INF/encryption.xml": encryption})
    with pytest.raises(SourceError, match="encrypted"):
        read_source(epub)


# --- text formats -----------------------------------------------------------------------------

def test_txt_encoding_fallbacks(tmp_path: Path) -> None:
    (tmp_path / "cp.txt").write_bytes(b"CHAPTER I\r\n\r\ncaf\xe9 \x93quoted\x94\r\n")
    document = read_source(tmp_path / "cp.txt")
    assert document.files[0].text == "CHAPTER I\n\ncafé “quoted”\n"
    assert document.warnings == ["not valid UTF-8; decoded as cp1252"]
    # 0x81 is no cp1252 character, so latin-1 reads it; one such control in a line of text is text, not binary
    (tmp_path / "l1.txt").write_bytes(b"x\x81y, and then a line of ordinary text")
    assert read_source(tmp_path / "l1.txt").files[0].text == "x\x81y, and then a line of ordinary text"
    (tmp_path / "bom.txt").write_bytes("\ufeffÜber\r\n".encode())
    document = read_source(tmp_path / "bom.txt")
    assert document.files[0].text == "Über\n" and not document.warnings


def test_txt_headings_and_long_lines(tmp_path: Path) -> None:
    long_line = "word " * 1_000_000
    text = f"My Book\n\nPART ONE\n\nChapter 1\n\n{long_line}\nnot a heading\nCHAPTER 2\n\nBook II: Canto III\n"
    (tmp_path / "b.txt").write_text(text, encoding="utf-8")
    started = time.perf_counter()
    document = read_source(tmp_path / "b.txt")
    assert time.perf_counter() - started < 2.0
    assert document.title == "My Book"
    assert [(e.title, e.level) for e in document.toc] == [("PART ONE", 0), ("Chapter 1", 1), ("Book II: Canto III", 1)]
    assert all(document.files[0].text[e.offset:].startswith(e.title) for e in document.toc)


def test_markdown_headings(tmp_path: Path) -> None:
    source = ("Title Here\r\n==========\r\n\r\nIntro.\r\n\r\n## Section *two* ##\r\n\r\n"
              "```\r\n# not a heading\r\n```\r\n\r\n- item\r\n---\r\n\r\nSub\r\n---\r\n\r\n#hashtag\r\n")
    (tmp_path / "d.md").write_bytes(source.encode())
    document = read_source(tmp_path / "d.md")
    text = document.files[0].text
    assert text == source.replace("\r\n", "\n")
    assert [(e.title, e.level) for e in document.toc] == [("Title Here", 0), ("Section *two*", 1), ("Sub", 1)]
    assert [text[e.offset:e.offset + 6] for e in document.toc] == ["Title ", "## Sec", "Sub\n--"]
    assert document.title == "Title Here"
    (tmp_path / "plain.markdown").write_text("no headings", encoding="utf-8")
    assert read_source(tmp_path / "plain.markdown").title == "plain"


def test_html_file(tmp_path: Path) -> None:
    (tmp_path / "p.htm").write_bytes("<html><head><meta charset='windows-1252'><title>Page</title></head>"
                                     "<body><h1>Top</h1><p>caf\xe9</p><h3>Low</h3></body></html>".encode("cp1252"))
    document = read_source(tmp_path / "p.htm")
    assert document.title == "Page" and document.format == "html"
    assert document.files[0].text == "Top\n\ncafé\n\nLow"
    assert [(e.title, e.level, e.offset) for e in document.toc] == [("Top", 0, 0), ("Low", 2, 11)]


# --- PDF outlines -----------------------------------------------------------------------------

def _cyclic_outline_pdf(path: Path) -> Path:
    """Three pages whose outline loops: the last top-level item's /Next is the first, and the one child's
    own child is its parent."""
    writer = pypdf.PdfWriter()
    for _ in range(3):
        writer.add_blank_page(200, 200)
    one = writer.add_outline_item(title="One", page_number=0)
    two = writer.add_outline_item(title="Two", page_number=1)
    three = writer.add_outline_item(title="Three", page_number=2, parent=two)
    two.get_object()[NameObject("/Next")] = one
    three.get_object()[NameObject("/Next")] = one
    three.get_object()[NameObject("/First")] = three.get_object()[NameObject("/Last")] = two
    with path.open("wb") as out:
        writer.write(out)
    return path


def test_cyclic_pdf_outline_is_walked_once(tmp_path: Path) -> None:
    path = _cyclic_outline_pdf(tmp_path / "cyclic.pdf")
    started = time.monotonic()
    document = read_source(path)
    assert time.monotonic() - started < 5
    assert [(e.title, e.level, e.file_index) for e in document.toc] == [("One", 0, 0), ("Two", 0, 1), ("Three", 1, 2)]
    fallback = list(_pypdf_outline(pypdf.PdfReader(path), 3))
    assert [(e.title, e.file_index) for e in fallback] == [("One", 0), ("Two", 1), ("Three", 2)]


# --- JSONL ------------------------------------------------------------------------------------

def test_jsonl_records_and_defaults(tmp_path: Path) -> None:
    lines = [json.dumps({"text": "first", "source": "a.pdf", "chunk_index": 4, "page": 2}), "",
             json.dumps({"text": "second", "tags": ["x"]})]
    (tmp_path / "c.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    document = read_source(tmp_path / "c.jsonl")
    assert [f.text for f in document.files] == ["first", "second"]
    assert document.prechunked is not None
    first, second = document.prechunked
    assert (first.file_index, first.source, first.chunk_index, first.metadata) == (0, "a.pdf", 4, {"page": 2})
    assert (second.file_index, second.source, second.chunk_index) == (1, "c.jsonl#line2", 2)
    assert second.metadata == {"tags": ["x"]}
    assert document.files[1].title == "c.jsonl#line2"


def test_jsonl_reports_every_bad_line(tmp_path: Path) -> None:
    rows = [b'{"text": "ok"}', b"not json", b'["a list"]', b'{"source": "no text"}', b'{"text": ""}',
            b'{"text": "x", "chunk_index": "3"}', b'{"text": "x", "chunk_index": true}', b'{"text": "x", "source": 5}',
            b'{"text": "caf\xe9"}', b"", b'{"text": "fine"}', b'{"text": 12}']
    (tmp_path / "bad.jsonl").write_bytes(b"\n".join(rows))
    with pytest.raises(BadLinesError) as caught:
        read_source(tmp_path / "bad.jsonl")
    assert list(caught.value.bad_lines) == [2, 3, 4, 5, 6, 7, 8, 9, 12]
    assert "line 9: invalid UTF-8" in str(caught.value) and "bad.jsonl" in str(caught.value)
    (tmp_path / "empty.jsonl").write_text("\n\n", encoding="utf-8")
    with pytest.raises(SourceError, match="no JSON lines"):
        read_source(tmp_path / "empty.jsonl")


def test_regression_jsonl_lines_no_store_can_hold_are_bad_lines(tmp_path: Path) -> None:
    """Found by fuzzing: each of these used to raise RecursionError, or to pass the reader and then fail the
    store's write (unpaired surrogate, NaN, a chunk_index beyond PostgreSQL's integer)."""
    rows = [b'{"text": "ok"}', b'{"text": "x", "m": ' + b"[" * 5000 + b"]" * 5000 + b"}", b"[" * 100_000,
            b'{"text": "a\\ud800b"}', b'{"text": "a", "source": "\\udc00"}', b'{"text": "a", "m": {"\\udfff": 1}}',
            b'{"text": "a", "x": NaN}', b'{"text": "a", "x": -Infinity}', b'{"text": "a", "chunk_index": 2147483648}',
            b'{"text": "a", "chunk_index": 1' + b"0" * 5000 + b"}", b'{"text": "\\ud83d\\ude00 paired is fine"}']
    (tmp_path / "hostile.jsonl").write_bytes(b"\n".join(rows))
    with pytest.raises(BadLinesError) as caught:
        read_source(tmp_path / "hostile.jsonl")
    assert list(caught.value.bad_lines) == list(range(2, 11))
    assert "nested too deeply" in caught.value.bad_lines[2] and "surrogate" in caught.value.bad_lines[4]
    assert "NaN" in caught.value.bad_lines[7] and str(MAX_CHUNK_INDEX) in caught.value.bad_lines[9]


# --- JSONL, fuzzed: any bytes give chunks or BadLinesError/SourceError; bad lines are named exactly --------------

_JSON_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.text(max_size=8),
                          st.floats(allow_nan=False, allow_infinity=False))
_JSON_VALUES = st.recursive(_JSON_SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                                    st.dictionaries(st.text(max_size=5), inner,
                                                                                    max_size=3)), max_leaves=8)
_TEXT = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), min_size=1, max_size=30).filter(str.strip)
_GOOD = st.fixed_dictionaries({"text": _TEXT}, optional={
    "source": _TEXT, "chunk_index": st.integers(0, MAX_CHUNK_INDEX),
    "meta": _JSON_VALUES, "page": st.integers(0, 10_000)})
_BAD_LINES = [b"not json", b"{", b'["a list"]', b"42", b'"text"', b'{"source": "no text"}', b'{"text": ""}',
              b'{"text": " \\n "}', b'{"text": 5}', b'{"text": null}', b'{"text": ["a"]}',
              b'{"text": "a", "source": 5}', b'{"text": "a", "source": ""}', b'{"text": "a", "chunk_index": -1}',
              b'{"text": "a", "chunk_index": true}', b'{"text": "a", "chunk_index": 1.5}',
              b'{"text": "a", "chunk_index": "3"}', b'{"text": "caf\xe9"}', b'{"text": "a\\udc00"}',
              b'{"text": "a", "x": NaN}', b"[" * 3000, b'{"text": "a"} trailing',
              b'{"text": "a", "chunk_index": 9999999999}', b"\xff\xfe{}"]


def _read(data: bytes) -> Any:
    """read_jsonl on ``data`` written to a fresh file named ``f.jsonl``."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "f.jsonl"
        path.write_bytes(data)
        return read_jsonl(path)


@settings(max_examples=150, deadline=None)
@given(lines=st.lists(st.one_of(st.tuples(st.just("good"), _GOOD, st.booleans()),
                                st.tuples(st.just("bad"), st.sampled_from(_BAD_LINES), st.just(False)),
                                st.tuples(st.just("blank"), st.sampled_from([b"", b"  ", b"\t", b"\r"]),
                                          st.just(False))), min_size=1, max_size=8),
       newline=st.sampled_from([b"\n", b"\r\n"]))
def test_jsonl_names_exactly_the_bad_lines_or_keeps_every_good_one(lines: list[tuple[str, Any, bool]],
                                                                   newline: bytes) -> None:
    raws = [json.dumps(v, ensure_ascii=ascii).encode() if kind == "good" else v for kind, v, ascii in lines]
    bad = [n + 1 for n, (kind, _, _) in enumerate(lines) if kind == "bad"]
    good = [(n, v) for n, (kind, v, _) in enumerate(lines) if kind == "good"]
    try:
        document = _read(newline.join(raws))
    except BadLinesError as exc:
        assert list(exc.bad_lines) == bad
        return
    except SourceError as exc:
        assert not good and not bad and "no JSON lines" in str(exc)
        return
    assert not bad
    assert [f.text for f in document.files] == [record["text"] for _, record in good]
    expected = [(i, r.get("source", f"f.jsonl#line{n}"), r.get("chunk_index", n)) for i, (n, r) in enumerate(good)]
    assert [(c.file_index, c.source, c.chunk_index) for c in document.prechunked] == expected
    assert [c.metadata for c in document.prechunked] == [
        {k: v for k, v in record.items() if k not in ("text", "source", "chunk_index")} for _, record in good]


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.binary(max_size=200),
                 st.lists(st.sampled_from([b"{", b"}", b"[", b"]", b'"text"', b'"source"', b'"chunk_index"', b":",
                                           b",", b"\n", b'"a"', b"1", b"-1", b"1e400", b"NaN", b"null", b"true",
                                           b'"\\ud800"', b'"\\udc00"', b"\xef\xbb\xbf", b"\xff", b"\x00", b" "]),
                          max_size=40).map(b"".join)))
def test_jsonl_any_bytes_give_storable_chunks_or_a_source_error(data: bytes) -> None:
    try:
        document = _read(data)
    except SourceError as exc:
        assert "f.jsonl" in str(exc)
        if isinstance(exc, BadLinesError):
            assert exc.bad_lines and all(n >= 1 for n in exc.bad_lines)
        return
    assert len(document.files) == len(document.prechunked) >= 1
    for file, chunk in zip(document.files, document.prechunked):
        assert file.text.strip() and 0 <= chunk.chunk_index <= MAX_CHUNK_INDEX and chunk.source.strip()
        json.dumps([file.text, chunk.source, chunk.metadata], ensure_ascii=False, allow_nan=False).encode("utf-8")
