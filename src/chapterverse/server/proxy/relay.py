"""Talking to the upstream model for the OpenAI-compatible routes: the request's JSON, the call, its errors, the
SSE loop, and the cleaning and secret masking every relayed byte goes through.

The client's own Authorization header is never forwarded: the upstream gets ``--llm_api_key``, and ``--llm_model``
(when set) replaces the request's ``model``. An upstream error is answered with a fixed message and a status
(``_upstream_error``; a 429 keeps its wait when that is a number), never with the upstream's body: a hosted
endpoint's 401 may echo the key it was sent. A successful answer is relayed with every configured secret masked
(:func:`_relayed`; streams event by event, and a model's text across its deltas, by ``streammask.StreamMasker``):
an upstream may echo the key in a model list, in a reply's text (cut across deltas, as a model streams it) or in
an error event inside a 200 stream.

Every relayed reply of the model's is cleaned the same way (``scaffolding.TextCleaner``: chat-template tokens and
chapterverse's own headers out): a stream's texts across their deltas by the same ``StreamMasker``, a whole reply's texts whole
(:func:`_relayed_reply`), after the knowledge base's rewriter, so what it cleans is what the client gets.

What the knowledge base changes in a reply is the caller's :class:`ReplyRewriter` (``replies.py``); without one
the reply goes out as it came, masked.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import re
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import httpx
from fastapi import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from ...llm.limits import Deadline
from ...redaction import mask_secrets, scrub
from ..errors import ApiError, error_body, unparsable_body
from ..state import ServerState
from ..upstream import Upstream
from .streammask import StreamMasker, clean_completion, clean_response

__all__ = ["NO_UPSTREAM", "Endpoint", "CHAT_COMPLETIONS", "RESPONSES", "ReplyRewriter", "request_json",
           "require_upstream", "upstream_headers", "relay", "relay_get", "relayed_json", "relayed_events"]

log = logging.getLogger(__name__)
_SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
_PASSED_STATUSES = frozenset({400, 404, 408, 413, 422, 429})
"""Upstream statuses about the request itself, passed on so the client can act (fix it, wait); any other
(401, 403: the server's own key; 5xx) is the server's problem, answered 502."""

_WAIT_HEADERS = ("retry-after", "retry-after-ms")
_SECONDS = re.compile(r"\d{1,9}(?:\.\d{1,6})?")
"""A wait as a plain number: nothing else of an upstream's error reaches the client (an HTTP date is dropped)."""

NO_UPSTREAM = ("no upstream model: start the server with --llm_base_url (and --llm_model), or set them in the "
               "reader's settings")
"""What every proxy path (chat completions, responses, models) answers, 503, when no model is configured."""


@dataclass(frozen=True, slots=True)
class Endpoint:
    """An upstream API the proxy relays: its path under the base URL, and how its stream says it broke."""

    path: str
    broken: Callable[[dict[str, Any]], str]
    """The SSE event, in this API's own format, that tells the client the upstream stream broke."""
    cut: Callable[[str], str]
    """The SSE events, in this API's own format, that end a stream cut at the deadline, with the notice given."""


def _chat_cut(notice: str) -> str:
    """The last chunk of a chat completion stream cut at the deadline: ``finish_reason`` length, the notice."""
    chunk = {"id": "chatcmpl-chapterverse", "object": "chat.completion.chunk", "created": 0, "model": "",
             "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}], "notice": notice}
    return f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n"


def _responses_cut(notice: str) -> str:
    """The ``response.incomplete`` event that ends a Responses stream cut at the deadline."""
    event = {"type": "response.incomplete", "response": {
        "object": "response", "status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"},
        "notice": notice}}
    return f"event: response.incomplete\ndata: {json.dumps(event)}\n\n"


CHAT_COMPLETIONS = Endpoint("/chat/completions", lambda error: f"data: {json.dumps(error)}\n\n", _chat_cut)
RESPONSES = Endpoint("/responses",
                     lambda error: f"event: error\ndata: {json.dumps({'type': 'error', **error})}\n\n",
                     _responses_cut)


class ReplyRewriter(Protocol):
    """What the knowledge base does to one reply (``replies.py``): a whole reply's JSON, or its stream line by
    line."""

    def whole(self, data: Any) -> bool:
        """Rewrite a whole reply in place; False when it is not one (it is relayed as it came)."""

    def line(self, line: str) -> list[str]:
        """One line of the upstream's stream (no line break); the SSE text to send for it."""

    def close(self) -> list[str]:
        """The stream ended: the SSE text still to send."""

    def cut(self, notice: str) -> list[str]:
        """The stream was cut at the deadline: the SSE text that ends it, with ``notice`` for the client."""


# ------------------------------------------------------------------------------------------ the request


def _not_finite(constant: str) -> Any:
    """``json.loads`` hook: NaN and Infinity are not JSON, and no upstream request may carry them."""
    raise ValueError(f"{constant} is not a JSON number")


class _NumberOutOfRange(ValueError):
    """A JSON number too large for a double."""


def _finite(number: str) -> float:
    """``json.loads`` hook: ``1e999`` is valid JSON, but as a double it is infinite, which no upstream request
    may carry (the request's JSON could not be written: a 500)."""
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
    except _NumberOutOfRange as exc:
        raise ApiError(422, "BAD_INPUT", str(exc)) from exc
    except (ValueError, RecursionError) as exc:
        raise unparsable_body(exc) from exc


# ------------------------------------------------------------------------------------- the call, its errors


def require_upstream(state: ServerState) -> Upstream:
    """The upstream as it is configured now; 503 ``NO_UPSTREAM`` when there is none."""
    upstream = state.upstream.current
    if not upstream.base_url:
        raise ApiError(503, "NO_UPSTREAM", NO_UPSTREAM)
    return upstream


def upstream_headers(upstream: Upstream) -> dict[str, str]:
    """The headers of every request to the upstream: the server's key, never the client's."""
    headers = {"Content-Type": "application/json"}
    if upstream.api_key:
        headers["Authorization"] = f"Bearer {upstream.api_key}"
    return headers


def _upstream_failure(exc: httpx.HTTPError, upstream: Upstream) -> ApiError:
    if isinstance(exc, httpx.TimeoutException):
        return ApiError(504, "UPSTREAM_TIMEOUT", f"{upstream.shown_url} did not answer in time")
    return ApiError(502, "UPSTREAM_UNREACHABLE", f"cannot reach {upstream.shown_url}: {type(exc).__name__}")


def _upstream_error(reply: httpx.Response, upstream: Upstream, reason: str) -> ApiError:
    """The answer to an upstream error status. Its reason (the body's error message, every secret masked) is
    logged, and relayed for a status about the request itself (400, 413, 422...: a prompt beyond the model's
    window, say), which the client can act on; for any other (401, 403: the server's own key; 5xx) the client
    gets a fixed message. A 429 keeps its wait (``Retry-After``, ``retry-after-ms``), when it is a number: the
    client can only wait as long as it is told, and OpenAI's SDKs read these to time their retry."""
    status = reply.status_code
    log.warning("upstream %s answered HTTP %d: %s", upstream.shown_url, status, reason or "(no reason given)")
    waits: dict[str, str] = {}
    for name in _WAIT_HEADERS if status == 429 else ():
        value = reply.headers.get(name, "").strip()
        if _SECONDS.fullmatch(value):
            waits[name] = value
    told = f": {reason}" if reason and status in _PASSED_STATUSES and status != 429 else "; see the server's log"
    return ApiError(status if status in _PASSED_STATUSES else 502, "UPSTREAM_ERROR",
                    f"the upstream model answered HTTP {status}{told}", headers=waits)


_REASON_BYTES = 8192
"""The most of an error body read for its reason."""


async def _error_reason(reply: httpx.Response) -> str:
    """The reason an upstream's error body gives (``error.message``, ``message``, ``detail`` or its text), on one
    line, every secret masked (``redaction.scrub``), at most 300 characters."""
    body = b""
    try:
        async for piece in reply.aiter_bytes():
            body += piece
            if len(body) >= _REASON_BYTES:
                break
    except httpx.HTTPError:
        pass
    text = body[:_REASON_BYTES].decode("utf-8", "replace")
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict):
        error = data.get("error")
        found: dict[str, Any] = error if isinstance(error, dict) else data
        message = found.get("message") or found.get("detail") or error
        text = message if isinstance(message, str) else text
    line = " ".join(scrub(text).split())
    return line if len(line) <= 300 else line[:299] + "…"


