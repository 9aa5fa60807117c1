"""Where a cut may fall in canonical text: the rules the chunker, the sentence splitter and the segmenter share.

Offsets only: a trim moves an offset past whitespace, a continuation test says a cut there would split a
grapheme. Nothing here builds text.
"""

from __future__ import annotations

import re
import unicodedata

__all__ = ["CLOSERS", "is_continuation", "trimmed_end", "trimmed_start"]

CLOSERS = re.escape("\"'”’»)]}」』")
"""Closing quotes and brackets that stay with the sentence or clause end before them (regex-escaped)."""


def is_continuation(text: str, i: int) -> bool:
    """True when a cut before ``text[i]`` would split a grapheme (combining mark, ZWJ sequence, selector)."""
    if i <= 0 or i >= len(text):
        return False
    ch = text[i]
    return (unicodedata.category(ch) in ("Mn", "Mc", "Me") or ch in "\u200d\ufe0e\ufe0f"
            or "\U0001f3fb" <= ch <= "\U0001f3ff" or text[i - 1] == "\u200d")


def trimmed_end(text: str, start: int, end: int) -> int:
    """``end`` moved back over trailing whitespace, never before ``start``."""
    while end > start and text[end - 1].isspace():
        end -= 1
    return end


def trimmed_start(text: str, start: int, end: int) -> int:
    """``start`` moved forward over leading whitespace, never past ``end``."""
    while start < end and text[start].isspace():
        start += 1
    return start
