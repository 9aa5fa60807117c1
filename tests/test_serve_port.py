"""``chapterverse serve`` on a port another program holds (the trial on a fresh clone): it said "serving the
reader on http://127.0.0.1:8766/", then uvicorn's ERROR lines, and exited 3, a status the README does not know.
Now it says so in one line and exits 2, before opening any library or syncing the knowledge-base folder.
And a free port still serves: the reader answers on the port the start-up line names. Real processes, real
sockets on 127.0.0.1."""

from __future__ import annotations

import shutil
import socket
import time
from pathlib import Path

import httpx
from conftest import shared_path
from serverutil import free_port, serve_process, serving


def test_a_port_in_use_is_one_error_line_and_exit_2_before_the_sync(tmp_path: Path) -> None:
    kb = tmp_path / "kb"
    kb.mkdir()
    shutil.copy(shared_path("books", "epub", "sherlock-holmes.epub"), kb)  # seconds of embedding, if synced
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        started = time.monotonic()
        server = serve_process("--port", str(port), "--rag_enabled", "--rag_kb_path", str(kb))
        _, stderr = server.communicate(timeout=120)
        seconds = time.monotonic() - started
    assert server.returncode == 2, stderr
    assert stderr == (f"error: cannot listen on 127.0.0.1:{port}: the address is already in use (another "
                      "server?); choose another --port\n")
    assert not (kb / ".chapterverse").exists(), "the knowledge base was opened before the port was checked"
    assert seconds < 60, seconds


def test_a_free_port_serves_the_reader_on_the_port_it_names(tmp_path: Path) -> None:
    with serving("--rag_enabled", "--rag_kb_path", str(tmp_path / "kb")) as (port, line, server):
        assert f"serving the reader on http://127.0.0.1:{port}/ " in line, line
        assert line.rstrip().endswith("; Ctrl-C stops it"), line  # uvicorn's own line is not printed for a socket
        deadline = time.monotonic() + 60
        while True:
            try:
                reply = httpx.get(f"http://127.0.0.1:{port}/api/documents", timeout=10)
                break
            except httpx.ConnectError:
                assert time.monotonic() < deadline, "nothing answered on the named port"
                time.sleep(0.1)
        assert reply.status_code == 200 and reply.json() == {"documents": []}
    assert server.returncode == 0
