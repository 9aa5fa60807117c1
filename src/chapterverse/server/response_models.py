"""The answers of the knowledge-base (``/v1/rag``) and reader (``/api``) routes, as pydantic models.

Each route names its model as ``response_model``, so the OpenAPI document (``/openapi.json``, browsable at
``/docs``) is the reference for every shape, and FastAPI checks each answer against it: a field a handler sends
that its model does not declare is an error (``extra="forbid"``), never silently dropped, so the models cannot
drift from the code. Fields that some answers leave out are excluded when unset (``_absent``), not sent as null.
An answer and its citations are not declared here: a chat's messages hold ``answering.AnswerResult`` with
``citations.Citation`` itself, the type every answer path returns and every front end sends.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Literal, get_type_hints

from pydantic import BaseModel, ConfigDict, Field, create_model

from ..answering.result import AnswerResult
from ..foldersync import SyncReport
from ..positions import ResolvedSpan
from ..search.rerank import RerankReport
from ..store import ChatRecord, FileRecord
from .jobs import Job

__all__ = [
    "KbStatus", "KbLimits", "KbSources", "KbChunkPage", "KbRankedChunkPage", "KbChunkUpdated", "KbUpserted", "KbSearch",
    "KbAdded", "KbChunksAdded", "KbRemoved", "KbReloaded", "ReaderDocuments", "ReaderDocumentDetail",
    "ReaderRemoved", "JobShape", "JobAccepted", "ReaderFile", "ReaderResolved", "ReaderChats", "ReaderChat",
    "ReaderSettings", "ReaderSummaries", "ReaderSearch",
]


def _absent(value: Any) -> bool:
    """``exclude_if`` of the fields an answer carries only sometimes."""
    return value is None


class _Shape(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _shape_of(name: str, record: type[Any], described: dict[str, str], *, leave_out: frozenset[str] = frozenset(),
              doc: str | None = None, **more: Any) -> type[_Shape]:
    """The shape of a route that sends a dataclass record (less ``leave_out``, plus ``more`` fields), made from
    the record itself so that the two cannot drift apart."""
    hints = get_type_hints(record)
    fields: dict[str, Any] = {f.name: (hints[f.name], Field(description=described.get(f.name)))
                              for f in dataclasses.fields(record) if f.name not in leave_out}
    return create_model(name, __base__=_Shape, __doc__=doc, **fields, **more)


# -- knowledge base (/v1/rag) -----------------------------------------------------------------------------------
if TYPE_CHECKING:  # to mypy, a shape made from its record is a _Shape
    class SyncReportShape(_Shape): ...
else:
    SyncReportShape = _shape_of("SyncReportShape", SyncReport, {
        "indexed": "Sources (re)indexed.", "unchanged": "Files whose content hash was unchanged (not re-read).",
        "removed": "Sources whose file is gone.",
        "duplicates": "Source -> the source already indexed with the same content (the copy is not indexed twice).",
        "errors": "Source -> why it could not be read."}, doc="What one folder sync did.")
"""``foldersync.SyncReport``."""


class KbLimits(_Shape):
    """What one request may ask of the knowledge base; past each, the refusal names its flag."""

    max_body_mb: float = Field(description="Largest request body (--max_body_mb); 413 beyond.")
    max_text_chars: int = Field(description="Longest text of one write, each document's of a batch (422 beyond).")
    max_query_chars: int = Field(description="Longest search query (422 beyond).")
    upsert_documents: int = Field(description="Most documents one upsert/documents request holds (422 beyond).")
    request_budget_s: float = Field(description="Most seconds a write may chunk and embed before it is abandoned, "
                                                "writing nothing (408 OVER_BUDGET).")
    ranked_chunks: int = Field(description="How many chunks a ranked chunks/list ranks (its total at most).")


class KbStatus(_Shape):
    enabled: bool
    ready: bool
    kb_path: str
    chunk_count: int
    document_count: int
    sources: int
    embedding_model: str
    embedding_dim: int
    device: str
    top_k: int
    threshold: float
    language: Literal["auto", "es", "it", "en"]
    inject_as: Literal["system", "user"]
    chunk_size: int
    chunk_overlap: int
    embedding_batch_size: int
    mode: Literal["inject", "tools"]
    tags: Literal["strip", "keep"]
    watch: bool
    last_sync: SyncReportShape | None = Field(description="The last folder sync (null before the first).")
    limits: KbLimits


class KbSource(_Shape):
    source: str
    chunk_count: int
    has_dynamic: bool = Field(description="Whether any of its documents is dynamic (added over the API).")


class KbSources(_Shape):
    count: int
    items: list[KbSource]


class KbChunk(_Shape):
    """One chunk of the knowledge base."""

    index: int = Field(description="The chunk's stable id.")
    source: str
    chunk_index: int = Field(description="Its place among its source's chunks.")
    metadata: dict[str, Any]
    is_dynamic: bool
    persist: bool = Field(description="false: dropped when the server that added it stops.")
    doc_id: int
    tag: str = Field(description="Position tag key, f<file id>-<start>-<end> (code points).")
    text: str | None = Field(description="Null when the request asked for no text.")


class _Scored(_Shape):
    score: float | None = Field(description="Relevance 0..1 to the query; null when no query ranked the chunks.")


class KbRankedChunk(KbChunk, _Scored):
    """A chunk of a ``/chunks/list`` answer (``score`` first)."""


class KbChunkPage(_Shape):
    total: int
    offset: int
    limit: int
    items: list[KbChunk]


class KbRankedChunkPage(_Shape):
    total: int
    offset: int
    limit: int
    query: str | None
    items: list[KbRankedChunk]


class KbChunkUpdated(_Shape):
    updated: int
    previous_index: int = Field(description="The chunk's id before the update (a rewrite gives it a new one).")
    in_place: bool = Field(description="true: the chunk kept its index, document and tag (a metadata update); "
                                       "false: its document was rewritten (new text or source), and every chunk "
                                       "of it has a new index and tag.")
    item: KbChunk
    total_after: int


class KbUpserted(_Shape):
    removed: int = Field(description="Chunks removed.")
    added: int = Field(description="Chunks added.")
    unchanged: int = Field(0, description="Chunks left as they were: the source held this text already.")
    sources: list[str]
    total_after: int
    mode: Literal["upsert"]


class KbUpsertedItem(_Shape):
    source: str
    removed: int = Field(description="Chunks removed.")
    added: int = Field(description="Chunks added.")
    unchanged: int = Field(0, description="Chunks left as they were: the source held this text already.")


class KbUpsertedMany(_Shape):
    documents: list[KbUpsertedItem] = Field(description="One per document sent, in order.")
    removed: int = Field(description="Chunks removed, all documents together.")
    added: int = Field(description="Chunks added, all documents together.")
    unchanged: int = Field(0, description="Chunks left as they were, all documents together.")
    total_after: int
    mode: Literal["upsert"]


class KbHit(_Shape):
    text: str
    source: str
    score: float = Field(description="Relevance 0..1.")
    tag: str = Field(description="Position tag key, f<file id>-<start>-<end>.")
    index: int
    chunk_index: int
    metadata: dict[str, Any]
    doc_title: str


if TYPE_CHECKING:  # to mypy, a shape made from its record is a _Shape
    class RerankShape(_Shape): ...
else:
    RerankShape = _shape_of("RerankShape", RerankReport,
                            {"applied": "false: it failed and the first stage's order was kept."},
                            doc="What the second-stage reranker did (``search.rerank.RerankReport``).")


class KbSearch(_Shape):
    query: str
    count: int
    results: list[KbHit]
    rerank: RerankShape | None = Field(None, exclude_if=_absent, description="Present when a reranker ran.")


class KbAdded(_Shape):
    added: int = Field(description="Chunks added.")
    unchanged: int = Field(0, description="Chunks of the same text, metadata and flags the source held already: "
                                          "then nothing is added, and doc_id is that document.")
    sources: list[str]
    doc_id: int
    total_after: int


class KbChunksAdded(_Shape):
    added: int = Field(description="Chunks added.")
    sources: list[str]
    total_after: int


class KbRemoved(_Shape):
    removed: int = Field(description="Chunks removed.")
    sources: list[str]
    total_after: int


class _Reloaded(_Shape):
    reloaded: bool


class KbReloaded(SyncReportShape, _Reloaded):
    """``reloaded``, then what the sync did, then the chunk count after it."""

    total_after: int


# -- reader (/api) ------------------------------------------------------------------------------------------------
class SummaryStatus(_Shape):
    """How far the document's segment summaries (for the chat model in use) have come."""

    state: Literal["none", "running", "ready", "partial", "extractive"]
    done: int
    total: int


