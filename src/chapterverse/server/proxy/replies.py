"""An upstream's reply through the knowledge base's tag filter, in each API's format: the text filtered (tags
stripped or kept, ``--rag_tags``), the verified citations out of band. Each rewriter is ``relay.ReplyRewriter``.

Chat completions (:class:`CompletionRewriter`): a ``citations`` field on the chunk that carries
``finish_reason`` (or on a last chunk of its own when none did), and on a non-streamed completion. The Responses
API (:class:`ResponsesRewriter`): a ``citations`` field on the response object, in the non-streamed reply and in
the stream's ``response.completed`` event. Streamed, each ``response.output_text.delta`` carries the filtered
text (events whose text is all held back are left out, and ``sequence_number`` is renumbered so it stays
gapless), and the ``.done`` events and the final response carry the filtered text whole.
"""

from __future__ import annotations

import json
from typing import Any

from .grounding import Grounding

__all__ = ["CompletionRewriter", "ResponsesRewriter", "completion_event"]


def completion_event(chunk: dict[str, Any]) -> str:
    """One chat-completion chunk as an SSE event."""
    return f"data: {json.dumps(chunk, ensure_ascii=False)}\n\n"


# ------------------------------------------------------------------------------------ chat completions


class CompletionRewriter:
    """Rewrites an upstream's chat completion, whole or as its SSE stream line by line: filtered text, citations
    at the end."""

    def __init__(self, grounding: Grounding) -> None:
        self._grounding = grounding
        self._filter = grounding.reply_filter
        self._finished = False
        self.citations: list[dict[str, Any]] = []

    def whole(self, data: Any) -> bool:
        """Filter every choice's text (each against its own filter); the first choice's citations ride along."""
        for position, choice in enumerate(data.get("choices") or []):
            message = choice.get("message") if isinstance(choice, dict) else None
            if isinstance(message, dict) and isinstance(message.get("content"), str):
                own = self._filter if position == 0 else self._grounding.new_filter()
                message["content"] = own.whole(message["content"])
        self.citations = self._filter.citations()
        data["citations"] = self.citations
        self._grounding.log_citations(self.citations)
        return True

    def line(self, line: str) -> list[str]:
        if not line.strip():
            return []
        if not line.startswith("data:"):
            return [f"{line}\n\n"] if line.startswith(":") else [f"{line}\n"]
        payload = line[5:].strip()
        if payload == "[DONE]":
            return [*self.end(), "data: [DONE]\n\n"]
        try:
            chunk = json.loads(payload)
        except ValueError:
            return [f"{line}\n\n"]
        if not isinstance(chunk, dict):
            return [f"{line}\n\n"]
        return self._chunk(chunk)

    def _chunk(self, chunk: dict[str, Any]) -> list[str]:
        choices = chunk.get("choices") or []
        first = next((c for c in choices if isinstance(c, dict) and c.get("index", 0) == 0), None)
        if first is None:
            return [completion_event(chunk)]
        given = first.get("delta")
        delta: dict[str, Any] = given if isinstance(given, dict) else {}
        raw = delta.get("content")
        shown = self._filter.feed(raw) if isinstance(raw, str) else ""
        if first.get("finish_reason") is not None and not self._finished:
            shown += self._filter.flush()
            self._finish(chunk)
        if isinstance(raw, str):
            delta["content"] = shown
            only_text = set(delta) <= {"content"} and first.get("finish_reason") is None
            if not shown and raw and only_text and len(choices) == 1 and "citations" not in chunk:
                return []  # all of it is held back (part of a tag) or dropped
        elif shown:
            delta["content"] = shown
            first["delta"] = delta
        return [completion_event(chunk)]

    def _finish(self, chunk: dict[str, Any]) -> None:
        self._finished = True
        self.citations = self._filter.citations()
        chunk["citations"] = self.citations

    def end(self) -> list[str]:
        """The stream ended: what is still held back, and the citations, if no chunk carried them yet."""
        if self._finished:
            return []
        tail = self._filter.flush()
        chunk: dict[str, Any] = {"id": "chatcmpl-chapterverse", "object": "chat.completion.chunk", "created": 0,
                                 "model": "", "choices": [{"index": 0, "delta": {"content": tail} if tail else {},
                                                           "finish_reason": None}]}
        self._finish(chunk)
        return [completion_event(chunk)]

    def close(self) -> list[str]:
        """The upstream's stream ended (with ``[DONE]`` or without): :meth:`end`, and the citations logged."""
        out = self.end()
        self._grounding.log_citations(self.citations)
        return out

    def cut(self, notice: str) -> list[str]:
        """The stream was cut at the deadline: what is held back, the citations of what was shown, and
        ``finish_reason`` length with ``notice`` on the last chunk; then ``[DONE]``."""
        if self._finished:
            return ["data: [DONE]\n\n"]
        tail = self._filter.flush()
        chunk: dict[str, Any] = {"id": "chatcmpl-chapterverse", "object": "chat.completion.chunk", "created": 0,
                                 "model": "", "choices": [{"index": 0, "delta": {"content": tail} if tail else {},
                                                           "finish_reason": "length"}], "notice": notice}
        self._finish(chunk)
        self._grounding.log_citations(self.citations)
        return [completion_event(chunk), "data: [DONE]\n\n"]


