"""Clean text out: chat-template tokens and chapterverse's own scaffolding never reach what is shown or relayed.

A model that echoes its chat template (``<|im_end|>``, ``<|im_start|>tool``) or its prompt ("SOURCE TEXT (cite the
tags exactly as written):", the injected context's header, ``[2] (source=faq-en.md, score=0.601)``) must not put
them in front of a reader or into a speech engine. Exact cases with the scripted fake, each cut across deltas: the
cleaner alone at every cut, the agent (``ask``, ``chat`` and the reader share it), and every relay of the proxy
(chat completions streamed and not, ``/v1/responses`` streamed and not, tools mode), knowledge base on and off.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fakellm import FakeLLM, Reply
from hypothesis import given, settings
from hypothesis import strategies as st
from serverutil import Server, kb_servers

from chapterverse.answering import AnswerDelta, AnswerDone, answer_events
from chapterverse import Library, ProviderConfig
from chapterverse.answering.model_turn import AgentSettings
from chapterverse.scaffolding import CITE_LINES, CONTEXT_HEADERS, SOURCE_TEXT_HEADER, TextCleaner, clean_text

FAMILIES = {
    "chatml": ("<|im_start|>assistant\nThe refund window is 30 days.<|im_end|>\n<|im_start|>tool\nSee you.",
               "The refund window is 30 days.\nSee you."),
    "llama3": ("<|begin_of_text|><|start_header_id|>assistant<|end_header_id|>\n\nThe refund window is 30 days."
               "<|eot_id|>", "The refund window is 30 days."),
    "mistral": ("[INST] How long? [/INST] The refund window is 30 days.</s>",
                "How long? The refund window is 30 days."),
    "phi": ("<|assistant|>\nThe refund window is 30 days.<|end|>\n<|endoftext|>", "The refund window is 30 days.\n"),
    "gemma": ("<start_of_turn>model\nThe refund window is 30 days.<end_of_turn>\n<start_of_turn>user\nThanks",
              "The refund window is 30 days.\nThanks"),
    "deepseek": ("The refund window is 30 days.<｜end▁of▁sentence｜>", "The refund window is 30 days."),
    "in a line": ("The refund window <|eot_id|> is 30 days <|im_end|>.", "The refund window is 30 days."),
    "source text": (f"{SOURCE_TEXT_HEADER}\n\nThe refund window is 30 days [f1-0-9].",
                    "The refund window is 30 days [f1-0-9]."),
    "injected header": (f"{CONTEXT_HEADERS['es']}\n{CITE_LINES['es']}\n\n[2] (source=faq-en.md, score=0.601)\n"
                        "El plazo es de 30 días.", "El plazo es de 30 días."),
    "score fragment": ("The refund window is 30 days (source=faq-en.md, score=0.601). Keep the receipt.",
                       "The refund window is 30 days. Keep the receipt."),
    "item header": ("[2] (source=faq-en.md, score=0.601)\nThe refund window is 30 days.",
                    "The refund window is 30 days."),
    "bare source": ("The refund window is 30 days (source=faq-en.md).", "The refund window is 30 days."),
    "bare score": ("The refund window is 30 days (score=0.61).", "The refund window is 30 days."),
    "cut off": ("The refund window is 30 days.\n5. (source=f5-", "The refund window is 30 days.\n5."),
    "token cut off": ("The refund window is 30 days.<|im_e", "The refund window is 30 days."),
    "plain": ("a < b, [citation needed] (sources) <b>bold</b> SOURCE TEXT is a phrase.\n[1] A footnote [7].",
              "a < b, [citation needed] (sources) <b>bold</b> SOURCE TEXT is a phrase.\n[1] A footnote [7]."),
}
TEMPLATE = re.compile(r"<\|[^|>]*\|>|<｜|</?s>|<(?:start|end)_of_turn>|\[/?INST\]|SOURCE TEXT \(|source=|score=")


def _cut_everywhere(text: str) -> Iterator[str]:
    """The cleaner's output for ``text`` cut in three at every pair of places (the second every third)."""
    for i in range(len(text) + 1):
        for j in range(i, len(text) + 1, 3):
            cleaner = TextCleaner()
            yield "".join([cleaner.feed(text[:i]), cleaner.feed(text[i:j]), cleaner.feed(text[j:]), cleaner.flush()])


@pytest.mark.parametrize("family", FAMILIES)
def test_each_template_family_and_our_headers_are_removed_however_the_text_is_cut(family: str) -> None:
    given, shown = FAMILIES[family]
    assert clean_text(given) == shown
    assert set(_cut_everywhere(given)) == {shown}


