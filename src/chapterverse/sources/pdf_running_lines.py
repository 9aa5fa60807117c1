"""Running headers and footers of PDF pages, and the printed page numbers they carry.

A printed book's pages begin or end with lines that are not its text: "134 FREE CULTURE", the chapter's name
with the page number ("INTRODUCTION 5"), a URL on every other page. Left in, they are searched and cited as
content and cut sentences that run across pages in two. They are found by what they share across pages,
never by layout (the text layer has none):

- **page-number lines**: an edge line (one of the first or last two lines of a page) that starts or ends with
  the page's printed number. A number is taken for the printed one when a page within three has a number
  that differs by as much as the pages do (134 here, 136 two pages on: numbering may jump where a PDF adds
  unnumbered pages, so no one offset holds for a whole book), and only when a quarter of the pages with
  text show one (so a "Definition 17" that happens to end a page is not taken for it);
- **repeated lines**: an edge line whose exact text is an edge line of at least a tenth of those pages
  (and of three), such as a URL or the book's title.

The text itself is never changed, so every position stays exact into the stored text; what is found only
narrows each page's :attr:`ParsedFile.body`, the part that is chunked. A running line that the text layer
glued to the page's last words ("copy136 FREE CULTURE") is cut at the printed number, by the templates the
other pages' page-number lines show ("# FREE CULTURE").

When the PDF has no page labels of its own, the printed numbers become the pages' labels, so the reader says
"Page 134" where the book prints 134; a page between two that show numbers in the same run (a chapter's
first page often shows none) gets the number the run gives it.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from .base import ParsedDocument

__all__ = ["mark_running_lines"]

EDGE_LINES = 2
"""How many non-blank lines at the top and at the bottom of a page may be running lines."""
_LEADING_NUMBER = re.compile(r"^(\d{1,4})\b")
_TRAILING_NUMBER = re.compile(r"\b(\d{1,4})$")


@dataclass(frozen=True, slots=True)
class _Line:
    start: int
    end: int
    text: str
    """Stripped."""


def mark_running_lines(parsed: ParsedDocument) -> ParsedDocument:
    """Set each page's body to exclude its running lines and, when the PDF has no page labels, label the
    pages with their printed numbers. Returns ``parsed`` (changed in place)."""
    pages = [_edge_lines(f.text) if f.has_text else [] for f in parsed.files]
    with_text = sum(1 for lines in pages if lines)
    if with_text < 3:
        return parsed
    printed = _printed_numbers(pages, with_text)
    templates = _templates(pages, printed)
    numbers = _fill_runs(printed)
    repeated = _repeated_lines(pages, with_text)
    for file, lines, number in zip(parsed.files, pages, numbers):
        if lines:
            file.body = _body(file.text, lines, str(number) if number is not None else None, templates, repeated)
    if any(n is not None for n in numbers) and all(f.label == str(i + 1) for i, f in enumerate(parsed.files)):
        for file, number in zip(parsed.files, numbers):
            file.label = str(number) if number is not None else file.label
    return parsed


def _edge_lines(text: str) -> list[_Line]:
    """The first and last :data:`EDGE_LINES` non-blank lines of a page (fewer on a short page), in order."""
    lines: list[_Line] = []
    position = 0
    for raw in text.split("\n"):
        stripped = raw.strip()
        if stripped:
            lead = len(raw) - len(raw.lstrip())
            lines.append(_Line(position + lead, position + lead + len(stripped), stripped))
        position += len(raw) + 1
    if len(lines) <= 2 * EDGE_LINES:
        return lines
    return lines[:EDGE_LINES] + lines[-EDGE_LINES:]


def _numbers(line: str) -> set[int]:
    found = {int(m.group(1)) for m in (_LEADING_NUMBER.search(line), _TRAILING_NUMBER.search(line)) if m}
    return {n for n in found if n > 0}


NEIGHBOURHOOD = 3
"""How many pages away a page's number may find the neighbour that confirms it."""


