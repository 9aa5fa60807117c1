"""The web reader in a real Chromium against a real server.

Needs a ``reader_server`` fixture (provided by the server's conftest) yielding an object with:

* ``base_url``  ``http://127.0.0.1:PORT`` serving the pages, ``/static/*`` and the Reader API
* ``ingest(path) -> doc_id``  add a book and wait until it is readable
* ``resolve(tag_key) -> dict``  the ``GET /api/resolve/{tag_key}`` answer
* ``fake_llm``  ``None``, or a scripted chat model (model-mode tests are skipped for now)

Offsets are never hard-coded: each test finds its passage in the stored canonical text (Python
code points) and builds the tag from that, so they hold whatever the parsers' exact output is.
Screenshots go to ``artifacts/screenshots/`` (git-ignored) for a person to look at.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.request import urlopen

import pytest
from conftest import shared_path

from chapterverse.web import CONTENT_SECURITY_POLICY, STATIC_DIR, index_html, not_found_html

try:
    from playwright import sync_api
except ModuleNotFoundError:  # the static checks below still run
    sync_api = None

browser = pytest.mark.browser

SCREENSHOTS = Path(__file__).resolve().parents[1] / "artifacts" / "screenshots"
DEMO_BOOK = Path(__file__).resolve().parents[1] / "src" / "chapterverse" / "demo" / "the-keeper-of-gull-rock.md"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
]
ANSWER_TIMEOUT_MS = 60_000

# ---------------------------------------------------------------- books written by the tests

ASTRAL_PARAGRAPH = (
    "The fraktur sign above the door read 𝔘𝔫𝔱𝔢𝔯𝔰𝔢𝔢, the keeper laughed 😀😀 at the cafe\u0301 door, "
    "a family 👩\u200d👩\u200d👧 waved from the quay, and someone had chalked q\u0301 on the wall."
)
# Parsers may NFC-normalise (cafe + U+0301 -> café); q + U+0301 has no precomposed form, so a
# combining mark survives whatever the normalisation.
KEY_SENTENCE = "The brass key was hidden beneath the third stair of the lighthouse, wrapped in an oilcloth."
SPRING_PARAGRAPH = "In the spring the inspector 𝔄𝔩𝔡𝔯𝔦𝔠𝔥 arrived and asked where the spare lens was kept."
COT_PARAGRAPH = "The keeper told him the spare lens was kept in the crate under the cot."

LIGHTHOUSE_MD = f"""# The Lighthouse Keeper's Notebook

## Chapter One: Arrival

{ASTRAL_PARAGRAPH}

{KEY_SENTENCE} Nobody ever looked there.

Storms came every autumn, and the lamp never failed.

## Chapter Two: Winter

{SPRING_PARAGRAPH}

{COT_PARAGRAPH}

He did not mention the brass key.
"""

HOSTILE_LINE = '<img src=x onerror=alert(1)> <script>alert(2)</script> <a href="javascript:alert(3)">x</a>'
HOSTILE_MD = f"""# Visitors

A visitor left a strange note about the harbour: {HOSTILE_LINE}

The keeper burned the strange note in the stove.
"""

_ESCAPED_HOSTILE = HOSTILE_LINE.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
HOSTILE_XHTML = f"""<?xml version="1.0" encoding="utf-8"?>
<!DOCTYPE html>
<html xmlns="http://www.w3.org/1999/xhtml" xmlns:epub="http://www.idpf.org/2007/ops" lang="en">
<head><title>Visitors &lt;script&gt;alert(7)&lt;/script&gt;</title>
<script>alert(4)</script></head>
<body onload="alert(5)">
<h1>Visitors</h1>
<p>A visitor left a strange note about the harbour: {_ESCAPED_HOSTILE}</p>
<p onclick="alert(6)">The keeper burned the strange note in the stove.
<img src="x" onerror="alert(8)" alt="a broken picture"/>
<a href="javascript:alert(9)">a link that must stay inert</a></p>
<script>alert(10)</script>
</body>
</html>
"""


def write_hostile_epub(path: Path) -> Path:
    """A minimal EPUB 3 whose text *and* markup carry script: both must stay inert."""
    container = """<?xml version="1.0"?>
