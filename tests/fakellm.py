"""A deterministic OpenAI-compatible server for tests: real sockets, real HTTP/1.1, real SSE.

    with fake_llm(Reply.text("See [f12-34-56].")) as fake:
        provider = ChatProvider(ProviderConfig(base_url=fake.base_url, model="m"))
        ...
        assert fake.chat_requests[0].json["model"] == "m"

Chat replies come from a script (a queue of ``Reply`` objects, consumed one per chat request)
or from ``handler(request_json) -> Reply``. The same Reply streams when the request has
``"stream": true`` and is one ``chat.completion`` JSON otherwise. Streamed text is cut into small
pieces (mid-word, mid-tag); tool-call arguments likewise, with id and name only in a call's first
fragment, addressed by index, as OpenAI does.

Also served: ``POST /v1/responses`` (the Responses API: the same replies as one response object or as its typed
stream events), ``GET /v1/models`` and ``POST /v1/embeddings`` (hash-seeded unit vectors, float or
base64, so the official SDK's default base64 encoding works).

A client that hangs up early is recorded: ``fake.hangups`` holds the time (``time.monotonic()``) at which a
client closed the connection of a streamed reply or a ``hang`` before its end (a deadline that stops the upstream
request must close it).

An upstream that echoes the key it was sent: wherever ``AUTHORIZATION`` appears in what the fake writes (a
reply's text, a JSON or SSE body, a model's name), the request's ``Authorization`` header is written instead.

This is a helper module, not a test file; tests import it (``from fakellm import FakeLLM, Reply``)
and make their own fixtures.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import select
import socket
import struct
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal, Self

__all__ = ["AUTHORIZATION", "Call", "FakeLLM", "RecordedRequest", "Reply", "fake_embedding", "fake_llm"]

AUTHORIZATION = "<<authorization>>"
"""Written back as the request's Authorization header (``Bearer <key>``): an upstream that echoes its key."""

ReplyKind = Literal["text", "error", "hang", "drop", "sse", "json"]


@dataclass(frozen=True)
class Call:
    """One tool call the fake model makes. A str ``arguments`` is sent verbatim (malformed JSON too)."""

    name: str
    arguments: Mapping[str, Any] | str = field(default_factory=dict)
    id: str | None = None

    def arguments_text(self) -> str:
        return self.arguments if isinstance(self.arguments, str) else json.dumps(self.arguments)


@dataclass(frozen=True)
class Reply:
    """What the fake answers to one chat request. Build with the classmethods."""

    kind: ReplyKind
    content: str = ""
    calls: tuple[Call, ...] = ()
    chunks: tuple[str, ...] | None = None
    chunk_size: int = 5
    chunk_delay_s: float = 0.0
    finish_reason: str | None = None
    usage: tuple[int, int] | None = None
    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)
    body: Any = None
    seconds: float = 0.0
    after_chunks: int = 0
    events: tuple[Any, ...] = ()
    done: bool = True

    @classmethod
    def text(cls, text: str, *, chunks: Sequence[str] | None = None, chunk_size: int = 5,
             chunk_delay_s: float = 0.0, finish_reason: str = "stop",
             usage: tuple[int, int] | None = None) -> Reply:
        """An answer. Streamed as ``chunks`` if given (they must join to ``text``), else in
        ``chunk_size``-character pieces. ``usage`` = (prompt, completion) tokens, else counted."""
        if chunks is not None and "".join(chunks) != text:
            raise ValueError("chunks must join to text")
        return cls("text", content=text, chunks=tuple(chunks) if chunks is not None else None,
                   chunk_size=chunk_size, chunk_delay_s=chunk_delay_s, finish_reason=finish_reason, usage=usage)

    @classmethod
    def tool_call(cls, name: str, arguments: Mapping[str, Any] | str | None = None, *, id: str | None = None,
                  text: str = "", chunk_size: int = 7) -> Reply:
        """One tool call; ``arguments`` as a dict, or a raw (possibly malformed) JSON string."""
        return cls.tool_calls(Call(name, {} if arguments is None else arguments, id), text=text, chunk_size=chunk_size)

    @classmethod
    def tool_calls(cls, *calls: Call, text: str = "", chunk_size: int = 7,
                   finish_reason: str = "tool_calls", usage: tuple[int, int] | None = None) -> Reply:
        """Several (parallel) tool calls, optionally after some text; streamed one call after another."""
        return cls("text", content=text, calls=tuple(calls), chunk_size=chunk_size, finish_reason=finish_reason,
                   usage=usage)

    @classmethod
    def error(cls, status: int, message: str = "fake error", *, retry_after: float | str | None = None,
              headers: Mapping[str, str] | None = None, body: Any = None) -> Reply:
        """An HTTP error. ``body`` (dict or str) replaces the default OpenAI-style error object."""
        all_headers = dict(headers or {})
        if retry_after is not None:
            all_headers["Retry-After"] = retry_after if isinstance(retry_after, str) else f"{retry_after:g}"
        if body is None:
            body = {"error": {"message": message, "type": "fake_error", "param": None, "code": str(status)}}
        return cls("error", status=status, headers=all_headers, body=body)

    @classmethod
    def hang(cls, seconds: float = 30.0, *, text: str = "", after_chunks: int = 0, chunk_size: int = 5) -> Reply:
        """Say nothing for ``seconds`` (ended early when the fake stops), then close the connection.

        With ``after_chunks`` > 0 and a streaming request, first send that many chunks of ``text``.
        """
        return cls("hang", seconds=seconds, content=text, after_chunks=after_chunks, chunk_size=chunk_size)

    @classmethod
    def drop(cls, text: str = "The answer is cut", *, after_chunks: int = 2, chunk_size: int = 5) -> Reply:
        """Stream ``after_chunks`` chunks of ``text``, then close the socket mid-body (no final chunk).

        On ``/v1/responses``: the Responses API's opening events and ``after_chunks`` text deltas, then the same.
        For a non-streaming request: close without answering at all.
        """
        return cls("drop", content=text, after_chunks=after_chunks, chunk_size=chunk_size)

    @classmethod
    def sse(cls, events: Sequence[Mapping[str, Any] | str], *, done: bool = True) -> Reply:
        """Raw SSE for quirky-server tests: dicts are sent as ``data: <json>``, strings as ``data: <str>``."""
        return cls("sse", events=tuple(events), done=done)

    @classmethod
    def json(cls, body: Any, *, status: int = 200, headers: Mapping[str, str] | None = None) -> Reply:
        """A raw JSON response, whatever the request asked for."""
        return cls("json", body=body, status=status, headers=dict(headers or {}))


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    """Lower-cased names."""
    json: Any
    at: float
    """time.monotonic() when the request arrived, for checking retry waits."""


Handler = Callable[[Any], Reply]