def _printed_numbers(pages: list[list[_Line]], with_text: int) -> list[int | None]:
    """Each page's printed number, or None: an edge number that a page within :data:`NEIGHBOURHOOD` confirms
    (its own number differs by as much as the two pages' indices); all None unless a quarter of the pages with
    text (and three) have one."""
    offsets = [{n - index for line in lines for n in _numbers(line.text)} for index, lines in enumerate(pages)]
    printed: list[int | None] = []
    for index, candidates in enumerate(offsets):
        near = set().union(*(offsets[j] for j in range(max(0, index - NEIGHBOURHOOD),
                                                       min(len(pages), index + NEIGHBOURHOOD + 1)) if j != index))
        confirmed = sorted(candidates & near)
        printed.append(index + confirmed[0] if len(confirmed) == 1 else None)
    if sum(1 for n in printed if n is not None) < max(3, with_text / 4):
        return [None] * len(pages)
    return printed


def _is_page_number_line(line: str, number: str) -> bool:
    return line == number or line.startswith(number + " ") or line.endswith(" " + number)


def _templates(pages: list[list[_Line]], printed: list[int | None]) -> Counter[str]:
    """The page-number lines with their number as "#" ("# FREE CULTURE"), counted over pages."""
    templates: Counter[str] = Counter()
    for lines, number in zip(pages, printed):
        if number is not None:
            shown = str(number)
            templates.update({_template(line.text, shown) for line in lines if _is_page_number_line(line.text, shown)})
    return templates


def _template(line: str, number: str) -> str:
    if line.startswith(number):
        return "#" + line[len(number):]
    return line[: len(line) - len(number)] + "#"


def _repeated_lines(pages: list[list[_Line]], with_text: int) -> set[str]:
    counts: Counter[str] = Counter()
    for lines in pages:
        counts.update({line.text for line in lines if not line.text.isdigit()})
    least = max(3, with_text / 10)
    return {text for text, count in counts.items() if count >= least}


SHORT_LINE = 40
"""A page-number line no template confirms counts only up to this length: a long line that ends in a number
is more likely the text ("... in the year 1911") than a running header."""


def _body(text: str, lines: list[_Line], number: str | None, templates: Counter[str],
          repeated: set[str]) -> tuple[int, int]:
    """[start, end) of the page without its running lines at the top and at the bottom."""
    shown = {t.replace("#", number) for t, count in templates.items() if count >= 2} if number else set()

    def running(line: _Line) -> bool:
        if line.text in repeated or line.text in shown or line.text == number:
            return True
        return number is not None and len(line.text) <= SHORT_LINE and _is_page_number_line(line.text, number)

    top = lines[:EDGE_LINES] if len(lines) > EDGE_LINES else lines
    start = 0
    for line in top:
        if not running(line):
            break
        start = line.end
    end = len(text)
    for line in reversed(lines[-EDGE_LINES:]):
        if line.end <= start:
            break
        if running(line):
            end = line.start
            continue
        glued = _glued_start(line, shown)
        if glued is not None:
            end = glued
        break
    start = _skip_space(text, start, end)
    return (start, max(start, _trim_space(text, start, end)))


def _glued_start(line: _Line, shown: set[str]) -> int | None:
    """Where a trailing running line glued to the page's last words begins ("copy136 FREE CULTURE" -> at 136,
    "upon cerAFTERWORD 295" -> at AFTERWORD), by the page's running lines as other pages' templates give them."""
    for tail in sorted(shown, key=len, reverse=True):
        if len(tail) >= 6 and any(c.isalpha() for c in tail) and line.text.endswith(tail) and line.text != tail:
            return line.end - len(tail)
    return None


def _skip_space(text: str, start: int, end: int) -> int:
    while start < end and text[start].isspace():
        start += 1
    return start


def _trim_space(text: str, start: int, end: int) -> int:
    while end > start and text[end - 1].isspace():
        end -= 1
    return end


def _fill_runs(printed: list[int | None]) -> list[int | None]:
    """The printed numbers, and for a page without one its run's number when the pages that show numbers
    before and after it agree on the run (same number - index); else None."""
    filled = list(printed)
    known = [(index, number) for index, number in enumerate(printed) if number is not None]
    for (before, first), (after, last) in zip(known, known[1:]):
        if first - before == last - after:
            for index in range(before + 1, after):
                filled[index] = first + index - before
    return filled
