"""The library: the one-way pipeline source -> canonical text -> segments/chunks -> indexes, and its reads.

``Library`` is what the CLI, the server and the answerers talk to. It owns no format, storage or
scoring logic of its own; it wires the readers, the chunker, the embedder and the store together
and guarantees that each document lands atomically and only when its content changed.

Writing documents is :class:`~chapterverse.library_writer.LibraryWriter`'s (``Library.writer``). The readers,
chunker, embedder and retriever are imported where they are first used, so that opening a library to list,
resolve or remove (``chapterverse docs``) costs neither numpy nor the embedder.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .chunking.context import ORIGIN_KEY, USER_METADATA_KEY
from .config import CONFIG_NAME, default_home
from .errors import InputError, SourceError, TagError
from .library_writer import EmbedderSlot, IngestResult, LibraryWriter, Progress, TocIndex
from .paths import expand_user
from .positions import ResolvedSpan, Span, parse_tag
from .store import DocumentRecord, Store, TocRecord, open_store, sqlite_file

if TYPE_CHECKING:
    import numpy as np

    from .analysis import AnalysedQuery
    from .embeddings import Embedder
    from .search.rerank import Reranker
    from .search.retrieval import FusionWeights, Hit, Retriever, ScoredChunk, SearchResult

__all__ = ["Library", "open_library", "IngestResult", "Progress", "content_hash", "ORIGIN_KEY",
           "USER_METADATA_KEY"]


def content_hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class Library:
    """A library of documents in one store, searched with one embedding model."""

    def __init__(self, location: str | Path | None = None, *, embedder: Embedder | None = None,
                 embedding_model: str | None = None, chunk_size: int = 512, chunk_overlap: int = 64,
                 fusion: FusionWeights | None = None, store: Store | None = None,
                 reranker: Reranker | None = None, rerank_top_n: int = 30) -> None:
        self.location = expand_user(location) if location else default_home()
        self.store = store or open_store(self.location)
        self.chunk_size = chunk_size
        self.chunk_overlap = chunk_overlap
        self._embedders = EmbedderSlot(embedder, embedding_model or self.store.get_meta("embedding_model"))
        self._fusion = fusion
        self._retriever: Retriever | None = None
        self._writer: LibraryWriter | None = None
        self.reranker = reranker
        """The second stage (``chapterverse.search.rerank``): reorders the first stage's best ``rerank_top_n``."""
        self.rerank_top_n = rerank_top_n

    # -- components -------------------------------------------------------------------------
    @property
    def embedder(self) -> Embedder:
        """The embedding model the library searches and writes with, loaded on first use."""
        return self._embedders.get()

    @property
    def retriever(self) -> Retriever:
        """The first search stage (``search.retrieval``), for callers that need its rankings or term rarity."""
        if self._retriever is None:
            from .search.retrieval import Retriever

            self._retriever = Retriever(self.store, self.embedder, self._fusion)
        return self._retriever

    @property
    def writer(self) -> LibraryWriter:
        """What writes this library's documents (single files, prepared knowledge-base writes, re-embedding)."""
        if self._writer is None:
            self._writer = LibraryWriter(self.store, self._embedders, chunk_size=self.chunk_size,
                                         chunk_overlap=self.chunk_overlap)
        return self._writer

    def close(self) -> None:
        """Release the store's connections (a later call reconnects)."""
        self.store.close()

    # -- ingest -----------------------------------------------------------------------------
    def ingest(self, paths: Iterable[str | Path], *, force_rebuild: bool = False, password: str | None = None,
               progress: Progress | None = None, as_books: bool = False, title: str | None = None,
               done: Callable[[IngestResult], None] | None = None,
               failed: Callable[[SourceError], None] | None = None,
               allow_duplicate: bool = False) -> list[IngestResult]:
        """Ingest files and folders (recursively). Each document is written atomically on its own.

        ``as_books``: every path is a folder of chapter files that becomes one document
        (:meth:`LibraryWriter.ingest_book`);
        ``title`` names the book when there is one path. ``done`` is called with each document's result as soon
        as it is stored (the CLI's line per document when its output is not a terminal). ``failed``, when given,
        is called with the error of each file (or book) that cannot be read, and the others are still ingested,
        as a careful tool does with a folder holding one corrupt file; without it the first such error is raised.
        A file whose content the library already holds under another source is not added again (its result names
        that document in ``duplicate_of``) unless ``allow_duplicate``.
        """
        from .sources import iter_folder

        locations = [Path(path) for path in paths]
        if title is not None and not (len(locations) == 1 and (as_books or not locations[0].is_dir())):
            raise InputError("a title names one book: give it with a single file, or with --as-book and a single "
                             "folder")
        writer = self.writer
        writer.reembed_if_model_changed(progress=progress)
        results: list[IngestResult] = []

        def stored(ingest_one: Callable[[], IngestResult]) -> None:
            try:
                result = ingest_one()
            except SourceError as exc:
                if failed is None:
                    raise
                failed(exc)
                return
            results.append(result)
            if done is not None:
                done(result)

        for path in locations:
            if as_books:
                stored(lambda: writer.ingest_book(path, title=title, force_rebuild=force_rebuild, progress=progress,
                                                  allow_duplicate=allow_duplicate))
            elif path.is_dir():
                for file, source in iter_folder(path):
                    stored(lambda: writer.ingest_file(file, source=source, force_rebuild=force_rebuild,
                                                      password=password, progress=progress,
                                                      metadata=_folder_metadata(path, source),
                                                      allow_duplicate=allow_duplicate))
            else:
                stored(lambda: writer.ingest_file(path, force_rebuild=force_rebuild, password=password,
                                                  progress=progress, allow_duplicate=allow_duplicate, title=title))
        self.store.catch_up()
        return results

    # -- reads ------------------------------------------------------------------------------
    def documents(self) -> list[DocumentRecord]:
        """Every document, with its counts of files, chunks and segments."""
        return self.store.documents()

    def document(self, doc_id: int) -> DocumentRecord:
        """One document; NotFoundError when the library holds none with that id."""
        return self.store.document(doc_id)

    def remove(self, doc_id: int) -> None:
        """Remove a document and everything derived from it; NotFoundError when there is none."""
        self.store.document(doc_id)
        self.store.remove_documents([doc_id])

    def _toc_path(self, doc_id: int, file_id: int, offset: int) -> list[str]:
        toc: list[TocRecord] = self.store.toc(doc_id)
        index = TocIndex.build([(t.level, t.title, t.file_id, t.offset) for t in toc])
        return index.path_at(file_id, offset)

    def printed_pages(self, hits: Sequence[Hit]) -> dict[int, str]:
        """By file id, the page label of each hit's file that is a PDF page (the number the book prints there,
        else the page's position): with the contents' path it tells a reader where a passage is. Files of other
        formats are no pages and are left out."""
        pdfs = {doc_id for doc_id in {h.chunk.doc_id for h in hits} if self.document(doc_id).format == "pdf"}
        return {h.chunk.file_id: self.store.file(h.chunk.file_id).label for h in hits if h.chunk.doc_id in pdfs}

    def resolve(self, tag: str | Span) -> ResolvedSpan:
        """The exact text a tag names, with its document, file and TOC path; TagError when it names nothing."""
        span = tag if isinstance(tag, Span) else parse_tag(tag)
        text = self.store.file_slice(span.file, span.start, span.end)
        if text is None:
            raise TagError(f"{span.tag} does not name a span in this library (unknown file or out of range)")
        file = self.store.file(span.file)
        doc = self.store.document(file.doc_id)
        return ResolvedSpan(tag=span.key, doc_id=doc.id, doc_title=doc.title, file=span.file, start=span.start,
                        end=span.end, text=text, toc_path=self._toc_path(doc.id, file.id, span.start),
                        file_title=file.title, label=file.label, source=doc.source)

    def search(self, query: str | AnalysedQuery, *, k: int = 5, doc_ids: Sequence[int] | None = None,
               threshold: float | None = None, mmr: float | None = None,
               query_vector: np.ndarray | None = None) -> list[Hit]:
        """The best ``k`` passages for ``query``, a text (the answerers hand on their question analysed already,
        so that it is read once); ``query_vector`` (``embedder.embed_query(text)``) saves embedding the query
        again when the caller needs the vector too (the extractive reader does)."""
        return self.search_report(query, k=k, doc_ids=doc_ids, threshold=threshold, mmr=mmr,
                                  query_vector=query_vector).hits

    def search_report(self, query: str | AnalysedQuery, *, k: int = 5, doc_ids: Sequence[int] | None = None,
                      threshold: float | None = None, mmr: float | None = None,
                      query_vector: np.ndarray | None = None) -> SearchResult:
        """``search`` with what the reranker did. With a reranker, the first stage's best ``rerank_top_n`` (at
        least ``k``) above ``threshold`` are reordered and the first ``k`` kept; each hit keeps its own score."""
        from .stopwatch import Stopwatch

        watch = Stopwatch()
        depth = max(k, self.rerank_top_n) if self.reranker is not None else k
        scored: list[ScoredChunk] = self.retriever.search(query, k=depth, doc_ids=doc_ids, threshold=threshold,
                                                          mmr=mmr, query_vector=query_vector, stopwatch=watch)
        from .search.retrieval import Hit, SearchResult, logger

        titles = self.store.titles([s.chunk.doc_id for s in scored]) if scored else {}
        hits = [Hit(s.chunk, titles.get(s.chunk.doc_id, ""), s.score, s.lexical, s.dense, s.rank_score)
                for s in scored]
        watch.lap("titles")
        if self.reranker is None:
            watch.log(logger, f"search for {len(hits)} hits")
            return SearchResult(hits)
        from .search.rerank import rerank_order

        text = query if isinstance(query, str) else query.text
        order, report = rerank_order(self.reranker, text, [h.text for h in hits])
        watch.lap("rerank")
        watch.log(logger, f"search for {min(k, len(hits))} hits, reranked")
        return SearchResult([hits[i] for i in order][:k], report)


