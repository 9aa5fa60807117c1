"""The store interface: what every part of chapterverse may ask of a library, whichever database holds it.

:class:`~chapterverse.store.sqlite.SQLiteStore` and :class:`~chapterverse.store.postgres.PostgresStore`
implement :class:`Store`; code outside ``store/`` is typed against it, so a second implementation is checked by
mypy at every call site rather than discovered by a test. :class:`Store` is the union of eight roles, each a
protocol a caller can name when it needs no more (``chat_markdown(store: ChatStore, ...)``):

- :class:`DocumentStore`: documents and their files, TOC and segments, written and read whole;
- :class:`ChunkStore`: chunks and vectors, the search primitives and what the embedding model recorded;
- :class:`SummaryStore`: the segment summaries a model wrote, by model and prompt version;
- :class:`ChatStore`: the reader's chats and their messages;
- :class:`LockStore`: locks between the processes that use one library;
- :class:`MetaStore`: the library's own values by key (its embedding model);
- :class:`StoreUpkeep`: the catch-up, checks and repairs that span every table;
- :class:`StoreConnection`: where the library lives, and closing its connections.

What only some stores can do is an explicit capability, a flag (:attr:`ChunkStore.lists_terms`) or a property
that is ``None`` where the store lacks it (:attr:`ChunkStore.vector_search`, :attr:`ChunkStore.index_feed`),
never a probe of attribute names or of the store's class.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from .records import (
    ChatRecord,
    ChunkRecord,
    DocumentRecord,
    FileRecord,
    MessageRecord,
    NewDocument,
    SegmentRecord,
    TocRecord,
)

if TYPE_CHECKING:
    import numpy as np

    from .vectorfile import VectorRows

__all__ = ["Store", "DocumentStore", "ChunkStore", "SummaryStore", "ChatStore", "LockStore", "MetaStore",
           "StoreUpkeep", "StoreConnection", "VectorSearch", "IndexFeed", "LexicalRow"]

LexicalRow = tuple[int, int, int, str, str]
"""(chunk id, doc id, file id, terms, heading terms) of one chunk: what an in-process BM25 index is built from."""


class VectorSearch(Protocol):
    """Nearest-neighbour search run by the database itself, so that no process holds every vector."""

    def dense_search(self, vector: np.ndarray, *, k: int, doc_ids: Sequence[int] | None = None
                     ) -> list[tuple[int, float]]:
        """The ``k`` chunks nearest to ``vector`` by cosine, best first: (chunk id, cosine similarity)."""
        ...

    def vectors_by_ids(self, chunk_ids: Sequence[int]) -> dict[int, np.ndarray]:
        """The stored vector of each known chunk id (float32, as written)."""
        ...


class IndexFeed(Protocol):
    """What a store lends the indexes kept in files beside it (:mod:`chapterverse.index`), so that they follow its
    writes by appending instead of rebuilding: where the library's file is, one read transaction, and what was
    written after a chunk id. Chunk ids only grow, so what is newer than the largest id an index holds is exactly
    what was written since, but for chunks edited in place (:meth:`last_edit`). Every read below is of the state the
    enclosing :meth:`read_transaction` sees (call them inside one)."""

    @property
    def path(self) -> Path:
        """The library's file: the indexes' directories are named after it (``library.sqlite3`` ->
        ``library.vectors/``, ``library.lexical/``)."""
        ...

    def read_transaction(self) -> AbstractContextManager[object]:
        """One read transaction for the block (or the one already open), so that a generation and the rows read
        in it are of one state of the library."""
        ...

    def lexical_rows_since(self, after: int, *, through: int | None = None, limit: int) -> list[LexicalRow]:
        """:meth:`ChunkStore.lexical_rows` of the chunks with ``after`` < id (<= ``through``), ``limit`` at most,
        in id order: the feed of appends and of page-by-page builds."""
        ...

    def vector_rows_since(self, chunk_id: int) -> VectorRows:
        """Where the vectors of every chunk with an id above ``chunk_id`` are: rows of the vector file."""
        ...

    def vector_file_state(self) -> tuple[Path | None, int, int]:
        """The current vector file (None: no vector yet), the rows committed writes filled, and a row's width."""
        ...

    def last_edit(self) -> int:
        """The generation of the latest in-place edit of a chunk (:meth:`ChunkStore.update_chunk_metadata`; 0:
        none). Appending sees only chunk ids above the index's, never an edited chunk: an index of an older
        generation than this is rebuilt."""
        ...


