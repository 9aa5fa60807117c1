"""Deterministic checks of a model's answer against what this turn's tools actually returned.

The model cites spans by copying position tags out of tool results. Nothing it writes is trusted:
a tag survives only if it appeared verbatim in this turn's tool results (``Evidence``) and still
resolves to text; every other tag-like string is removed from the answer and reported with a
reason. Two cheap heuristics then *report*, never remove: sentences that assert something with no
citation, and quotations that do not appear in the cited text.

Tag-like groups are bracket groups that start like a tag, ``[f`` or ``[F`` and a digit, and hold
only digits, ``f``/``F``, blanks, dashes and ``,;:`` (at most ``MAX_TAG_LENGTH`` characters).
One scanner (``_TagScanner``) filters them for ``verify_answer``, ``strip_tags`` and
``StreamingTagFilter``, so a streamed answer reads exactly like the final one, and every
well-formed tag left in the filtered text is a verified one.

Models do not always write the canonical form. Where a front end numbers the passages it shows (the proxy's
``[1] (source=...)`` items), a :class:`CitationForms` lets the same scanner read the common other forms as the
canonical tag they stand for: ``[1]``, ``[1, 2]``, ``[1][2]`` (the n-th item), ``(f1-2-9)``, ``【f1-2-9】``,
``[source: f1-2-9]`` and a bare ``f1-2-9``. Each is read only when it names this turn's evidence (an item
number in range, a tag the evidence holds), and never inside Markdown code; anything else is left as text.

A kept span becomes a :class:`Citation`: the one citation type of every front end (the CLI's ``ask --json``,
the reader's answers, chats and exports, the proxy's chat completions and Responses, whichever answer path made
it), so each sends the same fields, and the server's OpenAPI document describes them once.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from difflib import SequenceMatcher
from functools import lru_cache
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from .errors import ChapterverseError, TagError
from .positions import TAG_PATTERN, ResolvedSpan, Span, find_tags, parse_tag
from .support import supports

__all__ = [
    "QUOTE_MATCH_THRESHOLD",
    "MIN_QUOTE_WORDS",
    "MIN_CLAIM_WORDS",
    "MAX_TAG_LENGTH",
    "ResolvedSpan",
    "Resolver",
    "SpanSource",
    "library_resolver",
    "Evidence",
    "Citation",
    "number_citations",
    "DroppedTag",
    "DropReason",
    "VerifiedAnswer",
    "verify_answer",
    "SupportedText",
    "drop_unsupported",
    "StreamingTagFilter",
    "CitationForms",
    "strip_tags",
]

QUOTE_MATCH_THRESHOLD = 0.9
"""Least similarity (difflib ratio against the best-aligned window of the cited text) for a quote
that is not an exact substring after folding. Roughly one character in ten may differ: a typo
passes in any quote, a changed short word only in a quote of a few dozen characters or more."""

MIN_QUOTE_WORDS = 3
"""Shorter quoted strings are usually titles, terms or scare quotes, not quotations."""

MIN_CLAIM_WORDS = 6
"""Shorter sentences are usually headings, lead-ins or fragments rather than claims."""

MAX_TAG_LENGTH = 64
"""Longest tag-like group, brackets included: bounds what the streaming filter holds back. Real tags
are under 30 characters; 64 leaves room for a short group such as ``[f3-10-90, f3-95-160]``."""

DropReason = Literal["not_in_evidence", "malformed", "out_of_range", "does_not_support"]

_TAG_BODY = r"[\d \tfF,;:\-\u2010-\u2015]"
_TAG_OPEN = re.compile(rf"\[[fF]\d{_TAG_BODY}*")
_TAG_PREFIX = re.compile(rf"\[(?:[fF](?:\d{_TAG_BODY}*)?)?")
_WELL_FORMED_START = re.compile(r"\[f\d+(?:-\d+)?(?:-\d*)?")
_OPEN_TAIL = re.compile(r"\[(?:f(?:\d+(?:-\d+)?(?:-\d*)?)?)?$")
_KEY_LIST = re.compile(r"f\d+-\d+-\d+(?:\s*[,;]\s*f\d+-\d+-\d+)+")
_KEY_SEPARATOR = re.compile(r"\s*[,;]\s*")
_BLANKS = " \t"
_LIST_SEPARATORS = frozenset(",;")
_CLAUSE_END = frozenset(".,;:!?)]}»”’\"'…")

_KEY = r"f\d{1,15}-\d{1,15}-\d{1,15}"
_KEYS = rf"{_KEY}(?:[ \t]*[,;][ \t]*{_KEY})*"
_LABEL = r"[^\W\d_]{1,12}(?:[ \t]*[:=][ \t]*|[ \t]+)"
_VARIANT = re.compile(rf"\[(?P<numbers>\d{{1,3}}(?:[ \t]*[,;][ \t]*\d{{1,3}})*)\]|\[{_LABEL}(?P<labelled>{_KEYS})\]"
                      rf"|\((?:{_LABEL})?(?P<parenthesized>{_KEYS})\)|【(?:{_LABEL})?(?P<lenticular>{_KEYS})】"
                      rf"|(?P<bare>{_KEY})")
_INNER_PREFIX = r"(?:[^\W\d_]{1,12}[ \t]*[:=]?[ \t]*)?(?:f(?:\d[\d \t,;f\-]*)?)?"
_VARIANT_PREFIX = re.compile(rf"\[(?:\d[\d \t,;]*|{_INNER_PREFIX})|[(【]{_INNER_PREFIX}|f(?:\d[\d\-]*)?")
"""What could still become a variant (loosely; :data:`_VARIANT` decides once the group is closed)."""
_CLOSERS = {"[": "]", "(": ")", "【": "】"}
_BARE_GLUE = frozenset("_-/#=&")
"""Characters that, right before ``f1-2-9`` or right after it, make it part of something else (a URL, a name)."""


Resolver = Callable[[Span], ResolvedSpan | None]
"""Returns the span's text and metadata, or None when the file is unknown or the range is out of it."""


