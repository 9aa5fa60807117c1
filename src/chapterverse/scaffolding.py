"""What surrounds a model's text but is not part of it, and the cleaner that takes it out of what is shown.

Two kinds of scaffolding reach a model's answer when a model echoes its input or its chat template:

* chat-template control tokens, written as text by a model or a server that does not render them as control
  tokens: ChatML's ``<|im_start|>assistant`` and ``<|im_end|>``, Llama 3's ``<|start_header_id|>``,
  ``<|eot_id|>``, Mistral's ``[INST]`` and ``</s>``, Phi's ``<|end|>``, Gemma's ``<start_of_turn>model`` and
  ``<end_of_turn>``, DeepSeek's ``<｜end▁of▁sentence｜>``, and any other ``<|name|>``; a turn's start token takes
  its role name with it;
* chapterverse's own: the headers and instructions it writes into a prompt, defined here and only here so that
  the cleaner knows every one of them (:data:`CONTEXT_HEADERS` and :data:`CITE_LINES`, the injected context's,
  in each language it injects; :data:`SOURCE_TEXT_HEADER` and its kin, the agent's tool results), and the
  injected items' headers ``[2] (source=faq-en.md, score=0.601)`` with their ``(source=..., score=...)``, which a
  model copies after a sentence (a speech engine would read them aloud; a reader learns nothing from them). A bare
  ``[2]`` is the tag filter's: a citation of an item where one stands, else text (a footnote, a list label).

:class:`TextCleaner` removes them from one text that arrives in pieces cut anywhere (a model's streamed deltas):
it holds back only an end that could still become one of them (``<|im_``, ``[2] (sour``, ``Relevant ex``) and
blanks (which a removal may take with it), so a delta that cannot goes out whole and at once; one that the text's
end cuts off (``(source=faq.md, sc``, ``<|im_``: a reply stopped at its token limit) is dropped. The pieces it gives,
put together, are :func:`clean_text` of the whole text, however the text was cut.

A removal leaves the text readable: one at the start of a line takes the line breaks after it (a header line goes
whole); one inside a line leaves a space between words (``x <|eot_id|> y`` reads ``x y``) and none before
punctuation (``30 days (source=faq.md, score=0.6).`` reads ``30 days.``); line breaks after one inside a line stay.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

__all__ = ["CONTEXT_HEADERS", "CITE_LINES", "SOURCE_TEXT_HEADER", "EXCERPTS_HEADER", "ANSWER_FROM_SOURCE",
           "NO_PASSAGES", "NO_SEGMENTS", "NO_ROOM", "TextCleaner", "clean_text"]

CONTEXT_HEADERS: Mapping[str, str] = {
    "es": "Fragmentos relevantes recuperados de la base de conocimientos:",
    "it": "Frammenti rilevanti recuperati dalla base di conoscenza:",
    "en": "Relevant excerpts retrieved from the knowledge base:",
}
"""The header of the context block the proxy injects, by language (``server/injection.py``)."""
CITE_LINES: Mapping[str, str] = {
    "es": "Cada fragmento termina con su etiqueta entre corchetes; tras cada frase que use uno, escribe su etiqueta "
          "tal como aparece.",
    "it": "Ogni frammento termina con la sua etichetta tra parentesi quadre; dopo ogni frase che ne usa uno, scrivi "
          "la sua etichetta così come appare.",
    "en": "Each excerpt ends with its tag in square brackets; after each sentence that uses one, write its tag as "
          "shown.",
}
"""The line under the header that tells the model how to cite (without it, models cite in forms of their own)."""
SOURCE_TEXT_HEADER = "SOURCE TEXT (cite the tags exactly as written):"
"""The header of the agent's tool results (``llm/tools.py``)."""
EXCERPTS_HEADER = "SOURCE TEXT (excerpts of the chosen parts; cite the tags exactly as written):"
ANSWER_FROM_SOURCE = "Answer from the SOURCE TEXT above, citing its tags."
"""What the agent asks after a retrieval it forced (``answering/model_turn.py``)."""
NO_PASSAGES = "(No matching passages found.)"
NO_SEGMENTS = "(No relevant segment excerpts found.)"
NO_ROOM = "(The model's window has no room for more source text; answer from the source text above.)"

_PHRASES = sorted({*CONTEXT_HEADERS.values(), *CITE_LINES.values(), ANSWER_FROM_SOURCE, NO_PASSAGES, NO_SEGMENTS,
                   NO_ROOM}, key=len, reverse=True)
"""Our own lines, removed wherever they appear (the SOURCE TEXT headers are :data:`_SOURCE_TEXT`)."""

_ROLE = r"(?:system|user|assistant|tool|model|ipython|developer|function)"
_TURN_START = r"(?:<\|im_start\|>|<\|start_header_id\|>|<start_of_turn>)"
_TOKENS = [
    rf"{_TURN_START}[ \t]*{_ROLE}?(?:<\|end_header_id\|>)?",  # a turn's start, with its role
    r"<\|[A-Za-z0-9_.:\-]{1,40}\|>",  # ChatML, Llama 3, Phi, Command R: <|im_end|>, <|eot_id|>, <|end|>
    r"<｜[^｜\n]{1,40}｜>",  # DeepSeek: <｜end▁of▁sentence｜>
    r"</?s>|<(?:bos|eos|pad|start_of_turn|end_of_turn)>|<</?SYS>>",  # Llama 2, Mistral, Gemma
    r"\[/?(?:INST|SYS|SYSTEM_PROMPT|TOOL_CALLS|AVAILABLE_TOOLS|TOOL_RESULTS|TOOL_CONTENT)\]",  # Mistral
]
_SOURCE_TEXT = r"SOURCE TEXT(?:[ \t]*\([^()\n]{0,100}\))?:"
_NUMBER = r"-?\d{1,3}(?:\.\d{1,8})?"
_SCORE = rf"\((?:source=[^()\n]{{1,200}}?(?:,[ \t]*score={_NUMBER})?|score={_NUMBER})\)"
_SCAFFOLDING = [_SOURCE_TEXT, *(re.escape(phrase) for phrase in _PHRASES), rf"\[\d{{1,3}}\][ \t]*{_SCORE}", _SCORE]