async def _send(state: ServerState, upstream: Upstream, request: httpx.Request, *, stream: bool,
                deadline: Deadline | None = None) -> httpx.Response:
    """The upstream's answer to ``request``, its failures and error statuses mapped to our own errors; 504 when
    ``deadline`` passes first (the request is then closed)."""
    try:
        pending = state.http.send(request, stream=stream)
        reply = await (asyncio.wait_for(pending, deadline.remaining) if deadline is not None else pending)
    except TimeoutError as exc:
        assert deadline is not None
        log.warning("upstream %s: no answer within %s; request closed", upstream.shown_url, deadline.describe())
        raise ApiError(504, "UPSTREAM_TIMEOUT", f"the upstream model did not answer within {deadline.describe()}; "
                                                "the request was stopped") from exc
    except httpx.HTTPError as exc:
        raise _upstream_failure(exc, upstream) from exc
    if reply.status_code >= 400:
        reason = await _error_reason(reply)
        await reply.aclose()
        raise _upstream_error(reply, upstream, reason)
    return reply


async def relay_get(state: ServerState, upstream: Upstream, path: str) -> Response:
    """The upstream's answer to a GET of ``path`` (``/models``), relayed masked."""
    request = state.http.build_request("GET", f"{upstream.base_url}{path}", headers=upstream_headers(upstream))
    reply = await _send(state, upstream, request, stream=False)
    return _relayed(reply.content, reply.status_code, reply.headers.get("content-type", "application/json"))


