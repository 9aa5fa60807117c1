"""Hostile requests get a 4xx, never a 500, and never a file outside the library.

Found while checking "zero 5xx": ``{"text": "\\ud800"}`` is valid JSON, but Python decodes it into a str no
UTF-8 encoder takes, so it used to fail in the store, the embedder or the upstream call; a chat body nested
100,000 deep raised RecursionError in the proxy.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest
from fakellm import Reply, fake_llm
from serverutil import Server, running_server, settings_for, wait_for_job

from chapterverse.server.lone_surrogates import lone_surrogate

LONE = "keeper \ud800 logbook"
JSON_ENDPOINTS = [
    ("POST", "/v1/rag/search", {"query": LONE}),
    ("POST", "/v1/rag/chunks/list", {"query": LONE}),
    ("POST", "/v1/rag/chunks/update", {"source": "notes.md", "new_text": LONE}),
    ("POST", "/v1/rag/upsert/document", {"source": "s", "text": LONE}),
    ("POST", "/v1/rag/upsert/document", {"source": "s", "text": "ok", "metadata": {"k\udc00": 1}}),
    ("POST", "/v1/rag/upsert/documents", {"documents": [{"source": "s", "text": "ok"}, {"source": "t", "text": LONE}]}),
    ("POST", "/v1/rag/add/document", {"source": "\udfff", "text": "ok"}),
    ("POST", "/v1/rag/add/chunks", {"items": [{"text": LONE}]}),
    ("POST", "/v1/rag/remove", {"source_prefix": "\ud800"}),
    ("POST", "/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": LONE}]}),
    ("POST", "/v1/chat/completions", {"model": "m", "stream": True, "messages": [{"role": "user", "content": LONE}]}),
    ("POST", "/api/documents/path", {"path": "/tmp/\ud800"}),
    ("POST", "/api/documents/1/ask", {"question": LONE}),
]
"""PUT /api/settings needs a server key (403 without one): test_server_security.py checks it on a keyed server."""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("bodies")
    (tmp / "kb").mkdir()
    (tmp / "kb" / "notes.md").write_text("The keeper found a logbook after the storm.\n", encoding="utf-8")
    with fake_llm(default=Reply.text("The keeper found a logbook.")) as fake, running_server(
            settings_for(tmp, rag_enabled=True, llm_base_url=fake.base_url, llm_model="m")) as running:
        yield running


def _post_raw(client: httpx.Client, method: str, path: str, raw: bytes) -> httpx.Response:
    return client.request(method, path, content=raw, headers={"Content-Type": "application/json"})


@pytest.mark.parametrize(("method", "path", "body"), JSON_ENDPOINTS)
def test_unpaired_surrogates_are_the_clients_400(server: Server, method: str, path: str, body: dict) -> None:
    with server.client() as client:
        reply = _post_raw(client, method, path, json.dumps(body).encode())
    assert reply.status_code == 400, reply.text
    assert reply.json()["code"] == "BAD_INPUT" and "surrogate" in reply.json()["message"]


def test_paired_surrogates_are_text(server: Server) -> None:
    with server.client() as client:
        reply = _post_raw(client, "POST", "/v1/rag/search", json.dumps({"query": "keeper \U0001f600"}).encode())
        assert reply.status_code == 200, reply.text
        chat = _post_raw(client, "POST", "/v1/chat/completions", json.dumps(
            {"model": "m", "messages": [{"role": "user", "content": "keeper \U0001f600"}]}).encode())
        assert chat.status_code == 200, chat.text


def test_deeply_nested_chat_body_is_a_400(server: Server) -> None:
    with server.client() as client:
        reply = _post_raw(client, "POST", "/v1/chat/completions", b'{"messages": ' + b"[" * 100_000)
        assert reply.status_code == 400 and "nested too deeply" in reply.json()["message"]
        search = _post_raw(client, "POST", "/v1/rag/search", b'{"query": ' + b"[" * 100_000)
        assert search.status_code == 400


NOT_JSON = [
    (b"not json", "the request body is not valid JSON: Expecting value: line 1 column 1 (char 0)"),
    (b'{"query": "lamp",\n}', "the request body is not valid JSON: Expecting property name enclosed in double "
                             "quotes: line 2 column 1 (char 18)"),
    (b'{"query": "\xff"}', "the request body is not valid JSON: 'utf-8' codec can't decode byte 0xff in position "
                          "11: invalid start byte"),
    (b"[" * 100_000, "the request body is nested too deeply"),
]


@pytest.mark.parametrize(("method", "path"), sorted({(method, path) for method, path, _ in JSON_ENDPOINTS}))
def test_a_body_that_is_not_json_says_why_and_where_on_every_route(server: Server, method: str, path: str) -> None:
    with server.client() as client:
        for raw, message in NOT_JSON:
            reply = _post_raw(client, method, path, raw)
            assert reply.status_code == 400, reply.text
            assert (reply.json()["code"], reply.json()["message"]) == ("BAD_INPUT", message), (raw[:20], reply.text)


@pytest.mark.parametrize(("raw", "found"), [
    (b'{"a": "\\ud800"}', "\\ud800"),
    (b'{"\\udc00": 1}', "\\udc00"),
    (b'["ok", "\\uDFFF"]', "\\udfff"),
    (b'{"a": "\\ud83d\\ude00"}', None),
    (b'{"a": "\\\\ud800"}', None),
    (b'{"a": "\\ud800"', None),
    (b"[" * 100_000 + b'"\\ud800"', None),
    (b'{"a": "plain"}', None),
])
def test_lone_surrogate(raw: bytes, found: str | None) -> None:
    assert lone_surrogate(raw) == found



@pytest.mark.parametrize("name", ["../../../escape.md", "..\\..\\escape.md", "/etc/escape.md", "./.. /escape.md"])
def test_upload_names_never_leave_the_uploads_folder(server: Server, name: str) -> None:
    library = server.state.reader.location
    with server.client() as client:
        reply = client.post("/api/documents", files={"file": (name, b"# Escape\n\nThe keeper stayed.\n", "text/markdown")})
        assert reply.status_code == 202, reply.text
        job = wait_for_job(client, reply.json()["job"])
        assert job["state"] == "done", job
        document = client.get(f"/api/documents/{job['document_ids'][0]}").json()
    assert document["source"] == "upload/escape.md"
    assert not [p for p in library.parent.rglob("escape.md")]
