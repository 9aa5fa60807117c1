"""The cleaning and secret masking of a relayed SSE stream: every whole event, and the model's text across its
deltas.

Every text of the model's is cleaned (``scaffolding.TextCleaner``: chat-template tokens and chapterverse's own
headers removed), then masked: the one path every relayed stream
takes, so what the cleaner holds back (``<|im_``) is held, put in front of the next delta and given out when the
text ends exactly as what the masker holds. A Responses event that carries a whole text (``.done``,
``response.content_part.done``, ``response.output_item.done``, the final response object) gets it cleaned whole
(:func:`clean_response`), which reads as its deltas put together.

A model streams its text in small deltas, one event each (``{"choices": [{"delta": {"content": "sk-ab"}}]}``,
then ``"cd12"``; a Responses API ``response.output_text.delta`` with its ``delta``), so a key it echoes is cut
across events and no one event holds it whole. :class:`StreamMasker` reads the stream event by event (an event
ends at a blank line; nothing else is held back, so each goes out as soon as it is whole) and gives each text
its own ``redaction.TextMasker``: a chat choice's ``content``, ``refusal`` and reasoning fields (by the choice's
``index``), a Responses text part (by its item, output, content and summary index). A delta whose end could
begin a secret goes out without that end, which goes out in front of the same text's next delta; what is held
when a text ends goes out in the event that ends it (a chat choice's ``finish_reason``), just before it (a
Responses ``.done`` event, which then carries the whole text), or before the stream's end (``[DONE]``, an error
event, a Responses ``response.completed``, ``.incomplete`` or ``.failed``, or the last byte, the server's own
event for a broken upstream included, so a stream that breaks loses nothing). A delta event whose text is all
held back, and that carries nothing else, is left out (as ``replies.py`` leaves out one whose text is all part
of a tag). Only the texts of a changed event change; every other field, and every other event, goes out as it
came, masked whole by ``redaction.mask_secrets``. Responses events keep a gapless ``sequence_number``: an event
put in front of a ``.done`` takes the next one, and every later event's number moves up by one (down by one for
an event left out).

A tool call's ``arguments`` are a text of the stream too, masked (not cleaned: they are the model's JSON, not its
words) across their deltas the same way: a chat chunk's ``tool_calls[].function.arguments`` (by the choice's
``index`` and the call's), a Responses ``response.function_call_arguments.delta`` (by its item and output index).
What they hold goes out with the choice's ``finish_reason``, just before the Responses
``response.function_call_arguments.done`` (which carries the whole arguments), or before the stream's end. The
arguments are JSON text, so a key in them may be JSON-escaped, and escaped again where they are decoded once more;
``redaction.TextMasker`` holds back and masks every such form.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from ...redaction import TextMasker, any_secret, mask_secrets
from ...scaffolding import TextCleaner, clean_text

__all__ = ["StreamMasker", "clean_completion", "clean_response"]

_CHAT_TEXTS = ("content", "refusal", "reasoning_content", "reasoning")
"""The text fields of a chat-completion chunk's ``delta``: OpenAI's, and the reasoning of vLLM, DeepSeek and
Ollama."""
_RESPONSES_TEXTS = frozenset({"response.output_text", "response.refusal", "response.reasoning_text",
                              "response.reasoning_summary_text", "response.audio.transcript"})
"""The Responses API events whose ``.delta`` carries a piece of text (``response.audio.delta`` carries sound)."""
_RESPONSES_ARGUMENTS = frozenset({"response.function_call_arguments", "response.custom_tool_call_input"})
"""The Responses API events whose ``.delta`` carries a piece of a tool call's input: masked, never cleaned."""
_RESPONSES_DELTAS = _RESPONSES_TEXTS | _RESPONSES_ARGUMENTS
_PART = ("item_id", "output_index", "content_index", "summary_index")
"""What tells a Responses text part from another."""
_Key = tuple[str | int, ...]
"""A text of the stream: ``("chat", choice index, field)``, ``("tool_call", choice index, call index)``, or a
Responses text's kind and ``_PART``."""
_TOOL_CALL = "tool_call"
_Outcome = Literal["same", "changed", "held"]
"""What became of an event: sent as it came, sent changed, or left out (all its text held back)."""
_ENDS = frozenset({"error", "response.completed", "response.incomplete", "response.failed"})
"""Responses events after which no text comes."""


