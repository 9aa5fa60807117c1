"""What a new user of ``serve`` runs into first, over real HTTP against a real uvicorn and a real SQLite library:
a knowledge-base admin with curl who misspells a field, a voice-assistant builder who points an OpenAI client at
the proxy of a server that has an API key.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fakellm import FakeLLM, Reply
from serverutil import Server, running_server, settings_for

WIFI = "The office wifi password is Gondola-42. The guest network is called CV-Guest."


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with running_server(settings_for(tmp_path_factory.mktemp("newuser"), rag_enabled=True)) as running:
        yield running


@pytest.fixture(scope="module")
def client(server: Server) -> Iterator[httpx.Client]:
    with server.client() as c:
        yield c


def _chunks_of(client: httpx.Client, source: str) -> int:
    items = client.get("/v1/rag/sources").json()["items"]
    return sum(item["chunk_count"] for item in items if item["source"] == source)


def test_an_upsert_with_a_misspelled_text_field_is_refused_and_deletes_nothing(client: httpx.Client) -> None:
    """``{"source": ..., "content": ...}`` used to be an upsert with empty text: 200, the document deleted."""
    assert client.post("/v1/rag/upsert/document", json={"source": "notes/wifi", "text": WIFI}).status_code == 200
    refused = client.post("/v1/rag/upsert/document", json={"source": "notes/wifi", "content": "Bellini-7 now."})
    assert refused.status_code == 422 and refused.json()["code"] == "BAD_INPUT", refused.text
    message = refused.json()["message"]
    assert "'content'" in message and "text" in message, message
    assert _chunks_of(client, "notes/wifi") == 1
    found = client.post("/v1/rag/search", json={"query": "wifi password"}).json()["results"]
    assert found and found[0]["source"] == "notes/wifi"


@pytest.mark.parametrize(("path", "body", "names"), [
    ("/v1/rag/search", {"query": "wifi password", "k": 1}, ("'k'", "top_k")),
    ("/v1/rag/upsert/documents", {"documents": [{"source": "notes/wifi", "body": "x"}]},
     ("documents.0", "'body'", "text")),
    ("/v1/rag/add/chunks", {"items": [{"txt": "A pre-cut chunk."}]}, ("items.0", "'txt'", "text")),
    ("/v1/rag/remove", {"source_prefix": "notes/wifi", "exactly": True}, ("'exactly'", "exact")),
])
def test_unknown_fields_are_named_with_the_fields_the_request_takes(client: httpx.Client, path: str,
                                                                   body: dict[str, object],
                                                                   names: tuple[str, ...]) -> None:
    """A field the request does not take was ignored: a search ran with the default top_k, a remove matched by
    prefix. Now the answer names it and the fields the request takes, and nothing is written."""
    client.post("/v1/rag/upsert/document", json={"source": "notes/wifi", "text": WIFI})
    refused = client.post(path, json=body)
    assert refused.status_code == 422 and refused.json()["code"] == "BAD_INPUT", refused.text
    assert all(name in refused.json()["message"] for name in names), refused.json()["message"]
    assert _chunks_of(client, "notes/wifi") == 1


def test_the_responses_api_is_open_on_loopback_like_chat_completions(tmp_path: Path) -> None:
    """With --api_key on loopback, reads are open (docs/DEPLOY.md): a chat completion was, a response needed the
    key (401 "wrong API key" to an OpenAI client that sends its own)."""
    with FakeLLM(default=Reply.text("Hello.")) as fake, \
            running_server(settings_for(tmp_path, rag_enabled=True, api_key="server-key-0123456789",
                                        llm_base_url=fake.base_url, llm_model="fake-model"),
                           headers={"Authorization": "Bearer sk-the-clients-own"}) as server, \
            server.client() as client:
        chat = client.post("/v1/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": "Hi"}]})
        assert chat.status_code == 200, chat.text
        response = client.post("/v1/responses", json={"model": "m", "input": "Hi"})
        assert response.status_code == 200, response.text
        assert client.post("/v1/rag/add/document", json={"text": WIFI}).status_code == 401


def test_a_refusal_for_want_of_the_key_says_how_to_send_it(tmp_path: Path) -> None:
    """It said ``(Authorization: Bearer *** or X-API-Key)``: the scrubber masked the placeholder of the help."""
    with running_server(settings_for(tmp_path, rag_enabled=True, api_key="server-key-0123456789")) as server:
        refused = httpx.post(f"{server.url}/v1/rag/add/document", json={"text": WIFI})
    assert refused.status_code == 401, refused.text
    message = refused.json()["message"]
    assert "***" not in message and "Authorization" in message and "Bearer" in message and "X-API-Key" in message


@pytest.mark.parametrize("content_type", [None, "application/x-www-form-urlencoded", "text/plain"])
def test_a_json_body_sent_without_its_content_type_is_told_so(client: httpx.Client, content_type: str | None) -> None:
    """``curl -d '{"query": ...}'`` sends form data's Content-Type; the answer was ``body: Input should be a valid
    dictionary or object to extract fields from``, which names neither the header nor the fix."""
    headers = {} if content_type is None else {"content-type": content_type}
    refused = client.post("/v1/rag/search", content=b'{"query": "wifi password"}', headers=headers)
    assert refused.status_code == 400 and refused.json()["code"] == "BAD_INPUT", refused.text
    assert "Content-Type: application/json" in refused.json()["message"], refused.text


@pytest.mark.parametrize("query", ["   ", "\n\t"])
def test_a_search_for_nothing_is_refused_like_an_empty_text(client: httpx.Client, query: str) -> None:
    """A query of spaces passed ``min_length=1`` and answered a random passage of the library as relevant (a
    Sherlock Holmes line at 0.252, above the 0.25 threshold); a text of spaces is refused with ``text is empty``,
    the reader's search with ``the search query is empty``."""
    client.post("/v1/rag/upsert/document", json={"source": "notes/wifi", "text": WIFI})
    refused = client.post("/v1/rag/search", json={"query": query, "threshold": 0})
    assert refused.status_code == 422 and refused.json() == {"code": "BAD_INPUT", "message": "query is empty"}


@pytest.mark.parametrize("stream", [False, True])
def test_an_upstream_429_reaches_the_client_with_its_retry_after(tmp_path: Path, stream: bool) -> None:
    """The 429 was passed on "so the client can wait", without the Retry-After that says how long: an OpenAI SDK
    then retried after its own half second, into the same rate limit. Only a number of seconds is passed."""
    limited = (Reply.error(429, "slow down", retry_after=7), Reply.error(429, "slow down", retry_after="soon"),
               Reply.error(503, "busy", retry_after=7))
    with FakeLLM(*limited) as fake, \
            running_server(settings_for(tmp_path, rag_enabled=True, llm_base_url=fake.base_url,
                                        llm_model="fake-model")) as server, server.client() as client:
        body = {"model": "m", "stream": stream, "messages": [{"role": "user", "content": "Hi"}]}
        waited, unsaid, broken = (client.post("/v1/chat/completions", json=body) for _ in limited)
    assert waited.status_code == 429 and waited.headers.get("retry-after") == "7", waited.headers
    assert unsaid.status_code == 429 and "retry-after" not in unsaid.headers
    assert broken.status_code == 502 and "retry-after" not in broken.headers
