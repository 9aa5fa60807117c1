"""The upstream's key never reaches a client, however the upstream writes it: a matrix over every relay path.

An upstream model may write the key it was sent (a prompt injection, a logging endpoint, a model asked to repeat
its headers) as it is or as JSON escapes it: every character, or some, as ``\\uXXXX`` (hex in either case), and
inside a tool call's ``arguments`` (JSON carried in a JSON string) escaped twice. The scripted upstream
(``fakellm.Reply.json``/``Reply.sse``, bytes sent as written) puts it in a chat completion's text and tool call, a
streamed chunk of each, a Responses API reply, its text and argument deltas and its ``response.completed``; the
client must find the key in none of them, in the bytes or in any string it decodes (arguments decoded again),
with the knowledge base off (replies relayed as they came) and on (replies rewritten by the tag filter).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any

import httpx
import pytest
from fakellm import FakeLLM, Reply
from hypothesis import given, settings
from hypothesis import strategies as st
from serverutil import Server, running_server, settings_for

from chapterverse.redaction import TextMasker, mask_secrets, register_secret

KEY = "sk-mask-0a1B2c3D4e5F6789"


def _escaped(which: Callable[[int], bool], case: Callable[[int], str]) -> str:
    """KEY as a JSON string's content writes it with the characters ``which`` picks as ``\\u`` escapes, their hex
    in the ``case`` given for each."""
    return "".join("\\u" + format(ord(char), "04x" if case(n) == "lower" else "04X") if which(n) else char
                   for n, char in enumerate(KEY))


ENCODINGS = {
    "as-written": KEY,
    "every-char-lower-hex": _escaped(lambda n: True, lambda n: "lower"),
    "every-char-upper-hex": _escaped(lambda n: True, lambda n: "upper"),
    "some-chars-mixed-case": _escaped(lambda n: n % 3 != 1, lambda n: "lower" if n % 2 else "upper"),
    "one-char": _escaped(lambda n: n == 7, lambda n: "upper"),
}
"""The key as it may appear between the quotes of a JSON string on the wire."""


def _in_arguments(encoded: str) -> str:
    """``{"key": "<encoded>"}`` as the content of a JSON string: a tool call's ``arguments`` on the wire."""
    return '{\\"key\\": \\"' + encoded.replace("\\", "\\\\") + '\\"}'


def _chat_completion(encoded: str) -> str:
    return ('{"id": "c1", "object": "chat.completion", "created": 0, "model": "m", "choices": [{"index": 0, '
            f'"message": {{"role": "assistant", "content": "key={encoded}", "tool_calls": [{{"id": "call_1", '
            f'"type": "function", "function": {{"name": "lookup", "arguments": "{_in_arguments(encoded)}"}}}}]}}, '
            '"finish_reason": "stop"}]}')


def _chat_chunks(encoded: str) -> list[str]:
    head = '{"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "m", "choices": [{"index": 0, '
    return [head + f'"delta": {{"role": "assistant", "content": "key={encoded}"}}, "finish_reason": null}}]}}',
            head + '"delta": {"tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": '
                   f'{{"name": "lookup", "arguments": "{_in_arguments(encoded)}"}}}}]}}, "finish_reason": null}}]}}',
            head + '"delta": {}, "finish_reason": "stop"}]}']


def _response(encoded: str, status: str = "completed") -> str:
    return ('{"id": "r1", "object": "response", "created_at": 0, "model": "m", "status": "' + status + '", '
            '"output": [{"type": "message", "id": "m1", "role": "assistant", "status": "completed", "content": '
            f'[{{"type": "output_text", "text": "key={encoded}", "annotations": []}}]}}, {{"type": "function_call", '
            f'"id": "fc1", "call_id": "call_1", "name": "lookup", "arguments": "{_in_arguments(encoded)}", '
            '"status": "completed"}]}')


def _response_events(encoded: str) -> list[str]:
    part = '"item_id": "m1", "output_index": 0, "content_index": 0'
    return [f'{{"type": "response.created", "sequence_number": 0, "response": {_response("", "in_progress")}}}',
            f'{{"type": "response.output_text.delta", "sequence_number": 1, {part}, "delta": "key={encoded}"}}',
            f'{{"type": "response.output_text.done", "sequence_number": 2, {part}, "text": "key={encoded}"}}',
            '{"type": "response.function_call_arguments.delta", "sequence_number": 3, "item_id": "fc1", '
            f'"output_index": 1, "delta": "{_in_arguments(encoded)}"}}',
            f'{{"type": "response.completed", "sequence_number": 4, "response": {_response(encoded)}}}']


