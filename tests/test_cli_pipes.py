"""Output piped into a reader that stops early (``chapterverse docs | head -1``): the command prints what fits and
ends quietly, as ``seq 100000 | head -1`` does, instead of click's and rich's silent exit 1 (the status of a
failure). Real processes writing into real pipes."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from hashembed import HashingEmbedder

from chapterverse import Library

DEMO = Path(__file__).resolve().parents[1] / "src" / "chapterverse" / "demo"
COMMAND = [sys.executable, "-m", "chapterverse"]


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo book, embedded by a test embedder (none of these commands embeds anything)."""
    location = tmp_path_factory.mktemp("pipes") / "lib"
    Library(location, embedder=HashingEmbedder()).ingest([DEMO])
    return location


def into_closed_pipe(*args: str) -> subprocess.CompletedProcess[str]:
    """``chapterverse ARGS`` writing into a pipe whose reader has already gone."""
    reader, writer = os.pipe()
    os.close(reader)
    try:
        return subprocess.run([*COMMAND, *args], stdout=writer, stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(writer)


@pytest.mark.parametrize("args", [
    ["--help"],                                  # printed while click parses the arguments
    ["docs", "--help"],
    ["docs", "--library", "{lib}"],              # print()
    ["--json", "docs", "--library", "{lib}"],
    ["summaries", "--doc", "1", "--library", "{lib}"],  # rich's console
], ids=["help", "command help", "docs", "docs --json", "summaries"])
def test_a_reader_that_went_away_ends_the_command_quietly(library: Path, args: list[str]) -> None:
    result = into_closed_pipe(*(a.format(lib=library) for a in args))
    assert (result.returncode, result.stderr) == (141, "")  # 128 + SIGPIPE, as a shell reports for seq


def test_head_prints_the_first_line_and_nothing_complains(library: Path) -> None:
    pipeline = f"{shlex.join([*COMMAND, 'docs', '--library', str(library)])} | head -1"
    result = subprocess.run(["bash", "-c", pipeline], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0
    assert result.stdout.split() == ["1", "markdown", "1", "file", "7", "chunks", "The", "Keeper", "of", "Gull",
                                     "Rock", "the-keeper-of-gull-rock.md"]
    assert result.stderr == ""
