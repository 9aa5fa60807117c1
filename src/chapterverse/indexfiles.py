"""The on-disk mechanics the memory-mapped indexes share: a directory of immutable segment files and a manifest.

Both :mod:`chapterverse.vectorindex` and :mod:`chapterverse.lexicalindex` keep their data as ``.npy`` files
named ``<segment>.<kind>.npy`` plus one ``manifest.json`` that names the live segments. The rules that make
that crash-safe and shareable between processes live here, once:

- every file is written under a temporary name, fsynced and renamed into place, and never modified after;
- the manifest is written last (then the directory is fsynced), so a crash leaves the old index or the new one;
- files the manifest does not name, and leftovers of interrupted writes, are garbage;
- writers in different processes serialize on ``flock`` of ``.lock`` in the directory;
- a file that does not match what the manifest promises is :class:`CorruptIndex`, which the owner answers by
  rebuilding from the store: the index is a cache of the store, never the only copy of anything.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from .astlock import AST_LOCK
from .store import SQLiteStore

try:  # POSIX; elsewhere writers in one process are still serialized by the owner's in-process lock
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = ["MANIFEST", "CorruptIndex", "save_npy", "load_npy", "write_manifest", "read_manifest",
           "manifest_moved_on", "collect_garbage", "writer_lock", "read_snapshot"]

MANIFEST = "manifest.json"
_LOCK = ".lock"
_LOG = logging.getLogger(__name__)


class CorruptIndex(Exception):
    """The files on disk do not form a valid index (rebuilt, never surfaced)."""


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
        with AST_LOCK:  # np.load parses the header with ast.literal_eval: see chapterverse.astlock
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
    _fsync_dir(directory)


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


@contextmanager
def read_snapshot(store: SQLiteStore) -> Iterator[None]:
    """One read transaction, so generation, documents and rows are read from the same state (WAL)."""
    db = store.db
    if db.in_transaction:
        yield
        return
    db.execute("BEGIN")
    try:
        yield
    finally:
        db.execute("COMMIT")


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)
