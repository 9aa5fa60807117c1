"""Follow-up questions: hit@k of the proxy's retrieval with and without query rewriting (``server/proxy/rewrite.py``).

Two-turn conversations are made from a SQuAD-format set: two consecutive questions about the same article,
where the second names a subject the first (or the article's title) also names; in the second, that subject
("the Victoria and Albert Museum", "Victoria's") becomes a pronoun ("it", "its"). The second turn is then
retrieved with the way the proxy would, in each mode, against the whole library:

- ``asked whole``: the second question as the set asks it, subject included (what a perfect rewrite could get);
- ``follow-up, off``: the pronoun question alone (``--rag_rewrite off``);
- ``follow-up, carry``: condensed with the first turn (``--rag_rewrite carry``, the default);
- ``topic switch, off`` / ``carry``: the second question whole, after a first turn about *another* article: what
  carrying costs when the new turn does not lean on the previous one.

``--rag_rewrite llm`` depends on the upstream model and is not measured here.
"""

from __future__ import annotations

import re
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..server.proxy.rewrite import carry_query
from .retrieval import BenchQuestion, BenchSet, _first_hit, _passages

if TYPE_CHECKING:
    from ..library import Library

__all__ = ["CONDITIONS", "FollowUp", "FollowupReport", "make_followups", "run_followups"]

CONDITIONS = ("asked whole", "follow-up, off", "follow-up, carry", "topic switch, off", "topic switch, carry")
_NAME = re.compile(r"[A-Z][\w\-.]*(?:\s+(?:of\s+|the\s+|and\s+|de\s+|del\s+)?[A-Z0-9][\w\-.]*)*")
_MODIFIER_BEFORE = frozenset("a an many much which what whose how any some other each every".split())
"""Words before a name that make it a modifier ("how many Panthers players"): no pronoun fits there."""
_DEPTH = 10


@dataclass(frozen=True, slots=True)
class FollowUp:
    first: BenchQuestion
    second: BenchQuestion
    pronoun: str
    """The second question with its subject replaced by a pronoun."""
    subject: str


@dataclass(slots=True)
class FollowupReport:
    name: str
    conversations: int
    k: int
    threshold: float
    scores: dict[str, dict[str, float]]

    def to_json(self) -> dict[str, Any]:
        return {"set": self.name, "conversations": self.conversations, "k": self.k, "threshold": self.threshold,
                "conditions": self.scores}


def _subject(first: str, second: str, title: str) -> str | None:
    """The longest name in ``second`` (not its first word) that ``first`` or the title also names."""
    found = [m.group(0) for m in _NAME.finditer(second) if m.start() > 0]
    shared = [name for name in found if name in first or name in title]
    return max(shared, key=len) if shared else None


def pronoun_question(first: str, second: str, title: str) -> tuple[str, str] | None:
    """(``second`` with the shared subject as "it"/"its", the subject), or None when it names none."""
    subject = _subject(first, second, title)
    if subject is None:
        return None
    pattern = re.compile(r"(?:\b[Tt]he\s+)?" + re.escape(subject) + r"('s|’s|'|’)?")
    match = pattern.search(second)
    before = second[:match.start()].split() if match else []
    if match is None or (before and before[-1].lower() in _MODIFIER_BEFORE):
        return None
    pronoun = "its" if match.group(1) else "it"
    return second[:match.start()] + pronoun + second[match.end():], subject


def make_followups(bench: BenchSet) -> list[FollowUp]:
    """Every consecutive pair of questions of one article whose second names a subject it can lose."""
    titles = {d.source: (d.parsed.title if d.parsed else "") for d in bench.documents}
    pairs: list[FollowUp] = []
    for first, second in zip(bench.questions, bench.questions[1:]):
        if first.source != second.source:
            continue
        made = pronoun_question(first.text, second.text, titles.get(first.source, ""))
        if made is not None:
            pairs.append(FollowUp(first, second, made[0], made[1]))
    return pairs


def _conversation(first: str, answer: str, second: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": first}, {"role": "assistant", "content": answer},
            {"role": "user", "content": second}]


def _queries(pair: FollowUp, other: BenchQuestion) -> dict[str, str]:
    """The text the proxy retrieves with for the second turn, per condition."""
    turns = _conversation(pair.first.text, "…", pair.pronoun)
    switch = _conversation(other.text, "…", pair.second.text)
    return {
        "asked whole": pair.second.text,
        "follow-up, off": pair.pronoun,
        "follow-up, carry": carry_query(turns, 2, pair.pronoun),
        "topic switch, off": pair.second.text,
        "topic switch, carry": carry_query(switch, 2, pair.second.text),
    }


def run_followups(bench: BenchSet, library: Library, doc_ids: dict[str, int], *, k: int = 3,
                  threshold: float = 0.25, limit: int | None = None,
                  progress: Callable[[str, int, int], None] | None = None) -> FollowupReport:
    """hit@1, hit@k, hit@k above ``threshold`` (what the proxy injects with its defaults), MRR@10 and ms, per
    condition, over the same conversations in one run."""
    pairs = make_followups(bench)[:limit]
    passages = _passages(library, sorted(set(doc_ids.values())))
    results: dict[str, list[tuple[int, bool]]] = {c: [] for c in CONDITIONS}
    times: dict[str, list[float]] = {c: [] for c in CONDITIONS}
    if pairs:
        library.search(pairs[0].second.text, k=_DEPTH)  # the model and indexes load outside the timings
    for number, pair in enumerate(pairs):
        if progress and number % 20 == 0:
            progress(f"asking {bench.name}", number, len(pairs))
        other = pairs[(number + len(pairs) // 2) % len(pairs)].first
        if other.source == pair.second.source:
            other = next((p.first for p in pairs if p.first.source != pair.second.source), other)
        for condition, query in _queries(pair, other).items():
            started = time.perf_counter()
            hits = library.search(query, k=_DEPTH)
            times[condition].append((time.perf_counter() - started) * 1000)
            rank = _first_hit(pair.second, doc_ids[pair.second.source], [h.chunk.id for h in hits], passages)
            results[condition].append((rank, rank >= 0 and hits[rank].score >= threshold))
    return FollowupReport(bench.name, len(pairs), k, threshold,
                          {c: _score(results[c], times[c], k) for c in CONDITIONS})


def _score(results: Sequence[tuple[int, bool]], times: Sequence[float], k: int) -> dict[str, float]:
    n = max(len(results), 1)
    return {
        "hit@1": round(sum(r == 0 for r, _ in results) / n, 4),
        f"hit@{k}": round(sum(0 <= r < k for r, _ in results) / n, 4),
        f"injected@{k}": round(sum(0 <= r < k and above for r, above in results) / n, 4),
        "mrr@10": round(sum(1 / (r + 1) for r, _ in results if r >= 0) / n, 4),
        "ms_p50": round(statistics.median(times), 2) if times else 0.0,
    }
