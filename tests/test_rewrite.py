"""Follow-up turns in the proxy: what retrieval reads (``server/proxy/rewrite.py``), checked on the condensing
itself and through a real server whose scripted upstream records what was injected."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from fakellm import FakeLLM, Reply
from serverutil import running_server, settings_for

from chapterverse.server.proxy.rewrite import carry_query, names, needs_context

TRAIN = "# Night train\n\nThe night train to Madrid leaves Barcelona at 22:10 and arrives at 07:45.\n"
FERRY = "# Ferry\n\nThe ferry to Mallorca leaves Valencia at 23:00 and arrives at 07:00 the next morning.\n"
FIRST = "When does the night train to Madrid leave?"
FOLLOW_UP = "And when does it arrive?"
REWRITTEN = "When does the night train to Madrid arrive?"
HYPOTHETICAL = "The night train reaches Madrid at dawn."


def turns(*texts: str) -> list[dict[str, str]]:
    """User and assistant turns alternating, starting with the user."""
    return [{"role": "user" if i % 2 == 0 else "assistant", "content": t} for i, t in enumerate(texts)]


def test_a_follow_up_carries_the_names_of_the_turn_it_leans_on() -> None:
    messages = turns(FIRST, "At 22:10.", FOLLOW_UP)
    assert carry_query(messages, 2, FOLLOW_UP) == f"{FOLLOW_UP} madrid"
    spoken = turns("¿A qué hora sale el tren?", "A las nueve.", "¿y cuándo llega?")
    assert carry_query(spoken, 2, "¿y cuándo llega?") == "¿y cuándo llega? hora sale tren"  # no names: content words


def test_a_turn_that_stands_on_its_own_is_left_alone() -> None:
    messages = turns(FIRST, "At 22:10.", "How old was Manning when he retired?")
    assert carry_query(messages, 2, "How old was Manning when he retired?") == "How old was Manning when he retired?"
    assert not needs_context("What does the ferry to Mallorca cost in August?")
    assert needs_context("What does it cost?") and needs_context("¿y su precio?")
    assert carry_query(turns("What does it cost?"), 0, "What does it cost?") == "What does it cost?"  # nothing before


def test_carrying_walks_back_until_a_turn_stands_on_its_own() -> None:
    messages = turns("Tell me about the ferry to Mallorca from Valencia.", "Sure.", "When does it leave?", "At 23:00.",
                     "And the price?")
    assert carry_query(messages, 4, "And the price?") == "And the price? leave mallorca valencia"
    assert names("Where is it? It's in Madrid, near Atocha. 2015 was late.") == ["madrid", "atocha"]


def _upstream(body: dict[str, Any]) -> Reply:
    system = body["messages"][0]["content"] if body["messages"] else ""
    if system.startswith("Write two or three sentences"):
        return Reply.text(HYPOTHETICAL)
    if system.startswith("Rewrite the user's last message"):
        if "hang" in json.dumps(body["messages"]):
            return Reply.hang(5)
        return Reply.text(REWRITTEN)
    return Reply.text("It arrives at 07:45.")


def _kb(root: Path) -> Path:
    (root / "kb").mkdir()
    (root / "kb" / "train.md").write_text(TRAIN, encoding="utf-8")
    (root / "kb" / "ferry.md").write_text(FERRY, encoding="utf-8")
    return root


def _injected(fake: FakeLLM) -> str:
    answer = [r.json for r in fake.chat_requests
              if not r.json["messages"][0]["content"].startswith(("Rewrite the user's", "Write two or three"))]
    return json.dumps(answer[-1]["messages"])


@pytest.mark.parametrize("mode", ["off", "carry", "llm", "llm-timeout", "hyde"])
def test_the_proxy_retrieves_a_follow_up_with_its_subject(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                          mode: str) -> None:
    rewrite = "llm" if mode.startswith("llm") else mode
    first = FIRST + (" hang" if mode == "llm-timeout" else "")
    with FakeLLM(handler=_upstream) as fake:
        settings = settings_for(_kb(tmp_path), rag_enabled=True, llm_base_url=fake.base_url, rag_top_k=1,
                                rag_threshold=0.0, rag_rewrite=rewrite, rag_rewrite_timeout_s=0.5, log_level="info",
                                log_content=True)
        caplog.set_level(logging.INFO, logger="chapterverse")
        with running_server(settings) as server, server.client() as client:
            messages = turns(first, "At 22:10.", FOLLOW_UP)
            reply = client.post("/v1/chat/completions", json={"model": "m", "messages": messages})
        forwarded = [r.json for r in fake.chat_requests][-1]
    assert reply.status_code == 200 and reply.json()["choices"][0]["message"]["content"] == "It arrives at 07:45."
    assert [m["content"] for m in forwarded["messages"] if m["role"] == "user"] == [first, FOLLOW_UP]  # untouched
    expected = {"off": FOLLOW_UP, "carry": f"{FOLLOW_UP} madrid", "llm": REWRITTEN, "llm-timeout": f"{FOLLOW_UP} madrid",
                "hyde": f"{FOLLOW_UP} {HYPOTHETICAL}"}
    assert f"retrieval query:\n{expected[mode]}\n" in caplog.text
    if mode != "off":
        assert "Barcelona" in _injected(fake) and "Valencia" not in _injected(fake)
    if mode == "llm-timeout":
        assert "query rewrite by the upstream model failed (TimeoutError)" in caplog.text
