"""The structure printed books have in plain text: headings, a contents list, a Gutenberg header and front matter.

A plain-text book marks its chapters the way the printed one did: "CHAPTER I", "STAVE ONE", "Canto XII",
"Capítulo primero. Que trata...", a Roman numeral alone on a line ("II." of Virgil's Eclogues), "[ 1 ]", or
only by a contents list at the front whose lines come back later as headings. :func:`text_structure` finds
those headings, the book's title and author in a Project Gutenberg header, and the span of the text that is
the book (:attr:`TextStructure.body`): the licence before and after it, the title page, the contents list and
a transcriber's note at either end lie outside, so they are never chunked, searched or cited, while the
canonical text keeps every character and every position stays exact.

Conservative on purpose: a wrong heading cuts a chapter in two, so a numeral alone counts only in a run of
three or more that counts up (restarting at one for each part) with chapters' worth of text between them, a
keyword needs a number or a separator after it, and a line in capitals is a heading only when the contents list
names it or it stands right above a chapter heading as the part's title ("INFERNO" before "Canto I"). A book
with none of these may mark its chapters by their titles alone ("Rotkäppchen", "Hänsel und Gretel"): lines alone
that read as titles are its headings only when they stand as far apart as chapters do. A corpus edition written a
paragraph a line has no blank lines: there each line is a block of its own, and a numeral's line may carry the
chapter's summary ("III Geppetto, tornato a casa, comincia subito a fabbricarsi il burattino ...").
"""

from __future__ import annotations

import bisect
import re
import unicodedata
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from .xhtml import Heading

__all__ = ["TextStructure", "text_structure", "gutenberg_header", "gutenberg_spans", "front_lists", "could_be_title",
           "title_page"]

_ROMAN = r"(?=[MDCLXVI])M{0,4}(?:CM|CD|D?C{0,3})(?:XC|XL|L?X{0,3})(?:IX|IV|V?I{0,3})"
_NUMBER_WORDS = (
    "one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen|fifteen|sixteen|seventeen|"
    "eighteen|nineteen|twenty|thirty|forty|fifty|first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|"
    "eleventh|twelfth|last|final|uno|dos|tres|cuatro|cinco|seis|siete|ocho|nueve|diez|primero|primera|segundo|"
    "segunda|tercero|tercera|cuarto|cuarta|quinto|quinta|sexto|sexta|s[ée]ptimo|octavo|noveno|d[ée]cimo|"
    "[úu]ltimo|premier|premi[èe]re|deuxi[èe]me|second|troisi[èe]me|quatri[èe]me|cinqui[èe]me|un|deux|trois|quatre|"
    "cinq|erstes|erster|zweites|zweiter|drittes|dritter|viertes|vierter|f[üu]nftes|eins|zwei|drei|vier|f[üu]nf|"
    "primus|secundus|tertius"
)
_MAJOR = r"part|book|volume|libro|parte|livre|partie|tome|tomo|teil|buch|liber"
_CHAPTER = (r"chapter|stave|canto|act|letter|eclogue|ecloga|cap[ií]tulo|chapitre|kapitel|capitolo|acto|acte|"
            r"aufzug|akt|story|adventure")
_SCENE = r"scene|sc[èe]ne|escena|szene|scena"
_ALONE = (r"prologue|epilogue|preface|introduction|appendix|foreword|afterword|conclusion|pr[óo]logo|"
          r"ep[íi]logo|introducci[óo]n|ap[ée]ndice|pr[ée]face|[ée]pilogue|vorwort|einleitung|nachwort|prolog|epilog")
_NOTE_MARK = r"\[(?:\d{1,3}|[a-z*†])\]"
"""A footnote's mark printed after a heading's numeral or title: "CHAPITRE XXII[1].", "...d'Eldorado[1]."."""
_NUMBER = rf"(?:\d{{1,3}}|{_ROMAN}|(?:the\s+)?(?:{_NUMBER_WORDS}))\b"
_KEYWORD_LINE = re.compile(
    rf"^(?:[\w’' ]{{1,30}}:\s*)?(?:(?P<major>{_MAJOR})|(?P<scene>{_SCENE})|(?P<chapter>{_CHAPTER}))\s+{_NUMBER}(?:{_NOTE_MARK})?\.?"
    rf"(?:\s*(?:[.:,;—–]|-{{1,2}})\s*(?P<title>\S.*)?|\s+(?P<caps>(?-i:[^a-z]+))|\s*)$", re.IGNORECASE)
"""A keyword and a number, then nothing, a separator and maybe a title, or a title in capitals: "STAVE ONE",
"Chapter 1. Loomings.", "Book the First--Recalled to Life", "Inferno: Canto I", "CHAPITRE XXII[1]." with a
footnote's mark. "Chapter 5 of the report" is
prose (a lower-case word straight after the number)."""
_ALONE_LINE = re.compile(rf"^(?:{_ALONE})\b\.?(?:\s*(?:[.:—–]|-{{1,2}})\s*\S.*)?$", re.IGNORECASE)
_NUMERAL_LINE = re.compile(rf"^(?P<pre>[\[(—–\-_*§=~# ]*)(?P<n>{_ROMAN}|\d{{1,3}})(?P<post>[.\])—–\-_*:=~ ]*)$")
"""A numeral alone, maybe dressed: "II.", "[ 1 ]", "— III —", "12"."""
_NUMBERED_LINE = re.compile(rf"^(?P<n>{_ROMAN}|\d{{1,3}})(?P<stop>\.)?\s+(?P<title>\S.*)$")
"""A numeral, a full stop and a title: "I. A SCANDAL IN BOHEMIA", "1. Into the Primitive"; or a numeral and a title
that starts with a capital ("III Geppetto, tornato a casa, comincia subito a fabbricarsi il burattino")."""
_MAX_NUMBERED_TITLE, _MAX_SUMMARY = 75, 300
"""A title after a numeral has at most 75 characters; in a text written a paragraph a line, where the chapter's
summary is the heading's line ("XIII L'osteria del Gambero Rosso.", or a sentence of what happens), 300."""
_MAX_SUBTITLE = 200
"""A subtitle block under a bare chapter heading has at most 200 characters (three lines of a hard-wrapped text)."""
_MAX_SHOWN_TITLE = 80
"""A heading's title longer than this is shown cut at a word, with an ellipsis: the contents list is read at a
glance (a chapter's summary is a sentence or two)."""
_ISOLATED_WORDS, _ISOLATED_CHARS, _ISOLATED_GAP = 15, 90, 2_000
"""A chapter title without numeral or keyword is a line of at most 15 words and 90 characters standing alone; a
run of them is a book's headings when four in five are 2,000 characters or more apart and none closer than
``_MIN_GAP``: dialogue, a letter's salutation and signature, or a verse alone come far more often."""
_QUOTE_MARKS = frozenset("\"«»“”„‟‹›「」『』")
_FLAT_BLANKS, _FLAT_LONG = 50, 0.3
"""A text is written a paragraph a line when it has under one blank line in 50 lines and three lines in ten are
longer than 100 characters (corpus editions: ELTeC, CLiGS): each line is then a block of its own."""
_SENTENCE_END = re.compile(r"[.!?…][\"'»”’)]*$")
_SENTENCE_WORDS = 8
"""A first line ending as a sentence ends, with this many words at least, is the text's opening sentence (a book
whose title page was left out: "Jeanne, ayant fini ses malles, s'approcha de la fenêtre, ..."), not its title."""
_CONTENTS_TITLE = re.compile(
    r"^\s*(?:#+\s*)?(?:table\s+of\s+contents|contents|[íi]ndice(?:\s+general)?|sumario|table\s+des\s+mati[èe]res|"
    r"sommaire|inhalt|inhaltsverzeichnis|indice|contenido|contenidos)"
    rf"(?:\s+(?:of\s+|del?\s+)?(?:{_MAJOR})\s+{_NUMBER})?\s*[.:]?\s*$", re.IGNORECASE)