class _TextPipe:
    """One text of the model's, cleaned (unless it is a tool call's arguments) then masked as its pieces come."""

    def __init__(self, clean: bool) -> None:
        self._cleaner = TextCleaner() if clean else None
        self._masker = TextMasker()

    def feed(self, piece: str) -> str:
        return self._masker.feed(self._cleaner.feed(piece) if self._cleaner else piece)

    def flush(self) -> str:
        rest = self._masker.feed(self._cleaner.flush()) if self._cleaner else ""
        return rest + self._masker.flush()


@dataclass(slots=True)
class _Text:
    """One text of the stream being masked, and the event its last delta came in (for one that must be made)."""

    masker: _TextPipe
    lines: list[str]
    """The last delta event's lines other than ``data:`` (``event: ...``)."""
    event: dict[str, Any]


class StreamMasker:
    """An SSE byte stream, cut anywhere, with the model's texts cleaned and every registered secret masked:
    :meth:`feed` the bytes as they come, :meth:`flush` at the end; what each returns is whole events."""

    def __init__(self) -> None:
        self._buffer = b""
        self._texts: dict[_Key, _Text] = {}
        self._shift = 0
        self._last_number: int | None = None

    def feed(self, data: bytes) -> bytes:
        self._buffer += data
        out = []
        while (end := _event_end(self._buffer)) > 0:
            block, self._buffer = self._buffer[:end], self._buffer[end:]
            out.extend(self._event(block))
        return mask_secrets(b"".join(out))

    def flush(self) -> bytes:
        """The end of the stream: an unfinished last event, and every text still held."""
        block, self._buffer = self._buffer, b""
        out = self._event(block) if block else []
        held = self._flush_all()
        if held and out and not _event_end(out[-1]):  # the held text must not become part of that event
            out[-1] += b"\n" if out[-1].endswith(b"\n") else b"\n\n"
        return mask_secrets(b"".join([*out, *held]))

    # -------------------------------------------------------------------------------------------- events

    def _event(self, block: bytes) -> list[bytes]:
        """One event (its bytes up to and with the blank line): what goes out for it."""
        lines = [line.removesuffix("\r") for line in block.decode("utf-8", "replace").split("\n")]
        data = [line[5:].removeprefix(" ") for line in lines if line.startswith("data:")]
        payload = "\n".join(data)
        if payload.strip() == "[DONE]":
            return [*self._flush_all(), block]
        try:
            event = json.loads(payload) if data else None
        except ValueError:
            event = None
        if not isinstance(event, dict):
            return [block]
        others = [line for line in lines if line and not line.startswith("data:")]
        before, outcome = self._rewrite(event, others)
        numbered = isinstance(event.get("sequence_number"), int) and not isinstance(event["sequence_number"], bool)
        if outcome == "held":
            self._shift -= 1 if numbered else 0
            return before
        if numbered and self._renumber(event):
            outcome = "changed"
        return [*before, _written(others, event) if outcome == "changed" else block]

    def _rewrite(self, event: dict[str, Any], others: list[str]) -> tuple[list[bytes], _Outcome]:
        """Mask ``event``'s texts in place: the events to send before it, and what became of it."""
        if isinstance(event.get("choices"), list):
            return [], self._chat(event, others)
        kind = event.get("type")
        if isinstance(kind, str) and kind.endswith(".delta") and kind[:-6] in _RESPONSES_DELTAS \
                and isinstance(event.get("delta"), str):
            given = event["delta"]
            event["delta"] = self._text(_part(kind[:-6], event), others, event).masker.feed(given)
            return [], "same" if event["delta"] == given else "changed" if event["delta"] else "held"
        if isinstance(kind, str) and kind.endswith(".done") and kind[:-5] in _RESPONSES_ARGUMENTS:
            return self._flush(_part(kind[:-5], event)), "same"
        if isinstance(kind, str) and kind.endswith(".done") and kind[:-5] in _RESPONSES_TEXTS:
            return self._flush(_part(kind[:-5], event)), _same_or_changed(_clean_fields(event))
        if kind in _ENDS or "error" in event:
            before = self._flush_all()
            return before, _same_or_changed(isinstance(event.get("response"), dict)
                                            and clean_response(event["response"]))
        if kind == "response.content_part.done" and isinstance(event.get("part"), dict):
            return [], _same_or_changed(_clean_fields(event["part"]))
        if kind == "response.output_item.done" and isinstance(event.get("item"), dict):
            return [], _same_or_changed(_clean_item(event["item"]))
        return [], "same"

    def _chat(self, chunk: dict[str, Any], others: list[str]) -> _Outcome:
        """Mask a chat-completion chunk's texts in place; what became of it."""
        changed = False
        for choice in chunk["choices"]:
            if isinstance(choice, dict):
                changed |= self._choice(choice, chunk, others)
        if not changed:
            return "same"
        return "held" if _carries_nothing(chunk) else "changed"

    def _choice(self, choice: dict[str, Any], chunk: dict[str, Any], others: list[str]) -> bool:
        """Mask one choice's texts in place, what each held put in the chunk that finishes the choice."""
        given_delta = choice.get("delta")
        delta: dict[str, Any] = given_delta if isinstance(given_delta, dict) else {}
        finished = choice.get("finish_reason") is not None
        changed = False
        for name in _CHAT_TEXTS:
            key: _Key = ("chat", _int(choice.get("index")), name)
            given = delta.get(name)
            shown = self._text(key, others, chunk).masker.feed(given) if isinstance(given, str) else given
            if finished and key in self._texts:
                shown = (shown or "") + self._texts.pop(key).masker.flush()
            if shown != given and (shown or isinstance(given, str)):
                delta[name] = shown
                choice["delta"] = delta
                changed = True
        return self._tool_calls(choice, delta, chunk, others) or changed

    def _tool_calls(self, choice: dict[str, Any], delta: dict[str, Any], chunk: dict[str, Any],
                    others: list[str]) -> bool:
        """Mask one choice's tool-call arguments in place, what each held put in the chunk that finishes the
        choice; whether one changed."""
        index = _int(choice.get("index"))
        calls = delta.get("tool_calls")
        changed = False
        for call in calls if isinstance(calls, list) else []:
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict) and isinstance(function.get("arguments"), str):
                key: _Key = (_TOOL_CALL, index, _int(call.get("index")))
                given = function["arguments"]
                function["arguments"] = self._text(key, others, chunk).masker.feed(given)
                changed |= function["arguments"] != given
        if choice.get("finish_reason") is None:
            return changed
        for key in [key for key in self._texts if key[0] == _TOOL_CALL and key[1] == index]:
            held = self._texts.pop(key).masker.flush()
            if held:
                _add_arguments(delta, int(key[2]), held)
                choice["delta"] = delta
                changed = True
        return changed

    # --------------------------------------------------------------------------------------------- texts

    def _text(self, key: _Key, others: list[str], event: dict[str, Any]) -> _Text:
        """The text ``key``, its last delta now ``event``."""
        text = self._texts.get(key)
        if text is None:
            clean = key[0] != _TOOL_CALL and key[0] not in _RESPONSES_ARGUMENTS
            text = self._texts[key] = _Text(_TextPipe(clean), others, event)
        text.lines, text.event = others, event
        return text

    def _flush(self, key: _Key) -> list[bytes]:
        """The text ``key`` ended: an event with what it held, if anything."""
        text = self._texts.pop(key, None)
        held = text.masker.flush() if text else ""
        if text is None or not held:
            return []
        if key[0] in ("chat", _TOOL_CALL):
            head = {k: v for k, v in text.event.items() if k not in ("choices", "usage", "citations")}
            delta = {str(key[2]): held} if key[0] == "chat" else \
                {"tool_calls": [{"index": key[2], "function": {"arguments": held}}]}
            return [_written(text.lines, {**head, "choices": [{"index": key[1], "delta": delta,
                                                                "finish_reason": None}]})]
        event = {**text.event, "delta": held}
        if "logprobs" in event:
            event["logprobs"] = []
        if "sequence_number" in event:
            self._shift += 1
            event["sequence_number"] = self._last_number = (self._last_number if self._last_number is not None
                                                            else -1) + 1
        return [_written(text.lines, event)]

    def _flush_all(self) -> list[bytes]:
        return [out for key in list(self._texts) for out in self._flush(key)]

    def _renumber(self, event: dict[str, Any]) -> bool:
        """Move ``event``'s ``sequence_number`` past the events put in before it; whether it changed."""
        event["sequence_number"] = self._last_number = event["sequence_number"] + self._shift
        return self._shift != 0


