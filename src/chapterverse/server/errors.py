"""HTTP errors: every error answer is JSON ``{"code", "message"}``.

The OpenAI-compatible paths (``/v1/chat/completions``, ``/v1/responses``, ``/v1/models``) also carry OpenAI's
``{"error": {"message", "type", "code"}}`` so SDK clients show the message. chapterverse's own
errors are mapped here, at the one HTTP boundary, and every message passes the secret scrubber
(``redaction.scrub``) on its way out.

A request the schema refuses is 400 ``BAD_INPUT`` when it is not what the endpoint takes (not JSON,
a required field missing, a wrong type), and 422 ``BAD_INPUT`` when it is well-formed but a value is
refused: an unknown field where the endpoint forbids them, a malformed URL, a text over its limit. A body
that is not JSON gets the same message on every route, the proxy's included: why and where it stops parsing
(:func:`unparsable_body`).

The knowledge-base API (``/v1/rag``) answers every request it refuses with one status, 422 ``BAD_INPUT``
(:data:`RAG_INVALID`): an unknown field or query parameter, a missing one, a wrong type (bodies are strict:
``"top_k": "5"`` is refused), a value out of range or too long, and a value the knowledge base refuses on
reading it (a source named twice in a batch, an empty query). Only a body that is not JSON at all is 400,
as on every route.

A browser that asks for an address the reader does not have (``/nope``, ``/read/abc``, ``/read/99`` when the
library holds no document 99) gets a small HTML page that says so and links back to the library, with status 404; the APIs' clients (every ``/api`` and ``/v1``
path, and any request that does not ask for HTML before JSON) always get the JSON.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import HTMLResponse, JSONResponse, Response

from ..redaction import scrub
from ..web import CONTENT_SECURITY_POLICY, not_found_html

from ..errors import (
    ChapterverseError,
    ClientGoneError,
    EmbeddingError,
    InputError,
    NotFoundError,
    OverBudgetError,
    ProviderError,
    SourceError,
    StoppingError,
    StoreError,
    TagError,
)

__all__ = ["ApiError", "MissingPage", "RAG_INVALID", "error_body", "error_response", "install_error_handlers", "unparsable_body", "OPENAI_PATHS"]

log = logging.getLogger(__name__)

OPENAI_PATHS = ("/v1/chat/", "/v1/responses", "/v1/models")
API_PATHS = ("/api", "/v1")
"""Path prefixes whose errors are always JSON, whatever the request accepts."""


class ApiError(Exception):
    """An error answer: HTTP status, a stable code, a message for people, and headers to send with it (an
    upstream's ``Retry-After``)."""

    def __init__(self, status: int, code: str, message: str, *, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = dict(headers or {})


class MissingPage(ApiError):
    """404 for a page address of the right form that names nothing (``/read/99`` when there is no document 99):
    a browser gets the not-found page, whose sentence begins with ``lead``; any other client the JSON error."""

    def __init__(self, message: str, lead: str) -> None:
        super().__init__(404, "NOT_FOUND", message)
        self.lead = lead


RAG_INVALID = 422
"""The status of every request the knowledge-base API refuses (see the module's notes)."""
_RAG_PREFIX = "/v1/rag"

_UNPROCESSABLE = frozenset({"extra_forbidden", "value_error", "string_too_long", "too_long"})
"""Validation error types that refuse a value of a well-formed request: 422, not 400."""


def error_body(code: str, message: str, *, openai: bool = False) -> dict[str, Any]:
    """The JSON of an error answer, its message scrubbed of secrets (a URL's password, a key an upstream echoed)."""
    message = scrub(message)
    body: dict[str, Any] = {"code": code, "message": message}
    if openai:
        body["error"] = {"message": message, "type": code.lower(), "code": code}
    return body


def error_response(status: int, code: str, message: str, *, path: str = "") -> JSONResponse:
    return JSONResponse(error_body(code, message, openai=path.startswith(OPENAI_PATHS)), status_code=status)


def from_chapterverse(exc: ChapterverseError) -> ApiError:
    """The status and code for one of our own errors."""
    if isinstance(exc, NotFoundError):
        return ApiError(404, "NOT_FOUND", str(exc))
    if isinstance(exc, TagError):
        return ApiError(400, "BAD_TAG", str(exc))
    if isinstance(exc, SourceError):
        return ApiError(422, "BAD_SOURCE", str(exc))
    if isinstance(exc, InputError):
        return ApiError(400, "BAD_INPUT", str(exc))
    if isinstance(exc, ProviderError):
        return ApiError(502, "UPSTREAM_ERROR", str(exc))
    if isinstance(exc, StoppingError):
        return ApiError(503, "STOPPING", str(exc))
    if isinstance(exc, OverBudgetError):
        return ApiError(408, "OVER_BUDGET", str(exc))
    if isinstance(exc, ClientGoneError):  # nginx's "client closed request": nobody is left to read it
        return ApiError(499, "CLIENT_GONE", str(exc))
    if isinstance(exc, EmbeddingError):
        return ApiError(500, "EMBEDDING_ERROR", str(exc))
    if isinstance(exc, StoreError):
        return ApiError(500, "STORE_ERROR", str(exc))
    return ApiError(500, "INTERNAL", str(exc))


def unparsable_body(exc: ValueError | RecursionError) -> ApiError:
    """400 ``BAD_INPUT`` for a request body that does not parse as JSON, in the same words on every route: those
    whose body FastAPI parses (``/v1/rag/*``, the reader's ``/api/*``) and the proxy's, which parses its own."""
    if isinstance(exc, RecursionError):
        return ApiError(400, "BAD_INPUT", "the request body is nested too deeply")
    return ApiError(400, "BAD_INPUT", f"the request body is not valid JSON: {exc}")


def _unparsed_body(exc: RequestValidationError) -> ApiError | None:
    """:func:`unparsable_body` for FastAPI's own parse failure, which it words ``0: JSON decode error``: the
    reason and the place, as ``json`` words them (``Expecting value: line 1 column 1 (char 0)``)."""
    for error in exc.errors():
        if error.get("type") == "json_invalid":
            position = int(error["loc"][-1])
            return unparsable_body(json.JSONDecodeError(str(error["ctx"]["error"]), str(exc.body), position))
    return None


_NOT_AN_OBJECT = frozenset({"model_attributes_type", "dict_type", "missing"})
"""Validation error types of a whole body that is no JSON object (or absent)."""


def _not_sent_as_json(exc: RequestValidationError, request: Request) -> ApiError | None:
    """400 naming the header, for a body refused as a whole when it was not sent as JSON. ``curl -d '{...}'``
    without ``-H`` sends form data's Content-Type; FastAPI then validates the raw bytes and words it ``body:
    Input should be a valid dictionary or object to extract fields from``, naming neither the header nor the fix."""
    content_type = request.headers.get("content-type", "")
    if "json" in content_type.lower():
        return None
    if not any(tuple(e.get("loc", ())) == ("body",) and e.get("type") in _NOT_AN_OBJECT for e in exc.errors()):
        return None
    shown = content_type.split(";")[0].strip() or "none"
    return ApiError(400, "BAD_INPUT", "the request body must be JSON sent with Content-Type: application/json "
                                      f"(this request's Content-Type: {shown}; with curl: "
                                      "-H 'Content-Type: application/json')")


def _validation_message(exc: RequestValidationError) -> str:
    parts = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error.get("loc", ()) if p != "body") or "body"
        parts.append(f"{where}: {error.get('msg', 'invalid')}")
    return "; ".join(parts) or "invalid request"


def _is_page_request(request: Request) -> bool:
    """A browser opening an address: a GET outside the APIs that asks for HTML at least as much as for JSON
    (a browser's ``text/html,...,*/*;q=0.8``; not curl's bare ``*/*``, nor ``application/json``)."""
    path = request.url.path
    if request.method not in ("GET", "HEAD") or any(path == p or path.startswith(p + "/") for p in API_PATHS):
        return False
    quality = _accepted(request.headers.get("accept", ""))
    html = max(quality.get("text/html", 0.0), quality.get("application/xhtml+xml", 0.0))
    return html > 0 and html >= quality.get("application/json", 0.0)


def _accepted(accept: str) -> dict[str, float]:
    """Media types an Accept header names, with their quality (``text/html;q=0.9`` -> 0.9; 1 when unsaid)."""
    quality: dict[str, float] = {}
    for item in accept.split(","):
        media, *parameters = (part.strip() for part in item.split(";"))
        weight = 1.0
        for parameter in parameters:
            name, _, value = parameter.partition("=")
            if name.strip().lower() == "q":
                try:
                    weight = float(value)
                except ValueError:
                    weight = 0.0
        if media:
            quality[media.lower()] = weight
    return quality


def _not_found_page(request: Request, lead: str | None = None) -> HTMLResponse:
    """404 as a page for people: the address they typed (after ``lead``, what is missing, where known) and a
    link back to the library."""
    page = not_found_html(request.url.path) if lead is None else not_found_html(request.url.path, lead)
    return HTMLResponse(page, status_code=404, headers={"Content-Security-Policy": CONTENT_SECURITY_POLICY})


def _answer(error: ApiError, request: Request) -> JSONResponse:
    """``error`` as the JSON answer to ``request`` (its path picks the OpenAI shape or ours)."""
    response = error_response(error.status, error.code, error.message, path=request.url.path)
    response.headers.update(error.headers)
    return response


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api(request: Request, exc: ApiError) -> Response:
        if isinstance(exc, MissingPage) and _is_page_request(request):
            return _not_found_page(request, exc.lead)
        return _answer(exc, request)

    @app.exception_handler(ChapterverseError)
    async def _ours(request: Request, exc: ChapterverseError) -> JSONResponse:
        mapped = from_chapterverse(exc)
        if mapped.status == 400 and mapped.code == "BAD_INPUT" and request.url.path.startswith(_RAG_PREFIX):
            mapped.status = RAG_INVALID
        if mapped.status >= 500:
            log.error("%s %s failed: %s", request.method, request.url.path, exc)
        return _answer(mapped, request)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> Response:
        if _is_page_request(request):  # /read/abc: an address that names no book
            return _not_found_page(request)
        if (unparsed := _unparsed_body(exc) or _not_sent_as_json(exc, request)) is not None:
            return _answer(unparsed, request)
        errors = exc.errors()
        status = 422 if errors and all(e.get("type") in _UNPROCESSABLE for e in errors) else 400
        if request.url.path.startswith(_RAG_PREFIX):
            status = RAG_INVALID
        return error_response(status, "BAD_INPUT", _validation_message(exc), path=request.url.path)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> Response:
        if exc.status_code == 404 and _is_page_request(request):
            return _not_found_page(request)
        if isinstance(exc.__cause__, (ValueError, RecursionError)):  # FastAPI's "error parsing the body"
            return _answer(unparsable_body(exc.__cause__), request)  # (bytes not UTF-8, nesting too deep)
        code = {404: "NOT_FOUND", 405: "METHOD_NOT_ALLOWED", 413: "TOO_LARGE"}.get(exc.status_code, "HTTP_ERROR")
        return error_response(exc.status_code, code, str(exc.detail), path=request.url.path)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("%s %s failed", request.method, request.url.path)
        return error_response(500, "INTERNAL", f"internal error: {type(exc).__name__}", path=request.url.path)