class FakeLLM:
    """The server. ``start()``/``stop()`` or use as a context manager (or ``fake_llm(...)``)."""

    def __init__(self, *script: Reply, handler: Handler | None = None, models: Sequence[str] = ("fake-model",),
                 embedding_dim: int = 16, api_key: str | None = None, reject_stream_options: bool = False,
                 default: Reply | None = None) -> None:
        self._script: deque[Reply] = deque(script)
        self.handler = handler
        self.models = list(models)
        self.embedding_dim = embedding_dim
        self.api_key = api_key
        """When set, requests without ``Authorization: Bearer <api_key>`` get 401."""
        self.reject_stream_options = reject_stream_options
        """When set, chat requests with ``stream_options`` get 400, like some older servers."""
        self.default = default
        self.embedding_script: deque[Reply] = deque()
        """Errors/hangs for /v1/embeddings, consumed first; when empty, vectors are served."""
        self.requests: list[RecordedRequest] = []
        self.hangups: list[float] = []
        """When clients closed a streamed reply or a ``hang`` before its end (``time.monotonic()``)."""
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle

    def start(self) -> Self:
        server = _Server(("127.0.0.1", 0), _RequestHandler)
        server.fake = self
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="fakellm", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._server is not None, "FakeLLM not started"
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    # -- script

    def push(self, *replies: Reply) -> None:
        with self._lock:
            self._script.extend(replies)

    @property
    def chat_requests(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.path.endswith("/chat/completions")]

    @property
    def response_requests(self) -> list[RecordedRequest]:
        """Requests to ``/v1/responses`` (answered from the same script or handler as chat requests)."""
        return [r for r in self.requests if r.path.split("?")[0].rstrip("/").endswith("/responses")]

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self.requests.append(request)

    def _next_chat_reply(self, body: Any) -> Reply:
        with self._lock:
            if self._script:
                return self._script.popleft()
        if self.handler is not None:
            return self.handler(body)
        if self.default is not None:
            return self.default
        return Reply.error(418, "fakellm: the script has no reply left for this request")

    def _next_embedding_reply(self) -> Reply | None:
        with self._lock:
            return self.embedding_script.popleft() if self.embedding_script else None


@contextmanager
def fake_llm(*script: Reply, **options: Any) -> Iterator[FakeLLM]:
    """Start a FakeLLM for the duration of a ``with`` block (or a yield-fixture)."""
    fake = FakeLLM(*script, **options).start()
    try:
        yield fake
    finally:
        fake.stop()


def fake_embedding(text: str, dim: int, model: str = "") -> list[float]:
    """A unit vector seeded by sha256(model, text): same input, same vector, on every machine."""
    out: list[float] = []
    counter = 0
    while len(out) < dim:
        digest = hashlib.sha256(f"{model}\0{text}\0{counter}".encode()).digest()
        out.extend((b - 127.5) / 127.5 for b in digest)
        counter += 1
    vector = out[:dim]
    norm = math.sqrt(sum(v * v for v in vector)) or 1.0
    return [v / norm for v in vector]


# ------------------------------------------------------------------------------------- wire format


def _pieces(text: str, size: int) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), max(1, size))]


def _count_prompt_tokens(body: Mapping[str, Any]) -> int:
    total = 0
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, Mapping) else None
        if isinstance(content, str):
            total += len(content.split())
        elif isinstance(content, list):
            total += sum(len(str(part.get("text", "")).split()) for part in content if isinstance(part, Mapping))
    return total


def _usage(reply: Reply, body: Mapping[str, Any]) -> dict[str, int]:
    if reply.usage is not None:
        prompt, completion = reply.usage
    else:
        prompt = _count_prompt_tokens(body)
        completion = len(reply.content.split()) + sum(len(c.arguments_text()) // 4 + 1 for c in reply.calls)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _call_id(call: Call, index: int) -> str:
    return call.id or f"call_{index}_{call.name}"


def _completion(reply: Reply, body: Mapping[str, Any]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.content or (None if reply.calls else "")}
    if reply.calls:
        message["tool_calls"] = [
            {"id": _call_id(c, i), "type": "function", "function": {"name": c.name, "arguments": c.arguments_text()}}
            for i, c in enumerate(reply.calls)
        ]
    return {
        "id": "chatcmpl-fake", "object": "chat.completion", "created": 0, "model": body.get("model", ""),
        "choices": [{"index": 0, "message": message, "finish_reason": reply.finish_reason or "stop",
                     "logprobs": None}],
        "usage": _usage(reply, body),
    }


def _chunk(body: Mapping[str, Any], delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
    return {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 0, "model": body.get("model", ""),
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}]}


def _text_chunks(reply: Reply, body: Mapping[str, Any]) -> list[dict[str, Any]]:
    pieces = list(reply.chunks) if reply.chunks is not None else _pieces(reply.content, reply.chunk_size)
    out = [_chunk(body, {"role": "assistant", "content": ""})]
    out += [_chunk(body, {"content": piece}) for piece in pieces]
    return out


