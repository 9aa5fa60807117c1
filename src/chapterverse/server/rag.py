"""``/v1/rag/*``: the knowledge-base API, with the paths, fields and error codes of the RAG server it replaces.

The routes only: requests are checked and turned into calls of ``knowledgebase.KnowledgeBase``, which holds
what a write does, and its results into answers.

Every chunk in an answer carries ``index`` (its stable chunk id) and ``tag`` (its position,
``f5-12-300``), so knowledge-base answers are citable. With RAG disabled every endpoint answers
503 ``RAG_NOT_ENABLED``. Endpoints are plain ``def``: FastAPI runs them in its thread pool, so
searches run in parallel with writes (SQLite serializes the writes).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Depends, Query, Request
from fastapi.routing import APIRoute
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError
from starlette.concurrency import run_in_threadpool

from ..cancel import CancelToken, client_gone
from ..errors import ClientGoneError
from ..knowledgebase import (
    RANKED_LIMIT,
    AmbiguousSourceError,
    ChunkItem,
    ChunkNotFoundError,
    FolderDocumentError,
    KnowledgeBase,
    UpsertItem,
)
from ..positions import defang_tags
from .errors import RAG_INVALID, ApiError
from .limits import MAX_ID, check_length, check_metadata
from .lone_surrogates import require_text_body
from .response_models import (
    KbAdded,
    KbChunkPage,
    KbChunksAdded,
    KbChunkUpdated,
    KbRankedChunkPage,
    KbReloaded,
    KbRemoved,
    KbSearch,
    KbSources,
    KbStatus,
    KbUpserted,
    KbUpsertedMany,
)
from .state import server_state

__all__ = ["router"]

log = logging.getLogger(__name__)
T = TypeVar("T")


def _kb(request: Request) -> KnowledgeBase:
    kb = server_state(request).kb
    if kb is None:
        raise ApiError(503, "RAG_NOT_ENABLED", "the knowledge base is disabled; start the server with --rag_enabled")
    return kb


def _known_query(request: Request) -> None:
    """422 for a query parameter the endpoint does not take, naming it and those it takes, as for a body field
    (``_Body``): ``GET /v1/rag/chunks?limt=1&source=faq`` listed every chunk of the knowledge base."""
    route = request.scope.get("route")
    known = _query_names(route) if isinstance(route, APIRoute) else ()
    unknown = [name for name in dict.fromkeys(request.query_params.keys()) if name not in known]
    if unknown:
        takes = f"takes {', '.join(known)}" if known else "takes no query parameters"
        raise ApiError(RAG_INVALID, "BAD_INPUT", f"query: unknown parameter {', '.join(repr(n) for n in unknown)}; "
                                         f"this endpoint {takes}")


def _query_names(route: APIRoute) -> tuple[str, ...]:
    """The query parameters of ``route`` and of its dependencies, the route's own first (a handful of objects to
    walk: cheaper than a cache keyed by routes, which are not hashable)."""
    dependants = [route.dependant]
    for dependant in dependants:  # grows while it is walked: breadth first
        dependants.extend(dependant.dependencies)
    return tuple(dict.fromkeys(param.alias for dependant in dependants for param in dependant.query_params))


router = APIRouter(prefix="/v1/rag", tags=["rag"],
                   dependencies=[Depends(_kb), Depends(require_text_body), Depends(_known_query)])
KB = Annotated[KnowledgeBase, Depends(_kb)]
Metadata = Annotated[dict[str, Any], AfterValidator(check_metadata)]


class _Body(BaseModel):
    """A request body that refuses fields it does not take, naming them and the ones it does.

    An ignored field is a silent wrong answer: ``{"source": "faq", "content": "..."}`` was an upsert with empty
    text, which deletes the source; ``{"query": "...", "k": 1}`` a search with the default top_k. OpenAI's API
    refuses an unrecognized argument the same way. Types are strict for the same reason: ``"top_k": "5"`` is a
    client's mistake to name (a string where a number goes), not a number to guess.
    """

    model_config = ConfigDict(strict=True)

    @model_validator(mode="before")
    @classmethod
    def _known_fields(cls, data: Any) -> Any:
        if isinstance(data, dict):
            unknown = [name for name in data if name not in cls.model_fields]
            if unknown:
                raise PydanticCustomError("extra_forbidden", "unknown field {unknown}; this request takes {known}",
                                          {"unknown": ", ".join(repr(str(name)) for name in unknown),
                                           "known": ", ".join(cls.model_fields)})
        return data


class ChunksListRequest(_Body):
    source_prefix: str | None = Field(None, description="Only chunks whose source starts with this.")
    query: str | None = Field(None, description=f"Rank by relevance to this text: the best {RANKED_LIMIT:,} "
                                                 "chunks, taken as a search takes its hits.")
    min_score: float | None = Field(None, ge=0, le=1, description="With query: least relevance score (0..1; "
                                                                 "0.25 recall-oriented, 0.40 precision-oriented).")
    limit: int = Field(100, ge=1, le=10_000)
    offset: int = Field(0, ge=0, le=MAX_ID)
    include_text: bool = True


class ChunkUpdateRequest(_Body):
    index: int | None = Field(None, ge=-MAX_ID, le=MAX_ID, description="The chunk's index (stable chunk id).")
    source: str | None = Field(None, description="Or: the chunk's source ...")
    chunk_index: int | None = Field(None, ge=-MAX_ID, le=MAX_ID,
                                    description="... and its chunk_index (needed when the source has several).")
    new_text: str | None = Field(None, description="Rewrites the chunk's document: every chunk of it gets a new "
                                                   "index and tag.")
    new_metadata: Metadata | None = Field(None, description="Replaces the chunk's own metadata, in place: the chunk "
                                                             "keeps its index and tag (its document's metadata "
                                                             "still applies beneath it).")
    new_source: str | None = Field(None, description="Another source; rewrites the document as new_text does.")


class UpsertRequest(_Body):
    source: str = Field(..., min_length=1)
    text: str = Field("", description="The new text; empty deletes the source.")
    metadata: Metadata = Field(default_factory=dict)
    dynamic: bool = True
    persist: bool = Field(True, description="false: kept only while the server that added it runs "
                                             "(dropped when it stops or crashes).")


MAX_UPSERT_DOCUMENTS = 1_000
"""Documents one /upsert/documents request may hold: a batch is one transaction, and its lock is held that long.
Its other costs are bounded by --max_text_chars (each text), --max_body_mb (all of them) and --request_budget_s
(the time to chunk and embed them)."""


class UpsertDocumentItem(_Body):
    source: str = Field(..., min_length=1)
    text: str = Field("", description="The new text; empty deletes the source.")
    metadata: Metadata = Field(default_factory=dict)


class UpsertDocumentsRequest(_Body):
    documents: list[UpsertDocumentItem] = Field(..., min_length=1, max_length=MAX_UPSERT_DOCUMENTS,
                                                description="Each replaces its source; every source at most once.")
    dynamic: bool = True
    persist: bool = Field(True, description="false: kept only while the server that added it runs "
                                             "(dropped when it stops or crashes).")


class SearchRequest(_Body):
    query: str = Field(..., min_length=1)
    top_k: int | None = Field(None, ge=1, le=100, description="Default: --rag_top_k.")
    threshold: float | None = Field(None, ge=0, le=1, description="Least relevance score (0..1) a result needs; "
                                                                 "default: --rag_threshold.")


class AddDocumentRequest(_Body):
    text: str = Field(..., min_length=1, description="Free text; chunked like a file.")
    source: str = Field("api", min_length=1)
    metadata: Metadata = Field(default_factory=dict)
    persist: bool = True
    dynamic: bool = True


class ChunkItemRequest(_Body):
    text: str = Field(..., min_length=1)
    source: str = Field("api", min_length=1)
    metadata: Metadata = Field(default_factory=dict)


class AddChunksRequest(_Body):
    items: list[ChunkItemRequest] = Field(..., min_length=1, description="Each item stays exactly one chunk.")
    persist: bool = True
    dynamic: bool = True


class RemoveRequest(_Body):
    source_prefix: str = Field(..., min_length=1)
    exact: bool = Field(False, description="Match the source exactly instead of as a prefix.")


class ReloadRequest(_Body):
    force_rebuild: bool = Field(False, description="Re-index every file, changed or not.")


async def _bounded(request: Request, kb: KnowledgeBase, work: Callable[[CancelToken], T]) -> T:
    """``work`` in the thread pool, under a token that stops it when its client disconnects, when it runs past
    --request_budget_s (408 ``OVER_BUDGET``) or when the server stops, always before it writes anything; between
    its batches it steps aside while searches run (``KnowledgeBase.step_aside``).

    A batch of 1,000 large documents whose client had given up was embedded for ten more minutes, then thrown
    away: a thread cannot be interrupted, but it can be asked (``CancelToken.check``, between batches).
    """
    token = CancelToken(parent=kb.stopping, budget_s=server_state(request).settings.request_budget_s,
                        budget_name="--request_budget_s", between=kb.step_aside)
    watcher = asyncio.ensure_future(_cancel_on_disconnect(request, token))
    try:
        return await run_in_threadpool(work, token)
    except ClientGoneError as exc:
        log.info("%s %s: %s", request.method, request.url.path, exc)
        raise
    finally:
        watcher.cancel()


async def _cancel_on_disconnect(request: Request, token: CancelToken) -> None:
    """Cancel ``token`` once the client disconnects. The body has been read by now, so the next message the
    server has for this request is ``http.disconnect``: it comes when the client goes (or the answer is sent)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
    token.cancel(client_gone)


