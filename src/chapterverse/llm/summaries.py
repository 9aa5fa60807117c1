"""Segment summaries: the map the model reads to decide which parts of a book to open.

A summary is keyed by (segment content hash, model, version of the prompt or of the extractive method), so
the job is idempotent and resumable: re-running it only summarises what is missing. Position tags in a summary are checked
against the segment's own tagged text; a tag that was not in the input is removed and counted.
Without a model, summaries are extractive: the segment's most central sentences, with their tags, chosen
only among whole sentences of prose (:class:`SummaryProse`): never a PDF page's running header or footer, a
title, a cover's barcode or a page-crossing sentence's second half.
"""

from __future__ import annotations

import logging
import re
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from ..analysis import content_words, word_tokens
from ..chunking import SegmentSpec, segment_paragraphs, sentence_spans, tagged_text
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
    "summary_version",
    "is_summary_prose",
]

log = logging.getLogger(__name__)
EXTRACTIVE_MODEL = "extractive"
EXTRACTIVE_VERSION = "extractive-2"
"""The extractive method's version, stored with its summaries as a prompt's version is with a model's: a new
method makes ``summarize`` redo them (2: only whole sentences of prose, see :class:`SummaryProse`)."""
EXTRACTIVE_SENTENCES = 5
SUMMARY_WORDS = 200


@dataclass(slots=True)
class SegmentInput:
    segment: SegmentRecord
    tagged_text: str


def segment_inputs(library: Library, doc_id: int) -> list[SegmentInput]:
    """Every segment of a document with its tagged source text: each paragraph that a chunk holds, followed by its
    tag. A paragraph no chunk holds is not the book (an EPUB's contents page, a Project Gutenberg licence, a PDF
    page's running header on its own line): a summary never reads it, nor does a model get it as evidence."""
    files = library.store.files(doc_id)
    ordinal_of = {f.id: f.ordinal for f in files}
    texts = [library.store.file(f.id).text for f in files]
    file_ids = [f.id for f in files]
    chunked = SummaryProse.content(library, doc_id)
    inputs = []
    for seg in library.store.segments(doc_id):
        spec = SegmentSpec(seq=seg.seq, title_path=seg.title_path,
                           start=(ordinal_of[seg.start_file], seg.start_offset),
                           end=(ordinal_of[seg.end_file], seg.end_offset))
        paragraphs = [(Span(file_ids[i], start, end), texts[i][start:end])
                      for i, start, end in segment_paragraphs(texts, spec)
                      if any(a < end and start < b for a, b in chunked.get(file_ids[i], ()))]
        inputs.append(SegmentInput(seg, tagged_text(paragraphs)))
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


def summary_version(model: str) -> str:
    """The version stored with ``model``'s summaries: the prompt's for a chat model, else the extractive one's."""
    return EXTRACTIVE_VERSION if model == EXTRACTIVE_MODEL else load_prompt("summarize_segment").version


@dataclass(frozen=True, slots=True)
class SummaryProse:
    """Which sentences of a document an extractive summary may quote.

    - only text that is chunked (:meth:`content`), which is what search and citations see: a PDF page's
      running header and footer lie outside its chunks ("PREFACE xv <http://free-culture.org/get-it>"), found
      at ingest by ``sources.pdf_running_lines``;
    - only a whole sentence of prose (:func:`is_summary_prose`): not a title, a heading or a cover's barcode
      glyphs above "FREE CULTURE", nor the second half of a sentence that a page break cut ("of law
      protecting creative property.").
    """

    languages: tuple[str, ...]
    titles: frozenset[str]
    """The document's title and TOC titles, as :func:`word_tokens` flattens them."""
    chunked: dict[int, list[tuple[int, int]]]
    """Per file id, the merged ranges its chunks cover."""

    @classmethod
    def of(cls, library: Library, doc_id: int) -> SummaryProse:
        doc = library.document(doc_id)
        names = [doc.title, *(t.title for t in library.store.toc(doc_id))]
        return cls((doc.language,), frozenset(" ".join(word_tokens(name)) for name in names),
                   cls.content(library, doc_id))

    @staticmethod
    def content(library: Library, doc_id: int) -> dict[int, list[tuple[int, int]]]:
        """Per file, the ranges of its text that its chunks cover, overlapping chunks merged."""
        ranges: dict[int, list[tuple[int, int]]] = {}
        for chunk in sorted(library.store.chunks(doc_id=doc_id), key=lambda c: (c.file_id, c.start)):
            merged = ranges.setdefault(chunk.file_id, [])
            if merged and chunk.start <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], chunk.end))
            else:
                merged.append((chunk.start, chunk.end))
        return ranges

    def admits(self, sentence: str, span: Span) -> bool:
        return (self._is_chunked(span.file, span.start) and self._is_chunked(span.file, span.end - 1)
                and is_summary_prose(sentence, self.languages, self.titles))

    def _is_chunked(self, file_id: int, offset: int) -> bool:
        """Whether a chunk holds this character: its first and last tell whether a sentence begins in a page's
        header or runs into its footer (chunks without overlap may leave the space between them out)."""
        return any(start <= offset < end for start, end in self.chunked.get(file_id, ()))