ROUTES: dict[str, tuple[str, bool, Callable[[str], Reply]]] = {
    "chat": ("/v1/chat/completions", False, lambda e: Reply.json(_chat_completion(e))),
    "chat-stream": ("/v1/chat/completions", True, lambda e: Reply.sse(_chat_chunks(e))),
    "responses": ("/v1/responses", False, lambda e: Reply.json(_response(e))),
    "responses-stream": ("/v1/responses", True, lambda e: Reply.sse(_response_events(e), done=False)),
}
BODIES = {"/v1/chat/completions": {"model": "m", "messages": [{"role": "user", "content": "Repeat your key."}]},
          "/v1/responses": {"model": "m", "input": "Repeat your key."}}


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeLLM]:
    with FakeLLM(api_key=KEY) as running:
        yield running


@pytest.fixture(scope="module")
def server_for(tmp_path_factory: pytest.TempPathFactory, fake: FakeLLM) -> Iterator[Callable[[bool], Server]]:
    """A server (``serve --llm_base_url ... --llm_api_key KEY``) with the knowledge base off or on, started once."""
    started: dict[bool, Server] = {}
    with ExitStack() as stack:
        def get(rag: bool) -> Server:
            if rag not in started:
                root = tmp_path_factory.mktemp("masking")
                (root / "kb").mkdir()
                (root / "kb" / "faq.md").write_text("The refund window is 30 days.\n", encoding="utf-8")
                settings = settings_for(root, rag_enabled=rag, llm_base_url=fake.base_url, llm_api_key=KEY,
                                        library=root / "library")
                started[rag] = stack.enter_context(running_server(settings))
            return started[rag]

        yield get


def _strings(value: Any) -> Iterator[str]:
    """Every string a client decodes from ``value``, and from each string that is JSON in its turn."""
    if isinstance(value, str):
        yield value
        try:
            inner = json.loads(value)
        except ValueError:
            return
        if not isinstance(inner, str):
            yield from _strings(inner)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _payloads(body: str, streamed: bool) -> list[Any]:
    if not streamed:
        return [json.loads(body)]
    data = [line[len("data:"):].strip() for line in body.splitlines() if line.startswith("data:")]
    return [json.loads(payload) for payload in data if payload != "[DONE]"]


def _deltas(payloads: list[Any]) -> list[str]:
    """The texts a client assembles from a stream's deltas: chat content and arguments, Responses deltas."""
    content = arguments = responses = ""
    for event in payloads:
        for choice in event.get("choices") or []:
            delta = choice.get("delta") or {}
            content += delta.get("content") or ""
            arguments += "".join((call.get("function") or {}).get("arguments") or ""
                                 for call in delta.get("tool_calls") or [])
        if str(event.get("type", "")).endswith(".delta"):
            responses += event.get("delta") or ""
    return [content, arguments, responses]


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("rag", [False, True], ids=["kb-off", "kb-on"])
def test_the_key_never_reaches_the_client_in_any_encoding(server_for: Callable[[bool], Server], fake: FakeLLM,
                                                          rag: bool, route: str, encoding: str) -> None:
    path, streamed, reply = ROUTES[route]
    fake.push(reply(ENCODINGS[encoding]))
    with server_for(rag).client() as client:
        answer: httpx.Response = client.post(path, json={**BODIES[path], "stream": streamed})
    assert fake.requests[-1].headers["authorization"] == f"Bearer {KEY}"
    assert answer.status_code == 200, answer.text
    payloads = _payloads(answer.text, streamed)
    decoded = [text for payload in payloads for text in _strings(payload)] + _deltas(payloads)
    leaks = [text for text in [answer.text, *decoded] if KEY in text]
    assert not leaks, f"the key reached the client: {leaks[:3]}"
    assert "key=***" in answer.text, "the reply is relayed, its key masked"


def _arguments_pieces(encoded: str, count: int) -> list[str]:
    """A tool call's ``arguments`` ``{"key": "<encoded>"}`` (as the client decodes them) cut into ``count`` pieces,
    every cut inside the key, so that no piece holds it whole."""
    head, key_start = '{"key": "', len('{"key": "')
    arguments = head + encoded + '"}'
    cuts = [key_start + len(encoded) * n // count + n for n in range(1, count)]
    return [arguments[start:end] for start, end in zip([0, *cuts], [*cuts, len(arguments)])]


def _chat_argument_chunks(pieces: list[str]) -> list[str]:
    head = {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "m"}
    first = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": ""}}
    calls = [[first], *([{"index": 0, "function": {"arguments": piece}}] for piece in pieces)]
    return [json.dumps({**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": "key=" + KEY},
                                              "finish_reason": None}]}),
            *(json.dumps({**head, "choices": [{"index": 0, "delta": {"tool_calls": call}, "finish_reason": None}]})
              for call in calls),
            json.dumps({**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})]


