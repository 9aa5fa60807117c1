"""Who may call what.

* Bound to loopback (the default), reads are open and write endpoints need the API key when one is set.
* Bound to any other address, every endpoint needs the key, and starting without one is refused. The
  static shell (the reader's page, its assets, the API docs) holds no data and stays loadable, since
  a browser cannot attach a key to a page load; everything it shows comes through keyed endpoints.
* A browser on another origin cannot write: a write whose ``Origin`` is not this server (nor a
  configured CORS origin) is refused, so a web page cannot post into a key-less local server.
* Bound to loopback, a request must name a loopback host (``Host: localhost:8000``): a DNS-rebinding
  page, whose requests look same-origin to the browser, still carries its own host name.
* Administration (``ADMIN_ROUTES``: the settings that say where the upstream key is sent) needs the key
  everywhere, loopback included, and is refused outright when the server has no key: any local process
  could otherwise point the upstream at itself and receive the key with the next chat. Without a key,
  such settings are made with flags, the environment or config.json.

The key is compared in constant time and never logged; requests carry it as ``Authorization: Bearer``
(what OpenAI clients send) or ``X-API-Key``.
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Collection
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from ..errors import InputError
from .errors import error_response

__all__ = ["is_loopback", "check_bind", "needs_key", "RequestGuard", "READ_POSTS", "ADMIN_ROUTES"]

READ_POSTS = frozenset({"/v1/rag/search", "/v1/rag/chunks/list", "/v1/chat/completions", "/v1/responses"})
"""POST endpoints that only read (the proxy, both of its APIs, is a read: it writes nothing here)."""
SHELL_PATHS = frozenset({"/", "/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json", "/favicon.ico"})
SHELL_PREFIXES = ("/static/", "/read/")
"""GET paths that serve the page, its assets and the API docs: no data, loadable without a key."""
_WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
ADMIN_ROUTES = frozenset({("PUT", "/api/settings")})
"""(method, path) of requests that administer the server: the key is always needed, and must be configured."""


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and ``localhost``; False for 0.0.0.0, :: and everything else."""
    name = host.strip().strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def check_bind(host: str, api_key: str | None) -> None:
    """Refuse to serve beyond this machine without a key."""
    if not is_loopback(host) and not api_key:
        raise InputError(f"refusing to bind {host}: serving beyond loopback needs an API key "
                         f"(--api_key or CHAPTERVERSE_API_KEY), or bind 127.0.0.1")


def needs_key(method: str, path: str, *, public: bool) -> bool:
    """Whether a request must carry the key (when the server has one)."""
    method = method.upper()
    if (method, path) in ADMIN_ROUTES:
        return True
    if method in ("GET", "HEAD") and (path in SHELL_PATHS or path.startswith(SHELL_PREFIXES)):
        return False
    if public:
        return True
    return method in _WRITE_METHODS and path not in READ_POSTS


def _host_name(host_header: str) -> str:
    host = host_header.strip()
    if host.startswith("["):
        return host[1:host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def _presented_key(headers: Headers) -> str | None:
    auth = headers.get("authorization", "")
    scheme, _, value = auth.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return headers.get("x-api-key") or None


def _same_origin(origin: str, headers: Headers, scope: Scope) -> bool:
    parts = urlsplit(origin)
    host = headers.get("host", "")
    return bool(parts.netloc) and parts.netloc.lower() == host.lower() and parts.scheme == scope.get("scheme", "http")


class RequestGuard:
    """ASGI middleware: API key and cross-origin write checks, before any route runs."""

    def __init__(self, app: ASGIApp, *, api_key: str | None, public: bool, cors_origins: Collection[str] = ()) -> None:
        self.app = app
        self._key = api_key.encode() if api_key else None
        self._public = public
        self._origins = frozenset(o.rstrip("/") for o in cors_origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] == "OPTIONS":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        method, path = scope["method"], scope["path"]
        refusal = self._refusal(method, path, headers, scope)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _refusal(self, method: str, path: str, headers: Headers, scope: Scope) -> JSONResponse | None:
        if not self._public and not is_loopback(_host_name(headers.get("host", "localhost"))):
            return error_response(403, "FORBIDDEN_HOST", "this server is bound to loopback; address it as "
                                                         "localhost or 127.0.0.1", path=path)
        origin = headers.get("origin")
        if (origin and method in _WRITE_METHODS and origin.rstrip("/") not in self._origins
                and not _same_origin(origin, headers, scope)):
            return error_response(403, "FORBIDDEN_ORIGIN", f"writes from another origin ({origin}) are not allowed",
                                  path=path)
        if self._key is None and (method, path) in ADMIN_ROUTES:
            return error_response(403, "ADMIN_DISABLED", f"{method} {path} changes where the upstream key is sent, so "
                                                         "it needs the server's API key, and this server has none: "
                                                         "start it with --api_key, or change the setting with "
                                                         "flags, the environment or config.json", path=path)
        if self._key is None or not needs_key(method, path, public=self._public):
            return None
        presented = _presented_key(headers)
        if presented is None:
            return _unauthorized("this endpoint needs the server's API key: send it as a Bearer token in the "
                                 "Authorization header, or in the X-API-Key header", path)
        if not hmac.compare_digest(presented.encode(), self._key):
            return _unauthorized("wrong API key", path)
        return None


def _unauthorized(message: str, path: str) -> JSONResponse:
    response = error_response(401, "UNAUTHORIZED", message, path=path)
    response.headers["WWW-Authenticate"] = "Bearer"
    return response
