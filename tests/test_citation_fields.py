"""One citation for every front end (issue 30): whichever path made an answer and whichever front end sends it,
each citation has the same fields, so a client written against one reads them all.

Each front end is driven as its users drive it, against one knowledge base (a real server on 127.0.0.1, the
scripted fake model upstream, real SQLite): ``chapterverse ask --json``, the reader's ask stream (extractive and
the model's tool loop) and the chat it keeps, its export, and the proxy's chat completions and Responses (context
injected) and chat completions in tools mode.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fakellm import FakeLLM, Reply
from serverutil import Server, running_server, settings_for, shared_embedder
from typer.testing import CliRunner

from chapterverse.cli import app
from chapterverse import Library

FAQ = """# FAQ

The refund window is 30 days from the date of purchase.

Shipping takes five business days within Spain.
"""
QUESTION = "How long is the refund window?"
TAG = re.compile(r"\[f\d+-\d+-\d+\]")
FIELDS = {"n", "tag", "doc_id", "doc_title", "text", "toc_path", "file", "start", "end", "source", "chunk_index",
          "score"}
"""What a client may read of every citation."""


def model(body: dict[str, Any]) -> Reply:
    """With tools: searches, then cites the first tag the search returned; without (context injected): cites the
    first tag it was shown."""
    if body.get("tools"):
        results = [m["content"] for m in body["messages"] if m.get("role") == "tool"]
        if not results:
            return Reply.tool_call("search_passages", {"query": "refund window"})
        return Reply.text(f"You have 30 days {TAG.findall(results[-1])[0]}.")
    shown = TAG.findall(json.dumps(body.get("messages") or body.get("input")))
    return Reply.text(f"The refund window is 30 days {shown[0]}." if shown else "Hello!")


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeLLM]:
    with FakeLLM(handler=model) as running:
        yield running


def _serve(root: Path, fake: FakeLLM, **values: Any) -> Any:
    (root / "kb").mkdir()
    (root / "kb" / "faq.md").write_text(FAQ, encoding="utf-8")
    return running_server(settings_for(root, rag_enabled=True, llm_base_url=fake.base_url, llm_model="fake-model",
                                       **values))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, fake: FakeLLM) -> Iterator[Server]:
    with _serve(tmp_path_factory.mktemp("inject"), fake) as running:
        yield running


@pytest.fixture(scope="module")
def tools_server(tmp_path_factory: pytest.TempPathFactory, fake: FakeLLM) -> Iterator[Server]:
    with _serve(tmp_path_factory.mktemp("tools"), fake, rag_mode="tools") as running:
        yield running


def _done(client: httpx.Client, doc_id: int, mode: str) -> dict[str, Any]:
    """The reader's answer: the ask stream's ``done`` event."""
    reply = client.post(f"/api/documents/{doc_id}/ask", json={"question": QUESTION, "mode": mode})
    assert reply.status_code == 200, reply.text
    events = [block.splitlines() for block in reply.text.strip().split("\n\n")]
    done = [json.loads(lines[1].removeprefix("data: ")) for lines in events if lines[0] == "event: done"]
    assert done, reply.text
    return done[0]  # type: ignore[no-any-return]


def _cli_ask(tmp_path: Path) -> dict[str, Any]:
    (tmp_path / "faq.md").write_text(FAQ, encoding="utf-8")
    library = Library(tmp_path / "lib", embedder=shared_embedder())
    library.ingest([tmp_path / "faq.md"])
    library.close()
    run = CliRunner().invoke(app, ["ask", QUESTION, "--json", "--library", str(tmp_path / "lib")])
    assert run.exit_code == 0, run.output
    return json.loads(run.output)  # type: ignore[no-any-return]


def test_every_front_end_sends_the_same_citation_fields(server: Server, tools_server: Server,
                                                        tmp_path: Path) -> None:
    with server.client() as client:
        doc_id = client.get("/api/documents").json()["documents"][0]["id"]
        extractive, by_model = _done(client, doc_id, "extractive"), _done(client, doc_id, "auto")
        chat = client.get("/api/chats", params={"doc_id": doc_id}).json()["chats"][0]["id"]
        kept = [m["result"] for m in client.get(f"/api/chats/{chat}").json()["messages"] if m["result"]]
        export = client.get(f"/api/chats/{chat}/export").text
        completion = client.post("/v1/chat/completions",
                                 json={"model": "m", "messages": [{"role": "user", "content": QUESTION}]}).json()
        response = client.post("/v1/responses", json={"model": "m", "input": QUESTION}).json()
    with tools_server.client() as client:
        tools_turn = client.post("/v1/chat/completions",
                                 json={"model": "m", "messages": [{"role": "user", "content": QUESTION}]}).json()
    cited = {"ask --json": _cli_ask(tmp_path)["citations"], "reader, extractive": extractive["citations"],
             "reader, model": by_model["citations"], "chat": [c for r in kept for c in r["citations"]],
             "proxy, injected": completion["citations"], "responses, injected": response["citations"],
             "proxy, tools": tools_turn["citations"]}

    assert by_model["mode"] == "llm" and extractive["mode"] == "extractive"
    for front_end, citations in cited.items():
        assert citations, front_end
        for citation in citations:
            assert set(citation) == FIELDS, (front_end, sorted(set(citation) ^ FIELDS))
            assert citation["source"] == "faq.md", front_end
            assert citation["tag"] == f"f{citation['file']}-{citation['start']}-{citation['end']}", front_end
    for front_end in ("ask --json", "reader, extractive", "proxy, injected", "responses, injected"):
        assert all(isinstance(c["score"], float) and c["chunk_index"] == 0 for c in cited[front_end]), front_end
    for citation in cited["chat"]:
        assert f"[[{citation['n']}]]({server.url}/read/{citation['doc_id']}#{citation['tag']})" in export
