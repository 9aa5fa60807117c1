"""The web reader: static assets (HTML, ES modules, CSS) shipped inside the package.

There is no build step: ``static/`` holds plain modern JavaScript modules and one stylesheet,
served as ``/static/*``. Every page (``/`` and ``/read/{doc_id}``) is the same single-page
``index.html``; the client routes with the history API. Pages must be served with
``CONTENT_SECURITY_POLICY``: the assets use no inline script or style, no eval and nothing remote.
``not_found_html`` is the page a browser gets for an address the reader does not have.
"""

from __future__ import annotations

from html import escape
from pathlib import Path

__all__ = ["STATIC_DIR", "CONTENT_SECURITY_POLICY", "index_html", "not_found_html"]

STATIC_DIR: Path = Path(__file__).resolve().parent / "static"
"""Directory to mount at ``/static``."""

CONTENT_SECURITY_POLICY: str = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "frame-ancestors 'none'",
        "form-action 'self'",
    ]
)
"""Value of the ``Content-Security-Policy`` header for every HTML page."""


def index_html() -> str:
    """The single-page HTML served for ``/`` and ``/read/{doc_id}``.

    Read on every call (it is a few hundred bytes) so an edited asset shows without a restart.
    """
    return (STATIC_DIR / "index.html").read_text(encoding="utf-8")


def not_found_html(path: str, lead: str = "There is no page at") -> str:
    """The page for a mistyped address (``/nope``, ``/read/abc``): it names the address, escaped, and links
    back to the library. ``lead`` (plain text) says what is missing where more is known than the address
    ("The library has no document 99 to read at" ``/read/99``)."""
    page = (STATIC_DIR / "not-found.html").read_text(encoding="utf-8")
    return page.replace("{lead}", escape(lead)).replace("{path}", escape(path))