class SpanSource(Protocol):
    """What tags are resolved against (``Library`` is one)."""

    def resolve(self, tag: str | Span) -> ResolvedSpan: ...


def library_resolver(library: SpanSource) -> Resolver:
    """The :data:`Resolver` of ``library``: a tag it holds no span of, or cannot read now (its document removed
    meanwhile), resolves to None and is dropped from the answer rather than failing it."""

    def resolve(span: Span) -> ResolvedSpan | None:
        try:
            return library.resolve(span)
        except ChapterverseError:
            return None

    return resolve


@dataclass(slots=True)
class Evidence:
    """The spans this turn's tool results showed the model; only these may be cited.

    Tags from earlier turns are deliberately absent: a model that repeats one has not re-read it.
    """

    resolve: Resolver
    _spans: set[Span] = field(default_factory=set, init=False, repr=False)
    _resolved: dict[Span, ResolvedSpan | None] = field(default_factory=dict, init=False, repr=False)

    def add_text(self, tool_result_text: str) -> None:
        """Record every well-formed tag that appears verbatim in one tool result."""
        self._spans.update(find_tags(tool_result_text))

    def __contains__(self, span: object) -> bool:
        return span in self._spans

    def lookup(self, span: Span) -> ResolvedSpan | None:
        """The resolver's answer for ``span``, asked once per span and turn."""
        if span not in self._resolved:
            self._resolved[span] = self.resolve(span)
        return self._resolved[span]


@dataclass(frozen=True, slots=True)
class DroppedTag:
    """A tag removed from the answer: ``tag`` as the model wrote it (brackets included)."""

    tag: str
    reason: DropReason


class Citation(BaseModel):
    """One distinct cited span, numbered in order of first appearance in the answer; the same type, and so
    the same JSON, in every front end and from every answer path.

    Answers are kept with their chats and read back by later versions: a field added later has a default, and
    one a later version retires passes through (``extra="allow"``) rather than failing the whole chat.
    """

    model_config = ConfigDict(extra="allow")

    n: int = Field(description="Footnote number: order of first appearance in the answer.")
    tag: str = Field(description="Position tag key, f<file id>-<start>-<end> (code points); the answer cites it "
                                 "as [tag].")
    doc_id: int
    doc_title: str
    text: str = Field(description="Exactly the text the tag names.")
    toc_path: list[str] = Field(default_factory=list, description="The chapter and section it is in.")
    file: int = Field(default=0, description="The tag's file id (0 only in answers kept before it was sent).")
    start: int = Field(default=0, description="The tag's start offset in that file's text, in code points.")
    end: int = Field(default=0, description="The tag's end offset (exclusive).")
    source: str | None = Field(
        default=None, description="The document's source (its file, or its knowledge-base source); null in answers "
                                  "kept before it was sent.")
    chunk_index: int | None = Field(
        default=None, description="Where the span was retrieved as a passage: that chunk's place among its "
                                  "source's chunks; null for a span a model cited out of a tool's result.")
    score: float | None = Field(
        default=None, description="Where the span was retrieved as a passage: that passage's relevance 0..1 "
                                  "(4 decimals); null otherwise.")

    @classmethod
    def of(cls, n: int, span: Span, resolved: ResolvedSpan) -> Citation:
        """The ``n``-th citation, of ``span``, showing what the resolver said of it."""
        return cls(n=n, tag=span.key, doc_id=resolved.doc_id, doc_title=resolved.doc_title, text=resolved.text,
                   toc_path=list(resolved.toc_path), file=span.file, start=span.start, end=span.end,
                   source=resolved.source)

    @property
    def span(self) -> Span:
        return Span(self.file, self.start, self.end)

    def retrieved(self, source: str, chunk_index: int, score: float) -> Citation:
        """This citation of a retrieved passage: the chunk it came from and that passage's relevance."""
        return self.model_copy(update={"source": source, "chunk_index": chunk_index, "score": round(score, 4)})

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


@dataclass(slots=True)
class VerifiedAnswer:
    """An answer with only verified tags left in it, and the report of what was wrong."""

    text: str
    citations: list[Citation]
    dropped_tags: list[DroppedTag]
    unsupported_sentences: list[str]
    unverified_quotes: list[str]
    found: bool
    supported_sentences: list[str] = field(default_factory=list)
    """Sentences that keep at least one tag: each has a citation that holds what it says."""


# --- judging tags --------------------------------------------------------------------------------