def _check_text(request: Request, name: str, text: str | None) -> None:
    """Bounded writes: a text over --max_text_chars is refused before anything is chunked or embedded."""
    check_length(name, text, server_state(request).settings.max_text_chars, "--max_text_chars")


@router.get("/status", response_model=KbStatus, summary="Chunk count, embedding model, sources, thresholds")
def status(request: Request) -> dict[str, Any]:
    state = server_state(request)
    kb = _kb(request)
    settings = state.settings
    store = kb.store
    embedder = kb.library.embedder
    return {
        "enabled": True, "ready": True, "kb_path": str(settings.rag_kb_path),
        "chunk_count": store.count_chunks(), "document_count": len(store.documents()),
        "sources": len(store.source_counts()),
        "embedding_model": store.get_meta("embedding_model") or embedder.name,
        "embedding_dim": int(store.get_meta("embedding_dim") or 0) or embedder.dim,
        "device": getattr(embedder, "device", None) or "cpu",
        "top_k": settings.rag_top_k, "threshold": settings.rag_threshold, "language": settings.rag_language,
        "inject_as": settings.rag_inject_as, "chunk_size": settings.rag_chunk_size,
        "chunk_overlap": settings.rag_chunk_overlap, "embedding_batch_size": settings.rag_embedding_batch_size,
        "mode": settings.rag_mode, "tags": settings.rag_tags, "watch": settings.rag_watch,
        "last_sync": kb.folder.last_sync.to_json() if kb.folder.last_sync else None,
        "limits": {"max_body_mb": settings.max_body_mb, "max_text_chars": settings.max_text_chars,
                   "max_query_chars": settings.max_query_chars, "upsert_documents": MAX_UPSERT_DOCUMENTS,
                   "request_budget_s": settings.request_budget_s, "ranked_chunks": RANKED_LIMIT},
    }


