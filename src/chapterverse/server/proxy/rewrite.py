"""What the proxy retrieves with: the last user turn, condensed with the turns before it when it needs them.

A spoken or chat follow-up ("¿y cuándo llega?", "When did it open?") has lost its subject, and retrieval
with it alone finds nothing or the wrong passage. Four modes (``--rag_rewrite``):

- ``carry`` (the default): when the new turn has few content words (fewer than :data:`FEW_WORDS`), or refers
  back with a pronoun ("it", "su", "lui"...) and names nothing itself, the names of the previous user turns
  (capitalized words and numbers past a sentence's first word; their content words when they name nothing)
  are appended to it, newest turn first, at most :data:`MAX_TURNS` back and only until one of them stands on
  its own. Deterministic and costs microseconds; a turn that stands on its own is retrieved with as it is.
  Carrying names rather than every content word, and leaving turns that name something alone, were chosen on
  ``chapterverse bench followups`` (docs/BENCHMARKS.md): carrying every content word and reacting to any
  pronoun lost 2.5 points of hit@1 on follow-ups and 6.5 points of injected@3 after a change of topic.
- ``llm``: the upstream model rewrites the turn into a standalone question, within ``--rag_rewrite_timeout_s``;
  on a timeout, an error or an empty reply the turn is condensed with ``carry`` instead.
- ``hyde``: the upstream model writes a short passage that would answer the turn (a hypothetical document,
  HyDE), and retrieval reads the turn followed by it; for every turn, within the same timeout and with the same
  fallback. For colloquial spoken questions whose words are not the source's.
- ``off``: the last user turn alone, as before.

The rewritten text is used only to retrieve: what is forwarded upstream is the conversation as the client sent it.
``chapterverse bench followups`` measures ``off`` and ``carry`` on two-turn conversations made from a SQuAD set.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Sequence
from typing import Any, Literal

import httpx

from ...analysis import LANGUAGES, content_words, word_tokens
from .injection import content_text

__all__ = ["FEW_WORDS", "MAX_TURNS", "RewriteMode", "carry_query", "llm_query", "names", "needs_context"]

log = logging.getLogger(__name__)

RewriteMode = Literal["off", "carry", "llm", "hyde"]
FEW_WORDS = 3
"""A turn with fewer content words than this is taken to lean on the conversation."""
MAX_TURNS = 3
"""Previous user turns looked at, newest first."""
_ANAPHORS = frozenset(
    "it its he she him his her hers they them their theirs "  # en
    "ella ellos ellas su sus suyo suya alli "  # es (accents are folded by word_tokens)
    "lui lei loro suo sua suoi sue esso essa essi "  # it
    "elle ils leur leurs "  # fr
    "ele dela dele deles delas seu seus".split()  # pt
)
_SENTENCE = re.compile(r"[.?!¿¡;:\n]+")
_REWRITE_PROMPT = (
    "Rewrite the user's last message as one standalone search query that names everything it refers to, in the "
    "language of that message. Reply with the query only, no quotes, no explanation."
)
_HYDE_PROMPT = (
    "Write two or three sentences that could be the passage of a book or document answering the user's last "
    "message, in the language of that message, naming what it refers to. Reply with the passage only."
)
_MAX_REWRITE_CHARS = 400


def names(text: str) -> list[str]:
    """The normalized words of ``text`` written with a capital or a digit, other than a sentence's first word:
    the names a turn is about ("Victoria", "AFC", "2015")."""
    found: list[str] = []
    for sentence in _SENTENCE.split(text):
        words = sentence.split()
        found += [w for w in words[1:] if w[:1].isupper() or w[:1].isdigit()]
    return [w for w in dict.fromkeys(word_tokens(" ".join(found))) if w not in _ANAPHORS]


def needs_context(text: str) -> bool:
    """True when ``text`` has few content words, or refers back with a pronoun and names nothing itself
    ("When did it open?"; not "How old was Manning when he retired?")."""
    if len(content_words(text, LANGUAGES)) < FEW_WORDS:
        return True
    return not _ANAPHORS.isdisjoint(word_tokens(text)) and not names(text)


def _user_turns(messages: Sequence[Any], index: int) -> list[str]:
    """The texts of the user messages before ``index``, newest first, at most :data:`MAX_TURNS`."""
    turns: list[str] = []
    for message in reversed(messages[:index]):
        if isinstance(message, dict) and message.get("role") == "user":
            text = content_text(message.get("content")).strip()
            if text:
                turns.append(text)
                if len(turns) == MAX_TURNS:
                    break
    return turns


def carry_query(messages: Sequence[Any], index: int, question: str) -> str:
    """``question`` followed by the content words of the earlier user turns it leans on, or as it is."""
    if not needs_context(question):
        return question
    have = set(word_tokens(question))
    carried: list[str] = []
    for turn in _user_turns(messages, index):
        words = names(turn) or content_words(turn, LANGUAGES)
        carried += [w for w in words if w not in have and w not in carried]
        if not needs_context(turn):
            break
    return f"{question} {' '.join(carried)}" if carried else question


async def llm_query(http: httpx.AsyncClient, url: str, headers: dict[str, str], model: str | None,
                    messages: Sequence[Any], index: int, question: str, timeout_s: float, *,
                    hypothetical: bool = False) -> str | None:
    """The upstream model's standalone version of ``question`` (``hypothetical``: the question followed by a
    short passage the model writes as if it answered it, HyDE), or None (timed out, failed, empty reply).

    A standalone question is asked for only when the turn leans on earlier ones; a hypothetical answer for every
    turn (it helps colloquial questions too). Only the recent user and assistant turns are sent, as plain text;
    the caller falls back to ``carry_query``.
    """
    if not hypothetical and (not needs_context(question) or not _user_turns(messages, index)):
        return question
    recent = [{"role": m["role"], "content": content_text(m.get("content"))[:2000]}
              for m in messages[max(0, index - 2 * MAX_TURNS):index]
              if isinstance(m, dict) and m.get("role") in ("user", "assistant") and content_text(m.get("content"))]
    prompt = _HYDE_PROMPT if hypothetical else _REWRITE_PROMPT
    body: dict[str, Any] = {"messages": [{"role": "system", "content": prompt}, *recent,
                                         {"role": "user", "content": question}],
                            "temperature": 0, "max_tokens": 120 if hypothetical else 80, "stream": False}
    if model:
        body["model"] = model
    try:
        reply = await asyncio.wait_for(http.post(url, json=body, headers=headers), timeout_s)
        reply.raise_for_status()
        text = reply.json()["choices"][0]["message"]["content"]
    except (TimeoutError, httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as exc:
        log.info("query rewrite by the upstream model failed (%s); condensing deterministically", type(exc).__name__)
        return None
    rewritten = " ".join(str(text or "").split()).strip("\"'«»“”")[:_MAX_REWRITE_CHARS]
    if not rewritten:
        return None
    return f"{question} {rewritten}" if hypothetical else rewritten
