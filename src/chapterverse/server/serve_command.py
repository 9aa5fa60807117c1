"""``chapterverse serve``: argparse, not typer, so the RAG server's ``--rag_top_k`` spellings work verbatim.

``main(argv)`` is the whole command (testable without a process); ``serve`` is the typer shim
registered in ``chapterverse.cli`` that hands it the raw arguments.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

import typer

from ..errors import ChapterverseError, InputError

if TYPE_CHECKING:
    import logging
    import socket

    from .serve_settings import ServeSettings

__all__ = ["main", "serve"]

def _configure_logging(level: str) -> logging.Logger:
    """The server's logger, with chapterverse's records going to stderr at ``level``.

    ``logging`` is imported here, not at the top: every other command would pay for it at start-up.
    """
    import logging

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger("chapterverse")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False
    return logging.getLogger("chapterverse.server")


def main(argv: Sequence[str]) -> int:
    """Parse ``argv``, open the libraries, serve until interrupted. Exit code 0, 1 (runtime) or 2 (bad input).

    Ctrl-C is 0, as uvicorn's own clean stop is, both while the server loads (typer would otherwise exit 130
    without a word) and while it serves. A knowledge-base sync it cuts short keeps the documents it wrote whole
    (one transaction each); the next start syncs the rest."""
    try:
        return _start(argv)
    except KeyboardInterrupt:
        print("stopped by Ctrl-C while starting, before serving", file=sys.stderr)
        return 0


def _start(argv: Sequence[str]) -> int:
    """:func:`main`, up to Ctrl-C while starting."""
    from .serve_settings import parse_serve_args
    from .security import check_bind

    try:
        settings = parse_serve_args(argv)
        check_bind(settings.host, settings.secret("api_key"))
        listening = _listen(settings.host, settings.port)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    with listening:
        return _serve(settings, listening)


def _listen(host: str, port: int) -> socket.socket:
    """The server's socket, bound before the libraries open: a port already taken is said at once, in one line,
    not after a knowledge-base sync and a "serving the reader on" line that was not true (uvicorn then failed
    with its own log lines and exit status 3). ``socket`` is imported here: every other command would pay for it."""
    import errno
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, not 0: asyncio turns Nagle off (TCP_NODELAY) only on sockets whose proto says TCP, and an
    # accepted connection inherits this one's. With Nagle on, a response written as headers then body waited
    # for the client's delayed ACK: about 40 ms a request on one keep-alive connection (16 searches/s; 137/s).
    listening = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listening.bind((host, port))
    except OSError as exc:
        listening.close()
        reason = "the address is already in use (another server?); choose another --port" \
            if exc.errno == errno.EADDRINUSE else (exc.strerror or str(exc))
        raise InputError(f"cannot listen on {host}:{port}: {reason}") from exc
    return listening


def _serve(settings: ServeSettings, listening: socket.socket) -> int:
    """Open the libraries and serve on ``listening`` until interrupted.

    ``faulthandler`` is on for the server's life: a fatal error (a C extension's refcount bug ends a server
    with ``none_dealloc``, naming only the thread that tripped on it) or a crash in C code (SIGSEGV,
    SIGABRT, SIGBUS, SIGFPE, SIGILL) writes every thread's Python stack to stderr, the log's stream, before
    the process ends."""
    import faulthandler

    faulthandler.enable(file=sys.__stderr__ or sys.stderr, all_threads=True)  # fd 2, even under a captured sys.stderr
    log = _configure_logging(settings.log_level)
    from . import stopping
    from .app import create_app

    existed = _library_exists(settings)
    kb_existed = settings.rag_kb_path.is_dir()
    try:
        app = create_app(settings)
    except ChapterverseError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, InputError) else 1
    config = stopping.config(app, host=settings.host, port=settings.port, log_level=settings.log_level)
    # Ctrl-C while serving: uvicorn shuts down cleanly, then raises it again on its way out; one sent before
    # uvicorn takes the signals over is held for it (hold_signals). The server stopped as asked: 0.
    server = stopping.StoppingServer(config, abandon=app.state.cv.abandon_work)
    server.hold_signals()
    with contextlib.suppress(KeyboardInterrupt):
        log.info("serving the reader on http://%s:%d/ (%s), the API docs at /docs%s; Ctrl-C stops it",
                 settings.host, listening.getsockname()[1],
                 _library_named(settings) + ("" if existed else ", new and empty: created now"),
                 _knowledge_base_named(settings, kb_existed))
        server.run(sockets=[listening])
    return 0


def _library_exists(settings: ServeSettings) -> bool:
    """Whether the --library the reader shows was there before the server opened it: the reader makes a missing
    one (so that a first upload has somewhere to go), and says so, so that a mistyped --library is seen at once."""
    from ..config import CONFIG_NAME
    from ..store import sqlite_file

    if settings.secret("store") is not None or settings.library is None:
        return True  # the default library or the knowledge base's, made and filled as documented
    database = sqlite_file(settings.library)
    return database is None or database.is_file() or (database.parent / CONFIG_NAME).is_file()


def _library_named(settings: ServeSettings) -> str:
    """Which library the reader shows, for the start-up line: with the knowledge base on and no --library it is
    the knowledge base's, not the one ``chapterverse ingest`` filled, which a user would otherwise look for."""
    if settings.secret("store") is not None:
        return "library: the --store database"
    if settings.rag_enabled and settings.library is None:
        return f"library: the knowledge base's, {settings.reader_library_dir}; --library DIR for another"
    return f"library: {settings.reader_library_dir}"


def _knowledge_base_named(settings: ServeSettings, existed: bool) -> str:
    """The knowledge base's part of the start-up line: its folder (made now, if it was), where its index is written,
    and, beside a --library of the reader's own, that /v1/rag and the chat proxy search the knowledge base: a user
    who named a library expects the API to search it."""
    if not settings.rag_enabled:
        return "; knowledge base disabled (--rag_enabled to turn it on)"
    made = "" if existed else " (new and empty: created now)"
    named = (f"; /v1/rag and the chat proxy search the knowledge base, not {settings.library}"
             if settings.library is not None else "")
    return (f"; knowledge base {settings.rag_kb_path}{made}, its index written inside it in "
            f"{settings.kb_library_dir} (skipped by the folder scan){named}")


def serve(ctx: typer.Context) -> None:
    """Run the server: web reader, knowledge-base API, chat proxy.

    The OpenAI-compatible chat proxy adds retrieved passages to each request (see `serve --help`)."""
    raise typer.Exit(main(list(ctx.args)))