class DocumentStore(Protocol):
    """Documents and their files, TOC and segments: each document written and removed whole."""

    def add_document(self, doc: NewDocument, *, replace: Sequence[int] = ()) -> int:
        """Insert a whole document (and remove ``replace`` ids) atomically; return its id."""
        ...

    def add_documents(self, docs: Sequence[NewDocument], *, replace: Sequence[int] = ()) -> list[int]:
        """Insert every document (and remove ``replace`` ids) in one transaction, all or nothing; return their ids
        in order. Many small documents written together cost each far less than one transaction apiece."""
        ...

    def remove_documents(self, doc_ids: Sequence[int]) -> int:
        """Remove documents (and everything derived from them) atomically; return how many existed."""
        ...

    def documents(self) -> list[DocumentRecord]: ...
    def document(self, doc_id: int) -> DocumentRecord: ...
    def documents_by_source(self, source: str) -> list[DocumentRecord]: ...

    def documents_by_content(self, content_hash: str) -> list[DocumentRecord]:
        """The documents whose content hash is ``content_hash`` (indexed): how a second copy is recognised."""
        ...

    def titles(self, doc_ids: Sequence[int]) -> dict[int, str]: ...
    def languages(self) -> list[str]: ...
    def files(self, doc_id: int) -> list[FileRecord]: ...
    def file_lengths(self, doc_id: int) -> dict[int, int]: ...
    def file(self, file_id: int) -> FileRecord: ...

    def file_slice(self, file_id: int, start: int, end: int) -> str | None:
        """The exact text of a span, or None when the file is unknown or the span is out of range."""
        ...

    def toc(self, doc_id: int) -> list[TocRecord]: ...
    def segments(self, doc_id: int) -> list[SegmentRecord]: ...


