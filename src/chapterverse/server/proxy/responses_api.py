"""``/v1/responses``: the OpenAI Responses API through the proxy, with the same injection as chat completions.

Voice pipelines that speak the Responses API point their base URL here. The request goes to the upstream's own
``/responses`` (OpenAI, vLLM, Ollama and llama.cpp's server offer one) with everything it carried (tools,
``previous_response_id``, ``store``...), changed only as ``/v1/chat/completions`` changes a request: with RAG
on, the last user message of ``input`` (a string is one) is retrieved with (condensed with the earlier user
items as ``--rag_rewrite`` says), the context block is added to ``input`` (a system item, or an ``input_text``
part of that user item with ``--rag_inject_as user``), and ``--llm_model`` replaces ``model`` (``grounding.py``,
``relay.py``).

The reply's text goes through the same tag filter (strip or keep), and the verified citations ride out of band:
a ``citations`` field on the response object, in the non-streamed reply and in the stream's
``response.completed`` event (``replies.ResponsesRewriter``). ``--rag_mode tools`` is served on
``/v1/chat/completions`` only; here it is a 400.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from starlette.responses import Response

from .bounds import RESPONSES_TOKEN_FIELDS, turn_budget, turn_deadline
from ..lone_surrogates import require_text_body
from ..errors import ApiError
from .grounding import ground, next_turn
from .relay import RESPONSES, relay, request_json, require_upstream
from .replies import ResponsesRewriter
from ..state import server_state

__all__ = ["router"]

router = APIRouter(tags=["openai"], dependencies=[Depends(require_text_body)])


async def _body(request: Request) -> dict[str, Any]:
    """The request as JSON, with an ``input`` that is a string or a list of items."""
    body = await request_json(request)
    if not isinstance(body, dict) or not isinstance(body.get("input"), (str, list)):
        raise ApiError(400, "BAD_INPUT", "expected a Responses API request with an input string or list")
    return body


def _items(given: str | list[Any]) -> list[Any]:
    """``input`` as a list of items: a string is one user message."""
    return [{"role": "user", "content": given}] if isinstance(given, str) else given


@router.post("/v1/responses", summary="OpenAI Responses API, with knowledge-base context injected")
async def responses(request: Request) -> Response:
    state = server_state(request)
    deadline = turn_deadline(state)
    body = await _body(request)
    upstream = require_upstream(state)
    turn = next_turn()
    if state.kb is not None and state.settings.rag_mode == "tools":
        raise ApiError(400, "BAD_INPUT", "rag_mode tools answers on /v1/chat/completions only; /v1/responses "
                                         "injects context (rag_mode inject)")
    budget = await turn_budget(state, upstream, body, RESPONSES_TOKEN_FIELDS, deadline)
    items = _items(body["input"])
    grounding = await ground(state, items, body.get("model"), upstream, turn, part_type="input_text",
                             room=budget.passage_room(body, items))
    if grounding is None:
        return await relay(state, upstream, RESPONSES, budget.fit(body, "input"), None, turn, deadline)
    response = await relay(state, upstream, RESPONSES, budget.fit(grounding.forwarded(body, "input"), "input"),
                           ResponsesRewriter(grounding), turn, deadline)
    grounding.mark(response)
    return response