<container version="1.0" xmlns="urn:oasis:names:tc:opendocument:xmlns:container">
  <rootfiles><rootfile full-path="OEBPS/content.opf" media-type="application/oebps-package+xml"/></rootfiles>
</container>"""
    opf = """<?xml version="1.0" encoding="utf-8"?>
<package xmlns="http://www.idpf.org/2007/opf" version="3.0" unique-identifier="uid">
  <metadata xmlns:dc="http://purl.org/dc/elements/1.1/">
    <dc:identifier id="uid">urn:uuid:0b7e4a52-8a4e-4c3e-9a55-2f1f4ad1c001</dc:identifier>
    <dc:title>Hostile &lt;script&gt;alert(11)&lt;/script&gt; Visitors</dc:title>
    <dc:language>en</dc:language>
    <meta property="dcterms:modified">2025-01-01T00:00:00Z</meta>
  </metadata>
  <manifest>
    <item id="nav" href="nav.xhtml" media-type="application/xhtml+xml" properties="nav"/>
    <item id="ch1" href="ch1.xhtml" media-type="application/xhtml+xml" properties="scripted"/>
  </manifest>
  <spine><itemref idref="ch1"/></spine>
</package>"""
    nav = """<?xml version="1.0" encoding="utf-8"?>
<!DOCTYPE html>
<html xmlns="http://www.w3.org/1999/xhtml" xmlns:epub="http://www.idpf.org/2007/ops">
<head><title>Contents</title></head>
<body><nav epub:type="toc"><ol>
  <li><a href="ch1.xhtml">Visitors &lt;img src=x onerror=alert(12)&gt;</a></li>
</ol></nav></body></html>"""
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(zipfile.ZipInfo("mimetype"), "application/epub+zip", compress_type=zipfile.ZIP_STORED)
        z.writestr("META-INF/container.xml", container, compress_type=zipfile.ZIP_DEFLATED)
        z.writestr("OEBPS/content.opf", opf, compress_type=zipfile.ZIP_DEFLATED)
        z.writestr("OEBPS/nav.xhtml", nav, compress_type=zipfile.ZIP_DEFLATED)
        z.writestr("OEBPS/ch1.xhtml", HOSTILE_XHTML, compress_type=zipfile.ZIP_DEFLATED)
    return path


# ---------------------------------------------------------------- browser fixture


@dataclass
class BrowserPage:
    """Pages in a CSP-enforcing Chromium, with everything they report collected for assertions."""

    browser: Any
    page: Any = None
    dialogs: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    contexts: list[Any] = field(default_factory=list)

    def new_page(self, **context_options: Any) -> Any:
        """A page in a fresh context (e.g. ``viewport={"width": 390, "height": 844}``, ``color_scheme="dark"``)."""
        options = {"viewport": {"width": 1400, "height": 900}, "color_scheme": "light", **context_options}
        context = self.browser.new_context(**options)
        context.set_default_timeout(15_000)
        self.contexts.append(context)
        page = context.new_page()
        page.on("dialog", self._on_dialog)
        page.on("pageerror", lambda exc: self.errors.append(f"pageerror: {exc}"))
        page.on("console", self._on_console)
        return page

    def _on_dialog(self, dialog: Any) -> None:
        self.dialogs.append(f"{dialog.type}: {dialog.message}")
        dialog.dismiss()

    def _on_console(self, message: Any) -> None:
        if message.type == "error" and ("Content Security Policy" in message.text or "Refused" in message.text):
            self.errors.append(f"csp: {message.text}")

    def shot(self, page: Any, name: str) -> None:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOTS / f"{name}.png"))

    def assert_clean(self) -> None:
        assert self.dialogs == [], f"a script ran: {self.dialogs}"
        assert self.errors == [], f"page errors or CSP violations: {self.errors}"


def _chromium_path() -> str | None:
    return os.environ.get("CHAPTERVERSE_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


def expect(target: Any) -> Any:
    return sync_api.expect(target)


@pytest.fixture(scope="module")
def _chromium() -> Iterator[Any]:
    if sync_api is None:
        pytest.skip("playwright is not installed (pip install -e '.[test]')")
    executable = _chromium_path()
    if not executable:
        pytest.skip("chromium is not installed (apt-get install chromium, or set CHAPTERVERSE_CHROMIUM)")
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def browser_page(_chromium: Any) -> Iterator[BrowserPage]:
    """A desktop page (``.page``); ``.new_page(...)`` makes more; ``.assert_clean()`` checks reports."""
    browsing = BrowserPage(_chromium)
    browsing.page = browsing.new_page()
    try:
        yield browsing
    finally:
        for context in browsing.contexts:
            context.close()


# ---------------------------------------------------------------- helpers


def api_json(server: Any, path: str) -> Any:
    with urlopen(f"{server.base_url}{path}", timeout=30) as response:
        return json.load(response)


def tag_for(server: Any, doc_id: int, first: str, last: str | None = None) -> str:
    """The tag key of the stored text from the start of ``first`` to the end of ``last`` (or of ``first``)."""
    document = api_json(server, f"/api/documents/{doc_id}")
    for meta in document["files"]:
        text = api_json(server, f"/api/files/{meta['id']}")["text"]
        start = text.find(first)
        if start == -1:
            continue
        end_text = last or first
        end = text.find(end_text, start)
        assert end != -1, f"{end_text!r} is not after {first!r} in file {meta['id']}"
        return f"f{meta['id']}-{start}-{end + len(end_text)}"
    raise AssertionError(f"{first!r} is in no file of document {doc_id}")


def file_text(server: Any, tag_key: str) -> str:
    return api_json(server, f"/api/files/{tag_key[1:].split('-')[0]}")["text"]


def marks_text(page: Any) -> str:
    return page.eval_on_selector_all("mark.cv-highlight", "marks => marks.map(m => m.textContent).join('')")


def open_reader(page: Any, server: Any, doc_id: int, fragment: str = "") -> None:
    page.goto(f"{server.base_url}/read/{doc_id}{fragment}")
    expect(page.locator("[data-cv-text] p").first).to_be_attached()


def ask(page: Any, question: str, mode: str = "extractive") -> Any:
    """Ask in the open reader and return the finished answer's locator."""
    page.select_option("[data-cv-mode]", mode)
    before = page.locator("[data-cv-answer]").count()
    page.fill("[data-cv-ask]", question)
    page.press("[data-cv-ask]", "Enter")
    answer = page.locator("[data-cv-answer]").nth(before)
    expect(answer).to_have_attribute("aria-busy", "false", timeout=ANSWER_TIMEOUT_MS)
    return answer