def _judge_one(written: str, evidence: Evidence) -> Span | DroppedTag:
    """Keep a tag only if it is well-formed, was shown this turn, and still resolves."""
    if not TAG_PATTERN.fullmatch(written):
        return DroppedTag(written, "malformed")
    try:
        span = parse_tag(written)
    except TagError:
        return DroppedTag(written, "malformed")
    if span not in evidence:
        return DroppedTag(written, "not_in_evidence")
    if evidence.lookup(span) is None:
        return DroppedTag(written, "out_of_range")
    return span


def _judge(written: str, evidence: Evidence) -> list[Span | DroppedTag]:
    """Judge one tag-like group; ``[f1-2-9, f1-12-20]`` is read as two tags because models write it."""
    inner = written[1:-1]
    if _KEY_LIST.fullmatch(inner):
        return [_judge_one(f"[{key}]", evidence) for key in _KEY_SEPARATOR.split(inner)]
    return [_judge_one(written, evidence)]


@dataclass(slots=True)
class _Ledger:
    """Judges tag-like groups in order, remembers the verdicts, and says what replaces each."""

    evidence: Evidence
    keep: bool
    kept: list[Span] = field(default_factory=list)
    dropped: list[DroppedTag] = field(default_factory=list)

    def render(self, written: str) -> str | None:
        """The canonical kept tags (keep mode) or None to drop the group from the text."""
        verdicts = _judge(written, self.evidence)
        spans = [v for v in verdicts if isinstance(v, Span)]
        self.kept.extend(spans)
        self.dropped.extend(v for v in verdicts if isinstance(v, DroppedTag))
        return "".join(s.tag for s in spans) if self.keep and spans else None


@dataclass(frozen=True, slots=True)
class CitationForms:
    """What this turn's other citation forms stand for: ``numbered[n]`` is the span of the n-th passage shown
    (as ``[n]``), ``keys`` the spans whose tag may be written in another bracket or bare.

    Both come from the evidence shown this turn, so a variant never cites anything the canonical form could
    not; the front end leaves out the numbers and tags that the shown passages' own text writes (a footnote
    ``[1]`` copied from a passage is not a citation of item 1).
    """

    numbered: Mapping[int, Span]
    keys: frozenset[Span]

    def canonical(self, written: str, *, numbers: bool) -> str | None:
        """The canonical group ``written`` stands for (``[f1-2-9]``, ``[f1-2-9, f1-12-20]``), or None when it is
        text: not a variant, a number out of range (or ``numbers`` False: not in a citation's place), or no tag
        this turn may cite."""
        match = _VARIANT.fullmatch(written)
        if match is None:
            return None
        if match["numbers"] is not None:
            spans = [self.numbered.get(int(n)) for n in _KEY_SEPARATOR.split(match["numbers"])]
            keys = [s.key for s in spans if s is not None]
            return f"[{', '.join(keys)}]" if numbers and len(keys) == len(spans) else None
        written_keys = _KEY_SEPARATOR.split(next(g for g in match.groups() if g is not None))
        named = any(span in self.keys for span in find_tags("".join(f"[{k}]" for k in written_keys)))
        return f"[{', '.join(written_keys)}]" if named else None


# --- removing tags from text ---------------------------------------------------------------------


def _ends_clause(following: str) -> bool:
    return following == "" or following.isspace() or following in _CLAUSE_END