def _same_or_changed(changed: bool) -> _Outcome:
    return "changed" if changed else "same"


_WHOLE_TEXTS = ("text", "refusal", "transcript")
"""The fields of a Responses part, or of a ``.done`` event, that carry a whole text of the model's."""


def _clean_fields(part: dict[str, Any]) -> bool:
    """Clean the whole texts of a Responses part or ``.done`` event in place; whether one changed."""
    changed = False
    for name in _WHOLE_TEXTS:
        given = part.get(name)
        if isinstance(given, str):
            part[name] = clean_text(given)
            changed |= part[name] != given
    return changed


def _clean_item(item: dict[str, Any]) -> bool:
    """Clean every text part of a Responses output item (a message's content, a reasoning's summary) in place."""
    changed = False
    for field in ("content", "summary"):
        parts = item.get(field)
        for part in parts if isinstance(parts, list) else []:
            if isinstance(part, dict):
                changed |= _clean_fields(part)
    return changed


def clean_response(response: dict[str, Any]) -> bool:
    """Clean a Responses API response object's texts in place (its output items, ``output_text``); whether one
    changed."""
    changed = False
    output = response.get("output")
    for item in output if isinstance(output, list) else []:
        if isinstance(item, dict):
            changed |= _clean_item(item)
    given = response.get("output_text")
    if isinstance(given, str):
        response["output_text"] = clean_text(given)
        changed |= response["output_text"] != given
    return changed


