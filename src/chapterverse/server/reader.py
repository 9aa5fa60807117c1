"""The web reader's API (exactly ``docs/READER_API.md``) and its pages.

Uploads are size-limited while they arrive (413 before the limit is exceeded on disk), saved to a
temporary folder in the library and ingested by the job worker; a document's ``source`` is
``upload/<file name>`` (re-uploading a name replaces it) or, for ``/api/documents/path``, the
absolute path. Questions are answered by ``answering.answer_events`` and streamed as Server-Sent
Events; each turn is stored as a chat so it can be listed and exported.
"""

from __future__ import annotations

import json
import logging
import dataclasses
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request
from fastapi import Path as PathParameter
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile
from starlette.responses import HTMLResponse, Response, StreamingResponse
from starlette.types import Message, Receive

from ..answering import AnswerDelta, AnswerDone, AnswerMeta, AnswerStatus, answer_events
from ..errors import ChapterverseError, InputError, NotFoundError, SourceError, TagError
from ..export import chat_markdown, chat_title
from ..library import Library
from ..llm.summaries import EXTRACTIVE_MODEL, document_summaries, summary_status
from ..paths import expand_user
from ..search.passages import search_results
from ..positions import paragraph_spans, parse_tag
from ..redaction import scrub
from ..sources import SUPPORTED_SUFFIXES, Root, iter_folder
from ..store import DocumentRecord
from .errors import ApiError, MissingPage
from .jobs import Job
from .limits import MAX_ID, check_length
from .lone_surrogates import require_text_body
from .response_models import (
    JobAccepted,
    JobShape,
    ReaderChat,
    ReaderChats,
    ReaderDocumentDetail,
    ReaderDocuments,
    ReaderFile,
    ReaderRemoved,
    ReaderResolved,
    ReaderSearch,
    ReaderSettings,
    ReaderSummaries,
)
from .state import ServerState, server_state
from .upstream import SettingsChange

__all__ = ["router", "pages_router", "STATIC_DIR"]

log = logging.getLogger(__name__)
router = APIRouter(prefix="/api", tags=["reader"])
pages_router = APIRouter(tags=["pages"])
Id = Annotated[int, PathParameter(ge=-MAX_ID, le=MAX_ID)]
"""A stored id in a URL: beyond 64 bits it names nothing, and must be the client's 400, not the store's 500."""
HISTORY_MESSAGES = 12
"""Earlier messages of a chat sent with a new question."""
_MULTIPART_SLACK = 64 * 1024
"""Room for multipart headers and boundaries on top of the file itself."""
_UNSAFE = re.compile(r"[^\w.\- ()\[\]]+", re.UNICODE)
UPLOAD_ROUTE = ("POST", "/api/documents")
"""The one route that reads its body as a stream, under --max_upload_mb instead of --max_body_mb."""


def _library(request: Request) -> Library:
    return server_state(request).reader


# ------------------------------------------------------------------------------------------ documents


def _summary(state: ServerState, doc_id: int) -> dict[str, Any]:
    provider = state.upstream.current.provider()
    model = provider.model if provider else EXTRACTIVE_MODEL
    done, total = summary_status(state.reader, doc_id, model)
    if state.summaries.is_running(doc_id, model):
        kind = "running"
    elif total and done >= total:
        kind = "extractive" if model == EXTRACTIVE_MODEL else "ready"
    elif done:
        kind = "partial"
    else:
        kind = "none"
    return {"state": kind, "done": done, "total": total}


def _document(state: ServerState, doc: DocumentRecord) -> dict[str, Any]:
    return {"id": doc.id, "title": doc.title, "format": doc.format, "source": doc.source,
            "size_bytes": doc.size_bytes, "files": doc.files, "chunks": doc.chunks, "segments": doc.segments,
            "created_at": doc.created_at, "summary": _summary(state, doc.id), "folder": _folder(doc)}


def _folder(doc: DocumentRecord) -> str:
    """The folder a document came from: the one it was ingested with (``Library.ingest``), else its source's."""
    given = doc.metadata.get("folder")
    return given if isinstance(given, str) else doc.source.rpartition("/")[0]


@router.get("/documents", response_model=ReaderDocuments, summary="Every document in the library")
def documents(request: Request) -> dict[str, Any]:
    state = server_state(request)
    return {"documents": [_document(state, d) for d in state.reader.documents()]}


@router.get("/documents/{doc_id}", response_model=ReaderDocumentDetail,
            summary="A document with its TOC and files")
