"""The error hierarchy of chapterverse.

    ChapterverseError                 every error this package raises on purpose
    ├── InputError                    the user's input is wrong (CLI exit code 2)
    │   ├── SourceError               a file cannot be read as a document (names the file and reason)
    │   │   ├── UnsupportedFormatError
    │   │   ├── EncryptedSourceError  a PDF needs a (different) password
    │   │   └── SourceTooLargeError   size, zip-bomb and nesting limits
    │   ├── BadLinesError             a JSONL file with invalid lines (lists every bad line number)
    │   ├── TagError                  a malformed position tag, or one that names nothing in the library
    │   └── NotFoundError             an unknown document, chunk or chat id
    ├── StoreError                    the library cannot be opened or written
    │   └── EmbeddingMismatchError    vectors from another embedding model or dimension
    ├── EmbeddingError                an embedding backend failed
    ├── StoppingError                 the server is stopping: long work abandoned before it wrote anything
    ├── OverBudgetError               a request ran past its time budget: abandoned before it wrote anything
    ├── ClientGoneError               a request's client disconnected: abandoned before it wrote anything
    └── ProviderError                 the chat model endpoint failed (after retries)
        ├── ProviderUnreachableError
        ├── ProviderAuthError
        └── DeadlineError             a model's turn ran past its deadline; its request was stopped

Third-party exceptions are mapped to these at one boundary each (parsers, store, providers) with
``raise ... from exc`` so callers only ever need to know this tree.
"""

from __future__ import annotations

from pathlib import Path

__all__ = [
    "ChapterverseError",
    "InputError",
    "SourceError",
    "UnsupportedFormatError",
    "EncryptedSourceError",
    "SourceTooLargeError",
    "BadLinesError",
    "TagError",
    "NotFoundError",
    "StoreError",
    "EmbeddingMismatchError",
    "EmbeddingError",
    "StoppingError",
    "OverBudgetError",
    "ClientGoneError",
    "ProviderError",
    "ProviderUnreachableError",
    "ProviderAuthError",
    "DeadlineError",
]


class ChapterverseError(Exception):
    """Base of every error chapterverse raises on purpose."""


class InputError(ChapterverseError):
    """The input given by the user is wrong; the CLI exits with code 2."""


class SourceError(InputError):
    """A file cannot be read as a document. The message names the file and the reason."""

    def __init__(self, path: str | Path, reason: str) -> None:
        self.path = str(path)
        self.reason = reason
        super().__init__(f"{self.path}: {reason}")


class UnsupportedFormatError(SourceError):
    """The file's extension or content is not a format chapterverse reads."""


class EncryptedSourceError(SourceError):
    """The file is encrypted and the password given (or the empty one) does not open it."""


class SourceTooLargeError(SourceError):
    """The file exceeds a safety limit (size, decompression ratio, nesting depth)."""


class BadLinesError(SourceError):
    """A JSONL file has invalid lines; the whole file is rejected."""

    def __init__(self, path: str | Path, bad_lines: dict[int, str]) -> None:
        self.bad_lines = dict(sorted(bad_lines.items()))
        details = "; ".join(f"line {n}: {why}" for n, why in self.bad_lines.items())
        super().__init__(path, f"{len(self.bad_lines)} bad line(s) (1-based line numbers): {details}")


class TagError(InputError):
    """A position tag is malformed or does not name a span in this library."""


class NotFoundError(InputError):
    """An id (document, chunk, chat) does not exist."""


class StoreError(ChapterverseError):
    """The library store cannot be opened, migrated or written."""


class EmbeddingMismatchError(StoreError):
    """The library's vectors were made by another embedding model or dimension."""


class EmbeddingError(ChapterverseError):
    """An embedding backend failed to load or to embed."""


class StoppingError(ChapterverseError):
    """The server is stopping; an ingest or embedding was abandoned between batches, before its write."""


class OverBudgetError(ChapterverseError):
    """A request's work ran past its time budget; it was abandoned between batches, before its write."""


class ClientGoneError(ChapterverseError):
    """A request's client disconnected; its work was abandoned between batches, before its write."""


class ProviderError(ChapterverseError):
    """The chat-model endpoint failed after bounded retries."""


class ProviderUnreachableError(ProviderError):
    """The endpoint cannot be reached (connection refused, DNS, timeout)."""


class ProviderAuthError(ProviderError):
    """The endpoint rejected the API key (401/403)."""


class DeadlineError(ProviderError):
    """A model's turn ran past its deadline: the request to the model was stopped (its connection closed)."""
