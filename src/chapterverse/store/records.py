"""Plain records that cross the store boundary, and the row mappers both store implementations read them with.

Both stores select the same columns in the same order (``*_COLUMNS``) and map rows with the same functions;
the drivers differ only in what they hand back for JSON (text from SQLite, decoded from psycopg), booleans
(0/1 from SQLite) and timestamps (ISO text from SQLite, ``datetime`` from psycopg), which the mappers even out.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from ..positions import without_nul

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "DocumentRecord",
    "FileRecord",
    "TocRecord",
    "SegmentRecord",
    "ChunkRecord",
    "NewFile",
    "NewSegment",
    "NewChunk",
    "NewDocument",
    "ChatRecord",
    "MessageRecord",
    "nul_free",
    "DOC_COLUMNS",
    "CHUNK_COLUMNS",
    "FILE_COLUMNS",
    "TOC_COLUMNS",
    "SEGMENT_COLUMNS",
    "CHAT_COLUMNS",
    "MESSAGE_COLUMNS",
    "document_record",
    "chunk_record",
    "file_record",
    "toc_record",
    "segment_record",
    "chat_record",
    "message_record",
    "iso",
    "vector_blob",
    "kept_vector",
]


@dataclass(slots=True)
class DocumentRecord:
    id: int
    source: str
    title: str
    format: str
    content_hash: str
    size_bytes: int
    language: str
    metadata: dict[str, Any]
    dynamic: bool
    ephemeral: bool
    created_at: str
    files: int = 0
    chunks: int = 0
    segments: int = 0


@dataclass(slots=True)
class FileRecord:
    id: int
    doc_id: int
    ordinal: int
    title: str
    label: str
    has_text: bool
    text: str


@dataclass(slots=True)
class TocRecord:
    doc_id: int
    ordinal: int
    level: int
    title: str
    file_id: int
    offset: int


@dataclass(slots=True)
class SegmentRecord:
    id: int
    doc_id: int
    seq: int
    title_path: list[str]
    start_file: int
    start_offset: int
    end_file: int
    end_offset: int
    content_hash: str


@dataclass(slots=True)
class ChunkRecord:
    id: int
    doc_id: int
    file_id: int
    start: int
    end: int
    text: str
    source: str
    chunk_index: int
    metadata: dict[str, Any]
    title_path: list[str]
    dynamic: bool = False


@dataclass(slots=True)
class NewFile:
    text: str
    title: str = ""
    label: str = ""
    has_text: bool = True


@dataclass(slots=True)
class NewSegment:
    """Positions use file *ordinals* within the new document; the store maps them to file ids."""

    seq: int
    title_path: list[str]
    start_ordinal: int
    start_offset: int
    end_ordinal: int
    end_offset: int
    content_hash: str


@dataclass(slots=True)
class NewChunk:
    file_ordinal: int
    start: int
    end: int
    source: str
    chunk_index: int
    terms: str | None = None
    """The lexical index's terms of the chunk's text; None (what ingest gives): the analyzer's terms of the text in
    the document's language (``analysis.index_terms``), which a store derives when they are read instead of
    keeping a copy."""
    heading_terms: str = ""
    title_path: list[str] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
    context: str = ""
    """What the chunk's source path and metadata say (``chunking.context``): embedded with its text, not stored
    as text (its words are in ``heading_terms``)."""


@dataclass(slots=True)
class NewDocument:
    """Everything one document adds to the library, written in one transaction."""

    source: str
    title: str
    format: str
    content_hash: str
    size_bytes: int
    language: str
    files: list[NewFile]
    toc: list[tuple[int, str, int, int]]
    """(level, title, file ordinal, offset)"""
    segments: list[NewSegment]
    chunks: list[NewChunk]
    vectors: np.ndarray
    """float32 (len(chunks), dim), unit rows, same order as ``chunks``."""
    metadata: dict[str, Any] = field(default_factory=dict)
    dynamic: bool = False
    ephemeral: bool = False


def _nul_free_path(path: list[str]) -> list[str]:
    return [without_nul(part) for part in path]


def nul_free(doc: NewDocument) -> NewDocument:
    """``doc`` with NUL replaced by U+FFFD in every text column it fills (JSON metadata keeps its escapes).

    Both stores write what this returns, so a document reads back the same from either, and PostgreSQL, whose
    text cannot hold NUL, accepts it; the replacement is one code point, so spans and offsets stay valid.
    """
    return replace(
        doc, source=without_nul(doc.source), title=without_nul(doc.title), format=without_nul(doc.format),
        content_hash=without_nul(doc.content_hash), language=without_nul(doc.language),
        files=[replace(f, text=without_nul(f.text), title=without_nul(f.title), label=without_nul(f.label))
               for f in doc.files],
        toc=[(level, without_nul(title), ordinal, offset) for level, title, ordinal, offset in doc.toc],
        segments=[replace(s, title_path=_nul_free_path(s.title_path), content_hash=without_nul(s.content_hash))
                  for s in doc.segments],
        chunks=[replace(c, source=without_nul(c.source), terms=None if c.terms is None else without_nul(c.terms),
                        heading_terms=without_nul(c.heading_terms), title_path=_nul_free_path(c.title_path))
                if _has_nul(c) else c for c in doc.chunks],
    )


def _has_nul(chunk: NewChunk) -> bool:
    """Whether a text column of ``chunk`` holds NUL (rare: most chunks are passed on as they are, not copied)."""
    return any("\0" in text for text in (chunk.source, chunk.terms or "", chunk.heading_terms, *chunk.title_path))


@dataclass(slots=True)
class ChatRecord:
    id: int
    doc_id: int | None
    title: str
    created_at: str


@dataclass(slots=True)
class MessageRecord:
    chat_id: int
    seq: int
    role: str
    content: str
    result: dict[str, Any] | None
    created_at: str


# -- row mappers (one per record; both stores select the columns below, in this order) ---------------------------
DOC_COLUMNS = (
    "d.id, d.source, d.title, d.format, d.content_hash, d.size_bytes, d.language, d.metadata, d.dynamic,"
    " d.ephemeral, d.created_at,"
    " (SELECT count(*) FROM files f WHERE f.doc_id=d.id),"
    " (SELECT count(*) FROM chunks c WHERE c.doc_id=d.id),"
    " (SELECT count(*) FROM segments s WHERE s.doc_id=d.id)"
)
"""Columns of ``documents d`` for :func:`document_record`."""
CHUNK_COLUMNS = (
    'c.id, c.doc_id, c.file_id, c.start, c."end", c.text, c.source, c.chunk_index, c.metadata, c.title_path,'
    " d.dynamic"
)
"""Columns of ``chunks c JOIN documents d`` for :func:`chunk_record`."""
FILE_COLUMNS = "id, doc_id, ordinal, title, label, has_text"
"""Columns of ``files`` for :func:`file_record`, which also takes the text (or ``''`` for a listing) after them."""
TOC_COLUMNS = 'doc_id, ordinal, level, title, file_id, "offset"'
SEGMENT_COLUMNS = "id, doc_id, seq, title_path, start_file, start_offset, end_file, end_offset, content_hash"
CHAT_COLUMNS = "id, doc_id, title, created_at"
MESSAGE_COLUMNS = "chat_id, seq, role, content, result, created_at"


def vector_blob(vector: np.ndarray) -> bytes:
    """A vector as both stores keep it in BLOB/bytea columns: little-endian float32."""
    import numpy as np  # here, not at the top: commands that only read rows start without numpy

    return np.asarray(vector, dtype="<f4").tobytes()


def kept_vector(vector: np.ndarray) -> np.ndarray:
    """A vector as every store keeps it in a library: float32 values of float16 precision (the SQLite vector file
    holds float16, :mod:`.vectorfile`), so that both stores score and rank a library alike."""
    import numpy as np

    return np.asarray(vector, np.float32).astype(np.float16).astype(np.float32)


def iso(value: str | datetime) -> str:
    """A timestamp as SQLiteStore stores it (UTC, ISO 8601, whole seconds); text passes through."""
    if isinstance(value, datetime):
        return value.astimezone(timezone.utc).isoformat(timespec="seconds")
    return value


def _json(value: Any) -> Any:
    """A JSON column's value: SQLite hands back the text, psycopg the decoded value (json, text[])."""
    return json.loads(value) if isinstance(value, str) else value


