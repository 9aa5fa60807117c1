"""A tag written inside a document never reaches anyone looking like a citation (issue 28, item 2).

Every library here holds two documents: *The Harbour*, and *The Keeper*, whose text plants the real tag of a
sentence of *The Harbour*: "... under the old oak tree [f1-15-55]." Every path that shows source text (an
extractive answer, a summary, a search passage, an export) must show that string defanged (``［f1-15-55]``,
``positions.defang_tags``), and only the citations chapterverse made may be tags. The browser half, that the
reader builds footnotes only from an answer's ``citations``, is ``tests/test_web_planted_tags.py``.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from cliutil import cli
from serverutil import Server, running_server, settings_for, shared_embedder, wait_for_job

from chapterverse.answering import extractive_answer
from chapterverse.export import chat_markdown
from chapterverse import Library
from chapterverse.llm.summaries import EXTRACTIVE_MODEL, document_summaries, summarize_document
from chapterverse.search.passages import search_results
from chapterverse.positions import find_tags

HARBOUR_SENTENCE = "The harbour master counted forty ships at anchor every evening."
HARBOUR = f"# The Harbour\n\n{HARBOUR_SENTENCE}\n\nGulls nested on the old customs house roof.\n"
QUESTION = "Where did the keeper bury the brass lantern?"
SEARCH = "brass lantern under the old oak tree"


def keeper_text(planted: str) -> str:
    """The hostile document: its one answering sentence ends in ``planted``, the tag of another book."""
    return (f"# The Keeper\n\nThe keeper buried the brass lantern under the old oak tree {planted}.\n\n"
            "In winter the lamp never failed, and the keeper wrote in his log every night.\n")


def assert_defanged(shown: str, planted: str) -> None:
    """``shown`` quotes the planted string readably, but never as a tag."""
    assert planted not in shown, f"the planted tag {planted} is shown as a tag"
    assert f"［{planted[1:]}" in shown, "the planted string should be shown, defanged"


@dataclass
class Planted:
    """A library holding both books, the keeper's id and the tag its text plants."""

    library: Library
    keeper: int
    planted: str


def _harbour_tag(library: Library, doc_id: int) -> str:
    file = library.store.files(doc_id)[0]
    start = library.store.file(file.id).text.index(HARBOUR_SENTENCE)
    return f"[f{file.id}-{start}-{start + len(HARBOUR_SENTENCE)}]"


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> Planted:
    root = tmp_path_factory.mktemp("planted")
    (root / "harbour").mkdir()
    (root / "harbour" / "harbour.md").write_text(HARBOUR, encoding="utf-8")
    library = Library(root / "library", embedder=shared_embedder())
    library.ingest([root / "harbour"])
    harbour = library.documents()[0].id
    tag = _harbour_tag(library, harbour)
    (root / "keeper").mkdir()
    (root / "keeper" / "keeper.md").write_text(keeper_text(tag), encoding="utf-8")
    library.ingest([root / "keeper"])
    keeper = next(d.id for d in library.documents() if d.id != harbour)
    return Planted(library, keeper, tag)


# ------------------------------------------------------------------------------------------ in process


def test_an_extractive_answer_shows_a_planted_tag_as_text(planted: Planted) -> None:
    result = extractive_answer(planted.library, QUESTION, doc_ids=[planted.keeper])
    assert result.found and result.citations
    assert_defanged(result.answer, planted.planted)
    assert {s.key for s in find_tags(result.answer)} == {c.tag for c in result.citations}
    assert {c.doc_id for c in result.citations} == {planted.keeper}


def test_a_search_passage_shows_a_planted_tag_as_text(planted: Planted) -> None:
    hits = planted.library.search(SEARCH, k=2, doc_ids=[planted.keeper])
    (shown,) = search_results(planted.library, hits)
    assert_defanged(shown["text"], planted.planted)


def test_an_extractive_summary_shows_a_planted_tag_as_text(planted: Planted) -> None:
    summarize_document(planted.library, planted.keeper, None)
    (summary,) = [s.text for s in document_summaries(planted.library, planted.keeper, [EXTRACTIVE_MODEL]) if s.text]
    assert "oak tree" in summary
    assert_defanged(summary, planted.planted)
    assert all(planted.library.resolve(span.tag).doc_id == planted.keeper for span in find_tags(summary))


def test_an_export_of_an_answer_stored_before_the_fix_shows_a_planted_tag_as_text(planted: Planted) -> None:
    """A chat kept by an older version holds the planted tag raw in its answer and its cited text: the export
    links the real citation and shows the planted one defanged."""
    store = planted.library.store
    result = extractive_answer(planted.library, QUESTION, doc_ids=[planted.keeper]).to_json()
    citation = result["citations"][0]
    result["answer"] = f"{citation['text']}[{citation['tag']}]"  # as the old reader wrote it
    assert planted.planted in citation["text"], "the cited sentence should hold the planted tag"
    chat = store.create_chat(planted.keeper, "an old chat")
    store.add_message(chat, "user", QUESTION)
    store.add_message(chat, "assistant", result["answer"], result)
    markdown = chat_markdown(store, chat, "http://reader")
    assert f"[[1]](http://reader/read/{planted.keeper}#{citation['tag']})" in markdown
    assert_defanged(markdown, planted.planted)
    assert "oak tree ［" in markdown.split("\n[1]: ")[1], "the quoted source text is defanged too"