def document(request: Request, doc_id: Id) -> dict[str, Any]:
    state = server_state(request)
    store = state.reader.store
    doc = store.document(doc_id)
    lengths = store.file_lengths(doc_id)
    return {
        **_document(state, doc),
        "toc": [{"title": t.title, "level": t.level, "file": t.file_id, "offset": t.offset}
                for t in store.toc(doc_id)],
        "files": [{"id": f.id, "ordinal": f.ordinal, "title": f.title, "label": f.label, "has_text": f.has_text,
                   "length": lengths.get(f.id, 0)} for f in store.files(doc_id)],
    }


@router.get("/documents/{doc_id}/summaries", response_model=ReaderSummaries,
            summary="The document's segment summaries in reading order (the chat model's where it made them, "
                    "else extractive; null where none exists yet), their tags intact")
def summaries(request: Request, doc_id: Id) -> dict[str, Any]:
    state = server_state(request)
    state.reader.document(doc_id)
    provider = state.upstream.current.provider()
    models = [provider.model, EXTRACTIVE_MODEL] if provider else [EXTRACTIVE_MODEL]
    return {"segments": [{"seq": s.segment.seq, "title_path": s.segment.title_path, "model": s.model,
                          "summary": s.text, "file": s.segment.start_file, "offset": s.segment.start_offset}
                         for s in document_summaries(state.reader, doc_id, models)]}


SEARCH_RESULTS = 20
"""The most passages one reader search answers (bounded work per request)."""


@router.get("/search", response_model=ReaderSearch,
            summary="Passages of the library (or of one document) for a query, each with its position tag")
def search(request: Request, q: Annotated[str, Query(description="The query.")],
           doc_id: Annotated[int | None, Query(ge=-MAX_ID, le=MAX_ID)] = None,
           k: Annotated[int, Query(ge=1, le=SEARCH_RESULTS)] = 10) -> dict[str, Any]:
    state = server_state(request)
    query = q.strip()
    if not query:
        raise ApiError(400, "BAD_INPUT", "the search query is empty")
    check_length("the query", query, state.settings.max_question_chars, "--max_question_chars")
    if doc_id is not None:
        state.reader.document(doc_id)
    hits = state.reader.search(query, k=k, doc_ids=[doc_id] if doc_id is not None else None)
    return {"results": search_results(state.reader, hits)}


@router.delete("/documents/{doc_id}", response_model=ReaderRemoved,
               summary="Remove a document and everything derived from it")
def remove_document(request: Request, doc_id: Id) -> dict[str, Any]:
    _library(request).remove(doc_id)
    return {"removed": doc_id}


class _TooLarge(Exception):
    pass


def _limited(receive: Receive, limit: int) -> Receive:
    """``receive`` that fails once the body grows past ``limit`` bytes, whatever Content-Length claimed."""
    seen = 0

    async def wrapped() -> Message:
        nonlocal seen
        message = await receive()
        if message["type"] == "http.request":
            seen += len(message.get("body", b""))
            if seen > limit:
                raise _TooLarge
        return message

    return wrapped


def _safe_name(name: str | None) -> str:
    base = Path((name or "").replace("\\", "/")).name
    cleaned = _UNSAFE.sub("_", base).strip(" .")
    return cleaned[:200] or "upload"


def _check_suffix(name: str) -> None:
    suffix = Path(name).suffix.lower()
    if suffix not in SUPPORTED_SUFFIXES:
        raise ApiError(415, "UNSUPPORTED_FORMAT", f"{name}: unsupported file type {suffix or '(none)'!r}; "
                                                  f"supported: {', '.join(sorted(SUPPORTED_SUFFIXES))}")


def _too_large(limit: int) -> ApiError:
    return ApiError(413, "TOO_LARGE", f"the file is larger than this server accepts ({limit // (1024 * 1024)} MB)")


_UPLOAD_SCHEMA = {"requestBody": {"required": True, "content": {"multipart/form-data": {"schema": {
    "type": "object", "required": ["file"], "properties": {"file": {"type": "string", "format": "binary"}}}}}}}


@router.post("/documents", status_code=202, response_model=JobAccepted,
             summary="Upload a book (multipart `file`); answers a Job", openapi_extra=_UPLOAD_SCHEMA)