def ask_with_footnotes(page: Any, question: str) -> Any:
    answer = ask(page, question)
    errors = answer.locator(".cv-error")
    assert errors.count() == 0, errors.first.text_content()
    expect(answer.locator("a.cv-footnote").first).to_be_visible()
    return answer


def open_preview(page: Any, footnote: Any) -> Any:
    footnote.click()
    preview = page.locator("[data-cv-preview]")
    expect(preview).to_be_visible()
    expect(preview.locator("[data-cv-goto]")).to_be_enabled()  # the cited text has arrived
    return preview


def assert_highlight(page: Any, server: Any, tag_key: str) -> None:
    marks = page.locator("mark.cv-highlight")
    expect(marks.first).to_be_attached()
    assert marks_text(page) == server.resolve(tag_key)["text"]
    tags = page.eval_on_selector_all("mark.cv-highlight", "marks => [...new Set(marks.map(m => m.dataset.tag))]")
    assert tags == [tag_key]
    expect(marks.first).to_be_in_viewport()


INJECTED = (
    "[data-cv-text] img, [data-cv-text] script, [data-cv-text] iframe, [data-cv-text] a, "
    "[data-cv-messages] img, [data-cv-messages] script, [data-cv-messages] iframe, "
    "[data-cv-preview] img, [data-cv-preview] script, [data-cv-toc] img, [data-cv-toc] script, "
    "a[href^='javascript:' i], [onerror], [onload], [onclick]"
)

# ---------------------------------------------------------------- fixtures: books


@pytest.fixture
def lighthouse(reader_server: Any, tmp_path: Path) -> int:
    path = tmp_path / "lighthouse.md"
    path.write_text(LIGHTHOUSE_MD, encoding="utf-8")
    return reader_server.ingest(path)