def document_record(row: Sequence[Any]) -> DocumentRecord:
    return DocumentRecord(
        id=row[0], source=row[1], title=row[2], format=row[3], content_hash=row[4], size_bytes=row[5],
        language=row[6], metadata=_json(row[7]), dynamic=bool(row[8]), ephemeral=bool(row[9]),
        created_at=iso(row[10]), files=row[11], chunks=row[12], segments=row[13],
    )


def chunk_record(row: Sequence[Any]) -> ChunkRecord:
    return ChunkRecord(row[0], row[1], row[2], row[3], row[4], row[5], row[6], row[7], _json(row[8]),
                       _json(row[9]), bool(row[10]))


def file_record(row: Sequence[Any]) -> FileRecord:
    return FileRecord(row[0], row[1], row[2], row[3], row[4], bool(row[5]), row[6])


def toc_record(row: Sequence[Any]) -> TocRecord:
    return TocRecord(row[0], row[1], row[2], row[3], row[4], row[5])


def segment_record(row: Sequence[Any]) -> SegmentRecord:
    return SegmentRecord(row[0], row[1], row[2], _json(row[3]), row[4], row[5], row[6], row[7], row[8])


def chat_record(row: Sequence[Any]) -> ChatRecord:
    return ChatRecord(row[0], row[1], row[2], iso(row[3]))


def message_record(row: Sequence[Any]) -> MessageRecord:
    """``result`` is NULL for a message without one (both stores write NULL for an empty result)."""
    return MessageRecord(row[0], row[1], row[2], row[3], _json(row[4]) if row[4] else None, iso(row[5]))
