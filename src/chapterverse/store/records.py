"""Plain records that cross the store boundary. Both store implementations speak only these."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
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
    terms: str
    heading_terms: str = ""
    title_path: list[str] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)


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
        chunks=[replace(c, source=without_nul(c.source), terms=without_nul(c.terms),
                        heading_terms=without_nul(c.heading_terms), title_path=_nul_free_path(c.title_path))
                for c in doc.chunks],
    )


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
