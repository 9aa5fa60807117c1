"""Ingest as a careful tool (issue 15, a new user's trial): one bad file never stops a folder, binary or empty text
files are refused with the file and the reason, a damaged PDF is one line of error (not pypdf's repair log too),
``search --k 0`` is a usage error, and a document is reported once wherever stdout and stderr go.

The CLI runs in-process (typer's runner, stdout and stderr apart) against real library folders and files written
here, and as a real process where the pipes are the subject (stdout and stderr apart, into one pipe as ``2>&1``
does, on a terminal); the truncated PDF is the first 20 KB of a real book from ../shared.
"""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from hashembed import HashingEmbedder
from cliutil import cli
from typer.testing import CliRunner

from chapterverse.cli import app
from chapterverse import Library, SourceError
from chapterverse.sources import read_source
from conftest import shared_path

CORRUPT_EPUB = b"PK\x03\x04 not really a zip archive"
BINARY = b"\xff\xfe\x00\x00bad"


def process(*args: str, together: bool = False) -> subprocess.CompletedProcess[str]:
    """``chapterverse ARGS`` as its own process; ``together``: stderr into stdout's pipe (``2>&1``)."""
    return subprocess.run([sys.executable, "-m", "chapterverse", *args], capture_output=not together,
                          stdout=subprocess.PIPE if together else None,
                          stderr=subprocess.STDOUT if together else None,
                          text=True, env={**os.environ, "COLUMNS": "200"}, timeout=300)


def on_terminal(*args: str) -> tuple[int, str]:
    """``chapterverse ARGS`` with stdout and stderr on one pseudo-terminal, as a user at a shell sees it."""
    controller, terminal = pty.openpty()
    with subprocess.Popen([sys.executable, "-m", "chapterverse", *args], stdin=terminal, stdout=terminal,
                          stderr=terminal) as child:
        os.close(terminal)
        seen = b""
        while True:
            try:
                data = os.read(controller, 65536)
            except OSError:  # the child closed the terminal
                break
            if not data:
                break
            seen += data
        code = child.wait(timeout=300)
    os.close(controller)
    return code, seen.decode()


def titles(library: Path) -> list[str]:
    return [d.title for d in Library(library, embedder=HashingEmbedder()).documents()]


@pytest.fixture
def mixed(tmp_path: Path) -> Path:
    """A folder with a corrupt EPUB before, and a binary TXT after, a good Markdown file."""
    folder = tmp_path / "mixed"
    folder.mkdir()
    (folder / "a.epub").write_bytes(CORRUPT_EPUB)
    (folder / "b.md").write_text("# Bay Notes\n\nThe lamp was lit at dusk.\n")
    (folder / "c.txt").write_bytes(BINARY)
    return folder


def test_one_bad_file_does_not_stop_a_folder(mixed: Path, tmp_path: Path) -> None:
    library = tmp_path / "lib"
    result = cli("ingest", str(mixed), "--library", str(library))
    assert result.exit_code == 2
    assert result.stdout.splitlines() == ["1 Bay Notes — 1 file, 1 chunk, 1 segment (ingested)"]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert errors == [f"error: {mixed / 'a.epub'}: not a readable ZIP archive, so not an EPUB (no end-of-archive "
                      "record in its last 65557 bytes)",
                      f"error: {mixed / 'c.txt'}: binary data, not text: 2 of its first 7 characters are NUL or "
                      "other control characters (UTF-16 or UTF-32 text needs its byte-order mark)"]
    assert "nothing to ingest" not in result.stderr
    assert titles(library) == ["Bay Notes"]
    assert Library(library, embedder=HashingEmbedder()).store.integrity_problems() == []


