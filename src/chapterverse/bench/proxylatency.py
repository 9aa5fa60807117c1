"""``chapterverse bench proxy``: the time to first token the proxy adds, at 1 k and 100 k chunks.

What a voice user feels is the time from the end of their question to the first word of the answer. Here the
same streamed chat request goes to a scripted upstream on 127.0.0.1 twice per question, once directly and once
through ``chapterverse serve --rag_enabled`` (a separate process, its knowledge base holding N chunks), and the
time to the first non-empty content delta is taken for each; the proxy's added latency is the per-question
difference. Direct and proxied requests alternate (which goes first alternates too), so both see the same
neighbours on a shared machine.

The knowledge bases are the ones ``bench scale`` builds (``scale.build_library``: ~500-character passages of
real English text, 1,000 chunks per document): real default-embedder vectors up to ``real_limit`` chunks,
random unit vectors above it (only speed is measured there; the index then searches exactly, its slowest way).
The proxy runs with its defaults (top 3, threshold 0.25, the default embedder), so each proxied question pays
embedding the question, hybrid retrieval, injection and the tag filter on the relayed stream.
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

from ..embeddings import load_embedder
from ..store import SQLiteStore
from .scale import _cached_embed, _shared, bench_questions, build_library, text_pool

__all__ = ["DEFAULT_WORKDIR", "ProxyLatency", "run_proxy_bench", "scripted_upstream"]

DEFAULT_WORKDIR = Path(tempfile.gettempdir()) / "chapterverse-bench-proxy"
ANSWER = ("The", " answer", " is", " in", " the", " second", " chapter", ".")
"""What the scripted upstream streams, one piece per chunk, at once."""

Echo = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class ProxyLatency:
    chunks: int
    vectors: str
    questions: int
    direct_p50_ms: float
    direct_p99_ms: float
    proxy_p50_ms: float
    proxy_p99_ms: float
    added_p50_ms: float
    added_p99_ms: float
    injected: float
    """Share of proxied questions whose request reached the upstream with context injected."""
    load: str

    def to_json(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}


# -- the scripted upstream ------------------------------------------------------------------------------------


class _Upstream(ThreadingHTTPServer):
    daemon_threads = True
    injected = 0
    requests = 0


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        return

    def setup(self) -> None:
        """No Nagle: each small event leaves at once, as a real streaming server's do."""
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        server = self.server
        assert isinstance(server, _Upstream)
        server.requests += 1
        server.injected += any(m.get("role") == "system" for m in body.get("messages", []) if isinstance(m, dict))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        deltas = [{"role": "assistant", "content": ""}, *({"content": piece} for piece in ANSWER)]
        for delta in deltas:
            self._event(json.dumps({"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m",
                                    "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}))
        self._event(json.dumps({"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m",
                                "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}))
        self._event("[DONE]")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _event(self, data: str) -> None:
        payload = f"data: {data}\n\n".encode()
        self.wfile.write(f"{len(payload):x}\r\n".encode() + payload + b"\r\n")
        self.wfile.flush()


@contextmanager
def scripted_upstream() -> Iterator[_Upstream]:
    """An OpenAI-compatible chat endpoint on a free loopback port that streams :data:`ANSWER` at once."""
    server = _Upstream(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


# -- measuring -----------------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def served(kb: Path, *options: str, timeout_s: float = 900) -> Iterator[str]:
    """``chapterverse serve --rag_enabled`` over ``kb`` (and ``options``) in its own process; its base URL once it
    answers. Its stderr goes to a file (a pipe nobody reads would fill and stall it), shown if it exits early."""
    port = _free_port()
    command = [sys.executable, "-m", "chapterverse", "serve", "--rag_enabled", "--rag_kb_path", str(kb), *options,
               "--port", str(port), "--log_level", "warning"]
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log)
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + timeout_s
            while True:
                if proc.poll() is not None:
                    log.seek(0)
                    raise RuntimeError(f"the server exited: {log.read().decode(errors='replace')[-2000:]}")
                try:
                    if httpx.get(f"{url}/v1/rag/status", timeout=5).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the server did not start within {timeout_s:g} s")
                time.sleep(0.2)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()


def first_token_ms(client: httpx.Client, url: str, question: str) -> float:
    """Milliseconds from sending a streamed chat request to its first non-empty content delta."""
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": question}]}
    started = time.perf_counter()
    with client.stream("POST", f"{url}/v1/chat/completions", json=body) as reply:
        reply.raise_for_status()
        lines = reply.iter_lines()
        for line in lines:
            if not line.startswith("data:") or line.endswith("[DONE]"):
                continue
            choices = json.loads(line[5:]).get("choices") or [{}]
            if (choices[0].get("delta") or {}).get("content"):
                elapsed = (time.perf_counter() - started) * 1000
                for _ in lines:  # read the rest, so the connection is reused
                    pass
                return elapsed
    raise RuntimeError(f"{url} streamed no content")


def _percentile(values: Sequence[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def measure(kb: Path, chunks: int, vectors: str, questions: Sequence[str], warmup: int = 5) -> ProxyLatency:
    """Paired direct and proxied first-token times for ``questions`` against the knowledge base in ``kb``."""
    with scripted_upstream() as upstream:
        direct = f"http://127.0.0.1:{upstream.server_address[1]}/v1"
        with served(kb, "--llm_base_url", direct) as proxied, httpx.Client(timeout=60) as client:
            for question in questions[:warmup]:
                first_token_ms(client, proxied, question)
                first_token_ms(client, direct.removesuffix("/v1"), question)
            upstream.requests = upstream.injected = 0
            direct_ms: list[float] = []
            proxy_ms: list[float] = []
            for number, question in enumerate(questions):
                pair = [(direct_ms, direct.removesuffix("/v1")), (proxy_ms, proxied)]
                for times, url in pair if number % 2 == 0 else pair[::-1]:
                    times.append(first_token_ms(client, url, question))
            injected = upstream.injected / max(len(questions), 1)
    added = [p - d for p, d in zip(proxy_ms, direct_ms)]
    return ProxyLatency(chunks, vectors, len(questions), round(statistics.median(direct_ms), 2),
                        round(_percentile(direct_ms, 0.99), 2), round(statistics.median(proxy_ms), 2),
                        round(_percentile(proxy_ms, 0.99), 2), round(statistics.median(added), 2),
                        round(_percentile(added, 0.99), 2), round(injected, 3),
                        " ".join(f"{x:.2f}" for x in os.getloadavg()))


def run_proxy_bench(sizes: Sequence[int], *, queries: int = 200, real_limit: int = 10_000,
                    workdir: Path | None = None, shared: Path | None = None,
                    echo: Echo | None = None) -> list[ProxyLatency]:
    """Build (or reuse) a knowledge base per size under ``workdir`` and measure the proxy's added latency."""
    say: Echo = echo or (lambda line: print(line, file=sys.stderr))
    workdir = workdir or DEFAULT_WORKDIR
    workdir.mkdir(parents=True, exist_ok=True)
    shared_dir = _shared(shared)
    pool = text_pool(shared_dir)
    questions = bench_questions(shared_dir, queries)
    embedder = load_embedder(None)
    rows: list[ProxyLatency] = []
    for n in sizes:
        real = n <= min(real_limit, len(pool))
        kb = workdir / f"n{n}-{'real' if real else 'random'}"
        kb.mkdir(parents=True, exist_ok=True)
        vectors = None
        if real:
            cache = SQLiteStore(workdir / "embedding-cache.sqlite3")
            try:
                vectors = _cached_embed(cache, embedder, pool[:n], echo=say)
            finally:
                cache.close()
        say(f"knowledge base of {n:,} chunks ({'real' if real else 'random'} vectors) in {kb}")
        build_library(kb / ".chapterverse", n, pool, vectors, embedder.dim, embedder.name, say)
        say(f"  measuring {len(questions)} questions")
        rows.append(measure(kb, n, "real" if real else "random", questions))
    return rows
