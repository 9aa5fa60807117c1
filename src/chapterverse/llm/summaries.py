"""Segment summaries: the map the model reads to decide which parts of a book to open.

A summary is keyed by (segment content hash, model, prompt version), so the job is idempotent and
resumable: re-running it only summarises what is missing. Position tags in a summary are checked
against the segment's own tagged text; a tag that was not in the input is removed and counted.
Without a model, summaries are extractive: the segment's most central sentences, with their tags.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from ..analysis import content_words
from ..chunking import SegmentSpec, sentence_spans, tagged_source_text
from ..library import Library
from ..positions import Span, find_tags
from ..store import SegmentRecord
from .client import ChatProvider
from .prompts import load_prompt

__all__ = [
    "SegmentInput",
    "SegmentSummary",
    "document_summaries",
    "segment_inputs",
    "summarize_document",
    "summary_status",
    "validate_summary",
    "EXTRACTIVE_MODEL",
    "SummaryJobs",
]

log = logging.getLogger(__name__)
EXTRACTIVE_MODEL = "extractive"
EXTRACTIVE_SENTENCES = 5
SUMMARY_WORDS = 200


@dataclass(slots=True)
class SegmentInput:
    segment: SegmentRecord
    tagged_text: str


def segment_inputs(library: Library, doc_id: int) -> list[SegmentInput]:
    """Every segment of a document with its tagged source text (each paragraph followed by its tag)."""
    files = library.store.files(doc_id)
    ordinal_of = {f.id: f.ordinal for f in files}
    texts = [library.store.file(f.id).text for f in files]
    file_ids = [f.id for f in files]
    inputs = []
    for seg in library.store.segments(doc_id):
        spec = SegmentSpec(seq=seg.seq, title_path=seg.title_path,
                           start=(ordinal_of[seg.start_file], seg.start_offset),
                           end=(ordinal_of[seg.end_file], seg.end_offset))
        inputs.append(SegmentInput(seg, tagged_source_text(texts, file_ids, spec)))
    return inputs


def validate_summary(summary: str, tagged_input: str) -> tuple[str, int]:
    """Remove tags the input did not contain; return the cleaned summary and how many were removed."""
    allowed = set(find_tags(tagged_input))
    removed = 0
    for span in set(find_tags(summary)):
        if span not in allowed:
            removed += summary.count(span.tag)
            summary = summary.replace(span.tag, "")
    return summary.strip(), removed


def extractive_summary(tagged_text: str, languages: list[str]) -> str:
    """The most central sentences (sharing the segment's most frequent content words), in reading order."""
    paragraphs = [(p[: p.rfind("[f")], find_tags(p)[-1]) for p in tagged_text.split("\n\n") if find_tags(p)]
    sentences: list[tuple[str, Span]] = []
    for text, span in paragraphs:
        for start, end in sentence_spans(text):
            sentences.append((text[start:end], Span(span.file, span.start + start, span.start + end)))
    if not sentences:
        return ""
    frequency = Counter(w for s, _ in sentences for w in content_words(s, languages))

    def centrality(item: tuple[str, Span]) -> float:
        words = content_words(item[0], languages)
        return sum(frequency[w] for w in words) / (len(words) + 5) if words else 0.0

    best = sorted(sorted(sentences, key=centrality, reverse=True)[:EXTRACTIVE_SENTENCES], key=lambda s: s[1])
    return " ".join(f"{text}{span.tag}" for text, span in best)


@dataclass(slots=True)
class SegmentSummary:
    segment: SegmentRecord
    text: str | None
    """The summary, its position tags intact (they resolve); None when no model in the list has made one."""
    model: str | None


def document_summaries(library: Library, doc_id: int, models: Sequence[str]) -> list[SegmentSummary]:
    """Every segment of a document in reading order, each with its summary by the first of ``models`` that
    made one: what the reader's contents panel and ``chapterverse summaries`` show (the chat model's summaries
    where they exist, else the extractive ones)."""
    version = load_prompt("summarize_segment").version
    segments = library.store.segments(doc_id)
    hashes = [s.content_hash for s in segments]
    found = {model: library.store.summaries(hashes, model, version) for model in dict.fromkeys(models)}
    summaries = []
    for segment in segments:
        model = next((m for m in found if segment.content_hash in found[m]), None)
        summaries.append(SegmentSummary(segment, found[model][segment.content_hash] if model else None, model))
    return summaries


def summary_status(library: Library, doc_id: int, model: str) -> tuple[int, int]:
    """(summarised, total) segments of a document for ``model`` and the current prompt."""
    hashes = [s.content_hash for s in library.store.segments(doc_id)]
    done = library.store.summaries(hashes, model, load_prompt("summarize_segment").version)
    return len(done), len(hashes)


def summarize_document(library: Library, doc_id: int, provider: ChatProvider | None, *, concurrency: int = 4,
                       progress: Callable[[int, int], None] | None = None) -> dict[str, int]:
    """Summarise every segment that has no summary yet; returns counts (done, skipped, removed_tags)."""
    prompt = load_prompt("summarize_segment")
    model = provider.config.model if provider else EXTRACTIVE_MODEL
    doc = library.document(doc_id)
    inputs = segment_inputs(library, doc_id)
    have = library.store.summaries([i.segment.content_hash for i in inputs], model, prompt.version)
    todo = [i for i in inputs if i.segment.content_hash not in have]
    languages = [doc.language]
    counts = {"total": len(inputs), "skipped": len(inputs) - len(todo), "done": 0, "removed_tags": 0}
    lock = threading.Lock()

    def run(item: SegmentInput) -> None:
        if provider is None:
            text, removed = extractive_summary(item.tagged_text, languages), 0
        else:
            message = prompt.render(doc_title=doc.title, title_path=" › ".join(item.segment.title_path) or doc.title,
                                    max_words=SUMMARY_WORDS, tagged_text=item.tagged_text)
            reply = provider.complete([{"role": "user", "content": message}])
            text, removed = validate_summary(reply.content, item.tagged_text)
        library.store.put_summary(item.segment.content_hash, model, prompt.version, text, removed)
        with lock:
            counts["done"] += 1
            counts["removed_tags"] += removed
            if progress:
                progress(counts["done"] + counts["skipped"], counts["total"])

    with ThreadPoolExecutor(max_workers=max(1, concurrency if provider else 1)) as pool:
        list(pool.map(run, todo))
    return counts


class SummaryJobs:
    """At most one background summary job per (document, model); the first question starts it."""

    def __init__(self) -> None:
        self._running: dict[tuple[int, str], threading.Thread] = {}
        self._lock = threading.Lock()

    def ensure_started(self, library: Library, doc_id: int, provider: ChatProvider | None) -> bool:
        """Start the job unless it is running; return True when summaries are already complete."""
        model = provider.config.model if provider else EXTRACTIVE_MODEL
        done, total = summary_status(library, doc_id, model)
        if done >= total:
            return True
        key = (doc_id, model)
        with self._lock:
            thread = self._running.get(key)
            if thread is None or not thread.is_alive():
                thread = threading.Thread(target=self._run, args=(library, doc_id, provider), daemon=True,
                                          name=f"summaries-{doc_id}")
                self._running[key] = thread
                thread.start()
        return False

    @staticmethod
    def is_complete(library: Library, doc_id: int, model: str) -> bool:
        done, total = summary_status(library, doc_id, model)
        return done >= total

    def is_running(self, doc_id: int, model: str) -> bool:
        thread = self._running.get((doc_id, model))
        return bool(thread and thread.is_alive())

    @staticmethod
    def _run(library: Library, doc_id: int, provider: ChatProvider | None) -> None:
        try:
            summarize_document(library, doc_id, provider)
        except Exception:  # a background job must log, not die silently
            log.exception("summary job for document %s failed", doc_id)
