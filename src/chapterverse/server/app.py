"""``create_app(settings)``: the one FastAPI app behind ``chapterverse serve``.

Libraries: the knowledge base's index lives in ``<rag_kb_path>/.chapterverse/`` (a hidden folder,
so the folder scan skips it). The reader uses that same Library unless ``--library`` names another
directory: by default, books uploaded in the reader are searchable by the chat proxy too, and
knowledge-base documents can be opened in the reader (citations resolve in both). With ``--store``
both libraries live in that store (a PostgreSQL database several servers share) and the directories
only hold uploads and the reader's config.json.

Startup (in ``create_app``, before serving): create a missing KB folder, then, as one critical
section among the servers sharing the library (``KnowledgeBase.start``), drop the ``persist: false``
documents of servers no longer running and sync the folder (hashes only when nothing changed: no
model is loaded). Serving: the embedding model warms up in a background thread, ``--rag_watch``
polls the folder in another. Shutdown releases this server's hold on its ``persist: false``
documents, so the next server to start drops them.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import httpx
from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..embeddings import Embedder, load_embedder
from ..foldersync import ensure_folder
from ..knowledgebase import KnowledgeBase, drop_orphaned_ephemeral
from ..library import Library
from ..redaction import install_log_scrubber, register_secret, register_url_secrets
from ..llm.reranking import library_reranker
from ..store import Store, open_store
from .proxy import chat_completions as proxy_routes
from . import rag as rag_routes
from .proxy import responses_api as responses_routes
from . import reader as reader_routes
from .serve_settings import ServeSettings
from .errors import install_error_handlers
from .limits import BodyLimit
from .reader import UPLOAD_ROUTE
from .security import RequestGuard, check_bind, is_loopback
from .state import ServerState
from .upstream import TurnLimits, UpstreamSettings

__all__ = ["create_app", "open_state"]

log = logging.getLogger(__name__)


def _open_store(settings: ServeSettings, directory: Path) -> Store:
    """The store of the library in ``directory``: ``--store`` when given (it overrides the directory), as in the CLI."""
    return open_store(settings.secret("store") or directory)


def _stored_model(settings: ServeSettings) -> str | None:
    probe = _open_store(settings, settings.kb_library_dir)
    try:
        return probe.get_meta("embedding_model")
    finally:
        probe.close()


def _passage_threads() -> int:
    """BLAS threads a server embeds passages on: every core but one, left to searches. On two busy cores (load
    average ~10), small searches' p50 went from 22 ms idle to 728 ms while passages were embedded on both
    cores; on one, from 27 to 96 ms, and from 35 to 60 ms where the embedding also steps aside between its
    batches (``KnowledgeBase.step_aside``)."""
    return max(1, (os.cpu_count() or 1) - 1)


def _open_kb(settings: ServeSettings, embedder: Embedder | None) -> KnowledgeBase:
    ensure_folder(settings.rag_kb_path)
    if embedder is None:
        spec = settings.rag_embedding_model or _stored_model(settings)
        embedder = load_embedder(spec, device=settings.rag_device, batch_size=settings.rag_embedding_batch_size,
                                 threads=_passage_threads())
    library = Library(settings.kb_library_dir, embedder=embedder, chunk_size=settings.rag_chunk_size,
                      chunk_overlap=settings.rag_chunk_overlap, store=_open_store(settings, settings.kb_library_dir))
    kb = KnowledgeBase(library, settings.rag_kb_path, hardlinks=settings.allow_hardlinks)
    kb.start(force_rebuild=settings.rag_force_rebuild)
    return kb


def open_state(settings: ServeSettings, *, embedder: Embedder | None = None) -> ServerState:
    """Open the libraries and sync the knowledge base; raises ChapterverseError on anything wrong.

    ``embedder``, when given, serves the knowledge base and a separate reader library alike (see ``create_app``).
    """
    check_bind(settings.host, settings.secret("api_key"))
    _guard_secrets(settings)
    kb = _open_kb(settings, embedder) if settings.rag_enabled else None
    if kb is not None and settings.library is None:
        reader = kb.library
    else:
        reader = Library(settings.reader_library_dir, embedder=embedder,
                         store=_open_store(settings, settings.reader_library_dir))
        drop_orphaned_ephemeral(reader.store)
    upstream = UpstreamSettings(reader.location, base_url=settings.llm_base_url, model=settings.llm_model,
                                api_key=settings.secret("llm_api_key"), timeout_s=settings.llm_timeout_s,
                                limits=TurnLimits(settings.llm_max_tokens, settings.llm_deadline_s,
                                                  settings.llm_context_tokens))
    if kb is not None:
        kb.library.reranker, kb.library.rerank_top_n = library_reranker(
            settings.kb_library_dir, reranker=settings.rag_reranker, top_n=settings.rag_rerank_top_n,
            provider=upstream.current.provider())
    return ServerState(settings=settings, kb=kb, reader=reader, upstream=upstream)


def _guard_secrets(settings: ServeSettings) -> None:
    """Mask the server's own secrets in every answer and log line of this process (redaction.py)."""
    install_log_scrubber()
    register_secret(settings.secret("api_key"))
    register_secret(settings.secret("llm_api_key"))
    register_url_secrets(settings.secret("store"))


