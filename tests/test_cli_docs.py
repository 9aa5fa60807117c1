"""``chapterverse docs`` (issue 15): an aligned table on a terminal, aligned plain lines when piped, --json as before."""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hashembed import HashingEmbedder
from typer.testing import CliRunner

from chapterverse.cli import app
from chapterverse import Library

LONG = "A Considerably Longer Title For A Document About The Sea And Its Many Moods"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


@pytest.fixture
def library(tmp_path: Path) -> Path:
    """Three documents whose titles differ in length by tens of characters."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.md").write_text("# Short\n\nSome text about whales.\n")
    (src / "b.md").write_text(f"# {LONG}\n\nText.\n")
    (src / "c.txt").write_text("plain text file\n")
    Library(tmp_path / "lib", embedder=HashingEmbedder()).ingest([src])
    return tmp_path / "lib"


def _on_a_terminal(*args: str, columns: int = 100) -> str:
    """The output of ``chapterverse ARGS`` with stdout on a pseudo-terminal, styles removed."""
    master, slave = pty.openpty()
    env = {**os.environ, "COLUMNS": str(columns)}
    result = subprocess.run([sys.executable, "-m", "chapterverse", *args], stdout=slave, stderr=slave, env=env)
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child has exited and closed its side
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    assert result.returncode == 0
    return _ANSI.sub("", b"".join(chunks).decode())


def test_a_terminal_gets_a_table_whose_columns_line_up(library: Path) -> None:
    lines = [line for line in _on_a_terminal("docs", "--library", str(library)).splitlines() if line.strip()]
    header = next(line for line in lines if "title" in line)
    assert all(name in header for name in ("id", "format", "files", "chunks", "source"))
    rows = {line.split()[0]: line for line in lines if line.split()[0] in ("1", "2", "3")}
    assert set(rows) == {"1", "2", "3"}
    for column, values in (("format", ("markdown", "markdown", "text")), ("source", ("a.md", "b.md", "c.txt"))):
        starts = {rows[str(n + 1)].index(value) for n, value in enumerate(values)}
        assert starts == {header.index(column)}, (column, lines)
    assert rows["1"].index("Short") == rows["2"].index("A Considerably") == header.index("title")


def test_piped_output_is_one_line_per_document_in_aligned_columns(library: Path) -> None:
    """``docs | less``: no table borders or styles, but every column starts where it starts on the other lines;
    a title longer than the title column (60 characters) pushes only its own line's source to the right."""
    result = CliRunner().invoke(app, ["docs", "--library", str(library)])
    assert result.exit_code == 0
    title = "{:<60}"
    assert result.output.splitlines() == [
        f"1  markdown  1 file   1 chunk   {title.format('Short')}  a.md",
        f"2  markdown  1 file   1 chunk   {LONG}  b.md",
        f"3  text      1 file   1 chunk   {title.format('plain text file')}  c.txt",
    ]


def test_piped_counts_line_up_and_say_their_unit(tmp_path: Path) -> None:
    """Numbers right-aligned under each other whatever their width; "1 chunk" but "12 chunks"."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "one.md").write_text("# One\n\nA line.\n")
    (src / "many.md").write_text("# Many\n\n" + "\n\n".join(f"Paragraph {i} " + "word " * 60 for i in range(40)))
    Library(tmp_path / "lib", embedder=HashingEmbedder(), chunk_size=80).ingest([src])
    lines = CliRunner().invoke(app, ["docs", "--library", str(tmp_path / "lib")]).output.splitlines()
    many, one = sorted(lines, key=lambda line: "Many" not in line)
    count = int(many.split()[4])
    assert count >= 10 and f" {count} chunks  Many" in many and " 1 chunk   One" in one
    assert many.index("chunk") == one.index("chunk") and many.index("Many") == one.index("One")


def test_json_is_unchanged(library: Path) -> None:
    for output in (CliRunner().invoke(app, ["docs", "--json", "--library", str(library)]).output,
                   _on_a_terminal("docs", "--json", "--library", str(library))):
        documents = json.loads(output)["documents"]
        assert [d["title"] for d in documents] == ["Short", LONG, "plain text file"]
        assert set(documents[0]) == {"id", "title", "source", "format", "files", "chunks", "segments", "size_bytes"}


BOOK = "# The Keeper\n\n## Chapter One\n\nThe lamp.\n\n### The Stair\n\nA key.\n\n## Chapter Two\n\nStorms.\n"


@pytest.fixture
def book(tmp_path: Path) -> tuple[Path, int]:
    """A library holding one Markdown book with chapters and a section, and the book's id."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "keeper.md").write_text(BOOK)
    result = Library(tmp_path / "lib", embedder=HashingEmbedder()).ingest([src])
    return tmp_path / "lib", result[0].document.id


def test_a_document_id_shows_its_contents_indented_with_where_each_entry_starts(book: tuple[Path, int]) -> None:
    library, doc_id = book
    result = CliRunner().invoke(app, ["docs", str(doc_id), "--library", str(library)])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == f"{doc_id}  The Keeper"
    entries = [re.fullmatch(r"  f(\d+)-(\d+) +(\S.*)", line) for line in lines[1:]]
    assert all(entries), lines
    titles = [m[3] for m in entries if m]
    assert titles == ["The Keeper", "Chapter One", "The Stair", "Chapter Two"]
    column = lines[1].index("The Keeper")  # the starts' column is as wide as the widest, then the indent
    assert [(line.index(title) - column) // 2 for line, title in zip(lines[1:], titles)] == [0, 1, 2, 1]
    store = Library(library, embedder=HashingEmbedder()).store
    for m in entries:  # each start is the start of its heading's line in the stored text ("## Chapter One")
        heading = store.file_slice(int(m[1]), int(m[2]), int(m[2]) + len(m[3]) + 4) if m else None
        assert m and heading and heading.split("\n")[0].lstrip("# ") == m[3], heading


def test_contents_as_json_are_the_reader_api_s_toc(book: tuple[Path, int]) -> None:
    library, doc_id = book
    for args in (["docs", str(doc_id), "--json"], ["--json", "docs", str(doc_id)]):
        result = CliRunner().invoke(app, [*args, "--library", str(library)])
        assert result.exit_code == 0, result.output
        data = json.loads(result.output)
        assert (data["doc_id"], data["title"]) == (doc_id, "The Keeper")
        assert [(t["title"], t["level"]) for t in data["toc"]] == [
            ("The Keeper", 0), ("Chapter One", 1), ("The Stair", 2), ("Chapter Two", 1)]
        assert all(set(t) == {"title", "level", "file", "offset"} for t in data["toc"])


def test_contents_of_an_unknown_document_is_an_input_error_and_help_says_how(book: tuple[Path, int]) -> None:
    library, doc_id = book
    result = CliRunner().invoke(app, ["docs", str(doc_id + 7), "--library", str(library)])
    assert result.exit_code == 2 and f"no document with id {doc_id + 7}" in result.output
    help_text = CliRunner().invoke(app, ["docs", "--help"]).output
    assert "DOC" in help_text and "contents" in help_text
