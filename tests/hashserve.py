"""``chapterverse serve`` as its own process, with the tests' hashing embedder in place of the default model:
the whole serve path (socket, uvicorn, app, knowledge base), each query embedded in microseconds, not
milliseconds, so that a soak test's requests are cheap. A helper, not a test file:

    python tests/hashserve.py --rag_enabled --rag_kb_path KB --port PORT

It writes ``None's references: <n> serving`` to stderr once the app is built, and ``None's references: <n> at
exit`` after the server stopped (Ctrl-C, SIGINT): on Python 3.11 that count is what a refcount leak in a C extension
eats (issue 28).
"""

from __future__ import annotations

import sys
from typing import Any

import chapterverse.server.app as app
from hashembed import HashingEmbedder

from chapterverse.server.serve_command import main

_create_app = app.create_app


def _say_references(when: str) -> None:
    print(f"None's references: {sys.getrefcount(None)} {when}", file=sys.stderr, flush=True)


def _counted_create_app(*args: Any, **kwargs: Any) -> Any:
    built = _create_app(*args, **kwargs)
    _say_references("serving")
    return built


if __name__ == "__main__":
    app.load_embedder = lambda spec, **options: HashingEmbedder()  # type: ignore[assignment]
    app.create_app = _counted_create_app
    code = main(sys.argv[1:])
    _say_references("at exit")
    sys.exit(code)