async def upload(request: Request) -> dict[str, Any]:
    state = server_state(request)
    limit = state.settings.max_upload_bytes
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit + _MULTIPART_SLACK:
        raise _too_large(limit)
    limited = Request(request.scope, _limited(request.receive, limit + _MULTIPART_SLACK))
    try:
        form = await limited.form(max_files=1, max_fields=5)
    except _TooLarge:
        raise _too_large(limit) from None
    try:
        upload = form.get("file")
        if not isinstance(upload, UploadFile):
            raise ApiError(400, "BAD_INPUT", "send the book as a multipart field named 'file'")
        name = _safe_name(upload.filename)
        _check_suffix(name)
        if upload.size is not None and upload.size > limit:
            raise _too_large(limit)
        folder = Path(tempfile.mkdtemp(prefix="upload-", dir=_upload_dir(state.reader)))
        path = folder / name
        await run_in_threadpool(_save, upload, path)
        allow_duplicate = form.get("allow_duplicate") in ("true", "1")
    finally:
        await form.close()
    job = state.jobs.submit(f"upload {name}", lambda job: _ingest_upload(state.reader, path, f"upload/{name}", job,
                                                                        allow_duplicate=allow_duplicate))
    return {"job": job.to_json()}


def _upload_dir(library: Library) -> Path:
    folder = library.location / ".uploads"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _save(upload: UploadFile, path: Path) -> None:
    upload.file.seek(0)
    with path.open("wb") as out:
        shutil.copyfileobj(upload.file, out, 1024 * 1024)


def _ingest_upload(library: Library, path: Path, source: str, job: Job, *, allow_duplicate: bool) -> None:
    """Ingest an uploaded file; its errors name the file as uploaded, never the server's temporary folder."""
    try:
        result = library.writer.ingest_file(path, source=source, progress=job.progress, cancel=job.cancel,
                                     allow_duplicate=allow_duplicate)
    except SourceError as exc:
        raise SourceError(path.name, exc.reason.replace(str(path), path.name)) from exc
    finally:
        shutil.rmtree(path.parent, ignore_errors=True)
    job.document_ids.append(result.document.id)
    if result.duplicate_of is not None:
        job.notice = (f"the library already holds this book as “{result.duplicate_of.title}” (document "
                      f"{result.duplicate_of.id}); it was not added again")


class PathRequest(BaseModel):
    path: str = Field(..., min_length=1, max_length=4096,
                      description="A file or folder under one of the server's --ingest_roots (folders: recursively).")


@router.post("/documents/path", status_code=202, response_model=JobAccepted,
             summary="Add a file or folder under the server's ingest roots; answers a Job",
             dependencies=[Depends(require_text_body)])
def add_path(request: Request, body: PathRequest) -> dict[str, Any]:
    state = server_state(request)
    roots = state.settings.path_ingest_roots
    if not roots:
        raise ApiError(403, "PATH_INGEST_DISABLED", "adding files by server path is off; start the server with "
                                                    "--ingest_roots DIR to allow the files under DIR")
    root, path = _allowed_path(body.path, roots)
    if path.is_file():
        _check_suffix(path.name)
    beneath = Root(root, hardlinks=state.settings.allow_hardlinks)
    job = state.jobs.submit(f"path {path}", lambda job: _ingest_path(state.reader, path, beneath, job))
    return {"job": job.to_json()}


def _allowed_path(given: str, roots: list[Path]) -> tuple[Path, Path]:
    """(the ingest root, the resolved path) when the path exists under a root; one 404 otherwise, so that the answer
    never tells a file outside the roots (or a symlink leading out of them) from a missing one.

    The job opens each file again beneath that root (``sources.Root``): the path may change after this check."""
    try:
        path = expand_user(given)
    except InputError:  # ~nosuchuser: a path that names nothing, like one outside the roots
        raise ApiError(404, "NOT_FOUND", f"{given}: no such file or folder under this server's ingest roots") from None
    if not path.is_absolute():
        raise ApiError(400, "BAD_INPUT", f"{given}: give an absolute path")
    try:
        resolved: Path | None = path.resolve()
    except (OSError, RuntimeError, ValueError):  # a link loop; a NUL in the name
        resolved = None
    root = next((root for root in roots if resolved is not None and resolved.is_relative_to(root)), None)
    if resolved is None or root is None or not resolved.exists():
        raise ApiError(404, "NOT_FOUND", f"{given}: no such file or folder under this server's ingest roots")
    return root, resolved