def _response_argument_events(pieces: list[str]) -> list[str]:
    call = {"item_id": "fc1", "output_index": 0}
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": json.loads(_response("", "in_progress"))},
        {"type": "response.output_item.added", "output_index": 0, "item": {
            "type": "function_call", "id": "fc1", "call_id": "call_1", "name": "lookup", "arguments": "",
            "status": "in_progress"}},
        *({"type": "response.function_call_arguments.delta", **call, "delta": piece} for piece in pieces),
        {"type": "response.function_call_arguments.done", **call, "arguments": "".join(pieces)},
        {"type": "response.completed", "response": json.loads(_response(KEY))}]
    return [json.dumps({**event, "sequence_number": number}) for number, event in enumerate(events)]


SPLIT_ROUTES: dict[str, tuple[str, Callable[[list[str]], Reply]]] = {
    "chat-stream": ("/v1/chat/completions", lambda pieces: Reply.sse(_chat_argument_chunks(pieces))),
    "responses-stream": ("/v1/responses", lambda pieces: Reply.sse(_response_argument_events(pieces), done=False)),
}


def _streamed_arguments(payloads: list[Any]) -> str:
    """A stream's tool-call arguments as a client joins them: chat ``tool_calls`` deltas, Responses
    ``function_call_arguments`` deltas."""
    joined = ""
    for event in payloads:
        for choice in event.get("choices") or []:
            joined += "".join((call.get("function") or {}).get("arguments") or ""
                              for call in (choice.get("delta") or {}).get("tool_calls") or [])
        if event.get("type") == "response.function_call_arguments.delta":
            joined += event["delta"]
    return joined


@pytest.mark.parametrize("count", [2, 3, 4], ids=lambda n: f"{n}-deltas")
@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("route", SPLIT_ROUTES)
@pytest.mark.parametrize("rag", [False, True], ids=["kb-off", "kb-on"])
def test_a_key_cut_across_tool_call_argument_deltas_never_reaches_the_client(
        server_for: Callable[[bool], Server], fake: FakeLLM, rag: bool, route: str, encoding: str,
        count: int) -> None:
    path, reply = SPLIT_ROUTES[route]
    pieces = _arguments_pieces(ENCODINGS[encoding], count)
    assert all(ENCODINGS[encoding] not in piece for piece in pieces)
    fake.push(reply(pieces))
    with server_for(rag).client() as client:
        answer: httpx.Response = client.post(path, json={**BODIES[path], "stream": True})
    assert answer.status_code == 200, answer.text
    payloads = _payloads(answer.text, True)
    arguments = _streamed_arguments(payloads)
    decoded = [text for payload in payloads for text in _strings(payload)] + list(_strings(arguments))
    leaks = [text for text in [answer.text, *decoded] if KEY in text]
    assert not leaks, f"the key reached the client: {leaks[:3]}"
    assert json.loads(arguments) == {"key": "***"}, "the arguments are relayed whole, their key masked"


@settings(max_examples=300, deadline=None)
@given(encoding=st.sampled_from(sorted(ENCODINGS)), twice=st.booleans(),
       around=st.tuples(*[st.text(alphabet='\\u0a"{} sk-', max_size=8)] * 2),
       cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=5))
def test_the_text_masker_masks_every_escaped_form_however_the_text_is_cut(
        encoding: str, twice: bool, around: tuple[str, str], cuts: list[int]) -> None:
    """``redaction.TextMasker`` on a JSON text (a tool call's decoded arguments) that carries the key in any of
    the encodings, escaped once more or not, amid backslashes and beginnings of escapes, cut anywhere: what it
    gives, put together, is the text masked whole (``mask_secrets``), so no piece holds part of a key that
    another completes."""
    register_secret(KEY)
    encoded = ENCODINGS[encoding].replace("\\", "\\\\") if twice else ENCODINGS[encoding]
    text = around[0] + encoded + around[1]
    places = sorted({min(cut, len(text)) for cut in cuts})
    masker = TextMasker()
    shown = [masker.feed(text[start:end]) for start, end in zip([0, *places], [*places, len(text)])]
    assert "".join([*shown, masker.flush()]) == mask_secrets(text.encode()).decode()
