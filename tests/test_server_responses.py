"""``/v1/responses`` through a real server to the fake upstream's Responses API, driven by the openai SDK's
``client.responses`` as a voice pipeline would: what was injected is asserted on what the upstream received,
what the client sees on the SDK's own parsed objects and events."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from fakellm import FakeLLM, Reply
from serverutil import Server, kb_servers, running_server, settings_for

FAQ = """# FAQ

The refund window is 30 days from the date of purchase.

Shipping takes five business days within Spain.
"""
TAG = re.compile(r"\[f\d+-\d+-\d+\]")
QUESTION = "How long is the refund window?"
HEADER_EN = "Relevant excerpts retrieved from the knowledge base:"
SPOKEN = "The refund window is 30 days. Keep the receipt."


def model(body: dict[str, Any]) -> Reply:
    """Cites the first tag it was shown, plus one it invents; small pieces split the tags across deltas."""
    tags = TAG.findall(json.dumps(body.get("input")))
    if tags:
        return Reply.text(f"The refund window is 30 days {tags[0]}. Keep the receipt [f999-1-2].", chunk_size=3)
    return Reply.text("Hello! How can I help you today?", chunk_size=4)


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeLLM]:
    with FakeLLM(handler=model) as running:
        yield running


@pytest.fixture(scope="module")
def server_for(tmp_path_factory: pytest.TempPathFactory, fake: FakeLLM) -> Iterator[Callable[..., Server]]:
    """Servers by settings, started once per module; each has its own copy of the tiny knowledge base."""
    with kb_servers(tmp_path_factory, fake.base_url, {"faq.md": FAQ}) as get:
        yield get


def sdk(server: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="sk-voice-client-key", max_retries=0)


def test_a_response_gets_context_stripped_tags_and_citations(server_for: Callable[..., Server],
                                                             fake: FakeLLM) -> None:
    response = sdk(server_for()).responses.create(model="voice-llm", input=QUESTION,
                                                  instructions="Answer in one short spoken sentence.")
    sent = fake.response_requests[-1].json
    assert sent["instructions"] == "Answer in one short spoken sentence." and sent["model"] == "voice-llm"
    system, user = sent["input"]
    assert system["role"] == "system" and system["content"].startswith(HEADER_EN)  # the question's language
    assert "The refund window is 30 days" in system["content"] and TAG.search(system["content"])
    assert user == {"role": "user", "content": QUESTION}
    assert response.output_text == SPOKEN
    citations = (response.model_extra or {})["citations"]
    assert [(c["n"], c["source"], c["tag"]) for c in citations] == [(1, "faq.md", TAG.search(system["content"])[0][1:-1])]
    assert "sk-voice-client-key" not in json.dumps(fake.response_requests[-1].headers)


def test_a_streamed_response_never_speaks_a_tag_and_ends_with_citations(server_for: Callable[..., Server]) -> None:
    stream = sdk(server_for()).responses.create(model="voice-llm", input=QUESTION, stream=True)
    events = list(stream)
    kinds = [e.type for e in events]
    assert kinds[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          "response.completed"]
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert "".join(deltas) == SPOKEN and deltas and all(d for d in deltas)
    assert not any("[" in d or "]" in d for d in deltas)
    assert [e.sequence_number for e in events] == list(range(len(events)))
    done = next(e for e in events if e.type == "response.output_text.done")
    assert done.text == SPOKEN
    completed = events[-1].response
    assert completed.output_text == SPOKEN
    assert [(c["n"], c["source"]) for c in (completed.model_extra or {})["citations"]] == [(1, "faq.md")]


def test_the_sdk_stream_helper_assembles_the_filtered_text(server_for: Callable[..., Server]) -> None:
    with sdk(server_for()).responses.stream(model="voice-llm", input=QUESTION) as stream:
        spoken = "".join(e.delta for e in stream if e.type == "response.output_text.delta")
        final = stream.get_final_response()
    assert spoken == SPOKEN and final.output_text == SPOKEN


def test_user_injection_adds_an_input_text_part(server_for: Callable[..., Server], fake: FakeLLM) -> None:
    asked = [{"role": "user", "content": [{"type": "input_text", "text": QUESTION}]}]
    response = sdk(server_for(rag_inject_as="user", rag_language="en")).responses.create(model="m", input=asked)
    content = fake.response_requests[-1].json["input"][0]["content"]
    assert content[0] == {"type": "input_text", "text": QUESTION}
    assert content[1]["type"] == "input_text" and "Relevant excerpts" in content[1]["text"]
    assert response.output_text == SPOKEN


def test_small_talk_is_forwarded_untouched(server_for: Callable[..., Server], fake: FakeLLM) -> None:
    response = sdk(server_for(rag_threshold=0.9)).responses.create(model="m", input="Hello")
    assert fake.response_requests[-1].json["input"] == "Hello"
    assert response.output_text == "Hello! How can I help you today?"
    assert (response.model_extra or {})["citations"] == []


def test_rag_off_relays_the_upstream_bytes(tmp_path: Path, fake: FakeLLM) -> None:
    settings = settings_for(tmp_path, llm_base_url=fake.base_url)
    with running_server(settings) as server, server.client() as client:
        reply = client.post("/v1/responses", json={"model": "m", "input": QUESTION, "stream": True})
    assert reply.status_code == 200 and "citations" not in reply.text
    assert "event: response.completed" in reply.text and fake.response_requests[-1].json["input"] == QUESTION


def test_bad_requests_upstream_errors_and_tools_mode(server_for: Callable[..., Server], fake: FakeLLM) -> None:
    server = server_for()
    with server.client() as client:
        assert client.post("/v1/responses", json={"model": "m", "messages": []}).status_code == 400
        fake.push(Reply.error(429, "slow down"))
        limited = client.post("/v1/responses", json={"model": "m", "input": QUESTION})
        assert limited.status_code == 429 and "slow down" not in limited.text
    with server_for(rag_mode="tools").client() as client:
        tools = client.post("/v1/responses", json={"model": "m", "input": QUESTION})
    assert tools.status_code == 400 and "chat/completions" in tools.text


def test_a_follow_up_is_retrieved_with_the_earlier_turn(server_for: Callable[..., Server], fake: FakeLLM) -> None:
    asked = [{"role": "user", "content": "Tell me about the refund window."},
             {"role": "assistant", "content": "Sure."},
             {"role": "user", "content": "How long is it?"}]
    sdk(server_for()).responses.create(model="m", input=asked)
    sent = fake.response_requests[-1].json["input"]
    assert sent[0]["role"] == "system" and "The refund window is 30 days" in sent[0]["content"]
    assert sent[1:] == asked


def test_without_a_model_every_openai_path_fails_alike_for_the_sdk(tmp_path: Path) -> None:
    """No --llm_base_url: chat completions, responses and models all answer 503 in OpenAI's error shape, so the
    SDK's ``code``, ``type`` and message say what to do (``/v1/responses`` had no ``error`` object, so the SDK
    saw no type, and ``/v1/models`` said less than the others)."""
    settings = settings_for(tmp_path, rag_enabled=True)
    (tmp_path / "kb").mkdir()
    (tmp_path / "kb" / "faq.md").write_text(FAQ, encoding="utf-8")
    with running_server(settings) as server:
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0)
        calls: dict[str, Callable[[], object]] = {
            "chat": lambda: client.chat.completions.create(model="m", messages=[{"role": "user", "content": QUESTION}]),
            "responses": lambda: client.responses.create(model="m", input=QUESTION),
            "models": lambda: client.models.list(),
        }
        for name, call in calls.items():
            with pytest.raises(openai.APIStatusError) as failure:
                call()
            error = failure.value
            assert (error.status_code, error.code, error.type) == (503, "NO_UPSTREAM", "no_upstream"), name
            assert error.message == ("Error code: 503 - no upstream model: start the server with --llm_base_url "
                                     "(and --llm_model), or set them in the reader's settings"), name
