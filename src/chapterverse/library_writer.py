"""Writing documents into a library: ingest (read, chunk, segment, embed, store one document atomically, only when
its content changed), the knowledge base's prepared writes, re-embedding when the model changes, and in-place
chunk metadata edits.

:class:`LibraryWriter` is what ``Library.ingest`` and the knowledge base write through; it takes of the store only
the roles it writes and reads (:class:`WriterStore`). The readers, chunker and numpy are imported where they are
first used, so that opening a library to list, resolve or remove costs none of them.
"""

from __future__ import annotations

import hashlib
from bisect import bisect_right
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from .chunking.context import ORIGIN_KEY, stored_context
from .errors import NotFoundError
from .store import ChunkRecord, ChunkStore, DocumentRecord, DocumentStore, MetaStore, NewChunk, NewDocument, NewFile, \
    NewSegment

if TYPE_CHECKING:
    import numpy as np

    from .cancel import CancelToken
    from .embeddings import Embedder
    from .sources import ParsedDocument, Root

__all__ = ["LibraryWriter", "WriterStore", "EmbedderSlot", "IngestResult", "TocIndex", "Progress"]

Progress = Callable[[str, int, int], None]
"""progress(stage, done, total): called as a document moves through parsing and embedding. It reports, and
never stops the work: what stops it is a ``cancel`` token (``cancel.CancelToken``), checked at the same points."""
_EMBED_STEP = 256
"""Texts per cached batch of a long embedding (progress is reported before each of the embedder's batches)."""


class WriterStore(DocumentStore, ChunkStore, MetaStore, Protocol):
    """What writing takes of a store: documents written and read whole, chunks, vectors and their cache, and the
    recorded embedding model."""


class EmbedderSlot:
    """A library's embedder: the one given, else the model ``spec`` names (or the store recorded), loaded on first
    use so that listing or resolving never pays for it."""

    def __init__(self, given: Embedder | None, spec: str | None) -> None:
        self._embedder = given
        self.spec = spec

    def get(self) -> Embedder:
        if self._embedder is None:
            from .embeddings import load_embedder

            self._embedder = load_embedder(self.spec)
        return self._embedder

    def differs_from(self, stored: str) -> bool:
        """Whether the chosen embedder is another model than ``stored``; a spec that names ``stored`` (or none) is
        answered without loading the model."""
        if self._embedder is None and self.spec in (None, stored):
            return False
        return stored != self.get().name


@dataclass(slots=True)
class IngestResult:
    document: DocumentRecord
    changed: bool
    """False when the same content was already in the library (nothing done)."""
    duplicate_of: DocumentRecord | None = None
    """The document of another source that already holds this content, which was then not added again
    (``document`` is that document); None when the content was new or stored under the same source."""


@dataclass(slots=True)
class TocIndex:
    """TOC entries of one document sorted by position, for "which chapter is this offset in"."""

    keys: list[tuple[int, int]] = field(default_factory=list)
    paths: list[list[str]] = field(default_factory=list)

    @classmethod
    def build(cls, entries: Iterable[tuple[int, str, int, int]]) -> TocIndex:
        """``entries`` are (level, title, file key, offset) in TOC order."""
        index = cls()
        stack: list[tuple[int, str]] = []
        for level, title, file_key, offset in sorted(entries, key=lambda e: (e[2], e[3])):
            while stack and stack[-1][0] >= level:
                stack.pop()
            stack.append((level, title))
            index.keys.append((file_key, offset))
            index.paths.append([t for _, t in stack])
        return index

    def path_at(self, file_key: int, offset: int) -> list[str]:
        i = bisect_right(self.keys, (file_key, offset)) - 1
        return list(self.paths[i]) if i >= 0 else []