@router.get("/sources", response_model=KbSources, summary="Every source with its chunk count")
def sources(kb: KB) -> dict[str, Any]:
    items = kb.sources()
    return {"count": len(items), "items": items}


@router.get("/chunks", response_model=KbChunkPage, summary="Chunks in index order")
def chunks(kb: KB, source_prefix: str | None = None, source_exact: str | None = None,
           limit: int = Query(100, ge=1, le=10_000), offset: int = Query(0, ge=0, le=MAX_ID),
           include_text: bool = True) -> dict[str, Any]:
    total, items = kb.list_chunks(source_prefix=source_prefix, source_exact=source_exact, limit=limit, offset=offset,
                                  include_text=include_text)
    return {"total": total, "offset": offset, "limit": limit, "items": items}


@router.post("/chunks/list", response_model=KbRankedChunkPage, summary="Chunks, optionally ranked by a query")
async def chunks_list(request: Request, body: ChunksListRequest, kb: KB) -> dict[str, Any]:
    state = server_state(request)
    check_length("query", body.query, state.settings.max_query_chars, "--max_query_chars")
    if body.query and body.query.strip():
        # one ranked listing at a time, the others waiting here (no worker thread held): each ranks 1,000
        # chunks, and four at once on two cores made every small search wait behind them
        async with state.ranking:
            return await run_in_threadpool(_ranked_chunks, kb, body)
    return await run_in_threadpool(_listed_chunks, kb, body)