class _TagScanner:
    """Replaces or drops tag-like groups in a stream of text; the only tag filter there is.

    Text passes through at once except what could still become a tag (``[``, ``[f``, ``[f12-3``…)
    and the blanks (spaces, tabs) before it, which are held until the next character decides.
    ``render(group)`` returns the group's replacement, or None to drop it. When a group is dropped:

    1. the blanks before it go too if what follows it ends a clause (end of text, whitespace,
       closing punctuation): ``x [bad].`` -> ``x.``, ``x [bad] y`` -> ``x y``, ``x [bad]y`` -> ``x y``;
    2. if that leaves the output at the start of a line, blanks after it go too: ``[bad] Hi`` -> ``Hi``;
    3. if the output then ends in something a tag could start with (``[f1-2``), one space separates
       it from what follows, so dropping a group never glues two fragments into a tag;
    4. a comma or semicolon between it and another dropped group goes with them: ``x [a], [b].`` -> ``x.``
       (it is held, with the blanks after it, until the next group is settled or something else comes).

    A held prefix that can no longer become a tag is released as text; one still shaped like the
    start of a well-formed tag when it reaches MAX_TAG_LENGTH is dropped like a malformed tag, since
    releasing it would let an absurdly long tag through unverified.

    With ``forms``, what could still become one of their variants is held the same way (also ``(``,
    ``【`` and a word starting ``f``), and a variant that stands for a citation is rendered as its canonical
    group; one that does not is released as text. Variants are not read inside Markdown code (a backtick
    span, or a fence), and ``[n]`` only where a citation stands: after something on its line (``[1]`` opening
    a line is a list label or a link definition), and not right after a ``]`` of text (``[text][1]`` is a
    Markdown reference link).
    """

    def __init__(self, render: Callable[[str], str | None], forms: CitationForms | None = None) -> None:
        self._render = render
        self._forms = forms
        self._out: list[str] = []
        self._held_tag = ""
        self._blanks = ""
        self._tail = ""
        self._after_drop = False
        self._separator = ""
        """A list separator right after a dropped group, and the blanks after it (rule 4), while held."""
        self._skipping = False
        self._settled = False
        self._code = 0
        """Backticks of the code span or fence the text is in; 0 outside code."""
        self._ticks = 0

    def feed(self, delta: str) -> str:
        """Take the next piece of the stream; return what can be shown now."""
        for char in delta:
            self._step(char)
        return self._take()

    def flush(self) -> str:
        """End the stream; return whatever was still held back."""
        if self._held_tag:
            self._end_held()
        if self._separator:
            self._release_separator()
        if self._after_drop:
            self._after_drop = False
            self._settle_blanks("")
        self._skipping = False
        if self._blanks:
            self._emit("")
        return self._take()

    def _take(self) -> str:
        text = "".join(self._out)
        self._out.clear()
        return text

    def _emit(self, text: str) -> None:
        piece = self._blanks + text
        self._out.append(piece)
        self._blanks = ""
        self._tail = (self._tail + piece)[-MAX_TAG_LENGTH:]
        self._settled = False

    def _step(self, char: str) -> None:
        if self._held_tag:
            self._extend_tag(char)
            return
        if self._separator:
            if char in _BLANKS:
                self._separator += char
                return
            if self._opens(char):
                self._track_code(char)
                self._held_tag = char
                return
            self._release_separator()
        elif self._after_drop and char in _LIST_SEPARATORS:
            self._separator = char
            return
        if self._after_drop:
            self._after_drop = False
            self._settle_blanks(char)
        if self._skipping and char in _BLANKS:
            return
        self._skipping = False
        self._track_code(char)
        self._plain(char, tag_start=True)

    def _track_code(self, char: str) -> None:
        """Follow Markdown code: a run of backticks opens a span that a run as long closes (a fence, three or
        more, also a longer run); a line break ends a backtick span, so a stray backtick costs one line."""
        if char == "`":
            self._ticks += 1
            return
        if self._ticks:
            if not self._code:
                self._code = self._ticks
            elif self._ticks == self._code or self._ticks > self._code >= 3:
                self._code = 0
            self._ticks = 0
        if char == "\n" and self._code < 3:
            self._code = 0

    def _settle_blanks(self, following: str) -> None:
        """Rules 1-3 above, once the character after a dropped group is known."""
        if _ends_clause(following):
            self._blanks = ""
        if not self._blanks and _OPEN_TAIL.search(self._tail):
            self._blanks = " "
        self._skipping = not self._blanks and (self._tail == "" or self._tail.endswith("\n"))

    def _plain(self, char: str, *, tag_start: bool) -> None:
        if tag_start and self._opens(char):
            self._held_tag = char
        elif char in _BLANKS:
            self._blanks += char
        else:
            self._emit(char)

    def _opens(self, char: str) -> bool:
        """``char`` may start a group: ``[`` always; with forms outside code ``(``, ``【`` and a word's ``f``."""
        if char == "[":
            return True
        if self._forms is None or self._code:
            return False
        if char == "f":
            before = self._tail[-1:] if not self._blanks else " "
            return not (before.isalnum() or before in _BARE_GLUE)
        return char in _CLOSERS

    def _extend_tag(self, char: str) -> None:
        held, candidate = self._held_tag, self._held_tag + char
        if char == "]" and _TAG_OPEN.fullmatch(held):
            self._held_tag = ""
            self._settle(candidate)
        elif self._forms is not None and char == _CLOSERS.get(held[0]):
            self._read_variant(candidate)
        elif self._forms is not None and held[0] == "f" and not (char.isalnum() or char in _BARE_GLUE):
            self._read_variant(held)
            self._step(char)
        elif not (_TAG_PREFIX.fullmatch(candidate)
                  or (self._forms is not None and _VARIANT_PREFIX.fullmatch(candidate))):
            self._release()
            self._step(char)
        elif len(candidate) < MAX_TAG_LENGTH:
            self._held_tag = candidate
        elif _WELL_FORMED_START.fullmatch(held):
            self._held_tag = ""
            self._settle(held)
            self._step(char)
        else:
            self._release()
            self._step(char)

    def _end_held(self) -> None:
        """The text ended while a group was held: a bare tag is complete, anything else is text."""
        if self._forms is not None and self._held_tag[0] == "f":
            self._read_variant(self._held_tag)
        else:
            self._release()

    def _read_variant(self, written: str) -> None:
        """Settle ``written`` as the canonical group it stands for, or release it as text."""
        assert self._forms is not None
        canonical = None if self._code else self._forms.canonical(written, numbers=self._citation_place())
        self._held_tag = written if canonical is None else ""
        if canonical is None:
            self._release()
        else:
            self._settle(canonical)

    def _citation_place(self) -> bool:
        """A ``[n]`` here can be a citation: something precedes it on its line, and not a ``]`` of text."""
        line_start = self._tail == "" or self._tail.endswith("\n")
        return not line_start and not (self._tail.endswith("]") and not self._settled)

    def _release_separator(self) -> None:
        """What followed a dropped group's separator is no dropped group: the separator is text after it (rules
        1-3 settled by it), and the blanks after it are held as any blanks are."""
        separator, self._separator = self._separator, ""
        self._after_drop = False
        self._settle_blanks(separator[0])
        self._skipping = False
        self._emit(separator[0])
        self._blanks = separator[1:]

    def _release(self) -> None:
        """The held prefix cannot become a tag: it is text (and holds no other ``[``)."""
        if self._separator:
            self._release_separator()
        held, self._held_tag = self._held_tag, ""
        for char in held:
            self._plain(char, tag_start=False)

    def _settle(self, written: str) -> None:
        replacement = self._render(written)
        if replacement is None:
            self._separator = ""  # between two dropped groups: it goes with them (rule 4)
            self._after_drop = True
        else:
            if self._separator:
                self._release_separator()
            self._emit(replacement)
        self._settled = True


