"""What the two stores share, written once: the reads whose SQL both databases accept as written, and the
messages both give (an unknown chat, a schema too new, vectors that do not match, integrity problems).

``SQLiteStore`` and ``PostgresStore`` inherit :class:`SharedReads` and give it ``_rows`` and ``_one`` (run a
statement, all rows or the first) and ``_P``, their driver's parameter mark (``?`` for sqlite3, ``%s`` for
psycopg); the statements below name parameters only through ``_P``. Reads that need each database's own SQL
(full-text search, vectors, id batches, text slices) stay in the store modules.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar

from ..errors import EmbeddingMismatchError, NotFoundError, StoreError
from ..positions import without_nul
from .records import (
    CHAT_COLUMNS,
    CHUNK_COLUMNS,
    DOC_COLUMNS,
    FILE_COLUMNS,
    MESSAGE_COLUMNS,
    SEGMENT_COLUMNS,
    TOC_COLUMNS,
    ChatRecord,
    ChunkRecord,
    DocumentRecord,
    FileRecord,
    MessageRecord,
    NewDocument,
    SegmentRecord,
    TocRecord,
    chat_record,
    chunk_record,
    document_record,
    file_record,
    message_record,
    segment_record,
    toc_record,
)

__all__ = ["SharedReads", "no_chat", "cannot_open", "newer_schema", "refuse_unmatched_vectors",
           "chunks_without_vectors", "chunks_off_their_text"]


# -- the messages both stores give
def no_chat(chat_id: int) -> NotFoundError:
    return NotFoundError(f"no chat with id {chat_id}")


def cannot_open(where: str, exc: Exception) -> StoreError:
    return StoreError(f"{where}: cannot open library: {exc}")


def newer_schema(where: str, version: int, supported: int) -> StoreError:
    """A library that a newer chapterverse migrated: never read by this one, which might misread it."""
    return StoreError(f"{where}: library schema v{version} is newer than this chapterverse (v{supported})")


def refuse_unmatched_vectors(docs: Sequence[NewDocument]) -> None:
    """StoreError, before anything is written, for a document whose vectors are not one per chunk."""
    for doc in docs:
        if len(doc.vectors) != len(doc.chunks):
            raise StoreError(f"{doc.source}: {len(doc.chunks)} chunks but {len(doc.vectors)} vectors")


def chunks_without_vectors(count: int) -> str:
    """The integrity problem of ``count`` chunks that no vector belongs to."""
    return f"{count} chunks have no vector"


def chunks_off_their_text(count: int) -> str:
    """The integrity problem of ``count`` chunks whose text is not their file's text at their span."""
    return f"{count} chunks do not match their file text at their position"