PIECES = ["<|im_end|>", "<|im_start|>", "assistant", "tool", "\n", " ", "  ", "[2]", "[", "(", "<", "|", ">",
          "(source=faq.md, score=0.6)", "(source=", "SOURCE TEXT", SOURCE_TEXT_HEADER, CONTEXT_HEADERS["en"],
          "Relevant", "The refund", " window.", ",", ".", "x", "[INST]", "</s>", "<end_of_turn>", "F", "[f1-2-3]"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=14), st.lists(st.integers(0, 400), max_size=5))
def test_the_stream_reads_as_the_whole_text_however_it_is_cut(pieces: list[str], cuts: list[int]) -> None:
    """Any mix of tokens, headers and text, cut anywhere: the deltas put together are the whole text cleaned,
    and no template token survives."""
    text = "".join(pieces)
    points = sorted({0, len(text), *(c % (len(text) + 1) for c in cuts)})
    cleaner = TextCleaner()
    streamed = "".join(cleaner.feed(text[a:b]) for a, b in zip(points, points[1:])) + cleaner.flush()
    assert streamed == clean_text(text)
    assert not re.search(r"<\|im_(?:start|end)\|>|\[INST\]|</s>|<end_of_turn>", streamed), streamed


def test_a_delta_that_cannot_begin_a_removal_goes_out_at_once() -> None:
    cleaner = TextCleaner()
    assert cleaner.feed("The refund window is 30 days") == "The refund window is 30 days"
    assert cleaner.feed(". <|im_") == "."
    assert cleaner.feed("end|>") == ""
    assert cleaner.feed(" Bye") == " Bye"
    assert cleaner.flush() == ""


# ------------------------------------------------------------------------------------------------ the agent


DEMO = Path(__file__).resolve().parents[1] / "src" / "chapterverse" / "demo"


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> Library:
    lib = Library(tmp_path_factory.mktemp("clean-lib"))
    lib.ingest([DEMO])
    return lib


def test_the_agents_answer_shows_no_template_token_and_no_source_text_header(library: Library) -> None:
    """The model searches, then echoes its template and the tool result's header around a cited sentence, cut
    into 3-character deltas: the reader sees the sentence and its tag, in the stream and in the result."""
    def model(request: dict[str, Any]) -> Reply:
        tools = [m["content"] for m in request["messages"] if m.get("role") == "tool"]
        if not tools:
            return Reply.tool_call("search_passages", {"query": "cat name"})
        tag = next(t for t in re.findall(r"\[f\d+-\d+-\d+\]", tools[-1])
                   if "cat called Admiral" in library.resolve(t).text)  # a span that says what the sentence says
        return Reply.text(f"<|im_start|>assistant\n{SOURCE_TEXT_HEADER}\n\nThe keeper's cat was called Admiral "
                          f"{tag}.<|im_end|>\n<|im_start|>tool", chunk_size=3)

    with FakeLLM(handler=model) as fake:
        provider = ProviderConfig(base_url=fake.base_url, model="fake-model", max_retries=0, timeout_s=10)
        deltas, result = [], None
        for event in answer_events(library, "What was the cat called?", doc_id=library.documents()[0].id,
                                   provider=provider, settings=AgentSettings(auto_summarize=False)):
            if isinstance(event, AnswerDelta):
                deltas.append(event.text)
            elif isinstance(event, AnswerDone):
                result = event.result
    assert result is not None and result.mode == "llm"
    assert re.fullmatch(r"The keeper's cat was called Admiral \[f\d+-\d+-\d+\]\.\n", result.answer), result.answer
    assert "".join(deltas) == result.answer
    assert not result.unsupported_sentences and len(result.citations) == 1


# ------------------------------------------------------------------------------------------------ the proxy


FAQ = "# FAQ\n\nThe refund window is 30 days from the date of purchase.\n"
TAG = re.compile(r"\[f\d+-\d+-\d+\]")
ECHO = ("<|im_start|>assistant\n{header}\n[1] (source=faq.md, score=0.612)\nThe refund window is 30 days {tag} "
        "(source=faq.md, score=0.612).<|im_end|>\n<|im_start|>tool")
"""What a small model writes back: its template, the injected block's header and item line, a score fragment."""


def _echo(body: dict[str, Any]) -> Reply:
    sent = json.dumps(body.get("messages") or body.get("input"))
    tag = TAG.search(sent)
    header = next((h for h in CONTEXT_HEADERS.values() if h in sent), "Hello.")
    return Reply.text(ECHO.format(header=header, tag=tag.group() if tag else ""), chunk_size=3)


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeLLM]:
    with FakeLLM(handler=_echo) as running:
        yield running


@pytest.fixture(scope="module")
def server_for(tmp_path_factory: pytest.TempPathFactory, fake: FakeLLM) -> Iterator[Callable[..., Server]]:
    with kb_servers(tmp_path_factory, fake.base_url, {"faq.md": FAQ}) as get:
        yield get