def _filter(text: str, scanner: _TagScanner) -> str:
    return scanner.feed(text) + scanner.flush()


def strip_tags(text: str) -> str:
    """``text`` without any tag-like group, for speech and plain-text output."""
    return _filter(text, _TagScanner(lambda _: None))


class StreamingTagFilter(_TagScanner):
    """Filters the tags of a streamed answer against this turn's evidence, never showing half a tag.

    ``mode="keep"`` emits verified tags (in canonical form) and drops the rest; ``mode="strip"``
    drops every tag (for speech) but still records which were verified. The concatenated output for
    any split of the input equals ``verify_answer(...).text`` (keep) or ``strip_tags`` (strip) of the
    whole text: they run this same scanner. ``forms`` reads this turn's other citation forms too
    (:class:`CitationForms`); a variant becomes what its canonical tag becomes in ``mode``.
    """

    def __init__(self, evidence: Evidence, mode: Literal["keep", "strip"] = "keep",
                 forms: CitationForms | None = None) -> None:
        if mode not in ("keep", "strip"):
            raise ValueError(f"mode must be 'keep' or 'strip', not {mode!r}")
        self._ledger = _Ledger(evidence, keep=mode == "keep")
        super().__init__(self._ledger.render, forms)

    @property
    def kept(self) -> list[Span]:
        """Verified spans in order of appearance (repeats included)."""
        return self._ledger.kept

    @property
    def dropped(self) -> list[DroppedTag]:
        return self._ledger.dropped


# --- folding text for comparison -----------------------------------------------------------------

_FOLD_TABLE = str.maketrans(
    {
        **dict.fromkeys("‘’‚‛‹›`′", "'"),
        **dict.fromkeys("“”„‟«»″", '"'),
        **dict.fromkeys("‐‑‒–—―−", "-"),
    }
)
_SPACES = re.compile(r"\s+")


def _fold(text: str) -> str:
    """Lower-case, accent-free, one quote/apostrophe/dash style, single spaces: what near-verbatim ignores."""
    decomposed = unicodedata.normalize("NFKD", text)
    bare = "".join(c for c in decomposed if not unicodedata.combining(c))
    return _SPACES.sub(" ", bare.casefold().translate(_FOLD_TABLE)).strip()


# --- "not in the source" answers and small talk --------------------------------------------------

_NOT_FOUND = re.compile(
    r"""
      \b(?:does|do|did)(?:\s+not|n't)\s+(?:\w+ly\s+)?
        (?:say|mention|state|specify|contain|include|describe|discuss|address|reveal|tell|explain|
           indicate|give|provide|name|cover)\b
    | \bnot\s+(?:found|mentioned|stated|specified|covered|addressed|discussed|described|given)\s+in\b
    | \b(?:is|are|was|were)\s+not\s+(?:\w+ly\s+)?(?:mentioned|stated|specified|described|discussed|given)\b
    | \b(?:could|can|did)(?:\s*not|n't)\s+find\b
    | \bno\s+(?:mention|information|reference|indication)\s+(?:of|about|on|regarding|in)\b
    | \bthere\s+is\s+no\s+(?:mention|information|reference)\b
    | \bno\s+(?:lo\s+|se\s+)?(?:dice|menciona|especifica|indica|explica|aclara|describe|precisa)\b
    | \bno\s+(?:encuentro|he\s+encontrado|se\s+encuentra|aparece)\b
    | \bno\s+(?:hay|contiene|incluye|ofrece|proporciona)\s+(?:ninguna\s+)?(?:informacion|mencion|referencia|datos)\b
    | \bnon\s+(?:lo\s+|si\s+)?(?:dice|menziona|specifica|indica|spiega|descrive|precisa|riporta|contiene|parla)\b
    | \bnon\s+(?:viene|e|sono)\s+(?:stat[oaie]\s+)?(?:menzionat|specificat|indicat|descritt|riportat)\w*
    | \bnon\s+(?:trovo|ho\s+trovato|si\s+trova|compare|appare)\b
    | \bnon\s+(?:c'e|ci\s+sono|vi\s+e)\s+(?:alcuna\s+)?(?:informazion|menzion|riferiment)\w*
    """,
    re.VERBOSE,
)
_SMALL_TALK = re.compile(
    r"^(?:hello|hi|hey|hola|buenas|buenos\s+dias|ciao|salve|buongiorno|good\s+(?:morning|afternoon|evening))\b"
    r"|\b(?:hope\s+(?:this|that|it)\s+helps|let\s+me\s+know|feel\s+free|happy\s+to\s+help|glad\s+to\s+help"
    r"|espero\s+que\s+(?:esto|te|le|les|os)|no\s+dudes|avisame|fammi\s+sapere|spero\s+che\s+(?:questo|ti|le|sia)"
    r"|non\s+esitare)\b"
)


