"""``chapterverse check [--repair]``: a damaged library exits 1 naming the damage; --repair rebuilds what is derived."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from hashembed import HashingEmbedder
from typer.testing import CliRunner

from chapterverse.cli import app
from chapterverse import Library

DEMO = Path(__file__).resolve().parents[1] / "src" / "chapterverse" / "demo"


@pytest.fixture
def library(tmp_path: Path) -> Path:
    Library(tmp_path, embedder=HashingEmbedder()).ingest(sorted(DEMO.iterdir()))
    return tmp_path


def _check(library: Path, *flags: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["check", "--library", str(library), *flags])
    return result.exit_code, result.output


def _sql(library: Path, statement: str) -> None:
    db = sqlite3.connect(library / "library.sqlite3")
    with db:
        row = db.execute("SELECT id FROM chunks ORDER BY id LIMIT 1").fetchone()
        db.execute(statement, row)
    db.close()


def test_a_consistent_library_is_ok(library: Path) -> None:
    assert _check(library) == (0, "ok\n")


def test_a_missing_vector_is_found_and_not_hidden_by_repair(library: Path) -> None:
    # the first chunk's vector cut out of its document's block (the block then starts at the second chunk)
    _sql(library, "UPDATE vector_blocks SET first_chunk = first_chunk + 1, count = count - 1, row = row + 1"
                  " WHERE first_chunk = ?")
    for flags in ((), ("--repair",)):
        code, output = _check(library, *flags)
        assert code == 1 and "1 chunks have no vector" in output