_FRONT_LIST_TITLE = re.compile(
    r"^\s*(?:#+\s*)?(?:(?:list|table|index)\s+of\s+(?:the\s+)?(?:illustrations|plates|figures|engravings|maps)|"
    r"illustrations|plates|[íi]ndice\s+de\s+(?:las\s+)?(?:ilustraciones|l[áa]minas)|lista\s+de\s+ilustraciones|"
    r"(?:liste|table)\s+des\s+(?:illustrations|gravures|planches)|abbildungsverzeichnis|"
    r"verzeichnis\s+der\s+(?:abbildungen|illustrationen)|indice\s+delle\s+(?:illustrazioni|tavole)|"
    r"elenco\s+delle\s+(?:illustrazioni|tavole))\s*[.:]?\s*$", re.IGNORECASE)
"""The title of a list of illustrations (plates, figures, maps) at the front: captions that only point into the
book, as its contents do, so it is left out of the body as a contents list is."""
_UNDERLINE = re.compile(r"^\s*(?:=+|-+)\s*$")
_NOT_WORD = re.compile(r"[\W_]+")
_NOTE_MARKS = re.compile(rf"(?<=\w)\s?{_NOTE_MARK}", re.IGNORECASE)
_APOSTROPHES = re.compile("[\"'`´‘’‚‛ʹʻʼ′“”„‟«»‹›]")
_BULLET = re.compile(r"^\s*(?:[-*+•]\s+)?")
_LIST_ITEM = re.compile(rf"^(?:[-*+•]\s|(?:\d{{1,3}}|{_ROMAN})[.)]?(?:\s|$)|(?:{_CHAPTER}|{_MAJOR})\b)", re.IGNORECASE)
_PAGE_NUMBER = re.compile(r"(?:\s*\.{2,}\s*|\s{2,})\d+\s*$")
_GUTENBERG_START = re.compile(
    r"^[ \t]*(?:\*{3}\s*START OF (?:THE|THIS) PROJECT GUTENBERG[^\n]*|\*END\*THE SMALL PRINT[^\n]*)$",
    re.IGNORECASE | re.MULTILINE)
_GUTENBERG_END = re.compile(
    r"^[ \t]*(?:\*{3}\s*END OF (?:THE|THIS) PROJECT GUTENBERG|End of (?:the )?Project Gutenberg)",
    re.IGNORECASE | re.MULTILINE)
_GUTENBERG_FIRST_LINE = re.compile(
    r"^\W*(?:The\s+)?Project\s+Gutenberg(?:'s|’s)?\s+e-?(?:Book|Text)\s*(?:#\d+\s*)?(?:of\s+|:\s*)(?P<title>.+?)"
    r"(?:,\s+by\s+(?P<author>.+?))?\s*$", re.IGNORECASE)
_HEADER_FIELD = re.compile(r"^(?P<key>Title|Author):[ \t]*(?P<value>\S.*)$", re.MULTILINE)
_TRANSCRIBER = re.compile(
    r"^\W{0,3}(?:transcriber['’]?s?\s+notes?|nota\s+del\s+transcriptor|note\s+du\s+transcripteur|"
    r"anmerkung(?:en)?\s+des\s+transkribenten)\b", re.IGNORECASE | re.MULTILINE)

_PRODUCED = re.compile(
    r"^[^\w\n]{0,3}(?:produced\s+by|(?:e-?text|e-?book)\s+(?:was\s+)?(?:prepared|produced)\s+by|"
    r"the\s+project\s+gutenberg\s+e-?(?:text|book)\s+of)\b", re.IGNORECASE | re.MULTILINE)
"""The production credits a Gutenberg text may open with after its START line ("Produced by Carlo Traverso",
with thanks to a library for its scans): the edition's, not the book's."""

_FRONT_CHARS = 1_500
"""Text before the contents list or the first heading of at most this many characters is a title page (with an
edition note or a dedication), not the book; an author's preface is longer and is kept."""
_MIN_RUN, _MIN_GAP = 3, 800
"""A numeral-only heading style needs at least three headings, four in five of them 800 characters or more
apart: a numbered list, a date or a verse number counts up too but never spaces out like chapters."""
_MAX_HEADING_LINES, _MAX_TITLE_LINES = 3, 5
"""A keyword heading may run over three lines ("Capítulo primero. Que trata de la condición y ejercicio del
famoso hidalgo" / "don Quijote de la Mancha"); a longer block is a paragraph that starts with the keyword,
unless its first line is the keyword and number alone ("CHAPTER XXIII." over a title of up to four lines)."""
_END_MARKS = frozenset({"the end", "end", "fin", "la fine", "fine", "ende", "finis", "fim"})
"""The mark after a book's last line: a heading by its look, never a chapter."""
_BACK_NOTE_CHARS = 5_000
_MAX_CONTENTS_LINES = 1_000
"""A contents list is looked for this many lines on; where its first entry comes back is looked for as far."""


@dataclass(slots=True)
class TextStructure:
    """What :func:`text_structure` found: headings (level 0 the outermost), the book's span and its header."""

    headings: list[Heading]
    body: tuple[int, int] | None = None
    title: str | None = None
    author: str | None = None
    contents: tuple[int, int] | None = None
    """The contents list at the front, [start, end), when there is one."""


