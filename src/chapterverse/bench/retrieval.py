"""The retrieval benchmark: SQuAD-format sets and FinanceBench, three methods in one run.

A SQuAD article becomes one document (its paragraphs joined by a blank line, each keeping its offset),
and a question is a hit at k when one of the top k passages contains the whole gold answer span, so the
benchmark checks exactly what a citation would show. FinanceBench is page-level: a hit is a passage
from a gold evidence page (zero-based page = the PDF file's ordinal), searching only the question's
own filing.

Methods, all over the same library (chapterverse's default chunks, 512/64 characters):

- ``dense``: cosine top-k over the chunk vectors, the baseline users of embedding search know;
- ``bm25``: SQLite FTS5 ``bm25()`` (k1=1.2, b=0.75) over the stored Snowball stems;
- ``chapterverse``: :meth:`Library.search`, the default pipeline.

Each method is timed per query, including the one query embedding it needs.
"""

from __future__ import annotations

import hashlib
import json
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError
from ..library import Library, Progress
from ..sources.base import ParsedDocument, ParsedFile

__all__ = [
    "BenchDocument",
    "BenchQuestion",
    "BenchSet",
    "MethodScore",
    "BenchReport",
    "METHODS",
    "RERANKED",
    "load_squad",
    "load_financebench",
    "open_bench_library",
    "run_benchmark",
]

METHODS = ("dense", "bm25", "chapterverse")
RERANKED = "chapterverse+rerank"
"""The method ``run_benchmark`` adds when the library has a reranker: the default search, then the second stage."""
MRR_DEPTH = 10


@dataclass(slots=True)
class BenchDocument:
    """One document of a set: a parsed document under a stable source name, or a file to ingest."""

    source: str
    parsed: ParsedDocument | None = None
    path: Path | None = None


@dataclass(slots=True)
class BenchQuestion:
    id: str
    text: str
    source: str
    """The document holding the gold evidence."""
    spans: list[tuple[int, int]] = field(default_factory=list)
    """Gold character ranges in the document's (single) file; any one inside a passage is a hit."""
    pages: frozenset[int] = frozenset()
    """Gold file ordinals (PDF pages, zero-based), for page-level sets."""


@dataclass(slots=True)
class BenchSet:
    name: str
    documents: list[BenchDocument]
    questions: list[BenchQuestion]
    scoped: bool = False
    """True: each question searches only its own document, and gold is pages (FinanceBench); False: the
    whole library, and gold is character spans (SQuAD)."""


# ------------------------------------------------------------------------------------------------ loading


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: cannot read a SQuAD JSON file: {exc}") from exc


def _squad_articles(data: Any, path: Path) -> list[dict[str, Any]]:
    articles = data.get("data") if isinstance(data, dict) else None
    if not isinstance(articles, list):
        raise InputError(f"{path}: not SQuAD format (no top-level 'data' list)")
    return articles


def load_squad(path: str | Path, questions: str | Path | None = None) -> BenchSet:
    """A SQuAD v1.1 file as a benchmark set; ``questions`` swaps in question texts from another file by id.

    An answer whose ``answer_start`` does not point at its text is re-found in the paragraph (first
    occurrence) or dropped; empty answers and ``answer_start`` -1 are skipped; a question left with no
    answer is skipped.
    """
    path = Path(path)
    articles = _squad_articles(_read_json(path), path)
    documents: list[BenchDocument] = []
    asked: list[BenchQuestion] = []
    for number, article in enumerate(articles):
        title = str(article.get("title") or f"article {number}")
        source = f"{path.stem}/{number:04d}"
        parts: list[str] = []
        offset = 0
        for paragraph in article.get("paragraphs", []):
            context = str(paragraph.get("context", ""))
            for qa in paragraph.get("qas", []):
                spans = _answer_spans(context, qa.get("answers", []), offset)
                if spans and str(qa.get("question", "")).strip():
                    asked.append(BenchQuestion(str(qa["id"]), str(qa["question"]), source, spans))
            parts.append(context)
            offset += len(context) + 2
        text = "\n\n".join(parts)
        parsed = ParsedDocument(title=title.replace("_", " "), format="text", files=[ParsedFile(text, title=title)])
        documents.append(BenchDocument(source, parsed))
    if questions is not None:
        asked = _swap_questions(asked, Path(questions))
    name = path.stem if questions is None else f"{Path(questions).stem} -> {path.stem}"
    return BenchSet(name, documents, asked)


def _answer_spans(context: str, answers: Sequence[dict[str, Any]], offset: int) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    for answer in answers:
        text = str(answer.get("text", ""))
        start = int(answer.get("answer_start", -1))
        if not text.strip() or start < 0:
            continue
        if context[start:start + len(text)] != text:
            start = context.find(text)
            if start < 0:
                continue
        span = (offset + start, offset + start + len(text))
        if span not in spans:
            spans.append(span)
    return spans


