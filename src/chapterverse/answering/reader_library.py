"""What the extractive reader needs of a library, as a narrow protocol instead of the whole :class:`Library`.

The reader searches, reads the files around the passages it found (their text, their contents' titles, the
library's languages), embeds the question and the candidate sentences, weighs question words by their rarity and
resolves the sentences it cites; nothing else. Naming exactly that lets a caller hand it any object that can do
those things (``chapterverse.library.Library`` does, and mypy checks that it still does wherever one is passed),
and lets a reader of :mod:`.extractive` see what it depends on without reading the facade.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import numpy as np

    from ..analysis import AnalysedQuery
    from ..embeddings import Embedder
    from ..positions import ResolvedSpan, Span
    from ..search.retrieval import Hit
    from ..store import FileRecord, TocRecord

__all__ = ["ReaderLibrary", "ReaderStore", "TermRarity"]


class ReaderStore(Protocol):
    """The stored text the reader reads around each passage (``chapterverse.store.Store`` has these)."""

    def languages(self) -> list[str]: ...
    def file(self, file_id: int) -> FileRecord: ...
    def files(self, doc_id: int) -> list[FileRecord]: ...
    def toc(self, doc_id: int) -> list[TocRecord]: ...


class TermRarity(Protocol):
    """How rare each question term is in the library (``search.retrieval.Retriever.term_rarity``)."""

    def term_rarity(self, terms: Sequence[str]) -> dict[str, float]: ...


class ReaderLibrary(Protocol):
    """A library as the extractive reader uses it: search, stored text, embedder, term rarity, resolve."""

    @property
    def store(self) -> ReaderStore: ...
    @property
    def embedder(self) -> Embedder: ...
    @property
    def retriever(self) -> TermRarity: ...

    def search(self, query: str | AnalysedQuery, *, k: int = ..., doc_ids: Sequence[int] | None = ...,
               query_vector: np.ndarray | None = ...) -> list[Hit]: ...
    def resolve(self, tag: str | Span) -> ResolvedSpan: ...
