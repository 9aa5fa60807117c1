"""``/v1/chat/completions`` and ``/v1/models`` through a real server to the fake OpenAI-compatible upstream.

The fake records every request, so what was injected (and what was left untouched) is asserted on
what the upstream actually received. One test drives the proxy with the openai SDK exactly as
Hugging Face's speech-to-speech does: a non-streaming "Hello" warmup, then streamed turns with
``chat_template_kwargs`` and ``stream_options``.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from fakellm import FakeLLM, Reply
from serverutil import Server, kb_servers, running_server, settings_for
from chapterverse.server.proxy.injection import header_language

FAQ = """# FAQ

The refund window is 30 days from the date of purchase.

Shipping takes five business days within Spain.
"""
TAG = re.compile(r"\[f\d+-\d+-\d+\]")
VOICE_PROMPT = ("You are a friendly voice assistant. Answer in short spoken sentences.\n\n"
                "Session instructions: help customers of the shop.")
HEADER_ES = "Fragmentos relevantes recuperados de la base de conocimientos:"
HEADER_IT = "Frammenti rilevanti recuperati dalla base di conoscenza:"
HEADER_EN = "Relevant excerpts retrieved from the knowledge base:"


def model(body: dict[str, Any]) -> Reply:
    """Cites the first tag it was shown, plus one it invents; small chunks split the tags across deltas."""
    tags = TAG.findall(json.dumps(body.get("messages")))
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


def chat(server: Server, messages: list[dict[str, Any]], **extra: Any) -> httpx.Response:
    with server.client() as client:
        return client.post("/v1/chat/completions", json={"model": "voice-llm", "messages": messages, **extra})


def last_request(fake: FakeLLM) -> dict[str, Any]:
    return fake.chat_requests[-1].json  # type: ignore[no-any-return]


QUESTION = "How long is the refund window?"


# ------------------------------------------------------------------------------------------ injection


def test_system_injection_in_spanish_with_logged_chunks(server_for: Callable[..., Server], fake: FakeLLM,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    """The log names the chunks injected and cited; with --log_content, the question and the block too."""
    server = server_for(rag_language="es", log_content=True)
    caplog.set_level(logging.INFO, logger="chapterverse.server")
    sent = [{"role": "system", "content": VOICE_PROMPT}, {"role": "user", "content": QUESTION}]
    reply = chat(server, sent)
    assert reply.status_code == 200, reply.text
    messages = last_request(fake)["messages"]
    assert len(messages) == 2 and messages[1] == sent[1]
    system = messages[0]["content"]
    assert system.startswith(VOICE_PROMPT) and HEADER_ES in system
    assert re.search(r"\[1\] \(source=faq\.md, score=0\.\d{3}\)\n# FAQ", system)
    assert "The refund window is 30 days" in system and TAG.search(system)
    body = reply.json()
    assert body["choices"][0]["message"]["content"] == "The refund window is 30 days. Keep the receipt."
    assert [(c["n"], c["source"], c["tag"]) for c in body["citations"]] == [(1, "faq.md", TAG.search(system)[0][1:-1])]
    log = caplog.text
    assert re.search(r"RAG turn \d+: injected 1 chunks \(\d+ chars\) as system for a query of 30 chars in \d+ ms — "
                     r"faq\.md#c0 \(0\.\d\d\)", log)
    assert "reply cites faq.md#c0" in log
    assert f"retrieval query:\n{QUESTION}\n" in log and f"injected context:\n{HEADER_ES}" in log


def test_the_header_follows_the_questions_language_by_default(server_for: Callable[..., Server],
                                                              fake: FakeLLM) -> None:
    """An English question to an English knowledge base gets an English header unless --rag_language says
    otherwise (it was Spanish for everyone); Spanish and Italian questions get their own."""
    server = server_for()
    assert chat(server, [{"role": "user", "content": QUESTION}]).status_code == 200
    system = last_request(fake)["messages"][0]["content"]
    assert system.startswith(HEADER_EN) and HEADER_ES not in system
    with server.client() as client:
        assert client.get("/v1/rag/status").json()["language"] == "auto"
    assert header_language("auto", "¿Cuánto dura el plazo para devolver un pedido?") == "es"
    assert header_language("auto", "Quanto dura il periodo per restituire un ordine?") == "it"
    assert header_language("auto", "What is the refund window?") == "en"
    assert header_language("it", "What is the refund window?") == "it"


def test_user_injection_in_italian(server_for: Callable[..., Server], fake: FakeLLM) -> None:
    server = server_for(rag_language="it", rag_inject_as="user")
    sent = [{"role": "system", "content": VOICE_PROMPT}, {"role": "user", "content": QUESTION}]
    assert chat(server, sent).status_code == 200
    messages = last_request(fake)["messages"]
    assert messages[0] == sent[0] and len(messages) == 2
    assert messages[1]["role"] == "user" and messages[1]["content"].startswith(QUESTION + "\n\n" + HEADER_IT)
    assert HEADER_ES not in json.dumps(messages)


def test_english_header_inserts_a_system_message_when_there_is_none(server_for: Callable[..., Server],
                                                                    fake: FakeLLM) -> None:
    server = server_for(rag_language="en")
    history = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
               {"role": "user", "content": QUESTION}]
    assert chat(server, history).status_code == 200
    messages = last_request(fake)["messages"]
    assert messages[0]["role"] == "system" and messages[0]["content"].startswith(HEADER_EN)
    assert messages[1:] == history


def test_nothing_above_threshold_is_forwarded_untouched(server_for: Callable[..., Server], fake: FakeLLM) -> None:
    server = server_for()
    sent = {"model": "voice-llm", "messages": [{"role": "system", "content": "You are a helpful assistant"},
                                               {"role": "user", "content": "Hello"}],
            "temperature": 0.3, "chat_template_kwargs": {"enable_thinking": False}}
    with server.client() as client:
        reply = client.post("/v1/chat/completions", json=sent)
    assert reply.status_code == 200
    assert last_request(fake) == {**sent, "max_tokens": 1024}  # untouched but for the answer's bound
    assert reply.json()["choices"][0]["message"]["content"] == "Hello! How can I help you today?"
    assert reply.json()["citations"] == []


def test_retrieval_failure_is_logged_and_the_chat_goes_on(server_for: Callable[..., Server], fake: FakeLLM,
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    server = server_for(rag_language="en", rag_top_k=2)
    assert server.state.kb is not None

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("index on fire")

    monkeypatch.setattr(server.state.kb, "search", broken)
    sent = [{"role": "user", "content": QUESTION}]
    reply = chat(server, sent)
    assert reply.status_code == 200 and last_request(fake)["messages"] == sent
    assert "retrieval failed, forwarding without context: RuntimeError\n" in caplog.text
    assert "index on fire" not in caplog.text, "an error may quote the query: its message is content"


# ------------------------------------------------------------------------------- a voice pipeline


def test_speech_to_speech_client_streams_through_the_proxy(server_for: Callable[..., Server], fake: FakeLLM) -> None:
    """What speech-to-speech's OpenAI chat-completions handler sends, via the openai SDK."""
    server = server_for()
    first = len(fake.chat_requests)
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="sk-s2s-client-key")
    warmup = client.chat.completions.create(
        model="voice-llm", stream=False,
        messages=[{"role": "system", "content": "You are a helpful assistant"}, {"role": "user", "content": "Hello"}])
    assert warmup.choices[0].message.content == "Hello! How can I help you today?"
    stream = client.chat.completions.create(
        model="voice-llm", stream=True, stream_options={"include_usage": True},
        extra_body={"chat_template_kwargs": {"enable_thinking": False}},
        messages=[{"role": "system", "content": VOICE_PROMPT}, {"role": "user", "content": QUESTION}])
    deltas, finals, usage = [], [], None
    for chunk in stream:
        if not chunk.choices:
            usage = chunk.usage
            continue
        if chunk.choices[0].delta.content:
            deltas.append(chunk.choices[0].delta.content)
        if chunk.choices[0].finish_reason:
            finals.append(chunk)
    spoken = "".join(deltas)
    assert spoken == "The refund window is 30 days. Keep the receipt."
    assert not any("[" in d or "]" in d for d in deltas)  # no tag, not even half of one, is ever spoken
    assert len(finals) == 1 and usage is not None
    citations = (finals[0].model_extra or {})["citations"]
    assert [(c["n"], c["source"]) for c in citations] == [(1, "faq.md")]
    assert "The refund window is 30 days" in citations[0]["text"]

    warm, turn = (r.json for r in fake.chat_requests[first:first + 2])
    assert warm["stream"] is False and warm["messages"][-1] == {"role": "user", "content": "Hello"}
    assert warm["messages"][0] == {"role": "system", "content": "You are a helpful assistant"}
    assert turn["stream"] is True and turn["model"] == "voice-llm"
    assert turn["chat_template_kwargs"] == {"enable_thinking": False}
    assert turn["stream_options"] == {"include_usage": True}
    assert turn["messages"][0]["content"].startswith(VOICE_PROMPT) and HEADER_EN in turn["messages"][0]["content"]
    for recorded in fake.chat_requests[first:]:
        assert "sk-s2s-client-key" not in json.dumps(recorded.headers)  # the client's key never travels upstream