# ---------------------------------------------------------------- static checks (no browser)


def test_content_security_policy_is_strict() -> None:
    directives = dict(d.strip().split(" ", 1) for d in CONTENT_SECURITY_POLICY.split(";"))
    assert directives == {
        "default-src": "'self'", "script-src": "'self'", "style-src": "'self'", "img-src": "'self' data:",
        "connect-src": "'self'", "object-src": "'none'", "base-uri": "'none'", "frame-ancestors": "'none'",
        "form-action": "'self'",
    }


@pytest.mark.parametrize("html", [index_html(), not_found_html("/nope")], ids=["reader", "not found"])
def test_page_has_no_inline_script_or_style_and_nothing_remote(html: str) -> None:
    for tag in re.findall(r"<script\b[^>]*>", html):
        assert re.search(r'\ssrc="/static/[\w.-]+\.js"', tag), f"inline or remote script: {tag}"
    assert not re.search(r"<script\b[^>]*>\s*[^<\s]", html), "a script element with a body"
    assert "<style" not in html and not re.search(r"\sstyle=", html)
    assert not re.search(r"\son\w+=", html), "an inline event handler"
    for url in re.findall(r'\s(?:src|href)="([^"]*)"', html):
        assert url.startswith(("/", "#", "data:")) and not url.startswith("//"), f"remote resource {url}"


def test_scripts_never_turn_text_into_html() -> None:
    """Book text, titles and answers are untrusted: the reader only ever creates text nodes."""
    assert {"index.html", "app.js", "app.css"} <= {p.name for p in STATIC_DIR.iterdir()}
    forbidden = re.compile(r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function|"
                           r"setAttribute\(\s*[\"']style|createContextualFragment|DOMParser")
    for script in sorted(STATIC_DIR.glob("*.js")):
        source = script.read_text(encoding="utf-8")
        found = forbidden.search(source)
        assert not found, f"{script.name}: {found.group(0)}"
        for target in re.findall(r'(?:import|from)\s*["\']([^"\']+)["\']', source):
            assert target.startswith("./") and (STATIC_DIR / target).is_file(), f"{script.name} imports {target}"
    css = (STATIC_DIR / "app.css").read_text(encoding="utf-8")
    assert "@import" not in css and not re.search(r"url\(\s*['\"]?(?!data:)", css), "the stylesheet loads something"


# ---------------------------------------------------------------- browser tests


@browser
def test_extractive_answer_has_numbered_footnotes(reader_server: Any, browser_page: BrowserPage, lighthouse: int) -> None:
    page = browser_page.page
    open_reader(page, reader_server, lighthouse)
    answer = ask_with_footnotes(page, "When did the inspector arrive?")  # a when-question: its phrase is marked

    expect(answer.locator("[data-cv-mode-badge]")).to_have_text("extractive")
    footnotes = answer.locator("a.cv-footnote")
    numbers: dict[str, str] = {}
    for i in range(footnotes.count()):
        note = footnotes.nth(i)
        tag = note.get_attribute("data-tag")
        assert tag and tag.startswith("f")
        label = numbers.setdefault(tag, f"[{len(numbers) + 1}]")  # numbered by first appearance
        assert note.text_content() == label
        assert note.get_attribute("href") == f"/read/{lighthouse}#{tag}"
        assert (note.get_attribute("aria-label") or "").startswith(f"Citation {label[1:-1]}")
    assert "[f" not in answer.locator("[data-cv-answer-text]").text_content(), "a raw tag was left in the text"
    phrase = answer.locator("[data-cv-answer-text] .cv-answer-phrase")
    expect(phrase).to_have_count(1)  # the reader's answer phrase, emphasised inside its sentence
    assert (phrase.text_content() or "").strip() in (answer.locator("[data-cv-answer-text]").text_content() or "")
    browser_page.shot(page, "reader-answer")
    browser_page.assert_clean()


