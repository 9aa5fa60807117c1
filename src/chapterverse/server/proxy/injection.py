"""Retrieved context for chat requests, and the verified citations of the reply. Pure functions, no I/O.

The context is one block headed in the question's language (or the configured one), with one line telling the
model how to cite (:data:`CITE`); each item is ``[i] (source=faq.md, score=0.672)`` followed by the chunk's text
and its position tag, so the model can cite what it was shown. ``inject_as="system"`` adds the block to the leading system
message (or inserts one at the start): a second system message later in the conversation breaks
the chat templates of several open models (Gemma, Mistral), which a voice pipeline typically
serves. ``inject_as="user"`` appends it to the last user message.

A reply passes through :class:`ReplyFilter`, which runs ``citations.StreamingTagFilter`` (a tag
split across deltas is held back): ``strip`` removes every tag (the text goes to speech),
``keep`` keeps the verified ones; either way the verified citations are reported out of band, those whose
passage does not hold what their sentence says left out (``citations.drop_unsupported``).

Models asked to cite the tag still often write ``[1]`` (numbered sources are what Perplexity-style prompts
teach), ``(f19-0-51)``, ``【f19-0-51】`` or ``[source: f19-0-51]``; the filter reads those as the tag they stand
for (``citations.CitationForms``), for this turn's items only. The items stay numbered: a model that cites by
number anyway then names one item exactly, where without numbers its ``[1]`` would be spoken as noise. A number
or tag that the items' own text writes (a footnote ``[1]``, a planted ``f3-0-9``) is left out of those forms, so
copying it from a passage cites nothing.
"""

from __future__ import annotations

import copy
import re
from dataclasses import replace
from collections.abc import Callable, Sequence
from typing import Any, Literal

from ...analysis import detect_language
from ...citations import (Citation, CitationForms, Evidence, ResolvedSpan, StreamingTagFilter, SupportedText,
                          drop_unsupported, number_citations)
from ...positions import Span, defang_tags, find_tags
from ...scaffolding import CITE_LINES, CONTEXT_HEADERS
from ...search.retrieval import Hit

__all__ = ["HEADERS", "CITE", "header_language", "context_block", "citation_forms", "inject_context",
           "last_user_text", "content_text", "hits_summary", "ReplyFilter"]

HEADERS = CONTEXT_HEADERS
"""The context block's header, by language (defined with the rest of our scaffolding, which replies are cleaned
of: ``scaffolding.py``)."""
CITE = CITE_LINES
"""The line under the header that tells the model how to cite (without it, models cite in forms of their own)."""


def content_text(content: Any) -> str:
    """The text of a message's content: a string, or the text parts of a content list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, dict) and p.get("type") in ("text", "input_text")]
        return "\n".join(p for p in parts if isinstance(p, str))
    return ""


def last_user_text(messages: Sequence[Any]) -> tuple[int, str] | None:
    """(position, text) of the last user message with text, or None."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if isinstance(message, dict) and message.get("role") == "user":
            text = content_text(message.get("content")).strip()
            return (index, text) if text else None
    return None


_HEADER_FOR = {"spanish": "es", "italian": "it"}
"""The header language of a question detected in these languages (``analysis.detect_language``); English else."""


def header_language(setting: str, question: str) -> str:
    """The header's language: the one ``--rag_language`` sets, or with ``auto`` (the default) the question's,
    so an English question to an English knowledge base is not handed a Spanish header."""
    if setting != "auto":
        return setting
    return _HEADER_FOR.get(detect_language(question), "en")


def context_block(hits: Sequence[Hit], language: str) -> str:
    """The block to inject, headed in ``language`` (a key of :data:`HEADERS`). Retrieved text is defanged exactly
    as the agent's tools defang it (``positions.defang_tags``): a tag written inside a document must never reach
    the model looking like one chapterverse appended, or a model repeating it would cite an unrelated passage as
    verified."""
    hits = [_defanged(hit) for hit in hits]
    items = [f"[{i}] (source={hit.chunk.source}, score={hit.score:.3f})\n{hit.text.strip()} {hit.tag}"
             for i, hit in enumerate(hits, start=1)]
    return "\n\n".join([f"{HEADERS[language]}\n{CITE[language]}", *items])


def _defanged(hit: Hit) -> Hit:
    """A copy of ``hit`` whose text and source (an API client names it) have their tag-like strings defanged."""
    chunk = hit.chunk
    return replace(hit, chunk=replace(chunk, text=defang_tags(chunk.text), source=defang_tags(chunk.source)))


def _append(content: Any, block: str, part_type: str = "text") -> Any:
    if isinstance(content, list):
        return [*content, {"type": part_type, "text": block}]
    text = content if isinstance(content, str) else ""
    return f"{text}\n\n{block}" if text else block


