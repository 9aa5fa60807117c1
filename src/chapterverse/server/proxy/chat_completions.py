"""OpenAI-compatible endpoints: ``/v1/chat/completions`` with transparent context injection, ``/v1/models``.

A client such as a voice pipeline points its chat-completions base URL here and changes nothing
else. Per request (``rag_mode=inject``): retrieve with the last user message and inject what clears the
threshold (``grounding.py``), then forward; otherwise forward the request untouched.
Unknown request fields (``chat_template_kwargs``, ``stream_options``, ...) pass through as they
are; only ``messages`` (when injecting) and ``model`` (when ``--llm_model`` is set) change.
The upstream call, its errors and the secret masking of what is relayed are ``relay.py``'s.

Every turn is bounded (``bounds.py``): the answer's tokens (the client's, capped by ``--llm_max_tokens``), the
whole turn's seconds (``--llm_deadline_s``: a stream is then cut with ``finish_reason`` length and a ``notice``),
and what is sent, fitted to the model's window.

Replies stream back as they arrive. With RAG on, the text goes through the tag filter (strip or
keep) and the verified citations ride out of band: a ``citations`` field on the chunk that carries
``finish_reason`` (and on a non-streamed completion); see ``replies.py``.

``rag_mode=tools`` answers with chapterverse's own tool loop on the upstream model (``toolsmode.py``), and
streams that answer in the same chat-completion format.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from starlette.responses import JSONResponse, Response

from .bounds import CHAT_TOKEN_FIELDS, answer_tokens, turn_budget, turn_deadline
from ..lone_surrogates import require_text_body
from ..errors import ApiError
from .grounding import ground, next_turn
from .relay import CHAT_COMPLETIONS, NO_UPSTREAM, relay, relay_get, request_json, require_upstream
from .replies import CompletionRewriter
from ..state import server_state
from .tools_mode import tools_turn

__all__ = ["router"]

router = APIRouter(tags=["openai"], dependencies=[Depends(require_text_body)])


async def _json_body(request: Request) -> dict[str, Any]:
    """The request's chat completion body; 400 before any upstream call for one that no upstream could answer
    (no messages list, or an empty one: OpenAI refuses ``"messages": []`` too, after a round trip)."""
    body = await request_json(request)
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
        raise ApiError(400, "BAD_INPUT", "expected a chat completion request with a messages list")
    if not body["messages"]:
        raise ApiError(400, "BAD_INPUT", "messages is empty; a chat completion request needs at least one message")
    return body


@router.get("/v1/models", summary="The upstream's models (forwarded)")
async def models(request: Request) -> Response:
    state = server_state(request)
    upstream = state.upstream.current
    if not upstream.base_url:
        if upstream.model:
            return JSONResponse({"object": "list", "data": [{"id": upstream.model, "object": "model", "created": 0,
                                                             "owned_by": "chapterverse"}]})
        raise ApiError(503, "NO_UPSTREAM", NO_UPSTREAM)
    return await relay_get(state, upstream, "/models")


@router.post("/v1/chat/completions", summary="OpenAI-compatible chat, with knowledge-base context injected")
async def chat_completions(request: Request) -> Response:
    state = server_state(request)
    deadline = turn_deadline(state)
    body = await _json_body(request)
    upstream = require_upstream(state)
    turn = next_turn()
    if state.kb is not None and state.settings.rag_mode == "tools":
        return await tools_turn(state, body, upstream, turn, answer_tokens(upstream, body, CHAT_TOKEN_FIELDS))
    budget = await turn_budget(state, upstream, body, CHAT_TOKEN_FIELDS, deadline)
    grounding = await ground(state, body["messages"], body.get("model"), upstream, turn,
                             room=budget.passage_room(body, body["messages"]))
    if grounding is None:
        return await relay(state, upstream, CHAT_COMPLETIONS, budget.fit(body, "messages"), None, turn, deadline)
    response = await relay(state, upstream, CHAT_COMPLETIONS, budget.fit(grounding.forwarded(body, "messages"),
                                                                         "messages"),
                           CompletionRewriter(grounding), turn, deadline)
    grounding.mark(response)
    return response
