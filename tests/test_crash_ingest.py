"""An ingest killed with SIGKILL at random moments leaves the library consistent and loses nothing committed."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from chapterverse import Library

WORDS = ("lantern harbour keeper storm gull rock ledger tide rope brass bell ship reef fog cat oar salt "
         "island winter signal cliff wave lamp stair window rain").split()


def _book(path: Path, chapters: int = 12, seed: int = 7) -> Path:
    rng = random.Random(seed)
    parts = []
    for c in range(chapters):
        parts.append(f"## Chapter {c + 1}\n")
        for _ in range(8):
            parts.append(" ".join(rng.choice(WORDS) for _ in range(60)).capitalize() + ".\n")
    path.write_text("\n".join(parts), encoding="utf-8")
    return path


def _ingest(library: Path, book: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "chapterverse", "ingest", str(book), "--library", str(library)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ})


@pytest.mark.slow
def test_killed_ingest_leaves_nothing_half_written(tmp_path: Path) -> None:
    book = _book(tmp_path / "book.md")
    reference = Library(tmp_path / "reference")
    expected = reference.ingest([book])[0].document
    rng = random.Random(11)
    library_dir = tmp_path / "victim"
    for _ in range(3):
        proc = _ingest(library_dir, book)
        time.sleep(rng.uniform(0.3, 2.5))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        lib = Library(library_dir)
        assert lib.store.integrity_problems() == []
        docs = lib.documents()
        assert len(docs) <= 1
        if docs:
            assert (docs[0].chunks, docs[0].files, docs[0].segments) == (
                expected.chunks, expected.files, expected.segments)
        lib.close()
    final = Library(library_dir).ingest([book])[0]
    assert final.document.chunks == expected.chunks
    assert Library(library_dir).ingest([book])[0].changed is False