async def relay(state: ServerState, upstream: Upstream, endpoint: Endpoint, body: dict[str, Any],
                rewriter: ReplyRewriter | None, turn: int, deadline: Deadline) -> Response:
    """Send ``body`` to the upstream's ``endpoint`` and answer with its reply, streamed when the request asks for
    a stream, rewritten by ``rewriter`` when there is one. At ``deadline`` the upstream request is closed: a reply
    not begun is a 504, a stream ends with the endpoint's cut events and a notice."""
    if upstream.model:
        body["model"] = upstream.model
    request = state.http.build_request("POST", f"{upstream.base_url}{endpoint.path}", json=body,
                                       headers=upstream_headers(upstream))
    streamed = bool(body.get("stream"))
    reply = await _send(state, upstream, request, stream=streamed, deadline=deadline)
    if streamed:
        return _relayed_stream(_events(reply, rewriter, endpoint, turn, deadline))
    return _relayed_reply(reply, rewriter)


def _relayed_reply(reply: httpx.Response, rewriter: ReplyRewriter | None) -> Response:
    """A whole reply: rewritten when it is JSON the rewriter knows, then cleaned; else as it came."""
    media_type = reply.headers.get("content-type", "application/json")
    try:
        data = reply.json()
    except ValueError:
        return _relayed(reply.content, reply.status_code, media_type)
    rewritten = rewriter is not None and rewriter.whole(data)
    if not (isinstance(data, dict) and _cleaned(data)) and not rewritten:
        return _relayed(reply.content, reply.status_code, media_type)
    return relayed_json(data, reply.status_code)


def _cleaned(data: dict[str, Any]) -> bool:
    """Clean a whole reply's texts in place, a chat completion's or a response object's; whether one changed."""
    if isinstance(data.get("choices"), list):
        return clean_completion(data)
    return clean_response(data)


