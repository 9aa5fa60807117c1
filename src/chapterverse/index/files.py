"""What the memory-mapped indexes share: a directory of immutable segment files, a manifest, and how the
index follows its store.

Both :mod:`chapterverse.index.vectors` and :mod:`chapterverse.index.lexical` keep their data as ``.npy`` files
named ``<segment>.<kind>.npy`` plus one ``manifest.json`` that names the live segments. The rules that make
that crash-safe and shareable between processes live here, once:

- every file is written under a temporary name, fsynced and renamed into place, and never modified after;
- the manifest is written last (then the directory is fsynced), so a crash leaves the old index or the new one;
- files the manifest does not name, and leftovers of interrupted writes, are garbage;
- writers in different processes serialize on ``flock`` of ``.lock`` in the directory;
- a file that does not match what the manifest promises is :class:`CorruptIndex`, which the owner answers by
  rebuilding from the store: the index is a cache of the store, never the only copy of anything.

:class:`FollowedIndex` holds the one way both indexes follow the store's generation counter: load the files
when they match the store, else take the writer lock, look again (another process may have moved the files on
while we waited), then append what changed or rebuild. Each index says how to read its own state of the store,
build, append and describe a snapshot; the order of those steps is written here only.
"""

from __future__ import annotations

import json
import logging
import os
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from enum import StrEnum
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

import numpy as np

from ..threadsafe_ast import AST_LOCK
from ..store import IndexFeed
from ..store.vectorfile import sync_directory

try:  # POSIX; elsewhere writers in one process are still serialized by the owner's in-process lock
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = ["MANIFEST", "CorruptIndex", "Refresh", "FollowedIndex", "save_npy", "load_npy", "write_manifest",
           "read_manifest", "manifest_moved_on", "collect_garbage", "writer_lock"]

MANIFEST = "manifest.json"
_LOCK = ".lock"
_LOG = logging.getLogger(__name__)


class CorruptIndex(Exception):
    """The files on disk do not form a valid index (rebuilt, never surfaced)."""


class Refresh(StrEnum):
    """What the latest refresh of an index did (its stats report it: ``bench scale`` times a build apart from
    opening an index that matched the store)."""

    NONE = "none"
    """Not refreshed yet."""
    LOADED = "loaded"
    """The files matched the store: opened, nothing written."""
    APPENDED = "appended"
    """Segments of the chunks written since were added; removed documents were masked."""
    MERGED = "merged"
    """As appended, and small segments were merged into larger ones."""
    COMPACTED = "compacted"
    """As appended, and rows of removed documents were dropped by rewriting their segments."""
    REBUILT = "rebuilt"
    """Built from the store from scratch (no index, another model or settings, damaged files, counts off)."""


def save_npy(path: Path, array: np.ndarray) -> None:
    """Write ``array`` to ``path`` atomically: temporary name, fsync, rename."""
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    with open(tmp, "wb") as f:
        np.save(f, np.ascontiguousarray(array), allow_pickle=False)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def load_npy(path: Path, rows: int, dtype: str, width: int | None = None) -> np.ndarray:
    """Memory-map ``path`` and check its shape and dtype; any mismatch is a corrupt index."""
    try:
        with AST_LOCK:  # np.load parses the header with ast.literal_eval: see chapterverse.threadsafe_ast
            array = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise CorruptIndex(f"{path.name}: {exc}") from exc
    shape = (rows,) if width is None else (rows, width)
    if array.shape != shape or array.dtype != np.dtype(dtype):
        raise CorruptIndex(f"{path.name}: expected {dtype} {shape}, found {array.dtype} {array.shape}")
    return np.asarray(array)  # a plain ndarray view of the map: BLAS and fancy indexing without memmap overhead


