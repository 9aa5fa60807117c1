"""What the routes share: :class:`ServerState`, kept on the app as ``app.state.cv``, and :func:`server_state`,
the one FastAPI dependency that hands it to a route.

A module of its own so that app.py, which builds the state, and the route modules (kb, proxy, reader), which
read it, import this instead of each other.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field

import httpx
from fastapi import Request

from ..knowledgebase import KnowledgeBase
from ..library import Library
from ..llm.summaries import SummaryJobs
from .serve_settings import ServeSettings
from .jobs import JobManager
from .upstream import UpstreamSettings

__all__ = ["ServerState", "server_state"]


@dataclass
class ServerState:
    """What the routes share; ``request.app.state.cv``."""

    settings: ServeSettings
    kb: KnowledgeBase | None
    reader: Library
    upstream: UpstreamSettings
    jobs: JobManager = field(default_factory=JobManager)
    summaries: SummaryJobs = field(default_factory=SummaryJobs)
    http: httpx.AsyncClient = field(init=False)
    stop: threading.Event = field(default_factory=threading.Event)
    ranking: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(1))
    """Held by the ranked ``/v1/rag/chunks/list`` that runs; the others wait their turn (see ``rag.chunks_list``)."""

    def abandon_work(self) -> None:
        """The server is stopping and requests in flight had their grace period: the knowledge base's
        embeddings end at their next batch, and their requests answer 503 STOPPING (``server.stopping``)."""
        if self.kb is not None:
            self.kb.abandon_writes()

    def close(self) -> None:
        """Let go of what this server holds in a library other servers may share (see ``KnowledgeBase.close``)."""
        if self.kb is not None:
            self.kb.close()


def server_state(request: Request) -> ServerState:
    """The state of the app serving ``request`` (``create_app`` puts it there); usable as ``Depends(server_state)``."""
    state: ServerState = request.app.state.cv
    return state
