"""Concurrent ``.npy`` loads never raise CPython 3.11's "AST constructor recursion depth mismatch".

Found by the load run (scripts/loadtest.py): a search that reopened the memory-mapped indexes after a write
failed with SystemError. See chapterverse.threadsafe_ast for the mechanism.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np

from chapterverse.index.files import load_npy

THREADS = 8
LOADS = 1200


def _hammer(load: Callable[[], object], database: Path) -> list[str]:
    """``load`` from many threads while each leaves SQLite connections in reference cycles: the collector
    frees them at random moments, and closing one drops the GIL in the middle of whatever runs."""
    errors: list[str] = []

    def work() -> None:
        for _ in range(LOADS):
            try:
                load()
            except SystemError as exc:
                errors.append(str(exc))
            cycle: list[object] = [sqlite3.connect(database)]
            cycle.append(cycle)

    threads = [threading.Thread(target=work) for _ in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors


def test_concurrent_index_loads_take_turns_parsing_headers(tmp_path: Path) -> None:
    path = tmp_path / "ids.npy"
    np.save(path, np.arange(10, dtype="<i8"))
    assert _hammer(lambda: load_npy(path, 10, "<i8"), tmp_path / "gc.db") == []
