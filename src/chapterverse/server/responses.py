"""``/v1/responses``: the OpenAI Responses API through the proxy, with the same injection as chat completions.

Voice pipelines that speak the Responses API point their base URL here. The request goes to the upstream's own
``/responses`` (OpenAI, vLLM, Ollama and llama.cpp's server offer one) with everything it carried (tools,
``previous_response_id``, ``store``...), changed only as ``/v1/chat/completions`` changes a request: with RAG
on, the last user message of ``input`` (a string is one) is retrieved with (condensed with the earlier user
items as ``--rag_rewrite`` says), the context block is added to ``input`` (a system item, or an ``input_text``
part of that user item with ``--rag_inject_as user``), and ``--llm_model`` replaces ``model``.

The reply's text goes through the same tag filter (strip or keep), and the verified citations ride out of band:
a ``citations`` field on the response object, in the non-streamed reply and in the stream's
``response.completed`` event. Streamed, each ``response.output_text.delta`` carries the filtered text (events
whose text is all held back are left out, and ``sequence_number`` is renumbered so it stays gapless), and the
``.done`` events and the final response carry the filtered text whole. ``--rag_mode tools`` is served on
``/v1/chat/completions`` only; here it is a 400.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncGenerator
from typing import Any

import httpx
from fastapi import APIRouter, Depends, Request
from starlette.responses import Response

from ..library import Hit
from .errors import ApiError, error_body
from .injection import ReplyFilter, last_user_text
from .lone_surrogates import require_text_body
from .proxy import (
    TRUNCATED_HEADER,
    _headers,
    _log_citations,
    _resolver,
    _turns,
    _upstream,
    _upstream_error,
    _upstream_failure,
    inject,
    relayed,
    relayed_json,
    relayed_stream,
    request_json,
    retrieval_query,
)
from .state import ServerState, server_state
from .upstream import Upstream

__all__ = ["ResponsesRelay", "router"]

log = logging.getLogger(__name__)
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
    body = await _body(request)
    upstream = _upstream(state)
    turn = next(_turns)
    if state.kb is not None and state.settings.rag_mode == "tools":
        raise ApiError(400, "BAD_INPUT", "rag_mode tools answers on /v1/chat/completions only; /v1/responses "
                                         "injects context (rag_mode inject)")
    hits: list[Hit] = []
    items = _items(body["input"])
    found = last_user_text(items) if state.kb is not None else None
    query = found[1][:state.settings.max_query_chars] if found else ""
    if found is not None:
        retrieval = await retrieval_query(state, items, body.get("model"), upstream, found[0], query)
        injected, hits = await inject(state, items, found[0], retrieval, turn, part_type="input_text")
        if hits:
            body = {**body, "input": injected}
    if upstream.model:
        body["model"] = upstream.model
    reply_filter = ReplyFilter(hits, state.settings.rag_tags, _resolver(state)) if state.kb is not None else None
    if body.get("stream"):
        response = await _relay_stream(state, body, upstream, reply_filter, turn)
    else:
        response = await _relay_once(state, body, upstream, reply_filter, turn)
    if found is not None and len(query) < len(found[1]):
        response.headers[TRUNCATED_HEADER] = str(len(query))
    return response


async def _relay_once(state: ServerState, body: dict[str, Any], upstream: Upstream,
                      reply_filter: ReplyFilter | None, turn: int) -> Response:
    try:
        reply = await state.http.post(f"{upstream.base_url}/responses", json=body, headers=_headers(upstream))
    except httpx.HTTPError as exc:
        raise _upstream_failure(exc, upstream) from exc
    if reply.status_code >= 400:
        raise _upstream_error(reply.status_code, upstream)
    media_type = reply.headers.get("content-type", "application/json")
    if reply_filter is None:
        return relayed(reply.content, reply.status_code, media_type)
    try:
        data = reply.json()
    except ValueError:
        return relayed(reply.content, reply.status_code, media_type)
    if not isinstance(data, dict):
        return relayed(reply.content, reply.status_code, media_type)
    texts: dict[tuple[int, int], str] = {}
    for key, part in _text_parts(data):
        part["text"] = reply_filter.whole(part["text"])
        texts[key] = part["text"]
    _finish_response(data, texts, reply_filter)
    _log_citations(turn, reply_filter, data["citations"])
    return relayed_json(data, reply.status_code)


def _text_parts(response: dict[str, Any]) -> list[tuple[tuple[int, int], dict[str, Any]]]:
    """((output index, content index), part) of every ``output_text`` part of a response object."""
    found = []
    output = response.get("output")
    for i, item in enumerate(output if isinstance(output, list) else []):
        content = item.get("content") if isinstance(item, dict) else None
        for j, part in enumerate(content if isinstance(content, list) else []):
            if isinstance(part, dict) and part.get("type") == "output_text" and isinstance(part.get("text"), str):
                found.append(((i, j), part))
    return found


def _finish_response(response: dict[str, Any], texts: dict[tuple[int, int], str],
                     reply_filter: ReplyFilter) -> None:
    """Put the filtered texts into a response object, with the citations and a matching ``output_text``."""
    for key, part in _text_parts(response):
        if key in texts:
            part["text"] = texts[key]
    if isinstance(response.get("output_text"), str):
        response["output_text"] = "".join(part["text"] for _, part in _text_parts(response))
    response["citations"] = reply_filter.citations()


async def _relay_stream(state: ServerState, body: dict[str, Any], upstream: Upstream,
                        reply_filter: ReplyFilter | None, turn: int) -> Response:
    request = state.http.build_request("POST", f"{upstream.base_url}/responses", json=body,
                                       headers=_headers(upstream))
    try:
        reply = await state.http.send(request, stream=True)
    except httpx.HTTPError as exc:
        raise _upstream_failure(exc, upstream) from exc
    if reply.status_code >= 400:
        await reply.aclose()
        raise _upstream_error(reply.status_code, upstream)
    relay = ResponsesRelay(reply_filter) if reply_filter is not None else None

    async def events() -> AsyncGenerator[bytes, None]:
        try:
            if relay is None:
                async for raw in reply.aiter_raw():
                    yield raw
                return
            async for line in reply.aiter_lines():
                for out in relay.line(line):
                    yield out.encode()
            for out in relay.line(""):
                yield out.encode()
            if reply_filter is not None:
                _log_citations(turn, reply_filter, relay.citations)
        except httpx.HTTPError as exc:
            log.warning("RAG turn %d: upstream stream broke: %s", turn, exc)
            error = error_body("UPSTREAM_INTERRUPTED", f"the upstream stream broke: {type(exc).__name__}",
                               openai=True)
            yield f"event: error\ndata: {json.dumps({'type': 'error', **error})}\n\n".encode()
        finally:
            await reply.aclose()

    return relayed_stream(events())


class ResponsesRelay:
    """Rewrites an upstream Responses API event stream: filtered text, citations on ``response.completed``.

    Events are read whole (``event:`` and ``data:`` lines up to a blank line); a ``data`` that is not a JSON
    object passes through untouched.
    """

    def __init__(self, reply_filter: ReplyFilter) -> None:
        self._filter = reply_filter
        self._lines: list[str] = []
        self._texts: dict[tuple[int, int], list[str]] = {}
        self._sequence = 0
        self.citations: list[dict[str, Any]] = []

    def line(self, line: str) -> list[str]:
        """Feed one line; the events (as SSE text) it completes."""
        if line.strip():
            self._lines.append(line)
            return []
        lines, self._lines = self._lines, []
        if not lines:
            return []
        data = "\n".join(part[5:].lstrip() for part in lines if part.startswith("data:"))
        try:
            event = json.loads(data) if data else None
        except ValueError:
            event = None
        if not isinstance(event, dict):
            return ["\n".join(lines) + "\n\n"]
        return [self._emit(e) for e in self._rewrite(event)]

    def _emit(self, event: dict[str, Any]) -> str:
        if "sequence_number" in event:
            event["sequence_number"] = self._sequence
            self._sequence += 1
        return f"event: {event.get('type', 'message')}\ndata: {json.dumps(event, ensure_ascii=False)}\n\n"

    def _rewrite(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        kind = event.get("type")
        key = (_int(event.get("output_index")), _int(event.get("content_index")))
        if kind == "response.output_text.delta" and isinstance(event.get("delta"), str):
            shown = self._filter.feed(event["delta"])
            self._texts.setdefault(key, []).append(shown)
            return [{**event, "delta": shown}] if shown else []
        if kind == "response.output_text.done":
            tail = self._filter.flush()
            out: list[dict[str, Any]] = []
            if tail:
                self._texts.setdefault(key, []).append(tail)
                out.append({"type": "response.output_text.delta", "item_id": event.get("item_id"),
                            "output_index": key[0], "content_index": key[1], "delta": tail, "logprobs": [],
                            "sequence_number": 0})
            return [*out, {**event, "text": self._text(key)}]
        if kind == "response.content_part.done" and isinstance(event.get("part"), dict) \
                and event["part"].get("type") == "output_text":
            event["part"]["text"] = self._text(key)
        elif kind == "response.output_item.done" and isinstance(event.get("item"), dict):
            self._fill(event["item"], key[0])
        elif kind in ("response.completed", "response.incomplete") and isinstance(event.get("response"), dict):
            texts = {k: "".join(v) for k, v in self._texts.items()}
            _finish_response(event["response"], texts, self._filter)
            self.citations = event["response"]["citations"]
        return [event]

    def _text(self, key: tuple[int, int]) -> str:
        return "".join(self._texts.get(key, []))

    def _fill(self, item: dict[str, Any], output_index: int) -> None:
        content = item.get("content")
        for j, part in enumerate(content if isinstance(content, list) else []):
            if isinstance(part, dict) and part.get("type") == "output_text" and (output_index, j) in self._texts:
                part["text"] = self._text((output_index, j))


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