def _says_not_found(text: str) -> bool:
    return _NOT_FOUND.search(_fold(text)) is not None


# --- sentences -----------------------------------------------------------------------------------

_BOUNDARY = re.compile(r"[.!?…]+[\"'”’»)\]]*")
_TRAILING_TAGS = re.compile(r"(?:\s*\[f\d+-\d+-\d+\])+")
_WORD = re.compile(r"\w+")
_LIST_MARKER = re.compile(r"^\s*(?:[-*+•>]|\d{1,3}[.)])\s+")
_HEADING = re.compile(r"\s*#{1,6}\s")
_ABBREVIATIONS = frozenset(
    "mr mrs ms dr prof st jr sr vs etc cf al fig figs vol vols ch chap p pp no nos ed eds approx ca "
    "sra srta dra ud uds pag pág cap núm num ej sig sigg dott ecc ss vv".split()
)


def _is_abbreviation(line: str, boundary: re.Match[str]) -> bool:
    """A lone period after a known abbreviation or a single letter (an initial) ends no sentence."""
    if boundary.group() != ".":
        return False
    match = re.search(r"\w+$", line[: boundary.start()])
    word = match.group() if match else ""
    return word.casefold() in _ABBREVIATIONS or (len(word) == 1 and word.isalpha())


def _split_line(line: str) -> list[str]:
    """Sentences of one line; tags right after the end punctuation belong to the sentence before."""
    pieces: list[str] = []
    start = 0
    for boundary in _BOUNDARY.finditer(line):
        end = boundary.end()
        glued = end < len(line) and not line[end].isspace() and line[end] != "["
        if boundary.start() < start or glued or _is_abbreviation(line, boundary):
            continue
        if line[end:].lstrip()[:1].islower():
            continue
        tags = _TRAILING_TAGS.match(line, end)
        end = tags.end() if tags else end
        pieces.append(line[start:end].strip())
        start = end
    pieces.append(line[start:].strip())
    return [p for p in pieces if p]


def _sentences(text: str) -> list[str]:
    """Sentences split at end punctuation (abbreviation-aware) and at line breaks; list markers and
    Markdown headings left out.

    Each is a verbatim substring of ``text``, so a front end can find and mark it.
    """
    lines = (_LIST_MARKER.sub("", line, 1) for line in text.splitlines() if not _HEADING.match(line))
    return [sentence for line in lines for sentence in _split_line(line)]


def _is_question(bare: str) -> bool:
    return bare.rstrip(" \"'”’»)*_").endswith("?") or bare.lstrip(" -*>#\"'“«(_").startswith("¿")


def _is_claim(sentence: str) -> bool:
    """Asserts something about the source: long enough, not a question, lead-in, refusal or pleasantry."""
    bare = strip_tags(sentence).strip()
    if len(_WORD.findall(bare)) < MIN_CLAIM_WORDS or _is_question(bare) or bare.endswith(":"):
        return False
    folded = re.sub(r"^\W+", "", _fold(bare))
    return not (_NOT_FOUND.search(folded) or _SMALL_TALK.search(folded))


# --- quotes --------------------------------------------------------------------------------------

_QUOTES = (
    re.compile(r'"([^"\n]+)"'),
    re.compile(r"“([^”\n]+)”"),
    re.compile(r"„([^“”\n]+)[“”]"),
    re.compile(r"«([^»\n]+)»"),
    re.compile(r"(?<!\w)'(?=\w)([^\n]+?)(?<=[\w.,!?…])'(?!\w)"),
    re.compile(r"‘([^\n]+?)’(?!\w)"),
)
_ELLIPSIS = re.compile(r"\s*[\[(]?\.{3,}[\])]?\s*")
_ANCHORS = 3
_BUCKET = 8
_MAX_VOTES_PER_WORD = 200


@dataclass(frozen=True, slots=True)
class _Quote:
    """A quoted string, tags removed, and where its marks stand in the answer."""

    text: str
    start: int
    end: int
    closed: bool = True


_OPENING = re.compile(r'["“„«]')


def _quotations(text: str) -> list[_Quote]:
    """Quoted strings of at least MIN_QUOTE_WORDS words, in order, each once, tags removed; a ``"``, ``“``,
    ``„`` or ``«`` that opens a quote no mark closes on its line quotes the rest of that line (``closed`` False):
    a model that forgot the closing mark still presents the words as the source's."""
    found: list[_Quote] = []
    taken: list[tuple[int, int]] = []
    for pattern in _QUOTES:
        for match in pattern.finditer(text):
            taken.append(match.span())
            quote = strip_tags(match.group(1)).strip()
            if len(_WORD.findall(quote)) >= MIN_QUOTE_WORDS:
                found.append(_Quote(quote, match.start(), match.end()))
    for opening in _OPENING.finditer(text):
        at = opening.start()
        if any(start <= at < end for start, end in taken):
            continue
        line_end = text.find("\n", at)
        line_end = len(text) if line_end < 0 else line_end
        quote = strip_tags(text[at + 1:line_end]).strip().rstrip(" .,;:!?…")
        if len(_WORD.findall(quote)) >= MIN_QUOTE_WORDS:
            found.append(_Quote(quote, at, line_end, closed=False))
            taken.append((at, line_end))
    unique: dict[str, _Quote] = {}
    for placed in sorted(found, key=lambda q: q.start):
        unique.setdefault(placed.text, placed)
    return list(unique.values())


