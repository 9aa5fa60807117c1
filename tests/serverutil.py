"""A real chapterverse server for tests: uvicorn on 127.0.0.1 (a free port) in a thread, real HTTP.

    with running_server(settings_for(tmp_path, rag_enabled=True)) as server:
        httpx.get(f"{server.url}/v1/rag/status")

Servers in one test process share one embedding model (``shared_embedder()``), so each start
costs milliseconds, not the model's load. ``reader_server`` is the fixture ``test_web_reader.py``
expects; a conftest can expose it with ``from serverutil import reader_server``.

This is a helper module, not a test file.
"""

from __future__ import annotations

import functools
import json
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from chapterverse.embeddings import Embedder, load_embedder
from chapterverse.server.app import create_app
from chapterverse.server.serve_settings import ServeSettings, settings_from_mapping
from chapterverse.server.state import ServerState

__all__ = ["Server", "running_server", "settings_for", "shared_embedder", "wait_for_job", "ReaderServer",
           "reader_server", "free_port", "serve_process", "serving", "startup_line"]


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve_process(*args: str) -> subprocess.Popen[str]:
    """``chapterverse serve ARGS`` as its own process, stderr piped (where its start-up line goes)."""
    return subprocess.Popen([sys.executable, "-m", "chapterverse", "serve", *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)


def startup_line(server: subprocess.Popen[str], timeout: float = 120) -> str:
    """The "serving the reader on ..." line of a ``serve_process`` (asserting it comes before it exits)."""
    assert server.stderr is not None
    deadline, line = time.monotonic() + timeout, ""
    while time.monotonic() < deadline and "serving the reader" not in line:
        line = server.stderr.readline()
        assert line or server.poll() is None, "the server exited before serving"
    return line


@contextmanager
def serving(*args: str) -> Iterator[tuple[int, str, subprocess.Popen[str]]]:
    """``chapterverse serve --port P ARGS`` on a free port: (P, its start-up line, the process); stopped with
    SIGINT (Ctrl-C) on exit and waited for (its exit status is then ``process.returncode``)."""
    port = free_port()
    server = serve_process("--port", str(port), *args)
    try:
        yield port, startup_line(server), server
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(timeout=60)


@functools.cache
def shared_embedder() -> Embedder:
    """The default model, loaded once per test process."""
    embedder = load_embedder(None)
    embedder.embed_query("warm up")
    return embedder


def settings_for(tmp: Path, **values: Any) -> ServeSettings:
    """Settings rooted in ``tmp`` (KB folder ``tmp/kb``), for 127.0.0.1."""
    return settings_from_mapping({"rag_kb_path": tmp / "kb", "log_level": "warning", **values})


@dataclass
class Server:
    url: str
    state: ServerState
    settings: ServeSettings
    headers: dict[str, str] = field(default_factory=dict)
    """Sent with every request of ``client()`` (e.g. the API key)."""

    def client(self, **options: Any) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers=self.headers, timeout=options.pop("timeout", 60), **options)


@contextmanager
def running_server(settings: ServeSettings, *, embedder: Embedder | None = None,
                   headers: dict[str, str] | None = None) -> Iterator[Server]:
    """Start the app under uvicorn on a free loopback port; stop it (and wait) on exit."""
    app = create_app(settings, embedder=embedder or (shared_embedder() if settings.rag_enabled else None))
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on", timeout_graceful_shutdown=2)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the test server did not start")
        time.sleep(0.01)
    try:
        yield Server(f"http://127.0.0.1:{port}", app.state.cv, settings, dict(headers or {}))
    finally:
        server.should_exit = True
        thread.join(timeout=15)
        sock.close()


@contextmanager
def kb_servers(tmp_path_factory: pytest.TempPathFactory, upstream_url: str, files: Mapping[str, str],
               **defaults: Any) -> Iterator[Callable[..., Server]]:
    """``get(files=..., **settings)``: a proxy to ``upstream_url`` over a knowledge base of ``files`` (name ->
    text), one per distinct files and settings, started at its first use and stopped with the others: a test
    module's servers, each with its own copy of the knowledge base."""
    started: dict[str, Server] = {}
    with ExitStack() as stack:
        def get(files: Mapping[str, str] = files, **values: Any) -> Server:
            key = json.dumps([files, values], sort_keys=True)
            if key not in started:
                root = tmp_path_factory.mktemp("kb-server")
                (root / "kb").mkdir()
                for name, text in files.items():
                    (root / "kb" / name).write_text(text, encoding="utf-8")
                settings = settings_for(root, **{"rag_enabled": True, "llm_base_url": upstream_url, **defaults,
                                                 **values})
                started[key] = stack.enter_context(running_server(settings))
            return started[key]

        yield get


def ok(response: httpx.Response, status: int = 200) -> Any:
    """The JSON of a response that has ``status``; its body is the assertion's message otherwise."""
    assert response.status_code == status, response.text
    return response.json()


def wait_for_job(client: httpx.Client, job: dict[str, Any], timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while job["state"] not in ("done", "failed"):
        if time.monotonic() > deadline:
            raise AssertionError(f"job {job['id']} still {job['state']} after {timeout} s")
        time.sleep(0.05)
        job = client.get(f"/api/jobs/{job['id']}").json()
    return job


# ------------------------------------------------------------------------------ for test_web_reader


@dataclass
class ReaderServer:
    """What ``test_web_reader.py`` needs: base_url, ingest(path) -> doc_id, resolve(tag_key), fake_llm."""

    server: Server
    fake_llm: Any = None

    @property
    def base_url(self) -> str:
        return self.server.url

    def ingest(self, path: Path) -> int:
        with self.server.client() as client:
            job = client.post("/api/documents/path", json={"path": str(Path(path).resolve())}).json()["job"]
            job = wait_for_job(client, job, timeout=600)  # a real book: embedding takes a while on 2 cores
        assert job["state"] == "done", job
        return int(job["document_ids"][0])

    def resolve(self, tag_key: str) -> dict[str, Any]:
        with self.server.client() as client:
            reply = client.get(f"/api/resolve/{tag_key}")
        reply.raise_for_status()
        return reply.json()  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def reader_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReaderServer]:
    """The reader over a real server whose model is the scripted fake: tests set ``fake_llm.handler``."""
    from conftest import DATA
    from fakellm import Reply, fake_llm

    root = tmp_path_factory.mktemp("reader-server")
    with fake_llm(default=Reply.text("The book does not say.")) as fake:
        settings = settings_for(root, library=root / "library", llm_base_url=fake.base_url, llm_model="fake-model",
                                ingest_roots=[tmp_path_factory.getbasetemp(), DATA])
        with running_server(settings, embedder=shared_embedder()) as server:
            yield ReaderServer(server, fake_llm=fake)