class SharedReads(ABC):
    """Meta, documents, files, TOC, segments, chunk listings and chats, read the same way from either database."""

    _P: ClassVar[str]
    """The driver's parameter mark."""

    @abstractmethod
    def _rows(self, query: str, args: Sequence[Any] = ()) -> list[Any]:
        """Every row of ``query``."""
        ...

    @abstractmethod
    def _one(self, query: str, args: Sequence[Any] = ()) -> Any:
        """The first row of ``query``, or None."""
        ...

    @abstractmethod
    def _source_prefix(self, prefix: str) -> tuple[str, list[Any]]:
        """(clause, arguments) of "``c.source`` starts with ``prefix``" in this database's SQL."""
        ...

    # -- meta
    def get_meta(self, key: str) -> str | None:
        row = self._one(f"SELECT value FROM meta WHERE key={self._P}", (key,))
        return row[0] if row else None

    def _refuse_another_model(self, where: str, name: str, dim: int) -> None:
        """EmbeddingMismatchError unless the library's recorded model is ``name`` of ``dim``: one message for both
        stores, naming the command that re-embeds."""
        stored = self.get_meta("embedding_model")
        stored_dim = int(self.get_meta("embedding_dim") or 0)
        if stored != name or stored_dim != dim:
            raise EmbeddingMismatchError(
                f"{where}: the library's vectors were made by {stored} (dim {stored_dim}), not {name} (dim {dim}); "
                f"run `chapterverse ingest --embedding-model {name} ...` to re-embed the library with it")

    def generation(self) -> int:
        """A counter bumped by every write that changes chunks, so caches know when to reload."""
        return int(self.get_meta("generation") or 0)

    # -- documents
    def documents(self) -> list[DocumentRecord]:
        return [document_record(r) for r in self._rows(f"SELECT {DOC_COLUMNS} FROM documents d ORDER BY d.id")]

    def document(self, doc_id: int) -> DocumentRecord:
        row = self._one(f"SELECT {DOC_COLUMNS} FROM documents d WHERE d.id={self._P}", (doc_id,))
        if row is None:
            raise NotFoundError(f"no document with id {doc_id}")
        return document_record(row)

    def documents_by_source(self, source: str) -> list[DocumentRecord]:
        rows = self._rows(f"SELECT {DOC_COLUMNS} FROM documents d WHERE d.source={self._P} ORDER BY d.id",
                          (without_nul(source),))
        return [document_record(r) for r in rows]

    def documents_by_content(self, content_hash: str) -> list[DocumentRecord]:
        rows = self._rows(f"SELECT {DOC_COLUMNS} FROM documents d WHERE d.content_hash={self._P} ORDER BY d.id",
                          (without_nul(content_hash),))
        return [document_record(r) for r in rows]

    def languages(self) -> list[str]:
        return [r[0] for r in self._rows("SELECT DISTINCT language FROM documents ORDER BY language")]

    def max_chunk_id(self) -> int:
        """The largest chunk id in the library (0 when empty)."""
        return int(self._one("SELECT coalesce(max(id), 0) FROM chunks")[0])

    # -- files, TOC, segments
    def files(self, doc_id: int) -> list[FileRecord]:
        rows = self._rows(f"SELECT {FILE_COLUMNS}, '' FROM files WHERE doc_id={self._P} ORDER BY ordinal", (doc_id,))
        return [file_record(r) for r in rows]

    def file_lengths(self, doc_id: int) -> dict[int, int]:
        return {r[0]: r[1] for r in self._rows(f"SELECT id, length(text) FROM files WHERE doc_id={self._P}",
                                               (doc_id,))}

    def file(self, file_id: int) -> FileRecord:
        row = self._one(f"SELECT {FILE_COLUMNS}, text FROM files WHERE id={self._P}", (file_id,))
        if row is None:
            raise NotFoundError(f"no file with id {file_id}")
        return file_record(row)

    def toc(self, doc_id: int) -> list[TocRecord]:
        rows = self._rows(f"SELECT {TOC_COLUMNS} FROM toc WHERE doc_id={self._P} ORDER BY ordinal", (doc_id,))
        return [toc_record(r) for r in rows]

    def segments(self, doc_id: int) -> list[SegmentRecord]:
        rows = self._rows(f"SELECT {SEGMENT_COLUMNS} FROM segments WHERE doc_id={self._P} ORDER BY seq", (doc_id,))
        return [segment_record(r) for r in rows]

    # -- chunk listings
    def chunks(self, *, doc_id: int | None = None, source_prefix: str | None = None, source_exact: str | None = None,
               limit: int | None = None, offset: int = 0) -> list[ChunkRecord]:
        where, args = self._chunk_filter(doc_id, source_prefix, source_exact)
        query = f"SELECT {CHUNK_COLUMNS} FROM chunks c JOIN documents d ON d.id=c.doc_id {where} ORDER BY c.id"
        if limit is not None:
            query += f" LIMIT {self._P} OFFSET {self._P}"
            args += [limit, offset]
        return self._chunk_records(self._rows(query, args))

    def _chunk_records(self, rows: Sequence[Any]) -> list[ChunkRecord]:
        """The records of rows of :data:`CHUNK_COLUMNS` (a store that keeps some chunks' text as a span of their
        file's text fills it in here)."""
        return [chunk_record(r) for r in rows]

    def count_chunks(self, *, doc_id: int | None = None, source_prefix: str | None = None,
                     source_exact: str | None = None) -> int:
        where, args = self._chunk_filter(doc_id, source_prefix, source_exact)
        return int(self._one(f"SELECT count(*) FROM chunks c {where}", args)[0])

    def _chunk_filter(self, doc_id: int | None, prefix: str | None, exact: str | None) -> tuple[str, list[Any]]:
        clauses: list[str] = []
        args: list[Any] = []
        if doc_id is not None:
            clauses.append(f"c.doc_id={self._P}")
            args.append(doc_id)
        if exact is not None:
            clauses.append(f"c.source={self._P}")
            args.append(without_nul(exact))
        if prefix:
            clause, more = self._source_prefix(without_nul(prefix))
            clauses.append(clause)
            args += more
        return ("WHERE " + " AND ".join(clauses)) if clauses else "", args

    def lexical_rows(self) -> list[tuple[int, int, int, str, str]]:
        """(chunk id, doc id, file id, terms, heading terms) of every chunk in id order: what an in-memory
        lexical index is built from (``chapterverse.search.retrieval``)."""
        return self._rows("SELECT id, doc_id, file_id, terms, heading_terms FROM chunks ORDER BY id")

    # -- chats
    def chats(self, doc_id: int | None = None) -> list[ChatRecord]:
        query, args = f"SELECT {CHAT_COLUMNS} FROM chats", []
        if doc_id is not None:
            query, args = query + f" WHERE doc_id={self._P}", [doc_id]
        return [chat_record(r) for r in self._rows(query + " ORDER BY id", args)]

    def chat(self, chat_id: int) -> ChatRecord:
        row = self._one(f"SELECT {CHAT_COLUMNS} FROM chats WHERE id={self._P}", (chat_id,))
        if row is None:
            raise no_chat(chat_id)
        return chat_record(row)

    def messages(self, chat_id: int) -> list[MessageRecord]:
        rows = self._rows(f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE chat_id={self._P} ORDER BY seq", (chat_id,))
        return [message_record(r) for r in rows]