@dataclass(slots=True)
class _Line:
    """A line of the text without its newline, where it starts, and its text stripped (blank when empty)."""

    index: int
    offset: int
    text: str
    stripped: str


@dataclass(slots=True)
class _Candidate:
    """A line that looks like a heading: its style (lines of one style count up together), its rank (0 a part,
    1 a chapter, 2 a scene), its number when it is a numeral, and the lines below it that are its title."""

    line: int
    style: tuple[str, ...]
    rank: int
    number: int | None = None
    title_lines: list[int] = field(default_factory=list)


def could_be_title(line: str) -> bool:
    """Whether a text's first line may be its title: short, and neither a chapter's heading ("I.", "Chapter 1")
    nor the opening sentence of a text that starts without a title page."""
    line = line.strip()
    if not 0 < len(line) <= 100 or _NUMERAL_LINE.match(line) or _KEYWORD_LINE.match(line):
        return False
    return not (_SENTENCE_END.search(line) and len(line.split()) >= _SENTENCE_WORDS)


_NAME_PARTICLES = frozenset({"de", "da", "di", "del", "della", "der", "den", "van", "von", "le", "la", "du", "des", "y"})
_ARTICLES = frozenset({"the", "a", "an", "le", "la", "les", "il", "lo", "gli", "el", "los", "las", "der", "die", "das",
                       "ein", "eine", "un", "une", "uno", "una"})
_BYLINE = re.compile(r"^(?:by|von|di|de|par|por|da|door|av|af)\s", re.IGNORECASE)
_TITLE_PAGE_LINES = 6
"""The lines of a title page looked at: an author, a title, a subtitle, a byline, a translator, an edition."""


def title_page(text: str, before: int) -> tuple[str | None, str | None]:
    """(title, author) from the first lines of a text without a header, up to ``before`` (its first heading).

    The first line is the title ("The Strange Case Of Dr. Jekyll And Mr. Hyde" / "by Robert Louis Stevenson"),
    unless it is an author's name in the way corpus editions print one above the title ("Johanna Spyri" /
    "Heidis Lehr- und Wanderjahre"): two to four capitalised words (and particles: "Honoré de Balzac"), not in
    capitals, then a longer line that is no name and no byline, with no author named after it. A title that is a
    name ("Effi Briest") followed by a name or a byline stays the title; one followed by a longer subtitle and
    nothing else ("Madame Bovary" / "Mœurs de province") is taken for an author: the shape cannot tell them apart.
    """
    page = [line.strip() for line in text[:before].split("\n") if line.strip()][:_TITLE_PAGE_LINES]
    if not page or not could_be_title(page[0]):
        return None, None
    first, rest = page[0], page[1:]
    if (rest and _is_name(first) and could_be_title(rest[0]) and rest[0][0].isupper() and not _is_name(rest[0])
            and len(rest[0]) > len(first)
            and not _BYLINE.match(rest[0]) and not any(_is_name(line) or _BYLINE.match(line) for line in rest[1:])):
        return rest[0], first
    return first, None


def _is_name(line: str) -> bool:
    """A person's name as a title page prints it: "Johanna Spyri", "R. L. Stevenson", "Honoré de Balzac"; not a
    title that starts with an article ("The Divine Comedy")."""
    words = line.split()
    if not 2 <= len(words) <= 4 or line.isupper() or not all(ch.isalpha() or ch in " .'’-" for ch in line):
        return False
    return (all(word[0].isupper() or word in _NAME_PARTICLES for word in words) and words[-1][0].isupper()
            and words[0].casefold() not in _ARTICLES)


def gutenberg_header(text: str) -> tuple[str | None, str | None, tuple[int, int] | None]:
    """(title, author, book span) of a Project Gutenberg text; the span lies between the START and END lines
    (:func:`gutenberg_spans` of the text alone)."""
    start = _GUTENBERG_START.search(text)
    if start is None:
        return None, None, None
    header = text[:start.start()]
    fields = {m.group("key").lower(): m.group("value").strip() for m in _HEADER_FIELD.finditer(header)}
    first = _GUTENBERG_FIRST_LINE.match(header.lstrip("\ufeff").split("\n", 1)[0])
    title = fields.get("title") or (first.group("title").strip() if first else None)
    author = fields.get("author") or (first.group("author") if first and first.group("author") else None)
    book = gutenberg_spans([text])
    return title, author, book[0] if book else None


def gutenberg_spans(texts: Sequence[str]) -> list[tuple[int, int]] | None:
    """Per file of a book in several files (an EPUB's spine items, a folder's chapters), the part that is the
    book of a Project Gutenberg edition: from the end of a START line to the start of the END line after it,
    wherever they fall. A file before the START line, or after the END line, gets an empty span: the header
    with its "Title:" lines, the licence and "Section 1. General Terms of Use". A collection of several editions
    keeps each one's book (a file holding the END of one and the START of the next keeps both, and what lies
    between: a file's span is one range).

    Conservative on purpose: None, so nothing is cut, unless a START line is found (an END line alone may be
    the book quoting one), and when there would be no text between the markers.
    """
    if not any(_GUTENBERG_START.search(text) for text in texts):
        return None
    spans: list[tuple[int, int]] = []
    inside = False
    for text in texts:
        ranges, inside = _book_ranges(text, inside)
        spans.append((ranges[0][0], ranges[-1][1]) if ranges else (0, 0))
    if not any(text[a:b].strip() for text, (a, b) in zip(texts, spans)):
        return None
    return spans


def _book_ranges(text: str, inside: bool) -> tuple[list[tuple[int, int]], bool]:
    """The ranges of ``text`` between START and END lines, given whether it begins inside a book; and whether it
    ends inside one."""
    ranges: list[tuple[int, int]] = []
    at, opened = 0, 0
    while True:
        marker = (_GUTENBERG_END if inside else _GUTENBERG_START).search(text, at)
        if marker is None:
            break
        if inside:
            ranges.append((opened, marker.start()))
        opened = at = marker.end()
        inside = not inside
    if inside:
        ranges.append((opened, len(text)))
    return [(a, b) for a, b in ranges if b > a], inside