def test_json_lists_what_failed_beside_what_was_stored(mixed: Path, tmp_path: Path) -> None:
    result = cli("--json", "ingest", str(mixed), "--library", str(tmp_path / "lib"))
    assert result.exit_code == 2
    payload = json.loads(result.stdout)
    assert [d["source"] for d in payload["documents"]] == ["b.md"]
    assert [(f["path"], f["reason"].split(",")[0]) for f in payload["failed"]] == [
        (str(mixed / "a.epub"), "not a readable ZIP archive"), (str(mixed / "c.txt"), "binary data")]


def test_a_folder_of_only_bad_files_names_each_and_stores_nothing(tmp_path: Path) -> None:
    folder = tmp_path / "bad"
    folder.mkdir()
    (folder / "a.epub").write_bytes(CORRUPT_EPUB)
    (folder / "b.md").write_text("  \n\n")
    result = cli("ingest", str(folder), "--library", str(tmp_path / "lib"))
    assert result.exit_code == 2 and result.stdout == ""
    assert [line.split(":")[0] for line in result.stderr.splitlines()] == ["error", "error"]
    assert f"error: {folder / 'b.md'}: no text to index" in result.stderr
    assert titles(tmp_path / "lib") == []


def test_a_bad_file_named_directly_is_one_error_line_and_exit_2(tmp_path: Path) -> None:
    corrupt = tmp_path / "a.epub"
    corrupt.write_bytes(CORRUPT_EPUB)
    result = cli("ingest", str(corrupt), "--library", str(tmp_path / "lib"))
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr.splitlines() == [
        f"error: {corrupt}: not a readable ZIP archive, so not an EPUB (no end-of-archive record in its last "
        "65557 bytes)"]


def test_named_files_after_a_bad_one_are_still_ingested(tmp_path: Path) -> None:
    missing, good = tmp_path / "missing.md", tmp_path / "good.md"
    good.write_text("# Good\n\nText.\n")
    result = cli("ingest", str(missing), str(good), "--library", str(tmp_path / "lib"))
    assert result.exit_code == 2
    assert result.stderr.splitlines()[0] == f"error: {missing}: No such file or directory"
    assert titles(tmp_path / "lib") == ["Good"]


# --- binary and empty text files ---------------------------------------------------------------

@pytest.mark.parametrize("data", [BINARY, "UTF-16 without its byte-order mark".encode("utf-16-le"), "pdf"])
def test_a_binary_txt_is_refused_with_the_file_and_reason(tmp_path: Path, data: bytes | str) -> None:
    path = tmp_path / "data.txt"
    path.write_bytes(shared_path("books", "pdf", "freeculture.pdf").read_bytes() if data == "pdf" else data)
    with pytest.raises(SourceError, match="binary data, not text: [0-9]+ of its first [0-9]+ characters") as caught:
        read_source(path)
    assert caught.value.path == str(path)


def test_a_stray_nul_in_a_real_text_is_kept(tmp_path: Path) -> None:
    """Binary means mostly control characters, not one slip, which is read as U+FFFD like every reader's NUL."""
    path = tmp_path / "log.txt"
    path.write_bytes(b"The keeper\x00 lit the lamp at dusk.\n\nGulls circled the tower.\n")
    assert read_source(path).files[0].text.startswith("The keeper\ufffd lit")