def _start_background(state: ServerState) -> None:
    kb = state.kb
    if kb is None:
        return
    threading.Thread(target=_warm_up, args=(kb,), name="embedder-warmup", daemon=True).start()
    if state.settings.rag_watch:
        threading.Thread(target=kb.folder.watch, args=(state.stop, state.settings.rag_watch_interval), name="kb-watch",
                         daemon=True).start()
        log.info("RAG: watching %s every %g s", kb.folder.path, state.settings.rag_watch_interval)


def _warm_up(kb: KnowledgeBase) -> None:
    try:
        kb.library.embedder.embed_query("warm up")
    except Exception as exc:  # the first search will report it properly
        log.warning("RAG: embedding model failed to load: %s", exc)


class _SecurityHeaders:
    """nosniff and no-referrer on every response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers += [(b"x-content-type-options", b"nosniff"), (b"referrer-policy", b"no-referrer")]
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, send_with_headers)


def _version() -> str:
    try:
        return version("chapterverse")
    except PackageNotFoundError:
        return "0"


def create_app(settings: ServeSettings, *, embedder: Embedder | None = None) -> FastAPI:
    """The app, with its libraries open and the knowledge base synced.

    ``embedder``: a model already loaded, served instead of loading the one the settings and the library name
    (``--rag_embedding_model``, else the library's own). The seam for a process that runs several apps on one
    model: the test suite starts dozens of servers and loads its model once. ``chapterverse serve`` leaves it
    None.
    """
    state = open_state(settings, embedder=embedder)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        state.http = httpx.AsyncClient(timeout=httpx.Timeout(settings.llm_timeout_s, connect=10.0))
        state.stop.clear()
        _start_background(state)
        try:
            yield
        finally:
            state.stop.set()
            await asyncio.to_thread(state.jobs.shutdown)
            await state.http.aclose()
            state.close()

    app = FastAPI(title="chapterverse", version=_version(), lifespan=lifespan,
                  description="Knowledge-base API (`/v1/rag`), OpenAI-compatible chat with retrieved context "
                              "(`/v1/chat/completions`) and the web reader's API (`/api`). Every retrieved chunk "
                              "carries a position tag such as `f5-12-300` that `/api/resolve/{tag}` turns back "
                              "into the exact text.")
    app.state.cv = state
    install_error_handlers(app)
    app.include_router(rag_routes.router)
    app.include_router(proxy_routes.router)
    app.include_router(responses_routes.router)
    app.include_router(reader_routes.router)
    app.include_router(reader_routes.pages_router)
    if reader_routes.STATIC_DIR is not None:
        app.mount("/static", StaticFiles(directory=reader_routes.STATIC_DIR), name="static")
    if settings.cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=settings.cors_origins, allow_methods=["*"],
                           allow_headers=["*"])
    app.add_middleware(BodyLimit, limit=settings.max_body_bytes, exempt=[UPLOAD_ROUTE])
    app.add_middleware(RequestGuard, api_key=settings.secret("api_key"), public=not is_loopback(settings.host),
                       cors_origins=settings.cors_origins)
    app.add_middleware(_SecurityHeaders)
    return app