class LibraryWriter:
    """Writes documents into one store with one embedder; ``Library.writer`` is the library's."""

    def __init__(self, store: WriterStore, embedders: EmbedderSlot, *, chunk_size: int = 512,
                 chunk_overlap: int = 64) -> None:
        self.store = store
        self.embedders = embedders
        self.chunk_size = chunk_size
        self.chunk_overlap = chunk_overlap

    @property
    def embedder(self) -> Embedder:
        return self.embedders.get()

    def ingest_file(self, path: str | Path, *, source: str | None = None, force_rebuild: bool = False,
                    password: str | None = None, progress: Progress | None = None,
                    metadata: dict[str, Any] | None = None, root: Root | None = None,
                    allow_duplicate: bool = False, cancel: CancelToken | None = None,
                    title: str | None = None) -> IngestResult:
        """One file, read and stored only when its content hash changed: the path ``ingest`` and the knowledge
        base's folder sync share. ``metadata`` goes on the stored document: the folder it was ingested with
        (``folder``, so a reader can group the documents of one folder, whose sources are relative to it), or
        the knowledge base's mark of a folder file. ``root``: a server's folder the file must be opened beneath
        (``sources.files``). The file is opened once, so what is hashed is what is read. Content held under
        another source: see :meth:`ingest`. ``cancel``: checked before the file is read and before each embedding
        batch; a cancelled ingest raises its reason and writes nothing. ``title`` replaces the title the file's
        reader finds; it is part of the content hash, so giving another title (or none) reads the file again."""
        from .sources import open_source, read_source

        path = Path(path)

        def read() -> ParsedDocument:
            parsed = read_source(file, password=password)
            if title is not None:
                parsed.title = title
            return parsed

        with open_source(path, root=root) as file:
            digest = file.digest() if title is None else hashlib.sha256(
                f"titled\0{title}\0{file.digest()}".encode()).hexdigest()
            return self._ingest_changed(source or path.name, digest, file.size, read, force_rebuild, progress,
                                        metadata=metadata, allow_duplicate=allow_duplicate, cancel=cancel)

    def ingest_book(self, folder: str | Path, *, title: str | None = None, force_rebuild: bool = False,
                    progress: Progress | None = None, allow_duplicate: bool = False) -> IngestResult:
        """A folder of Markdown, TXT and HTML chapter files as one document (``sources.book``), stored under the
        folder's name. Nothing is read again while the files, their bytes and the title are unchanged."""
        from .sources.book import book_files, read_book
        from .sources.files import open_file
        from .sources.text import MAX_TEXT_BYTES

        folder = Path(folder)
        digest = hashlib.sha256(f"book\0{title or ''}\0".encode())
        size = 0
        for path in book_files(folder):
            with open_file(path, limit=MAX_TEXT_BYTES) as file:
                size += file.size
                digest.update(f"{path.relative_to(folder).as_posix()}\0".encode() + bytes.fromhex(file.digest()))
        return self._ingest_changed(folder.resolve().name, digest.hexdigest(), size,
                                    lambda: read_book(folder, title=title), force_rebuild, progress,
                                    allow_duplicate=allow_duplicate)

    def _ingest_changed(self, source: str, digest: str, size_bytes: int, read: Callable[[], ParsedDocument],
                        force_rebuild: bool, progress: Progress | None,
                        metadata: dict[str, Any] | None = None, allow_duplicate: bool = False,
                        cancel: CancelToken | None = None) -> IngestResult:
        """The stored document of ``source`` when its content hash is ``digest``, else ``read()`` replacing it
        (unless another source holds that content and ``allow_duplicate`` is off: then that document)."""
        existing = self.store.documents_by_source(source)
        if not force_rebuild:
            for doc in existing:
                if doc.content_hash == digest:
                    return IngestResult(doc, changed=False)
        if not allow_duplicate:
            for doc in self.store.documents_by_content(digest):
                if doc.source != source and not doc.ephemeral:
                    return IngestResult(doc, changed=False, duplicate_of=doc)
        _checkpoint(cancel, progress, f"reading {source}", 0, 1)
        doc = self.add_parsed(read(), source=source, content_hash=digest, size_bytes=size_bytes,
                              replace=[d.id for d in existing], progress=progress, metadata=metadata, cancel=cancel)
        return IngestResult(doc, changed=True)

    def add_parsed(self, parsed: ParsedDocument, *, source: str, content_hash: str, size_bytes: int,
                   replace: Sequence[int] = (), dynamic: bool = False, ephemeral: bool = False,
                   metadata: dict[str, Any] | None = None, progress: Progress | None = None,
                   cancel: CancelToken | None = None) -> DocumentRecord:
        """Chunk, segment and embed a parsed document, then write it (replacing ``replace``) in one transaction."""
        new = self.prepare(parsed, source=source, content_hash=content_hash, size_bytes=size_bytes,
                           dynamic=dynamic, ephemeral=ephemeral, metadata=metadata, progress=progress, cancel=cancel)
        return self.write(new, replace=replace)

    def write(self, new: NewDocument, *, replace: Sequence[int] = ()) -> DocumentRecord:
        """Store a prepared document (replacing ``replace``) in one transaction; quick, the embedding is done."""
        doc_id = self.store.add_document(new, replace=replace)
        return self.store.document(doc_id)

    def prepare(self, parsed: ParsedDocument, *, source: str, content_hash: str, size_bytes: int,
                dynamic: bool = False, ephemeral: bool = False, metadata: dict[str, Any] | None = None,
                progress: Progress | None = None, cancel: CancelToken | None = None) -> NewDocument:
        """Chunk, segment and embed ``parsed`` without writing anything.

        The slow half of ``add_parsed``, public so that a caller serializing its writes (the knowledge base)
        can embed a large document before taking its lock, and small writes need not wait behind it.
        """
        unembedded = self.prepare_unembedded(parsed, source=source, content_hash=content_hash, size_bytes=size_bytes,
                                             dynamic=dynamic, ephemeral=ephemeral, metadata=metadata)
        return self.embed_prepared([unembedded], progress=progress, label=source, cancel=cancel)[0]

    def embed_prepared(self, docs: Sequence[NewDocument], *, progress: Progress | None = None,
                       label: str = "", cancel: CancelToken | None = None) -> list[NewDocument]:
        """``docs`` (from ``prepare_unembedded``) with their vectors, all their chunk texts embedded in one call.

        Many small documents prepared together share the embedder's batches (and one cache look-up) instead of
        paying for a call each. Each batch is kept as it comes only when one document alone spans several
        (see ``embed_passages``): small documents cost together what they cost one by one, not a cache write
        of every batch, and an interrupted batch of them is embedded again as a whole.
        """
        from dataclasses import replace

        texts = [_embedded_text(c.context, doc.files[c.file_ordinal].text[c.start:c.end])
                 for doc in docs for c in doc.chunks]
        keep_batches = any(len(doc.chunks) > _EMBED_STEP for doc in docs)
        vectors = self.embed_passages(texts, progress=progress, label=label, keep_batches=keep_batches, cancel=cancel)
        embedded = []
        start = 0
        for doc in docs:
            embedded.append(replace(doc, vectors=vectors[start:start + len(doc.chunks)]))
            start += len(doc.chunks)
        return embedded

    def prepare_unembedded(self, parsed: ParsedDocument, *, source: str, content_hash: str, size_bytes: int,
                           dynamic: bool = False, ephemeral: bool = False,
                           metadata: dict[str, Any] | None = None) -> NewDocument:
        """``prepare`` without the embedding: its vectors are empty until ``embed_prepared`` fills them (a store
        refuses the document before then, its chunks and vectors do not match).

        Each chunk is indexed with its context (``chunking.context``): the words of its source path and of the
        user's metadata (``metadata[USER_METADATA_KEY]``, a pre-chunked line's fields) beside its headings."""
        import numpy as np

        from .analysis import detect_language, language_for_code
        from .chunking import build_segments, chunk_document
        from .chunking.context import context_line, user_metadata
        from .chunking.context import heading_terms as terms_of_headings

        sample = "\n".join(f.text for f in parsed.files[:50])[:200_000]
        language = language_for_code(parsed.metadata.get("language")) or detect_language(sample)
        toc_entries = [(e.level, e.title, e.file_index, e.offset) for e in parsed.toc
                       if 0 <= e.file_index < len(parsed.files)]
        toc_index = TocIndex.build(toc_entries)
        specs = chunk_document(parsed, chunk_size=self.chunk_size, overlap=self.chunk_overlap)
        prechunks = {p.file_index: p for p in parsed.prechunked or []}
        described = user_metadata(metadata)
        named_by_user = ORIGIN_KEY in (metadata or {})
        heading_terms: dict[tuple[str, ...], str] = {}  # chunks of one chapter (and context) share their terms
        chunks: list[NewChunk] = []
        for i, spec in enumerate(specs):
            pre = prechunks.get(spec.file_index)
            label_at = spec.start if spec.label_offset is None else spec.label_offset  # past empty sections' headings
            path = toc_index.path_at(spec.file_index, label_at)
            context = context_line(pre.source if pre else source if named_by_user else "", described,
                                   pre.metadata if pre else None)
            key = (*path, context)
            if key not in heading_terms:
                heading_terms[key] = terms_of_headings(path, context, language)
            chunks.append(NewChunk(
                file_ordinal=spec.file_index, start=spec.start, end=spec.end,
                source=pre.source if pre else source, chunk_index=pre.chunk_index if pre else i,
                heading_terms=heading_terms[key],
                title_path=path, metadata=dict(pre.metadata) if pre else {}, context=context,
            ))
        segments = [
            NewSegment(seq=s.seq, title_path=s.title_path, start_ordinal=s.start[0], start_offset=s.start[1],
                       end_ordinal=s.end[0], end_offset=s.end[1],
                       content_hash=hashlib.sha256(_segment_text(parsed, s.start, s.end).encode()).hexdigest())
            for s in build_segments(parsed)
        ]
        return NewDocument(
            source=source, title=parsed.title or source, format=parsed.format, content_hash=content_hash,
            size_bytes=size_bytes, language=language,
            files=[NewFile(f.text, f.title, f.label, f.has_text) for f in parsed.files],
            toc=toc_entries, segments=segments, chunks=chunks, vectors=np.zeros((0, 0), np.float32),
            metadata={**parsed.metadata, **(metadata or {}), **({"warnings": parsed.warnings} if parsed.warnings else {})},
            dynamic=dynamic, ephemeral=ephemeral,
        )

    def embed_passages(self, texts: Sequence[str], *, progress: Progress | None = None,
                       label: str = "", keep_batches: bool = True, cancel: CancelToken | None = None) -> np.ndarray:
        """Vectors for ``texts``, reusing the store's cache so unchanged text is never embedded twice.

        ``keep_batches``: cache each batch as it comes when there are several (see ``_embed_uncached``).
        ``cancel``: checked before each of the embedder's batches and once after the last (``CancelToken.checkpoint``).
        """
        self.store.check_embedding_model(self.embedder.name, self.embedder.dim)
        return self._embed_uncached(texts, progress=progress, label=label, keep_batches=keep_batches, cancel=cancel)

    def _embed_uncached(self, texts: Sequence[str], *, progress: Progress | None, label: str,
                        keep_batches: bool = True, cancel: CancelToken | None = None) -> np.ndarray:
        import numpy as np

        embedder = self.embedder
        hashes = [hashlib.sha256(t.encode()).hexdigest() for t in texts]
        cached = self.store.cached_vectors(embedder.name, hashes)
        missing = [i for i, h in enumerate(hashes) if h not in cached]
        fresh: dict[str, np.ndarray] = {}
        step = _EMBED_STEP
        for done in range(0, len(missing), step):
            batch = missing[done:done + step]
            embedded: dict[str, np.ndarray] = {}
            # checked before each of the embedder's own batches: a caller stopping the work (a cancelled
            # request, a stopping server) waits for one batch, not a step of 256 texts (9 s on two cores)
            for at in range(0, len(batch), embedder.batch_size):
                _checkpoint(cancel, progress, f"embedding {label}", done + at, len(missing))
                part = batch[at:at + embedder.batch_size]
                embedded.update(zip((hashes[i] for i in part), embedder.embed([texts[i] for i in part])))
            fresh.update(embedded)
            if keep_batches and len(missing) > step:
                # Kept as each batch comes, so that an interrupted ingest or re-embedding resumes where it
                # stopped. One batch is written at once instead: caching it would cost every small write (a
                # knowledge-base upsert) a transaction of its own for at most one batch to embed again. The
                # stores keep what they write themselves (SQLite finds its chunks by text hash and drops these
                # copies then; PostgreSQL caches a document's vectors in the transaction that writes it).
                self.store.cache_vectors(embedder.name, embedded)
        _checkpoint(cancel, progress, f"embedding {label}", len(missing), len(missing))
        vectors = np.zeros((len(texts), embedder.dim), np.float32)
        for i, h in enumerate(hashes):
            vectors[i] = fresh[h] if h in fresh else cached[h]
        return vectors

    def reembed_if_model_changed(self, *, progress: Progress | None = None, cancel: CancelToken | None = None) -> int:
        """When the chosen embedding model differs from the library's, re-embed every chunk with it.

        Returns how many chunks were re-embedded (0 when the models agree). Vectors are swapped in one
        transaction, so an interrupted (or cancelled: ``cancel``, checked between batches) re-embed leaves the
        old, consistent vectors in place.
        """
        stored = self.store.get_meta("embedding_model")
        if stored is None or not self.embedders.differs_from(stored):
            return 0
        chunks = self.store.chunks()
        _checkpoint(cancel, progress,
                    f"re-embedding {len(chunks)} chunks with {self.embedder.name} (library was made with {stored})",
                    0, len(chunks))
        documents = {d.id: d for d in self.store.documents()}
        texts = [_embedded_text(stored_context(c, documents.get(c.doc_id)), c.text) for c in chunks]
        vectors = self._embed_uncached(texts, progress=progress, label="re-embedding", cancel=cancel)
        self.store.replace_embedding_model(self.embedder.name, self.embedder.dim,
                                           {c.id: v for c, v in zip(chunks, vectors)})
        return len(chunks)

    def update_chunk_metadata(self, chunk: ChunkRecord, metadata: dict[str, Any]) -> None:
        """Give ``chunk`` its own ``metadata`` in place: the same id, document, file, text and position tag, with
        the context line that metadata makes (``chunking.context``) indexed and embedded as ingest would.

        Rewriting its document would give every chunk of it a new id and every passage a new tag, so a citation
        a user or client keeps would stop resolving; a metadata edit changes no canonical text."""
        from dataclasses import replace

        from .chunking.context import heading_terms

        doc = self.store.document(chunk.doc_id)
        edited = replace(chunk, metadata=dict(metadata))
        context = stored_context(edited, doc)
        vector = self.embed_passages([_embedded_text(context, chunk.text)], label=chunk.source)[0]
        terms = heading_terms(chunk.title_path, context, doc.language)
        if not self.store.update_chunk_metadata(chunk.id, edited.metadata, terms, vector):
            raise NotFoundError(f"no chunk with index {chunk.id}")


def _checkpoint(cancel: CancelToken | None, progress: Progress | None, stage: str, done: int, total: int) -> None:
    """A point where long work may stop (``cancel``: it raises the reason, or steps aside first), then reports."""
    if cancel is not None:
        cancel.checkpoint(stage)
    if progress is not None:
        progress(stage, done, total)


def _embedded_text(context: str, text: str) -> str:
    """What is embedded for a chunk: its context on a line before its text, when it has one."""
    return f"{context}\n{text}" if context else text


def _segment_text(parsed: ParsedDocument, start: tuple[int, int], end: tuple[int, int]) -> str:
    """The content (``ParsedFile.content``) of a segment, which its hash keys its summaries by: a book read anew
    with less of it content (a contents page or a licence no longer chunked) gets summaries of what is left."""
    parts = []
    for index in range(start[0], end[0] + 1):
        file = parsed.files[index]
        lo = start[1] if index == start[0] else 0
        hi = end[1] if index == end[0] else len(file.text)
        parts.append("".join(file.text[max(a, lo):min(b, hi)] for a, b in file.content()))
    return "\n\n".join(parts)