@browser
def test_an_unsure_answer_is_a_note_with_passages_not_an_answer(reader_server: Any, browser_page: BrowserPage,
                                                                tmp_path: Path) -> None:
    """A question about the book's own people that it never answers (issue 27): the reader says it is unsure
    and shows the cited passages that may help, neither an answer nor "The book does not say"."""
    path = tmp_path / DEMO_BOOK.name
    shutil.copyfile(DEMO_BOOK, path)
    doc_id = reader_server.ingest(path)
    page = browser_page.page
    open_reader(page, reader_server, doc_id)
    answer = ask(page, "What was the name of Marta's husband?")

    note = answer.locator("[data-cv-unsure]")
    expect(note).to_be_visible()
    expect(note).to_have_attribute("role", "note")
    expect(answer).to_have_class(re.compile(r"\bcv-unsure\b"))
    expect(answer.locator("[data-cv-not-found]")).to_have_count(0)
    text = answer.locator("[data-cv-answer-text]").text_content() or ""
    assert text.startswith("No direct answer found; passages that may help:") and "[f" not in text
    footnotes = answer.locator("a.cv-footnote")
    assert 2 <= footnotes.count() <= 3
    expect(answer.locator("ol.cv-sources li")).to_have_count(footnotes.count())
    expect(answer.locator(".cv-answer-phrase")).to_have_count(0)
    tag = footnotes.first.get_attribute("data-tag")
    assert tag and reader_server.resolve(tag)["text"] in file_text(reader_server, tag)
    browser_page.shot(page, "reader-unsure")
    browser_page.assert_clean()


@browser
def test_preview_shows_the_exact_cited_text_and_toggles(
    reader_server: Any, browser_page: BrowserPage, lighthouse: int
) -> None:
    page = browser_page.page
    open_reader(page, reader_server, lighthouse)
    footnote = ask_with_footnotes(page, "Where was the brass key hidden beneath the third stair?").locator("a.cv-footnote").first
    tag = footnote.get_attribute("data-tag")

    preview = open_preview(page, footnote)
    assert preview.locator("[data-cv-preview-text]").text_content() == reader_server.resolve(tag)["text"]
    assert footnote.get_attribute("aria-expanded") == "true"
    assert footnote.get_attribute("aria-controls") == preview.get_attribute("id")
    browser_page.shot(page, "reader-preview")

    footnote.click()  # the same footnote again closes it
    expect(preview).to_be_hidden()
    assert footnote.get_attribute("aria-expanded") == "false"

    open_preview(page, footnote)
    page.keyboard.press("Escape")
    expect(preview).to_be_hidden()
    assert page.evaluate("document.activeElement.dataset.tag") == tag
    browser_page.assert_clean()


@browser
def test_go_to_passage_highlights_exactly_the_cited_range(
    reader_server: Any, browser_page: BrowserPage, lighthouse: int
) -> None:
    page = browser_page.page
    open_reader(page, reader_server, lighthouse)
    footnote = ask_with_footnotes(page, "Where was the brass key hidden beneath the third stair?").locator("a.cv-footnote").first
    tag = footnote.get_attribute("data-tag")

    open_preview(page, footnote).locator("[data-cv-goto]").click()
    assert_highlight(page, reader_server, tag)
    assert page.url.endswith(f"/read/{lighthouse}#{tag}")
    browser_page.shot(page, "reader-highlight")
    browser_page.assert_clean()


@browser
def test_a_mistyped_address_leads_back_to_the_library(reader_server: Any, browser_page: BrowserPage,
                                                      lighthouse: int) -> None:
    page = browser_page.page
    for address in ("/read/abc", "/nope", f"/read/{lighthouse + 999}"):
        page.goto(f"{reader_server.base_url}{address}")
        expect(page.get_by_role("heading", name="Not found")).to_be_visible()
        expect(page.locator("[data-cv-missing-path]")).to_have_text(address)
    expect(page.get_by_text(f"The library has no document {lighthouse + 999} to read at")).to_be_visible()
    browser_page.shot(page, "not-found")
    page.get_by_role("link", name="Back to the library").click()
    expect(page.get_by_role("heading", name="Library")).to_be_visible()
    assert page.url == f"{reader_server.base_url}/"
    browser_page.assert_clean()


