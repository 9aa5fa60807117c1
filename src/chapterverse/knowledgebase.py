"""The knowledge base: one Library holding a folder's files (kept in sync by ``foldersync.py``) and text added
over the API, with the chunk edits, the lock and the server lifetime that every write to it shares. This is its
domain logic; ``server/rag.py`` serves it over HTTP as ``/v1/rag/*``.

API text becomes ordinary documents (format ``kb``): ``add_document`` is one auto-chunked file,
``add_chunks`` is one pre-chunked document per source (one file per item). ``persist: false``
documents are stored ``ephemeral`` with the id of the server that added them, and live as long as
that server runs: a server holds the store lock ``server/<id>`` while it runs, and every server's
start drops the ephemeral documents of servers that no longer hold theirs. A chunk's new metadata is
written in place (``Library.update_chunk_metadata``): its index, document and tag stay. Editing a
chunk's text or source, or removing single chunks, rewrites their document as a pre-chunked one with
the edit applied, in one transaction that replaces the old document (every chunk of it gets a new
index and tag); a folder document keeps its file's hash and path (its source) either way, so the
edit lasts until the file itself changes. A write that would remove or
replace a folder document whole is refused (``FolderDocumentError``): the next sync would undo it.
API text its source already holds is not written again (``add_document``, ``upsert``).

Several servers may share one library (a PostgreSQL database). Compound writes (look up, then
replace), folder syncs and the whole startup hold a lock in this process and the store's
``knowledge-base`` lock, which every process on the library shares, so two of them never
interleave, not even in different servers: a server that starts while another syncs waits, then
finds the folder indexed. Searches take no lock.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from .cancel import CancelToken, server_stopping
from .errors import EmbeddingMismatchError, InputError, NotFoundError
from .foldersync import ORIGIN_KEY, FolderSync, SyncReport
from .library import USER_METADATA_KEY, IngestResult, Library, content_hash
from .positions import Span
from .search.retrieval import Hit, SearchResult
from .sources import ParsedDocument, ParsedFile, PreChunk
from .store import ChunkRecord, ChunkStore, DocumentRecord, DocumentStore, LockStore, MetaStore, NewDocument

__all__ = [
    "KnowledgeBase",
    "ChunkItem",
    "UpsertItem",
    "Upserted",
    "ChunkNotFoundError",
    "AmbiguousSourceError",
    "FolderDocumentError",
    "USER_METADATA_KEY",
    "SERVER_KEY",
    "LOCK_NAME",
    "server_lock",
    "drop_orphaned_ephemeral",
    "KnowledgeStore",
    "RANKED_LIMIT",
]

log = logging.getLogger(__name__)

SERVER_KEY = "kb_server"
"""Metadata key of a ``persist: false`` document: the id of the server process that added it."""
LOCK_NAME = "knowledge-base"
"""The store lock that knowledge-base writes, syncs and startups hold, across every server on the library."""
RANKED_LIMIT = 1_000
"""How many chunks a ranked ``/chunks/list`` ranks (its ``total`` is at most this; pages past it are empty)."""
RANKED_PAUSE_S = 0.5
"""Longest a ranked ``/chunks/list`` waits for searches to pause before it ranks (see ``query_chunks``)."""


class ChunkNotFoundError(NotFoundError):
    """No chunk has the given index, or no chunk the given source and chunk_index."""


class AmbiguousSourceError(InputError):
    """A source (and chunk_index) names more than one chunk; use the chunk's index."""


class FolderDocumentError(InputError):
    """A write would remove or replace the document of a file in the knowledge-base folder, which the next sync
    indexes again from the file: the file is what to change."""


@dataclass(frozen=True, slots=True)
class ChunkItem:
    """One pre-cut chunk given over the API."""

    text: str
    source: str
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class UpsertItem:
    """One source's new text in a batch upsert (empty text deletes the source)."""

    source: str
    text: str
    metadata: dict[str, Any] = field(default_factory=dict)


class Upserted(NamedTuple):
    """What an upsert did to one source, in chunks: ``unchanged`` when it held that text already (nothing
    written, its chunks keep their indexes and tags)."""

    removed: int
    added: int
    unchanged: int = 0


@dataclass(frozen=True, slots=True)
class _Piece:
    """A chunk as it will be rewritten."""

    text: str
    source: str
    chunk_index: int
    metadata: dict[str, Any]