def _command(planted: Planted, *args: str) -> str:
    """What ``chapterverse ARGS --library ... --doc <the keeper>`` prints on stdout (in-process)."""
    result = cli(*args, "--library", str(planted.library.location), "--doc", str(planted.keeper))
    assert result.exit_code == 0, result.output
    return result.stdout


def test_the_search_and_ask_commands_show_a_planted_tag_as_text(planted: Planted) -> None:
    assert_defanged(_command(planted, "search", SEARCH, "--k", "1"), planted.planted)
    assert_defanged(json.loads(_command(planted, "search", SEARCH, "--k", "1", "--json"))["results"][0]["text"],
                    planted.planted)
    assert_defanged(_command(planted, "ask", QUESTION), planted.planted)  # the answer and its cited text
    assert_defanged(json.loads(_command(planted, "ask", QUESTION, "--json"))["answer"], planted.planted)


def test_the_mcp_tools_show_a_planted_tag_as_text(planted: Planted) -> None:
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(command=sys.executable, env=dict(os.environ),  # the package under test
                                   args=["-m", "chapterverse", "mcp", "--library", str(planted.library.location)])

    async def session() -> tuple[str, str]:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as client:
            await client.initialize()
            found = await client.call_tool("search_passages", {"query": SEARCH, "doc_id": planted.keeper})
            text = found.content[0].text
            tag = next(s.tag for s in find_tags(text) if "oak tree" in planted.library.resolve(s).text)
            resolved = await client.call_tool("resolve", {"tag": tag})
            return text, json.loads(resolved.content[0].text)["text"]

    searched, resolved = anyio.run(session)
    assert_defanged(searched, planted.planted)
    assert_defanged(resolved, planted.planted)


# ---------------------------------------------------------------------------------------- over HTTP


@dataclass
class Reader:
    """A reader server holding both books (ingested over HTTP), the keeper's id and the tag its text plants."""

    server: Server
    client: httpx.Client
    keeper: int
    planted: str


@pytest.fixture(scope="module")
def reader(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Reader]:
    root = tmp_path_factory.mktemp("planted-reader")
    settings = settings_for(root, library=root / "library", ingest_roots=[root])
    with running_server(settings, embedder=shared_embedder()) as server, server.client() as client:
        harbour = _ingest(client, root / "harbour.md", HARBOUR)
        tag = _harbour_tag(server.state.reader, harbour)
        keeper = _ingest(client, root / "keeper.md", keeper_text(tag))
        yield Reader(server, client, keeper, tag)


def _ingest(client: httpx.Client, path: Path, text: str) -> int:
    path.write_text(text, encoding="utf-8")
    job = wait_for_job(client, client.post("/api/documents/path", json={"path": str(path)}).json()["job"])
    assert job["state"] == "done", job
    return int(job["document_ids"][0])


def _events(text: str) -> dict[str, Any]:
    blocks = [dict(line.split(": ", 1) for line in block.splitlines()) for block in text.strip().split("\n\n")]
    return {block["event"]: json.loads(block["data"]) for block in blocks}


def test_the_reader_api_answers_with_a_planted_tag_as_text(reader: Reader) -> None:
    ask = {"question": QUESTION, "mode": "extractive"}
    events = _events(reader.client.post(f"/api/documents/{reader.keeper}/ask", json=ask).text)
    done = events["done"]
    assert done["found"] and done["citations"]
    for shown in (events["delta"]["text"], done["answer"]):
        assert_defanged(shown, reader.planted)
        assert {s.key for s in find_tags(shown)} == {c["tag"] for c in done["citations"]}
    chat = events["meta"]["chat_id"]
    assert_defanged(reader.client.get(f"/api/chats/{chat}/export").text, reader.planted)


def test_the_reader_api_searches_with_a_planted_tag_as_text(reader: Reader) -> None:
    query = {"q": SEARCH, "doc_id": reader.keeper, "k": 1}
    assert_defanged(reader.client.get("/api/search", params=query).json()["results"][0]["text"], reader.planted)


def test_the_reader_api_summaries_show_a_planted_tag_as_text(reader: Reader) -> None:
    summarize_document(reader.server.state.reader, reader.keeper, None)  # what ``chapterverse summarize`` runs
    segments = reader.client.get(f"/api/documents/{reader.keeper}/summaries").json()["segments"]
    assert_defanged(" ".join(s["summary"] for s in segments if s["summary"]), reader.planted)


@pytest.fixture(scope="module")
def knowledge_base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with running_server(settings_for(tmp_path_factory.mktemp("planted-kb"), rag_enabled=True)) as server:
        yield server


def test_the_rag_search_shows_a_planted_tag_as_text(knowledge_base: Server) -> None:
    with knowledge_base.client() as client:
        client.post("/v1/rag/add/document", json={"text": HARBOUR, "source": "harbour.md"}).raise_for_status()
        found = client.post("/v1/rag/search", json={"query": HARBOUR_SENTENCE, "top_k": 1}).json()["results"]
        tag = f"[{found[0]['tag']}]"
        client.post("/v1/rag/add/document", json={"text": keeper_text(tag), "source": "keeper.md"}).raise_for_status()
        results = client.post("/v1/rag/search", json={"query": SEARCH, "top_k": 1}).json()["results"]
    assert results[0]["source"] == "keeper.md"
    assert_defanged(results[0]["text"], tag)