def write_manifest(directory: Path, manifest: dict[str, Any]) -> None:
    """Replace ``directory/manifest.json`` atomically and durably (temporary name, fsync, rename, fsync the
    directory): the manifest is written last, so a crash leaves the previous index whole. Raises OSError."""
    path = directory / MANIFEST
    tmp = path.with_name(f"{MANIFEST}.tmp-{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(manifest, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    sync_directory(directory)


def read_manifest(directory: Path, what: str) -> dict[str, Any] | None:
    """The manifest, or None when there is none or it cannot be read (logged: ``what`` is then rebuilt)."""
    try:
        raw = json.loads((directory / MANIFEST).read_text("utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        _LOG.warning("%s: unreadable manifest of the %s (%s); rebuilding", directory, what, exc)
        return None
    if not isinstance(raw, dict):
        _LOG.warning("%s: the manifest of the %s is not an object; rebuilding", directory, what)
        return None
    return raw


def manifest_moved_on(directory: Path, generation: int | None) -> bool:
    """True when a readable manifest on disk is of another generation than ``generation`` (None: any is news)."""
    try:
        raw = json.loads((directory / MANIFEST).read_text("utf-8"))
        return generation is None or int(raw.get("generation", -1)) != generation
    except (OSError, ValueError, TypeError, AttributeError):
        return False


def collect_garbage(directory: Path, keep: set[str]) -> None:
    """Delete files of segments the manifest no longer names and leftovers of interrupted writes."""
    for path in directory.iterdir():
        name = path.name
        if name in (MANIFEST, _LOCK):
            continue
        if ".tmp" in name or name.split(".", 1)[0] not in keep:
            try:
                path.unlink()
            except OSError:  # mapped elsewhere on a platform that forbids it: next time
                pass


@contextmanager
def writer_lock(directory: Path, what: str) -> Iterator[bool]:
    """Hold the directory's writer lock (other processes wait). Yields False, holding nothing, when the
    directory cannot be written: the owner then keeps ``what`` in memory only."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        handle = open(directory / _LOCK, "a+b")  # noqa: SIM115 - closed below
    except OSError as exc:
        _LOG.warning("%s: cannot write the %s (%s); keeping it in memory", directory, what, exc)
        yield False
        return
    with handle:
        if fcntl is not None:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        yield True


class _Named(Protocol):
    @property
    def name(self) -> str: ...


class Snapshot(Protocol):
    """What :class:`FollowedIndex` reads of an index's immutable snapshot."""

    @property
    def generation(self) -> int: ...

    @property
    def segments(self) -> Sequence[_Named]: ...


class StoreState(Protocol):
    """What an index reads of its store in one transaction before deciding what to do."""

    @property
    def generation(self) -> int: ...

    @property
    def last_edit(self) -> int:
        """The generation of the store's latest in-place chunk edit (:meth:`IndexFeed.last_edit`; 0: none)."""
        ...


SnapshotT = TypeVar("SnapshotT", bound=Snapshot)
StateT = TypeVar("StateT", bound=StoreState)


class FollowedIndex(ABC, Generic[SnapshotT, StateT]):
    """An index kept in a directory beside a store that lends it an :class:`~chapterverse.store.IndexFeed`
    (SQLite), or in memory for other stores, following the store.

    Subclasses keep their snapshot and lock and call :meth:`_update` from their ``refresh``; they say what a
    snapshot is (:meth:`_from_manifest`, :meth:`_manifest`) and how to make one (:meth:`_build_from_store`,
    :meth:`_apply_changes`). ``persistent`` turns False for good when the directory cannot be written: the
    index then lives in memory, rebuilt in each process.
    """

    what: str = "index"
    """Its name in log lines."""

    def __init__(self, directory: Path, feed: IndexFeed | None) -> None:
        self.directory = directory
        self._feed = feed
        """What the store lends to feed appends; None: the index is rebuilt in memory on every change."""
        self.persistent = feed is not None
        self._last_refresh = Refresh.NONE

    @property
    def incremental(self) -> bool:
        """Whether the index follows the store by appending (a store with a feed: SQLite); other stores rebuild
        it in memory."""
        return self._feed is not None

    @property
    def _incremental_feed(self) -> IndexFeed:
        """The store's feed of an incremental index (appends, merges and the vector index run only on those)."""
        assert self._feed is not None, "only an index beside its store's file is followed incrementally"
        return self._feed

    # -- what each index says ---------------------------------------------------------------------------
    @abstractmethod
    def _read_state(self) -> StateT:
        """The store's state as this index compares it with a snapshot (inside one read transaction)."""

    @abstractmethod
    def _matches(self, state: StateT, snap: SnapshotT) -> bool:
        """Whether ``snap`` is the index of exactly ``state``."""

    def _unusable(self, state: StateT, snap: SnapshotT) -> bool:
        """Whether ``snap`` cannot be brought to ``state`` by appending (then it is rebuilt): it is of a later
        state, or of one before a chunk was edited in place (appending sees new chunk ids only)."""
        return snap.generation > state.generation or snap.generation < state.last_edit

    @abstractmethod
    def _build_from_store(self, old: SnapshotT | None, reason: str) -> SnapshotT:
        """A snapshot of every chunk in the store, its files written (the manifest is written by the caller)."""

    @abstractmethod
    def _apply_changes(self, snap: SnapshotT, state: StateT) -> SnapshotT:
        """``snap`` brought to ``state`` (appends, masks, maintenance; may rebuild), its manifest written."""

    @abstractmethod
    def _manifest(self, snap: SnapshotT) -> dict[str, Any]:
        """What ``manifest.json`` records of ``snap``."""

    @abstractmethod
    def _from_manifest(self, raw: dict[str, Any], state: StateT) -> SnapshotT | None:
        """The snapshot ``raw`` describes, its files mapped and checked; None when it is of another format,
        model or settings. Raises CorruptIndex (or KeyError, TypeError, ValueError) when files do not match."""

    # -- the lifecycle, once ----------------------------------------------------------------------------
    def _update(self, snap: SnapshotT | None) -> SnapshotT:
        """``snap`` brought up to the store: loaded from disk, appended to, or rebuilt."""
        with self._consistent():
            state = self._read_state()
            if not self.incremental:
                return self._rebuild_from_store(snap, "the store changed")
            if snap is None or self._newer_on_disk(snap):
                snap = self._load(state) or snap
                if snap is not None and self._matches(state, snap):
                    self._last_refresh = Refresh.LOADED
                    return snap
            with self._writing():
                if self._newer_on_disk(snap):  # another process moved the files on while we waited for the lock
                    snap = self._load(state) or snap
                if snap is not None and self._matches(state, snap):
                    self._last_refresh = Refresh.LOADED
                    return snap
                if snap is None or self._unusable(state, snap):
                    return self._rebuild_from_store(snap, "no index for this library state")
                return self._apply_changes(snap, state)

    def _rebuild_from_store(self, old: SnapshotT | None, reason: str) -> SnapshotT:
        snap = self._build_from_store(old, reason)
        self._write_manifest(snap)
        self._last_refresh = Refresh.REBUILT
        return snap

    def _consistent(self) -> AbstractContextManager[object]:
        """One read transaction (SQLite), so the generation and the rows are read from the same state."""
        return self._feed.read_transaction() if self._feed is not None else nullcontext()

    @contextmanager
    def _writing(self) -> Iterator[None]:
        """Hold the directory's writer lock (other processes wait); an unwritable directory means memory only."""
        if not self.persistent:
            yield
            return
        with writer_lock(self.directory, self.what) as writable:
            self.persistent = writable
            yield

    def _newer_on_disk(self, snap: SnapshotT | None) -> bool:
        return self.persistent and manifest_moved_on(self.directory, None if snap is None else snap.generation)

    def _write_manifest(self, snap: SnapshotT) -> None:
        """Name ``snap``'s segments in the manifest, then delete every other file (nothing, in memory only)."""
        if not self.persistent:
            return
        try:
            write_manifest(self.directory, self._manifest(snap))
        except OSError as exc:
            _LOG.warning("%s: cannot write the %s manifest (%s); keeping it in memory", self.directory, self.what,
                         exc)
            self.persistent = False
            return
        collect_garbage(self.directory, {s.name for s in snap.segments})

    def _load(self, state: StateT) -> SnapshotT | None:
        """The index on disk, if it is complete and of this format, model and settings; None otherwise."""
        raw = read_manifest(self.directory, self.what) if self.persistent else None
        if raw is None:
            return None
        try:
            return self._from_manifest(raw, state)
        except (CorruptIndex, KeyError, TypeError, ValueError) as exc:
            _LOG.warning("%s: the %s does not match its manifest (%s); rebuilding", self.directory, self.what, exc)
            return None

    def _bytes_on_disk(self) -> int:
        return sum(p.stat().st_size for p in self.directory.glob("*.npy")) if self.persistent else 0