def _ingest_path(library: Library, path: Path, root: Root, job: Job) -> None:
    """A file, or every readable file of a folder (no symlink out of it); each stored under its absolute path and
    opened beneath ``root``, so a folder swapped for a symlink since the request reads nothing outside."""
    files = [f for f, _ in iter_folder(path, contained=True)] if path.is_dir() else [path]
    failures = []
    for n, file in enumerate(files):
        job.cancel.check(f"reading {file.name}")
        job.progress(f"reading {file.name}", n, len(files))
        try:
            job.document_ids.append(library.writer.ingest_file(file, source=file.as_posix(), progress=job.progress,
                                                        cancel=job.cancel, root=root).document.id)
        except ChapterverseError as exc:
            failures.append(str(exc))
            log.warning("ingest %s failed: %s", file, exc)
    if failures and not job.document_ids:
        raise InputError("; ".join(failures[:5]))
    if failures:
        job.error = f"{len(failures)} of {len(files)} files failed: " + "; ".join(failures[:5])


@router.get("/jobs/{job_id}", response_model=JobShape, summary="An ingest job's progress")
def job(request: Request, job_id: Id) -> dict[str, Any]:
    return server_state(request).jobs.get(job_id).to_json()


# -------------------------------------------------------------------------------------- text and tags


@router.get("/files/{file_id}", response_model=ReaderFile,
            summary="A file's canonical text with paragraph offsets (code points)")
def file(request: Request, file_id: Id) -> dict[str, Any]:
    record = _library(request).store.file(file_id)
    return {**dataclasses.asdict(record), "paragraphs": [list(p) for p in paragraph_spans(record.text)]}


@router.get("/resolve/{tag_key}", response_model=ReaderResolved, summary="The exact text a position tag names")
def resolve(request: Request, tag_key: str) -> dict[str, Any]:
    span = parse_tag(tag_key)
    try:
        r = _library(request).resolve(span)
    except TagError as exc:
        raise ApiError(404, "NOT_FOUND", str(exc)) from exc
    return {name: value for name, value in dataclasses.asdict(r).items() if name != "source"}


# ---------------------------------------------------------------------------------------------- ask


class AskRequest(BaseModel):
    question: str = Field(..., min_length=1, description="At most --max_question_chars characters.")
    chat_id: int | None = Field(None, ge=-MAX_ID, le=MAX_ID)
    mode: Literal["auto", "extractive"] = "auto"


def _sse(event: str, data: Any) -> str:
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"


@router.post("/documents/{doc_id}/ask", summary="Ask about a document; answers Server-Sent Events",
             dependencies=[Depends(require_text_body)])