def _window_ratio(needle: str, hay: str, offset: int) -> float:
    """difflib ratio of ``needle`` against the stretch of ``hay`` it aligns with near ``offset``."""
    slack = len(needle) // 5 + _BUCKET
    window = hay[max(0, offset - slack) : offset + len(needle) + slack]
    blocks = [b for b in SequenceMatcher(None, needle, window, autojunk=False).get_matching_blocks() if b.size]
    if not blocks:
        return 0.0
    covered = blocks[-1].b + blocks[-1].size - blocks[0].b
    return 2 * sum(b.size for b in blocks) / (len(needle) + covered)


@lru_cache(maxsize=64)
def _word_offsets(hay: str) -> dict[str, list[int]]:
    offsets: dict[str, list[int]] = {}
    for word in _WORD.finditer(hay):
        offsets.setdefault(word.group(), []).append(word.start())
    return offsets


def _best_window_ratio(needle: str, hay: str) -> float:
    """Best ratio over the few windows of ``hay`` where the needle's words line up.

    Each shared word votes for the offset at which the needle would start there. Only offsets that
    at least a third of the needle's words agree on (give or take a bucket) are compared character
    by character: a near-verbatim quote keeps most words intact, and this keeps long passages cheap.
    """
    votes: Counter[int] = Counter()
    words = list(_WORD.finditer(needle))
    offsets = _word_offsets(hay)
    for word in words:
        for at in offsets.get(word.group(), [])[:_MAX_VOTES_PER_WORD]:
            votes[(at - word.start()) // _BUCKET] += 1
    support = {bucket: votes[bucket - 1] + votes[bucket] + votes[bucket + 1] for bucket in list(votes)}
    anchors = sorted((b for b in support if support[b] * 3 >= len(words)), key=lambda b: (-support[b], b))
    return max((_window_ratio(needle, hay, bucket * _BUCKET) for bucket in anchors[:_ANCHORS]), default=0.0)


def _near_verbatim(needle: str, hay: str) -> bool:
    return needle in hay or _best_window_ratio(needle, hay) >= QUOTE_MATCH_THRESHOLD


def _quote_supported(quote: str, sources: list[str]) -> bool:
    """Every ellipsis-separated part of the folded quote is near-verbatim in one folded source."""
    parts = [p for p in _ELLIPSIS.split(_fold(quote)) if p]
    return any(all(_near_verbatim(part, source) for part in parts) for source in sources)


def _unclosed_quote_supported(quote: str, sources: list[str]) -> bool:
    """A quote with no closing mark ends where the source's words end: the rest of its line, or its first
    sentence (the model's own words may follow it)."""
    first = _BOUNDARY.split(quote, maxsplit=1)[0]
    return _quote_supported(quote, sources) or (
        len(_WORD.findall(first)) >= MIN_QUOTE_WORDS and _quote_supported(first, sources))


# --- putting it together -------------------------------------------------------------------------


def number_citations(spans: Sequence[Span], evidence: Evidence) -> list[Citation]:
    """The distinct kept ``spans`` in order of first appearance, numbered from 1."""
    citations: list[Citation] = []
    for n, span in enumerate(dict.fromkeys(spans), start=1):
        resolved = evidence.lookup(span)
        assert resolved is not None, "kept spans always resolve"
        citations.append(Citation.of(n, span, resolved))
    return citations


def _placed_sentences(text: str) -> list[tuple[int, int]]:
    """Where each of :func:`_sentences`'s sentences stands in ``text``, in order."""
    placed: list[tuple[int, int]] = []
    position = 0
    for sentence in _sentences(text):
        at = text.find(sentence, position)
        if at >= 0:
            placed.append((at, at + len(sentence)))
            position = at + len(sentence)
    return placed


def _claims_of_tags(text: str) -> list[tuple[str, str | None]]:
    """Each tag of ``text`` in order, with the words it vouches for: the part of its sentence since the
    previous tag (the whole sentence for a tag that opens it); None outside any sentence."""
    sentences = _placed_sentences(text)
    out: list[tuple[str, str | None]] = []
    current: tuple[int, int] | None = None
    since = 0
    claim: str | None = None
    for match in TAG_PATTERN.finditer(text):
        sentence = next(((a, b) for a, b in sentences if a <= match.start() < b), None)
        if sentence is None:
            out.append((match.group(), None))
            continue
        if sentence != current:
            current, since, claim = sentence, sentence[0], None
        before = strip_tags(text[since:match.start()]).strip()
        if _WORD.search(before):
            claim = before
        elif claim is None:
            claim = strip_tags(text[sentence[0]:sentence[1]]).strip()
        out.append((match.group(), claim))
        since = match.end()
    return out


def _quotes_from(claim: str, span_text: str) -> bool:
    """Whether ``claim`` holds a quotation found near-verbatim in ``span_text``."""
    quotes = _quotations(claim)
    return bool(quotes) and any(_quote_supported(q.text, [_fold(span_text)]) for q in quotes)


def _heading(resolved: ResolvedSpan) -> str:
    return " ".join([resolved.doc_title, *resolved.toc_path])


@dataclass(slots=True)
class SupportedText:
    """A text whose every tag supports its sentence: the tags that did not are removed."""

    text: str
    kept: list[Span]
    """The tags left, in order of appearance (repeats included)."""
    dropped: list[DroppedTag]


def drop_unsupported(text: str, evidence: Evidence) -> SupportedText:
    """``text`` (whose tags are all kept, canonical ones: a filter's output in keep mode) without the tags whose
    span does not support their sentence (``support.supports``), each reported as ``does_not_support``.

    A claim that quotes its span (a quotation of at least MIN_QUOTE_WORDS words found in it) is supported by
    it. Otherwise each pair is judged alone: a tag stays when its own span holds what its part of the sentence says (the
    words since the sentence's previous tag: "He left [a] and never came back [b]." judges [a] by "He left"
    and [b] by "and never came back"; tags written one after another share the words before them). A tag
    outside any sentence (a heading) is not judged."""
    verdicts: list[bool] = []
    dropped: list[DroppedTag] = []
    for written, claim in _claims_of_tags(text):
        resolved = evidence.lookup(parse_tag(written))
        holds = resolved is None or claim is None or supports(claim, resolved.text, _heading(resolved)) \
            or _quotes_from(claim, resolved.text)
        verdicts.append(holds)
        if not holds:
            dropped.append(DroppedTag(written, "does_not_support"))
    if dropped:
        order = iter(verdicts)
        text = _filter(text, _TagScanner(lambda written: written if not TAG_PATTERN.fullmatch(written)
                                         or next(order, True) else None))
    return SupportedText(text, find_tags(text), dropped)


def _quote_sources(quote: _Quote, text: str, sentences: list[tuple[int, int]],
                   citations: list[Citation]) -> list[str]:
    """The folded texts a quote must be found in: those its own sentences cite (the sentences its marks
    overlap), else, when they cite nothing, those of every kept citation; with their documents' titles."""
    cited = {span.key for a, b in sentences if a < quote.end and quote.start < b for span in find_tags(text[a:b])}
    own = [c for c in citations if c.tag in cited] or citations
    return [_fold(c.text) for c in own] + [_fold(c.doc_title) for c in own if c.doc_title]


def verify_answer(answer: str, evidence: Evidence) -> VerifiedAnswer:
    """Keep only the tags this turn's evidence supports, and report what looks unsupported.

    - Tags: kept when well-formed, present in ``evidence``, resolvable and holding what their sentence says;
      otherwise removed and reported as ``malformed``, ``not_in_evidence``, ``out_of_range`` (shown but
      unresolvable) or ``does_not_support`` (:func:`drop_unsupported`, ``support.supports``).
    - Unsupported sentences: the text is split at line breaks and at ``.!?…`` (not after a known
      abbreviation or an initial, not before a lower-case word); tags right after the end punctuation
      count for the sentence before. A sentence is reported when it has no kept tag and looks like a
      claim: at least MIN_CLAIM_WORDS words, not a question (``?`` / ``¿``), not a lead-in ending in
      ``:``, no "the source does not say" phrase and no pleasantry (English, Spanish, Italian).
    - Quotes: ``"…"``, ``“…”``, ``„…“``, ``«…»`` and clearly delimited ``'…'``/``‘…’`` of at least
      MIN_QUOTE_WORDS words, and an opening mark no mark closes (the rest of its line), must be near-verbatim
      (see ``_fold``; an exact substring, else a best-window ratio >= QUOTE_MATCH_THRESHOLD) in the text or
      document title of a citation of the quote's own sentences (of any kept citation when they cite none);
      parts around an ellipsis are matched separately. A quote with no kept citation is unverified.
    - ``found`` is False when the answer has no citation and either is empty or says the source does
      not contain the answer; True otherwise.
    """
    scanner = StreamingTagFilter(evidence, mode="keep")
    filtered = _filter(answer, scanner)  # every well-formed tag left in ``filtered`` is a kept one
    checked = drop_unsupported(filtered, evidence)
    text = checked.text
    citations = number_citations(checked.kept, evidence)
    sentences = _placed_sentences(text)
    unsupported = [text[a:b] for a, b in sentences if not TAG_PATTERN.search(text[a:b]) and _is_claim(text[a:b])]
    supported = [text[a:b] for a, b in sentences if TAG_PATTERN.search(text[a:b])]
    unverified = []
    for quote in _quotations(text):
        sources = _quote_sources(quote, text, sentences, citations)
        holds = _quote_supported if quote.closed else _unclosed_quote_supported
        if not holds(quote.text, sources):
            unverified.append(quote.text)
    found = bool(citations) or (bool(text.strip()) and not _says_not_found(text))
    return VerifiedAnswer(text, citations, scanner.dropped + checked.dropped, unsupported, unverified, found,
                          supported)
