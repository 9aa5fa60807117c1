"""A scripted rerank endpoint for tests: real sockets on 127.0.0.1, real HTTP, the shapes real servers answer.

    with fake_reranker(lambda query, docs: [len(d) for d in docs]) as server:
        HttpReranker(server.url).rank("q", ["a", "bbb"])   # -> [1, 0]
        server.requests[0]                                 # the JSON body it received

``score(query, documents)`` gives one score per document; the reply is Cohere's shape
(``{"results": [{"index", "relevance_score"}]}``, best first) unless the request is TEI's (``texts``), which gets
TEI's bare list (``[{"index", "score"}]``). ``status`` answers every request with that HTTP status instead, and
``delay_s`` waits before answering (timeouts).

This is a helper module, not a test file.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["FakeReranker", "fake_reranker"]

Score = Callable[[str, Sequence[str]], Sequence[float]]


@dataclass
class FakeReranker:
    url: str
    requests: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)


@contextmanager
def fake_reranker(score: Score, *, status: int = 200, delay_s: float = 0.0,
                  path: str = "/v1/rerank") -> Iterator[FakeReranker]:
    """Serve ``score`` at ``path`` on a free loopback port until the block ends."""
    holder: list[FakeReranker] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            return

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
            holder[0].requests.append(body)
            holder[0].headers.append(dict(self.headers))
            if delay_s:
                time.sleep(delay_s)
            if self.path != path or status != 200:
                self._send(status if status != 200 else 404, {"error": "scripted failure"})
                return
            tei = "texts" in body
            docs = body["texts"] if tei else body["documents"]
            scores = list(score(body["query"], docs))
            order = sorted(range(len(docs)), key=lambda i: -scores[i])
            if tei:
                self._send(200, [{"index": i, "score": scores[i]} for i in order])
            else:
                self._send(200, {"id": "r1", "results": [{"index": i, "relevance_score": scores[i]} for i in order]})

        def _send(self, code: int, payload: Any) -> None:
            data = json.dumps(payload).encode()
            try:
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (a timeout test)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    holder.append(FakeReranker(f"http://127.0.0.1:{server.server_address[1]}{path}"))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield holder[0]
    finally:
        server.shutdown()
        server.server_close()
