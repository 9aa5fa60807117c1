"""The knowledge-base proxy reports a citation only where its passage holds what its sentence says: a real server
in front of the scripted upstream, through the openai SDK, over chat completions and the Responses API, streamed
and not. The check is the one the reader's agent runs (``citations.drop_unsupported``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import openai
import pytest
from fakellm import FakeLLM, Reply
from serverutil import Server, kb_servers

FILES = {
    "refunds.md": "# Refunds\n\nRefunds are accepted within 30 days of purchase when the customer shows the "
                  "original receipt at any store.\n",
    "shipping.md": "# Shipping\n\nShipping takes five business days within Spain and costs nothing over fifty "
                   "euros.\n",
    "warranty.md": "# Warranty\n\nThe warranty covers manufacturing defects of every appliance for two full years "
                   "after delivery.\n",
}
ITEM = re.compile(r"\[\d+\] \(source=([^,]+), score=[\d.]+\)\n.*? \[(f\d+-\d+-\d+)\]", re.S)
REPLY = ("Refunds are accepted within 30 days of purchase with the original receipt [{refunds}]. "
         "The warranty covers manufacturing defects for two full years after delivery [{shipping}].")
APIS = ["chat", "chat-stream", "responses", "responses-stream"]


def _strings(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return "\n".join(_strings(v) for v in value.values())
    if isinstance(value, list):
        return "\n".join(_strings(v) for v in value)
    return ""


def _keys(body: dict[str, Any]) -> dict[str, str]:
    """The key of each injected item's tag by its source's stem, as the upstream received them."""
    return {source.removesuffix(".md"): key
            for source, key in ITEM.findall(_strings(body.get("messages") or body.get("input")))}


def _model(body: dict[str, Any]) -> Reply:
    return Reply.text(REPLY.format(**_keys(body)), chunk_size=3)


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeLLM]:
    with FakeLLM(handler=_model) as running:
        yield running


@pytest.fixture(scope="module")
def server_for(tmp_path_factory: pytest.TempPathFactory, fake: FakeLLM) -> Iterator[Callable[..., Server]]:
    with kb_servers(tmp_path_factory, fake.base_url, FILES, rag_top_k=3, rag_threshold=0.0) as get:
        yield get


def _ask(server: Server, api: str) -> tuple[str, list[dict[str, Any]]]:
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)
    question = "How long do refunds, shipping and the warranty take?"
    if api == "chat":
        completion = client.chat.completions.create(model="m", messages=[{"role": "user", "content": question}])
        return completion.choices[0].message.content or "", (completion.model_extra or {})["citations"]
    if api == "chat-stream":
        deltas, citations = [], None
        for chunk in client.chat.completions.create(model="m", messages=[{"role": "user", "content": question}],
                                                    stream=True):
            if chunk.choices and chunk.choices[0].delta.content:
                deltas.append(chunk.choices[0].delta.content)
            if chunk.choices and chunk.choices[0].finish_reason:
                citations = (chunk.model_extra or {})["citations"]
        assert citations is not None
        return "".join(deltas), citations
    if api == "responses":
        response = client.responses.create(model="m", input=question)
        return response.output_text, (response.model_extra or {})["citations"]
    events = list(client.responses.create(model="m", input=question, stream=True))
    completed = events[-1]
    assert completed.type == "response.completed"
    return completed.response.output_text, (completed.response.model_extra or {})["citations"]


@pytest.mark.parametrize("api", APIS)
def test_a_citation_of_the_wrong_passage_is_not_reported(server_for: Callable[..., Server], fake: FakeLLM,
                                                         api: str) -> None:
    _, citations = _ask(server_for(), api)
    recorded = fake.chat_requests if api.startswith("chat") else fake.response_requests
    keys = _keys(recorded[-1].json)
    assert set(keys) == {"refunds", "shipping", "warranty"}
    assert [c["tag"] for c in citations] == [keys["refunds"]]
    assert citations[0]["source"] == "refunds.md"


def test_in_keep_mode_a_whole_reply_loses_the_tag_that_does_not_support_its_sentence(
        server_for: Callable[..., Server], fake: FakeLLM) -> None:
    text, citations = _ask(server_for(rag_tags="keep"), "chat")
    keys = _keys(fake.chat_requests[-1].json)
    refunds = keys["refunds"]
    assert f"[{refunds}]" in text and keys["shipping"] not in text
    assert text.endswith("two full years after delivery.")
    assert [c["tag"] for c in citations] == [refunds]
