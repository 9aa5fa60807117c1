"""The knowledge-base folder: its files kept in sync with the library's documents of them.

Folder files are documents whose source is their path relative to the folder; they carry
``kb_origin: "folder"`` in their metadata, so a sync removes exactly the folder documents whose file
is gone and never touches books added through the reader or text added through the API. A sync
reads and hashes each file and re-indexes only files whose hash changed (``LibraryWriter.ingest_file``, the
path ``chapterverse ingest`` takes too): a restart with unchanged files embeds nothing and loads no model.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .cancel import CancelToken
from .errors import ChapterverseError, InputError, StoppingError
from .library import ORIGIN_KEY, IngestResult, Library
from .sources import Root, iter_folder

__all__ = ["FolderSync", "SyncReport", "ORIGIN_KEY", "README_NAME", "ensure_folder"]

log = logging.getLogger(__name__)

README_NAME = "README"
"""The scaffold written into a new folder; without an extension, so it is never indexed."""
README_TEXT = """\
chapterverse knowledge base
===========================

Put the files the assistant should know about in this folder (subfolders too):

  .md .markdown .txt   plain text and Markdown
  .jsonl               pre-chunked: one {"text": ..., "source": ..., ...} object per line
  .epub .pdf .html     books and documents

The server indexes new and changed files at startup (and every few seconds with --rag_watch),
removes files you delete from the index, and keeps its index in the hidden .chapterverse folder.
Text can also be added over HTTP: see /docs, section rag.

This README has no extension, so it is not indexed itself.
"""


@dataclass(slots=True)
class SyncReport:
    """What one folder sync did."""

    indexed: list[str] = field(default_factory=list)
    unchanged: int = 0
    removed: list[str] = field(default_factory=list)
    duplicates: dict[str, str] = field(default_factory=dict)
    """Files not indexed because another source already holds the same content: file -> that source."""
    errors: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    force_rebuild: bool = False

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def ensure_folder(folder: Path) -> bool:
    """Create a missing knowledge-base folder with a README; True when it was created."""
    if folder.is_dir():
        return False
    if folder.exists():
        raise InputError(f"{folder}: --rag_kb_path names the knowledge base's folder, and this is not a folder")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / README_NAME).write_text(README_TEXT, encoding="utf-8")
    log.info("RAG: created knowledge-base folder %s", folder)
    return True


class FolderSync:
    """A folder and the library's documents of it, kept in step; blocking (call it from a worker thread).

    ``exclusive`` is the knowledge base's write lock (a sync must not interleave with other writes, in this
    server or another on the library); ``cancel`` (the server's token) is checked as a changed file is read
    and embedded: a stopping server abandons the file, before anything of it is written, and the sync. Files
    are opened beneath the folder (``sources.Root``): a FIFO, a file reached through a swapped-in symlink or
    (unless ``hardlinks``) one with other hard links is one bad file, skipped with its reason, never a sync that
    hangs or reads outside.
    """

    def __init__(self, library: Library, path: str | Path, *, exclusive: Callable[[], AbstractContextManager[None]],
                 cancel: CancelToken, hardlinks: bool = False) -> None:
        self.library = library
        self.path = Path(path)
        self.root = Root(self.path, hardlinks=hardlinks)
        self.last_sync: SyncReport | None = None
        self._exclusive = exclusive
        self._cancel = cancel
        self._snapshot: dict[str, tuple[int, int]] = {}

    def sync(self, *, force_rebuild: bool = False) -> SyncReport:
        """Index new and changed files, drop documents of deleted files; one bad file never stops the rest."""
        started = time.perf_counter()
        report = SyncReport(force_rebuild=force_rebuild)
        store = self.library.store
        with self._exclusive():
            self._snapshot = self._scan()
            files = list(iter_folder(self.path, contained=True))
            present = {source for _, source in files}
            # Deleted files go first: a file renamed (or moved between subfolders) is then new content, not a copy.
            gone = [d for d in store.documents() if d.metadata.get(ORIGIN_KEY) == "folder" and d.source not in present]
            if gone:
                store.remove_documents([d.id for d in gone])
                report.removed = sorted({d.source for d in gone})
            for path, source in files:
                try:
                    result = self._sync_file(path, source, force_rebuild)
                except StoppingError:
                    raise
                except ChapterverseError as exc:
                    report.errors[source] = str(exc)
                    log.warning("RAG: cannot index %s: %s", source, exc)
                    continue
                if result.duplicate_of is not None:
                    report.duplicates[source] = result.duplicate_of.source
                    log.warning("RAG: not indexing %s: the same content is already indexed as %s", source,
                                result.duplicate_of.source)
                elif result.changed:
                    report.indexed.append(source)
                else:
                    report.unchanged += 1
        report.seconds = round(time.perf_counter() - started, 3)
        self.last_sync = report
        log.info("RAG: sync of %s in %.2f s — %d indexed, %d unchanged, %d removed, %d failed", self.path,
                 report.seconds, len(report.indexed), report.unchanged, len(report.removed), len(report.errors))
        return report

    def _sync_file(self, path: Path, source: str, force_rebuild: bool) -> IngestResult:
        """The file (re-)indexed only when its content hash changed, or ``force_rebuild``; a copy of content
        already indexed under another source is not indexed twice."""
        result = self.library.writer.ingest_file(path, source=source, force_rebuild=force_rebuild, cancel=self._cancel,
                                          metadata={ORIGIN_KEY: "folder"}, root=self.root)
        if result.changed:
            log.info("RAG: indexed %s", source)
        return result

    def _scan(self) -> dict[str, tuple[int, int]]:
        """(mtime, size) of every indexable file: cheap enough to poll."""
        if not self.path.is_dir():
            return {}
        snapshot = {}
        for path, source in iter_folder(self.path):
            try:
                stat = path.stat()
            except OSError:
                continue
            snapshot[source] = (stat.st_mtime_ns, stat.st_size)
        return snapshot

    def changed_on_disk(self) -> bool:
        return self._scan() != self._snapshot

    def watch(self, stop: threading.Event, interval: float) -> None:
        """Poll the folder until ``stop`` is set; sync when anything changed (run in a thread)."""
        while not stop.wait(interval):
            try:
                if self.changed_on_disk():
                    self.sync()
            except StoppingError:
                return
            except Exception:  # a watcher must log, not die
                log.exception("RAG: watching %s failed", self.path)