QUESTION = "How long is the refund window?"


def _chat_text(reply: httpx.Response) -> str:
    assert reply.status_code == 200, reply.text
    if reply.headers["content-type"].startswith("application/json"):
        return str(reply.json()["choices"][0]["message"]["content"])
    events = [json.loads(line[6:]) for line in reply.text.splitlines() if line.startswith("data: {")]
    return "".join(c["delta"].get("content") or "" for e in events for c in e.get("choices") or [])


def _responses_text(reply: httpx.Response) -> tuple[str, list[str]]:
    """The text a client assembles (deltas, or the response object) and every whole text the reply carries."""
    assert reply.status_code == 200, reply.text
    if reply.headers["content-type"].startswith("application/json"):
        body = reply.json()
        return body["output"][0]["content"][0]["text"], [body["output"][0]["content"][0]["text"]]
    events = [json.loads(line[6:]) for line in reply.text.splitlines() if line.startswith("data: {")]
    deltas = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    done = next(e for e in events if e["type"] == "response.output_text.done")["text"]
    final = next(e for e in events if e["type"] == "response.completed")["response"]
    return deltas, [done, final["output"][0]["content"][0]["text"]]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("tags", ["keep", "strip"])
def test_the_proxys_chat_completions_carry_no_scaffolding(server_for: Callable[..., Server], stream: bool,
                                                          tags: str) -> None:
    with server_for(rag_tags=tags).client() as client:
        reply = client.post("/v1/chat/completions", json={"model": "m", "stream": stream,
                                                          "messages": [{"role": "user", "content": QUESTION}]})
    text = _chat_text(reply)
    expected = r"The refund window is 30 days \[f\d+-\d+-\d+\]\." if tags == "keep" else \
        r"The refund window is 30 days\."
    assert re.fullmatch(expected + r"\n", text), text


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_the_proxys_responses_carry_no_scaffolding(server_for: Callable[..., Server], stream: bool) -> None:
    with server_for().client() as client:
        reply = client.post("/v1/responses", json={"model": "m", "stream": stream, "input": QUESTION})
    text, wholes = _responses_text(reply)
    assert text == "The refund window is 30 days.\n"
    assert wholes == [text] * len(wholes)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_with_the_knowledge_base_off_template_tokens_are_still_removed(tmp_path_factory: pytest.TempPathFactory,
                                                                       fake: FakeLLM, stream: bool) -> None:
    with kb_servers(tmp_path_factory, fake.base_url, {"faq.md": FAQ}, rag_enabled=False) as get, \
            get().client() as client:
        reply = client.post("/v1/chat/completions", json={"model": "m", "stream": stream,
                                                          "messages": [{"role": "user", "content": QUESTION}]})
    assert _chat_text(reply) == "Hello.\nThe refund window is 30 days.\n"


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_tools_mode_carries_no_scaffolding(tmp_path_factory: pytest.TempPathFactory, stream: bool) -> None:
    """``--rag_mode tools``: the agent's answer, relayed; the model echoes its template and the tool result."""
    def model(body: dict[str, Any]) -> Reply:
        tools = [m["content"] for m in body["messages"] if m.get("role") == "tool"]
        if not tools:
            return Reply.tool_call("search_passages", {"query": "refund window"})
        return Reply.text(f"<|im_start|>assistant\n{SOURCE_TEXT_HEADER}\n\nThe refund window is 30 days "
                          f"{TAG.findall(tools[-1])[-1]}.<|im_end|>", chunk_size=3)

    with FakeLLM(handler=model) as tools_fake, \
            kb_servers(tmp_path_factory, tools_fake.base_url, {"faq.md": FAQ}, rag_mode="tools") as get, \
            get().client() as client:
        reply = client.post("/v1/chat/completions", json={"model": "m", "stream": stream,
                                                          "messages": [{"role": "user", "content": QUESTION}]})
    assert _chat_text(reply) == "The refund window is 30 days."


def test_template_tokens_never_reach_any_relay(server_for: Callable[..., Server]) -> None:
    """Every path above at once, as the client reads it: no token and no header of ours anywhere in the body."""
    with server_for(rag_tags="keep").client() as client:
        for stream in (False, True):
            chat = client.post("/v1/chat/completions", json={"model": "m", "stream": stream,
                                                             "messages": [{"role": "user", "content": QUESTION}]})
            responses = client.post("/v1/responses", json={"model": "m", "stream": stream, "input": QUESTION})
            for reply in (chat, responses):
                body = reply.text
                assert not TEMPLATE.search(body), TEMPLATE.search(body)
                assert not any(header in body for header in CONTEXT_HEADERS.values())