def _ranked_chunks(kb: KnowledgeBase, body: ChunksListRequest) -> dict[str, Any]:
    assert body.query is not None
    total, items = kb.query_chunks(body.query, source_prefix=body.source_prefix, min_score=body.min_score,
                                   limit=body.limit, offset=body.offset, include_text=body.include_text)
    items = [{"score": i.pop("score"), **i} for i in items]
    return {"total": total, "offset": body.offset, "limit": body.limit, "query": body.query, "items": items}


def _listed_chunks(kb: KnowledgeBase, body: ChunksListRequest) -> dict[str, Any]:
    total, items = kb.list_chunks(source_prefix=body.source_prefix, limit=body.limit, offset=body.offset,
                                  include_text=body.include_text)
    items = [{"score": None, **i} for i in items]
    return {"total": total, "offset": body.offset, "limit": body.limit, "query": body.query, "items": items}


@router.post("/chunks/update", response_model=KbChunkUpdated,
             summary="Change one chunk's text, metadata or source")
def chunks_update(request: Request, body: ChunkUpdateRequest, kb: KB) -> dict[str, Any]:
    _check_text(request, "new_text", body.new_text)
    try:
        target = kb.find_chunk(index=body.index, source=body.source, chunk_index=body.chunk_index)
        chunk = kb.update_chunk(target, new_text=body.new_text, new_metadata=body.new_metadata,
                                new_source=body.new_source)
    except ChunkNotFoundError as exc:
        raise ApiError(404, "CHUNK_NOT_FOUND", str(exc)) from exc
    except AmbiguousSourceError as exc:
        raise ApiError(409, "AMBIGUOUS_SOURCE", str(exc)) from exc
    return {"updated": 1, "previous_index": target.id, "in_place": chunk.id == target.id,
            "item": kb.chunk_json(chunk), "total_after": kb.total_chunks()}


@router.post("/upsert/document", response_model=KbUpserted,
             summary="Replace a source's text atomically (empty text deletes it)")
async def upsert_document(request: Request, body: UpsertRequest, kb: KB) -> dict[str, Any]:
    _check_text(request, "text", body.text)
    return await _bounded(request, kb, lambda cancel: _upsert_document(kb, body, cancel))


def _upsert_document(kb: KnowledgeBase, body: UpsertRequest, cancel: CancelToken) -> dict[str, Any]:
    with _folder_conflict():
        done = kb.upsert(body.source, body.text, metadata=body.metadata, dynamic=body.dynamic, persist=body.persist,
                         cancel=cancel)
    return {"removed": done.removed, "added": done.added, "unchanged": done.unchanged,
            "sources": [body.source.strip()] if any(done) else [], "total_after": kb.total_chunks(),
            "mode": "upsert"}


@contextmanager
def _folder_conflict() -> Iterator[None]:
    """409 ``FOLDER_DOCUMENT`` for a write that would remove or replace a folder file's document."""
    try:
        yield
    except FolderDocumentError as exc:
        raise ApiError(409, "FOLDER_DOCUMENT", str(exc)) from exc


@router.post("/upsert/documents", response_model=KbUpsertedMany,
             summary="Replace many sources' texts in one transaction, all or nothing (empty text deletes one)")
async def upsert_documents(request: Request, body: UpsertDocumentsRequest, kb: KB) -> dict[str, Any]:
    for n, document in enumerate(body.documents):
        _check_text(request, f"documents[{n}].text", document.text)
    return await _bounded(request, kb, lambda cancel: _upsert_documents(kb, body, cancel))


def _upsert_documents(kb: KnowledgeBase, body: UpsertDocumentsRequest, cancel: CancelToken) -> dict[str, Any]:
    items = [UpsertItem(d.source, d.text, dict(d.metadata)) for d in body.documents]
    with _folder_conflict():
        counts = kb.upsert_many(items, dynamic=body.dynamic, persist=body.persist, cancel=cancel)
    documents = [{"source": d.source.strip(), "removed": c.removed, "added": c.added, "unchanged": c.unchanged}
                 for d, c in zip(body.documents, counts)]
    return {"documents": documents, "removed": sum(c.removed for c in counts), "added": sum(c.added for c in counts),
            "unchanged": sum(c.unchanged for c in counts), "total_after": kb.total_chunks(), "mode": "upsert"}