def inject_context(messages: Sequence[Any], block: str, inject_as: Literal["system", "user"],
                   user_index: int, *, part_type: str = "text") -> list[Any]:
    """A copy of ``messages`` with ``block`` added; the caller's list is never changed. ``part_type`` names a
    content part added to a list content: ``text`` in chat completions, ``input_text`` in the Responses API."""
    out = copy.deepcopy(list(messages))
    if inject_as == "user":
        out[user_index]["content"] = _append(out[user_index].get("content"), block, part_type)
    elif out and isinstance(out[0], dict) and out[0].get("role") in ("system", "developer"):
        out[0]["content"] = _append(out[0].get("content"), block, part_type)
    else:
        out.insert(0, {"role": "system", "content": block})
    return out


def hits_summary(hits: Sequence[Hit]) -> str:
    """``faq.md#c1 (0.67); policies.md#c0 (0.52)`` for the log."""
    return "; ".join(f"{h.chunk.source}#c{h.chunk.chunk_index} ({h.score:.2f})" for h in hits)


_NUMBERS = re.compile(r"\[([\d \t,;]+)\]")
_KEYS = re.compile(r"f\d{1,15}-\d{1,15}-\d{1,15}")


def citation_forms(hits: Sequence[Hit]) -> CitationForms | None:
    """What ``[n]`` and the other forms of a tag stand for in a reply to the block :func:`context_block` made of
    ``hits``; None when nothing was injected. Numbers and tags that the items' text itself writes are left out."""
    if not hits:
        return None
    texts = " ".join(f"{hit.text} {hit.chunk.source}" for hit in hits)
    written_numbers = {int(n) for group in _NUMBERS.findall(texts) for n in re.findall(r"\d+", group)}
    written_keys = set(find_tags("".join(f"[{key}]" for key in _KEYS.findall(texts))))
    numbered = {i: hit.span for i, hit in enumerate(hits, start=1) if i not in written_numbers}
    return CitationForms(numbered, frozenset(hit.span for hit in hits if hit.span not in written_keys))


class ReplyFilter:
    """Filters one reply's text against the injected evidence and collects its citations.

    A citation is reported only where its passage holds what its sentence says (``citations.drop_unsupported``,
    judged on the whole reply once it has ended); the others are reported as dropped (``does_not_support``)
    and, in a whole reply in ``keep`` mode, their tags leave the text. A streamed reply's tags have gone out by
    then: there the ``citations`` field, not the text, says what the reply's sources are."""

    def __init__(self, hits: Sequence[Hit], mode: Literal["strip", "keep"],
                 resolve: Callable[[Span], ResolvedSpan | None]) -> None:
        self._hits = {h.span: h for h in hits}
        self._mode = mode
        self.evidence = Evidence(resolve=resolve)
        for hit in hits:
            self.evidence.add_text(hit.tag)
        self._forms = citation_forms(hits)
        self._filter = StreamingTagFilter(self.evidence, mode=mode, forms=self._forms)
        self._raw: list[str] = []
        self._checked: tuple[int, SupportedText] | None = None

    def feed(self, text: str) -> str:
        self._raw.append(text)
        return self._filter.feed(text)

    def flush(self) -> str:
        return self._filter.flush()

    def whole(self, text: str) -> str:
        shown = self.feed(text) + self.flush()
        return self._supported().text if self._mode == "keep" else shown

    @property
    def dropped(self) -> list[dict[str, str]]:
        return [{"tag": d.tag, "reason": d.reason} for d in [*self._filter.dropped, *self._supported().dropped]]

    def citations(self) -> list[dict[str, Any]]:
        """The verified citations as the reply carries them: distinct spans that support their sentence, in order
        of first appearance, numbered from 1, each with the injected passage it names."""
        return [self._retrieved(c).to_json() for c in number_citations(self._supported().kept, self.evidence)]

    def _supported(self) -> SupportedText:
        """The reply so far with its verified tags in canonical form, less those that do not support their
        sentence."""
        seen = sum(map(len, self._raw))
        if self._checked is None or self._checked[0] != seen:
            keep = StreamingTagFilter(self.evidence, mode="keep", forms=self._forms)
            raw = "".join(self._raw)
            self._checked = (seen, drop_unsupported(keep.feed(raw) + keep.flush(), self.evidence))
        return self._checked[1]

    def _retrieved(self, citation: Citation) -> Citation:
        hit = self._hits.get(citation.span)
        return citation if hit is None else citation.retrieved(hit.chunk.source, hit.chunk.chunk_index, hit.score)
