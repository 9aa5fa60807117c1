"""The knowledge base against a real SQLite library: a server started with another embedding model.

A restart with a new ``--rag_embedding_model`` is refused unless ``--rag_force_rebuild`` asks for the re-embedding;
with it, every chunk gets the vector a fresh index would give it (its context line included), through the one
re-embedding path ``chapterverse ingest`` takes too (``Library.reembed_if_model_changed``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hashembed import HashingEmbedder

from chapterverse.errors import EmbeddingMismatchError, StoppingError
from chapterverse.knowledgebase import KnowledgeBase
from chapterverse import Library


class OtherEmbedder(HashingEmbedder):
    """Another model: the same hashed words, one dimension more weight, so its vectors differ from the first's."""

    name = "test-hashing-other"

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        vectors = super()._embed_batch(texts)
        vectors[:, 1] += 1.0
        return vectors


def _filled(path: Path, embedder: HashingEmbedder) -> KnowledgeBase:
    """A started knowledge base in ``path`` holding one folder file and one document added over the API (whose
    context line, its source path and metadata, is embedded with its text)."""
    folder = path / "kb"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "faq.md").write_text("# FAQ\n\nShipping takes five business days within Spain.\n", encoding="utf-8")
    kb = KnowledgeBase(Library(path / "lib", embedder=embedder), folder)
    kb.start()
    kb.add_document("Refunds are paid back within 30 days of the return.", source="orders/client-456",
                    metadata={"topic": "refunds"})
    return kb


def _vectors(kb: KnowledgeBase) -> dict[str, list[float]]:
    """Each chunk's stored vector by its source (a re-indexed folder file gets new chunk ids)."""
    ids, _, matrix = kb.store.vectors_since(0)
    chunks = kb.store.chunks_by_ids([int(i) for i in ids])
    return {chunks[int(i)].source: [round(float(x), 5) for x in row] for i, row in zip(ids, matrix)}


def _restarted(path: Path, embedder: HashingEmbedder) -> KnowledgeBase:
    return KnowledgeBase(Library(path / "lib", embedder=embedder), path / "kb")


def test_a_new_model_is_refused_without_force_rebuild_and_nothing_changes(tmp_path: Path) -> None:
    first = _filled(tmp_path, HashingEmbedder())
    before = _vectors(first)
    first.close()
    first.library.close()
    restarted = _restarted(tmp_path, OtherEmbedder())
    with pytest.raises(EmbeddingMismatchError, match="--rag_force_rebuild"):
        restarted.start()
    assert restarted.store.get_meta("embedding_model") == HashingEmbedder.name
    assert _vectors(restarted) == before
    restarted.library.close()


def test_force_rebuild_gives_every_chunk_the_vector_a_fresh_index_gives_it(tmp_path: Path) -> None:
    first = _filled(tmp_path / "old", HashingEmbedder())
    first.close()
    first.library.close()
    restarted = _restarted(tmp_path / "old", OtherEmbedder())
    restarted.start(force_rebuild=True)
    fresh = _filled(tmp_path / "fresh", OtherEmbedder())
    assert restarted.store.get_meta("embedding_model") == OtherEmbedder.name
    assert restarted.store.count_chunks() == fresh.store.count_chunks() == 2
    assert _vectors(restarted) == _vectors(fresh)
    hits = restarted.search("when are refunds paid back", k=1)
    assert hits and hits[0].chunk.source == "orders/client-456"
    for kb in (restarted, fresh):
        kb.close()
        kb.library.close()


def test_a_stopping_server_abandons_the_re_embedding_and_keeps_the_old_vectors(tmp_path: Path) -> None:
    first = _filled(tmp_path, HashingEmbedder())
    before = _vectors(first)
    first.close()
    first.library.close()
    restarted = _restarted(tmp_path, OtherEmbedder())
    restarted.abandon_writes()
    with pytest.raises(StoppingError):
        restarted.start(force_rebuild=True)
    assert restarted.store.get_meta("embedding_model") == HashingEmbedder.name
    assert _vectors(restarted) == before
    restarted.library.close()
