"""Private logs: by default the server logs what happened, never what people wrote or read.

A customer's name and order number are planted in the knowledge base and in the question; every path that puts a
model in front of them (the proxy's chat completions and Responses, streamed and not, tools mode, the reader's
chat) must leave them out of the log, in process (``caplog``, every level) and in a real ``chapterverse serve``
process's stderr. ``--log_content`` (or ``CHAPTERVERSE_LOG_CONTENT=1``) puts the question and the injected context
back, as the old RAG server logged them.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fakellm import FakeLLM, Reply
from serverutil import Server, kb_servers, serving

NAME = "Zorbalina Quixlemeyer"
ORDER = "ORD-77341"
KB = {"order-17.md": f"# Order {ORDER}\n\nCustomer {NAME} ordered two brass lamps. The order ships on "
                            f"Friday to Calle Mayor 5, Segovia.\n"}
QUESTION = f"When does the order of {NAME} ship?"
PLANTED = ("Quixlemeyer", "Zorbalina", ORDER, "Calle Mayor", "brass lamps", "When does the order")
"""The customer, the passage and the question: none of it may be in a default log."""


def _model(body: dict[str, Any]) -> Reply:
    """Calls the search tool when it is offered one and has not used it; answers with the customer's name."""
    messages = body.get("messages") or []
    if body.get("tools") and not any(isinstance(m, dict) and m.get("role") == "tool" for m in messages):
        return Reply.tool_call("search_passages", {"query": f"order of {NAME}"})
    return Reply.text(f"The order of {NAME} ships on Friday.", chunk_size=200)


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeLLM]:
    with FakeLLM(handler=_model) as running:
        yield running


@pytest.fixture(scope="module")
def server_for(tmp_path_factory: pytest.TempPathFactory, fake: FakeLLM) -> Iterator[Callable[..., Server]]:
    with kb_servers(tmp_path_factory, fake.base_url, KB, llm_model="fake-model") as get:
        yield get


def _every_path(client: httpx.Client) -> None:
    """The question through every path that answers it with the model, each answer checked to have come."""
    chat = {"model": "m", "messages": [{"role": "user", "content": QUESTION}]}
    for stream in (False, True):
        for path, body in (("/v1/chat/completions", chat), ("/v1/responses", {"model": "m", "input": QUESTION})):
            reply = client.post(path, json={**body, "stream": stream})
            assert reply.status_code == 200 and "Friday" in reply.text, reply.text
    doc_id = client.get("/api/documents").json()["documents"][0]["id"]
    reply = client.post(f"/api/documents/{doc_id}/ask", json={"question": QUESTION, "chat_id": None})
    assert reply.status_code == 200 and "event: done" in reply.text, reply.text


def _tools_mode(client: httpx.Client) -> None:
    for stream in (False, True):
        reply = client.post("/v1/chat/completions", json={"model": "m", "stream": stream,
                                                          "messages": [{"role": "user", "content": QUESTION}]})
        assert reply.status_code == 200 and "Friday" in reply.text, reply.text


def _wait_up(client: httpx.Client) -> None:
    """Until the server answers (its start-up line comes just before it listens)."""
    deadline = time.monotonic() + 60
    while True:
        try:
            client.get("/v1/rag/status")
            return
        except httpx.TransportError:
            assert time.monotonic() < deadline, "the server never answered"
            time.sleep(0.1)


def _leaked(log: str) -> list[str]:
    return [planted for planted in PLANTED if planted in log]


def test_default_logs_hold_what_happened_and_no_content(server_for: Callable[..., Server],
                                                        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="chapterverse")
    with server_for().client() as client:
        _every_path(client)
    with server_for(rag_mode="tools").client() as client:
        _tools_mode(client)
    assert not _leaked(caplog.text), caplog.text
    assert re.search(r"RAG turn \d+: injected 1 chunks \(\d+ chars\) as system for a query of 50 chars in \d+ ms — "
                     r"order-17\.md#c0 \(0\.\d\d\)", caplog.text), caplog.text
    assert "answering a question of 50 chars with the tool loop on m\n" in caplog.text


def test_log_content_logs_the_question_and_the_injected_context(server_for: Callable[..., Server],
                                                                caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="chapterverse")
    with server_for(log_content=True).client() as client:
        _every_path(client)
    with server_for(rag_mode="tools", log_content=True).client() as client:
        _tools_mode(client)
    assert f"retrieval query:\n{QUESTION}\n" in caplog.text
    assert f"Customer {NAME} ordered two brass lamps" in caplog.text
    assert f"question:\n{QUESTION}" in caplog.text


@pytest.mark.parametrize("setting", ["default", "flag", "environment"])
def test_a_serve_process_logs_no_content_unless_told(tmp_path: Path, fake: FakeLLM, setting: str,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A real ``chapterverse serve``, at its default log level; its whole stderr after a Ctrl-C."""
    for name, text in KB.items():
        (tmp_path / "kb" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "kb" / name).write_text(text, encoding="utf-8")
    if setting == "environment":
        monkeypatch.setenv("CHAPTERVERSE_LOG_CONTENT", "1")
    flags = ["--log_content"] if setting == "flag" else []
    with serving("--rag_enabled", "--rag_kb_path", str(tmp_path / "kb"), "--llm_base_url", fake.base_url,
                 "--llm_model", "fake-model", *flags) as (port, _, process), \
            httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
        _wait_up(client)
        _every_path(client)
    assert process.stderr is not None
    log = process.stderr.read()
    assert "injected 1 chunks" in log, log
    if setting == "default":
        assert not _leaked(log), log
    else:
        assert f"retrieval query:\n{QUESTION}\n" in log and f"Customer {NAME} ordered" in log