async def _events(reply: httpx.Response, rewriter: ReplyRewriter | None, endpoint: Endpoint,
                  turn: int, deadline: Deadline) -> AsyncGenerator[bytes, None]:
    """The SSE loop: the upstream's stream, rewritten line by line (or, without a rewriter, its bytes event by
    whole event as they come); a stream that breaks ends with the endpoint's error event, one that reaches
    ``deadline`` with its cut events (the upstream connection is then closed, and the model stops writing)."""
    pieces: AsyncIterator[Any] = reply.aiter_lines() if rewriter is not None else reply.aiter_raw()
    pending = b""
    try:
        while True:
            try:
                piece = await asyncio.wait_for(anext(pieces), deadline.remaining)
            except StopAsyncIteration:
                break
            except TimeoutError:
                notice = f"The answer was cut at {deadline.describe()}; the upstream request was stopped."
                log.warning("RAG turn %d: stream cut at %s; upstream request closed", turn, deadline.describe())
                for out in rewriter.cut(notice) if rewriter is not None else [endpoint.cut(notice)]:
                    yield out.encode()
                return
            if rewriter is not None:
                for out in rewriter.line(piece):
                    yield out.encode()
                continue
            ready, pending = _whole_events(pending + piece)
            if ready:
                yield ready
        if rewriter is not None:
            for out in rewriter.close():
                yield out.encode()
        elif pending:
            yield pending
    except httpx.HTTPError as exc:
        log.warning("RAG turn %d: upstream stream broke: %s", turn, exc)
        error = error_body("UPSTREAM_INTERRUPTED", f"the upstream stream broke: {type(exc).__name__}", openai=True)
        yield endpoint.broken(error).encode()
    finally:
        await reply.aclose()


def _whole_events(data: bytes) -> tuple[bytes, bytes]:
    """``data`` split after its last whole SSE event (a blank line ends one): what may go out, what waits. A
    stream cut at the deadline then ends between events, never inside one."""
    end = max((data.rfind(mark) + len(mark) for mark in (b"\n\n", b"\r\n\r\n") if mark in data), default=0)
    return data[:end], data[end:]


# ---------------------------------------------------------------------------------------- secret masking


def _relayed(content: bytes, status: int, media_type: str) -> Response:
    """An upstream's answer as the client gets it: every configured secret masked (``redaction.mask_secrets``)."""
    return Response(mask_secrets(content), status_code=status, media_type=media_type)


def relayed_json(data: Any, status: int = 200, *, clean: bool = False) -> Response:
    """``data`` as JSON, masked as :func:`_relayed` masks: a rewritten reply still carries what the upstream
    echoed. ``clean``: the reply's texts are cleaned first (a reply made here of the model's text)."""
    if clean and isinstance(data, dict):
        _cleaned(data)
    return _relayed(bytes(JSONResponse(data).body), status, "application/json")


def _relayed_stream(pieces: AsyncGenerator[bytes, None]) -> StreamingResponse:
    """An SSE stream made of an upstream's answer, the model's texts cleaned and every configured secret masked as
    its events go out (a key or a template token cut across the model's deltas included)."""

    async def masked() -> AsyncIterator[bytes]:
        masker = StreamMasker()
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


def relayed_events(events: Iterator[str]) -> StreamingResponse:
    """An SSE stream of whole events made here from the model's answer (``--rag_mode tools``), cleaned and masked
    as :func:`_relayed_stream` does (the answer's deltas are the model's); a blocking iterator, which Starlette
    runs in a thread."""

    def masked() -> Iterator[bytes]:
        masker = StreamMasker()
        for event in events:
            out = masker.feed(event.encode())
            if out:
                yield out
        tail = masker.flush()
        if tail:
            yield tail

    return StreamingResponse(masked(), media_type="text/event-stream", headers=_SSE_HEADERS)