def open_library(location: str | Path | None = None, *, create: bool = False, store: str | None = None,
                 embedding_model: str | None = None, embedder: Embedder | None = None) -> Library:
    """The library at ``location`` (a folder; default :func:`config.default_home`), or in the PostgreSQL database
    ``store`` names. Only ``create`` makes a new one: a folder that holds no library (neither its database nor a
    config.json put there) is an InputError, not an empty library left under a mistyped path. ``embedder``: an
    embedder of your own instead of the model ``embedding_model`` names (or the library recorded)."""
    database = sqlite_file(store or location or default_home())
    if not create and database is not None and not database.is_file():
        if store is not None or not (database.parent / CONFIG_NAME).is_file():
            raise InputError(f"{database.parent if store is None else database}: no library here "
                             "(`chapterverse ingest FILE` makes one)")
    return Library(location, embedder=embedder, embedding_model=embedding_model,
                   store=open_store(store) if store else None)


def _folder_metadata(folder: Path, source: str) -> dict[str, Any] | None:
    """The folder a file of ``folder`` belongs to, as a reader groups it: the ingested folder's own name, and
    the sub-folder within it ("don-quijote-es", "notes/2024"), as document metadata."""
    parent = source.rpartition("/")[0]
    name = folder.resolve().name
    grouped = f"{name}/{parent}" if parent else name
    return {"folder": grouped} if grouped else None