def _swap_questions(asked: list[BenchQuestion], path: Path) -> list[BenchQuestion]:
    texts = {str(qa["id"]): str(qa.get("question", ""))
             for article in _squad_articles(_read_json(path), path)
             for paragraph in article.get("paragraphs", []) for qa in paragraph.get("qas", [])}
    swapped = [BenchQuestion(q.id, texts[q.id], q.source, q.spans) for q in asked if texts.get(q.id, "").strip()]
    if not swapped:
        raise InputError(f"{path}: shares no question ids with the articles' file")
    return swapped


def load_financebench(directory: str | Path) -> BenchSet:
    """FinanceBench's ``questions.jsonl`` + ``pdfs/``: page-level gold, one filing per question."""
    directory = Path(directory)
    questions_file = directory / "questions.jsonl"
    try:
        lines = questions_file.read_text(encoding="utf-8").splitlines()
        rows = [json.loads(line) for line in lines if line.strip()]
    except (OSError, ValueError) as exc:
        raise InputError(f"{questions_file}: cannot read FinanceBench questions: {exc}") from exc
    asked: list[BenchQuestion] = []
    needed: dict[str, Path] = {}
    for row in rows:
        name = str(row["doc_name"])
        pdf = directory / "pdfs" / f"{name}.pdf"
        if not pdf.exists():
            raise InputError(f"{pdf}: missing (FinanceBench question {row.get('financebench_id')})")
        pages = frozenset(int(e["evidence_page_num"]) for e in row.get("evidence", []) if e.get("doc_name") == name)
        if pages:
            needed[name] = pdf
            asked.append(BenchQuestion(str(row.get("financebench_id", len(asked))), str(row["question"]), name,
                                       pages=pages))
    documents = [BenchDocument(name, path=pdf) for name, pdf in needed.items()]
    return BenchSet("financebench", documents, asked, scoped=True)


# ------------------------------------------------------------------------------------------------ library


def open_bench_library(bench: BenchSet, location: Path, *, progress: Progress | None = None,
                       chunking: tuple[int, int] | None = None,
                       embedding_model: str | None = None) -> tuple[Library, dict[str, int]]:
    """The set's library at ``location`` (reusing documents and vectors already there); source -> doc id.

    Documents of other sets at ``location`` are removed, so every question is asked against exactly
    this set. ``chunking`` is (chunk_size, overlap); None keeps the Library's defaults. A different
    ``embedding_model`` than the library's re-embeds it (keep one location per model).
    """
    if chunking is None:
        library = Library(location, embedding_model=embedding_model)
    else:
        library = Library(location, embedding_model=embedding_model, chunk_size=chunking[0],
                          chunk_overlap=chunking[1])
    library.writer.reembed_if_model_changed()
    layout = f"{library.chunk_size}/{library.chunk_overlap}"
    wanted = {d.source for d in bench.documents}
    rechunk = library.store.get_meta("bench_chunking") not in (None, layout)
    stale = [d.id for d in library.documents() if rechunk or d.source not in wanted]
    if stale:
        library.store.remove_documents(stale)
    library.store.set_meta("bench_chunking", layout)
    doc_ids: dict[str, int] = {}
    for number, doc in enumerate(bench.documents):
        if progress:
            progress(f"library {doc.source}", number, len(bench.documents))
        if doc.path is not None:
            result = library.writer.ingest_file(doc.path, source=doc.source, progress=progress)
            doc_ids[doc.source] = result.document.id
            continue
        assert doc.parsed is not None
        digest = _parsed_hash(doc.parsed)
        existing = library.store.documents_by_source(doc.source)
        same = [d for d in existing if d.content_hash == digest]
        if same:
            doc_ids[doc.source] = same[0].id
            continue
        record = library.writer.add_parsed(doc.parsed, source=doc.source, content_hash=digest,
                                    size_bytes=len(doc.parsed.files[0].text.encode()),
                                    replace=[d.id for d in existing], progress=progress)
        doc_ids[doc.source] = record.id
    return library, doc_ids


def _parsed_hash(parsed: ParsedDocument) -> str:
    digest = hashlib.sha256(parsed.title.encode())
    for f in parsed.files:
        digest.update(b"\0" + f.text.encode())
    return digest.hexdigest()


# ------------------------------------------------------------------------------------------------ scoring


@dataclass(slots=True)
class MethodScore:
    hit_at_1: float
    hit_at_k: float
    mrr_at_10: float
    ms_per_query: float
    ms_p50: float

    def to_json(self, k: int) -> dict[str, float]:
        return {"hit@1": round(self.hit_at_1, 4), f"hit@{k}": round(self.hit_at_k, 4),
                "mrr@10": round(self.mrr_at_10, 4), "ms_per_query": round(self.ms_per_query, 2),
                "ms_p50": round(self.ms_p50, 2)}


@dataclass(slots=True)
class BenchReport:
    name: str
    questions: int
    k: int
    chunks: int
    methods: dict[str, MethodScore]
    library_seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"set": self.name, "questions": self.questions, "k": self.k, "chunks": self.chunks,
                "library_seconds": round(self.library_seconds, 1),
                "methods": {name: score.to_json(self.k) for name, score in self.methods.items()}}


@dataclass(frozen=True, slots=True)
class _Passage:
    doc_id: int
    ordinal: int
    start: int
    end: int


