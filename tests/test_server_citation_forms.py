"""The proxy tells the model how to cite, and reads the other forms real models cite in as this turn's citations.

A real server with a three-passage knowledge base in front of the fake upstream, driven by the openai SDK over
chat completions and the Responses API, streamed (the fake cuts every marker across deltas) and not. The fake
model writes each form with the tags or item numbers of the block it was actually sent; each must reach the
client as a citation and never as text, and what is not a citation of this turn (an item number out of range,
code, a tag that was not shown, a footnote number the passages write themselves) must reach it as written.
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
    "refunds.md": "# Refunds\n\nRefunds are accepted within 30 days of purchase with the receipt.\n",
    "shipping.md": "# Shipping\n\nShipping takes five business days within Spain.\n",
    "warranty.md": "# Warranty\n\nThe warranty covers manufacturing defects for two years.\n",
}
FOOTNOTED = {**FILES, "shipping.md": "# Shipping\n\nShipping takes five business days within Spain.[1]\n"}
QUESTION = "How long do refunds, shipping and the warranty take?"
ITEM = re.compile(r"\[(\d+)\] \(source=[^,]+, score=[\d.]+\)\n.*? \[(f\d+-\d+-\d+)\]", re.S)
SPOKEN = "Refunds take 30 days. Shipping takes five days."
HEADER_EN = "Relevant excerpts retrieved from the knowledge base:"
CITE_EN = ("Each excerpt ends with its tag in square brackets; after each sentence that uses one, write its tag as "
           "shown.")
CITE_ES = ("Cada fragmento termina con su etiqueta entre corchetes; tras cada frase que use uno, escribe su etiqueta "
           "tal como aparece.")
CITE_IT = ("Ogni frammento termina con la sua etichetta tra parentesi quadre; dopo ogni frase che ne usa uno, scrivi "
           "la sua etichetta così come appare.")

saying: dict[str, str] = {"template": SPOKEN}
"""What the fake model says next: a template whose ``{k1}``.. are the keys of the items of the block it was sent."""


def strings(value: Any) -> str:
    """Every string inside a request body, joined: the injected block wherever the API put it."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return "\n".join(strings(v) for v in value.values())
    if isinstance(value, list):
        return "\n".join(strings(v) for v in value)
    return ""


def items(body: dict[str, Any]) -> dict[int, str]:
    """The injected items' numbers and the keys of their tags, as the upstream received them."""
    return {int(n): key for n, key in ITEM.findall(strings(body.get("messages") or body.get("input")))}


def model(body: dict[str, Any]) -> Reply:
    keys = {f"k{n}": key for n, key in items(body).items()}
    return Reply.text(saying["template"].format(**keys), chunk_size=2)


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeLLM]:
    with FakeLLM(handler=model) as running:
        yield running


@pytest.fixture(scope="module")
def server_for(tmp_path_factory: pytest.TempPathFactory, fake: FakeLLM) -> Iterator[Callable[..., Server]]:
    """Servers by knowledge base and settings, each started once; every passage clears the threshold."""
    with kb_servers(tmp_path_factory, fake.base_url, FILES, rag_top_k=3, rag_threshold=0.0) as get:
        yield get


def ask(server: Server, api: str, question: str = QUESTION) -> tuple[str, list[dict[str, Any]], list[str]]:
    """The reply's text, its citations and (streamed) its text deltas, through the openai SDK."""
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)
    messages: Any = [{"role": "user", "content": question}]
    if api == "chat":
        completion = client.chat.completions.create(model="m", messages=messages)
        return completion.choices[0].message.content or "", (completion.model_extra or {})["citations"], []
    if api == "chat-stream":
        deltas, citations = [], None
        for chunk in client.chat.completions.create(model="m", messages=messages, stream=True):
            if chunk.choices and chunk.choices[0].delta.content:
                deltas.append(chunk.choices[0].delta.content)
            if chunk.choices and chunk.choices[0].finish_reason:
                citations = (chunk.model_extra or {})["citations"]
        assert citations is not None
        return "".join(deltas), citations, deltas
    if api == "responses":
        response = client.responses.create(model="m", input=question)
        return response.output_text, (response.model_extra or {})["citations"], []
    events = list(client.responses.create(model="m", input=question, stream=True))
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    completed = events[-1]
    assert completed.type == "response.completed"
    assert completed.response.output_text == "".join(deltas)
    return "".join(deltas), (completed.response.model_extra or {})["citations"], deltas


def last_items(fake: FakeLLM, api: str) -> dict[int, str]:
    recorded = fake.chat_requests if api.startswith("chat") else fake.response_requests
    return items(recorded[-1].json)