class ReaderDocument(_Shape):
    id: int
    title: str
    format: str
    source: str
    size_bytes: int
    files: int = Field(description="How many files (chapters, pages) it has.")
    chunks: int
    segments: int
    created_at: str = Field(description="UTC, ISO 8601, whole seconds.")
    summary: SummaryStatus
    folder: str = Field(description="The folder it came from (\"\" for a file added on its own), to group by.")


class ReaderDocuments(_Shape):
    documents: list[ReaderDocument]


class ReaderTocEntry(_Shape):
    title: str
    level: int
    file: int = Field(description="The file id the entry points into.")
    offset: int = Field(description="Code point offset in that file.")


class ReaderFileEntry(_Shape):
    id: int
    ordinal: int
    title: str
    label: str
    has_text: bool
    length: int = Field(description="Code points of text.")


class ReaderDocumentDetail(_Shape):
    """A document as in the list, with its files listed instead of counted, and its TOC."""

    id: int
    title: str
    format: str
    source: str
    size_bytes: int
    files: list[ReaderFileEntry]
    chunks: int
    segments: int
    created_at: str
    summary: SummaryStatus
    folder: str = Field(description="The folder it came from (\"\" for a file added on its own), to group by.")
    toc: list[ReaderTocEntry]


class ReaderSegmentSummary(_Shape):
    seq: int = Field(description="The segment's place in reading order, from 0.")
    title_path: list[str] = Field(description="Its chapter and section titles.")
    model: str | None = Field(description="Who made the summary: the chat model's name or \"extractive\".")
    summary: str | None = Field(description="The summary with its position tags, or null when none is made yet.")
    file: int = Field(description="The file id where the segment starts.")
    offset: int = Field(description="Code point offset in that file.")


