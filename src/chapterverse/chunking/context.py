"""A chunk's context: what its source path and its metadata say about it, as words to retrieve it by.

Knowledge bases exported from shops, CRMs and wikis keep much of their meaning outside the text: the order
chunk ``Pedido 8942 — 25/08/2026 ... Entrega estimada: 27/08/2026`` never says "cliente 456"; its source
``pedidos/cliente_456/8942`` does, and so may its metadata (``{"cliente": "456", "tipo": "pedido"}``). The
context line built here is indexed beside the chunk (the lexical index's weighted heading field) and embedded
with it (a line before its text), so a question naming the customer finds the order. It is never part of a
chunk's text: a citation still names, and shows, exactly the source's own words.

Only what a user wrote about a text counts: the source path of a knowledge base's record or of a pre-chunked
line (the library decides which, ``Library.prepare_unembedded``; a book's file name says nothing its text does
not), and the values of the metadata given with the text (the knowledge-base API's ``metadata``, a JSONL line's
other fields). What the library records for itself (a folder it came from, parser warnings) does not.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import Any

__all__ = ["MAX_CONTEXT_WORDS", "context_line"]

MAX_CONTEXT_WORDS = 48
"""A context line longer than this is cut: it describes the chunk, it must not outweigh the chunk's own text."""

_SEPARATORS = re.compile(r"[\s_/\\|#:;,]+")
_SCALARS = (str, int, float)


def context_line(source: str, *metadata: Mapping[str, Any] | None) -> str:
    """The words of ``source``'s path (its folders and its name without extension) and of the metadata's values,
    each word once, in the order given; empty when neither says anything."""
    words: dict[str, None] = {}
    for part in _path_parts(source):
        _add_words(words, part)
    for mapping in metadata:
        for value in (mapping or {}).values():
            for item in value if isinstance(value, list) else [value]:
                if isinstance(item, _SCALARS) and not isinstance(item, bool):
                    _add_words(words, str(item))
    return " ".join(list(words)[:MAX_CONTEXT_WORDS])


def _path_parts(source: str) -> list[str]:
    """The folders and the stem of a source that is a path (``pedidos/cliente_456/8942``); nothing otherwise."""
    if "/" not in source.strip("/"):
        return []
    path = PurePosixPath(source.strip("/"))
    return [*path.parent.parts, path.stem]


def _add_words(words: dict[str, None], text: str) -> None:
    for word in _SEPARATORS.split(text[:500]):
        if word and len(words) < MAX_CONTEXT_WORDS:
            words.setdefault(word, None)
