"""The retrieve-inject-filter step both OpenAI-compatible routes take (``rag_mode=inject``), chat completions
and the Responses API alike.

Per request: retrieve with the last user message (condensed with the earlier turns when it leans on them:
``rewrite.py``, ``--rag_rewrite``); when a chunk clears the threshold, inject one context block
(``injection.py``); either way the reply goes through a :class:`injection.ReplyFilter` against the injected
evidence, which ``replies.py`` applies in each API's format. A retrieval failure is logged and the chat goes on
without context.

Retrieval reads at most ``--max_query_chars`` of the last user message (the message itself is forwarded
whole); when it read less, the answer says so in ``X-Chapterverse-Query-Truncated``.

The log says what happened (the chunks' sources, ids, scores and tags, counts, timings), never what people wrote
or read: questions, passages and answers hold customers' names and orders. ``--log_content`` adds each question
and the injected block (:func:`log_content`).
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from ... import Hit
from ...citations import Resolver, library_resolver
from .bounds import fitted_hits
from .injection import ReplyFilter, context_block, header_language, hits_summary, inject_context, last_user_text
from .relay import upstream_headers
from .rewrite import carry_query, llm_query
from ..state import ServerState
from ..upstream import Upstream

__all__ = ["TRUNCATED_HEADER", "Grounding", "ground", "next_turn", "log_content"]

log = logging.getLogger(__name__)
_turns = itertools.count(1)
TRUNCATED_HEADER = "X-Chapterverse-Query-Truncated"
"""Present (the characters retrieval read) when the last user message was longer than --max_query_chars."""


def next_turn() -> int:
    """The number the log's ``RAG turn N`` lines give the next request."""
    return next(_turns)


def log_content(state: ServerState, turn: int, what: str, text: str) -> None:
    """Log ``text`` (a question, an injected block) when ``--log_content`` asks for it; never otherwise."""
    if state.settings.log_content:
        log.info("RAG turn %d: %s:\n%s", turn, what, text)


@dataclass(frozen=True, slots=True)
class Grounding:
    """One turn's retrieval: the items with the context injected, and the filter the reply goes through."""

    turn: int
    items: list[Any]
    """The messages (or Responses input items) with the context block added; as given when nothing was found."""
    hits: list[Hit]
    reply_filter: ReplyFilter
    new_filter: Callable[[], ReplyFilter]
    """Another filter against the same evidence, for a reply's further choices (their citations are not reported)."""
    read: int | None
    """The characters of the last user message retrieval read, when it read less than the whole message."""

    def forwarded(self, body: dict[str, Any], field: str) -> dict[str, Any]:
        """The request with ``field`` (``messages``, ``input``) replaced by the injected items, when any were."""
        return {**body, field: self.items} if self.hits else body

    def mark(self, response: Response) -> None:
        """Tell the client, in ``X-Chapterverse-Query-Truncated``, when retrieval read part of its message."""
        if self.read is not None:
            response.headers[TRUNCATED_HEADER] = str(self.read)

    def log_citations(self, citations: list[dict[str, Any]]) -> None:
        """Log what the reply cites and which of its tags the filter removed."""
        if citations:
            log.info("RAG turn %d: reply cites %s", self.turn,
                     "; ".join(f"{c['source']}#c{c['chunk_index']} [{c['tag']}]" for c in citations))
        dropped = self.reply_filter.dropped
        if dropped:
            log.info("RAG turn %d: removed %d unverified tag(s): %s", self.turn, len(dropped),
                     ", ".join(f"{d['tag']} ({d['reason']})" for d in dropped))


async def ground(state: ServerState, items: list[Any], asked_model: object, upstream: Upstream, turn: int, *,
                 part_type: str = "text", room: int | None = None) -> Grounding | None:
    """Retrieve for the last user item of ``items`` and inject what clears the threshold; None when the server
    has no knowledge base (the request and its reply pass untouched). ``part_type`` names a content part added
    to a list content: ``text`` in chat completions, ``input_text`` in the Responses API. ``room`` is the most
    tokens the context block may take in the model's window (``bounds.py``), None when it is unknown."""
    if state.kb is None:
        return None
    found = last_user_text(items)
    hits: list[Hit] = []
    read = None
    if found is not None:
        index, text = found
        query = text[:state.settings.max_query_chars]
        retrieval = await _retrieval_query(state, items, asked_model, upstream, index, query)
        items, hits = await _inject(state, items, index, retrieval, turn, part_type=part_type, room=room)
        read = len(query) if len(query) < len(text) else None

    def new_filter() -> ReplyFilter:
        return ReplyFilter(hits, state.settings.rag_tags, _resolver(state))

    return Grounding(turn, items, hits, new_filter(), new_filter, read)


async def _retrieval_query(state: ServerState, messages: list[Any], asked_model: object, upstream: Upstream,
                           index: int, query: str) -> str:
    """What retrieval reads for the user turn at ``index`` of ``messages``: ``query`` condensed with the earlier
    turns as ``--rag_rewrite`` says (``rewrite.py``), at most ``--max_query_chars`` long. ``asked_model`` is the
    request's model, used by ``llm`` when no ``--llm_model`` replaces it."""
    mode = state.settings.rag_rewrite
    if mode == "off":
        return query
    if mode in ("llm", "hyde"):
        model = upstream.model or (str(asked_model) if asked_model else None)
        rewritten = await llm_query(state.http, f"{upstream.base_url}/chat/completions", upstream_headers(upstream),
                                    model, messages, index, query, state.settings.rag_rewrite_timeout_s,
                                    hypothetical=mode == "hyde")
        if rewritten:
            return rewritten[:state.settings.max_query_chars]
    return carry_query(messages, index, query)[:state.settings.max_query_chars]


async def _inject(state: ServerState, messages: list[Any], index: int, query: str, turn: int, *,
                  part_type: str, room: int | None) -> tuple[list[Any], list[Hit]]:
    """``messages`` with the context retrieved for ``query`` added to message ``index``, and the hits; the
    messages as they were (and no hits) when nothing clears the threshold or retrieval fails."""
    assert state.kb is not None
    settings = state.settings
    log_content(state, turn, "retrieval query", query)
    started = time.perf_counter()
    try:
        hits = await run_in_threadpool(state.kb.search, query, k=settings.rag_top_k, threshold=settings.rag_threshold)
    except Exception as exc:  # retrieval must never stop the conversation
        failure = f"{type(exc).__name__}: {exc}" if settings.log_content else type(exc).__name__  # may quote the query
        log.warning("RAG turn %d: retrieval failed, forwarding without context: %s", turn, failure)
        return messages, []
    searched = f"a query of {len(query)} chars in {(time.perf_counter() - started) * 1000:.0f} ms"
    if not hits:
        log.info("RAG turn %d: nothing above threshold %.2f for %s — forwarded untouched", turn,
                 settings.rag_threshold, searched)
        return messages, []
    language = header_language(settings.rag_language, query)
    hits = fitted_hits(hits, room, lambda kept: context_block(kept, language), turn)
    if not hits:
        return messages, []
    block = context_block(hits, language)
    injected = inject_context(messages, block, settings.rag_inject_as, index, part_type=part_type)
    log.info("RAG turn %d: injected %d chunks (%d chars) as %s for %s — %s", turn, len(hits), len(block),
             settings.rag_inject_as, searched, hits_summary(hits))
    log_content(state, turn, "injected context", block)
    return injected, hits


def _resolver(state: ServerState) -> Resolver:
    """Resolves a tag the reply cites against the knowledge base's library; None for one it does not hold."""
    assert state.kb is not None
    return library_resolver(state.kb.library)