class ReaderSummaries(_Shape):
    segments: list[ReaderSegmentSummary]


class ReaderSearchHit(_Shape):
    tag: str = Field(description="The passage's position tag (f{file}-{start}-{end}); /read/{doc_id}#{tag} opens "
                                 "it highlighted.")
    doc_id: int
    doc_title: str
    toc_path: list[str] = Field(description="The chapter and section it is in.")
    page: str | None = Field(description="In a PDF, the page it is on as the book prints it (the page label, else "
                                         "the page's position); null in other formats.")
    text: str = Field(description="What the tag names: the retrieved passage widened (or narrowed) to whole "
                                  "sentences, so that it does not begin or end mid-sentence.")
    score: float = Field(description="Relevance, 0..1.")


class ReaderSearch(_Shape):
    results: list[ReaderSearchHit]


class ReaderRemoved(_Shape):
    removed: int = Field(description="The id of the removed document.")


if TYPE_CHECKING:  # to mypy, a shape made from its record is a _Shape
    class JobShape(_Shape): ...
else:
    JobShape = _shape_of("JobShape", Job, {
        "message": "The current stage.", "document_ids": "Documents written so far.",
        "notice": "Set on a job that succeeded with something to say, e.g. that the library already held the book (its "
                  "id is in document_ids)."}, leave_out=frozenset({"label", "cancel"}),
        doc="An ingest job; poll ``/api/jobs/{id}`` until ``state`` is done or failed.")
"""``server.jobs.Job`` less its label and cancel token."""


class JobAccepted(_Shape):
    job: JobShape


ReaderFile = _shape_of(
    "ReaderFile", FileRecord,
    {"text": "The file's canonical text; every tag's offsets count code points of it."},
    paragraphs=(list[tuple[int, int]], Field(description="[start, end) of each paragraph.")))
"""``store.FileRecord`` with its paragraphs."""

ReaderResolved = _shape_of("ReaderResolved", ResolvedSpan, {"text": "Exactly the span's text."},
                           leave_out=frozenset({"source"}))
"""``positions.ResolvedSpan`` less the document's source (the reader knows its documents)."""


if TYPE_CHECKING:  # to mypy, a shape made from its record is a _Shape
    class ReaderChatInfo(_Shape): ...
else:
    ReaderChatInfo = _shape_of("ReaderChatInfo", ChatRecord, {})
"""``store.ChatRecord``."""


class ReaderChats(_Shape):
    chats: list[ReaderChatInfo]


class ReaderMessage(_Shape):
    role: str
    content: str
    result: AnswerResult | None = Field(description="The answer (null for a question), sent as it was stored.")


if TYPE_CHECKING:  # to mypy, a shape made from its record is a _Shape
    class ReaderChat(_Shape): ...
else:
    ReaderChat = _shape_of("ReaderChat", ChatRecord, {}, messages=(list[ReaderMessage], ...))
"""``store.ChatRecord`` with its messages."""


class LlmSettings(_Shape):
    base_url: str | None = Field(description="Without any credentials it held.")
    model: str | None
    api_key_set: bool
    api_key_hint: str | None = Field(description="A masked hint (sk-…abcd), never the key.")


class ReaderSettings(_Shape):
    llm: LlmSettings
    llm_editable: bool = Field(description="Whether PUT /api/settings may change the chat model: only on a server "
                                           "started with an API key; without one the model is set by flags, the "
                                           "environment or config.json.")
    embedding_model: str
    embedding_dim: int
    library: str
    path_ingest: bool = Field(description="Whether files and folders on the server may be added by path (POST "
                                          "/api/documents/path): --ingest_roots, or the knowledge-base folder "
                                          "with RAG on. The reader hides its form when not.")