_REMOVALS = re.compile(rf"(?P<pre>[ \t]*)(?:{'|'.join([*_TOKENS, *_SCAFFOLDING])})(?P<post>[ \t]*\n*)")
_SCORE_BEGUN = r"\((?:s(?:o(?:u(?:r(?:c(?:e(?:=[^()\n]{0,200})?)?)?)?)?|c(?:o(?:r(?:e(?:=[\d.\-]{0,12})?)?)?)?)?)?"
_BEGUN = re.compile(r"[ \t]*(?:" + "|".join([
    r"<[^\s<>]{0,44}",  # an angle token not closed yet
    rf"{_TURN_START}[ \t]*[a-z]{{0,12}}(?:<[^\s<>]{{0,20}})?",  # a turn's start whose role is not whole yet
    r"\[[/A-Z_]{0,20}",  # [INST]
    rf"(?:\[\d{{0,3}}\][ \t]*)?{_SCORE_BEGUN}",  # [2] (source=faq.md, sco
    r"\[\d{0,3}(?:\][ \t]*)?",  # [2], before its (source=...)
    r"SOURCE TEXT[ \t]*(?:\([^()\n]{0,100}\)?)?",
]) + r")\Z")
"""An end of text that could still become a removal (loosely: holding a little more than needed only delays it)."""
_CUT_OFF = re.compile(r"[ \t]*(?:(?:\[\d{1,3}\][ \t]*)?\((?:source|score)=[^()\n]{0,200}|<\|[A-Za-z0-9_.:\-]{0,40}\|?"
                      r"|<｜[^｜\n]{0,40}|SOURCE TEXT[ \t]*\([^()\n]{0,100})\Z")
"""A removal cut off by the end of the text (a reply cut at its token limit): ``(source=faq.md, sc``, ``<|im_``."""
_LONGEST = 320
"""No removal is longer than this: only the end of a text this long can have begun one."""
_LITERAL_STARTS = [*_PHRASES, "SOURCE TEXT"]
_CLAUSE_END = frozenset(".,;:!?)]}»”’\"'…")


def _begun_at(text: str) -> int:
    """Where the end of ``text`` that could still become a removal begins (``len(text)`` when none could)."""
    start = max(0, len(text) - _LONGEST)
    found = _BEGUN.search(text, start)
    at = found.start() if found else len(text)
    for phrase in _LITERAL_STARTS:
        for size in range(min(len(text), len(phrase) - 1), len(text) - at, -1):  # only ends that begin before at
            if text.endswith(phrase[:size]):
                at = len(text) - size
                break
    while at > 0 and text[at - 1] in " \t":
        at -= 1
    return at


def _replacement(text: str, match: re.Match[str], line_start: bool) -> str:
    """What takes a removal's place: nothing at the start of a line or before punctuation, else the line breaks
    after it, else one space where blanks separated it from the words around it."""
    if line_start:
        return ""
    post = match["post"]
    if "\n" in post:
        return post[post.index("\n"):]
    following = text[match.end():match.end() + 1]
    if following == "" or following.isspace() or following in _CLAUSE_END:
        return ""
    return " " if match["pre"] or post else ""


class TextCleaner:
    """Template tokens and chapterverse's scaffolding removed from one text that arrives in pieces (see the module
    docstring): :meth:`feed` each piece, :meth:`flush` at the end."""

    def __init__(self) -> None:
        self._held = ""
        self._line_start = True
        """Whether what was given out so far ends a line (or is nothing): a removal here takes its line breaks."""

    def feed(self, piece: str) -> str:
        return self._clean(self._held + piece, final=False)

    def flush(self) -> str:
        return self._clean(self._held, final=True)

    def _clean(self, text: str, *, final: bool) -> str:
        cut = len(text) if final else _begun_at(text)
        out: list[str] = []
        position = 0
        for match in _REMOVALS.finditer(text):
            if match.start() >= cut:
                break
            if not final and match.end() == len(text):  # it could still grow: a role, blanks, line breaks
                cut = match.start()
                break
            self._give(out, text[position:match.start()])
            self._give(out, _replacement(text, match, self._line_start))
            position = match.end()
            cut = max(cut, position)
        rest = text[position:cut]
        if final and (cut_off := _CUT_OFF.search(rest)):
            rest = rest[:cut_off.start()]
        self._give(out, rest)
        self._held = text[cut:]
        return "".join(out)

    def _give(self, out: list[str], piece: str) -> None:
        if piece:
            out.append(piece)
            self._line_start = piece.endswith("\n")


def clean_text(text: str) -> str:
    """``text`` without template tokens and chapterverse's scaffolding (:class:`TextCleaner` on it whole)."""
    cleaner = TextCleaner()
    return cleaner.feed(text) + cleaner.flush()
