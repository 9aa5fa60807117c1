"""Load run on loopback: N concurrent clients mixing searches, chat completions and upserts.

    .venv/bin/python scripts/loadtest.py --clients 1 4 16 --seconds 20

Starts a real ``chapterverse serve`` (subprocess) on a small knowledge base, with the deterministic
OpenAI-compatible fake from tests/fakellm.py as the upstream model, then drives it with N asyncio
clients for a fixed time per N. Reports throughput, p50/p99 latency per operation, errors (5xx and
transport), lost writes (acknowledged upserts missing afterwards), and the longest search latency
observed while a write was in flight (writers must not block readers for longer than one write).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import subprocess
import sys
import time
from pathlib import Path
from statistics import quantiles
from tempfile import TemporaryDirectory

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from fakellm import Reply, fake_llm  # noqa: E402

QUESTIONS = ["What did the keeper find after the storm?", "What was the cat called?", "How often did the lens flash?",
             "Who rang the bell?", "Where did the logbook go?"]


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _percentile(values: list[float], q: int) -> float:
    if len(values) < 2:
        return values[0] if values else 0.0
    return quantiles(values, n=100)[q - 1]


async def _client(url: str, stop: float, rng: random.Random, stats: dict, acked: dict[str, str], n: int) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        i = 0
        while time.monotonic() < stop:
            i += 1
            kind = rng.choices(["search", "chat", "upsert"], weights=[6, 3, 1])[0]
            started = time.monotonic()
            try:
                if kind == "search":
                    reply = await client.post("/v1/rag/search", json={"query": rng.choice(QUESTIONS), "top_k": 3})
                elif kind == "chat":
                    reply = await client.post("/v1/chat/completions", json={
                        "model": "fake-model", "messages": [{"role": "user", "content": rng.choice(QUESTIONS)}]})
                else:
                    source = f"load/c{n}-{i}.md"
                    text = f"Load note {n}-{i}: the tide rose {i % 9} feet at dawn."
                    stats["writing"] += 1
                    try:
                        reply = await client.post("/v1/rag/upsert/document", json={"source": source, "text": text})
                    finally:
                        stats["writing"] -= 1
                    if reply.status_code == 200:
                        acked[source] = text
            except httpx.HTTPError:
                stats["transport_errors"] += 1
                continue
            elapsed = (time.monotonic() - started) * 1000
            stats["latency"].setdefault(kind, []).append(elapsed)
            if kind == "search" and stats["writing"]:
                stats["search_during_write"].append(elapsed)
            if reply.status_code >= 500:
                stats["errors_5xx"] += 1


async def _run_level(url: str, clients: int, seconds: float, acked: dict[str, str]) -> dict:
    stats: dict = {"latency": {}, "errors_5xx": 0, "transport_errors": 0, "writing": 0, "search_during_write": []}
    stop = time.monotonic() + seconds
    await asyncio.gather(*(_client(url, stop, random.Random(c), stats, acked, c + clients * 1000)
                           for c in range(clients)))
    total = sum(len(v) for v in stats["latency"].values())
    row = {"clients": clients, "requests_per_s": round(total / seconds, 1), "errors_5xx": stats["errors_5xx"],
           "transport_errors": stats["transport_errors"]}
    for kind, values in sorted(stats["latency"].items()):
        row[f"{kind}_p50_ms"] = round(_percentile(values, 50), 1)
        row[f"{kind}_p99_ms"] = round(_percentile(values, 99), 1)
    row["max_search_during_write_ms"] = round(max(stats["search_during_write"], default=0.0), 1)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    demo = Path(__file__).resolve().parents[1] / "src" / "chapterverse" / "demo"
    with TemporaryDirectory() as tmp, fake_llm(default=Reply.text("The keeper found a logbook.")) as fake:
        kb = Path(tmp) / "kb"
        kb.mkdir()
        for path in demo.iterdir():
            (kb / path.name).write_bytes(path.read_bytes())
        port = _port()
        url = f"http://127.0.0.1:{port}"
        proc = subprocess.Popen([sys.executable, "-m", "chapterverse", "serve", "--rag_enabled", "--rag_kb_path",
                                 str(kb), "--port", str(port), "--llm_base_url", fake.base_url, "--llm_model",
                                 "fake-model", "--rag_language", "en", "--log-level", "warning"], env={**os.environ})
        try:
            for _ in range(600):
                try:
                    httpx.post(f"{url}/v1/rag/search", json={"query": "warm"}, timeout=60).raise_for_status()
                    break
                except httpx.HTTPError:
                    time.sleep(0.1)
            acked: dict[str, str] = {}
            rows = [asyncio.run(_run_level(url, n, args.seconds, acked)) for n in args.clients]
            listed = httpx.get(f"{url}/v1/rag/sources", timeout=60).json()["items"]
            present = {item["source"] for item in listed}
            lost = sorted(set(acked) - present)
        finally:
            proc.terminate()
            proc.wait()
    report = {"levels": rows, "acknowledged_writes": len(acked), "lost_writes": len(lost)}
    if args.json:
        print(json.dumps(report, indent=2))
        return
    keys = list(rows[0])
    print(" | ".join(keys))
    for row in rows:
        print(" | ".join(str(row.get(k, "")) for k in keys))
    print(f"acknowledged writes: {len(acked)}, lost: {len(lost)}")


if __name__ == "__main__":
    main()