# ----------------------------------------------------------------------------------------- Responses API


class ResponsesRewriter:
    """Rewrites an upstream's Responses API reply, whole or as its event stream: filtered text, citations on the
    response object (``response.completed`` when streamed).

    Events are read whole (``event:`` and ``data:`` lines up to a blank line); a ``data`` that is not a JSON
    object passes through untouched.
    """

    def __init__(self, grounding: Grounding) -> None:
        self._grounding = grounding
        self._filter = grounding.reply_filter
        self._lines: list[str] = []
        self._texts: dict[tuple[int, int], list[str]] = {}
        self._sequence = 0
        self._response: dict[str, Any] = {}
        """The response object as the stream's last event that carried one gave it (its id, its model)."""
        self.citations: list[dict[str, Any]] = []

    def whole(self, data: Any) -> bool:
        """Filter every ``output_text`` part of a response object; False when ``data`` is not one."""
        if not isinstance(data, dict):
            return False
        texts: dict[tuple[int, int], str] = {}
        for key, part in _text_parts(data):
            part["text"] = self._filter.whole(part["text"])
            texts[key] = part["text"]
        self._finish_response(data, texts)
        self._grounding.log_citations(self.citations)
        return True

    def line(self, line: str) -> list[str]:
        """Feed one line; the events (as SSE text) it completes."""
        if line.strip():
            self._lines.append(line)
            return []
        lines, self._lines = self._lines, []
        if not lines:
            return []
        data = "\n".join(part[5:].lstrip() for part in lines if part.startswith("data:"))
        try:
            event = json.loads(data) if data else None
        except ValueError:
            event = None
        if not isinstance(event, dict):
            return ["\n".join(lines) + "\n\n"]
        return [self._emit(e) for e in self._rewrite(event)]

    def close(self) -> list[str]:
        """The stream ended: the event still unfinished, and the citations logged."""
        out = self.line("")
        self._grounding.log_citations(self.citations)
        return out

    def cut(self, notice: str) -> list[str]:
        """The stream was cut at the deadline: the text held back, then ``response.incomplete`` with the text
        shown, its citations and ``notice``."""
        out: list[str] = []
        tail = self._filter.flush()
        key = max(self._texts, default=(0, 0))
        if tail:
            self._texts.setdefault(key, []).append(tail)
            out.append(self._emit({"type": "response.output_text.delta", "output_index": key[0],
                                   "content_index": key[1], "delta": tail, "logprobs": [], "sequence_number": 0}))
        response = {**self._response, "object": "response", "status": "incomplete",
                    "incomplete_details": {"reason": "max_output_tokens"}, "notice": notice,
                    "output": [{"type": "message", "role": "assistant", "status": "incomplete",
                                "content": [{"type": "output_text", "text": self._text(k), "annotations": []}
                                            for k in sorted(self._texts)]}]}
        response["output_text"] = "".join(self._text(k) for k in sorted(self._texts))
        self.citations = self._filter.citations()
        response["citations"] = self.citations
        self._grounding.log_citations(self.citations)
        out.append(self._emit({"type": "response.incomplete", "response": response, "sequence_number": 0}))
        return out

    def _emit(self, event: dict[str, Any]) -> str:
        if "sequence_number" in event:
            event["sequence_number"] = self._sequence
            self._sequence += 1
        return f"event: {event.get('type', 'message')}\ndata: {json.dumps(event, ensure_ascii=False)}\n\n"

    def _rewrite(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        kind = event.get("type")
        if isinstance(event.get("response"), dict):
            self._response = {k: v for k, v in event["response"].items() if k in ("id", "created_at", "model")}
        key = (_int(event.get("output_index")), _int(event.get("content_index")))
        if kind == "response.output_text.delta" and isinstance(event.get("delta"), str):
            shown = self._filter.feed(event["delta"])
            self._texts.setdefault(key, []).append(shown)
            return [{**event, "delta": shown}] if shown else []
        if kind == "response.output_text.done":
            tail = self._filter.flush()
            out: list[dict[str, Any]] = []
            if tail:
                self._texts.setdefault(key, []).append(tail)
                out.append({"type": "response.output_text.delta", "item_id": event.get("item_id"),
                            "output_index": key[0], "content_index": key[1], "delta": tail, "logprobs": [],
                            "sequence_number": 0})
            return [*out, {**event, "text": self._text(key)}]
        if kind == "response.content_part.done" and isinstance(event.get("part"), dict) \
                and event["part"].get("type") == "output_text":
            event["part"]["text"] = self._text(key)
        elif kind == "response.output_item.done" and isinstance(event.get("item"), dict):
            self._fill(event["item"], key[0])
        elif kind in ("response.completed", "response.incomplete") and isinstance(event.get("response"), dict):
            self._finish_response(event["response"], {k: "".join(v) for k, v in self._texts.items()})
        return [event]

    def _finish_response(self, response: dict[str, Any], texts: dict[tuple[int, int], str]) -> None:
        """Put the filtered texts into a response object, with the citations and a matching ``output_text``."""
        for key, part in _text_parts(response):
            if key in texts:
                part["text"] = texts[key]
        if isinstance(response.get("output_text"), str):
            response["output_text"] = "".join(part["text"] for _, part in _text_parts(response))
        self.citations = self._filter.citations()
        response["citations"] = self.citations

    def _text(self, key: tuple[int, int]) -> str:
        return "".join(self._texts.get(key, []))

    def _fill(self, item: dict[str, Any], output_index: int) -> None:
        content = item.get("content")
        for j, part in enumerate(content if isinstance(content, list) else []):
            if isinstance(part, dict) and part.get("type") == "output_text" and (output_index, j) in self._texts:
                part["text"] = self._text((output_index, j))


def _text_parts(response: dict[str, Any]) -> list[tuple[tuple[int, int], dict[str, Any]]]:
    """((output index, content index), part) of every ``output_text`` part of a response object."""
    found = []
    output = response.get("output")
    for i, item in enumerate(output if isinstance(output, list) else []):
        content = item.get("content") if isinstance(item, dict) else None
        for j, part in enumerate(content if isinstance(content, list) else []):
            if isinstance(part, dict) and part.get("type") == "output_text" and isinstance(part.get("text"), str):
                found.append(((i, j), part))
    return found


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
