"""Issue 28, item 3: special files, files too large to read, and files that change under the check.

A FIFO in the knowledge-base folder used to hold the knowledge base's lock forever (every write, ``/v1/rag/status``
and SIGTERM behind it; a start with it present never served); a 2 GB sparse ``.txt`` was read whole before the
256 MB limit; a hard link, or a folder swapped for a symlink between the request and the job, read files outside
the server's folders. Real files, real servers on 127.0.0.1, real processes; every wait is bounded, so the old
code fails these tests instead of hanging them.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from conftest import shared_path
from serverutil import free_port, running_server, serve_process, settings_for, wait_for_job
from textpdf import text_pdf

from chapterverse import SourceError
from chapterverse.errors import SourceTooLargeError
from chapterverse.sources import files
from chapterverse.sources import read_source
from chapterverse.sources.files import Root, open_file

FAQ = "# FAQ\n\nThe refund window is 30 days from the date of purchase.\n"
SECRET = "# Secret\n\nThe vault combination is 4711 and the cellar key hangs behind the clock.\n"
GiB = 1024 ** 3


@contextmanager
def released(fifo: Path) -> Iterator[Path]:
    """On the way out, give a reader blocked on ``fifo`` (the old code) a writer and an end of file, so that a
    failing test ends instead of leaving a thread blocked in ``open`` for ever."""
    try:
        yield fifo
    finally:
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:  # no reader is waiting (ENXIO), or the FIFO is gone
            pass


def kb_with_faq(tmp: Path) -> Path:
    kb = tmp / "kb"
    kb.mkdir(exist_ok=True)
    (kb / "faq.md").write_text(FAQ, encoding="utf-8")
    return kb


def sources(client: httpx.Client) -> set[str]:
    return {item["source"] for item in client.get("/v1/rag/sources").json()["items"]}


# ------------------------------------------------------------------------------------------------ FIFOs


def test_a_fifo_in_the_knowledge_base_is_skipped_and_writes_still_complete(tmp_path: Path,
                                                                            caplog: pytest.LogCaptureFixture) -> None:
    kb = kb_with_faq(tmp_path)
    with running_server(settings_for(tmp_path, rag_enabled=True)) as server, \
            server.client(timeout=20) as client, released(kb / "pipe.txt") as fifo:
        os.mkfifo(fifo)
        started = time.monotonic()
        reloaded = client.post("/v1/rag/reload", json={})
        written = client.post("/v1/rag/upsert/document", json={"text": "Gulls nest on the cliffs.", "source": "gulls"})
        status = client.get("/v1/rag/status")
        seconds = time.monotonic() - started
        listed = sources(client)
    assert reloaded.status_code == 200, reloaded.text
    assert reloaded.json()["errors"] == {"pipe.txt": f"{fifo}: not a regular file (a named pipe); only regular "
                                                     "files are read"}
    assert written.status_code == 200 and status.status_code == 200, (written.text, status.text)
    assert status.json()["last_sync"]["errors"].keys() == {"pipe.txt"}
    assert listed == {"faq.md", "gulls"}
    assert seconds < 20, seconds
    assert any("cannot index pipe.txt" in r.getMessage() and "not a regular file" in r.getMessage()
               for r in caplog.records), [r.getMessage() for r in caplog.records]


class _Lines:
    """A process's stderr, read line by line in a thread, so that waiting for a line has a deadline."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        assert process.stderr is not None
        self.lines: list[str] = []
        self._stream = process.stderr
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        for line in self._stream:
            self.lines.append(line)

    def wait_for(self, text: str, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(text in line for line in self.lines):
                return True
            time.sleep(0.1)
        return False


def answered(client: httpx.Client, path: str, timeout: float = 60) -> httpx.Response:
    """The first answer to GET ``path`` (the start-up line comes just before the socket listens)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return client.get(path)
        except httpx.ConnectError:
            assert time.monotonic() < deadline, f"nothing answered {path}"
            time.sleep(0.1)


def test_a_server_started_with_a_fifo_serves_and_stops_on_sigterm(tmp_path: Path) -> None:
    kb = kb_with_faq(tmp_path)
    os.mkfifo(kb / "pipe.md")
    port = free_port()
    server = serve_process("--port", str(port), "--rag_enabled", "--rag_kb_path", str(kb))
    stderr = _Lines(server)
    try:
        assert stderr.wait_for("serving the reader", timeout=180), "".join(stderr.lines)
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=20) as client:
            status = answered(client, "/v1/rag/status").json()
            os.mkfifo(kb / "later.txt")
            reloaded = client.post("/v1/rag/reload", json={}).json()
        server.send_signal(signal.SIGTERM)
        code = server.wait(timeout=60)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    assert code in (0, -signal.SIGTERM) and stderr.wait_for("Finished server process", 5), "".join(stderr.lines)
    assert status["last_sync"]["errors"].keys() == {"pipe.md"} and status["sources"] == 1, status
    assert reloaded["errors"].keys() == {"pipe.md", "later.txt"}, reloaded
    logged = "".join(stderr.lines)
    assert "RAG: cannot index pipe.md: " in logged and "not a regular file (a named pipe)" in logged, logged


def test_cli_ingest_names_a_fifo_and_goes_on_with_the_rest(tmp_path: Path) -> None:
    named = tmp_path / "named.txt"
    os.mkfifo(named)
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "bay.md").write_text("# Bay Notes\n\nThe lamp was lit at dusk.\n", encoding="utf-8")
    os.mkfifo(folder / "pipe.md")
    with released(named), released(folder / "pipe.md"):
        result = subprocess.run([sys.executable, "-m", "chapterverse", "ingest", str(named), str(folder),
                                 "--library", str(tmp_path / "lib")], capture_output=True, text=True, timeout=120,
                                env={**os.environ, "COLUMNS": "200"})
    assert result.returncode == 2, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert errors == [f"error: {named}: not a regular file (a named pipe); only regular files are read",
                      f"error: {folder / 'pipe.md'}: not a regular file (a named pipe); only regular files are read"]
    assert "Bay Notes" in result.stdout, result.stdout


# ------------------------------------------------------------------------------------------ large files


MEASURED = ("import resource, subprocess, sys; done = subprocess.run(sys.argv[1:]); "
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); sys.exit(done.returncode)")
"""Runs its arguments as a command, then prints that command's peak resident memory (KiB) as the last line of
stderr: the peak of the one child, not of whatever else the test process ran."""


def test_a_sparse_2_gb_text_is_refused_before_it_is_read(tmp_path: Path) -> None:
    big = tmp_path / "big.txt"
    with big.open("wb") as out:
        out.truncate(2 * GiB)  # sparse: no disk used, but 2 GB of zeros to whoever reads it
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-c", MEASURED, sys.executable, "-m", "chapterverse", "ingest", str(big),
                             "--library", str(tmp_path / "lib")], capture_output=True, text=True, timeout=300)
    seconds = time.monotonic() - started
    *lines, peak_kib = result.stderr.splitlines()
    assert result.returncode == 2, result.stderr
    assert lines[-1] == f"error: {big}: {2 * GiB} bytes exceeds the {256 * 1024 * 1024}-byte limit for this format"
    assert seconds < 60 and int(peak_kib) < 1024 * 1024, (seconds, int(peak_kib) // 1024)


def sparse(path: Path, size: int = 2 * GiB, head: bytes = b"") -> Path:
    """``head``, then zeros never written up to ``size`` bytes (``truncate -s``): no disk used."""
    with path.open("wb") as out:
        out.write(head)
        out.truncate(size)
    return path


@pytest.mark.parametrize(("name", "head"), [("big.pdf", b""), ("headed.pdf", b"%PDF-1.7\n"), ("big.epub", b"")])
def test_a_sparse_2_gb_pdf_or_epub_is_refused_by_the_cli_before_it_is_parsed(tmp_path: Path, name: str,
                                                                             head: bytes) -> None:
    big = sparse(tmp_path / name, head=head)
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-c", MEASURED, sys.executable, "-m", "chapterverse", "ingest", str(big),
                             "--library", str(tmp_path / "lib")], capture_output=True, text=True, timeout=120)
    seconds = time.monotonic() - started
    *lines, peak_kib = result.stderr.splitlines()
    assert result.returncode == 2, result.stderr
    assert re.fullmatch(rf"error: {re.escape(str(big))}: 21474\d{{5}} of its {2 * GiB} bytes were never written \(a "
                        r"sparse file, such as one made with truncate\); it holds no document", lines[-1]), lines[-3:]
    assert seconds < 60 and int(peak_kib) < 512 * 1024, (seconds, int(peak_kib) // 1024)


def test_zeros_written_out_are_refused_where_each_parser_first_looks(tmp_path: Path) -> None:
    """Zeros really written (no holes) are refused from the file's first or last bytes: a PDF needs ``%PDF-`` in
    its first 1024, an EPUB a ZIP end record in its last 64 KiB, and pypdf a trailer in its last 64 KiB."""
    zeros = bytes(8 * 1024 * 1024)
    (tmp_path / "zeros.pdf").write_bytes(zeros)
    (tmp_path / "zeros.epub").write_bytes(zeros)
    (tmp_path / "headed.pdf").write_bytes(b"%PDF-1.7\n" + zeros)
    with pytest.raises(SourceError, match=r"zeros\.pdf: not a PDF: no %PDF- header in its first 1024 bytes$"):
        read_source(tmp_path / "zeros.pdf")
    with pytest.raises(SourceError, match=r"zeros\.epub: not a readable ZIP archive, so not an EPUB \(no "
                                          r"end-of-archive record in its last 65557 bytes\)$"):
        read_source(tmp_path / "zeros.epub")
    with pytest.raises(SourceError, match=r"not given to pypdf: no startxref and %%EOF trailer in the last 65536 "
                                          r"bytes\)$"):
        read_source(tmp_path / "headed.pdf")


def test_a_real_pdf_with_trailing_garbage_still_reads_through_either_parser(tmp_path: Path) -> None:
    """What each parser accepted still reads: a PDF with bytes after its ``%%EOF`` through pdfium, and one only
    pypdf opens (pdfium refuses its owner password) with its trailer within the last 64 KiB."""
    good = text_pdf(tmp_path / "good.pdf").read_bytes()
    (tmp_path / "tail.pdf").write_bytes(good + b"\r\n" + b"x" * 30_000)
    assert "paraffin lamp" in read_source(tmp_path / "tail.pdf").files[1].text
    only_pypdf = shared_path("robustness", "pdf", "pr6531_2.pdf").read_bytes()
    (tmp_path / "pypdf.pdf").write_bytes(only_pypdf + b"\n" + b"x" * 60_000)
    document = read_source(tmp_path / "pypdf.pdf")
    assert document.warnings[0] == "read with pypdf (pdfium rejected the password)", document.warnings
    assert document.files[0].text == read_source(shared_path("robustness", "pdf", "pr6531_2.pdf")).files[0].text


def test_a_sparse_pdf_is_refused_by_every_server_route_and_writes_go_on(tmp_path: Path) -> None:
    """The knowledge-base folder (at start and on reload, a write meanwhile), path ingest, and an upload of zeros."""
    kb = kb_with_faq(tmp_path)
    big = sparse(kb / "big.pdf")
    settings = settings_for(tmp_path, rag_enabled=True, ingest_roots=[kb])
    with running_server(settings) as server, server.client(timeout=30) as client:
        reloading = threading.Thread(target=client.post, args=("/v1/rag/reload",), kwargs={"json": {}})
        reloading.start()
        written = client.post("/v1/rag/upsert/document", json={"text": "Gulls nest on the cliffs.", "source": "gulls"})
        reloading.join()
        status = client.get("/v1/rag/status").json()
        by_path = wait_for_job(client, client.post("/api/documents/path", json={"path": str(big)}).json()["job"])
        uploaded = client.post("/api/documents", files={"file": ("zeros.pdf", bytes(4 * 1024 * 1024))})
        upload = wait_for_job(client, uploaded.json()["job"])
        listed = sources(client)
    assert written.status_code == 200, written.text
    assert "were never written (a sparse file" in status["last_sync"]["errors"]["big.pdf"], status["last_sync"]
    assert by_path["state"] == "failed" and "were never written" in by_path["error"], by_path
    assert upload["state"] == "failed" and "not a PDF: no %PDF- header" in upload["error"], upload
    assert listed == {"faq.md", "gulls"}


# ----------------------------------------------------------------------- files that lead out of a folder


def test_a_hard_link_into_the_knowledge_base_is_refused_unless_allowed(tmp_path: Path) -> None:
    secret = tmp_path / "private" / "secret.md"
    secret.parent.mkdir()
    secret.write_text(SECRET, encoding="utf-8")
    kb = kb_with_faq(tmp_path)
    os.link(secret, kb / "h.md")  # ln /tmp/secret.md kb/h.md
    with running_server(settings_for(tmp_path, rag_enabled=True)) as server, server.client() as client:
        reloaded = client.post("/v1/rag/reload", json={}).json()
        listed = sources(client)
        found = client.post("/v1/rag/search", json={"query": "vault combination cellar key", "threshold": 0}).json()
        by_path = wait_for_job(client, client.post("/api/documents/path", json={"path": str(kb / "h.md")}).json()["job"])
        documents = json.dumps(client.get("/api/documents").json())
    assert listed == {"faq.md"} and "4711" not in json.dumps(found) and "4711" not in documents
    assert reloaded["errors"]["h.md"].endswith("h.md: has 2 hard links, and another name may lie outside "
                                               f"{kb}; the server reads such files only with --allow_hardlinks")
    assert by_path["state"] == "failed" and "has 2 hard links" in by_path["error"], by_path
    with running_server(settings_for(tmp_path, rag_enabled=True, allow_hardlinks=True)) as server, \
            server.client() as client:
        assert sources(client) == {"faq.md", "h.md"}


def test_a_folder_swapped_for_a_symlink_after_the_request_reads_nothing_outside(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "a.md").write_text("# Harbour\n\nThe ferry leaves at noon.\n", encoding="utf-8")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "a.md").write_text(SECRET, encoding="utf-8")
    settings = settings_for(tmp_path, library=tmp_path / "library", ingest_roots=[root])
    gate = threading.Event()
    with running_server(settings) as server, server.client() as client:
        server.state.jobs.submit("gate", lambda job: None if gate.wait(30) else None)  # holds the one job worker
        jobs = [client.post("/api/documents/path", json={"path": str(path)}) for path in (root / "sub" / "a.md",
                                                                                          root / "sub")]
        (root / "sub").rename(root / "old")  # the request was checked; now the folder becomes a symlink out
        (root / "sub").symlink_to(outside, target_is_directory=True)
        gate.set()
        done = [wait_for_job(client, reply.json()["job"]) for reply in jobs]
        documents = json.dumps(client.get("/api/documents").json())
    assert [reply.status_code for reply in jobs] == [202, 202]
    assert [job["state"] for job in done] == ["failed", "failed"], done
    assert all(f"a.md: a symbolic link leads out of {root}" in job["error"] for job in done), done
    assert "4711" not in documents and "vault" not in documents


def test_a_symlink_swapped_in_after_the_name_was_resolved_is_not_followed(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The narrowest window: the folder becomes a symlink after the path was resolved and found inside the root,
    before the file is opened. The open walks from the root's descriptor with ``O_NOFOLLOW``, so it fails."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "a.md").write_text(FAQ, encoding="utf-8")
    outside.mkdir()
    (outside / "a.md").write_text(SECRET, encoding="utf-8")
    resolve = os.path.realpath

    def resolve_then_swap(path: str | os.PathLike[str], *, strict: bool = False) -> str:
        resolved = resolve(path, strict=strict)
        if Path(path).name == "a.md":  # the file's name, not the root's
            (root / "sub").rename(root / "old")
            (root / "sub").symlink_to(outside, target_is_directory=True)
        return resolved

    monkeypatch.setattr(files.os.path, "realpath", resolve_then_swap)
    with pytest.raises(SourceError) as refused:
        open_file(root / "sub" / "a.md", root=Root(root))
    monkeypatch.undo()
    assert refused.value.reason == ("reached through a symbolic link (sub); files under a server's folders are opened "
                                    "without following links")
    assert open_file(outside / "a.md").read().decode() == SECRET  # without a root, the same name is followed


def test_a_file_that_grows_past_its_limit_after_opening_is_refused(tmp_path: Path) -> None:
    """The size was checked on opening; the read and the hash count what they get, so growing the file after the
    check does not smuggle more than the limit past it."""
    grown = tmp_path / "grown.txt"
    grown.write_bytes(b"x" * 10)
    with open_file(grown, limit=100) as file:
        with grown.open("ab") as more:
            more.write(b"y" * 200)
        for read in (file.digest, file.read):
            with pytest.raises(SourceTooLargeError) as refused:
                read()
            assert refused.value.reason == ("grew past the 100-byte limit for this format while it was read "
                                            "(10 bytes when opened)")


def test_ctrl_c_inside_fdopen_stays_a_ctrl_c(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Ctrl-C can land inside ``os.fdopen`` after the file object took the descriptor and closed it on its
    way out: closing it again turned the interrupt into ``OSError: Bad file descriptor`` (``serve`` stopped
    during its knowledge-base sync exited 1 with a traceback, seen in CI)."""
    note = tmp_path / "note.txt"
    note.write_text("The lamp was lit at dusk.\n", encoding="utf-8")
    real_fdopen = os.fdopen

    def interrupted(fd: int, mode: str = "r") -> object:
        real_fdopen(fd, mode).close()  # the file object owned the descriptor, and closed it
        raise KeyboardInterrupt

    monkeypatch.setattr(files.os, "fdopen", interrupted)
    with pytest.raises(KeyboardInterrupt):
        open_file(note)
