"""Where a library lives. SQLite is the embedded default; ``postgresql://`` URLs select PostgreSQL.

Code outside this package is typed against :class:`Store` (``protocol.py``), or the one of its roles it needs
(:class:`DocumentStore`, :class:`ChunkStore`, :class:`SummaryStore`, :class:`ChatStore`, :class:`LockStore`,
:class:`MetaStore`, :class:`StoreUpkeep`, :class:`StoreConnection`),
never against one implementation.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..paths import expand_user
from .protocol import (
    ChatStore,
    ChunkStore,
    DocumentStore,
    IndexFeed,
    LockStore,
    MetaStore,
    Store,
    StoreConnection,
    StoreUpkeep,
    SummaryStore,
    VectorSearch,
)
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
    "DocumentStore",
    "ChunkStore",
    "SummaryStore",
    "ChatStore",
    "LockStore",
    "MetaStore",
    "StoreUpkeep",
    "StoreConnection",
    "VectorSearch",
    "IndexFeed",
    "sqlite_file",
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
    path = sqlite_file(location)
    if path is None:
        from .postgres import PostgresStore

        return PostgresStore(str(location))
    return SQLiteStore(path)


def sqlite_file(location: str | Path) -> Path | None:
    """The SQLite file :func:`open_store` opens for ``location`` (None for a PostgreSQL URL), so that a caller
    that must not create a library (a read-only command) can first check that it exists."""
    text = str(location)
    if text.startswith(POSTGRES_SCHEMES):
        return None
    if text.startswith("sqlite:///"):
        return Path(text.removeprefix("sqlite:///"))
    path = expand_user(text)
    if path.suffix in {".sqlite3", ".sqlite", ".db"}:
        return path
    return path / LIBRARY_FILENAME
