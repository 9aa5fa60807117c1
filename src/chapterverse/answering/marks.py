"""How an answer's unsupported sentences are marked in plain text: the command line's answers and the Markdown
export (the web reader underlines them itself, from the same ``unsupported_sentences``).

A sentence the verifier found no supporting citation for is followed by :data:`UNSUPPORTED_MARK`, and a line under
the answer says what the mark means, so the mark survives a pipe, a copy and a paste where colours do not.

An answer's citations are numbered ``[1]``, ``[2]``; a book's own footnote markers, bracketed numbers in the text
it quotes (``Pangloss[1]``), are shown raised (``Pangloss¹``, as print sets them) by :func:`raised_note_numbers`,
so the two never read alike. Display only: the stored answer and every cited span keep the book's characters.
"""

from __future__ import annotations

import re

from .result import AnswerResult

__all__ = ["UNSUPPORTED_MARK", "marked_answer", "marks_legend", "raised_note_numbers"]

UNSUPPORTED_MARK = "⚠"


def marked_answer(result: AnswerResult) -> tuple[str, int]:
    """``result.answer`` with the mark after each of its unsupported sentences, and how many were marked (a
    sentence the text does not hold verbatim, as in an answer stored by an older version, is not)."""
    text = result.answer
    out: list[str] = []
    position = 0
    marked = 0
    for sentence in result.unsupported_sentences:
        at = text.find(sentence, position) if sentence else -1
        if at < 0:
            continue
        end = at + len(sentence)
        out.append(f"{text[position:end]} {UNSUPPORTED_MARK}")
        position = end
        marked += 1
    out.append(text[position:])
    return "".join(out), marked


def marks_legend(count: int) -> str:
    """The line under an answer that explains its marks."""
    sentences = "sentence" if count == 1 else "sentences"
    return f"{UNSUPPORTED_MARK} {count} {sentences} not supported by a cited passage: the model's words, not the source's."


_NOTE_NUMBER = re.compile(r"\[(\d{1,4})\]")
_SUPERSCRIPT_DIGITS = str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹")


def raised_note_numbers(text: str) -> str:
    """``text`` with each bracketed number (``[1]``, a book's footnote marker) as superscript digits (``¹``).
    For text whose citations are still tags (``[f5-1-9]``): every ``[n]`` in it is then the book's, and the
    answer's own numbers, put in after, stay the only bracketed ones."""
    return _NOTE_NUMBER.sub(lambda number: number[1].translate(_SUPERSCRIPT_DIGITS), text)
