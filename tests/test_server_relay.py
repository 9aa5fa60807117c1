"""What the proxy relays from the upstream model (issue 28): never the upstream's key, never a 500 for a number.

The fake upstream echoes the ``Authorization`` header it was sent (``fakellm.AUTHORIZATION``) in its model list,
in replies' text and in error events inside 200 streams, as a misbehaving endpoint might; every path through
``chapterverse serve`` must hand the client ``Bearer ***`` instead, with the knowledge base off (bodies relayed
as they are) and on (bodies rewritten by the tag filter).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest
from fakellm import AUTHORIZATION, FakeLLM, Reply
from serverutil import Server, running_server, settings_for

KEY = "sk-relay-9f8e7d6c5b4a3210"
ECHO = Reply.text(f"You sent {AUTHORIZATION} to me.", chunks=["You sent ", AUTHORIZATION, " to me."])
"""A reply that carries the key whole in one streamed delta, as an upstream that echoes a header would."""
MASKED = "Bearer ***"


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeLLM]:
    with FakeLLM(api_key=KEY, models=["fake-model", AUTHORIZATION], default=ECHO) as running:
        yield running


@pytest.fixture(scope="module")
def server_for(tmp_path_factory: pytest.TempPathFactory, fake: FakeLLM) -> Iterator[Callable[[bool], Server]]:
    """A server with the knowledge base on or off, started once per module, whose upstream key is KEY."""
    started: dict[bool, Server] = {}
    with ExitStack() as stack:
        def get(rag: bool) -> Server:
            if rag not in started:
                root = tmp_path_factory.mktemp("relay")
                (root / "kb").mkdir()
                (root / "kb" / "faq.md").write_text("The refund window is 30 days.\n", encoding="utf-8")
                settings = settings_for(root, rag_enabled=rag, llm_base_url=fake.base_url, llm_api_key=KEY,
                                        library=root / "library")
                started[rag] = stack.enter_context(running_server(settings))
            return started[rag]

        yield get


def _relayed(reply: httpx.Response, fake: FakeLLM) -> str:
    """The body the client got, after checking that the upstream did get the key and did echo it."""
    assert fake.requests[-1].headers["authorization"] == f"Bearer {KEY}"
    assert reply.status_code == 200, reply.text
    assert KEY not in reply.text and KEY[3:] not in reply.text, "the upstream's key reached the client"
    assert MASKED in reply.text, "the echo must be there, masked"
    return reply.text


CHAT = {"model": "m", "messages": [{"role": "user", "content": "What is the refund window?"}]}
RESPONSE = {"model": "m", "input": "What is the refund window?"}


@pytest.mark.parametrize("rag", [False, True], ids=["kb-off", "kb-on"])
def test_the_upstream_key_never_reaches_the_client(server_for: Callable[[bool], Server], fake: FakeLLM,
                                                    rag: bool) -> None:
    with server_for(rag).client() as client:
        listed = _relayed(client.get("/v1/models"), fake)
        assert {m["id"] for m in json.loads(listed)["data"]} == {"fake-model", MASKED}

        assert json.loads(_relayed(client.post("/v1/chat/completions", json=CHAT), fake))[
            "choices"][0]["message"]["content"] == f"You sent {MASKED} to me."
        streamed = _relayed(client.post("/v1/chat/completions", json={**CHAT, "stream": True}), fake)
        assert f"You sent {MASKED}" in "".join(_chat_deltas(streamed))

        answered = json.loads(_relayed(client.post("/v1/responses", json=RESPONSE), fake))
        assert answered["output"][0]["content"][0]["text"] == f"You sent {MASKED} to me."
        _relayed(client.post("/v1/responses", json={**RESPONSE, "stream": True}), fake)

        fake.push(Reply.sse([{"error": {"message": f"invalid header {AUTHORIZATION}", "type": "auth"}}]))
        _relayed(client.post("/v1/chat/completions", json={**CHAT, "stream": True}), fake)
        fake.push(Reply.sse([{"type": "error", "message": f"invalid header {AUTHORIZATION}"}], done=False))
        _relayed(client.post("/v1/responses", json={**RESPONSE, "stream": True}), fake)


def _chat_deltas(stream: str) -> Iterator[str]:
    for line in stream.splitlines():
        if line.startswith("data: {"):
            for choice in json.loads(line[6:]).get("choices") or []:
                yield (choice.get("delta") or {}).get("content") or ""


@pytest.mark.parametrize("path,body", [("/v1/chat/completions", CHAT), ("/v1/responses", RESPONSE)])
def test_a_number_beyond_a_double_is_422_not_500(server_for: Callable[[bool], Server], fake: FakeLLM, path: str,
                                                 body: dict[str, Any]) -> None:
    asked = len(fake.requests)
    raw = json.dumps(body)[:-1] + ', "max_tokens": 1e999}'  # valid JSON that no double holds
    with server_for(False).client() as client:
        answer = client.post(path, content=raw, headers={"Content-Type": "application/json"})
    assert answer.status_code == 422, answer.text
    assert answer.json()["code"] == "BAD_INPUT" and "1e999 is too large" in answer.json()["message"]
    assert len(fake.requests) == asked, "nothing was sent upstream"


def test_the_upstream_key_is_masked_as_json_escapes_it(tmp_path: Path) -> None:
    """A key with a quote or a slash reaches the client escaped (``\\"``, and ``\\/`` where the upstream escapes
    slashes) in a JSON body: masked all the same."""
    key = 'sk-odd/key"with-escapes-42'
    written = json.dumps(key)
    body = f'{{"plain": {written}, "slashed": {written.replace("/", chr(92) + "/")}}}'
    with FakeLLM(default=Reply.json(body)) as upstream:
        settings = settings_for(tmp_path, llm_base_url=upstream.base_url, llm_api_key=key, library=tmp_path / "lib")
        with running_server(settings) as server, server.client() as client:
            reply = client.post("/v1/chat/completions", json=CHAT)
    assert reply.status_code == 200
    assert reply.json() == {"plain": "***", "slashed": "***"}
