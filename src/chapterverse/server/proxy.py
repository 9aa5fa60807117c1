"""OpenAI-compatible endpoints: ``/v1/chat/completions`` with transparent context injection, ``/v1/models``.

A client such as a voice pipeline points its chat-completions base URL here and changes nothing
else. Per request (``rag_mode=inject``): retrieve with the last user message (condensed with the earlier
turns when it leans on them: ``rewrite.py``, ``--rag_rewrite``); when a chunk clears
the threshold, inject one context block and forward; otherwise forward the request untouched.
Unknown request fields (``chat_template_kwargs``, ``stream_options``, ...) pass through as they
are; only ``messages`` (when injecting) and ``model`` (when ``--llm_model`` is set) change.
The client's own Authorization header is never forwarded: the upstream gets ``--llm_api_key``.
An upstream error is answered with a fixed message and a status (``_upstream_error``), never with the
upstream's body: a hosted endpoint's 401 may echo the key it was sent. A successful answer is relayed with every
configured secret masked (``relayed``, ``redaction.SecretMasker`` for streams): an upstream may echo the key in a
model list, in a reply's text or in an error event inside a 200 stream.

Retrieval reads at most ``--max_query_chars`` of the last user message (the message itself is forwarded
whole); when it read less, the answer says so in ``X-Chapterverse-Query-Truncated``.

Replies stream back as they arrive. With RAG on, the text goes through the tag filter (strip or
keep) and the verified citations ride out of band: a ``citations`` field on the chunk that carries
``finish_reason`` (and on a non-streamed completion). A retrieval failure is logged and the chat
goes on without context.

``rag_mode=tools`` answers with chapterverse's own tool loop (``llm.agent.answer_events``) on the
upstream model, and streams that answer in the same chat-completion format.
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import time
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from typing import Any

import httpx
from fastapi import APIRouter, Depends, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import JSONResponse, Response, StreamingResponse

from ..answering import AnswerResult
from ..citations import Evidence, ResolvedSpan, StreamingTagFilter
from ..errors import ChapterverseError, TagError
from ..library import Hit
from ..llm.agent import AgentSettings, AnswerDelta, AnswerDone, answer_events
from ..positions import Span
from ..redaction import SecretMasker, mask_secrets
from .errors import ApiError, error_body
from .injection import (
    ReplyFilter,
    content_text,
    context_block,
    header_language,
    hits_summary,
    inject_context,
    last_user_text,
)
from .limits import check_length
from .lone_surrogates import require_text_body
from .rewrite import carry_query, llm_query
from .state import ServerState, server_state
from .upstream import Upstream

__all__ = ["router", "SSERelay", "inject", "retrieval_query", "relayed", "relayed_json", "relayed_stream",
           "request_json"]

log = logging.getLogger(__name__)
router = APIRouter(tags=["openai"], dependencies=[Depends(require_text_body)])
_turns = itertools.count(1)
_SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
TRUNCATED_HEADER = "X-Chapterverse-Query-Truncated"
"""Present (the characters retrieval read) when the last user message was longer than --max_query_chars."""
_PASSED_STATUSES = frozenset({400, 404, 408, 413, 422, 429})
"""Upstream statuses about the request itself, passed on so the client can act (fix it, wait); any other
(401, 403: the server's own key; 5xx) is the server's problem, answered 502."""


def _not_finite(constant: str) -> Any:
    """``json.loads`` hook: NaN and Infinity are not JSON, and no upstream request may carry them."""
    raise ValueError(f"{constant} is not a JSON number")


class _NumberOutOfRange(ValueError):
    """A JSON number too large for a double."""


def _finite(number: str) -> float:
    """``json.loads`` hook: ``1e999`` is valid JSON, but as a double it is infinite, which no upstream request
    may carry (the request's JSON could not be written: a 500, before issue 28)."""
    value = float(number)
    if not math.isfinite(value):
        shown = number if len(number) <= 40 else f"{number[:37]}..."
        raise _NumberOutOfRange(f"the number {shown} is too large (beyond a double's range, about 1.8e308)")
    return value


async def request_json(request: Request) -> Any:
    """The request's body as JSON: 400 ``BAD_INPUT`` when it is not JSON (NaN and Infinity included) or is
    nested too deeply; 422 ``BAD_INPUT`` when it is JSON with a number beyond a double's range."""
    try:
        return json.loads(await request.body(), parse_constant=_not_finite, parse_float=_finite)
    except RecursionError as exc:
        raise ApiError(400, "BAD_INPUT", "the request body is nested too deeply") from exc
    except _NumberOutOfRange as exc:
        raise ApiError(422, "BAD_INPUT", str(exc)) from exc
    except ValueError as exc:
        raise ApiError(400, "BAD_INPUT", f"the request body is not JSON: {exc}") from exc


async def _json_body(request: Request) -> dict[str, Any]:
    body = await request_json(request)
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
        raise ApiError(400, "BAD_INPUT", "expected a chat completion request with a messages list")
    return body


NO_UPSTREAM = ("no upstream model: start the server with --llm_base_url (and --llm_model), or set them in the "
               "reader's settings")
"""What every proxy path (chat completions, responses, models) answers, 503, when no model is configured."""


def _upstream(state: ServerState) -> Upstream:
    upstream = state.upstream.current
    if not upstream.base_url:
        raise ApiError(503, "NO_UPSTREAM", NO_UPSTREAM)
    return upstream


def _headers(upstream: Upstream) -> dict[str, str]:
    headers = {"Content-Type": "application/json"}
    if upstream.api_key:
        headers["Authorization"] = f"Bearer {upstream.api_key}"
    return headers


def _upstream_failure(exc: httpx.HTTPError, upstream: Upstream) -> ApiError:
    if isinstance(exc, httpx.TimeoutException):
        return ApiError(504, "UPSTREAM_TIMEOUT", f"{upstream.shown_url} did not answer in time")
    return ApiError(502, "UPSTREAM_UNREACHABLE", f"cannot reach {upstream.shown_url}: {type(exc).__name__}")


def _upstream_error(status: int, upstream: Upstream) -> ApiError:
    """A fixed answer for an upstream error status; its body (which may echo the key) is dropped, not relayed."""
    log.warning("upstream %s answered HTTP %d", upstream.shown_url, status)
    return ApiError(status if status in _PASSED_STATUSES else 502, "UPSTREAM_ERROR",
                    f"the upstream model answered HTTP {status}; see the server's log")


def relayed(content: bytes, status: int, media_type: str) -> Response:
    """An upstream's answer as the client gets it: every configured secret masked (``redaction.mask_secrets``)."""
    return Response(mask_secrets(content), status_code=status, media_type=media_type)


def relayed_json(data: Any, status: int = 200) -> Response:
    return relayed(bytes(JSONResponse(data).body), status, "application/json")


def relayed_stream(pieces: AsyncGenerator[bytes, None]) -> StreamingResponse:
    """An SSE stream made of an upstream's answer, every configured secret masked as its lines go out."""

    async def masked() -> AsyncIterator[bytes]:
        masker = SecretMasker()
        try:
            async for piece in pieces:
                out = masker.feed(piece)
                if out:
                    yield out
            tail = masker.flush()
            if tail:
                yield tail
        finally:
            await pieces.aclose()

    return StreamingResponse(masked(), media_type="text/event-stream", headers=_SSE_HEADERS)


# ---------------------------------------------------------------------------------------------- models


@router.get("/v1/models", summary="The upstream's models (forwarded)")
async def models(request: Request) -> Response:
    state = server_state(request)
    upstream = state.upstream.current
    if not upstream.base_url:
        if upstream.model:
            return JSONResponse({"object": "list", "data": [{"id": upstream.model, "object": "model", "created": 0,
                                                             "owned_by": "chapterverse"}]})
        raise ApiError(503, "NO_UPSTREAM", NO_UPSTREAM)
    try:
        reply = await state.http.get(f"{upstream.base_url}/models", headers=_headers(upstream))
    except httpx.HTTPError as exc:
        raise _upstream_failure(exc, upstream) from exc
    if reply.status_code >= 400:
        raise _upstream_error(reply.status_code, upstream)
    return relayed(reply.content, reply.status_code, reply.headers.get("content-type", "application/json"))


# ------------------------------------------------------------------------------------ chat completions


@router.post("/v1/chat/completions", summary="OpenAI-compatible chat, with knowledge-base context injected")
async def chat_completions(request: Request) -> Response:
    state = server_state(request)
    body = await _json_body(request)
    upstream = _upstream(state)
    turn = next(_turns)
    if state.kb is not None and state.settings.rag_mode == "tools":
        return await _tools_turn(state, body, upstream, turn)
    hits: list[Hit] = []
    found = last_user_text(body["messages"]) if state.kb is not None else None
    query = found[1][:state.settings.max_query_chars] if found else ""
    if found is not None:
        retrieval = await retrieval_query(state, body["messages"], body.get("model"), upstream, found[0], query)
        messages, hits = await inject(state, body["messages"], found[0], retrieval, turn)
        if hits:
            body = {**body, "messages": messages}
    if upstream.model:
        body["model"] = upstream.model
    reply_filter = ReplyFilter(hits, state.settings.rag_tags, _resolver(state)) if state.kb is not None else None
    if body.get("stream"):
        response = await _relay_stream(state, body, upstream, reply_filter, turn, hits)
    else:
        response = await _relay_once(state, body, upstream, reply_filter, turn, hits)
    if found is not None and len(query) < len(found[1]):
        response.headers[TRUNCATED_HEADER] = str(len(query))
    return response


async def retrieval_query(state: ServerState, messages: list[Any], asked_model: object, upstream: Upstream,
                          index: int, query: str) -> str:
    """What retrieval reads for the user turn at ``index`` of ``messages``: ``query`` condensed with the earlier
    turns as ``--rag_rewrite`` says (``rewrite.py``), at most ``--max_query_chars`` long. ``asked_model`` is the
    request's model, used by ``llm`` when no ``--llm_model`` replaces it."""
    mode = state.settings.rag_rewrite
    if mode == "off":
        return query
    if mode in ("llm", "hyde"):
        model = upstream.model or (str(asked_model) if asked_model else None)
        rewritten = await llm_query(state.http, f"{upstream.base_url}/chat/completions", _headers(upstream), model,
                                    messages, index, query, state.settings.rag_rewrite_timeout_s,
                                    hypothetical=mode == "hyde")
        if rewritten:
            return rewritten[:state.settings.max_query_chars]
    return carry_query(messages, index, query)[:state.settings.max_query_chars]


async def inject(state: ServerState, messages: list[Any], index: int, query: str, turn: int, *,
                 part_type: str = "text") -> tuple[list[Any], list[Hit]]:
    """``messages`` with the context retrieved for ``query`` added to message ``index``, and the hits; the
    messages as they were (and no hits) when nothing clears the threshold or retrieval fails."""
    assert state.kb is not None
    settings = state.settings
    try:
        hits = await run_in_threadpool(state.kb.search, query, k=settings.rag_top_k, threshold=settings.rag_threshold)
    except Exception as exc:  # retrieval must never stop the conversation
        log.warning("RAG turn %d: retrieval failed, forwarding without context: %s: %s", turn, type(exc).__name__, exc)
        return messages, []
    if not hits:
        log.info("RAG turn %d: nothing above threshold %.2f for %r — forwarded untouched", turn,
                 settings.rag_threshold, _short(query))
        return messages, []
    block = context_block(hits, header_language(settings.rag_language, query))
    injected = inject_context(messages, block, settings.rag_inject_as, index, part_type=part_type)
    log.info("RAG turn %d: injected %d chunks as %s for %r — %s", turn, len(hits), settings.rag_inject_as,
             _short(query), hits_summary(hits))
    log.info("RAG turn %d: injected context:\n%s", turn, block)
    return injected, hits


def _short(text: str, limit: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _resolver(state: ServerState) -> Any:
    assert state.kb is not None
    library = state.kb.library

    def resolve(span: Span) -> ResolvedSpan | None:
        try:
            r = library.resolve(span)
        except (TagError, ChapterverseError):
            return None
        return ResolvedSpan(r.text, r.doc_id, r.doc_title, r.toc_path, r.source)

    return resolve


def _log_citations(turn: int, reply_filter: ReplyFilter | None, citations: list[dict[str, Any]]) -> None:
    if reply_filter is None:
        return
    if citations:
        log.info("RAG turn %d: reply cites %s", turn,
                 "; ".join(f"{c['source']}#c{c['chunk_index']} [{c['tag']}]" for c in citations))
    if reply_filter.dropped:
        log.info("RAG turn %d: removed %d unverified tag(s): %s", turn, len(reply_filter.dropped),
                 ", ".join(f"{d['tag']} ({d['reason']})" for d in reply_filter.dropped))


async def _relay_once(state: ServerState, body: dict[str, Any], upstream: Upstream,
                      reply_filter: ReplyFilter | None, turn: int, hits: list[Hit]) -> Response:
    try:
        reply = await state.http.post(f"{upstream.base_url}/chat/completions", json=body, headers=_headers(upstream))
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
    for position, choice in enumerate(data.get("choices") or []):
        message = choice.get("message") if isinstance(choice, dict) else None
        if isinstance(message, dict) and isinstance(message.get("content"), str):
            own = reply_filter if position == 0 else ReplyFilter(hits, state.settings.rag_tags, _resolver(state))
            message["content"] = own.whole(message["content"])
    citations = reply_filter.citations()
    data["citations"] = citations
    _log_citations(turn, reply_filter, citations)
    return relayed_json(data, reply.status_code)


async def _relay_stream(state: ServerState, body: dict[str, Any], upstream: Upstream,
                        reply_filter: ReplyFilter | None, turn: int, hits: list[Hit]) -> Response:
    request = state.http.build_request("POST", f"{upstream.base_url}/chat/completions", json=body,
                                       headers=_headers(upstream))
    try:
        reply = await state.http.send(request, stream=True)
    except httpx.HTTPError as exc:
        raise _upstream_failure(exc, upstream) from exc
    if reply.status_code >= 400:
        await reply.aclose()
        raise _upstream_error(reply.status_code, upstream)
    relay = SSERelay(reply_filter) if reply_filter is not None else None

    async def events() -> AsyncGenerator[bytes, None]:
        try:
            if relay is None:
                async for raw in reply.aiter_raw():
                    yield raw
                return
            async for line in reply.aiter_lines():
                for out in relay.line(line):
                    yield out.encode()
            for out in relay.end():
                yield out.encode()
            _log_citations(turn, reply_filter, relay.citations)
        except httpx.HTTPError as exc:
            log.warning("RAG turn %d: upstream stream broke: %s", turn, exc)
            error = error_body("UPSTREAM_INTERRUPTED", f"the upstream stream broke: {type(exc).__name__}",
                               openai=True)
            yield f"data: {json.dumps(error)}\n\n".encode()
        finally:
            await reply.aclose()

    return relayed_stream(events())


class SSERelay:
    """Rewrites an upstream chat-completion SSE stream line by line: filtered text, citations at the end."""

    def __init__(self, reply_filter: ReplyFilter) -> None:
        self._filter = reply_filter
        self._finished = False
        self.citations: list[dict[str, Any]] = []

    def line(self, line: str) -> list[str]:
        if not line.strip():
            return []
        if not line.startswith("data:"):
            return [f"{line}\n\n"] if line.startswith(":") else [f"{line}\n"]
        payload = line[5:].strip()
        if payload == "[DONE]":
            return [*self.end(), "data: [DONE]\n\n"]
        try:
            chunk = json.loads(payload)
        except ValueError:
            return [f"{line}\n\n"]
        if not isinstance(chunk, dict):
            return [f"{line}\n\n"]
        return self._chunk(chunk)

    def _chunk(self, chunk: dict[str, Any]) -> list[str]:
        choices = chunk.get("choices") or []
        first = next((c for c in choices if isinstance(c, dict) and c.get("index", 0) == 0), None)
        if first is None:
            return [_event(chunk)]
        given = first.get("delta")
        delta: dict[str, Any] = given if isinstance(given, dict) else {}
        raw = delta.get("content")
        shown = self._filter.feed(raw) if isinstance(raw, str) else ""
        if first.get("finish_reason") is not None and not self._finished:
            shown += self._filter.flush()
            self._finish(chunk)
        if isinstance(raw, str):
            delta["content"] = shown
            only_text = set(delta) <= {"content"} and first.get("finish_reason") is None
            if not shown and raw and only_text and len(choices) == 1 and "citations" not in chunk:
                return []  # all of it is held back (part of a tag) or dropped
        elif shown:
            delta["content"] = shown
            first["delta"] = delta
        return [_event(chunk)]

    def _finish(self, chunk: dict[str, Any]) -> None:
        self._finished = True
        self.citations = self._filter.citations()
        chunk["citations"] = self.citations

    def end(self) -> list[str]:
        """The stream ended: what is still held back, and the citations, if no chunk carried them yet."""
        if self._finished:
            return []
        tail = self._filter.flush()
        chunk: dict[str, Any] = {"id": "chatcmpl-chapterverse", "object": "chat.completion.chunk", "created": 0,
                                 "model": "", "choices": [{"index": 0, "delta": {"content": tail} if tail else {},
                                                           "finish_reason": None}]}
        self._finish(chunk)
        return [_event(chunk)]


def _event(chunk: dict[str, Any]) -> str:
    return f"data: {json.dumps(chunk, ensure_ascii=False)}\n\n"


# ------------------------------------------------------------------------------------------ tools mode


async def _tools_turn(state: ServerState, body: dict[str, Any], upstream: Upstream, turn: int) -> Response:
    """Answer with the tool loop on the upstream model, shaped as a chat completion."""
    assert state.kb is not None
    found = last_user_text(body["messages"])
    if found is None:
        raise ApiError(400, "BAD_INPUT", "no user message to answer")
    provider = upstream.provider(model=str(body.get("model") or "") or None)
    if provider is None:
        raise ApiError(503, "NO_UPSTREAM", "rag_mode tools needs an upstream model (--llm_model)")
    index, question = found
    check_length("the question", question, state.settings.max_question_chars, "--max_question_chars")
    history = [{"role": m["role"], "content": content_text(m.get("content"))} for m in body["messages"][:index]
               if isinstance(m, dict) and m.get("role") in ("user", "assistant") and content_text(m.get("content"))]
    strip = state.settings.rag_tags == "strip"
    completion_id = f"chatcmpl-cv-{turn}"
    created = int(time.time())
    library = state.kb.library
    log.info("RAG turn %d: answering %r with the tool loop on %s", turn, _short(question), provider.model)

    def events() -> Iterator[tuple[str, Any]]:
        scanner = StreamingTagFilter(Evidence(resolve=lambda _: None), mode="strip") if strip else None
        for event in answer_events(library, question, provider=provider, history=history,
                                   settings=AgentSettings(auto_summarize=False)):
            if isinstance(event, AnswerDelta):
                text = scanner.feed(event.text) if scanner else event.text
                if text:
                    yield "text", text
            elif isinstance(event, AnswerDone):
                tail = scanner.flush() if scanner else ""
                if tail:
                    yield "text", tail
                yield "done", event.result

    def citations(result: AnswerResult) -> list[dict[str, Any]]:
        cited = [c.to_json() for c in result.citations]
        if cited:
            log.info("RAG turn %d: reply cites %s", turn, "; ".join(f"{c['source']} [{c['tag']}]" for c in cited))
        return cited

    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> str:
        return _event({"id": completion_id, "object": "chat.completion.chunk", "created": created,
                       "model": provider.model, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
                       **extra})

    if body.get("stream"):
        def stream() -> Iterator[str]:
            yield chunk({"role": "assistant", "content": ""})
            try:
                for kind, value in events():
                    if kind == "text":
                        yield chunk({"content": value})
                    else:
                        yield chunk({}, "stop", citations=citations(value))
            except ChapterverseError as exc:
                log.warning("RAG turn %d: tool loop failed: %s", turn, exc)
                yield f"data: {json.dumps(error_body('ANSWER_FAILED', str(exc), openai=True))}\n\n"
            yield "data: [DONE]\n\n"

        masked = (mask_secrets(event.encode()) for event in stream())  # each event is whole: nothing to hold back
        return StreamingResponse(masked, media_type="text/event-stream", headers=_SSE_HEADERS)

    def collect() -> dict[str, Any]:
        parts, result = [], None
        for kind, value in events():
            if kind == "text":
                parts.append(value)
            else:
                result = value
        usage = result.usage if result is not None else {}
        return {"id": completion_id, "object": "chat.completion", "created": created, "model": provider.model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "".join(parts)},
                             "finish_reason": "stop"}],
                "usage": {"prompt_tokens": usage.get("prompt_tokens", 0),
                          "completion_tokens": usage.get("completion_tokens", 0),
                          "total_tokens": usage.get("prompt_tokens", 0) + usage.get("completion_tokens", 0)},
                "citations": citations(result) if result is not None else []}

    return relayed_json(await run_in_threadpool(collect))
