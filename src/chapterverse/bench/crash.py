"""Crash safety, proven: SIGKILL a real server during a stream of acknowledged writes, restart, verify.

Each trial starts ``chapterverse serve`` on a knowledge-base folder, sends writes one at a time
(``upsert/document`` and ``add/chunks`` with short, unique texts, so each write is exactly one
chunk whose text we know), kills the process with SIGKILL at a random moment, starts it again and
checks three promises:

- every write the server acknowledged (HTTP 200 received) is present, with its exact text;
- a write in flight when the process died is either wholly present or wholly absent;
- rows, the lexical index and the vectors agree (``SQLiteStore.integrity_problems``).
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from ..store import open_store

__all__ = ["TrialReport", "run_crash_trials"]


@dataclass(slots=True)
class TrialReport:
    acknowledged: int = 0
    in_flight: int = 0
    lost: list[str] = field(default_factory=list)
    half_written: list[str] = field(default_factory=list)
    integrity: list[str] = field(default_factory=list)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _start(kb: Path, port: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "chapterverse", "serve", "--rag_enabled", "--rag_kb_path", str(kb),
         "--port", str(port), "--log-level", "warning"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ})


def _wait_ready(url: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/v1/rag/status", timeout=2).status_code == 200:
                # A search waits for the embedding model, so the kill lands among writes, not model loading.
                httpx.post(f"{url}/v1/rag/search", json={"query": "warm up"}, timeout=timeout).raise_for_status()
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"server at {url} did not become ready")


def _write(client: httpx.Client, n: int, trial: int) -> tuple[str, str]:
    source = f"crash/t{trial}-w{n}.md"
    text = f"Write {n} of trial {trial}: the keeper logged tide {n * 7 % 13} and wind {n * 3 % 11}."
    if n % 2:
        client.post("/v1/rag/upsert/document", json={"source": source, "text": text, "persist": True})\
            .raise_for_status()
    else:
        item = {"text": text, "source": source, "metadata": {"n": n}}
        client.post("/v1/rag/add/chunks", json={"items": [item], "persist": True}).raise_for_status()
    return source, text


def _trial(kb: Path, trial: int, rng: random.Random, expected: dict[str, str]) -> TrialReport:
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    proc = _start(kb, port)
    report = TrialReport()
    try:
        _wait_ready(url)
        kill_at = time.monotonic() + rng.uniform(0.3, 2.5)
        killer = threading.Timer(max(0.0, kill_at - time.monotonic()), proc.send_signal, [signal.SIGKILL])
        killer.start()
        pending: dict[str, str] = {}
        with httpx.Client(base_url=url, timeout=10) as client:
            for n in range(10_000):
                try:
                    source, text = _write(client, n, trial)
                except httpx.HTTPError:
                    pending[f"crash/t{trial}-w{n}.md"] = f"Write {n} of trial {trial}:"
                    break
                expected[source] = text
                report.acknowledged += 1
        killer.cancel()
        report.in_flight = len(pending)
    finally:
        proc.kill()
        proc.wait()
    _verify(kb, expected, pending, report)
    return report


def _verify(kb: Path, expected: dict[str, str], pending: dict[str, str], report: TrialReport) -> None:
    store = open_store(kb / ".chapterverse")
    report.integrity = store.integrity_problems()
    texts: dict[str, list[str]] = {}
    for chunk in store.chunks(source_prefix="crash/"):
        texts.setdefault(chunk.source, []).append(chunk.text)
    store.close()
    for source, text in expected.items():
        if texts.get(source) != [text]:
            report.lost.append(source)
    for source, prefix in pending.items():
        stored = texts.get(source)
        if stored is not None and (len(stored) != 1 or not stored[0].startswith(prefix)):
            report.half_written.append(source)


def run_crash_trials(kb: Path, trials: int, *, seed: int = 0) -> list[TrialReport]:
    """Run ``trials`` kill/restart cycles on the knowledge base at ``kb`` (created when missing)."""
    rng = random.Random(seed)
    expected: dict[str, str] = {}
    return [_trial(kb, trial, rng, expected) for trial in range(trials)]
