"""Ctrl-C stops ``chapterverse serve`` with exit status 0, with the knowledge base on or off: after uvicorn's
clean shutdown while it serves, and while it is still starting (its knowledge base syncing), where typer used
to turn the interrupt into a silent 130. The real server on 127.0.0.1, as its own process, sent SIGINT."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from cliutil import cli
from serverutil import free_port, serve_process, serving

DEMO = Path(__file__).resolve().parents[1] / "src" / "chapterverse" / "demo" / "the-keeper-of-gull-rock.md"


def stopped_by_ctrl_c(server: subprocess.Popen[str]) -> tuple[int, str]:
    """SIGINT (what Ctrl-C sends) to ``server``; its exit status and the rest of its stderr."""
    server.send_signal(signal.SIGINT)
    _, err = server.communicate(timeout=60)
    return server.returncode, err


def answering(port: int, timeout: float = 60) -> None:
    """Wait until the server at ``port`` answers HTTP (uvicorn has taken over Ctrl-C by then)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/api/documents", timeout=5).status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, "the server did not answer"
        time.sleep(0.1)


@pytest.mark.parametrize("mode", ["library", "knowledge base", "knowledge base and library"])
def test_ctrl_c_stops_a_serving_server_with_exit_status_0(tmp_path: Path, mode: str) -> None:
    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "notes.md").write_text("# Notes\n\nThe lamp was lit at dusk.\n", encoding="utf-8")
    args = {"library": ["--library", str(tmp_path / "lib")],
            "knowledge base": ["--rag_enabled", "--rag_kb_path", str(kb)],
            "knowledge base and library": ["--rag_enabled", "--rag_kb_path", str(kb), "--library",
                                           str(tmp_path / "lib")]}[mode]
    with serving("--host", "127.0.0.1", *args) as (port, _, server):
        answering(port)
        code, err = stopped_by_ctrl_c(server)
    assert code == 0, err
    assert "Finished server process" in err and "Traceback" not in err, err


def test_ctrl_c_while_the_knowledge_base_syncs_at_start_exits_0_and_keeps_what_it_wrote(tmp_path: Path) -> None:
    """Ctrl-C during the start-up sync of a large knowledge base: 0 and one line saying so (typer exited 130
    without a word); each document written before it is whole, and the library checks clean."""
    kb = tmp_path / "kb"
    kb.mkdir()
    text = DEMO.read_text(encoding="utf-8")
    for n in range(1, 41):  # every chunk its own text: none is a copy of another
        (kb / f"book-{n:02d}.md").write_text(f"# Copy {n}\n\n{text.replace('.', f' ({n}).')}", encoding="utf-8")
    server = serve_process("--host", "127.0.0.1", "--port", str(free_port()), "--rag_enabled", "--rag_kb_path",
                           str(kb))
    assert server.stderr is not None
    try:  # stopped while starting: serverutil.serving waits for the start-up line, which never comes here
        line = ""
        while "RAG: indexed" not in line:
            line = server.stderr.readline()
            assert line, "the server exited before its knowledge base synced a document"
        code, err = stopped_by_ctrl_c(server)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    assert code == 0, err
    assert err.strip().splitlines()[-1] == "stopped by Ctrl-C while starting, before serving", err
    assert "serving the reader" not in err and "Traceback" not in err, err
    library = str(kb / ".chapterverse")
    check = cli("check", "--library", library)
    assert (check.exit_code, check.stdout.strip()) == (0, "ok"), check.output
    listed = cli("docs", "--json", "--library", library)
    assert 1 <= len(json.loads(listed.stdout)["documents"]) < 40, listed.stdout
