"""Bounded work per request: a body cap enforced while the body streams in, and caps on texts and metadata.

Every limit is a setting (``--max_body_mb``, ``--max_query_chars``, ``--max_question_chars``,
``--max_text_chars``) and every refusal names the one that applies, so a client knows what to change
and an operator what to raise. A body over the cap is never read whole: ``Content-Length`` beyond it is
refused at once, and a body without one is counted as it arrives and refused when it passes the cap.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import Any

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .errors import ApiError, error_response

__all__ = ["BodyLimit", "MAX_ID", "MAX_METADATA_DEPTH", "MAX_METADATA_BYTES", "check_length", "check_metadata"]

MAX_ID = 2**63 - 1
"""The largest id or offset a store holds (SQLite and PostgreSQL integers are signed 64-bit)."""
MAX_METADATA_DEPTH = 16
MAX_METADATA_BYTES = 64 * 1024
"""Metadata is a label on a chunk, not a payload: these leave room for any real use, and keep every later read
of the chunk (which serializes it) cheap and safe."""


class BodyLimit:
    """ASGI middleware: 413 ``TOO_LARGE`` for a request body over ``limit`` bytes.

    The body is read (up to the limit) before the app runs and handed on in one piece, so no endpoint
    ever starts work on a body it cannot finish reading. ``exempt`` routes stream their own bodies under
    their own limit (the reader's upload, which goes to disk).
    """

    def __init__(self, app: ASGIApp, *, limit: int, exempt: Collection[tuple[str, str]] = ()) -> None:
        self.app = app
        self._limit = limit
        self._exempt = frozenset(exempt)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or (scope["method"], scope["path"]) in self._exempt:
            await self.app(scope, receive, send)
            return
        declared = Headers(scope=scope).get("content-length", "")
        body = None if declared.isdigit() and int(declared) > self._limit else await self._read(receive)
        if body is None:
            await self._refuse(scope, receive, send)
            return
        await self.app(scope, _replay(body, receive), send)

    async def _read(self, receive: Receive) -> bytes | None:
        """The whole body, or None as soon as it passes the limit."""
        parts: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self._limit:
                return None
            parts.append(chunk)
            if not message.get("more_body", False):
                break
        return b"".join(parts)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        megabytes = self._limit / (1024 * 1024)
        response = error_response(413, "TOO_LARGE", f"the request body is larger than this server accepts "
                                                    f"({megabytes:g} MB, --max_body_mb)", path=scope["path"])
        response.headers["Connection"] = "close"
        await response(scope, receive, send)


def _replay(body: bytes, receive: Receive) -> Receive:
    """``receive`` that yields the buffered body once, then waits on the connection (for disconnects)."""
    pending = True

    async def replay() -> Message:
        nonlocal pending
        if pending:
            pending = False
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


def check_length(name: str, text: str | None, limit: int, flag: str) -> None:
    """422 ``TOO_LONG`` when ``text`` is over ``limit`` characters; the message names the setting."""
    if text is not None and len(text) > limit:
        raise ApiError(422, "TOO_LONG", f"{name} is {len(text):,} characters; this server accepts at most "
                                        f"{limit:,} ({flag})")


def check_metadata(value: dict[str, Any]) -> dict[str, Any]:
    """``value`` when it nests at most MAX_METADATA_DEPTH deep and serializes to at most MAX_METADATA_BYTES.

    A pydantic after-validator (ValueError -> 422): metadata nested 300 deep used to be stored, then fail
    every read that returned its chunk. Depth is measured without recursion, so no input can exhaust the stack.
    """
    if _depth(value) > MAX_METADATA_DEPTH:
        raise ValueError(f"metadata nests deeper than {MAX_METADATA_DEPTH} levels")
    try:
        size = len(json.dumps(value, ensure_ascii=False, allow_nan=False).encode())
    except ValueError as exc:
        raise ValueError(f"metadata must be plain JSON with finite numbers ({exc})") from None
    if size > MAX_METADATA_BYTES:
        raise ValueError(f"metadata is {size:,} bytes as JSON; at most {MAX_METADATA_BYTES:,} are kept")
    return value


def _depth(value: Any) -> int:
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, level)
            if level <= MAX_METADATA_DEPTH:
                stack.extend((child, level + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest
