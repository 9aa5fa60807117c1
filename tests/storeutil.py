"""Documents of short numbered passages with given vectors, written straight to a store (no reader, chunker or
embedder): what the store and vector-index tests write. A helper module, not a test file."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from chapterverse.store import NewChunk, NewDocument, NewFile, SQLiteStore


def passages_document(source: str, vectors: np.ndarray) -> NewDocument:
    """One document of ``len(vectors)`` chunks, "passage <i> of <source>" each, with those vectors."""
    texts = [f"passage {i} of {source}" for i in range(len(vectors))]
    chunks, at = [], 0
    for i, text in enumerate(texts):
        chunks.append(NewChunk(file_ordinal=0, start=at, end=at + len(text), source=source, chunk_index=i, terms=text))
        at += len(text) + 1
    body = "\n".join(texts)
    return NewDocument(source=source, title=source, format="txt", content_hash=source, size_bytes=len(body),
                       language="english", files=[NewFile(body)], toc=[], segments=[], chunks=chunks,
                       vectors=vectors)


def random_model_store(directory: Path, dim: int) -> SQLiteStore:
    """A new library in ``directory`` whose vectors are recorded as a test model's, of ``dim`` dimensions."""
    store = SQLiteStore(directory / "library.sqlite3")
    store.check_embedding_model("test-random", dim)
    return store


class DelegatingStore:
    """A store that is no SQLiteStore: it answers every call with a SQLite library's answer, feed included, so
    an index that works with it knows the store by its protocol, not its class."""

    def __init__(self, inner: SQLiteStore) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> object:
        return getattr(self._inner, name)


class NoFeedStore(SQLiteStore):
    """A SQLite library that lends the indexes no feed, as PostgreSQL does."""

    @property
    def index_feed(self) -> None:
        return None