def text_structure(text: str, headings: list[Heading] | None = None) -> TextStructure:
    """The structure of a plain-text (or Markdown) book.

    ``headings``: the ones the markup gives (Markdown's ``#`` and underlined lines); when there are fewer than
    two and plain text shows as many (a Markdown file whose chapters are "STAVE ONE" lines), those are taken.
    """
    lines = _lines(text)
    title, author, span = gutenberg_header(text)
    lo, hi = span or (0, len(text))
    first = bisect.bisect_left([line.offset for line in lines], lo)
    contents = _contents(lines, first, hi)
    after = contents[1] if contents else lo
    found = _plain_headings(lines, after, hi)
    if headings is not None and (len(headings) >= 2 or len(headings) > len(found)):
        found = [heading for heading in headings if lo <= heading.offset < hi]
    if contents is not None:
        found = _with_contents(found, lines, contents, hi)
    elif not found:
        found = _isolated_titles(lines, after, hi)
    found = [heading for heading in found if heading.offset >= after and _norm(heading.title) not in _END_MARKS]
    body = _body(text, found, lo, hi, contents, _front_lists(lines, first, hi))
    found = _nest_parts([heading for heading in found if body[0] <= heading.offset < body[1]], text)
    top = min((heading.level for heading in found), default=0)
    found = [Heading(heading.level - top, heading.title, heading.offset) for heading in found]
    changed = span is not None or body != (0, len(text))
    return TextStructure(found, body if changed else None, title, author, contents)


def _nest_parts(headings: list[Heading], text: str) -> list[Heading]:
    """Part titles marked up as their chapters are ("INFERNO" and "Canto I", both underlined alike) put one
    level above them: a heading that is not a chapter's, with no text of its own, right before a chapter's
    heading of its level. Two such parts at least, so that one empty heading alone changes nothing."""
    parts = [index for index, (heading, following) in enumerate(zip(headings, headings[1:]))
             if heading.level == following.level and _is_chapter(following.title) and not _is_chapter(heading.title)
             and _no_text(text, heading.offset, following.offset)]
    if len(parts) < 2:
        return headings
    nested = list(headings)
    for start, end in zip(parts, [*parts[1:], len(headings)]):
        level = headings[start].level
        for index in range(start + 1, end):
            if headings[index].level < level or (headings[index].level == level and index in parts):
                break
            nested[index] = Heading(headings[index].level + 1, headings[index].title, headings[index].offset)
    return nested


def _is_chapter(title: str) -> bool:
    keyword = _KEYWORD_LINE.match(title.strip())
    return keyword is not None and keyword.group("chapter") is not None


def _no_text(text: str, start: int, end: int) -> bool:
    """Whether [start, end) holds a heading's line alone: blank lines and underlines after it."""
    return all(not line.strip() or _UNDERLINE.match(line) for line in text[start:end].split("\n")[1:])


def _lines(text: str) -> list[_Line]:
    lines: list[_Line] = []
    position = 0
    for index, line in enumerate(text.split("\n")):
        lines.append(_Line(index, position, line, line.strip()))
        position += len(line) + 1
    return lines


def _blank(lines: list[_Line], index: int) -> bool:
    return index < 0 or index >= len(lines) or not lines[index].stripped


def _next_text(lines: list[_Line], index: int, limit: int = 4) -> int | None:
    """The next non-blank line after ``index`` within ``limit`` lines, skipping a Markdown underline."""
    for j in range(index + 1, min(index + 1 + limit, len(lines))):
        if lines[j].stripped and not _UNDERLINE.match(lines[j].text):
            return j
    return None


# ----------------------------------------------------------------------------------------------------------
# headings by their look


def _plain_headings(lines: list[_Line], lo: int, hi: int) -> list[Heading]:
    """Keyword, numeral and part-title headings in [lo, hi), levelled by kind."""
    flat = _paragraph_a_line(lines, lo, hi)
    candidates: list[_Candidate] = []
    for line in lines:
        if not lo <= line.offset < hi:
            continue
        candidate = _candidate(lines, line, flat)
        if candidate is not None:
            candidates.append(candidate)
    candidates = _without_title_page_parts(_plausible(candidates, lines))
    consumed = _attach_titles(candidates, lines, flat)
    candidates = [candidate for candidate in candidates if candidate.line not in consumed]
    candidates += _part_titles(candidates, lines, consumed, lo, hi, flat)
    return _levelled(candidates, lines)


def _paragraph_a_line(lines: list[_Line], lo: int, hi: int) -> bool:
    """Whether the text in [lo, hi) is written a paragraph a line with no blank lines between (``_FLAT_BLANKS``):
    there a heading is a line of its own, with no blank line around it."""
    inside = [line for line in lines if lo <= line.offset < hi]
    written = [line for line in inside if line.stripped]
    blanks = len(inside) - len(written)
    long = sum(len(line.stripped) > 100 for line in written)
    return bool(written) and blanks * _FLAT_BLANKS < len(written) and long >= _FLAT_LONG * len(written)


def _apart(lines: list[_Line], index: int, flat: bool) -> bool:
    """Whether line ``index`` is a block's edge: blank (or beyond the text), or any line of a flat text."""
    return flat or _blank(lines, index)


def _candidate(lines: list[_Line], line: _Line, flat: bool) -> _Candidate | None:
    title = line.stripped
    limit = _MAX_SUMMARY if flat and _NUMBERED_LINE.match(title) else 100
    if not title or len(title) > limit or not _apart(lines, line.index - 1, flat):
        return None
    keyword = _KEYWORD_LINE.match(title)
    if keyword:
        block = [line.index] if flat else _block(lines, line.index)
        if len(block) > (_MAX_TITLE_LINES if _bare(title) else _MAX_HEADING_LINES):
            return None  # the first line of a paragraph ("BOOK I. (FOLIO), CHAPTER I. (SPERM WHALE).--This whale")
        kind = "major" if keyword.group("major") else "scene" if keyword.group("scene") else "chapter"
        rank = {"major": 0, "chapter": 1, "scene": 2}[kind]
        return _Candidate(line.index, ("keyword", kind, title.split()[0].casefold().rstrip(":")), rank,
                          title_lines=[j for j in block[1:] if not _UNDERLINE.match(lines[j].text)])
    if _ALONE_LINE.match(title) and _apart(lines, line.index + 1, flat):
        return _Candidate(line.index, ("keyword", "chapter", "alone"), 1)
    if not _apart(lines, line.index + 1, flat):
        return None
    numeral = _NUMERAL_LINE.match(title)
    if numeral:
        number = _value(numeral.group("n"))
        shape = (numeral.group("pre").strip(), "roman" if numeral.group("n").isalpha() else "digit",
                 numeral.group("post").strip())
        return _Candidate(line.index, ("numeral", *shape), 1, number)
    numbered = _NUMBERED_LINE.match(title)
    if numbered and _numbered_title(numbered.group("title"), bool(numbered.group("stop")), flat):
        kind = "roman" if numbered.group("n").isalpha() else "digit"
        return _Candidate(line.index, ("numbered", kind), 1, _value(numbered.group("n")))
    return None