def ask(request: Request, doc_id: Id, body: AskRequest) -> StreamingResponse:
    state = server_state(request)
    library = state.reader
    store = library.store
    store.document(doc_id)
    question = body.question.strip()
    if not question:
        raise ApiError(400, "BAD_INPUT", "the question is empty")
    check_length("the question", question, state.settings.max_question_chars, "--max_question_chars")
    if body.chat_id is not None:
        chat = store.chat(body.chat_id)
        if chat.doc_id != doc_id:
            raise ApiError(400, "BAD_INPUT", f"chat {chat.id} is about another document")
        chat_id = chat.id
    else:
        chat_id = store.create_chat(doc_id, chat_title(question))
    history = [{"role": m.role, "content": m.content} for m in store.messages(chat_id)][-HISTORY_MESSAGES:]
    provider = None if body.mode == "extractive" else state.upstream.current.provider()

    def events() -> Iterator[str]:
        try:
            for event in answer_events(library, question, doc_id=doc_id, provider=provider, history=history,
                                       summary_jobs=state.summaries):
                if isinstance(event, AnswerMeta):
                    store.add_message(chat_id, "user", question)
                    yield _sse("meta", {"chat_id": chat_id, "mode": event.mode, "notice": _scrubbed(event.notice)})
                elif isinstance(event, AnswerStatus):
                    yield _sse("status", {"step": event.step, "text": event.text})
                elif isinstance(event, AnswerDelta):
                    yield _sse("delta", {"text": event.text})
                elif isinstance(event, AnswerDone):
                    payload = {**event.result.to_json(), "notice": _scrubbed(event.result.notice)}
                    store.add_message(chat_id, "assistant", event.result.answer, payload)
                    yield _sse("done", payload)
        except ChapterverseError as exc:
            log.warning("answer for document %d failed: %s", doc_id, exc)
            yield _sse("error", {"code": "ANSWER_FAILED", "message": scrub(str(exc))})
        except Exception as exc:  # the stream has started: report in band
            log.exception("answer for document %d failed", doc_id)
            yield _sse("error", {"code": "INTERNAL", "message": f"internal error: {type(exc).__name__}"})

    return StreamingResponse(events(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


def _scrubbed(notice: str | None) -> str | None:
    """A notice may quote a model's error, which may quote its URL or key (redaction.py)."""
    return scrub(notice) if notice else notice


# ---------------------------------------------------------------------------------------------- chats


@router.get("/chats", response_model=ReaderChats, summary="Chats, optionally of one document")
def chats(request: Request, doc_id: Annotated[int | None, Query(ge=-MAX_ID, le=MAX_ID)] = None) -> dict[str, Any]:
    records = _library(request).store.chats(doc_id)
    return {"chats": [{"id": c.id, "doc_id": c.doc_id, "title": c.title, "created_at": c.created_at}
                      for c in records]}


@router.get("/chats/{chat_id}", response_model=ReaderChat, response_model_exclude_unset=True,
            summary="A chat with its messages")
def chat(request: Request, chat_id: Id) -> dict[str, Any]:
    store = _library(request).store
    record = store.chat(chat_id)
    return {"id": record.id, "doc_id": record.doc_id, "title": record.title, "created_at": record.created_at,
            "messages": [{"role": m.role, "content": m.content, "result": m.result} for m in store.messages(chat_id)]}


@router.get("/chats/{chat_id}/export", summary="A chat as Markdown with deep links into the reader")
def export(request: Request, chat_id: Id, format: str = Query("md")) -> Response:
    if format != "md":
        raise ApiError(400, "BAD_INPUT", f"unknown export format {format!r}; use md")
    base = str(request.base_url).rstrip("/")
    text = chat_markdown(_library(request).store, chat_id, base)
    return Response(text, media_type="text/markdown; charset=utf-8",
                    headers={"Content-Disposition": f'attachment; filename="chat-{chat_id}.md"'})


# ------------------------------------------------------------------------------------------- settings


def _settings(state: ServerState) -> dict[str, Any]:
    store = state.reader.store
    model = store.get_meta("embedding_model")
    dim = store.get_meta("embedding_dim")
    if model is None:
        embedder = state.reader.embedder
        model, dim = embedder.name, str(embedder.dim)
    return {"llm": state.upstream.to_json(), "llm_editable": state.settings.secret("api_key") is not None,
            "embedding_model": model, "embedding_dim": int(dim or 0), "library": str(state.reader.location),
            "path_ingest": bool(state.settings.path_ingest_roots)}


@router.get("/settings", response_model=ReaderSettings,
            summary="The chat model and library in use (never the key itself)")
def get_settings(request: Request) -> dict[str, Any]:
    return _settings(server_state(request))


@router.put("/settings", response_model=ReaderSettings,
            summary="Change the chat model (\"\" clears a value); needs the server key; kept in the library's "
                    "config.json", dependencies=[Depends(require_text_body)])
def put_settings(request: Request, body: SettingsChange) -> dict[str, Any]:
    state = server_state(request)
    state.upstream.update(body)
    log.info("reader settings changed: %r", state.upstream.current)
    return _settings(state)


# ---------------------------------------------------------------------------------------------- pages

try:
    from ..web import CONTENT_SECURITY_POLICY, STATIC_DIR, index_html
except ImportError:  # the front end is a separate piece of work; the API runs without it
    CONTENT_SECURITY_POLICY, STATIC_DIR, index_html = "", None, None  # type: ignore[assignment]


def _page() -> HTMLResponse:
    if index_html is None:
        raise ApiError(404, "NOT_FOUND", "the web reader is not installed")
    return HTMLResponse(index_html(), headers={"Content-Security-Policy": CONTENT_SECURITY_POLICY,
                                               "Cache-Control": "no-cache"})


@pages_router.get("/", include_in_schema=False)
def home() -> HTMLResponse:
    return _page()


@pages_router.get("/read/{doc_id}", include_in_schema=False)
def read(request: Request, doc_id: Id) -> HTMLResponse:
    """The reader's page of a document the library holds; 404 for any other id (a page that says so)."""
    try:
        _library(request).document(doc_id)
    except NotFoundError as exc:
        raise MissingPage(str(exc), f"The library has no document {doc_id} to read at") from exc
    return _page()
