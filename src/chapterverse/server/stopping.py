"""How ``chapterverse serve`` stops (SIGTERM, Ctrl-C): requests in flight get :data:`GRACE_S`; then the
knowledge base's embeddings are abandoned at their next batch, before their write, so that each such request
answers 503 ``STOPPING`` itself; only a request still running :data:`ABANDON_S` later is cancelled.

uvicorn alone cancels every request still running when its grace period ends and only then runs the app's
shutdown, which would abandon the embeddings: the cancelled write's thread runs on, and its client gets
uvicorn's plain-text ``500 Internal Server Error`` instead of the documented 503.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

import uvicorn
from uvicorn.server import HANDLED_SIGNALS

__all__ = ["GRACE_S", "ABANDON_S", "StoppingServer", "config"]

GRACE_S = 5
"""Seconds a stopping server waits for requests in flight before abandoning the work of those still running."""
ABANDON_S = 5
"""Seconds after that for abandoned work to answer (an embedding ends at its next embedder batch) before
uvicorn cancels what still runs (a stream from a slow model, the parse of one huge file)."""


def config(app: Any, *, host: str, port: int, log_level: str) -> uvicorn.Config:
    """uvicorn's config for a :class:`StoppingServer`: no access log, and its stop."""
    return uvicorn.Config(app, host=host, port=port, log_level=log_level, access_log=False,
                          timeout_graceful_shutdown=GRACE_S + ABANDON_S)


class StoppingServer(uvicorn.Server):
    """uvicorn's server, calling ``abandon`` once requests in flight have had :data:`GRACE_S` to finish; its
    config's ``timeout_graceful_shutdown`` is GRACE_S + ABANDON_S (:func:`config`)."""

    def __init__(self, config: uvicorn.Config, abandon: Callable[[], None]) -> None:
        super().__init__(config)
        self._abandon = abandon
        self._held: list[int] = []
        self._handlers_before: dict[int, Any] = {}

    def hold_signals(self) -> None:
        """Keep SIGINT and SIGTERM from now until uvicorn's own handlers are in place, then hand them to it.

        Between the start-up line and uvicorn taking the signals over, a Ctrl-C met asyncio's SIGINT handler,
        which cancels the main task; uvicorn's start-up could swallow that cancellation and serve on, deaf to
        the Ctrl-C a user (or a test) sent right after reading the line. Held here, it stops the server."""
        if threading.current_thread() is not threading.main_thread():
            return
        self._handlers_before = {sig: signal.signal(sig, self._hold) for sig in HANDLED_SIGNALS}

    def _hold(self, sig: int, frame: FrameType | None) -> None:
        self._held.append(sig)

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        for sig, handler in self._handlers_before.items():
            signal.signal(sig, handler)  # uvicorn restores these on its way out
        with super().capture_signals():
            for sig in self._held:
                self.handle_exit(sig, None)
            yield

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        timer = asyncio.get_running_loop().call_later(GRACE_S, self._abandon)
        try:
            await super().shutdown(sockets)
        finally:
            timer.cancel()
