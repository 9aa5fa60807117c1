"""The retrieval tools the model calls. Every tool returns tagged *source text* (or tagged summaries),
and everything a tool returns is recorded as this turn's evidence, the only tags an answer may keep.

None of these tools writes anything: a document that talks the model into calling tools can at
most make it read more of the same library.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from ..analysis import AnalysedQuery, query_terms
from ..citations import Evidence
from ..library import Library
from ..chunking import tagged_text
from ..positions import Span, find_tags, paragraph_spans
from ..scaffolding import EXCERPTS_HEADER, NO_PASSAGES, NO_ROOM, NO_SEGMENTS, SOURCE_TEXT_HEADER
from ..search.retrieval import Hit
from .client import ChatProvider
from .limits import Deadline
from .prompts import count_tokens, load_prompt
from .selection import SelectionParseError, parse_selection
from .summaries import EXTRACTIVE_MODEL, segment_inputs, summary_version

__all__ = ["ToolBox", "ToolSettings", "TOOL_SCHEMAS", "NOTHING_FOUND", "NO_ROOM"]

log = logging.getLogger(__name__)
NOTHING_FOUND = NO_SEGMENTS


@dataclass(frozen=True, slots=True)
class ToolSettings:
    batch_tokens: int = 30_000
    max_batches: int = 5
    max_selected: int = 5
    context_tokens: int = 12_000
    """Budget for the source text one tool call returns."""
    search_k: int = 8


def _function(name: str, description: str, properties: dict[str, Any] | None = None) -> dict[str, Any]:
    params = {"type": "object", "properties": properties or {}, "required": list(properties or {})}
    return {"type": "function", "function": {"name": name, "description": description, "parameters": params}}


TOOL_SCHEMAS = [
    _function("search_passages", "Search the document for passages (hybrid keyword + meaning search). Best for "
              "specific facts, names, numbers and quotes. Returns source text with position tags.",
              {"query": {"type": "string", "description": "What to look for, in words likely to be in the text."}}),
    _function("get_related_segment_summaries", "Find the parts of the document most related to a question by "
              "reading summaries of all parts, and return the full source text of the chosen parts with position "
              "tags. Best for questions about plot, characters, themes or anything spread over chapters.",
              {"question": {"type": "string", "description": "The reader's question."}}),
    _function("get_full_book_segment_summaries", "Return summaries of every part of the document in reading "
              "order, with position tags. Only for questions about the whole document."),
]


@dataclass(slots=True)
class ToolCallRecord:
    name: str
    arguments: dict[str, Any]


@dataclass
class ToolBox:
    """Executes tool calls for one turn over one document, recording evidence as it goes."""

    library: Library
    doc_id: int | None
    evidence: Evidence
    selector: ChatProvider | None = None
    summary_model: str = EXTRACTIVE_MODEL
    settings: ToolSettings = field(default_factory=ToolSettings)
    calls: list[ToolCallRecord] = field(default_factory=list)
    context_tokens: int = 0
    room_tokens: int | None = None
    """What the model's window leaves for one call's result (cl100k tokens); None: only the settings limit it."""
    deadline: Deadline | None = None
    """The turn's deadline, which the selector's requests keep to."""
    asked: AnalysedQuery | None = None
    """The turn's question, read once: a search for its very words (the forced search's, or the model's when it
    searches with the question as asked) takes this reading instead of reading them again."""

    @property
    def budget(self) -> int:
        """The most tokens of source text one call may return."""
        limit = self.settings.context_tokens
        return limit if self.room_tokens is None else max(0, min(limit, self.room_tokens))

    def execute(self, name: str, raw_arguments: str) -> str:
        """Run one tool call; bad arguments or unknown tools come back as a message the model can act on."""
        try:
            arguments = json.loads(raw_arguments or "{}")
            if not isinstance(arguments, dict):
                raise ValueError("arguments must be a JSON object")
        except ValueError as exc:
            return f"Error: the arguments were not valid JSON ({exc}). Call {name} again with a JSON object."
        self.calls.append(ToolCallRecord(name, arguments))
        handlers: dict[str, Callable[..., str]] = {
            "search_passages": self.search_passages,
            "get_related_segment_summaries": self.get_related_segment_summaries,
            "get_full_book_segment_summaries": self.get_full_book_segment_summaries,
        }
        handler = handlers.get(name)
        if handler is None:
            return f"Error: unknown tool {name!r}; available: {', '.join(handlers)}."
        try:
            result = handler(**arguments)
        except TypeError as exc:
            return f"Error: wrong arguments for {name}: {exc}."
        self.evidence.add_text(result)
        self.context_tokens += count_tokens(result)
        return result

    # -- tools --------------------------------------------------------------------------------
    def search_passages(self, query: str) -> str:
        hits = self._search(str(query), self.settings.search_k)
        return self._format_hits(hits) if hits else NO_PASSAGES


    def get_related_segment_summaries(self, question: str) -> str:
        question = str(question)
        chosen = self._select_segments(question)
        if chosen:
            text = self._budgeted(question, [seg.tagged_text for seg in chosen])
            if text:
                return text
        hits = self._search(question, self.settings.search_k)
        return self._format_hits(hits) if hits else NOTHING_FOUND

    def get_full_book_segment_summaries(self) -> str:
        parts, used, total = [], 0, 0
        for doc_id in self._doc_ids():
            for seg, summary in self._summaries(doc_id):
                total += 1
                entry = f"## {' › '.join(seg.segment.title_path) or 'Part'} (part {seg.segment.id})\n{summary}"
                cost = count_tokens(entry)
                if used + cost > self.budget:
                    continue
                parts.append(entry)
                used += cost
        if not parts:
            return NOTHING_FOUND
        notice = "" if len(parts) == total else (
            f"\n\n(Notice: truncated — {len(parts)} of {total} part summaries shown to fit the context budget.)")
        return "\n\n".join(parts) + notice

    # -- helpers ------------------------------------------------------------------------------
    def _doc_ids(self) -> list[int]:
        return [self.doc_id] if self.doc_id is not None else [d.id for d in self.library.documents()]

    def _read(self, text: str) -> str | AnalysedQuery:
        """:attr:`asked` when ``text`` is the question's very words, else ``text`` (read where it is searched)."""
        return self.asked if self.asked is not None and self.asked.text == text else text

    def _search(self, query: str, k: int) -> list[Hit]:
        return self.library.search(self._read(query), k=k, doc_ids=[self.doc_id] if self.doc_id is not None else None)

    def _format_hits(self, hits: Sequence[Hit]) -> str:
        """Each passage with a tag after every paragraph, so a citation can name the paragraph that says it; as
        many passages, best first, as the budget holds (of the first that does not fit whole, its leading
        paragraphs that do)."""
        heading = f"{SOURCE_TEXT_HEADER}\n\n"
        blocks: list[str] = []
        used = count_tokens(heading)
        for i, hit in enumerate(hits, start=1):
            where = " › ".join(hit.chunk.title_path) or hit.doc_title
            chunk = hit.chunk
            paragraphs = [(Span(chunk.file_id, chunk.start + a, chunk.start + b), hit.text[a:b])
                          for a, b in paragraph_spans(hit.text)]
            while paragraphs:
                block = f"[{i}] {hit.doc_title} — {where}\n{tagged_text(paragraphs)}"
                cost = count_tokens(block) + 2
                if used + cost <= self.budget:
                    break
                paragraphs.pop()
            if not paragraphs:
                break
            blocks.append(block)
            used += cost
        return heading + "\n\n".join(blocks) if blocks else NO_ROOM

    def _summaries(self, doc_id: int) -> list[tuple[Any, str]]:
        inputs = segment_inputs(self.library, doc_id)
        stored = self.library.store.summaries([i.segment.content_hash for i in inputs], self.summary_model,
                                              summary_version(self.summary_model))
        return [(i, stored[i.segment.content_hash]) for i in inputs if i.segment.content_hash in stored]

    def _select_segments(self, question: str) -> list[Any]:
        """Ask the selector, batch by batch in parallel, which parts answer the question."""
        pairs = [p for d in self._doc_ids() for p in self._summaries(d)]
        if not pairs or self.selector is None:
            return []
        by_id = {str(seg.segment.id): seg for seg, _ in pairs}
        batches: list[list[str]] = [[]]
        used = 0
        for seg, summary in pairs:
            entry = f"[{seg.segment.id}] {' › '.join(seg.segment.title_path)}\n{summary}"
            cost = count_tokens(entry)
            if batches[-1] and used + cost > self.settings.batch_tokens:
                if len(batches) == self.settings.max_batches:
                    break
                batches.append([])
                used = 0
            batches[-1].append(entry)
            used += cost
        title = self.library.document(self.doc_id).title if self.doc_id is not None else "the library"
        with ThreadPoolExecutor(max_workers=len(batches)) as pool:
            picks = list(pool.map(lambda b: self._select_batch(question, title, b, list(by_id)), batches))
        chosen_ids = list(dict.fromkeys(i for pick in picks for i in pick))[: self.settings.max_selected]
        return [by_id[i] for i in chosen_ids]

    def _select_batch(self, question: str, title: str, entries: list[str], valid: list[str]) -> list[str]:
        prompt = load_prompt("select_segments").render(doc_title=title, max_ids=self.settings.max_selected,
                                                       question=question, summaries="\n\n".join(entries))
        messages: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
        assert self.selector is not None
        for attempt in range(2):
            reply = self.selector.complete(messages, deadline=self.deadline).content
            try:
                return parse_selection(reply, valid_ids=valid, max_ids=self.settings.max_selected).ids
            except SelectionParseError as exc:
                if attempt == 1:
                    log.warning("segment selection unparseable twice: %s", exc)
                    return []
                messages += [{"role": "assistant", "content": reply}, {"role": "user", "content": str(exc)}]
        return []

    def _budgeted(self, question: str, tagged_texts: Sequence[str]) -> str:
        """Whole chosen segments when they fit; else their paragraphs most related to the question."""
        whole = "\n\n".join(tagged_texts)
        if count_tokens(whole) <= self.budget:
            return f"{SOURCE_TEXT_HEADER}\n\n{whole}" if whole else ""
        languages = self.library.store.languages()
        asked = self._read(question)
        terms = set(asked.terms if isinstance(asked, AnalysedQuery) else query_terms(question, languages))
        paragraphs = [p for text in tagged_texts for p in text.split("\n\n") if find_tags(p)]
        ranked = sorted(range(len(paragraphs)),
                        key=lambda i: -len(terms & set(query_terms(paragraphs[i], languages))))
        keep, used = set(), 0
        for i in ranked:
            cost = count_tokens(paragraphs[i])
            if used + cost > self.budget:
                continue
            keep.add(i)
            used += cost
        text = "\n\n".join(paragraphs[i] for i in sorted(keep))
        return f"{EXCERPTS_HEADER}\n\n{text}" if text else ""
