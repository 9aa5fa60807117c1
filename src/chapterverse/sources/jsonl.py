"""Pre-chunked JSONL: one JSON object per line, each becoming exactly one file and one chunk.

A line is ``{"text": "...", "source": "...", "chunk_index": 3, ...anything else...}``: ``text`` is
required, ``source`` defaults to ``"<file name>#line<N>"`` and ``chunk_index`` to ``N`` (N the
0-based line number), every other field is kept as chunk metadata (a ``"metadata"`` object's keys too,
flattened into it). Blank lines are skipped.

The file is all or nothing: every bad line is collected and reported at once (1-based line
numbers, as editors show them) in one BadLinesError, so a user fixes the file in one pass.
"""

from __future__ import annotations

import json
from typing import Any

from ..errors import BadLinesError, SourceError
from .base import ParsedDocument, ParsedFile, PreChunk
from .files import Source, opened
from .text import MAX_TEXT_BYTES

__all__ = ["read_jsonl", "MAX_CHUNK_INDEX"]

MAX_CHUNK_INDEX = 2**31 - 1
"""The largest ``chunk_index`` both stores hold (PostgreSQL ``integer``)."""


def read_jsonl(given: Source) -> ParsedDocument:
    """Read a pre-chunked JSONL file; BadLinesError lists every invalid line (1-based)."""
    with opened(given, limit=MAX_TEXT_BYTES) as file:
        data = file.read()
    path = file.path
    files: list[ParsedFile] = []
    chunks: list[PreChunk] = []
    bad: dict[int, str] = {}
    for number, raw in enumerate(data.split(b"\n")):
        if not raw.strip():
            continue
        try:
            record = _parse_line(raw.removeprefix(b"\xef\xbb\xbf") if number == 0 else raw)
        except ValueError as exc:
            bad[number + 1] = str(exc)
            continue
        source = record.pop("source", f"{path.name}#line{number}")
        chunk_index = record.pop("chunk_index", number)
        text = record.pop("text")
        chunks.append(PreChunk(file_index=len(files), source=source, chunk_index=chunk_index,
                               metadata=_flattened(record)))
        files.append(ParsedFile(text, title=source, label=source))
    if bad:
        raise BadLinesError(path, bad)
    if not files:
        raise SourceError(path, "no JSON lines: a pre-chunked file needs at least one {\"text\": ...} line")
    return ParsedDocument(title=path.stem, format="jsonl", files=files, prechunked=chunks)


def _parse_line(raw: bytes) -> dict[str, Any]:
    """One line as a validated record; ValueError says what is wrong with it."""
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"invalid UTF-8 at byte {exc.start}") from exc
    try:
        record = json.loads(line, parse_constant=_reject_constant)
        _require_encodable(record)
    except json.JSONDecodeError as exc:
        raise ValueError(f"invalid JSON ({exc.msg} at column {exc.colno})") from exc
    except RecursionError as exc:
        raise ValueError("JSON nested too deeply") from exc
    if not isinstance(record, dict):
        raise ValueError(f"expected a JSON object, got {type(record).__name__}")
    text = record.get("text")
    if not isinstance(text, str) or not text.strip():
        raise ValueError('"text" must be a non-empty string' if "text" in record else 'missing "text"')
    if "source" in record and (not isinstance(record["source"], str) or not record["source"].strip()):
        raise ValueError('"source" must be a non-empty string')
    chunk_index = record.get("chunk_index", 0)
    if isinstance(chunk_index, bool) or not isinstance(chunk_index, int) or not 0 <= chunk_index <= MAX_CHUNK_INDEX:
        raise ValueError(f'"chunk_index" must be an integer from 0 to {MAX_CHUNK_INDEX}')
    return record


def _reject_constant(name: str) -> Any:
    """NaN and Infinity are not JSON: PostgreSQL's json type refuses them, so they are refused here."""
    raise ValueError(f"{name} is not valid JSON")


def _require_encodable(record: Any) -> None:
    """A ``\\ud800``-style escape decodes to an unpaired surrogate that no store can write as UTF-8;
    finding it here makes it a bad line instead of a failed write after the whole file was embedded."""
    try:
        json.dumps(record, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"unpaired surrogate escape (\\u{ord(exc.object[exc.start]):04x}) cannot be stored") from exc


def _flattened(fields: dict[str, Any]) -> dict[str, Any]:
    """A line's other fields as the chunk's metadata, a ``"metadata"`` object's keys among them (and winning): the
    one shape ``add/document`` takes and ``/v1/rag/search`` returns, never ``{"metadata": {"metadata": ...}}``."""
    nested = fields.get("metadata")
    if not isinstance(nested, dict):
        return fields
    return {**{k: v for k, v in fields.items() if k != "metadata"}, **nested}