def server_lock(server_id: str) -> str:
    """The store lock a server holds while it runs; its ``persist: false`` documents live as long."""
    return f"server/{server_id}"


class KnowledgeStore(DocumentStore, ChunkStore, LockStore, MetaStore, Protocol):
    """What a knowledge base takes of its library's store: documents and chunks, the locks it and its servers
    hold, and the recorded embedding model."""


def drop_orphaned_ephemeral(store: KnowledgeStore) -> int:
    """Remove the ``persist: false`` documents whose server no longer runs; return how many went.

    Those of a server still running (this one, or another on a shared database) are acknowledged writes it
    serves, so they stay. Documents without a server id (written before ids were recorded) count as orphaned.
    """
    ephemeral = [(d.id, str(d.metadata.get(SERVER_KEY, ""))) for d in store.documents() if d.ephemeral]
    running = {owner for owner in {o for _, o in ephemeral if o} if store.locked(server_lock(owner))}
    orphans = [doc_id for doc_id, owner in ephemeral if owner not in running]
    return store.remove_documents(orphans) if orphans else 0


class KnowledgeBase:
    """A folder and a Library kept in step; every method is blocking (call it from a worker thread)."""

    def __init__(self, library: Library, folder: str | Path, *, hardlinks: bool = False) -> None:
        self.library = library
        self.server_id = uuid.uuid4().hex
        """Recorded on this server's ``persist: false`` documents; see ``start``."""
        self._lock = threading.RLock()
        self._store_locked = False
        self._running: ExitStack | None = None
        self._searches = 0
        self._last_search = 0.0
        self._no_search = threading.Condition()
        self.stopping = CancelToken()
        """Cancelled when this server stops; the parent of every request's token (see ``close``)."""
        self.folder = FolderSync(library, folder, exclusive=self._exclusive, cancel=self.stopping,
                                 hardlinks=hardlinks)
        """The folder's files, synced under this knowledge base's lock (``hardlinks``: ``--allow_hardlinks``)."""

    @property
    def store(self) -> KnowledgeStore:
        return self.library.store

    @contextmanager
    def _exclusive(self) -> Iterator[None]:
        """Hold this process's lock and, once per thread (outermost call only), the store's ``knowledge-base`` lock.

        The flag is only ever read under ``self._lock``, an RLock: when it is set there, it was set by this
        thread's outer call, so an inner call must not ask the store again (its lock is not reentrant).
        """
        with self._lock:
            if self._store_locked:
                yield
                return
            with self.store.lock(LOCK_NAME):
                self._store_locked = True
                try:
                    yield
                finally:
                    self._store_locked = False

    # -- the server's lifetime ----------------------------------------------------------------------
    def start(self, *, force_rebuild: bool = False) -> SyncReport:
        """Before serving: announce this server, then check the embedding model, drop orphaned ``persist: false``
        documents and sync the folder, as one critical section among all the servers on the library."""
        self._running = ExitStack()
        self._running.enter_context(self.store.lock(server_lock(self.server_id)))
        try:
            if self.store.locked(LOCK_NAME):
                log.info("RAG: another server is writing to the knowledge base (a sync?); waiting for it")
            with self._exclusive():
                self.ensure_embedding_model(force_rebuild=force_rebuild)
                dropped = drop_orphaned_ephemeral(self.store)
                if dropped:
                    log.info("RAG: dropped %d documents added with persist: false by servers no longer running",
                             dropped)
                return self.folder.sync(force_rebuild=force_rebuild)
        except BaseException:
            self.close()
            raise

    def abandon_writes(self) -> None:
        """Embeddings under way end at their next batch, before their write (``self.stopping``), and so do those
        started from now on: the server is stopping."""
        self.stopping.cancel(server_stopping)

    def close(self) -> None:
        """This server stops: embeddings under way end at their next batch (``abandon_writes``), and its
        ``persist: false`` documents become orphans, dropped at the next server's start."""
        self.abandon_writes()
        if self._running is not None:
            self._running.close()
            self._running = None

    def ensure_embedding_model(self, *, force_rebuild: bool) -> None:
        """Re-embed everything when the model changed and a rebuild was asked for; refuse otherwise.

        The re-embedding is the library's (``Library.reembed_if_model_changed``, as ``chapterverse ingest`` does
        it): each chunk embedded with its context line, as a fresh index embeds it, through the embedding cache,
        and abandoned at the next batch, old vectors kept, when the server stops.
        """
        stored = self.store.get_meta("embedding_model")
        name = self.library.embedder.name
        if stored is None or stored == name:
            return
        if not force_rebuild:
            raise EmbeddingMismatchError(
                f"the knowledge base in {self.folder.path} was indexed with {stored}, not {name}; restart with "
                f"--rag_force_rebuild to re-embed it with {name} (or drop --rag_embedding_model)")
        with self._exclusive():
            count = self.library.writer.reembed_if_model_changed(cancel=self.stopping)
        log.info("RAG: re-embedded %d chunks with %s (was %s)", count, name, stored)

    # -- reads ----------------------------------------------------------------------------------------
    def search(self, query: str, *, k: int, threshold: float | None = None) -> list[Hit]:
        return self.search_report(query, k=k, threshold=threshold).hits

    def search_report(self, query: str, *, k: int, threshold: float | None = None) -> SearchResult:
        """The best ``k`` hits, each text once, with what the reranker did.

        A text held twice (the same sentence added under two sources) is answered at its best place only: its
        copy would take the place of another relevant chunk in the top ``k`` and in the proxy's injected context.
        To make up for the copies dropped, the search asks for up to twice ``k`` hits, no deeper than what it
        ranks anyway: the ranking's candidates (deeper would change the ranking itself) or, with a reranker, the
        ``--rag_rerank_top_n`` it reorders. The hits past ``k`` are read, not scored again.
        """
        library = self.library
        ranked = library.rerank_top_n if library.reranker is not None else library.retriever.weights.candidates
        depth = max(k, min(2 * k, ranked))
        with self._searching():
            found = self.library.search_report(query, k=depth, threshold=threshold)
        return SearchResult(_each_text_once(found.hits)[:k], found.rerank)

    @contextmanager
    def _searching(self) -> Iterator[None]:
        """Count a search in flight, for ``step_aside``."""
        with self._no_search:
            self._searches += 1
        try:
            yield
        finally:
            with self._no_search:
                self._searches -= 1
                self._last_search = time.monotonic()
                self._no_search.notify_all()

    def step_aside(self, at_most_s: float = 0.1, quiet_s: float = 0.02) -> None:
        """Wait, at most ``at_most_s``, until no search has run for ``quiet_s``: bulk work calls this between its
        batches (see ``CancelToken``), so a small search does not share the CPU and the interpreter with a batch
        of a thousand documents being chunked and embedded. The quiet time keeps a client that searches one
        question after another from meeting the next batch in each gap; the bound keeps searches from stopping
        a write altogether (it then moves at one batch per ``at_most_s`` and what the batch takes)."""
        deadline = time.monotonic() + at_most_s
        with self._no_search:
            while (now := time.monotonic()) < deadline:
                if self._searches:
                    self._no_search.wait(deadline - now)
                    continue
                quiet = now - self._last_search
                if quiet >= quiet_s:
                    return
                self._no_search.wait(min(deadline - now, quiet_s - quiet))

    def chunk_json(self, chunk: ChunkRecord, *, score: float | None = None, include_text: bool = True,
                   docs: dict[int, DocumentRecord] | None = None) -> dict[str, Any]:
        doc = self._doc(chunk.doc_id, docs)
        item: dict[str, Any] = {
            "index": chunk.id, "source": chunk.source, "chunk_index": chunk.chunk_index,
            "metadata": self.effective_metadata(chunk, doc), "is_dynamic": chunk.dynamic,
            "persist": not doc.ephemeral if doc else True, "doc_id": chunk.doc_id,
            "tag": Span(chunk.file_id, chunk.start, chunk.end).key,
            "text": chunk.text if include_text else None,
        }
        if score is not None:
            item = {"score": round(score, 4), **item}
        return item

    def _doc(self, doc_id: int, cache: dict[int, DocumentRecord] | None) -> DocumentRecord | None:
        if cache is not None and doc_id in cache:
            return cache[doc_id]
        try:
            doc = self.store.document(doc_id)
        except NotFoundError:
            return None
        if cache is not None:
            cache[doc_id] = doc
        return doc

    @staticmethod
    def effective_metadata(chunk: ChunkRecord, doc: DocumentRecord | None) -> dict[str, Any]:
        """The caller's document metadata under the chunk's own (JSONL fields, add/chunks metadata)."""
        shared = doc.metadata.get(USER_METADATA_KEY) if doc else None
        return {**(shared if isinstance(shared, dict) else {}), **chunk.metadata}

    def list_chunks(self, *, source_prefix: str | None = None, source_exact: str | None = None, limit: int = 100,
                    offset: int = 0, include_text: bool = True) -> tuple[int, list[dict[str, Any]]]:
        total = self.store.count_chunks(source_prefix=source_prefix, source_exact=source_exact)
        chunks = self.store.chunks(source_prefix=source_prefix, source_exact=source_exact, limit=limit, offset=offset)
        docs: dict[int, DocumentRecord] = {}
        return total, [self.chunk_json(c, include_text=include_text, docs=docs) for c in chunks]

    def query_chunks(self, query: str, *, source_prefix: str | None = None, min_score: float | None = None,
                     limit: int = 100, offset: int = 0,
                     include_text: bool = True) -> tuple[int, list[dict[str, Any]]]:
        """The best chunks for ``query``: ``total`` of them ranked (at most RANKED_LIMIT), this page of them.

        They are ranked as a search ranks its candidates (top-k over the lexical and dense indexes, then the
        ranking model; a reranker, when configured, reorders searches only), RANKED_LIMIT deep, not by scoring
        every chunk: that took 12.9 s at 100 k chunks and slowed every search meanwhile; 1,000 deep took
        0.07-0.30 s there, with the same top ten as the full scoring for each query tried. Only the page's chunks
        are read. With ``source_prefix`` the ranking runs within the documents holding such chunks, as a search
        within some documents does. It first steps aside (``step_aside``, up to RANKED_PAUSE_S) while searches
        run: ranking a thousand chunks costs a few hundred milliseconds of CPU, and clients listing one page after
        another doubled small searches' p50 on two cores.
        """
        self.step_aside(at_most_s=RANKED_PAUSE_S)
        doc_ids = None
        if source_prefix:
            doc_ids = sorted({c.doc_id for c in self.store.chunks(source_prefix=source_prefix)})
            if not doc_ids:
                return 0, []
        ranking = self.library.retriever.ranking(query, k=RANKED_LIMIT, doc_ids=doc_ids, threshold=min_score)
        if source_prefix:  # a document may hold chunks of other sources (a JSONL file's lines)
            records = self.store.chunks_by_ids([cid for cid, _ in ranking])
            ranking = [(cid, score) for cid, score in ranking
                       if cid in records and records[cid].source.startswith(source_prefix)]
        page = ranking[offset:offset + limit]
        records = self.store.chunks_by_ids([cid for cid, _ in page])
        docs: dict[int, DocumentRecord] = {}
        return len(ranking), [self.chunk_json(records[cid], score=score, include_text=include_text, docs=docs)
                              for cid, score in page if cid in records]

    def sources(self) -> list[dict[str, Any]]:
        return [{"source": s, "chunk_count": n, "has_dynamic": dyn} for s, n, dyn in self.store.source_counts()]

    def total_chunks(self) -> int:
        return self.store.count_chunks()

    # -- writes ---------------------------------------------------------------------------------------
    def add_document(self, text: str, *, source: str, metadata: dict[str, Any] | None = None,
                     dynamic: bool = False, persist: bool = True, cancel: CancelToken | None = None) -> IngestResult:
        """Free text as one auto-chunked document; embedded before the lock is taken (see ``_prepared``).

        Text its source holds already, with the same metadata, ``dynamic`` and ``persist``, is not added again
        (``changed`` False, ``document`` the one holding it), as a file already ingested is not: a script that
        adds its notes on every run stored each of them once per run. The same text under another source, or
        with other metadata, is another record and is added.

        ``cancel`` (every write that embeds takes one; default: the server's own) is checked before each
        embedding batch and once more under the lock, just before the write: a cancelled write writes nothing.
        """
        token = cancel or self.stopping
        text, source = _api_text(text), _clean_source(source)
        held = self._holding(source, text, metadata, dynamic=dynamic, persist=persist)
        if held is not None:
            return IngestResult(held, changed=False)
        new = self._prepared(text, source=source, metadata=metadata, dynamic=dynamic, persist=persist, cancel=token)
        with self._exclusive():
            held = self._holding(source, text, metadata, dynamic=dynamic, persist=persist)  # added meanwhile
            if held is not None:
                return IngestResult(held, changed=False)
            token.check(f"writing {new.source}")
            return IngestResult(self.library.writer.write(new), changed=True)

    def _holding(self, source: str, text: str, metadata: dict[str, Any] | None, *, dynamic: bool, persist: bool,
                 only: bool = False) -> DocumentRecord | None:
        """The API document of ``source`` that holds what writing ``text`` there would store: that text, unedited (one
        file, no chunk rewritten or given metadata of its own by ``update_chunk``), the same metadata, ``dynamic``
        and ``persist`` (a ``persist: false`` one added by this server: another's goes when that server stops).
        ``only``: and the source holds nothing else (an upsert replaces all of it)."""
        docs = self.store.documents_by_source(source)
        if only and len(docs) != 1:
            return None
        expected = (content_hash(text.encode()), "kb", 1, dynamic, not persist,
                    {**self._api_metadata(persist), USER_METADATA_KEY: dict(metadata or {})})
        for doc in docs:
            written = {key: doc.metadata[key] for key in (ORIGIN_KEY, SERVER_KEY, USER_METADATA_KEY)
                       if key in doc.metadata}
            if ((doc.content_hash, doc.format, doc.files, doc.dynamic, doc.ephemeral, written) == expected
                    and [self.store.file(f.id).text for f in self.store.files(doc.id)] == [text]
                    and not any(c.metadata for c in self.store.chunks(doc_id=doc.id))):
                return doc
        return None

    def _prepared(self, text: str, *, source: str, metadata: dict[str, Any] | None, dynamic: bool,
                  persist: bool, cancel: CancelToken) -> NewDocument:
        """API text chunked and embedded, not yet written.

        Done outside ``_exclusive``: embedding a large text takes minutes on a CPU, and holding the lock for it
        would make every other write (a one-line upsert) wait as long. Only the write itself is serialized.
        """
        unembedded = self._unembedded(text, source=source, metadata=metadata, dynamic=dynamic, persist=persist)
        return self.library.writer.embed_prepared([unembedded], cancel=cancel, label=unembedded.source)[0]

    def _unembedded(self, text: str, *, source: str, metadata: dict[str, Any] | None, dynamic: bool,
                    persist: bool) -> NewDocument:
        """API text chunked, its vectors still to come (``LibraryWriter.embed_prepared``)."""
        text = _api_text(text)
        if not text.strip():
            raise InputError("text is empty")
        source = _clean_source(source)
        metadata = dict(metadata or {})
        parsed = ParsedDocument(title=str(metadata.get("title") or source), format="kb",
                                files=[ParsedFile(text, title=source, label=source)])
        return self.library.writer.prepare_unembedded(
            parsed, source=source, content_hash=content_hash(text.encode()), size_bytes=len(text.encode()),
            dynamic=dynamic, ephemeral=not persist,
            metadata={**self._api_metadata(persist), USER_METADATA_KEY: metadata})

    def add_chunks(self, items: Sequence[ChunkItem], *, dynamic: bool = False, persist: bool = True,
                   cancel: CancelToken | None = None) -> list[DocumentRecord]:
        """Pre-cut chunks, one document per source; each source's chunk_index continues after its last one.

        Every source's document is written in one transaction, all or none; ``cancel`` as for ``add_document``.
        """
        token = cancel or self.stopping
        if not items:
            raise InputError("items is empty")
        items = [ChunkItem(_api_text(item.text), item.source, item.metadata) for item in items]
        for n, item in enumerate(items):
            if not item.text.strip():
                raise InputError(f"items[{n}].text is empty")
        groups: dict[str, list[ChunkItem]] = {}
        for item in items:
            groups.setdefault(_clean_source(item.source), []).append(item)
        prepared = []
        with self._exclusive():
            for source, group in groups.items():
                first = 1 + max((c.chunk_index for c in self.store.chunks(source_exact=source)), default=-1)
                pieces = [_Piece(item.text, source, first + i, dict(item.metadata)) for i, item in enumerate(group)]
                joined = "\n\n".join(p.text for p in pieces).encode()
                parsed = _prechunked(source, "kb", pieces)
                prepared.append(self.library.writer.prepare(
                    parsed, source=source, content_hash=content_hash(joined), size_bytes=len(joined), dynamic=dynamic,
                    ephemeral=not persist, metadata=self._api_metadata(persist), cancel=token))
            token.check(f"writing {len(items)} chunks")
            return [self.store.document(doc_id) for doc_id in self.store.add_documents(prepared)]

    def _api_metadata(self, persist: bool) -> dict[str, Any]:
        """Document metadata of API text; a ``persist: false`` document also names its server (see ``start``)."""
        return {ORIGIN_KEY: "api"} if persist else {ORIGIN_KEY: "api", SERVER_KEY: self.server_id}

    def upsert(self, source: str, text: str, *, metadata: dict[str, Any] | None = None, dynamic: bool = False,
               persist: bool = True, cancel: CancelToken | None = None) -> Upserted:
        """Replace every document of ``source`` with ``text`` atomically (empty text deletes).

        A source that holds exactly this (``_holding``) is left as it is, its chunks keeping their indexes and
        tags (a citation a client holds still resolves), and nothing is embedded. A file of the folder is not
        replaced (``FolderDocumentError``): the next sync would index the file again. ``cancel``: as for
        ``add_document``."""
        token = cancel or self.stopping
        source, text = _clean_source(source), _api_text(text)
        held = self._holding(source, text, metadata, dynamic=dynamic, persist=persist, only=True)
        if held is not None:
            return Upserted(0, 0, held.chunks)
        new = self._prepared(text, source=source, metadata=metadata, dynamic=dynamic,
                             persist=persist, cancel=token) if text.strip() else None
        with self._exclusive():
            token.check(f"writing {source}")
            existing = self.store.documents_by_source(source)
            self._refuse_folder_documents(existing, "change or delete the file instead", "written")
            removed = sum(d.chunks for d in existing)
            if new is None:
                self.store.remove_documents([d.id for d in existing])
                return Upserted(removed, 0)
            self.store.add_document(new, replace=[d.id for d in existing])
            return Upserted(removed, len(new.chunks))  # every prepared chunk is stored: no need to read it back

    def upsert_many(self, items: Sequence[UpsertItem], *, dynamic: bool = False, persist: bool = True,
                    cancel: CancelToken | None = None) -> list[Upserted]:
        """``upsert`` of every item, all or nothing, in one store transaction; what it did to each.

        Loading many small documents one ``upsert`` each pays a transaction (and an embedder call) per document;
        here every text is embedded in one call before the lock and every source is replaced in one write. A
        source named twice is refused: which of its texts should win is the caller's to say. ``cancel``: as for
        ``add_document``, checked between documents while they are chunked, too.
        """
        token = cancel or self.stopping
        if not items:
            raise InputError("items is empty")
        sources = [_clean_source(item.source) for item in items]
        named_twice = [source for source, times in Counter(sources).items() if times > 1]
        if named_twice:
            raise InputError(f"source {named_twice[0]!r} appears more than once in the batch; send one text per "
                             "source (or upsert the others in a later request)")
        writes: dict[int, NewDocument] = {}
        unchanged: dict[int, int] = {}
        for n, (item, source) in enumerate(zip(items, sources)):
            text = _api_text(item.text)
            held = self._holding(source, text, item.metadata, dynamic=dynamic, persist=persist, only=True)
            if held is not None:
                unchanged[n] = held.chunks
            elif text.strip():
                token.checkpoint(f"chunking {len(items)} documents")
                writes[n] = self._unembedded(item.text, source=source, metadata=item.metadata, dynamic=dynamic,
                                             persist=persist)
        new = dict(zip(writes, self.library.writer.embed_prepared(list(writes.values()), cancel=token,
                                                           label=f"{len(writes)} documents")))
        with self._exclusive():
            token.check(f"writing {len(items)} documents")
            existing = [[] if n in unchanged else self.store.documents_by_source(source)
                        for n, source in enumerate(sources)]
            self._refuse_folder_documents([d for docs in existing for d in docs], "change or delete the files instead",
                                          "written")
            replaced = [d.id for docs in existing for d in docs]
            if new or replaced:
                self.store.add_documents(list(new.values()), replace=replaced)
        return [Upserted(sum(d.chunks for d in docs), len(new[n].chunks) if n in new else 0, unchanged.get(n, 0))
                for n, docs in enumerate(existing)]

    def find_chunk(self, *, index: int | None = None, source: str | None = None,
                   chunk_index: int | None = None) -> ChunkRecord:
        """The one chunk named by its index, or by source (+ chunk_index when the source has several)."""
        if index is not None:
            found = self.store.chunks_by_ids([index]).get(index)
            if found is None:
                raise ChunkNotFoundError(f"no chunk with index {index}")
            return found
        if not source:
            raise InputError("name the chunk by index, or by source (and chunk_index)")
        candidates = self.store.chunks(source_exact=source)
        if chunk_index is not None:
            candidates = [c for c in candidates if c.chunk_index == chunk_index]
        where = f"source {source!r}" + (f" chunk_index {chunk_index}" if chunk_index is not None else "")
        if not candidates:
            raise ChunkNotFoundError(f"no chunk with {where}")
        if len(candidates) > 1:
            raise AmbiguousSourceError(f"{len(candidates)} chunks have {where} (indexes "
                                       f"{', '.join(str(c.id) for c in candidates[:10])}); update by index")
        return candidates[0]

    def update_chunk(self, target: ChunkRecord, *, new_text: str | None = None,
                     new_metadata: dict[str, Any] | None = None, new_source: str | None = None) -> ChunkRecord:
        """Change one chunk; returns it as stored now.

        New metadata alone (or with the source it has) is written in place: the chunk keeps its index, document
        and position tag, so a client may update it again by the same index and earlier citations still resolve;
        it replaces the chunk's own metadata (metadata given to its whole document, with ``add/document`` or
        ``upsert``, still applies beneath it). New text or a new source rewrites the chunk's document with this
        one chunk changed: text is canonical and every tag is a span of it, so each chunk of the document gets a
        new index and tag (the old ones then name nothing)."""
        if new_text is None and new_metadata is None and new_source is None:
            raise InputError("nothing to update: give new_text, new_metadata or new_source")
        if new_text is not None and not new_text.strip():
            raise InputError("new_text is empty (remove the chunk instead)")
        with self._exclusive():
            current = self.store.chunks_by_ids([target.id]).get(target.id)
            if current is None:
                raise ChunkNotFoundError(f"no chunk with index {target.id}")
            if new_text is None and (new_source is None or _clean_source(new_source) == current.source):
                self.library.writer.update_chunk_metadata(
                    current, current.metadata if new_metadata is None else new_metadata)
                return self.store.chunks_by_ids([current.id])[current.id]
            doc = self.store.document(current.doc_id)
            chunks = self.store.chunks(doc_id=doc.id)
            position = next(i for i, c in enumerate(chunks) if c.id == current.id)

            def edit(i: int, piece: _Piece) -> _Piece | None:
                if i != position:
                    return piece
                return _Piece(new_text if new_text is not None else piece.text,
                              _clean_source(new_source) if new_source is not None else piece.source,
                              piece.chunk_index, dict(new_metadata) if new_metadata is not None else piece.metadata)

            rewritten = self._rewrite(doc, chunks, edit)
            assert rewritten is not None
            return self.store.chunks(doc_id=rewritten.id)[position]

    def remove(self, source: str, *, exact: bool = False) -> tuple[int, list[str]]:
        """Remove chunks whose source is ``source`` (exact) or starts with it; (chunks removed, their sources).

        Removing some chunks of a folder file's document is an edit of it, which lasts until the file changes (as
        ``update_chunk``'s), and gives every chunk of that document a new index and tag. Removing all of them is
        refused (``FolderDocumentError``), and with it the whole request: the next sync (a reload, a restart, a
        change the watcher sees) would index the file again, and the removal would be undone without a word. Deleting
        the file removes it for good."""
        if not source:
            raise InputError("source_prefix is empty; name what to remove")
        with self._exclusive():
            matched = self.store.chunks(source_exact=source) if exact else self.store.chunks(source_prefix=source)
            by_doc: dict[int, set[int]] = {}
            for chunk in matched:
                by_doc.setdefault(chunk.doc_id, set()).add(chunk.id)
            whole = [d for d in self._documents_named(source, exact) if d.id not in by_doc]
            partly: list[tuple[DocumentRecord, list[ChunkRecord], set[int]]] = []
            for doc_id, ids in by_doc.items():
                doc, chunks = self.store.document(doc_id), self.store.chunks(doc_id=doc_id)
                if all(c.id in ids for c in chunks):
                    whole.append(doc)
                else:
                    partly.append((doc, chunks, {i for i, c in enumerate(chunks) if c.id in ids}))
            self._refuse_folder_documents(whole, "delete the file from the folder to remove it", "removed")
            for doc, chunks, positions in partly:
                self._rewrite(doc, chunks, _dropping(positions))
            if whole:
                self.store.remove_documents([d.id for d in whole])
        return len(matched), sorted({c.source for c in matched})

    def _refuse_folder_documents(self, docs: Iterable[DocumentRecord], instead: str, undone: str) -> None:
        """FolderDocumentError naming the folder files among ``docs``, what to do ``instead``, and that nothing was
        ``undone``: a write that removes or replaces the document of a file lasts until the next sync only."""
        files = sorted({d.source for d in docs if d.metadata.get(ORIGIN_KEY) == "folder"})
        if files:
            named = ", ".join(files[:10]) + (f" and {len(files) - 10} more" if len(files) > 10 else "")
            raise FolderDocumentError(
                f"{named} {'is a file' if len(files) == 1 else 'are files'} of the knowledge-base folder "
                f"{self.folder.path}, which the next sync (a reload, a restart, --rag_watch) indexes again: "
                f"{instead}; nothing was {undone}")

    def _documents_named(self, source: str, exact: bool) -> Iterable[DocumentRecord]:
        if exact:
            return self.store.documents_by_source(source)
        return [d for d in self.store.documents() if d.source.startswith(source)]

    def _rewrite(self, doc: DocumentRecord, chunks: list[ChunkRecord],
                 edit: Callable[[int, _Piece], _Piece | None]) -> DocumentRecord | None:
        """Replace ``doc`` by a pre-chunked copy of its chunks passed through ``edit`` (None drops one)."""
        pieces = []
        for i, chunk in enumerate(chunks):
            piece = edit(i, _Piece(chunk.text, chunk.source, chunk.chunk_index, self.effective_metadata(chunk, doc)))
            if piece is not None:
                pieces.append(piece)
        if not pieces:
            self.store.remove_documents([doc.id])
            return None
        sources = {p.source for p in pieces}
        # a folder file's document keeps its path as source: by it the sync knows the file is still indexed
        source = sources.pop() if len(sources) == 1 and doc.metadata.get(ORIGIN_KEY) != "folder" else doc.source
        metadata = {k: v for k, v in doc.metadata.items() if k not in (USER_METADATA_KEY, "warnings")}
        parsed = _prechunked(doc.title, doc.format, pieces)
        return self.library.writer.add_parsed(parsed, source=source, content_hash=doc.content_hash,
                                       size_bytes=doc.size_bytes, replace=[doc.id], dynamic=doc.dynamic,
                                       ephemeral=doc.ephemeral, metadata=metadata)