@browser
def test_deep_link_opens_the_passage_highlighted(reader_server: Any, browser_page: BrowserPage, lighthouse: int) -> None:
    tag = tag_for(reader_server, lighthouse, KEY_SENTENCE)
    page = browser_page.page
    open_reader(page, reader_server, lighthouse, f"#{tag}")
    assert_highlight(page, reader_server, tag)
    assert marks_text(page) == KEY_SENTENCE

    dark = browser_page.new_page(color_scheme="dark")
    open_reader(dark, reader_server, lighthouse, f"#{tag}")
    assert_highlight(dark, reader_server, tag)
    browser_page.shot(dark, "reader-deep-link-dark")
    browser_page.assert_clean()


@browser
def test_highlight_is_exact_after_astral_characters(reader_server: Any, browser_page: BrowserPage, lighthouse: int) -> None:
    """Code points, not UTF-16 units: emoji, 𝔘 and e + U+0301 come before the span."""
    tag = tag_for(reader_server, lighthouse, SPRING_PARAGRAPH, COT_PARAGRAPH)  # spans two paragraphs
    start = int(tag.split("-")[1])
    before = file_text(reader_server, tag)[:start]
    assert any(ord(ch) > 0xFFFF for ch in before), "the test needs astral characters before the span"
    assert "\u0301" in before, "the test needs a combining mark before the span"

    page = browser_page.page
    open_reader(page, reader_server, lighthouse, f"#{tag}")
    assert_highlight(page, reader_server, tag)
    assert marks_text(page).startswith(SPRING_PARAGRAPH) and marks_text(page).endswith(COT_PARAGRAPH)
    assert page.locator("mark.cv-highlight").count() >= 2, "a range over two paragraphs needs a mark in each"

    single = tag_for(reader_server, lighthouse, "𝔄𝔩𝔡𝔯𝔦𝔠𝔥 arrived")  # the span itself starts with astral chars
    open_reader(page, reader_server, lighthouse, f"#{single}")
    assert_highlight(page, reader_server, single)
    assert marks_text(page) == "𝔄𝔩𝔡𝔯𝔦𝔠𝔥 arrived"
    browser_page.assert_clean()


@browser
@pytest.mark.parametrize("fmt", ["md", "epub"])
def test_hostile_book_text_runs_no_script(
    reader_server: Any, browser_page: BrowserPage, tmp_path: Path, fmt: str
) -> None:
    if fmt == "md":
        path = tmp_path / "hostile.md"
        path.write_text(HOSTILE_MD, encoding="utf-8")
    else:
        path = write_hostile_epub(tmp_path / "hostile.epub")
    doc_id = reader_server.ingest(path)
    page = browser_page.page
    open_reader(page, reader_server, doc_id)

    # Every file of the book, as text.
    document = api_json(reader_server, f"/api/documents/{doc_id}")
    for meta in sorted(document["files"], key=lambda f: f["ordinal"]):
        page.select_option("[data-cv-file-select]", str(meta["id"]))
        expect(page.locator("[data-cv-text]")).to_have_attribute("data-file", str(meta["id"]))
        stored = api_json(reader_server, f"/api/files/{meta['id']}")["text"]
        shown = page.locator("[data-cv-text]").text_content() or ""
        for fragment in ("<script>alert(2)</script>", "onerror=alert(1)", "javascript:alert(3)"):
            if fragment in stored:
                assert fragment in shown, f"{fragment!r} is in the book but not shown as text"

    # The same text in an answer and in a preview.
    answer = ask(page, "What strange note did the visitor leave about the harbour?")
    footnotes = answer.locator("a.cv-footnote")
    if footnotes.count():
        open_preview(page, footnotes.first).locator("[data-cv-goto]").click()
        expect(page.locator("mark.cv-highlight").first).to_be_attached()
    page.wait_for_timeout(500)  # give any injected handler the chance to fire

    assert page.locator(INJECTED).count() == 0, "book markup became elements"
    assert page.evaluate("document.querySelectorAll('script:not([src^=\"/static/\"])').length") == 0
    browser_page.shot(page, f"reader-hostile-{fmt}")
    browser_page.assert_clean()