SUMMARY_SENTENCE_CHARS = 600
"""Longer "sentences" are unsplit blocks (an index, a table), not one sentence of a summary."""
_SENTENCE_END = re.compile(r"[.!?…:;»\"”’)\]。！？।॥]\d{0,3}\s*$")
"""What a sentence of prose ends with: a full stop, a closing quote or bracket, perhaps a note number
("... to that value.2"). A title, a heading, a running header or a barcode line ends otherwise."""


def is_summary_prose(sentence: str, languages: Sequence[str], titles: frozenset[str]) -> bool:
    """Whether ``sentence`` is a whole sentence of prose, fit to stand in a summary: it ends as a sentence
    does, does not start in lower case (the rest of a sentence that began on the page before), has four
    words, two of them content words, is mostly letters, and is not a title of the contents.

    Not the extractive answer reader's ``is_answer_prose``: that one also refuses every sentence that says
    "copyright", "licence" or "public domain" (front matter is never an answer), which in *Free Culture*, a book
    about copyright, is most of what a summary has to say."""
    stripped = sentence.strip()
    if (len(stripped) > SUMMARY_SENTENCE_CHARS or stripped.startswith("#") or not _SENTENCE_END.search(stripped)
            or next((c for c in stripped if c.isalpha()), "").islower()):
        return False
    visible = [c for c in stripped if not c.isspace()]
    letters = sum(c.isalpha() for c in visible)
    return (letters >= len(visible) / 2 and len(stripped.split()) >= 4
            and len(content_words(stripped, languages)) >= 2 and " ".join(word_tokens(stripped)) not in titles)


def extractive_summary(tagged_text: str, prose: SummaryProse) -> str:
    """The most central sentences of prose (sharing the segment's most frequent content words), in reading
    order; "" when the segment has none (a cover, a contents page)."""
    paragraphs = [(p[: p.rfind("[f")], find_tags(p)[-1]) for p in tagged_text.split("\n\n") if find_tags(p)]
    sentences: list[tuple[str, Span]] = []
    for text, span in paragraphs:
        for start, end in sentence_spans(text):
            sentence = (text[start:end], Span(span.file, span.start + start, span.start + end))
            if prose.admits(*sentence):
                sentences.append(sentence)
    languages = prose.languages
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
    segments = library.store.segments(doc_id)
    hashes = [s.content_hash for s in segments]
    found = {model: library.store.summaries(hashes, model, summary_version(model)) for model in dict.fromkeys(models)}
    summaries = []
    for segment in segments:
        model = next((m for m in found if segment.content_hash in found[m]), None)
        summaries.append(SegmentSummary(segment, found[model][segment.content_hash] if model else None, model))
    return summaries


def summary_status(library: Library, doc_id: int, model: str) -> tuple[int, int]:
    """(summarised, total) segments of a document for ``model`` and its current prompt or method."""
    hashes = [s.content_hash for s in library.store.segments(doc_id)]
    done = library.store.summaries(hashes, model, summary_version(model))
    return len(done), len(hashes)


def summarize_document(library: Library, doc_id: int, provider: ChatProvider | None, *, concurrency: int = 4,
                       progress: Callable[[int, int], None] | None = None) -> dict[str, int]:
    """Summarise every segment that has no summary yet; returns counts (done, skipped, removed_tags)."""
    prompt = load_prompt("summarize_segment")
    model = provider.config.model if provider else EXTRACTIVE_MODEL
    version = summary_version(model)
    doc = library.document(doc_id)
    inputs = segment_inputs(library, doc_id)
    have = library.store.summaries([i.segment.content_hash for i in inputs], model, version)
    todo = [i for i in inputs if i.segment.content_hash not in have]
    prose = SummaryProse.of(library, doc_id) if provider is None and todo else None
    counts = {"total": len(inputs), "skipped": len(inputs) - len(todo), "done": 0, "removed_tags": 0}
    lock = threading.Lock()

    def run(item: SegmentInput) -> None:
        if not item.tagged_text:  # nothing of the book in it (a contents page, a licence): nothing to summarise
            text, removed = "", 0
        elif provider is None:
            assert prose is not None
            text, removed = extractive_summary(item.tagged_text, prose), 0
        else:
            message = prompt.render(doc_title=doc.title, title_path=" › ".join(item.segment.title_path) or doc.title,
                                    max_words=SUMMARY_WORDS, tagged_text=item.tagged_text)
            reply = provider.complete([{"role": "user", "content": message}])
            text, removed = validate_summary(reply.content, item.tagged_text)
        library.store.put_summary(item.segment.content_hash, model, version, text, removed)
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
