"""A chunk's context: what its source path and its metadata say about it, as words to retrieve it by.

Knowledge bases exported from shops, CRMs and wikis keep much of their meaning outside the text: the order
chunk ``Pedido 8942 — 25/08/2026 ... Entrega estimada: 27/08/2026`` never says "cliente 456"; its source
``pedidos/cliente_456/8942`` does, and so may its metadata (``{"cliente": "456", "tipo": "pedido"}``). The
context line built here is indexed beside the chunk (the lexical index's weighted heading field) and embedded
with it (a line before its text), so a question naming the customer finds the order. It is never part of a
chunk's text: a citation still names, and shows, exactly the source's own words.

Only what a user wrote about a text counts: the source path of a knowledge base's record or of a pre-chunked
line (the library decides which, ``LibraryWriter.prepare_unembedded``; a book's file name says nothing its text does
not), and the values of the metadata given with the text (the knowledge-base API's ``metadata``, a JSONL line's
other fields). What the library records for itself (a folder it came from, parser warnings) does not.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import PurePosixPath
from typing import Any, Protocol

__all__ = ["MAX_CONTEXT_WORDS", "ORIGIN_KEY", "USER_METADATA_KEY", "StoredChunk", "StoredDocument", "context_line",
           "heading_terms", "stored_context", "stored_terms", "user_metadata"]

ORIGIN_KEY = "kb_origin"
"""Document metadata key of a knowledge base's records: "folder" (a file of its folder) or "api" (added through
/v1/rag). Their source paths are named by their users (``pedidos/cliente_456/8942``), so their words are part of
each chunk's context; a book's file name, or the folder path ``ingest`` was given, is not."""

USER_METADATA_KEY = "kb_metadata"
"""Document metadata key holding the metadata its user gave it (the knowledge-base API's ``metadata``), kept apart
from what the library records itself; its values are part of each chunk's context."""

MAX_CONTEXT_WORDS = 48
"""A context line longer than this is cut: it describes the chunk, it must not outweigh the chunk's own text."""

_SEPARATORS = re.compile(r"[\s_/\\|#:;,]+")
_SCALARS = (str, int, float)


def context_line(source: str, *metadata: Mapping[str, Any] | None) -> str:
    """The words of ``source``'s path (its folders and its name without extension) and of the metadata's values,
    each word once, in the order given; empty when neither says anything."""
    words: dict[str, None] = {}
    for part in _path_parts(source):
        _add_words(words, part)
    for mapping in metadata:
        for value in (mapping or {}).values():
            for item in value if isinstance(value, list) else [value]:
                if isinstance(item, _SCALARS) and not isinstance(item, bool):
                    _add_words(words, str(item))
    return " ".join(list(words)[:MAX_CONTEXT_WORDS])


def _path_parts(source: str) -> list[str]:
    """The folders and the stem of a source that is a path (``pedidos/cliente_456/8942``); nothing otherwise."""
    if "/" not in source.strip("/"):
        return []
    path = PurePosixPath(source.strip("/"))
    return [*path.parent.parts, path.stem]


def _add_words(words: dict[str, None], text: str) -> None:
    for word in _SEPARATORS.split(text[:500]):
        if word and len(words) < MAX_CONTEXT_WORDS:
            words.setdefault(word, None)


class StoredChunk(Protocol):
    """What a stored chunk keeps that its context and terms are made from (``store.ChunkRecord``)."""

    @property
    def text(self) -> str: ...
    @property
    def source(self) -> str: ...
    @property
    def metadata(self) -> Mapping[str, Any]: ...
    @property
    def title_path(self) -> Sequence[str]: ...


class StoredDocument(Protocol):
    """What a stored document keeps that its chunks' context and terms depend on (``store.DocumentRecord``)."""

    @property
    def source(self) -> str: ...
    @property
    def metadata(self) -> Mapping[str, Any]: ...
    @property
    def language(self) -> str: ...


def user_metadata(metadata: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """The metadata a user gave a document (under :data:`USER_METADATA_KEY`), whose values describe its chunks."""
    given = (metadata or {}).get(USER_METADATA_KEY)
    return given if isinstance(given, Mapping) else None


def stored_context(chunk: StoredChunk, doc: StoredDocument | None) -> str:
    """A stored chunk's context, as ``LibraryWriter.prepare_unembedded`` made it: pre-chunked lines (whose chunk source
    differs from the document's, or that carry their own metadata) and knowledge-base records are described by
    their source path."""
    metadata = doc.metadata if doc else {}
    named_by_user = ORIGIN_KEY in metadata or bool(chunk.metadata) or (doc is not None and chunk.source != doc.source)
    return context_line(chunk.source if named_by_user else "", user_metadata(metadata), chunk.metadata)


def heading_terms(path: Sequence[str], context: str, language: str) -> str:
    """What a chunk's headings and context add to its terms (the lexical index's weighted heading field)."""
    from ..analysis import index_terms

    return index_terms(" ".join((*path, context)), language)


def stored_terms(chunk: StoredChunk, doc: StoredDocument) -> tuple[str, str]:
    """(terms, heading terms) of a stored chunk as ``LibraryWriter.prepare_unembedded`` makes them now: what a store
    writes again when the analyzer changes (migration 5 of ``store.sqlite``, 2 of ``store.postgres``), from the
    text, headings and context it keeps, so that an old library answers as one ingested today."""
    from ..analysis import index_terms

    return index_terms(chunk.text, doc.language), heading_terms(chunk.title_path, stored_context(chunk, doc),
                                                                doc.language)
