"""``rag_mode=tools``: ``/v1/chat/completions`` answered by chapterverse's own tool loop
(``answering.answer_events``) on the upstream model, streamed (or not) in the chat-completion format.

The answer's verified citations ride out of band as in inject mode: a ``citations`` field on the last chunk (or
on the completion). With ``--rag_tags strip`` the answer's text loses its tags; every event is masked of the
configured secrets (``relay.relayed_events``).

The turn keeps to ``--llm_deadline_s`` and the client's ``max_tokens`` (capped by ``--llm_max_tokens``): an answer
cut at the deadline ends with ``finish_reason`` length, and the answer's notice (cut, or answered extractively
because the model could not) rides on the last chunk (or the completion) as ``notice``.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from ... import AnswerResult, Library
from ...citations import Evidence, StreamingTagFilter
from ...errors import ChapterverseError
from ...answering import AnswerDelta, AnswerDone, answer_events
from ...answering.model_turn import AgentSettings
from ...llm.provider_config import ProviderConfig
from ..errors import ApiError, error_body
from .grounding import log_content
from .injection import content_text, last_user_text
from ..limits import check_length
from .relay import relayed_events, relayed_json
from .replies import completion_event
from ..state import ServerState
from ..upstream import Upstream

__all__ = ["tools_turn"]

log = logging.getLogger(__name__)


async def tools_turn(state: ServerState, body: dict[str, Any], upstream: Upstream, turn: int,
                     max_tokens: int) -> Response:
    """Answer with the tool loop on the upstream model, shaped as a chat completion; each of its requests may
    write ``max_tokens``."""
    assert state.kb is not None
    found = last_user_text(body["messages"])
    if found is None:
        raise ApiError(400, "BAD_INPUT", "no user message to answer")
    provider = upstream.provider(model=str(body.get("model") or "") or None)
    if provider is None:
        raise ApiError(503, "NO_UPSTREAM", "rag_mode tools needs an upstream model (--llm_model)")
    provider = replace(provider, max_tokens=max_tokens)
    index, question = found
    check_length("the question", question, state.settings.max_question_chars, "--max_question_chars")
    answer = _ToolAnswer(state.kb.library, question, _history(body["messages"][:index]), provider,
                         strip=state.settings.rag_tags == "strip", turn=turn)
    log.info("RAG turn %d: answering a question of %d chars with the tool loop on %s", turn, len(question),
             provider.model)
    log_content(state, turn, "question", question)
    if body.get("stream"):
        return relayed_events(answer.stream())
    return relayed_json(await run_in_threadpool(answer.completion), clean=True)


def _history(earlier: list[Any]) -> list[dict[str, str]]:
    """The user and assistant turns before the question, as text."""
    return [{"role": m["role"], "content": content_text(m.get("content"))} for m in earlier
            if isinstance(m, dict) and m.get("role") in ("user", "assistant") and content_text(m.get("content"))]


def _citation_dicts(result: AnswerResult) -> list[dict[str, Any]]:
    """The answer's citations as the completion's ``citations`` field carries them: the one citation type's
    JSON, as every front end sends it."""
    return [c.to_json() for c in result.citations]


class _ToolAnswer:
    """One question answered by the tool loop, as a chat completion or its chunks (blocking: run in a thread)."""

    def __init__(self, library: Library, question: str, history: list[dict[str, str]], provider: ProviderConfig,
                 *, strip: bool, turn: int) -> None:
        self._library = library
        self._question = question
        self._history = history
        self._provider = provider
        self._strip = strip
        self._turn = turn
        self._id = f"chatcmpl-cv-{turn}"
        self._created = int(time.time())

    def _events(self) -> Iterator[tuple[str, Any]]:
        """``("text", str)`` as the answer's text arrives (tags stripped when asked), then ``("done", result)``."""
        scanner = StreamingTagFilter(Evidence(resolve=lambda _: None), mode="strip") if self._strip else None
        for event in answer_events(self._library, self._question, provider=self._provider, history=self._history,
                                   settings=AgentSettings(auto_summarize=False)):
            if isinstance(event, AnswerDelta):
                text = scanner.feed(event.text) if scanner else event.text
                if text:
                    yield "text", text
            elif isinstance(event, AnswerDone):
                tail = scanner.flush() if scanner else ""
                if tail:
                    yield "text", tail
                yield "done", event.result

    def _citations(self, result: AnswerResult) -> list[dict[str, Any]]:
        cited = _citation_dicts(result)
        if cited:
            log.info("RAG turn %d: reply cites %s", self._turn,
                     "; ".join(f"{c['source']} [{c['tag']}]" for c in cited))
        return cited

    def _chunk(self, delta: dict[str, Any], finish: str | None = None, **extra: Any) -> str:
        return completion_event({"id": self._id, "object": "chat.completion.chunk", "created": self._created,
                                 "model": self._provider.model,
                                 "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra})

    def stream(self) -> Iterator[str]:
        """The answer as SSE chunks, ``citations`` on the last; a failed loop ends with an error event."""
        yield self._chunk({"role": "assistant", "content": ""})
        try:
            for kind, value in self._events():
                if kind == "text":
                    yield self._chunk({"content": value})
                else:
                    yield self._chunk({}, _finish(value), citations=self._citations(value), **_notice(value))
        except ChapterverseError as exc:
            log.warning("RAG turn %d: tool loop failed: %s", self._turn, exc)
            yield f"data: {json.dumps(error_body('ANSWER_FAILED', str(exc), openai=True))}\n\n"
        yield "data: [DONE]\n\n"

    def completion(self) -> dict[str, Any]:
        """The whole answer as one chat completion."""
        parts, result = [], None
        for kind, value in self._events():
            if kind == "text":
                parts.append(value)
            else:
                result = value
        usage = result.usage if result is not None else {}
        return {"id": self._id, "object": "chat.completion", "created": self._created, "model": self._provider.model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "".join(parts)},
                             "finish_reason": _finish(result) if result is not None else "stop"}],
                "usage": {"prompt_tokens": usage.get("prompt_tokens", 0),
                          "completion_tokens": usage.get("completion_tokens", 0),
                          "total_tokens": usage.get("prompt_tokens", 0) + usage.get("completion_tokens", 0)},
                "citations": self._citations(result) if result is not None else [],
                **(_notice(result) if result is not None else {})}


def _finish(result: AnswerResult) -> str:
    """``length`` for an answer cut at the deadline, else ``stop``."""
    return "length" if result.metadata.get("stopped") == "deadline" else "stop"


def _notice(result: AnswerResult) -> dict[str, str]:
    """The answer's notice as a ``notice`` field, when it has one."""
    return {"notice": result.notice} if result.notice else {}