def test_keep_mode_keeps_verified_tags_and_drops_invented_ones(server_for: Callable[..., Server]) -> None:
    server = server_for(rag_tags="keep")
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused")
    text, final = "", None
    for chunk in client.chat.completions.create(model="m", stream=True,
                                                messages=[{"role": "user", "content": QUESTION}]):
        if chunk.choices and chunk.choices[0].delta.content:
            text += chunk.choices[0].delta.content
        if chunk.choices and chunk.choices[0].finish_reason:
            final = chunk
    tag = (final.model_extra or {})["citations"][0]["tag"]
    assert text == f"The refund window is 30 days [{tag}]. Keep the receipt."


# ------------------------------------------------------------------------------------ the upstream


def test_models_are_forwarded(server_for: Callable[..., Server]) -> None:
    client = openai.OpenAI(base_url=f"{server_for().url}/v1", api_key="unused")
    assert [m.id for m in client.models.list()] == ["fake-model"]


def test_upstream_model_and_key_come_from_the_flags(tmp_path: Path) -> None:
    with FakeLLM(handler=model, api_key="sk-upstream-0123456789") as guarded:
        settings = settings_for(tmp_path, rag_enabled=False, llm_base_url=guarded.base_url, llm_model="served-model",
                                llm_api_key="sk-upstream-0123456789")
        with running_server(settings) as server:
            reply = chat(server, [{"role": "user", "content": "Hello"}])
        assert reply.status_code == 200, reply.text
        assert guarded.chat_requests[-1].json["model"] == "served-model"