def _call_chunks(reply: Reply, body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per call: one fragment with index, id, type, name and empty arguments, then argument pieces."""
    out: list[dict[str, Any]] = []
    for index, call in enumerate(reply.calls):
        first = {"index": index, "id": _call_id(call, index), "type": "function",
                 "function": {"name": call.name, "arguments": ""}}
        out.append(_chunk(body, {"tool_calls": [first]}))
        for piece in _pieces(call.arguments_text(), reply.chunk_size):
            out.append(_chunk(body, {"tool_calls": [{"index": index, "function": {"arguments": piece}}]}))
    return out


def _stream_chunks(reply: Reply, body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every chunk of a complete streamed reply, final (finish_reason, usage) chunks included."""
    chunks = _text_chunks(reply, body) + _call_chunks(reply, body)
    chunks.append(_chunk(body, {}, reply.finish_reason or "stop"))
    options = body.get("stream_options") or {}
    if isinstance(options, Mapping) and options.get("include_usage"):
        chunks.append({"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 0,
                       "model": body.get("model", ""), "choices": [], "usage": _usage(reply, body)})
    return chunks


def _output_message(text: str, status: str) -> dict[str, Any]:
    return {"type": "message", "id": "msg_fake", "status": status, "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": []}] if status == "completed" else []}


def _response_object(body: Mapping[str, Any], text: str, status: str) -> dict[str, Any]:
    """A Responses API response object holding one assistant message (none while in progress)."""
    words = len(text.split())
    return {"id": "resp_fake", "object": "response", "created_at": 0, "status": status, "model": body.get("model", ""),
            "output": [_output_message(text, status)] if status == "completed" else [],
            "parallel_tool_calls": True, "tool_choice": "auto", "tools": [], "error": None,
            "incomplete_details": None, "instructions": body.get("instructions"),
            "usage": {"input_tokens": 5, "output_tokens": words, "total_tokens": 5 + words,
                      "input_tokens_details": {"cached_tokens": 0},
                      "output_tokens_details": {"reasoning_tokens": 0}} if status == "completed" else None}


def _response_events(reply: Reply, body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The events OpenAI streams for a one-message text response, in order, numbered from 0."""
    pieces = list(reply.chunks) if reply.chunks is not None else _pieces(reply.content, reply.chunk_size)
    at = {"item_id": "msg_fake", "output_index": 0, "content_index": 0}
    part = {"type": "output_text", "text": reply.content, "annotations": []}
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": _response_object(body, "", "in_progress")},
        {"type": "response.in_progress", "response": _response_object(body, "", "in_progress")},
        {"type": "response.output_item.added", "output_index": 0, "item": _output_message("", "in_progress")},
        {"type": "response.content_part.added", **at, "part": {**part, "text": ""}},
        *({"type": "response.output_text.delta", **at, "delta": piece, "logprobs": []} for piece in pieces),
        {"type": "response.output_text.done", **at, "text": reply.content, "logprobs": []},
        {"type": "response.content_part.done", **at, "part": part},
        {"type": "response.output_item.done", "output_index": 0, "item": _output_message(reply.content, "completed")},
        {"type": "response.completed", "response": _response_object(body, reply.content, "completed")},
    ]
    return [{**event, "sequence_number": n} for n, event in enumerate(events)]


# ------------------------------------------------------------------------------------------ server


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    fake: FakeLLM

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Clients hanging up (timeouts, dropped streams) are expected here; bugs still print."""
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)


