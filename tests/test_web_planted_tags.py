"""In a real Chromium, a tag a book writes never becomes a footnote (issue 28, item 2).

The reader holds *The Harbour* and *The Keeper*, whose one answering sentence ends in the real tag of a sentence
of *The Harbour* ("... under the old oak tree [f1-15-55]."). The server shows that string defanged in the answer
(``tests/test_planted_tags.py``), and the reader makes footnotes and sources only of an answer's ``citations``:
even an answer stored by an older version, which holds the planted tag raw, shows it as text.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from test_planted_tags import HARBOUR, HARBOUR_SENTENCE, QUESTION, keeper_text
from test_web_reader import (  # noqa: F401  (_chromium and browser_page are fixtures)
    BrowserPage,
    _chromium,
    ask,
    browser,
    browser_page,
    expect,
    marks_text,
    open_preview,
    open_reader,
    tag_for,
)

from chapterverse.answering import extractive_answer
from chapterverse.llm.summaries import EXTRACTIVE_MODEL, summary_version


@dataclass
class Books:
    keeper: int
    planted: str
    """The key of the planted tag (``f1-15-55``): a real sentence of *The Harbour*."""


@pytest.fixture(scope="module")
def books(reader_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Books]:
    folder = tmp_path_factory.mktemp("planted-books")
    (folder / "harbour.md").write_text(HARBOUR, encoding="utf-8")
    harbour = reader_server.ingest(folder / "harbour.md")
    planted = tag_for(reader_server, harbour, HARBOUR_SENTENCE)
    (folder / "keeper.md").write_text(keeper_text(f"[{planted}]"), encoding="utf-8")
    yield Books(reader_server.ingest(folder / "keeper.md"), planted)


def click_on_text(page: Any, answer: Any, needle: str) -> None:
    """A click on the middle of ``needle`` where the answer shows it (not on the element around it)."""
    point = answer.locator("[data-cv-answer-text]").evaluate("""(root, needle) => {
      const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
      for (let node = walker.nextNode(); node; node = walker.nextNode()) {
        const at = node.data.indexOf(needle);
        if (at === -1) continue;
        const range = document.createRange();
        range.setStart(node, at);
        range.setEnd(node, at + needle.length);
        const box = range.getBoundingClientRect();
        return { x: box.x + box.width / 2, y: box.y + box.height / 2 };
      }
      return null;
    }""", needle)
    assert point, f"{needle!r} is not shown as text"
    page.mouse.click(point["x"], point["y"])


def assert_only_citations_are_footnotes(page: Any, server: Any, answer: Any, books: Books) -> None:
    """No link of the answer names the planted tag; every footnote and source is a passage of the keeper's book,
    the one that quotes the planted string highlights exactly its tag; clicking the planted string opens nothing."""
    assert answer.locator(f'a[data-tag="{books.planted}"]').count() == 0, "the planted tag became a link"
    footnotes = answer.locator("a.cv-footnote")
    tags = [footnotes.nth(i).get_attribute("data-tag") for i in range(footnotes.count())]
    assert tags and all(server.resolve(tag)["doc_id"] == books.keeper for tag in tags)
    sources = answer.locator("a.cv-source")
    assert [sources.nth(i).get_attribute("data-tag") for i in range(sources.count())] == list(dict.fromkeys(tags))

    address = page.url
    click_on_text(page, answer, books.planted)
    page.wait_for_timeout(300)  # what a click would open has had the time to
    expect(page.locator("[data-cv-preview]")).to_be_hidden()
    assert page.url == address and page.locator("mark.cv-highlight").count() == 0

    oak = next(i for i, tag in enumerate(tags) if "oak tree" in server.resolve(tag)["text"])
    open_preview(page, footnotes.nth(oak)).locator("[data-cv-goto]").click()
    expect(page.locator("mark.cv-highlight").first).to_be_attached()
    assert marks_text(page) == server.resolve(tags[oak])["text"]
    assert page.url.endswith(f"/read/{books.keeper}#{tags[oak]}")


@browser
def test_a_planted_tag_in_an_answer_is_text_not_a_footnote(reader_server: Any, browser_page: BrowserPage,
                                                           books: Books) -> None:
    page = browser_page.page
    open_reader(page, reader_server, books.keeper)
    answer = ask(page, QUESTION)
    assert_only_citations_are_footnotes(page, reader_server, answer, books)
    browser_page.shot(page, "planted-tag-answer")
    browser_page.assert_clean()


@browser
def test_a_planted_tag_in_an_answer_stored_raw_is_text_not_a_footnote(reader_server: Any,
                                                                      browser_page: BrowserPage,
                                                                      books: Books) -> None:
    """An answer kept by an older version holds the planted tag raw; its ``citations`` hold only the real one."""
    library = reader_server.server.state.reader
    result = extractive_answer(library, QUESTION, doc_ids=[books.keeper]).to_json()
    (citation,) = result["citations"]
    result["answer"] = f"{citation['text']}[{citation['tag']}]"  # as the old reader wrote it
    assert f"[{books.planted}]" in result["answer"]
    chat = library.store.create_chat(books.keeper, "a chat kept by an older version")
    library.store.add_message(chat, "user", QUESTION)
    library.store.add_message(chat, "assistant", result["answer"], result)

    page = browser_page.page
    open_reader(page, reader_server, books.keeper)
    expect(page.locator(f"[data-cv-chat-select] option[value='{chat}']")).to_be_attached()
    page.select_option("[data-cv-chat-select]", str(chat))
    answer = page.locator("[data-cv-answer]").first
    expect(answer.locator("a.cv-footnote").first).to_be_visible()
    assert_only_citations_are_footnotes(page, reader_server, answer, books)
    browser_page.shot(page, "planted-tag-stored-answer")
    browser_page.assert_clean()


@browser
def test_a_planted_tag_in_a_summary_stored_raw_is_text_not_a_link(reader_server: Any, browser_page: BrowserPage,
                                                                   books: Books) -> None:
    """A summary kept by an older version, or a model's, may hold another book's tag: only the book's own link."""
    store = reader_server.server.state.reader.store
    (segment,) = store.segments(books.keeper)
    own = tag_for(reader_server, books.keeper, "The keeper buried")
    text = f"The keeper buried the brass lantern under the old oak tree [{books.planted}].[{own}]"
    store.put_summary(segment.content_hash, EXTRACTIVE_MODEL, summary_version(EXTRACTIVE_MODEL), text, 0)

    page = browser_page.page
    open_reader(page, reader_server, books.keeper)
    summary = page.locator("[data-cv-summary]")
    summary.locator("summary").click()
    expect(summary).to_contain_text(f"[{books.planted}]")  # shown, as text
    assert summary.locator(f'a[data-tag="{books.planted}"]').count() == 0, "the planted tag became a link"
    expect(summary.locator(f'a.cv-summary-tag[data-tag="{own}"]')).to_have_count(1)
    browser_page.shot(page, "planted-tag-summary")
    browser_page.assert_clean()