@router.post("/search", response_model=KbSearch, summary="Chunks relevant to a query, each with its position tag")
def search(request: Request, body: SearchRequest) -> dict[str, Any]:
    """Each hit's text with the tag-like strings written inside it defanged (``positions.defang_tags``), as the
    proxy injects it: a client that pastes results into a prompt must never find a citation the text planted."""
    kb = _kb(request)
    settings = server_state(request).settings
    check_length("query", body.query, settings.max_query_chars, "--max_query_chars")
    if not body.query.strip():  # spaces passed min_length, and the nearest chunk to nothing was answered
        raise ApiError(RAG_INVALID, "BAD_INPUT", "query is empty")
    threshold = settings.rag_threshold if body.threshold is None else body.threshold
    found = kb.search_report(body.query, k=body.top_k or settings.rag_top_k, threshold=threshold)
    hits = found.hits
    docs: dict[int, Any] = {}
    results = []
    for hit in hits:
        item = kb.chunk_json(hit.chunk, docs=docs)
        results.append({"text": defang_tags(hit.text), "source": hit.chunk.source, "score": round(hit.score, 4),
                        "tag": item["tag"], "index": hit.chunk.id, "chunk_index": hit.chunk.chunk_index,
                        "metadata": item["metadata"], "doc_title": hit.doc_title})
    reply = {"query": body.query, "count": len(results), "results": results}
    if found.rerank is not None:
        reply["rerank"] = found.rerank.to_json()
    return reply


@router.post("/add/document", response_model=KbAdded, summary="Add free text, chunked automatically")
async def add_document(request: Request, body: AddDocumentRequest, kb: KB) -> dict[str, Any]:
    _check_text(request, "text", body.text)
    return await _bounded(request, kb, lambda cancel: _add_document(kb, body, cancel))


def _add_document(kb: KnowledgeBase, body: AddDocumentRequest, cancel: CancelToken) -> dict[str, Any]:
    done = kb.add_document(body.text, source=body.source, metadata=body.metadata, dynamic=body.dynamic,
                           persist=body.persist, cancel=cancel)
    doc = done.document
    return {"added": doc.chunks if done.changed else 0, "unchanged": 0 if done.changed else doc.chunks,
            "sources": [doc.source], "doc_id": doc.id, "total_after": kb.total_chunks()}


@router.post("/add/chunks", response_model=KbChunksAdded, summary="Add pre-cut chunks (each item stays one chunk)")
async def add_chunks(request: Request, body: AddChunksRequest, kb: KB) -> dict[str, Any]:
    _check_text(request, "the items' text", "".join(i.text for i in body.items))
    return await _bounded(request, kb, lambda cancel: _add_chunks(kb, body, cancel))


def _add_chunks(kb: KnowledgeBase, body: AddChunksRequest, cancel: CancelToken) -> dict[str, Any]:
    items = [ChunkItem(i.text, i.source, dict(i.metadata)) for i in body.items]
    docs = kb.add_chunks(items, dynamic=body.dynamic, persist=body.persist, cancel=cancel)
    return {"added": sum(d.chunks for d in docs), "sources": [d.source for d in docs],
            "total_after": kb.total_chunks()}


@router.post("/remove", response_model=KbRemoved, summary="Remove chunks by source prefix (or exact source)")
def remove(body: RemoveRequest, kb: KB) -> dict[str, Any]:
    with _folder_conflict():
        removed, removed_sources = kb.remove(body.source_prefix, exact=body.exact)
    return {"removed": removed, "sources": removed_sources, "total_after": kb.total_chunks()}


@router.post("/reload", response_model=KbReloaded, summary="Re-scan the folder (force_rebuild: re-index every file)")
def reload(request: Request, body: ReloadRequest | None = None) -> dict[str, Any]:
    kb = _kb(request)
    report = kb.folder.sync(force_rebuild=bool(body and body.force_rebuild))
    return {"reloaded": True, **report.to_json(), "total_after": kb.total_chunks()}
