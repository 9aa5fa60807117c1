"""Parse a model's segment-selection reply: ``{"Thinking": "...", "answer": ["3", "7"]}``.

Models asked for JSON still wrap it in code fences and prose, use single quotes, leave trailing
commas, write ids as numbers or as one comma-separated string, and capitalise keys at will. All of
that is recoverable without guessing, so it is recovered; anything else raises
``SelectionParseError`` whose message is short enough to send back to the model for a retry.
"""

from __future__ import annotations

import ast
import json
import re
import warnings
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from typing import Any

from ..threadsafe_ast import AST_LOCK

__all__ = ["Selection", "SelectionParseError", "parse_selection"]

_HINT = 'Reply with only {"Thinking": "...", "answer": ["<id>", ...]}.'
_MAX_CANDIDATES = 20
_CLOSER = {"{": "}", "[": "]"}
_COMPLETE_VALUE_END = frozenset("\"']}")
_TRAILING_COMMA = re.compile(r",\s*([}\]])")
_BARE_KEY = re.compile(r"([{,]\s*)([A-Za-z_]\w*)\s*:")
_ANSWER_LIST = re.compile(r"""["']?answer["']?\s*:\s*(\[[^\[\]{}]*\])""", re.IGNORECASE)
_ID_SEPARATORS = re.compile(r"[,;\s]+")
_MISSING = object()


class SelectionParseError(ValueError):
    """The reply holds no usable selection; the message is meant for the model's retry."""


@dataclass(frozen=True, slots=True)
class Selection:
    """The model's reasoning and the ids it chose (valid ones, capped) and the ones it made up."""

    thinking: str
    ids: list[str]
    invalid_ids: list[str]


def _balanced(text: str, start: int) -> str | None:
    """The bracket-balanced object starting at ``text[start]``, or None.

    An object left open after a complete string, list or object (a forgotten final brace) is closed;
    one cut off inside a string or number is not, since its last id may be incomplete.
    """
    stack: list[str] = []
    quote = ""
    escaped = False
    for i in range(start, len(text)):
        char = text[i]
        if quote:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == quote:
                quote = ""
        elif char in "\"'":
            quote = char
        elif char in _CLOSER:
            stack.append(_CLOSER[char])
        elif char in "}]":
            if not stack or stack.pop() != char:
                return None
            if not stack:
                return text[start : i + 1]
    tail = text[start:].rstrip()
    return tail + "".join(reversed(stack)) if not quote and tail[-1] in _COMPLETE_VALUE_END else None


def _candidates(reply: str) -> Iterator[str]:
    start = reply.find("{")
    for _ in range(_MAX_CANDIDATES):
        if start < 0:
            return
        candidate = _balanced(reply, start)
        if candidate is not None:
            yield candidate
        start = reply.find("{", start + 1)


def _python_literal(text: str) -> Any:
    """Single-quoted strings and trailing commas are valid Python literals; this never executes code."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            with AST_LOCK:
                return ast.literal_eval(text)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            return None


def _loads(candidate: str) -> Any:
    """JSON, then JSON without trailing commas, then a Python literal, then JSON with keys quoted."""
    without_commas = _TRAILING_COMMA.sub(r"\1", candidate)
    error: json.JSONDecodeError | None = None
    for text in (candidate, without_commas):
        try:
            return json.loads(text, strict=False)
        except json.JSONDecodeError as exc:
            error = error or exc
    value = _python_literal(candidate)
    if isinstance(value, dict):
        return value
    try:
        return json.loads(_BARE_KEY.sub(r'\1"\2":', without_commas), strict=False)
    except json.JSONDecodeError:
        assert error is not None
        raise error from None


def _first_object(reply: str) -> dict[Any, Any]:
    """The first object in the reply that has an answer key, else the first object at all.

    When no object parses (typically an unescaped quote inside "Thinking"), a plain
    ``"answer": [...]`` list is still taken, without the thinking.
    """
    objects: list[dict[Any, Any]] = []
    reason = "the JSON object is not closed" if "{" in reply else "no JSON object found"
    for candidate in _candidates(reply):
        try:
            value = _loads(candidate)
        except (json.JSONDecodeError, RecursionError) as exc:
            reason = str(exc)
            continue
        if isinstance(value, dict):
            if _field(value, "answer", "answers") is not _MISSING:
                return value
            objects.append(value)
    if objects:
        return objects[0]
    salvaged = _ANSWER_LIST.search(reply)
    if salvaged and isinstance(answer := _python_literal(salvaged.group(1)), list):
        return {"answer": answer}
    raise SelectionParseError(f"Your reply was not valid JSON: {reason}. {_HINT}")


def _field(obj: dict[Any, Any], *names: str) -> Any:
    """A value by key, ignoring case and surrounding spaces (``Answer``, ``"thinking "``)."""
    return next((v for k, v in obj.items() if isinstance(k, str) and k.strip().casefold() in names), _MISSING)


def _split_ids(item: str | int | float) -> list[str]:
    """``3`` -> ``["3"]``, ``3.0`` -> ``["3"]``, ``"3, 7"`` or ``"[3 7]"`` -> ``["3", "7"]``."""
    if isinstance(item, float) and item.is_integer():
        item = int(item)
    pieces = _ID_SEPARATORS.split(str(item).strip())
    return [p for p in (piece.strip("\"'[]()#") for piece in pieces) if p]


def _ids(answer: Any) -> list[str]:
    if answer is None:
        return []
    items = answer if isinstance(answer, (list, tuple)) else [answer]
    ids: list[str] = []
    for item in items:
        if isinstance(item, bool) or not isinstance(item, (str, int, float)):
            raise SelectionParseError(f'"answer" must list ids as strings, got {str(item)[:40]!r}. {_HINT}')
        ids.extend(_split_ids(item))
    return list(dict.fromkeys(ids))


def _thinking(value: Any) -> str:
    if value is _MISSING or value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def parse_selection(reply: str, *, valid_ids: Collection[str] | None = None, max_ids: int = 5) -> Selection:
    """Read the first JSON object of a selection reply, tolerating what models commonly get wrong.

    Ids are strings, deduplicated in order. Ids outside ``valid_ids`` (when given) go to
    ``invalid_ids`` and do not count towards ``max_ids``; valid ones beyond it are dropped.
    An ``answer`` of null or ``[]`` is a valid empty selection.
    """
    if max_ids < 0:
        raise ValueError(f"max_ids must be >= 0, not {max_ids}")
    obj = _first_object(reply)
    answer = _field(obj, "answer", "answers")
    if answer is _MISSING:
        raise SelectionParseError(f'Your reply has no "answer" key. {_HINT}')
    ids = _ids(answer)
    allowed = None if valid_ids is None else set(valid_ids)
    valid = [i for i in ids if allowed is None or i in allowed]
    invalid = [i for i in ids if allowed is not None and i not in allowed]
    return Selection(thinking=_thinking(_field(obj, "thinking")), ids=valid[:max_ids], invalid_ids=invalid)
