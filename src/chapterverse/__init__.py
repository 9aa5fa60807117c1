"""chapterverse: answers about books and document collections with chapter and verse.

The public Python API, what the CLI and the server are built on::

    import chapterverse

    library = chapterverse.open_library("~/books", create=True)
    library.ingest(["moby-dick.epub"])
    for hit in library.search("white whale", k=3):
        print(hit.tag, hit.doc_title, hit.text[:80])
    answer = chapterverse.ask(library, "Who is Queequeg?")
    print(answer.state, answer.answer)   # answered, unsure (passages that may help) or not_found; every sentence cited
    for citation in answer.citations:
        print(citation.tag, library.resolve(citation.tag).text)

Names are imported when first used (PEP 562), so ``import chapterverse`` stays cheap for the commands that
need little of it. Everything else in the package is internal and may change between versions.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .answering import AnswerResult, AnswerSpanOut
    from .answering.ask import ask
    from .citations import Citation
    from .errors import (
        ChapterverseError,
        EmbeddingError,
        InputError,
        NotFoundError,
        ProviderError,
        SourceError,
        StoreError,
        TagError,
    )
    from .library import IngestResult, Library, open_library
    from .llm.provider_config import ProviderConfig
    from .positions import ResolvedSpan, Span
    from .search.retrieval import Hit, SearchResult

__all__ = [
    "__version__",
    "open_library",
    "Library",
    "IngestResult",
    "Hit",
    "SearchResult",
    "ResolvedSpan",
    "Span",
    "ask",
    "AnswerResult",
    "Citation",
    "AnswerSpanOut",
    "ProviderConfig",
    "ChapterverseError",
    "InputError",
    "SourceError",
    "TagError",
    "NotFoundError",
    "StoreError",
    "EmbeddingError",
    "ProviderError",
]

_HOMES = {
    "open_library": "library", "Library": "library", "IngestResult": "library", "Hit": "search.retrieval",
    "SearchResult": "search.retrieval", "ResolvedSpan": "positions", "Span": "positions", "ask": "answering.ask",
    "AnswerResult": "answering", "Citation": "citations", "AnswerSpanOut": "answering",
    "ProviderConfig": "llm.provider_config", "ChapterverseError": "errors", "InputError": "errors", "SourceError": "errors",
    "TagError": "errors", "NotFoundError": "errors", "StoreError": "errors", "EmbeddingError": "errors",
    "ProviderError": "errors",
}


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("chapterverse")
        except PackageNotFoundError:
            return "0+unknown"
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'chapterverse' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{home}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
