"""Where a library lives. SQLite is the embedded default; ``postgresql://`` URLs select PostgreSQL.

Code outside this package is typed against :class:`Store` (``protocol.py``), never against one implementation.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from .protocol import Store, VectorSearch
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

if TYPE_CHECKING:
    from .postgres import PostgresStore

__all__ = [
    "open_store",
    "Store",
    "VectorSearch",
    "SQLiteStore",
    "PostgresStore",
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
POSTGRES_SCHEMES = ("postgresql://", "postgres://")


def __getattr__(name: str) -> Any:
    """``PostgresStore`` is imported on first use: psycopg and pgvector are an optional extra."""
    if name == "PostgresStore":
        from .postgres import PostgresStore

        return PostgresStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def open_store(location: str | Path) -> Store:
    """Open the store at ``location``: a library directory, a ``.sqlite3`` file, a ``sqlite:///`` URL, or a
    ``postgresql://`` URL (any libpq URL; ``?options=-csearch_path%3Dname`` picks the schema)."""
    text = str(location)
    if text.startswith(POSTGRES_SCHEMES):
        from .postgres import PostgresStore

        return PostgresStore(text)
    if text.startswith("sqlite:///"):
        return SQLiteStore(text.removeprefix("sqlite:///"))
    path = Path(text).expanduser()
    if path.suffix in {".sqlite3", ".sqlite", ".db"}:
        return SQLiteStore(path)
    return SQLiteStore(path / LIBRARY_FILENAME)