def _isolated_titles(lines: list[_Line], lo: int, hi: int) -> list[Heading]:
    """The chapter titles of a book that marks its chapters by nothing else (no keyword, no numeral, no contents
    list): lines that read as titles ("Zum Alm-Öhi hinauf", "Am Sonntag, wenn's läutet"), standing alone between
    blank lines, spaced as chapters are (``_ISOLATED_GAP``). The title page's lines before the first of them (an
    author's name, the book's title) are not chapters; a title with little more than a motto before the next is
    a part's ("FIRST PART" over "THE SON OF THE BRAHMAN"), one level above."""
    if _paragraph_a_line(lines, lo, hi):
        return []  # no blank lines: nothing stands alone
    found = [line for line in lines if lo <= line.offset < hi and _isolated_title(lines, line)]
    front: list[_Line] = []
    while len(found) >= 2 and found[1].offset - found[0].offset < _MIN_GAP and found[0].offset - lo <= _FRONT_CHARS:
        front.append(found.pop(0))
    ends = [line.offset for line in found[1:]] + [hi]
    parts = {n for n, (line, end) in enumerate(zip(found, ends)) if end - line.offset < _MIN_GAP}
    if any(n + 1 in parts for n in parts):
        return []  # three titles close together: no part over its first chapter
    if parts and front:  # the title page's last line is the first part's title, as the later parts show
        found.insert(0, front[-1])
        ends.insert(0, found[1].offset)
        parts = {0} | {n + 1 for n in parts}
    gaps = sorted(end - line.offset for n, (line, end) in enumerate(zip(found, ends)) if n not in parts)
    if len(gaps) < _MIN_RUN or gaps[0] < _MIN_GAP or gaps[len(gaps) // 5] < _ISOLATED_GAP:
        return []
    return [Heading(0 if n in parts else 1, _shown(line.stripped), line.offset + line.text.index(line.stripped[0]))
            for n, line in enumerate(found)]


def _isolated_title(lines: list[_Line], line: _Line) -> bool:
    """A line alone between blank lines that reads as a title: capitalised, short, no quotation marks and no end
    punctuation (dialogue, a question, a sentence), not columns (a list's "THE SLEEPING BEAUTY.   Frontispiece"),
    not after a sentence left open (a letter's "Yours truly," above its signature), and before a text."""
    text = line.stripped
    if not text or not _blank(lines, line.index - 1) or not _blank(lines, line.index + 1):
        return False
    if len(text) > _ISOLATED_CHARS or len(text.split()) > _ISOLATED_WORDS or not text[0].isupper():
        return False
    if text.rstrip("_*")[-1] in ".,;:!?…-–—'’" or _QUOTE_MARKS.intersection(text) or "   " in text:
        return False
    before = next((lines[j].stripped for j in range(line.index - 1, -1, -1) if lines[j].stripped), None)
    if sum(ch.isalpha() for ch in text) < 3 or (before is not None and before.rstrip("_*")[-1:] in tuple(",;:-–—")):
        return False
    return _next_text(lines, line.index, 3) is not None


def _numbered_title(title: str, stop: bool, flat: bool) -> bool:
    """Whether what follows a numeral reads as a chapter's title: not a clause going on (",", ";"), no longer than
    a title (a summary in a flat text), and capitalised when no full stop parts it from the numeral (in "I due
    vecchietti" the "I" is an article)."""
    if title.rstrip().endswith((",", ";")) or len(title) > (_MAX_SUMMARY if flat else _MAX_NUMBERED_TITLE):
        return False
    return stop or title[0].isupper()


def _block(lines: list[_Line], index: int) -> list[int]:
    """The lines from ``index`` to the next blank line, or one more than a heading may have."""
    block = [index]
    while len(block) <= _MAX_TITLE_LINES and not _blank(lines, block[-1] + 1):
        block.append(block[-1] + 1)
    return block


def _value(numeral: str) -> int:
    if numeral.isdigit():
        return int(numeral)
    values = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100, "D": 500, "M": 1000}
    total = 0
    for a, b in zip(numeral, numeral[1:] + " "):
        total += -values[a] if b != " " and values[a] < values[b] else values[a]
    return total


