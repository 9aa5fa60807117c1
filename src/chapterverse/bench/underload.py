"""``chapterverse bench underload``: small searches' latency while other clients send the server heavy work.

A ranked ``/v1/rag/chunks/list`` (every chunk scored) or a batch upsert its client abandoned must not slow
every small search. This measures small
``/v1/rag/search`` requests (XQuAD questions, top 5) against ``chapterverse serve --rag_enabled`` in its own
process, over a knowledge base that ``bench scale`` builds (``scale.build_library``), in phases:

- ``idle``: nothing else runs;
- ``abandoned batches``: a client sends ``upsert/documents`` batches of large documents (1,000 x 9.5 KB by
  default, the issue's) and gives each up after ``abandon_s`` seconds, again and again;
- ``ranked lists``: ``ranked`` clients ask ranked ``chunks/list`` pages in a loop;
- ``both`` at once, then ``idle after``: whether the server went back to idle once the attackers stopped.

Each phase reports the searches' p50/p99, what the attackers got done, and the load average at its end (the
machine may be shared: read the searches' idle numbers of the same run as the baseline).
"""

from __future__ import annotations

import functools
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from ..embeddings import load_embedder
from .proxylatency import served
from .scale import _shared, bench_questions, build_library, text_pool

__all__ = ["DEFAULT_WORKDIR", "PhaseReport", "run_underload_bench"]

DEFAULT_WORKDIR = Path(tempfile.gettempdir()) / "chapterverse-bench-underload"
PHASES = ("idle", "abandoned batches", "ranked lists", "both", "idle after")

Echo = Callable[[str], None]


@dataclass(slots=True)
class PhaseReport:
    phase: str
    searches: int
    p50_ms: float
    p99_ms: float
    batches_sent: int
    ranked_lists: int
    ranked_p50_ms: float | None
    load: str

    def to_json(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}


@dataclass
class _Attack:
    """Attacker threads and what they got done; ``stop`` ends them."""

    stop: threading.Event = field(default_factory=threading.Event)
    batches: int = 0
    ranked_ms: list[float] = field(default_factory=list)
    threads: list[threading.Thread] = field(default_factory=list)

    def start(self, target: Callable[[], None], name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        self.threads.append(thread)
        thread.start()

    def end(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(60)


def _client(timeout: httpx.Timeout | float) -> httpx.Client:
    """A client that opens a connection per request, as the figures in docs/BENCHMARKS.md were measured. (They
    were measured so because a kept-alive connection then waited about 40 ms an answer for the client's delayed
    ACK; the server now sets TCP_NODELAY, and kept-alive connections no longer wait.)"""
    return httpx.Client(timeout=timeout, limits=httpx.Limits(max_keepalive_connections=0))


def _percentile(values: Sequence[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def batch_body(pool: Sequence[str], documents: int, chars: int) -> bytes:
    """An ``upsert/documents`` body of ``documents`` distinct texts of ``chars`` characters each."""
    docs = []
    for n in range(documents):
        text, at = f"Batch document {n}.", n
        while len(text) < chars:
            text += " " + pool[at % len(pool)]
            at += documents
        docs.append({"source": f"bench-batch/{n:05d}", "text": text[:chars]})
    return json.dumps({"documents": docs}).encode()


def _abandon_batches(url: str, body: bytes, abandon_s: float, attack: _Attack) -> None:
    """Send the batch, give it up after ``abandon_s`` (the client disconnects), and again, until stopped."""
    timeout = httpx.Timeout(60, read=abandon_s)
    while not attack.stop.is_set():
        with _client(timeout) as client:
            try:
                client.post(f"{url}/v1/rag/upsert/documents", content=body,
                            headers={"Content-Type": "application/json"})
            except httpx.TimeoutException:
                pass
        attack.batches += 1


def _rank_lists(url: str, questions: Sequence[str], attack: _Attack, offset: int) -> None:
    with _client(600) as client:
        n = offset
        while not attack.stop.is_set():
            started = time.perf_counter()
            client.post(f"{url}/v1/rag/chunks/list", json={"query": questions[n % len(questions)], "limit": 100,
                                                           "include_text": False}).raise_for_status()
            attack.ranked_ms.append((time.perf_counter() - started) * 1000)
            n += 7


def _searches(client: httpx.Client, url: str, questions: Sequence[str], seconds: float, least: int) -> list[float]:
    """Milliseconds of each small search asked one after another for ``seconds`` (at least ``least`` of them)."""
    times: list[float] = []
    started = time.monotonic()
    while time.monotonic() - started < seconds or len(times) < least:
        question = questions[len(times) % len(questions)]
        begin = time.perf_counter()
        client.post(f"{url}/v1/rag/search", json={"query": question, "top_k": 5}).raise_for_status()
        times.append((time.perf_counter() - begin) * 1000)
    return times


def _phase(name: str, url: str, questions: Sequence[str], seconds: float, batch: bytes, abandon_s: float,
           ranked: int) -> PhaseReport:
    attack = _Attack()
    if name in ("abandoned batches", "both"):
        attack.start(lambda: _abandon_batches(url, batch, abandon_s, attack), "batch")
    if name in ("ranked lists", "both"):
        for n in range(ranked):
            attack.start(functools.partial(_rank_lists, url, questions, attack, n), f"ranked-{n}")
    try:
        with _client(600) as client:
            times = _searches(client, url, questions, seconds, least=20)
    finally:
        load = " ".join(f"{x:.2f}" for x in os.getloadavg())
        attack.end()
    ranked_ms = list(attack.ranked_ms)
    return PhaseReport(name, len(times), round(statistics.median(times), 1), round(_percentile(times, 0.99), 1),
                       attack.batches, len(ranked_ms), round(statistics.median(ranked_ms), 1) if ranked_ms else None,
                       load)


def run_underload_bench(*, chunks: int = 20_000, seconds: float = 30, documents: int = 1_000,
                        document_chars: int = 9_500, abandon_s: float = 20, ranked: int = 4,
                        workdir: Path | None = None, shared: Path | None = None,
                        echo: Echo | None = None) -> list[PhaseReport]:
    """Build (or reuse) a knowledge base of ``chunks`` chunks (random vectors) and time small searches in each
    phase of :data:`PHASES`, ``seconds`` each."""
    say: Echo = echo or (lambda line: print(line, file=sys.stderr))
    workdir = workdir or DEFAULT_WORKDIR
    shared_dir = _shared(shared)
    pool = text_pool(shared_dir)
    questions = bench_questions(shared_dir, 500)
    embedder = load_embedder(None)
    kb = workdir / f"n{chunks}-random"
    kb.mkdir(parents=True, exist_ok=True)
    say(f"knowledge base of {chunks:,} chunks (random vectors) in {kb}")
    build_library(kb / ".chapterverse", chunks, pool, None, embedder.dim, embedder.name, say)
    batch = batch_body(pool, documents, document_chars)
    rows: list[PhaseReport] = []
    with served(kb) as url:
        with _client(600) as client:
            _searches(client, url, questions, 0, least=20)  # warm up
        for name in PHASES:
            say(f"  {name}: {seconds:g} s of small searches")
            rows.append(_phase(name, url, questions, seconds, batch, abandon_s, ranked))
    return rows