Search = Callable[[str, np.ndarray, Sequence[int] | None, int], list[int]]
"""(query, query vector, doc scope, n) -> chunk ids, best first."""


def _searches(library: Library) -> dict[str, Search]:
    from ..analysis import query_terms

    retriever = library.retriever
    store = library.store
    languages = store.languages()

    def dense(query: str, vector: np.ndarray, scope: Sequence[int] | None, n: int) -> list[int]:
        return [cid for cid, _ in retriever.dense(query, k=n, doc_ids=scope, query_vector=vector)]

    def bm25(query: str, vector: np.ndarray, scope: Sequence[int] | None, n: int) -> list[int]:
        terms = query_terms(query, languages)
        return [cid for cid, _ in store.lexical_search(terms, k=n, doc_ids=scope, heading_weight=0.0)]

    def chapterverse(query: str, vector: np.ndarray, scope: Sequence[int] | None, n: int) -> list[int]:
        return [s.chunk.id for s in retriever.search(query, k=n, doc_ids=scope, query_vector=vector)]

    def reranked(query: str, vector: np.ndarray, scope: Sequence[int] | None, n: int) -> list[int]:
        return [h.chunk.id for h in library.search(query, k=n, doc_ids=scope, query_vector=vector)]

    return {"dense": dense, "bm25": bm25, "chapterverse": chapterverse, RERANKED: reranked}


def _passages(library: Library, doc_ids: Sequence[int]) -> dict[int, _Passage]:
    passages: dict[int, _Passage] = {}
    for doc_id in doc_ids:
        ordinals = {f.id: f.ordinal for f in library.store.files(doc_id)}
        for chunk in library.store.chunks(doc_id=doc_id):
            passages[chunk.id] = _Passage(doc_id, ordinals[chunk.file_id], chunk.start, chunk.end)
    return passages


def _first_hit(question: BenchQuestion, doc_id: int, ranked: Sequence[int], passages: dict[int, _Passage]) -> int:
    """The zero-based rank of the first passage holding the gold evidence, or -1."""
    for rank, cid in enumerate(ranked):
        p = passages.get(cid)
        if p is None or p.doc_id != doc_id:
            continue
        if question.pages:
            if p.ordinal in question.pages:
                return rank
        elif any(p.start <= a and b <= p.end for a, b in question.spans):
            return rank
    return -1


def run_benchmark(bench: BenchSet, library: Library, doc_ids: dict[str, int], *, k: int = 5,
                  limit: int | None = None, methods: Sequence[str] = METHODS,
                  progress: Progress | None = None) -> BenchReport:
    """Ask every question (the first ``limit``) with each method; hit@1, hit@k, MRR@10 and timings.

    With a reranker on ``library``, :data:`RERANKED` runs too, on the same questions in the same run, so its
    gain over ``chapterverse`` (the first stage it reorders) is measured under the same load."""
    if library.reranker is not None and RERANKED not in methods:
        methods = (*methods, RERANKED)
    questions = [q for q in bench.questions if q.source in doc_ids][:limit]
    passages = _passages(library, sorted(set(doc_ids.values())))
    searches = _searches(library)
    depth = max(k, MRR_DEPTH)
    ranks: dict[str, list[int]] = {m: [] for m in methods}
    times: dict[str, list[float]] = {m: [] for m in methods}
    embedder = library.embedder
    if questions:  # loads the model and builds the in-memory indexes outside the timings
        warm = questions[0]
        vector = embedder.embed_query(warm.text)
        for method in methods:
            searches[method](warm.text, vector, [doc_ids[warm.source]] if bench.scoped else None, depth)
    for number, question in enumerate(questions):
        if progress and number % 10 == 0:
            progress(f"asking {bench.name}", number, len(questions))
        doc_id = doc_ids[question.source]
        scope = [doc_id] if bench.scoped else None
        t0 = time.perf_counter()
        vector = embedder.embed_query(question.text)
        embed_s = time.perf_counter() - t0
        for method in methods:
            t0 = time.perf_counter()
            ranked = searches[method](question.text, vector, scope, depth)
            elapsed = time.perf_counter() - t0 + (embed_s if method != "bm25" else 0.0)
            times[method].append(elapsed * 1000)
            ranks[method].append(_first_hit(question, doc_id, ranked, passages))
    if progress:
        progress(f"asking {bench.name}", len(questions), len(questions))
    scores = {m: _score(ranks[m], times[m], k) for m in methods}
    return BenchReport(bench.name, len(questions), k, len(passages), scores)


def _score(ranks: list[int], times: list[float], k: int) -> MethodScore:
    n = max(len(ranks), 1)
    return MethodScore(
        hit_at_1=sum(r == 0 for r in ranks) / n,
        hit_at_k=sum(0 <= r < k for r in ranks) / n,
        mrr_at_10=sum(1 / (r + 1) for r in ranks if 0 <= r < MRR_DEPTH) / n,
        ms_per_query=statistics.fmean(times) if times else 0.0,
        ms_p50=statistics.median(times) if times else 0.0,
    )