def clean_completion(completion: dict[str, Any]) -> bool:
    """Clean a chat completion's texts in place (every choice's message); whether one changed."""
    changed = False
    choices = completion.get("choices")
    for choice in choices if isinstance(choices, list) else []:
        message = choice.get("message") if isinstance(choice, dict) else None
        if not isinstance(message, dict):
            continue
        for name in _CHAT_TEXTS:
            given = message.get(name)
            if isinstance(given, str):
                message[name] = clean_text(given)
                changed |= message[name] != given
    return changed


def _add_arguments(delta: dict[str, Any], call: int, arguments: str) -> None:
    """Put ``arguments`` at the end of tool call ``call``'s in a chat chunk's ``delta`` (a client joins a call's
    arguments by its index)."""
    calls = delta.get("tool_calls")
    if not isinstance(calls, list):
        calls = delta["tool_calls"] = []
    for given in calls:
        function = given.get("function") if isinstance(given, dict) else None
        if _int(given.get("index") if isinstance(given, dict) else None) == call and isinstance(function, dict) \
                and isinstance(function.get("arguments"), str):
            function["arguments"] += arguments
            return
    calls.append({"index": call, "function": {"arguments": arguments}})


def _carries_nothing(chunk: dict[str, Any]) -> bool:
    """Whether a chat chunk whose text was held back carries nothing else (it is left out, as ``replies.py``
    leaves out one whose text is all part of a tag)."""
    if chunk.get("usage") or "citations" in chunk or not chunk["choices"]:
        return False
    for choice in chunk["choices"]:
        delta = choice.get("delta") if isinstance(choice, dict) else None
        if not isinstance(delta, dict) or choice.get("finish_reason") is not None or choice.get("logprobs") \
                or any(name not in _CHAT_TEXTS or text for name, text in delta.items()):
            return False
    return True


def _event_end(buffer: bytes) -> int:
    """Where the first whole event of ``buffer`` ends (after its blank line); 0 when none is whole yet."""
    start = 0
    while (end := buffer.find(b"\n", start)) >= 0:
        if buffer[start:end] in (b"", b"\r"):
            return end + 1
        start = end + 1
    return 0


def _part(kind: str, event: dict[str, Any]) -> _Key:
    return (kind, *(str(event.get(field)) for field in _PART))


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _written(lines: list[str], event: dict[str, Any]) -> bytes:
    """An event as SSE: ``lines`` (``event: ...``), then its data on one line."""
    return "".join(f"{line}\n" for line in [*lines, f"data: {json.dumps(event, ensure_ascii=False)}"]).encode() + b"\n"