def _plausible(candidates: list[_Candidate], lines: list[_Line]) -> list[_Candidate]:
    """Numeral styles kept only when they count like chapters (see ``_MIN_RUN``); keyword headings all kept."""
    by_style: dict[tuple[str, ...], list[_Candidate]] = defaultdict(list)
    for candidate in candidates:
        by_style[candidate.style].append(candidate)
    kept: set[tuple[str, ...]] = set()
    for style, group in by_style.items():
        if style[0] == "keyword" or _counts_up(group, lines):
            kept.add(style)
    for alone, titled in _mixed_pairs(by_style, kept):
        group = sorted(by_style[alone] + by_style[titled], key=lambda c: c.line)
        if _counts_up(group, lines, _MIN_GAP // 2):
            for candidate in by_style[alone]:
                candidate.style = titled
            kept.add(titled)
    return [candidate for candidate in candidates if candidate.style in kept]


def _without_title_page_parts(candidates: list[_Candidate]) -> list[_Candidate]:
    """Candidates less the part headings of a style that all stand before the first chapter, two or more: lines of
    a title page ("TOME XXXIII", then "TOME XXXIII." over "ROMANS. TOME I."), where a book's parts each open
    with chapters after them."""
    first_chapter = min((c.line for c in candidates if c.rank >= 1), default=None)
    if first_chapter is None:
        return candidates
    parts: dict[tuple[str, ...], list[int]] = defaultdict(list)
    for candidate in candidates:
        if candidate.style[:2] == ("keyword", "major"):
            parts[candidate.style].append(candidate.line)
    front = {style for style, at in parts.items() if len(at) >= 2 and max(at) < first_chapter}
    return [candidate for candidate in candidates if candidate.style not in front]


def _mixed_pairs(by_style: dict[tuple[str, ...], list[_Candidate]],
                 kept: set[tuple[str, ...]]) -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
    """(numerals alone, numerals with a title) styles of one kind of numeral, neither kept on its own: the
    headings of a book whose sections have a title or not ("I.  MELIBOEUS, TITYRUS", then "II."), which
    count up only together."""
    return [(alone, ("numbered", alone[2])) for alone in by_style
            if alone[0] == "numeral" and not alone[1] and alone[3] == "." and alone not in kept
            and ("numbered", alone[2]) in by_style and ("numbered", alone[2]) not in kept]


def _counts_up(group: list[_Candidate], lines: list[_Line], min_gap: int = _MIN_GAP) -> bool:
    """Whether the group counts up from one like chapters, restarting at one after a part's last chapter (one
    after one is no count: "I Hear America Singing", "I Sing the Body Electric" are poems' first words). Numerals
    alone and numerals with a title that count up only together (``_mixed_pairs``) need half the gap: two looks
    in alternation are no list."""
    numbers = [candidate.number or 0 for candidate in group]
    if len(group) < _MIN_RUN or numbers[0] != 1:
        return False
    steps = sum(1 for a, b in zip(numbers, numbers[1:]) if b == a + 1 or b == 1 < a)
    gaps = sorted(lines[b.line].offset - lines[a.line].offset for a, b in zip(group, group[1:]))
    return steps >= 0.8 * (len(group) - 1) and gaps[len(gaps) // 5] >= min_gap


def _attach_titles(candidates: list[_Candidate], lines: list[_Line], flat: bool) -> set[int]:
    """A heading without its own title takes the short line below it as one ("CHAPTER I" / "JONATHAN HARKER'S
    JOURNAL", "I." / "THE EVE OF THE WAR."); returns the lines so taken. A word that heads a section alone
    ("Introduction", "Conclusion.") right below a chapter's numeral or bare keyword is that chapter's title, not a heading
    of its own ("I" / "Introduction"). Where most bare headings of a style stand over a short block of a line to
    three (a subtitle: "CHAPITRE II." / "Ce que devint Candide parmi les Bulgares."), each takes its block, title
    case or not, so the contents read alike. In a flat text a numeral alone among numerals with a summary ("I."
    above "Come andò che maestro Ciliegia ... trovò un pezzo di legno", then "III Geppetto, tornato a casa, ...")
    takes the summary line below it, as the others have theirs on their line."""
    heading_lines = {candidate.line for candidate in candidates}
    alone_lines = {candidate.line for candidate in candidates if candidate.style[-1] == "alone"}
    consumed: set[int] = set()
    subtitles = _subtitle_blocks(candidates, lines, heading_lines, flat)
    for candidate in candidates:
        text = lines[candidate.line].stripped
        summary = flat and candidate.style[0] == "numbered" and _NUMERAL_LINE.match(text) is not None
        if candidate.line in consumed or candidate.title_lines or (candidate.style[0] == "numbered" and not summary) or (
                candidate.style[0] == "keyword" and not _bare(text)):
            continue
        if candidate.line in subtitles:
            candidate.title_lines.extend(subtitles[candidate.line])
            consumed.update(subtitles[candidate.line])
            continue
        following = _next_text(lines, candidate.line)
        if following is None or not _apart(lines, following + 1, flat):
            continue
        if following in alone_lines and candidate.rank == 1 and candidate.style[-1] != "alone":
            candidate.title_lines.append(following)
            consumed.add(following)
        elif following not in heading_lines and (_looks_like_title(lines[following].stripped)
                                                 or (summary and _is_summary(lines[following].stripped))):
            candidate.title_lines.append(following)
            consumed.add(following)
    return consumed


def _subtitle_blocks(candidates: list[_Candidate], lines: list[_Line], heading_lines: set[int],
                     flat: bool) -> dict[int, list[int]]:
    """The subtitle block under each bare keyword heading of a style when four in five of the style's headings
    (three at least) have one, and half of those stand over a longer block: a chapter's first paragraph is that
    short far less often, and a poem's stanzas are all alike."""
    by_style: dict[tuple[str, ...], list[_Candidate]] = defaultdict(list)
    for candidate in candidates:
        if (not flat and candidate.style[0] == "keyword" and candidate.style[-1] != "alone"
                and not candidate.title_lines and _bare(lines[candidate.line].stripped)):
            by_style[candidate.style].append(candidate)
    blocks: dict[int, list[int]] = {}
    for group in by_style.values():
        found = {c.line: block for c in group if (block := _subtitle_block(lines, c.line, heading_lines))}
        longer = sum(_block_chars(lines, block[-1]) > _MAX_SUBTITLE for block in found.values())
        if len(group) >= _MIN_RUN and len(found) >= 0.8 * len(group) and 2 * longer >= len(found):
            blocks.update(found)
    return blocks


def _block_chars(lines: list[_Line], end: int) -> int:
    """The characters of the block of lines after the one that ends at line ``end``: a subtitle is followed by
    paragraphs longer than it, a canto's first tercet by another tercet."""
    start = _next_text(lines, end, 6)
    if start is None:
        return 0
    block = _block(lines, start)
    return sum(len(lines[j].stripped) for j in block) if len(block) <= _MAX_TITLE_LINES else _MAX_SUBTITLE + 1


def _subtitle_block(lines: list[_Line], heading: int, heading_lines: set[int]) -> list[int]:
    """The block of one to three lines under a heading, between blank lines, that reads as a subtitle: starting
    with a capital, at most two sentences and ``_MAX_SUBTITLE`` characters; else nothing."""
    first = _next_text(lines, heading, 3)
    if first is None or first in heading_lines or not _blank(lines, first - 1):
        return []
    block = [first]
    while not _blank(lines, block[-1] + 1):
        if len(block) == _MAX_HEADING_LINES or block[-1] + 1 in heading_lines:
            return []
        block.append(block[-1] + 1)
    text = " ".join(lines[j].stripped for j in block)
    if len(text) > _MAX_SUBTITLE or not _is_summary(text) or _QUOTE_MARKS.intersection(text[:1]):
        return []
    return block


def _bare(text: str) -> bool:
    """True for a keyword heading that is a keyword and number alone ("CHAPTER I", "Chapter 1.", "STAVE ONE")."""
    keyword = _KEYWORD_LINE.match(text)
    return keyword is None or not (keyword.group("title") or keyword.group("caps"))


def _is_summary(text: str) -> bool:
    """A chapter's summary line: one sentence or two, of at most ``_MAX_SUMMARY`` characters, starting with a
    capital (a line of dialogue opens with a dash or a quotation mark)."""
    sentences = re.findall(r"[.!?…](?:\s|$)", text)
    return 0 < len(text) <= _MAX_SUMMARY and text[0].isupper() and len(sentences) <= 2


def _looks_like_title(text: str) -> bool:
    """A short line in capitals or in title case, not the first sentence of a chapter ("It was night.")."""
    if not 0 < len(text) <= 70 or text.endswith((",", ";", ":")) or not text[0].isalpha() and text[0] not in "_(":
        return False
    letters = [ch for ch in text if ch.isalpha()]
    if letters and all(ch.isupper() for ch in letters):
        return True
    words = [w for w in re.findall(r"\w+", text) if len(w) >= 4]
    return bool(words) and sum(w[0].isupper() for w in words) >= 0.6 * len(words)


def _part_titles(candidates: list[_Candidate], lines: list[_Line], consumed: set[int], lo: int,
                 hi: int, flat: bool) -> list[_Candidate]:
    """Lines in capitals standing right above a chapter heading: the title of the part it opens ("INFERNO").
    Two at least: one alone is the title page's last line ("DRACULA", the author's name) above chapter one."""
    starts = {candidate.line for candidate in candidates if candidate.rank >= 1}
    taken = {candidate.line for candidate in candidates} | consumed
    parts: list[_Candidate] = []
    for line in lines:
        if line.index in taken or not lo <= line.offset < hi or not _apart(lines, line.index - 1, flat):
            continue
        if not _is_caps_title(line.stripped) or not _apart(lines, line.index + 1, flat):
            continue
        if _next_text(lines, line.index, 6) in starts:
            parts.append(_Candidate(line.index, ("caps",), 0))
    return parts if len(parts) >= 2 else []


def _is_caps_title(title: str) -> bool:
    return title.isupper() and len(title) <= 80 and len(title.split()) <= 8 and sum(map(str.isalpha, title)) >= 3


def _levelled(candidates: list[_Candidate], lines: list[_Line]) -> list[Heading]:
    """Headings in reading order. Parts are level 0, chapters 1, scenes 2; numeral styles without a keyword go
    under the keyword chapters when there are any, each style under the ones that began before it ("— I —" parts
    above "[ 1 ]" episodes, "I. A SCANDAL IN BOHEMIA" above its "I." sections)."""
    firsts: dict[tuple[str, ...], int] = {}
    for candidate in sorted(candidates, key=lambda c: c.line):
        if candidate.style[0] in ("numeral", "numbered"):
            firsts.setdefault(candidate.style, candidate.line)
    has_chapters = any(c.style[0] == "keyword" and c.rank == 1 and c.style[-1] != "alone" for c in candidates)
    base = 2 if has_chapters else 1
    ranks = {style: base + n for n, style in enumerate(sorted(firsts, key=firsts.__getitem__))}
    headings = []
    for candidate in sorted(candidates, key=lambda c: c.line):
        line = lines[candidate.line]
        title = _shown(" ".join(" ".join([line.stripped, *(lines[i].stripped for i in candidate.title_lines)]).split()))
        level = ranks.get(candidate.style, candidate.rank)
        headings.append(Heading(level, title, line.offset + line.text.index(line.stripped[0])))
    return headings


def _shown(title: str) -> str:
    """The title as the contents show it: without footnote marks ("d'Eldorado[1]."), cut at a word with an
    ellipsis past ``_MAX_SHOWN_TITLE`` characters."""
    title = _NOTE_MARKS.sub("", title)
    if len(title) <= _MAX_SHOWN_TITLE:
        return title
    cut = title[:_MAX_SHOWN_TITLE - 1]
    if " " in cut:
        cut = cut[:cut.rindex(" ")]
    return cut.rstrip(" ,;:.-–—") + "…"


# ----------------------------------------------------------------------------------------------------------
# the contents list


def _norm(text: str) -> str:
    """Casefolded letters and digits, single-spaced: what a contents line and its heading share, as e-readers
    match them. Apostrophes and quotation marks, straight or typographic, are dropped rather than spaced, so a
    list's "THE MERMAID'S LAGOON" finds the heading "THE MERMAIDS' LAGOON"; other punctuation parts words."""
    folded = _APOSTROPHES.sub("", unicodedata.normalize("NFKC", text).casefold())
    return " ".join(_NOT_WORD.sub(" ", folded).split())


def _initial(text: str) -> str:
    """The first letter or digit of ``text``, casefolded: a cheap test before :func:`_norm`."""
    return next((ch for ch in text if ch.isalnum()), "").casefold()


def _entry(text: str) -> str:
    return _norm(_PAGE_NUMBER.sub("", _BULLET.sub("", text, count=1)))


def _contents(lines: list[_Line], first: int, hi: int) -> tuple[int, int] | None:
    """[start, end) of the contents list: a "Contents" line in the front third of the book and the short lines
    under it, up to where its first entry comes back as a heading or, failing that, two blank lines."""
    limit = min(len(lines), first + max(400, (bisect.bisect_left([l.offset for l in lines], hi) - first) // 3))
    for index in range(first, limit):
        if not _CONTENTS_TITLE.match(lines[index].text):
            continue
        entries = _entry_lines(lines, index, hi)
        if len(entries) >= 2:
            return lines[index].offset, lines[entries[-1]].offset + len(lines[entries[-1]].text)
    return None


def _entry_lines(lines: list[_Line], title: int, hi: int) -> list[int]:
    """The lines of the list under a contents title: up to where its first entry comes back as a heading, else up
    to the first two blank lines, when they read as a list (a "Contents" section of prose is no list)."""
    first = _next_text(lines, title, 6)
    if first is None or lines[first].offset >= hi:
        return []
    back = _comes_back(lines, first, hi)
    stop = back if back is not None else _gap_end(lines, first, hi)
    entries = [j for j in range(first, stop) if lines[j].stripped and not _UNDERLINE.match(lines[j].text)]
    if back is None and sum(_listed(lines[j].stripped) for j in entries) < 0.8 * len(entries):
        return []
    return entries


def _listed(text: str) -> bool:
    """A line that reads as a contents entry on its own: a bullet, a number, a chapter keyword, a page number."""
    return bool(_LIST_ITEM.match(text) or _KEYWORD_LINE.match(text) or _ALONE_LINE.match(text)
                or _PAGE_NUMBER.search(text) or re.search(r"\s\d{1,4}$", text))


def _comes_back(lines: list[_Line], first: int, hi: int) -> int | None:
    """The line, after the list, where its first entry is printed again as a heading (one line or two)."""
    entry = _entry(lines[first].text)
    for j in range(first + 1, min(len(lines), first + _MAX_CONTENTS_LINES)):
        line = lines[j]
        if line.offset >= hi:
            return None
        if not line.stripped or not _blank(lines, j - 1):
            continue
        following = _next_text(lines, j, 2)
        joined = _entry(f"{line.text} {lines[following].text}") if following is not None else ""
        if entry in (_entry(line.text), joined):
            return j
    return None


def _gap_end(lines: list[_Line], first: int, hi: int) -> int:
    """The line after the list's last entry: before two blank lines, a line of prose or the 1,000th line."""
    blanks = 0
    for j in range(first, min(len(lines), first + _MAX_CONTENTS_LINES)):
        line = lines[j]
        if line.offset >= hi or len(line.stripped) > 200:
            return j
        blanks = blanks + 1 if not line.stripped else 0
        if blanks >= 2:
            return j
    return min(len(lines), first + _MAX_CONTENTS_LINES)


def _with_contents(found: list[Heading], lines: list[_Line], contents: tuple[int, int], hi: int) -> list[Heading]:
    """``found`` with a heading wherever a contents entry comes back after the list (as one line, or as the two
    lines "Chapter I." / "PETER BREAKS THROUGH"), in order; nothing is added unless half the entries come back."""
    start, end = contents
    offsets = [line.offset for line in lines]
    first, after = bisect.bisect_left(offsets, start), bisect.bisect_left(offsets, end)
    entry_lines = [line for line in lines[first:after] if line.stripped][1:]
    entries = [e for e in (_entry(line.text) for line in entry_lines if not _UNDERLINE.match(line.text)) if e]
    initials = {entry[0] for entry in entries}
    index: dict[str, list[int]] = defaultdict(list)
    for line in lines[after:bisect.bisect_left(offsets, hi)]:
        text = line.text
        if not text or len(text) > 120 or not _blank(lines, line.index - 1) or _initial(text) not in initials:
            continue
        index[_norm(text)].append(line.index)
        following = _next_text(lines, line.index, 3)
        if following is not None:
            index[_norm(line.text + " " + lines[following].text)].append(line.index)
    matched: list[int] = []
    last = -1
    for entry in entries:
        hits = index.get(entry, [])
        position = bisect.bisect_right(hits, last)
        if position < len(hits):
            last = hits[position]
            matched.append(last)
    if len(matched) < max(2, len(entries) // 2):
        return found
    at = {heading.offset for heading in found}
    starts = [heading.offset for heading in found]
    added = []
    for line_index in matched:
        line = lines[line_index]
        offset = line.offset + line.text.index(line.stripped[0])
        if offset in at:
            continue
        following = _next_text(lines, line_index, 3)
        title = line.stripped
        if following is not None and _norm(title) not in entries:
            title = f"{title} {lines[following].stripped}"
        neighbour = bisect.bisect_left(starts, offset)
        level = found[min(neighbour, len(found) - 1)].level if found else 0
        added.append(Heading(level, title, offset))
    return sorted(found + added, key=lambda heading: heading.offset)


# ----------------------------------------------------------------------------------------------------------
# the book's span


def front_lists(text: str) -> list[tuple[int, int]]:
    """[start, end) of each list of illustrations (plates, figures, maps) in ``text``'s front third: a page of an
    EPUB's front matter that lists captions without linking to them."""
    return _front_lists(_lines(text), 0, len(text))


def _front_lists(lines: list[_Line], first: int, hi: int) -> list[tuple[int, int]]:
    """[start, end) of each list of illustrations in the front third of the book (at most ``_MAX_CONTENTS_LINES``
    lines on): its title and the short lines under it, up to two blank lines."""
    limit = min(len(lines), first + max(400, (bisect.bisect_left([l.offset for l in lines], hi) - first) // 3),
                first + _MAX_CONTENTS_LINES)
    found: list[tuple[int, int]] = []
    for index in range(first, limit):
        if not _FRONT_LIST_TITLE.match(lines[index].text):
            continue
        entry = _next_text(lines, index, 6)
        if entry is None or lines[entry].offset >= hi:
            continue
        stop = _gap_end(lines, entry, hi)
        entries = [j for j in range(entry, stop) if lines[j].stripped and not _UNDERLINE.match(lines[j].text)]
        if len(entries) >= 2 and all(len(lines[j].stripped) <= 120 for j in entries):
            found.append((lines[index].offset, lines[entries[-1]].offset + len(lines[entries[-1]].text)))
    return found


def _body(text: str, headings: list[Heading], lo: int, hi: int, contents: tuple[int, int] | None,
          front_lists: Sequence[tuple[int, int]] = ()) -> tuple[int, int]:
    """[lo, hi) narrowed past the front matter and a transcriber's note at the end.

    The front: the title page (and an edition note or dedication) with the contents list after it, when what
    precedes the list is short, and a list of illustrations after either (``front_lists``); with no list, in a Gutenberg text (``lo > 0``), a short title page before the
    first heading (elsewhere that is a short first section: "# Notes" / "Two lines." / "## Part one"). A longer
    text before the list is a preface, and the book starts there."""
    start = lo
    first_heading = headings[0].offset if headings else None
    if contents is not None and _short(text, lo, contents[0]):
        start = _next_line(text, contents[1])
    elif contents is None and first_heading is not None and len(headings) >= 2 and lo > 0:
        head_end = _title_heading_end(text, headings, lo)
        if _short(text, head_end, first_heading if head_end == lo else headings[1].offset):
            start = first_heading if head_end == lo else headings[1].offset
    if lo > 0:  # a Gutenberg text: its production credits, when they open the book, are not the book
        credits = [match for match in _PRODUCED.finditer(text, start, min(hi, start + _FRONT_CHARS))
                   if _short(text, start, match.start())]
        if credits:
            start = max(start, _paragraph_end(text, credits[-1].start(), hi))
    for list_start, list_end in front_lists:  # a list of illustrations right after the title page or contents
        if list_start >= start and _short(text, start, list_start):
            start = _next_line(text, list_end)
    note = _TRANSCRIBER.search(text, start, hi)
    if note is not None and (first_heading is None or note.start() < first_heading) and _short(text, start,
                                                                                                note.start()):
        start = max(start, _paragraph_end(text, note.start(), hi))
    end = hi
    last_note = None
    for match in _TRANSCRIBER.finditer(text, start, hi):
        last_note = match
    if last_note is not None and hi - last_note.start() <= _BACK_NOTE_CHARS and last_note.start() > start:
        end = last_note.start()
    return start, max(start, end)


def _title_heading_end(text: str, headings: list[Heading], lo: int) -> int:
    """``lo``, or past the first heading when it opens the text (a Markdown ``# Title``) and a second follows."""
    if len(headings) >= 2 and not text[lo:headings[0].offset].strip():
        return text.find("\n", headings[0].offset) + 1 or len(text)
    return lo


def _short(text: str, a: int, b: int) -> bool:
    return b >= a and len("".join(text[a:b].split())) <= _FRONT_CHARS


def _next_line(text: str, offset: int) -> int:
    newline = text.find("\n", offset)
    return len(text) if newline < 0 else newline + 1


def _paragraph_end(text: str, offset: int, hi: int) -> int:
    """The end of the block starting at ``offset``: the next two blank lines, or a closing bracket's line."""
    gap = re.compile(r"\n[ \t]*\n[ \t]*\n")
    match = gap.search(text, offset, hi)
    return match.end() if match else hi
