"""Bounded turns with a real model behind every path (``realllm``: llama.cpp serving SmolLM2-135M-Instruct with no
generation cap): each path ends within its deadline; a 1,024-token window behind the proxy with 14 passages
retrieved is answered with fitted context, or refused naming the window; the upstream's own refusal reaches the
client with its reason; the window is learnt from the server. Mechanics only, never the model's wisdom; short
deadlines and ``max_tokens`` keep each test to seconds.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from realllm import RealLLM, real_llm
from turnpaths import PATHS, ModelPaths, model_paths

from chapterverse.llm.window import discover_window, forget_windows

pytestmark = pytest.mark.slow  # the real model's runs (a minute or more on one thread): the whole suite's

DEADLINE_S = 6.0
GRACE_S = 4.0
"""Past the deadline a turn may take this much: a turn cut before its answer began answers extractively (most of
that fits the deadline's reserve, not all of it on a CPU shared with other test runs), a stream writes its last
event. ``scripts/bench_turns.py`` measures how far past the deadline turns really end; without bounds, a turn of
this model on a server with no cap runs for minutes."""
CLI_START_S = 2.5
"""A CLI turn is timed from its process's start: the interpreter and its imports come before the question."""


@pytest.fixture(scope="module")
def paths(real_llm_server: RealLLM, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModelPaths]:
    with model_paths(real_llm_server.base_url, real_llm_server.model, tmp_path_factory.mktemp("real-paths"),
                     deadline_s=DEADLINE_S, max_tokens=32) as running:
        yield running


@pytest.mark.parametrize("path", PATHS)
def test_every_path_ends_within_its_deadline(paths: ModelPaths, path: str) -> None:
    turn = paths.run(path, "Tell me everything about the lamp room, in detail.")
    limit = DEADLINE_S + GRACE_S + (CLI_START_S if path in ("ask", "chat") else 0.0)
    assert turn.seconds < limit, (turn.seconds, turn.outcome, turn.text[-2000:])
    assert turn.outcome in ("exit 0", "done (llm)", "done (extractive)", "HTTP 200", "HTTP 504",
                            "HTTP 200 stop", "HTTP 200 length"), turn.text[-2000:]
    if path in ("ask", "chat", "reader"):
        assert turn.first_s is not None and turn.first_s < 1.0 + (CLI_START_S if path == "ask" else 0.0)


@pytest.fixture(scope="module")
def small() -> Iterator[RealLLM]:
    with real_llm(n_ctx=1024) as llm:
        yield llm


def test_the_window_is_learnt_from_the_server(small: RealLLM) -> None:
    forget_windows()
    assert discover_window(small.base_url, small.model) == 1024


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_1024_token_window_with_14_passages_is_answered_fitted(small: RealLLM, tmp_path: Path,
                                                                  stream: bool) -> None:
    """A long deadline: this is about the window; reading a 700-token prompt takes a 135M model seconds on an idle
    CPU, more on a shared one."""
    with model_paths(small.base_url, small.model, tmp_path, deadline_s=120, max_tokens=16, rag_top_k=14,
                     rag_threshold=0.0, rag_chunk_size=32, rag_chunk_overlap=0) as running:
        body = {"model": small.model, "stream": stream,
                "messages": [{"role": "user", "content": "Tell me everything about the keeper and the lamp."}]}
        reply = httpx.post(f"{running.inject_url}/v1/chat/completions", json=body, timeout=60)
    assert reply.status_code == 200, reply.text
    if not stream:
        assert reply.json()["choices"][0]["message"]["content"] is not None


def test_the_upstreams_refusal_is_relayed_with_its_reason(small: RealLLM, tmp_path: Path) -> None:
    """Told a window the model does not have, the proxy sends too much: the client reads why it was refused."""
    with model_paths(small.base_url, small.model, tmp_path, deadline_s=120, max_tokens=16,
                     llm_context_tokens=8192) as running:
        long = " ".join(["the keeper wound the clockwork of the lamp"] * 200)
        reply = httpx.post(f"{running.inject_url}/v1/chat/completions", timeout=60,
                           json={"model": small.model, "messages": [{"role": "user", "content": long}]})
    message = reply.json()["error"]["message"]
    assert reply.status_code == 400 and "context size (1024 tokens)" in message, json.dumps(reply.json())