@browser
def test_phone_layout_preview_and_highlight(reader_server: Any, browser_page: BrowserPage, lighthouse: int) -> None:
    page = browser_page.new_page(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)
    open_reader(page, reader_server, lighthouse)
    page.click("[data-cv-chat-toggle]")
    footnote = ask_with_footnotes(page, "Where was the brass key hidden beneath the third stair?").locator("a.cv-footnote").first
    tag = footnote.get_attribute("data-tag")
    preview = open_preview(page, footnote)
    assert preview.locator("[data-cv-preview-text]").text_content() == reader_server.resolve(tag)["text"]
    browser_page.shot(page, "phone-preview")
    preview.locator("[data-cv-goto]").click()
    assert_highlight(page, reader_server, tag)
    expect(page.locator("[data-cv-chat]")).to_be_hidden()  # the drawer makes way for the passage
    browser_page.shot(page, "phone-highlight")
    browser_page.assert_clean()


def _scripted_model(question_marker: str, quote_words: str) -> Any:
    """A model that searches, then cites one real tag twice, one fabricated tag, a claim without citation and a bad
    quote: half its claims supported, so its answer stands, marked."""
    from fakellm import Reply

    def handler(request: dict[str, Any]) -> Any:
        last = request["messages"][-1]
        content = str(last.get("content") or "")
        if "TEXT:" in content or "PARTS:" in content:  # background summary / selection calls
            return Reply.text("A summary.")
        tools = [m for m in request["messages"] if m.get("role") == "tool"]
        if not tools:
            return Reply.tool_call("search_passages", {"query": question_marker})
        evidence = tools[-1]["content"]
        previous = 0
        tag = None
        for match in re.finditer(r"\[f\d+-\d+-\d+\]", evidence):
            if quote_words.lower() in evidence[previous:match.start()].lower():
                tag = match.group()
                break
            previous = match.end()
        assert tag, "the scripted search did not return the expected passage"
        return Reply.text(f'Holmes says "{quote_words}" {tag} [f99999-1-5]. He tells Watson: "{question_marker}" '
                          f'{tag}. Watson always carried a revolver in every single story of the whole collection. '
                          '"Holmes disliked violins intensely" he said.', chunk_size=4)

    return handler


@pytest.fixture(scope="module")
def sherlock(reader_server: Any) -> int:
    return reader_server.ingest(shared_path("books", "epub", "sherlock-holmes.epub"))


@browser
@pytest.mark.slow
def test_model_answer_on_a_real_book_marks_the_verifier_findings(
    reader_server: Any, browser_page: BrowserPage, sherlock: int
) -> None:
    """Model mode on a real book: footnote preview == resolve(tag), dropped tag listed, unsupported and
    unverified marked, go to passage highlights exactly."""
    reader_server.fake_llm.handler = _scripted_model("You see, but you do not observe", "you do not observe")
    page = browser_page.page
    open_reader(page, reader_server, sherlock)
    answer = ask(page, "What does Holmes say about seeing and observing?", mode="auto")
    expect(answer.locator("[data-cv-mode-badge]")).to_have_text(re.compile("model", re.I))
    footnotes = answer.locator("a.cv-footnote")
    expect(footnotes).to_have_count(2)
    tag = footnotes.first.get_attribute("data-tag")
    assert footnotes.nth(1).get_attribute("data-tag") == tag
    resolved = reader_server.resolve(tag)
    assert "you do not observe" in resolved["text"]

    preview = open_preview(page, footnotes.first)
    assert preview.locator("[data-cv-preview-text]").text_content() == resolved["text"]
    expect(answer.locator("[data-cv-dropped]")).to_contain_text("f99999-1-5")
    expect(answer.locator(".cv-unsupported", has_text="Watson always carried a revolver")).to_have_count(1)
    expect(answer.locator(".cv-unverified", has_text="Holmes disliked violins intensely")).to_have_count(1)
    browser_page.shot(page, "model-answer-preview")

    preview.locator("[data-cv-goto]").click()
    assert_highlight(page, reader_server, tag)
    browser_page.shot(page, "model-answer-highlight")
    browser_page.assert_clean()


