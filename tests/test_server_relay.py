"""What the proxy relays from the upstream model (issue 28): never the upstream's key, never a 500 for a number.

The fake upstream echoes the ``Authorization`` header it was sent (``fakellm.AUTHORIZATION``) in its model list,
in replies' text and in error events inside 200 streams, as a misbehaving endpoint might; every path through
``chapterverse serve`` must hand the client ``Bearer ***`` instead, with the knowledge base off (bodies relayed
as they are) and on (bodies rewritten by the tag filter).

A model streams its text in small deltas, so a key it writes is cut across several events: the client must get
it masked all the same, every other delta as it came and when it came, and nothing lost (``streammask.py``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest
from fakellm import AUTHORIZATION, FakeLLM, Reply
from serverutil import Server, running_server, settings_for
from chapterverse.redaction import TextMasker, register_secret
from chapterverse.server.proxy.streammask import StreamMasker

KEY = "sk-relay-9f8e7d6c5b4a3210"
ECHO = Reply.text(f"You sent {AUTHORIZATION} to me.", chunks=["You sent ", AUTHORIZATION, " to me."])
"""A reply that carries the key whole in one streamed delta, as an upstream that echoes a header would."""
MASKED = "Bearer ***"


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeLLM]:
    with FakeLLM(api_key=KEY, models=["fake-model", AUTHORIZATION], default=ECHO) as running:
        yield running


@pytest.fixture(scope="module")
def server_for(tmp_path_factory: pytest.TempPathFactory, fake: FakeLLM) -> Iterator[Callable[..., Server]]:
    """A server with the knowledge base on or off (and its ``rag_mode``), started once per module, whose upstream
    key is KEY."""
    started: dict[tuple[bool, str], Server] = {}
    with ExitStack() as stack:
        def get(rag: bool, mode: str = "inject") -> Server:
            if (rag, mode) not in started:
                root = tmp_path_factory.mktemp("relay")
                (root / "kb").mkdir()
                (root / "kb" / "faq.md").write_text("The refund window is 30 days.\n", encoding="utf-8")
                settings = settings_for(root, rag_enabled=rag, rag_mode=mode, llm_base_url=fake.base_url,
                                        llm_api_key=KEY, library=root / "library")
                started[rag, mode] = stack.enter_context(running_server(settings))
            return started[rag, mode]

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
def test_the_upstream_key_never_reaches_the_client(server_for: Callable[..., Server], fake: FakeLLM,
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
def test_a_number_beyond_a_double_is_422_not_500(server_for: Callable[..., Server], fake: FakeLLM, path: str,
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


# ------------------------------------------------------------------------------ a key cut across deltas

CHAT_PATH, RESPONSES_PATH = "/v1/chat/completions", "/v1/responses"
SPLIT = ["Your key is sk-", "relay-9f8e", "7d6c5b4a", "3210; keys start ", "with sk-re", "lay"]
"""KEY as a model streams it, cut across four deltas; then a beginning of it (not the key) cut across two."""
SPLIT_SHOWN = "Your key is ***; keys start with sk-relay"
PLAIN = ["The refund window", " is thirty days,", " as the FAQ says.", " Keep the receipt."]
"""Deltas none of whose ends can begin a secret: each must reach the client as it came, when it came."""
paths = pytest.mark.parametrize("path", [CHAT_PATH, RESPONSES_PATH], ids=["chat", "responses"])
rags = pytest.mark.parametrize("rag", [False, True], ids=["kb-off", "kb-on"])


def _streamed(server: Server, fake: FakeLLM, path: str, reply: Reply) -> str:
    """The body of a streamed answer to one request whose upstream answers ``reply``."""
    fake.push(reply)
    body = {**(CHAT if path == CHAT_PATH else RESPONSE), "stream": True}
    with server.client() as client:
        answer = client.post(path, json=body)
    assert answer.status_code == 200, answer.text
    return answer.text


def _sse(body: str) -> list[dict[str, Any]]:
    """The data of a stream's events, checking that each is whole: one ``data:`` line of JSON (or ``[DONE]``),
    ended by a blank line."""
    assert body.endswith("\n\n"), body[-200:]
    events = []
    for block in body[:-2].split("\n\n"):
        data = [line[len("data: "):] for line in block.split("\n") if line.startswith("data: ")]
        assert len(data) == 1, block
        if data[0] != "[DONE]":
            events.append(json.loads(data[0]))
    return events


def _text(events: list[dict[str, Any]], path: str, index: int = 0, field: str = "content") -> str:
    """What a client assembles from a stream's deltas (of the choice ``index``, for chat completions)."""
    if path == RESPONSES_PATH:
        return "".join(e["delta"] for e in events if e.get("type") == "response.output_text.delta")
    return "".join(c["delta"].get(field) or "" for e in events for c in e.get("choices") or []
                   if c.get("index", 0) == index)


@rags
@paths
def test_a_key_cut_across_deltas_is_masked(server_for: Callable[..., Server], fake: FakeLLM, rag: bool,
                                           path: str) -> None:
    body = _streamed(server_for(rag), fake, path, Reply.text("".join(SPLIT), chunks=SPLIT))
    assert KEY not in body and "relay-9f8e" not in body and "7d6c5b4a" not in body, "the key reached the client"
    events = _sse(body)
    assert _text(events, path) == SPLIT_SHOWN, "nothing lost, nothing reordered, the key masked"
    end = next(n for n, e in enumerate(events) if e.get("type") == "response.output_text.done"
               or any(c.get("finish_reason") for c in e.get("choices") or []))
    assert _text(events[:end + 1], path) == SPLIT_SHOWN, "the text is whole when it ends"
    if path == RESPONSES_PATH:
        assert events[end]["text"] == SPLIT_SHOWN
        assert events[-1]["response"]["output"][0]["content"][0]["text"] == SPLIT_SHOWN
        numbers = [e["sequence_number"] for e in events]
        assert numbers == list(range(len(events))), "sequence numbers stay gapless"


