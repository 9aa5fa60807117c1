"""``chapterverse bench kb``: does the knowledge-base API find the record that answers, when the record's meaning
lives in its source path and metadata?

The set (:mod:`.kbdata`) goes in through ``POST /v1/rag/upsert/documents`` and every question through
``POST /v1/rag/search`` of a real server (``create_app`` under uvicorn on 127.0.0.1, in a thread of this
process), so whatever the server does to a write or a search is what is measured. Each question is asked twice:

* ranked, ``top_k`` 10 and threshold 0: hit@1, hit@k and MRR@10 of the answering source;
* as the voice assistant asks it, ``top_k`` 3 and threshold 0.25 (the issue's example): whether the answering
  chunk is still among what comes back ("kept"), whether nothing comes back ("empty": a refusal, right for the
  questions no record answers), and the milliseconds of that request.
"""

from __future__ import annotations

import os
import socket
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ChapterverseError
from .kbdata import KbQuestion, KbSet, kb_set

if TYPE_CHECKING:
    import httpx
    from fastapi import FastAPI

__all__ = ["GROUPS", "GroupScore", "KbBenchReport", "QuestionRecord", "run_kb_bench", "sample_questions"]

RANKED_DEPTH = 10
"""Results of the ranked request: MRR@10, and the rank of an answer below the top 3."""

GROUPS: dict[str, tuple[str, Callable[[KbQuestion], bool]]] = {
    "all": ("answerable", lambda q: q.via != "none"),
    "context": ("key only in source/metadata", lambda q: q.via == "context"),
    "text": ("key in the text", lambda q: q.via == "text"),
    "es": ("answerable, es", lambda q: q.via != "none" and q.language == "es"),
    "en": ("answerable, en", lambda q: q.via != "none" and q.language == "en"),
    "none": ("no record answers", lambda q: q.via == "none"),
}
"""The table's rows (JSON key: label, which questions it scores)."""


class KbBenchError(ChapterverseError):
    """The server refused a write or a search of the benchmark (its answer is in the message)."""


@dataclass(frozen=True, slots=True)
class QuestionRecord:
    """What one question got: the answering source's rank and score in the ranked request (None: not in the top
    ten, or no source answers), and what the thresholded request returned."""

    question: KbQuestion
    rank: int | None
    score: float | None
    top: tuple[tuple[str, float], ...]
    kept: bool
    returned: int
    ms: float

    def to_json(self) -> dict[str, Any]:
        q = self.question
        return {"id": q.id, "question": q.text, "language": q.language, "via": q.via, "gold": list(q.gold),
                "rank": self.rank, "score": self.score, "top": [[s, v] for s, v in self.top], "kept": self.kept,
                "returned": self.returned, "ms": round(self.ms, 2)}


@dataclass(frozen=True, slots=True)
class GroupScore:
    questions: int
    hit_at_1: float | None
    hit_at_k: float | None
    mrr_at_10: float | None
    kept: float | None
    """Share whose answering chunk survives the threshold in the top k (None for questions nothing answers)."""
    empty: float
    """Share for which the thresholded search returned nothing."""

    def to_json(self, k: int) -> dict[str, Any]:
        def r(value: float | None) -> float | None:
            return None if value is None else round(value, 4)

        return {"questions": self.questions, "hit@1": r(self.hit_at_1), f"hit@{k}": r(self.hit_at_k),
                "mrr@10": r(self.mrr_at_10), "kept": r(self.kept), "empty": r(self.empty)}