def _gull_rock_model(answer: Any) -> Any:
    """A model that looks up the brass key, then answers ``answer(tag of the key's passage)``."""
    from fakellm import Reply

    def handler(request: dict[str, Any]) -> Any:
        content = str(request["messages"][-1].get("content") or "")
        if "TEXT:" in content or "PARTS:" in content:  # background summary / selection calls
            return Reply.text("A summary.")
        tools = [m for m in request["messages"] if m.get("role") == "tool"]
        if not tools:
            return Reply.tool_call("search_passages", {"query": "brass key hidden beneath the third stair"})
        evidence = tools[-1]["content"]
        previous = 0
        for match in re.finditer(r"\[f\d+-\d+-\d+\]", evidence):
            if "brass key was hidden" in evidence[previous:match.start()]:
                return Reply.text(answer(match.group()), chunk_size=5)
            previous = match.end()
        raise AssertionError("the scripted search did not return the key's passage")

    return handler


INVENTED = "The keeper was paid forty crowns a month by the harbour board."


@browser
def test_a_model_sentence_no_passage_supports_is_marked_in_the_chat(
    reader_server: Any, browser_page: BrowserPage, lighthouse: int
) -> None:
    reader_server.fake_llm.handler = _gull_rock_model(
        lambda tag: f"The brass key was hidden beneath the third stair, wrapped in an oilcloth {tag}. {INVENTED}")
    page = browser_page.page
    open_reader(page, reader_server, lighthouse)
    answer = ask(page, "Where was the brass key hidden?", mode="auto")
    expect(answer.locator("[data-cv-mode-badge]")).to_have_text(re.compile("model", re.I))
    expect(answer.locator("a.cv-footnote")).to_have_count(1)
    expect(answer.locator(".cv-unsupported", has_text=INVENTED)).to_have_count(1)
    expect(answer.locator("[data-cv-unsupported-note]")).to_contain_text("1 sentence not supported by a cited passage")
    browser_page.shot(page, "model-answer-unsupported-marked")
    browser_page.assert_clean()


@browser
def test_a_model_answer_nothing_supports_gives_way_to_the_extractive_one(
    reader_server: Any, browser_page: BrowserPage, lighthouse: int
) -> None:
    reader_server.fake_llm.handler = _gull_rock_model(
        lambda tag: f"{INVENTED} The inspector was a cheerful man who liked to sing in the evenings {tag}.")
    page = browser_page.page
    open_reader(page, reader_server, lighthouse)
    answer = ask(page, "Where was the brass key hidden?", mode="auto")
    expect(answer.locator("[data-cv-mode-badge]")).to_have_text(re.compile("extractive", re.I))
    expect(answer.locator("[data-cv-notice]")).to_contain_text("could not be verified")
    expect(answer.locator("[data-cv-answer-text]")).not_to_contain_text("forty crowns")
    browser_page.shot(page, "model-answer-unverified-fallback")


@browser
def test_the_reader_shows_the_step_a_model_turn_is_on(reader_server: Any, browser_page: BrowserPage,
                                                      lighthouse: int) -> None:
    """While the model's first round is held back (it writes without searching: its text is never shown), the
    answer shows the step the turn is on, then the answer (here the extractive one: the model cites nothing)."""
    from fakellm import Reply

    def handler(request: dict[str, Any]) -> Any:
        content = str(request["messages"][-1].get("content") or "")
        if "TEXT:" in content or "PARTS:" in content:  # background summary / selection calls
            return Reply.text("A summary.")
        if not any(m.get("role") == "tool" for m in request["messages"]):
            return Reply.text("Let me think. " * 60, chunk_size=5, chunk_delay_s=0.03)
        return Reply.text("The keeper kept the light.")

    reader_server.fake_llm.handler = handler
    page = browser_page.page
    open_reader(page, reader_server, lighthouse)
    page.select_option("[data-cv-mode]", "auto")
    page.fill("[data-cv-ask]", "Who kept the light?")
    page.press("[data-cv-ask]", "Enter")
    answer = page.locator("[data-cv-answer]").last
    expect(answer.locator("[data-cv-step]")).to_have_text("asking fake-model…")
    expect(answer).to_have_attribute("aria-busy", "false", timeout=ANSWER_TIMEOUT_MS)
    expect(answer.locator("[data-cv-step]")).to_have_count(0)
    # the model's uncited sentence gives way to the extractive answer, which says so
    expect(answer.locator("[data-cv-notice]")).to_contain_text("could not be verified")
    expect(answer.locator("[data-cv-answer-text]")).to_contain_text(re.compile(r"\w"))
    browser_page.assert_clean()
