"""Where a library lives. SQLite is the embedded default; ``postgresql://`` URLs select PostgreSQL."""

from __future__ import annotations

from pathlib import Path

from .records import (
    ChatRecord,
    ChunkRecord,
    DocumentRecord,
    FileRecord,
    MessageRecord,
    NewChunk,
    NewDocument,
    NewFile,
    NewSegment,
    SegmentRecord,
    TocRecord,
)
from .sqlite import SQLiteStore

__all__ = [
    "open_store",
    "SQLiteStore",
    "ChatRecord",
    "ChunkRecord",
    "DocumentRecord",
    "FileRecord",
    "MessageRecord",
    "NewChunk",
    "NewDocument",
    "NewFile",
    "NewSegment",
    "SegmentRecord",
    "TocRecord",
]

LIBRARY_FILENAME = "library.sqlite3"


def open_store(location: str | Path) -> SQLiteStore:
    """Open the store at ``location``: a library directory, a ``.sqlite3`` file, or a ``sqlite:///`` URL."""
    text = str(location)
    if text.startswith("sqlite:///"):
        return SQLiteStore(text.removeprefix("sqlite:///"))
    path = Path(text).expanduser()
    if path.suffix in {".sqlite3", ".sqlite", ".db"}:
        return SQLiteStore(path)
    return SQLiteStore(path / LIBRARY_FILENAME)