class _RequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fakellm/1"

    @property
    def fake(self) -> FakeLLM:
        assert isinstance(self.server, _Server)
        return self.server.fake

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: pytest output stays readable."""

    def finish(self) -> None:
        try:
            super().finish()
        except OSError:
            pass  # the connection was dropped on purpose

    # -- routing

    def do_GET(self) -> None:
        self._record(None)
        if not self._authorized():
            return
        if self.path.rstrip("/").endswith("/v1/models"):
            data = [{"id": m, "object": "model", "created": 0, "owned_by": "fakellm"} for m in self.fake.models]
            self._send_json(200, {"object": "list", "data": data})
        else:
            self._send_json(404, {"error": {"message": f"no route GET {self.path}", "type": "not_found"}})

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            body = json.loads(raw or b"null")
        except json.JSONDecodeError:
            self._record(raw.decode("utf-8", "replace"))
            self._send_json(400, {"error": {"message": "request body is not JSON", "type": "invalid_request"}})
            return
        self._record(body)
        if not self._authorized():
            return
        path = self.path.split("?")[0].rstrip("/")
        if path.endswith("/v1/chat/completions"):
            self._chat(body)
        elif path.endswith("/v1/responses"):
            self._responses(body)
        elif path.endswith("/v1/embeddings"):
            self._embeddings(body)
        else:
            self._send_json(404, {"error": {"message": f"no route POST {self.path}", "type": "not_found"}})

    def _record(self, body: Any) -> None:
        headers = {k.lower(): v for k, v in self.headers.items()}
        self.fake._record(RecordedRequest(self.command, self.path, headers, body, time.monotonic()))

    def _authorized(self) -> bool:
        expected = self.fake.api_key
        if expected is None or self.headers.get("Authorization") == f"Bearer {expected}":
            return True
        self._send_json(401, {"error": {"message": "Incorrect API key provided.", "type": "invalid_request_error",
                                        "code": "invalid_api_key"}})
        return False

    # -- chat

    def _chat(self, body: Any) -> None:
        body = body if isinstance(body, Mapping) else {}
        if self.fake.reject_stream_options and "stream_options" in body:
            self._send_json(400, {"error": {"message": "Unrecognized request argument supplied: stream_options",
                                            "type": "invalid_request_error"}})
            return
        reply = self.fake._next_chat_reply(body)
        self._play(reply, body, stream=bool(body.get("stream")))

    def _play(self, reply: Reply, body: Mapping[str, Any], *, stream: bool) -> None:
        if reply.kind == "error" or reply.kind == "json":
            self._send_json(reply.status, reply.body, reply.headers)
        elif reply.kind == "hang":
            self._hang(reply, body, stream)
        elif reply.kind == "drop":
            self._drop(reply, body, stream)
        elif reply.kind == "sse":
            self._start_sse()
            for event in reply.events:
                self._send_event(event if isinstance(event, str) else json.dumps(event))
            if reply.done:
                self._send_event("[DONE]")
            self._end_chunked()
        elif stream:
            self._start_sse()
            for chunk in _stream_chunks(reply, body):
                try:
                    self._send_event(json.dumps(chunk))
                except OSError:
                    self._hung_up()
                    return
                if reply.chunk_delay_s and self._wait_or_hangup(reply.chunk_delay_s):
                    return
            self._send_event("[DONE]")
            self._end_chunked()
        else:
            self._send_json(200, _completion(reply, body))

    def _hang(self, reply: Reply, body: Mapping[str, Any], stream: bool) -> None:
        if stream and reply.after_chunks:
            self._start_sse()
            for chunk in _text_chunks(reply, body)[: reply.after_chunks + 1]:
                self._send_event(json.dumps(chunk))
        if not self._wait_or_hangup(reply.seconds):
            self._abort()

    def _wait_or_hangup(self, seconds: float) -> bool:
        """Wait ``seconds`` (less when the fake stops); True, recorded in ``hangups``, when the client closed the
        connection meanwhile."""
        until = time.monotonic() + seconds
        while time.monotonic() < until and not self.fake._stopping.is_set():
            readable, _, _ = select.select([self.connection], [], [], min(0.02, max(0.0, until - time.monotonic())))
            if readable:
                try:
                    closed = self.connection.recv(1, socket.MSG_PEEK) == b""
                except OSError:
                    closed = True
                if closed:
                    self._hung_up()
                    return True
                time.sleep(0.02)  # the client wrote more (a pipelined request): not a hangup
        return False

    def _hung_up(self) -> None:
        with self.fake._lock:
            self.fake.hangups.append(time.monotonic())
        self.close_connection = True

    def _drop(self, reply: Reply, body: Mapping[str, Any], stream: bool) -> None:
        if stream:
            self._start_sse()
            for chunk in _text_chunks(reply, body)[: reply.after_chunks + 1]:  # +1: the role-only chunk
                self._send_event(json.dumps(chunk))
        self._abort()

    # -- responses

    def _responses(self, body: Any) -> None:
        """The Responses API: a text reply as one response object, or streamed as its typed events."""
        body = body if isinstance(body, Mapping) else {}
        reply = self.fake._next_chat_reply(body)
        if reply.kind == "drop" and body.get("stream"):
            self._start_sse()
            for event in _response_events(reply, body)[: reply.after_chunks + 4]:  # +4: the opening events
                self._write_chunk(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode())
            self._abort()
        elif reply.kind != "text" or reply.calls:
            self._play(reply, body, stream=bool(body.get("stream")))
        elif body.get("stream"):
            self._start_sse()
            for event in _response_events(reply, body):
                self._write_chunk(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode())
                if reply.chunk_delay_s:
                    time.sleep(reply.chunk_delay_s)
            self._end_chunked()
        else:
            self._send_json(200, _response_object(body, reply.content, "completed"))

    # -- embeddings

    def _embeddings(self, body: Any) -> None:
        scripted = self.fake._next_embedding_reply()
        if scripted is not None:
            self._play(scripted, {}, stream=False)
            return
        body = body if isinstance(body, Mapping) else {}
        inputs = body.get("input")
        texts = [inputs] if isinstance(inputs, str) else list(inputs or [])
        model = str(body.get("model", ""))
        dim = int(body.get("dimensions") or self.fake.embedding_dim)
        as_base64 = body.get("encoding_format") == "base64"
        data = []
        for index, item in enumerate(texts):
            vector = fake_embedding(item if isinstance(item, str) else json.dumps(item), dim, model)
            encoded: Any = base64.b64encode(struct.pack(f"<{dim}f", *vector)).decode() if as_base64 else vector
            data.append({"object": "embedding", "index": index, "embedding": encoded})
        tokens = sum(len(str(t).split()) for t in texts)
        self._send_json(200, {"object": "list", "data": data, "model": model,
                              "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})

    # -- wire

    def _echoed(self, payload: bytes) -> bytes:
        """``payload`` with AUTHORIZATION replaced by the request's Authorization header."""
        return payload.replace(AUTHORIZATION.encode(), self.headers.get("Authorization", "").encode())

    def _send_json(self, status: int, body: Any, headers: Mapping[str, str] | None = None) -> None:
        payload = self._echoed(body.encode() if isinstance(body, str) else json.dumps(body).encode())
        self.send_response(status)
        self.send_header("Content-Type", "text/plain" if isinstance(body, str) else "application/json")
        self.send_header("Content-Length", str(len(payload)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(payload)
        self.wfile.flush()

    def _start_sse(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()

    def _send_event(self, data: str) -> None:
        self._write_chunk(f"data: {data}\n\n".encode())

    def _write_chunk(self, payload: bytes) -> None:
        payload = self._echoed(payload)
        self.wfile.write(f"{len(payload):x}\r\n".encode() + payload + b"\r\n")
        self.wfile.flush()

    def _end_chunked(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _abort(self) -> None:
        """Close the socket mid-response: the client sees an incomplete body or no response."""
        self.close_connection = True
        try:
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
