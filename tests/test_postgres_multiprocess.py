"""Several processes on one PostgreSQL library: a write through one is visible to searches on the other.

Two real OS processes each open their own ``Library`` over the same ``postgresql://`` URL (as two
``chapterverse serve`` processes do) and are driven line by line over stdin/stdout, so the test decides
exactly when each one writes and reads. ``test_two_serve_processes`` does the same through the HTTP API
of two ``chapterverse serve --store`` processes, and the startup tests check that a server starting on a
shared database neither races another's folder sync nor drops another's acknowledged writes.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pgfixture import pg_schema_url, pg_url  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.postgres, pytest.mark.slow]  # server processes started and killed

WORKER = r'''
import json, sys, zlib
import numpy as np
from chapterverse.analysis import word_tokens
from chapterverse.embeddings import Embedder
from chapterverse import Library
from chapterverse.store import open_store

class HashEmbedder(Embedder):
    name = "hash-bow"
    def __init__(self):
        self._dim = 16
    def _embed_batch(self, texts):
        out = np.full((len(texts), 16), 1e-3)
        for row, text in enumerate(texts):
            for word in word_tokens(text):
                out[row, zlib.crc32(word.encode()) % 16] += 1.0
        return out

library = Library(sys.argv[2], embedder=HashEmbedder(), store=open_store(sys.argv[1]))
print(json.dumps({"ready": True}), flush=True)
for line in sys.stdin:
    op = json.loads(line)
    if op["op"] == "ingest":
        done = library.ingest([op["path"]])
        reply = {"doc_ids": [r.document.id for r in done], "changed": [r.changed for r in done]}
    elif op["op"] == "search":
        reply = {"hits": [[h.chunk.source, h.text] for h in library.search(op["query"], k=3)],
                 "generation": library.store.generation()}
    elif op["op"] == "remove":
        library.remove(op["doc_id"])
        reply = {"removed": op["doc_id"]}
    elif op["op"] == "check":
        reply = {"problems": library.store.integrity_problems(), "documents": len(library.documents())}
    print(json.dumps(reply), flush=True)
'''


class Worker:
    """One process with its own Library over the shared database."""

    def __init__(self, url: str, home: Path, script: Path) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.process = subprocess.Popen([sys.executable, str(script), url, str(home)], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        assert self._read() == {"ready": True}

    def _read(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            assert self.process.stderr is not None
            raise AssertionError(f"worker died: {self.process.stderr.read()[-3000:]}")
        return json.loads(line)  # type: ignore[no-any-return]

    def send(self, **op: Any) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(op) + "\n")
        self.process.stdin.flush()

    def ask(self, **op: Any) -> dict[str, Any]:
        self.send(**op)
        return self._read()

    def close(self) -> None:
        if self.process.stdin:
            self.process.stdin.close()
        self.process.wait(timeout=30)


@contextmanager
def workers(url: str, tmp_path: Path, count: int) -> Iterator[list[Worker]]:
    script = tmp_path / "worker.py"
    script.write_text(WORKER, encoding="utf-8")
    started: list[Worker] = []
    try:
        for n in range(count):
            started.append(Worker(url, tmp_path / f"home{n}", script))
        yield started
    finally:
        for worker in started:
            worker.close()


def _book(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_a_write_in_one_process_is_searchable_in_the_other(pg_schema_url: str, tmp_path: Path) -> None:  # noqa: F811
    lighthouse = _book(tmp_path, "lighthouse.md", "# The Lamp\n\nMarta wound the clockwork of the great lens "
                       "every four hours, and the white flash reached twenty miles out to sea.\n")
    with workers(pg_schema_url, tmp_path, 2) as (writer, reader):
        before = reader.ask(op="search", query="clockwork lens flash")
        assert before["hits"] == [] and before["generation"] == 0
        doc_id = writer.ask(op="ingest", path=str(lighthouse))["doc_ids"][0]
        after = reader.ask(op="search", query="clockwork lens flash")  # no wait, no reload: committed is visible
        assert after["generation"] == 1 and after["hits"][0][0] == "lighthouse.md"
        assert "clockwork" in after["hits"][0][1]
        assert reader.ask(op="ingest", path=str(lighthouse))["changed"] == [False]  # the other's write counts
        reader.ask(op="remove", doc_id=doc_id)
        gone = writer.ask(op="search", query="clockwork lens flash")
        assert gone["hits"] == [] and gone["generation"] == 2
        assert writer.ask(op="check") == {"problems": [], "documents": 0}


def test_concurrent_ingests_from_two_processes(pg_schema_url: str, tmp_path: Path) -> None:  # noqa: F811
    books = [_book(tmp_path, f"book{n}.md", "\n\n".join(
        f"# Chapter {c}\n\nIn book {n}, chapter {c}, the keeper counted {c * 7 + n} ships and wrote "
        f"their names in the log by the light of the lamp." for c in range(40))) for n in range(4)]
    with workers(pg_schema_url, tmp_path, 2) as pair:
        for n, worker in enumerate(pair):  # both write at the same time: serialized, never interleaved
            worker.send(op="ingest", path=str(books[n]))
        for worker in pair:
            assert worker._read()["changed"] == [True]
        for n, worker in enumerate(pair):
            worker.send(op="ingest", path=str(books[n + 2]))
        for worker in pair:
            assert worker._read()["changed"] == [True]
        for worker in pair:
            check = worker.ask(op="check")
            assert check == {"problems": [], "documents": 4}
            assert worker.ask(op="search", query="ships keeper log")["generation"] == 4


# ------------------------------------------------------------------------------------------------ servers


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Served:
    """One ``chapterverse serve --store`` process."""

    process: subprocess.Popen[bytes]
    base: str
    log: Path

    def wait_until_up(self) -> None:
        import httpx

        deadline = time.monotonic() + 180
        while True:
            try:
                if httpx.get(f"{self.base}/v1/rag/status", timeout=5).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"chapterverse serve did not start: {self.log.read_text()[-3000:]}")
            time.sleep(0.5)

    def post(self, path: str, body: dict[str, Any]) -> Any:
        import httpx

        response = httpx.post(f"{self.base}{path}", json=body, timeout=60)
        assert response.status_code == 200, response.text
        return response.json()

    def status(self) -> Any:
        import httpx

        return httpx.get(f"{self.base}/v1/rag/status", timeout=60).json()


@contextmanager
def _servers(url: str, tmp_path: Path, *folders: Path) -> Iterator[list[Served]]:
    """A server per folder, all launched at once (so their startups overlap); yielded once every one answers."""
    started: list[Served] = []
    try:
        for kb in folders:
            port = _free_port()
            log = tmp_path / f"serve-{port}.log"
            command = [str(Path(sys.executable).with_name("chapterverse")), "serve", "--rag_enabled",
                       "--rag_kb_path", str(kb), "--store", url, "--port", str(port), "--log_level", "info"]
            with log.open("w") as out:
                process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
            started.append(Served(process, f"http://127.0.0.1:{port}", log))
        for served in started:
            served.wait_until_up()
        yield started
    finally:
        for served in started:
            served.process.terminate()
        for served in started:
            served.process.wait(timeout=30)


def _library_sources(url: str) -> dict[str, list[bool]]:
    """Each source of the shared library with the ``ephemeral`` flag of each of its documents."""
    from chapterverse.store import open_store

    store = open_store(url)
    try:
        found: dict[str, list[bool]] = {}
        for doc in store.documents():
            found.setdefault(doc.source, []).append(doc.ephemeral)
        return found
    finally:
        store.close()


def test_two_serve_processes(pg_schema_url: str, tmp_path: Path) -> None:  # noqa: F811
    kb = tmp_path / "kb"  # one shared folder: each server syncs the folder into the shared library
    kb.mkdir()
    with _servers(pg_schema_url, tmp_path, kb, kb) as (a, b):
        added = a.post("/v1/rag/add/document", {"text": "The supply boat brought paraffin every second Thursday "
                                                        "to Gull Rock.", "source": "boat"})
        assert added["added"] >= 1
        found = b.post("/v1/rag/search", {"query": "paraffin supply boat", "threshold": 0})
        assert found["count"] >= 1 and found["results"][0]["source"] == "boat"
        b.post("/v1/rag/remove", {"source_prefix": "boat", "exact": True})
        assert a.post("/v1/rag/search", {"query": "paraffin supply boat", "threshold": 0})["count"] == 0


def test_servers_starting_together_index_a_shared_folder_once(pg_schema_url: str,  # noqa: F811
                                                               tmp_path: Path) -> None:
    """Startups (and their folder syncs) take turns: one server indexes each file, the others find it indexed."""
    kb = tmp_path / "kb"
    kb.mkdir()
    for n in range(4):
        (kb / f"note{n}.md").write_text(f"# Note {n}\n\nThe keeper logged {n * 3 + 1} ships passing the reef.\n",
                                        encoding="utf-8")
    with _servers(pg_schema_url, tmp_path, kb, kb, kb) as servers:
        syncs = [served.status()["last_sync"] for served in servers]
        assert sorted(source for sync in syncs for source in sync["indexed"]) == [f"note{n}.md" for n in range(4)]
        assert all(len(sync["indexed"]) + sync["unchanged"] == 4 and not sync["removed"] for sync in syncs)
        assert _library_sources(pg_schema_url) == {f"note{n}.md": [False] for n in range(4)}


def test_a_starting_server_keeps_the_writes_of_running_servers(pg_schema_url: str,  # noqa: F811
                                                               tmp_path: Path) -> None:
    """persist: false documents live as long as the server that added them: another server's start keeps them
    while it runs, and the first start after it died (SIGKILL: no shutdown ran) drops them."""
    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "faq.md").write_text("# FAQ\n\nThe lighthouse opens to visitors on Sundays.\n", encoding="utf-8")
    with _servers(pg_schema_url, tmp_path, kb) as (a,):
        a.post("/v1/rag/upsert/document", {"source": "api/kept", "text": "Kept: the lamp is trimmed at dawn."})
        a.post("/v1/rag/upsert/document", {"source": "api/a-temp", "text": "Temporary: the fog bell is broken.",
                                           "persist": False})
        a.post("/v1/rag/add/chunks", {"items": [{"text": "Temporary: the boat is late.", "source": "api/a-temp2"}],
                                      "persist": False})
        with _servers(pg_schema_url, tmp_path, kb) as (b,):
            assert _library_sources(pg_schema_url) == {"faq.md": [False], "api/kept": [False], "api/a-temp": [True],
                                                       "api/a-temp2": [True]}
            found = b.post("/v1/rag/search", {"query": "fog bell broken", "threshold": 0})
            assert found["results"][0]["source"] == "api/a-temp"
            b.post("/v1/rag/upsert/document", {"source": "api/b-temp", "text": "Temporary: gulls nest on the "
                                                                                "gallery.", "persist": False})
            a.process.kill()
            a.process.wait(timeout=30)
            with _servers(pg_schema_url, tmp_path, kb) as (c,):
                assert _library_sources(pg_schema_url) == {"faq.md": [False], "api/kept": [False],
                                                           "api/b-temp": [True]}
                found = c.post("/v1/rag/search", {"query": "fog bell broken", "threshold": 0})
                assert "api/a-temp" not in {r["source"] for r in found["results"]}