def _dropping(positions: set[int]) -> Callable[[int, _Piece], _Piece | None]:
    def edit(i: int, piece: _Piece) -> _Piece | None:
        return None if i in positions else piece

    return edit


def _prechunked(title: str, fmt: str, pieces: Sequence[_Piece]) -> ParsedDocument:
    return ParsedDocument(
        title=title, format=fmt,
        files=[ParsedFile(p.text, title=p.source, label=p.source) for p in pieces],
        prechunked=[PreChunk(i, p.source, p.chunk_index, p.metadata) for i, p in enumerate(pieces)],
    )


def _each_text_once(hits: Sequence[Hit]) -> list[Hit]:
    """``hits`` without those whose text an earlier (better) hit has."""
    seen: set[str] = set()
    kept = []
    for hit in hits:
        if hit.text not in seen:
            seen.add(hit.text)
            kept.append(hit)
    return kept


def _api_text(text: str) -> str:
    """API text without the byte-order marks it opens with: ``jq -Rs '{text: .}' notes.txt`` sends a Windows
    file's BOM as its first character, which files are decoded without (``sources.text.decode_text``)."""
    return text.lstrip("\ufeff")


def _clean_source(source: str) -> str:
    source = (source or "").strip()
    if not source:
        raise InputError("source is empty")
    if len(source) > 1000:
        raise InputError("source is longer than 1000 characters")
    return source