@dataclass(slots=True)
class KbBenchReport:
    documents: int
    chunks: int
    embedding_model: str
    top_k: int
    threshold: float
    upsert_s: float
    records: list[QuestionRecord]
    load_average: tuple[tuple[float, float, float], tuple[float, float, float]]
    """``os.getloadavg()`` before the knowledge base was built and after the last question."""
    date: str = field(default_factory=lambda: datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"))

    def groups(self) -> dict[str, GroupScore]:
        out = {}
        for name, (_, member) in GROUPS.items():
            records = [r for r in self.records if member(r.question)]
            if records:
                out[name] = _score(records, self.top_k)
        return out

    @property
    def ms_p50(self) -> float:
        return statistics.median(r.ms for r in self.records)

    def to_json(self) -> dict[str, Any]:
        return {"date": self.date, "documents": self.documents, "chunks": self.chunks,
                "embedding_model": self.embedding_model, "top_k": self.top_k, "threshold": self.threshold,
                "questions": len(self.records), "upsert_s": round(self.upsert_s, 3),
                "ms_p50": round(self.ms_p50, 2),
                "load_average": {"before": list(self.load_average[0]), "after": list(self.load_average[1])},
                "groups": {name: s.to_json(self.top_k) for name, s in self.groups().items()},
                "records": [r.to_json() for r in self.records]}


def _score(records: Sequence[QuestionRecord], k: int) -> GroupScore:
    n = len(records)
    empty = sum(r.returned == 0 for r in records) / n
    if all(not r.question.gold for r in records):
        return GroupScore(n, None, None, None, None, empty)
    ranks = [r.rank for r in records]
    return GroupScore(n, sum(x == 1 for x in ranks) / n, sum(x is not None and x <= k for x in ranks) / n,
                      sum(1 / x for x in ranks if x is not None) / n, sum(r.kept for r in records) / n, empty)


def sample_questions(questions: Sequence[KbQuestion], limit: int | None) -> list[KbQuestion]:
    """``limit`` questions spread evenly over the set (every kind of record, both shops, the unanswerable ones at
    the end), not its first ``limit``; all of them without a limit."""
    if limit is None or limit >= len(questions):
        return list(questions)
    return [questions[i * len(questions) // limit] for i in range(limit)]


def run_kb_bench(*, embedding_model: str | None = None, top_k: int = 3, threshold: float = 0.25,
                 limit: int | None = None, workdir: Path | None = None,
                 progress: Callable[[str, int, int], None] | None = None) -> KbBenchReport:
    """Build the set's knowledge base in a temporary folder (under ``workdir`` if given) and ask its questions."""
    data = kb_set()
    with tempfile.TemporaryDirectory(prefix="chapterverse-bench-kb-", dir=workdir) as tmp:
        return _run(data, Path(tmp) / "kb", embedding_model=embedding_model, top_k=top_k, threshold=threshold,
                    questions=sample_questions(data.questions, limit), progress=progress)


def _run(data: KbSet, folder: Path, *, embedding_model: str | None, top_k: int, threshold: float,
         questions: Sequence[KbQuestion], progress: Callable[[str, int, int], None] | None) -> KbBenchReport:
    """The set through a server: one batch upsert, then each question (``_ask``)."""
    import httpx

    from ..server.app import create_app
    from ..server.serve_settings import settings_from_mapping

    settings = settings_from_mapping({"rag_enabled": True, "rag_kb_path": folder,
                                      "rag_embedding_model": embedding_model, "rag_top_k": top_k,
                                      "rag_threshold": threshold, "log_level": "warning"})
    before = os.getloadavg()
    with _serving(create_app(settings)) as url, httpx.Client(base_url=url, timeout=600) as client:
        started = time.perf_counter()
        written = _post(client, "/v1/rag/upsert/documents", {"documents": [
            {"source": d.source, "text": d.text, "metadata": d.metadata} for d in data.documents]})
        upsert_s = time.perf_counter() - started
        model = str(_get(client, "/v1/rag/status")["embedding_model"])
        records = []
        for n, question in enumerate(questions, 1):
            records.append(_ask(client, question, top_k=top_k, threshold=threshold))
            if progress is not None:
                progress("questions", n, len(questions))
    return KbBenchReport(documents=len(data.documents), chunks=int(written["added"]), embedding_model=model,
                         top_k=top_k, threshold=threshold, upsert_s=upsert_s, records=records,
                         load_average=(before, os.getloadavg()))


@contextmanager
def _serving(app: FastAPI) -> Iterator[str]:
    """``app`` under uvicorn on a free port of 127.0.0.1 until the block ends; its base URL."""
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="bench-kb-server", daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise KbBenchError("the benchmark's server did not start")
            time.sleep(0.01)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()


def _ask(client: httpx.Client, question: KbQuestion, *, top_k: int, threshold: float) -> QuestionRecord:
    """The ranked request, then the timed one as the voice assistant sends it."""
    ranked = _post(client, "/v1/rag/search", {"query": question.text, "top_k": RANKED_DEPTH, "threshold": 0})
    found = [(str(r["source"]), float(r["score"])) for r in ranked["results"]]
    rank = next((i for i, (source, _) in enumerate(found, 1) if source in question.gold), None)
    started = time.perf_counter()
    asked = _post(client, "/v1/rag/search", {"query": question.text, "top_k": top_k, "threshold": threshold})
    ms = 1000 * (time.perf_counter() - started)
    return QuestionRecord(question, rank, found[rank - 1][1] if rank is not None else None, tuple(found[:top_k]),
                          any(r["source"] in question.gold for r in asked["results"]), len(asked["results"]), ms)


def _post(client: httpx.Client, path: str, body: dict[str, Any]) -> dict[str, Any]:
    return _checked(client.post(path, json=body), path)


def _get(client: httpx.Client, path: str) -> dict[str, Any]:
    return _checked(client.get(path), path)


def _checked(response: httpx.Response, path: str) -> dict[str, Any]:
    if response.status_code != 200:
        raise KbBenchError(f"{path} answered {response.status_code}: {response.text[:500]}")
    answer: dict[str, Any] = response.json()
    return answer
