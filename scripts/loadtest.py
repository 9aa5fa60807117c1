"""Load run on loopback: N concurrent clients mixing searches, chat completions and upserts.

    .venv/bin/python scripts/loadtest.py --clients 1 4 16 --seconds 20

Starts a real ``chapterverse serve`` (subprocess) on a small knowledge base, with the deterministic
OpenAI-compatible fake from tests/fakellm.py as the upstream model, then drives it with N asyncio
clients for a fixed time per N. Reports throughput, p50/p99 latency per operation, errors (5xx, other
non-2xx, transport), lost writes (acknowledged upserts missing or changed afterwards), and whether
writers block readers: searches that overlapped a write against those that did not, and the longest
search that overlapped a write against the longest write (a reader blocked behind writers would wait
longer than one write); finally, searches while another process holds SQLite's write lock.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from statistics import quantiles
from tempfile import TemporaryDirectory
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from fakellm import Reply, fake_llm  # noqa: E402

QUESTIONS = ["What did the keeper find after the storm?", "What was the cat called?", "How often did the lens flash?",
             "Who rang the bell?", "Where did the logbook go?"]
WEIGHTS = {"search": 6, "chat": 3, "upsert": 1}
Interval = tuple[float, float]


@dataclass
class _Level:
    """What one load level observed; intervals are (start, end) in time.monotonic() seconds."""

    latency: dict[str, list[float]] = field(default_factory=dict)
    statuses: Counter[int] = field(default_factory=Counter)
    transport_errors: int = 0
    writes: list[Interval] = field(default_factory=list)
    searches: list[Interval] = field(default_factory=list)


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _percentile(values: list[float], q: int) -> float | None:
    """The q-th percentile in ms rounded to 0.1, or None when nothing was measured."""
    if len(values) < 2:
        return round(values[0], 1) if values else None
    return round(quantiles(values, n=100)[q - 1], 1)


async def _request(client: httpx.AsyncClient, kind: str, rng: random.Random, source: str, text: str) -> httpx.Response:
    if kind == "search":
        return await client.post("/v1/rag/search", json={"query": rng.choice(QUESTIONS), "top_k": 3})
    if kind == "chat":
        return await client.post("/v1/chat/completions", json={
            "model": "fake-model", "messages": [{"role": "user", "content": rng.choice(QUESTIONS)}]})
    return await client.post("/v1/rag/upsert/document", json={"source": source, "text": text})


async def _client(url: str, stop: float, rng: random.Random, level: _Level, acked: dict[str, str], n: int) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        i = 0
        while time.monotonic() < stop:
            i += 1
            kind = rng.choices(list(WEIGHTS), weights=list(WEIGHTS.values()))[0]
            source, text = f"load/c{n}-{i}.md", f"Load note {n}-{i}: the tide rose {i % 9} feet at dawn."
            started = time.monotonic()
            try:
                reply = await _request(client, kind, rng, source, text)
            except httpx.HTTPError:
                level.transport_errors += 1
                continue
            ended = time.monotonic()
            level.latency.setdefault(kind, []).append((ended - started) * 1000)
            level.statuses[reply.status_code] += 1
            if kind == "search":
                level.searches.append((started, ended))
            elif kind == "upsert":
                level.writes.append((started, ended))
                if reply.status_code == 200:
                    acked[source] = text


def _overlaps(search: Interval, writes: list[Interval]) -> bool:
    return any(w0 < search[1] and w1 > search[0] for w0, w1 in writes)


def _reader_figures(level: _Level) -> dict[str, Any]:
    """Searches that overlapped a write against those that did not: equal latencies mean no blocking."""
    during = [(e - s) * 1000 for s, e in level.searches if _overlaps((s, e), level.writes)]
    alone = [(e - s) * 1000 for s, e in level.searches if not _overlaps((s, e), level.writes)]
    return {"searches_during_write": len(during),
            "search_during_write_p50_ms": _percentile(during, 50),
            "search_no_write_p50_ms": _percentile(alone, 50),
            "max_search_during_write_ms": round(max(during, default=0.0), 1),
            "max_write_ms": round(max(((e - s) * 1000 for s, e in level.writes), default=0.0), 1)}


async def _run_level(url: str, clients: int, seconds: float, acked: dict[str, str]) -> dict[str, Any]:
    level = _Level()
    stop = time.monotonic() + seconds
    await asyncio.gather(*(_client(url, stop, random.Random(c), level, acked, c + clients * 1000)
                           for c in range(clients)))
    total = sum(len(v) for v in level.latency.values())
    row: dict[str, Any] = {
        "clients": clients, "requests_per_s": round(total / seconds, 1),
        "errors_5xx": sum(n for code, n in level.statuses.items() if code >= 500),
        "other_non_2xx": sum(n for code, n in level.statuses.items() if code < 200 or 300 <= code < 500),
        "transport_errors": level.transport_errors}
    for kind, values in sorted(level.latency.items()):
        row[f"{kind}_n"] = len(values)
        row[f"{kind}_p50_ms"] = _percentile(values, 50)
        row[f"{kind}_p99_ms"] = _percentile(values, 99)
    return row | _reader_figures(level)


def _lost_writes(url: str, acked: dict[str, str]) -> list[str]:
    """Acknowledged upserts whose stored text is missing or differs from what was sent."""
    reply = httpx.get(f"{url}/v1/rag/chunks", params={"source_prefix": "load/", "limit": 10_000}, timeout=60)
    reply.raise_for_status()
    stored: dict[str, list[str]] = {}
    for item in reply.json()["items"]:
        stored.setdefault(item["source"], []).append(item["text"])
    return sorted(s for s, text in acked.items() if " ".join(stored.get(s, [])).strip() != text)


def _timed_searches(url: str, count: int) -> list[float]:
    out = []
    for n in range(count):
        started = time.monotonic()
        httpx.post(f"{url}/v1/rag/search", json={"query": QUESTIONS[n % len(QUESTIONS)]}, timeout=60).raise_for_status()
        out.append((time.monotonic() - started) * 1000)
    return out


def _lock_probe(url: str, database: Path, searches: int = 10, rounds: int = 3) -> dict[str, Any]:
    """Searches while another process holds SQLite's write lock (``BEGIN IMMEDIATE``) against searches without.

    Under load a search next to a write also shares two CPUs with it; holding the lock from outside with no
    work behind it isolates the question "does a writer block readers?" from CPU contention. A blocked search
    would last until the lock is released, so the longest search is compared with how long the lock was held.
    Rounds alternate so that other load on the machine falls on both sides alike.
    """
    free: list[float] = []
    held: list[float] = []
    longest_hold = 0.0
    for _ in range(rounds):
        free += _timed_searches(url, searches)
        writer = sqlite3.connect(database, isolation_level=None)
        try:
            writer.execute("BEGIN IMMEDIATE")
            since = time.monotonic()
            held += _timed_searches(url, searches)
            longest_hold = max(longest_hold, time.monotonic() - since)
            writer.execute("ROLLBACK")
        finally:
            writer.close()
    return {"searches_each": len(free), "longest_lock_hold_s": round(longest_hold, 2),
            "p50_search_ms_lock_free": _percentile(free, 50), "p50_search_ms_lock_held": _percentile(held, 50),
            "max_search_ms_lock_free": round(max(free), 1), "max_search_ms_lock_held": round(max(held), 1)}


@contextmanager
def _server(kb: Path, upstream: str) -> Iterator[str]:
    """A real ``chapterverse serve`` subprocess on a free port, ready to search; yields its URL."""
    port = _port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([sys.executable, "-m", "chapterverse", "serve", "--rag_enabled", "--rag_kb_path",
                             str(kb), "--port", str(port), "--llm_base_url", upstream, "--llm_model",
                             "fake-model", "--rag_language", "en", "--log-level", "warning"], env={**os.environ})
    try:
        for _ in range(600):
            try:
                httpx.post(f"{url}/v1/rag/search", json={"query": "warm"}, timeout=60).raise_for_status()
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait()


def run(clients: list[int], seconds: float) -> dict[str, Any]:
    """The whole load run: one server, one level per entry of ``clients``, then the lost-write check."""
    demo = Path(__file__).resolve().parents[1] / "src" / "chapterverse" / "demo"
    load_before = os.getloadavg()[0]
    with TemporaryDirectory() as tmp, fake_llm(default=Reply.text("The keeper found a logbook.")) as fake:
        kb = Path(tmp) / "kb"
        kb.mkdir()
        for path in demo.iterdir():
            (kb / path.name).write_bytes(path.read_bytes())
        with _server(kb, fake.base_url) as url:
            acked: dict[str, str] = {}
            rows = [asyncio.run(_run_level(url, n, seconds, acked)) for n in clients]
            lost = _lost_writes(url, acked)
            probe = _lock_probe(url, kb / ".chapterverse" / "library.sqlite3")
    return {"levels": rows, "acknowledged_writes": len(acked), "lost_writes": len(lost), "lost": lost[:20],
            "write_lock_probe": probe,
            "machine": {"cpus": os.cpu_count(), "load_avg_1min_before": round(load_before, 2),
                        "load_avg_1min_after": round(os.getloadavg()[0], 2)}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 4, 16], help="concurrent clients per level")
    parser.add_argument("--seconds", type=float, default=20, help="duration of each level")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args()
    report = run(args.clients, args.seconds)
    if args.json:
        print(json.dumps(report, indent=2))
        return
    rows = report["levels"]
    keys = list(dict.fromkeys(k for row in rows for k in row))
    print(" | ".join(keys))
    for row in rows:
        print(" | ".join(str(row.get(k, "")) for k in keys))
    print(f"acknowledged writes: {report['acknowledged_writes']}, lost: {report['lost_writes']}")
    print(f"searches with SQLite's write lock held by another process: {report['write_lock_probe']}")
    print(f"machine: {report['machine']}")


if __name__ == "__main__":
    main()
