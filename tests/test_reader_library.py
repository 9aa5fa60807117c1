"""The extractive reader needs of a library only what ``answering.reader_library.ReaderLibrary`` names (issue 30):
handed an object that has those members and nothing else, around a real SQLite library, it gives the answer it
gives when handed the Library itself. A reader that reached past the protocol (``library.document``, the store's
chunks, ...) fails here with an AttributeError."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from hashembed import HashingEmbedder

from chapterverse.answering import extractive_answer
from chapterverse.embeddings import Embedder
from chapterverse import Hit, Library, ResolvedSpan, Span
from chapterverse.store import FileRecord, Store, TocRecord

DEMO = Path(__file__).resolve().parents[1] / "src" / "chapterverse" / "demo"


class _StoreView:
    """The stored text the reader reads, and no other part of the store."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def languages(self) -> list[str]:
        return self._store.languages()

    def file(self, file_id: int) -> FileRecord:
        return self._store.file(file_id)

    def files(self, doc_id: int) -> list[FileRecord]:
        return self._store.files(doc_id)

    def toc(self, doc_id: int) -> list[TocRecord]:
        return self._store.toc(doc_id)


class _RarityView:
    def __init__(self, library: Library) -> None:
        self._library = library

    def term_rarity(self, terms: Sequence[str]) -> dict[str, float]:
        return self._library.retriever.term_rarity(terms)


class OnlyWhatTheReaderNeeds:
    """A real library seen through the protocol's members alone (slots: no attribute can be added or found)."""

    __slots__ = ("_library",)

    def __init__(self, library: Library) -> None:
        self._library = library

    @property
    def store(self) -> _StoreView:
        return _StoreView(self._library.store)

    @property
    def embedder(self) -> Embedder:
        return self._library.embedder

    @property
    def retriever(self) -> _RarityView:
        return _RarityView(self._library)

    def search(self, query: str, *, k: int = 5, doc_ids: Sequence[int] | None = None,
               query_vector: np.ndarray | None = None) -> list[Hit]:
        return self._library.search(query, k=k, doc_ids=doc_ids, query_vector=query_vector)

    def resolve(self, tag: str | Span) -> ResolvedSpan:
        return self._library.resolve(tag)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Library:
    library = Library(tmp_path_factory.mktemp("demo"), embedder=HashingEmbedder())
    library.ingest([DEMO])
    return library


@pytest.mark.parametrize("question", [
    "Who kept the light on Gull Rock?",
    "Who is Marta Olsen?",  # "Who is X?": the reader also reads whole files for X's introduction
    "What is the capital of Peru?",  # refused
])
def test_the_reader_answers_through_the_protocol_alone(demo: Library, question: str) -> None:
    doc_id = demo.documents()[0].id
    for doc_ids in (None, [doc_id]):
        through_protocol = extractive_answer(OnlyWhatTheReaderNeeds(demo), question, doc_ids=doc_ids)
        assert through_protocol == extractive_answer(demo, question, doc_ids=doc_ids)
    assert extractive_answer(OnlyWhatTheReaderNeeds(demo), "Who kept the light on Gull Rock?").citations