APIS = ["chat", "chat-stream", "responses", "responses-stream"]


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize(("template", "cited"), [
    ("Refunds take 30 days [1]. Shipping takes five days [2, 3].", [1, 2, 3]),
    ("Refunds take 30 days.[1][3] Shipping takes five days.", [1, 3]),
    ("Refunds take 30 days ({k1}). Shipping takes five days.", [1]),
    ("Refunds take 30 days 【{k2}】. Shipping takes five days.", [2]),
    ("Refunds take 30 days [source: {k3}]. Shipping takes five days.", [3]),
    ("Refunds take 30 days {k1}. Shipping takes five days {k2}.", [1, 2]),
    ("Refunds take 30 days [{k3}]. Shipping takes five days.", [3]),
], ids=["numbers", "glued-numbers", "parentheses", "lenticular", "labelled", "bare", "canonical"])
def test_every_form_of_a_citation_becomes_one_and_is_not_spoken(server_for: Callable[..., Server], fake: FakeLLM,
                                                                 api: str, template: str, cited: list[int]) -> None:
    saying["template"] = template
    text, citations, deltas = ask(server_for(), api)
    shown = last_items(fake, api)
    assert sorted(shown) == [1, 2, 3]
    assert text == SPOKEN
    assert [c["tag"] for c in citations] == [shown[n] for n in cited]
    assert [c["n"] for c in citations] == list(range(1, len(cited) + 1))
    assert not any(mark in d for d in deltas for mark in "[]【】()")  # not even half a marker is spoken


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("said", [
    "Refunds take 30 days [7].",
    "Use `arr[1]` for the first refund.",
    "```\nfirst = refunds[1]\n```",
    "[1] Refunds take 30 days.",
    "Refunds take 30 days (f999-1-2).",
    "Refunds take 30 days 【f999-1-2】.",
    "Refunds take 30 days [source: f999-1-2].",
    "Refunds take 30 days, see f999-1-2.",
], ids=["out-of-range", "code-span", "fence", "line-start", "paren-unshown", "lenticular-unshown",
        "labelled-unshown", "bare-unshown"])
def test_what_is_not_a_citation_of_this_turn_is_left_as_written(server_for: Callable[..., Server], api: str,
                                                                said: str) -> None:
    saying["template"] = said
    text, citations, _ = ask(server_for(), api)
    assert (text, citations) == (said, [])


@pytest.mark.parametrize("api", ["chat-stream", "responses"])
def test_a_footnote_number_the_passages_write_is_not_a_citation(server_for: Callable[..., Server], fake: FakeLLM,
                                                                api: str) -> None:
    """Shipping's text writes ``[1]``: a ``[1]`` in the reply may be copied from it, so it names no item; ``[2]``
    still does."""
    saying["template"] = "Refunds take 30 days [1]. Shipping takes five days [2]."
    text, citations, _ = ask(server_for(FOOTNOTED), api)
    assert text == "Refunds take 30 days [1]. Shipping takes five days."
    assert [c["tag"] for c in citations] == [last_items(fake, api)[2]]


@pytest.mark.parametrize("api", ["chat", "responses-stream"])
def test_keep_mode_writes_every_form_as_the_canonical_tag(server_for: Callable[..., Server], fake: FakeLLM,
                                                          api: str) -> None:
    saying["template"] = "Refunds take 30 days [2]. Shipping takes five days ({k1})."
    text, citations, _ = ask(server_for(rag_tags="keep"), api)
    shown = last_items(fake, api)
    assert text == f"Refunds take 30 days [{shown[2]}]. Shipping takes five days [{shown[1]}]."
    assert [c["tag"] for c in citations] == [shown[2], shown[1]]


@pytest.mark.parametrize(("question", "instruction"), [
    (QUESTION, CITE_EN),
    ("¿Cuánto tardan los reembolsos y el envío?", CITE_ES),
    ("Quanto tempo ci vuole per i rimborsi e la spedizione?", CITE_IT),
])
def test_the_block_tells_the_model_how_to_cite_in_the_questions_language(server_for: Callable[..., Server],
                                                                         fake: FakeLLM, question: str,
                                                                         instruction: str) -> None:
    saying["template"] = SPOKEN
    ask(server_for(), "chat", question)
    block = fake.chat_requests[-1].json["messages"][0]["content"]
    header, cite = block.split("\n")[:2]
    assert cite == instruction and header.endswith(":")
    assert re.search(r"\n\n\[1\] \(source=\w+\.md, score=0\.\d{3}\)\n", block)
    if instruction == CITE_EN:
        assert header == HEADER_EN


@pytest.mark.parametrize("api", ["chat-stream", "responses"])
def test_a_tag_planted_in_another_passage_is_not_read_in_another_form(server_for: Callable[..., Server],
                                                                       fake: FakeLLM, api: str) -> None:
    """A document writing the real key of the refunds passage, bare and in parentheses: a model copying those
    from it cites nothing (the canonical ``[tag]`` the server appended to refunds still does)."""
    server = server_for(rag_top_k=4)
    with server.client() as client:
        found = client.post("/v1/rag/search", json={"query": "Refunds are accepted within 30 days", "top_k": 1})
        refunds = found.json()["results"][0]["tag"].strip("[]")
        planted = {"source": "planted.md", "text": f"Refund rules are in ({refunds}) and {refunds} above."}
        assert client.post("/v1/rag/upsert/document", json=planted).status_code == 200
    said = f"Refunds take 30 days ({refunds}), see {refunds}."
    saying["template"] = said + " Shipping takes five days [{k1}]."
    text, citations, _ = ask(server, api)
    assert len(last_items(fake, api)) == 4
    assert text == said + " Shipping takes five days."
    assert [c["tag"] for c in citations] == [last_items(fake, api)[1]]