def test_utf16_text_with_its_byte_order_mark_is_read(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_bytes("Dusk at Gull Rock\n\nThe lamp was lit.\n".encode("utf-16"))
    document = read_source(path)
    assert document.files[0].text == "Dusk at Gull Rock\n\nThe lamp was lit.\n"
    assert document.title == "Dusk at Gull Rock"


@pytest.mark.parametrize(("name", "data"), [("empty.md", b""), ("blank.md", b"\n  \n\t\n"),
                                             ("blank.txt", b"\r\n\r\n"), ("image.html", b"<p><img src=x></p>")])
def test_a_text_file_without_text_is_refused(tmp_path: Path, name: str, data: bytes) -> None:
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(SourceError, match="no text to index"):
        read_source(path)


def test_an_empty_chapter_of_a_book_folder_is_still_a_chapter(tmp_path: Path) -> None:
    """The refusal is for a document with nothing in it; a book whose one chapter is empty is still a book."""
    folder = tmp_path / "book"
    folder.mkdir()
    (folder / "1.md").write_text("# One\n\nThe lamp was lit.\n")
    (folder / "2.md").write_text("")
    [result] = Library(tmp_path / "lib", embedder=HashingEmbedder()).ingest([folder], as_books=True)
    assert result.document.files == 2 and result.document.chunks == 1


def test_an_empty_markdown_file_is_refused_by_the_cli(tmp_path: Path) -> None:
    empty = tmp_path / "empty.md"
    empty.write_text("")
    result = cli("ingest", str(empty), "--library", str(tmp_path / "lib"))
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr.splitlines() == [
        f"error: {empty}: no text to index (the file is empty, or holds only whitespace or markup)"]


# --- a damaged PDF ---------------------------------------------------------------------------

def test_a_truncated_pdf_is_one_error_line_without_pypdf_log_noise(tmp_path: Path) -> None:
    truncated = tmp_path / "freeculture-head.pdf"
    truncated.write_bytes(shared_path("books", "pdf", "freeculture.pdf").read_bytes()[:20_000])
    result = cli("ingest", str(truncated), "--library", str(tmp_path / "lib"))
    assert result.exit_code == 2
    [line] = result.stderr.splitlines()
    assert line.startswith(f"error: {truncated}: not a readable PDF (")
    verbose = cli("--verbose", "ingest", str(truncated), "--library", str(tmp_path / "lib"))
    assert "incorrect startxref pointer" in verbose.stderr, "--verbose still shows what pypdf repaired"


# --- usage ------------------------------------------------------------------------------------

@pytest.mark.parametrize("k", ["0", "-3"])
def test_search_k_below_one_is_a_usage_error(tmp_path: Path, k: str) -> None:
    page = tmp_path / "page.md"
    page.write_text("# Whales\n\nA whale surfaced.\n")
    Library(tmp_path / "lib", embedder=HashingEmbedder()).ingest([page])
    result = CliRunner().invoke(app, ["search", "whale", "--k", k, "--library", str(tmp_path / "lib")])
    assert result.exit_code == 2
    assert "Invalid value for '--k'" in result.output


# --- each document reported once -----------------------------------------------------------------

def test_into_one_pipe_each_document_is_reported_once_as_it_is_stored(mixed: Path, tmp_path: Path) -> None:
    (mixed / "d.md").write_text("# Dock Notes\n\nThe boat came in.\n")
    result = process("ingest", str(mixed), "--library", str(tmp_path / "lib"), together=True)
    assert result.returncode == 2
    assert [line.split(":")[0] for line in result.stdout.splitlines()] == [
        "error", "1 Bay Notes — 1 file, 1 chunk, 1 segment (ingested)", "error",
        "2 Dock Notes — 1 file, 1 chunk, 1 segment (ingested)"], "in file order, each line once"


def test_apart_stderr_keeps_its_progress_line(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# Page\n\nA lighthouse keeper's log.\n")
    result = process("ingest", str(page), "--library", str(tmp_path / "lib"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["1 Page — 1 file, 1 chunk, 1 segment (ingested)"]
    [progress] = result.stderr.splitlines()
    assert progress.startswith("ingested page.md: 1 file, 1 chunk, 1 segment, ") and progress.endswith(" s")


def test_on_a_terminal_the_bar_runs_and_each_document_is_reported_once(mixed: Path, tmp_path: Path) -> None:
    code, seen = on_terminal("ingest", str(mixed), "--library", str(tmp_path / "lib"))
    assert code == 2 and "Traceback" not in seen
    assert seen.count("Bay Notes — 1 file, 1 chunk, 1 segment (ingested)") == 1
    assert "ingested b.md:" not in seen, "no progress line beside the bar"
    assert seen.count(f"error: {mixed / 'a.epub'}: not a readable ZIP archive") == 1