@rags
@paths
def test_ordinary_deltas_stream_as_they_come(server_for: Callable[..., Server], fake: FakeLLM, rag: bool,
                                             path: str) -> None:
    """No delta that cannot begin a secret is held back: each arrives alone, as the upstream sends it."""
    fake.push(Reply.text("".join(PLAIN), chunks=PLAIN, chunk_delay_s=0.3))
    body = {**(CHAT if path == CHAT_PATH else RESPONSE), "stream": True}
    arrivals: list[tuple[float, str]] = []
    with server_for(rag).client() as client, client.stream("POST", path, json=body) as answer:
        for line in answer.iter_lines():
            if line.startswith("data: {"):
                text = _text([json.loads(line[6:])], path)
                if text:
                    arrivals.append((time.monotonic(), text))
    assert [text for _, text in arrivals] == PLAIN
    assert arrivals[-1][0] - arrivals[0][0] > 0.6, "the deltas arrived together, at the end"


@rags
@paths
def test_what_is_held_back_goes_out_before_a_broken_stream_ends(server_for: Callable[..., Server], fake: FakeLLM,
                                                                rag: bool, path: str) -> None:
    """The upstream breaks while the start of a key is held back: the client still gets it, before the error."""
    body = _streamed(server_for(rag), fake, path, Reply.drop("Your key is sk-rel", after_chunks=4, chunk_size=5))
    events = _sse(body)
    assert "UPSTREAM_INTERRUPTED" in json.dumps(events[-1])
    assert _text(events[:-1], path) == "Your key is sk-rel"


@rags
def test_every_choice_and_reasoning_is_masked_on_its_own(server_for: Callable[..., Server], fake: FakeLLM,
                                                         rag: bool) -> None:
    """Two choices (``n=2``) interleaved, each with its own cut key, and a key cut across reasoning deltas."""
    def chunk(index: int, finish: str | None = None, **delta: str) -> dict[str, Any]:
        return {"id": "chatcmpl-n", "object": "chat.completion.chunk", "created": 0, "model": "m",
                "choices": [{"index": index, "delta": delta, "finish_reason": finish}]}

    stream = [chunk(0, reasoning_content="I will say sk-re"), chunk(0, reasoning_content="lay-9f8e7d6c5b4a3210."),
              chunk(0, content="A: sk-relay-"), chunk(1, content="B: sk-re"), chunk(0, content="9f8e7d6c5b4a3210!"),
              chunk(1, content="lay-9f8e7d6c5b"), chunk(1, content="4a3210?"), chunk(1, "stop"), chunk(0, "stop")]
    body = _streamed(server_for(rag), fake, CHAT_PATH, Reply.sse(stream))
    assert KEY not in body and "relay-9f8e" not in body, "the key reached the client"
    events = _sse(body)
    assert _text(events, CHAT_PATH, field="reasoning_content") == "I will say ***."
    assert _text(events, CHAT_PATH, 0) == "A: ***!" and _text(events, CHAT_PATH, 1) == "B: ***?"


def test_a_key_cut_across_deltas_in_tools_mode_is_masked(server_for: Callable[..., Server], fake: FakeLLM) -> None:
    """``--rag_mode tools``: the tool loop's answer streams the model's deltas; a key cut across them is masked."""
    fake.push(Reply.tool_call("search_passages", {"query": "refund window"}), Reply.text("".join(SPLIT), chunks=SPLIT))
    with server_for(True, "tools").client() as client:
        answer = client.post(CHAT_PATH, json={**CHAT, "stream": True})
    assert answer.status_code == 200, answer.text
    assert KEY not in answer.text and "relay-9f8e" not in answer.text, "the key reached the client"
    assert _text(_sse(answer.text), CHAT_PATH) == SPLIT_SHOWN


def test_the_text_masker_masks_a_key_however_the_text_is_cut() -> None:
    """``redaction.TextMasker`` on a text cut in three at every pair of places (the second every third): what it
    gives, put together, is the text with each whole key masked and nothing else changed."""
    register_secret(KEY)
    text = f"a {KEY}{KEY} b sk-re {KEY[:-1]}"
    shown = text.replace(KEY, "***")
    for i in range(len(text) + 1):
        for j in range(i, len(text) + 1, 3):
            masker = TextMasker()
            pieces = [masker.feed(text[:i]), masker.feed(text[i:j]), masker.feed(text[j:]), masker.flush()]
            assert "".join(pieces) == shown, (i, j)


def test_the_stream_masker_takes_bytes_cut_anywhere_and_an_unfinished_last_event() -> None:
    """``streammask.StreamMasker`` on an upstream's bytes (CRLF line ends) cut every 7 bytes, whose last event
    never gets its blank line: the key masked, and the held end of the text sent as an event of its own."""
    register_secret(KEY)
    chunks = [{"id": "c", "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]}
              for piece in SPLIT]
    raw = "".join(f"data: {json.dumps(chunk)}\r\n\r\n" for chunk in [*chunks, {"id": "c", "choices": [],
                                                                             "usage": {"total_tokens": 9}}])
    sent = raw.removesuffix("\r\n").encode()
    masker = StreamMasker()
    body = b"".join([*(masker.feed(sent[at:at + 7]) for at in range(0, len(sent), 7)), masker.flush()]).decode()
    events = _sse(body.replace("\r\n", "\n"))
    assert _text(events, CHAT_PATH) == SPLIT_SHOWN and events[-2]["usage"] == {"total_tokens": 9}
