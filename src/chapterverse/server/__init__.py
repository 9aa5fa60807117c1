"""The server: one FastAPI app with the knowledge-base API (``/v1/rag/*``), an OpenAI-compatible chat proxy
that injects retrieved passages (``/v1/chat/completions``), and the web reader's API and pages (``/api/*``).

``create_app(settings)`` builds the app; ``chapterverse serve`` parses flags into :class:`ServeSettings` and
runs it under uvicorn. Names are imported lazily so ``chapterverse --help`` never pays for FastAPI.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .app import create_app
    from .serve_settings import ServeSettings, parse_serve_args

__all__ = ["create_app", "ServeSettings", "parse_serve_args"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from .app import create_app

        return create_app
    if name in ("ServeSettings", "parse_serve_args"):
        from . import serve_settings

        return getattr(serve_settings, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