def test_rag_disabled_forwards_bytes_untouched(tmp_path: Path, fake: FakeLLM) -> None:
    fake.push(Reply.text("Quote [f1-2-9] as is.", chunk_size=3))
    with running_server(settings_for(tmp_path, llm_base_url=fake.base_url)) as server:
        sent = [{"role": "user", "content": QUESTION}]
        reply = chat(server, sent, stream=True)
    assert last_request(fake)["messages"] == sent
    pieces = [json.loads(line[6:])["choices"][0]["delta"].get("content") or ""
              for line in reply.text.splitlines() if line.startswith("data: {")]
    assert "".join(pieces) == "Quote [f1-2-9] as is." and "citations" not in reply.text


def test_upstream_error_statuses_pass_through_and_unreachable_is_502(tmp_path: Path, server_for: Callable[..., Server],
                                                            fake: FakeLLM) -> None:
    fake.push(Reply.error(429, "slow down"))
    limited = chat(server_for(), [{"role": "user", "content": QUESTION}], stream=True)
    assert limited.status_code == 429 and limited.json()["error"]["code"] == "UPSTREAM_ERROR"
    assert "slow down" not in limited.text  # a fixed message: an upstream body may echo the key
    with running_server(settings_for(tmp_path, rag_enabled=True, llm_base_url="http://127.0.0.1:9/v1")) as server:
        reply = chat(server, [{"role": "user", "content": "Hello"}])
    assert reply.status_code == 502
    assert reply.json()["code"] == "UPSTREAM_UNREACHABLE" and "127.0.0.1:9" in reply.json()["error"]["message"]


def test_an_empty_messages_list_is_400_and_never_forwarded(tmp_path: Path, server_for: Callable[..., Server],
                                                            fake: FakeLLM) -> None:
    """``"messages": []`` is answered 400 here, with the knowledge base on or off, instead of a round trip to
    an upstream that refuses it (OpenAI: 400) or answers it some other way."""
    sent = len(fake.chat_requests)
    with running_server(settings_for(tmp_path, llm_base_url=fake.base_url)) as plain:
        for server in (server_for(), plain):
            reply = chat(server, [], stream=True)
            assert reply.status_code == 400 and reply.json()["code"] == "BAD_INPUT"
            assert reply.json()["error"]["message"] == ("messages is empty; a chat completion request needs at "
                                                        "least one message")
    assert len(fake.chat_requests) == sent


def test_no_upstream_configured_is_503(tmp_path: Path) -> None:
    with running_server(settings_for(tmp_path)) as server:
        reply = chat(server, [{"role": "user", "content": "Hello"}])
    assert reply.status_code == 503 and reply.json()["error"]["code"] == "NO_UPSTREAM"


# ------------------------------------------------------------------------------------- tools mode


def test_tools_mode_answers_with_the_tool_loop(tmp_path: Path) -> None:
    def tool_model(body: dict[str, Any]) -> Reply:
        results = [m for m in body["messages"] if m.get("role") == "tool"]
        if not results:
            return Reply.tool_call("search_passages", {"query": "refund window"})
        tag = TAG.findall(results[-1]["content"])[0]
        return Reply.text(f"You have 30 days {tag}.", chunk_size=3)

    with FakeLLM(handler=tool_model) as upstream:
        (tmp_path / "kb").mkdir()
        (tmp_path / "kb" / "faq.md").write_text(FAQ, encoding="utf-8")
        settings = settings_for(tmp_path, rag_enabled=True, rag_mode="tools", llm_base_url=upstream.base_url,
                                llm_model="fake-model")
        with running_server(settings) as server:
            client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused")
            text, final = "", None
            for chunk in client.chat.completions.create(model="x", stream=True,
                                                        messages=[{"role": "user", "content": QUESTION}]):
                if chunk.choices and chunk.choices[0].delta.content:
                    text += chunk.choices[0].delta.content
                if chunk.choices and chunk.choices[0].finish_reason:
                    final = chunk
            once = client.chat.completions.create(model="x", messages=[{"role": "user", "content": QUESTION}])
        assert text == "You have 30 days." and once.choices[0].message.content == "You have 30 days."
        assert [c["source"] for c in (final.model_extra or {})["citations"]] == ["faq.md"]
        assert any(r.json.get("tools") for r in upstream.chat_requests)