class ChunkStore(Protocol):
    """Chunks and their vectors: listings, the search primitives, the recorded embedding model and the cache of
    vectors made before they are written."""

    @property
    def lists_terms(self) -> bool:
        """Whether :meth:`lexical_rows` hands out every chunk's terms, so the retriever may build BM25 in process
        (both stores do); a store that keeps BM25 to itself says False and is searched through
        :meth:`lexical_search` alone."""
        ...

    @property
    def vector_search(self) -> VectorSearch | None:
        """The store's own dense search when it searches vectors in the database (PostgreSQL + pgvector);
        ``None`` when the process searches them (the memory-mapped vector index beside a SQLite file)."""
        ...

    @property
    def index_feed(self) -> IndexFeed | None:
        """What the indexes kept in files beside the store follow it by (SQLite); ``None`` where no index lives
        beside the store (PostgreSQL): an in-process index of it is then rebuilt in memory on every change."""
        ...

    def generation(self) -> int:
        """A counter bumped by every write that changes chunks, so caches know when to reload."""
        ...

    def check_embedding_model(self, name: str, dim: int) -> None:
        """Record the embedding model on first use; refuse vectors from any other."""
        ...

    def replace_embedding_model(self, name: str, dim: int, vectors: dict[int, np.ndarray]) -> None:
        """Swap every chunk's vector and the recorded model in one transaction."""
        ...

    def update_chunk_metadata(self, chunk_id: int, metadata: dict[str, Any], heading_terms: str,
                              vector: np.ndarray) -> bool:
        """Give one chunk new metadata, with the heading terms and vector its new context makes, in place and in
        one transaction: its id, document, file, span and text stay, so its position tag and every citation of
        it still resolve (a rewrite of its document would renumber them all). False when no chunk has that id."""
        ...

    # -- chunks
    def chunks_by_ids(self, chunk_ids: Sequence[int]) -> dict[int, ChunkRecord]: ...
    def chunks(self, *, doc_id: int | None = None, source_prefix: str | None = None, source_exact: str | None = None,
               limit: int | None = None, offset: int = 0) -> list[ChunkRecord]: ...
    def count_chunks(self, *, doc_id: int | None = None, source_prefix: str | None = None,
                     source_exact: str | None = None) -> int: ...

    def source_counts(self) -> list[tuple[str, int, bool]]:
        """(source, chunks, whether any of its documents is dynamic) per source, by source."""
        ...

    # -- search primitives
    def lexical_search(self, terms: Sequence[str], *, k: int, doc_ids: Sequence[int] | None = None,
                       heading_weight: float = 0.5, prefix: bool = False) -> list[tuple[int, float]]:
        """BM25 over stemmed terms (any term may match), best first; both stores score alike."""
        ...

    def lexical_rows(self) -> list[LexicalRow]:
        """(chunk id, doc id, file id, terms, heading terms) of every chunk in id order."""
        ...

    def document_frequencies(self, terms: Sequence[str]) -> dict[str, int]:
        """How many chunks hold each of ``terms`` (0 for those none holds)."""
        ...

    def load_vectors(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(chunk ids, doc ids, float32 matrix) of every stored vector, in chunk id order."""
        ...

    def vectors_since(self, chunk_id: int, *, limit: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(chunk ids, doc ids, float32 matrix) of the vectors of chunks with id > ``chunk_id``, in id order."""
        ...

    def document_ids(self) -> np.ndarray:
        """The id of every document, ascending."""
        ...

    def max_chunk_id(self) -> int:
        """The largest chunk id in the library (0 when empty)."""
        ...

    # -- embedding cache
    def cached_vectors(self, model: str, text_hashes: Sequence[str]) -> dict[str, np.ndarray]:
        """The vectors ``model`` made of the texts with these SHA-256 hex digests: those cached, and those of the
        library's own chunks (a store finds every vector it has written, without a call of ``cache_vectors``)."""
        ...

    def cache_vectors(self, model: str, vectors: dict[str, np.ndarray]) -> None:
        """Keep vectors by text digest before they are written: batches of a long embedding, so it resumes."""
        ...


class SummaryStore(Protocol):
    """The summaries a model wrote of segments, kept by segment hash, model and prompt version."""

    def summaries(self, segment_hashes: Sequence[str], model: str, prompt_version: str) -> dict[str, str]: ...
    def put_summary(self, segment_hash: str, model: str, prompt_version: str, text: str,
                    dropped_tags: int) -> None: ...


class ChatStore(Protocol):
    """The reader's chats (each about one document, or the whole library) and their messages, in order."""

    def create_chat(self, doc_id: int | None, title: str) -> int: ...
    def chats(self, doc_id: int | None = None) -> list[ChatRecord]: ...
    def chat(self, chat_id: int) -> ChatRecord: ...
    def add_message(self, chat_id: int, role: str, content: str, result: dict[str, Any] | None = None) -> None: ...
    def messages(self, chat_id: int) -> list[MessageRecord]: ...


class StoreConnection(Protocol):
    """Where the library lives and the connections to it."""

    url: str
    """Where the library lives, as ``open_store`` accepts it (a ``postgresql://`` URL may carry a password)."""

    def close(self) -> None:
        """Release connections; the store reconnects on next use."""
        ...


class LockStore(Protocol):
    """Locks between the processes that use one library."""

    def lock(self, name: str) -> AbstractContextManager[None]:
        """Hold the library-wide lock ``name`` for the block: every process using this library waits for it."""
        ...

    def locked(self, name: str) -> bool:
        """Whether a process (this one included) holds ``lock(name)`` now."""
        ...


class MetaStore(Protocol):
    """The library's own values (its embedding model, its settings), by key."""

    def get_meta(self, key: str) -> str | None: ...
    def set_meta(self, key: str, value: str) -> None: ...


class StoreUpkeep(Protocol):
    """The catch-up, checks and repairs that span every table."""

    def catch_up(self) -> None:
        """Bring what the store keeps up to date lazily (SQLite's full-text index) up to the writes so far: a caller
        that has written many documents calls it once, so that the first read after them does not pay for them."""
        ...

    def integrity_problems(self) -> list[str]:
        """Disagreements between rows, the lexical index and the vectors (empty when consistent)."""
        ...

    def rebuild_lexical_index(self) -> None: ...


class Store(DocumentStore, ChunkStore, SummaryStore, ChatStore, LockStore, MetaStore, StoreUpkeep, StoreConnection,
            Protocol):
    """One library: documents, their files, TOC, segments, chunks and vectors, plus chats, summaries and caches.

    Every write is one transaction; every read sees committed writes (see the implementations' docstrings).
    """
