"""Query latency on an existing library: what a reader waits for, split into embedding and search.

The retrieval benchmark times queries on one small set at a time; the issue's latency target is a library
of *all* the shared books (tens of thousands of chunks in many languages), asked questions it was not
built from. This opens any library as the CLI would, asks SQuAD-format questions, and reports the first
search after opening (index files mapped, embedder loaded) apart from the steady state.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from ..errors import InputError
from ..library import Library

__all__ = ["LatencyReport", "squad_questions", "measure_latency"]


@dataclass(slots=True)
class LatencyReport:
    chunks: int
    queries: int
    first_search_s: float
    embed_p50_ms: float
    search_p50_ms: float
    search_p99_ms: float
    total_p50_ms: float

    def to_json(self) -> dict[str, float | int]:
        return {k: round(v, 3) if isinstance(v, float) else v for k, v in asdict(self).items()}


def squad_questions(paths: Sequence[Path], per_file: int) -> list[str]:
    """The first ``per_file`` question texts of each SQuAD file."""
    questions: list[str] = []
    for path in paths:
        try:
            articles = json.loads(path.read_text(encoding="utf-8"))["data"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise InputError(f"{path}: cannot read SQuAD questions: {exc}") from exc
        texts = [qa["question"] for a in articles for p in a["paragraphs"] for qa in p["qas"]]
        questions.extend(texts[:per_file])
    return questions


def _percentile(values: Sequence[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def measure_latency(library: Library, questions: Sequence[str], *, k: int = 5) -> LatencyReport:
    """Time ``Library.search``'s two parts for each question, after one untimed-in-the-percentiles first search."""
    if not questions:
        raise InputError("no questions to ask")
    started = time.perf_counter()
    library.search(questions[0], k=k)
    first = time.perf_counter() - started
    embed, search = [], []
    for question in questions:
        t0 = time.perf_counter()
        vector = library.embedder.embed_query(question)
        t1 = time.perf_counter()
        library.retriever.search(question, k=k, query_vector=vector)
        t2 = time.perf_counter()
        embed.append(1000 * (t1 - t0))
        search.append(1000 * (t2 - t1))
    return LatencyReport(
        chunks=library.store.count_chunks(), queries=len(questions), first_search_s=first,
        embed_p50_ms=statistics.median(embed), search_p50_ms=statistics.median(search),
        search_p99_ms=_percentile(search, 0.99),
        total_p50_ms=statistics.median([a + b for a, b in zip(embed, search)]),
    )
