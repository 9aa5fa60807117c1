"""Copies of memory-mapped matrices in process memory, made by a background thread once they pay.

The maps let a process open any size in milliseconds, but a scan of the page cache's 4 KB pages ran about a
fifth slower here than of anonymous (huge-page) memory: 100 k x 512 in 9.9 ms from the map against 7.9 ms
from memory. So once a process searches a second time (a server, a benchmark; not a one-shot CLI search,
which would only pay for the copy), and after each write from then on, a thread copies the matrices into
process memory, up to a byte limit, and hands each copy over as soon as it is complete; searches scan the map
until then. A copy that fails (no memory) leaves the maps in use for good: it is never retried.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np

__all__ = ["ResidentCopies", "MappedMatrix"]

_LOG = logging.getLogger(__name__)


class MappedMatrix(Protocol):
    """A named matrix that never changes once named (a segment's vectors)."""

    @property
    def name(self) -> str: ...

    @property
    def matrix(self) -> np.ndarray: ...


class ResidentCopies:
    """The copies of one index, by segment name. Every method but :meth:`note_search` and :meth:`wait` runs with
    the index's lock held (``lock``, shared so that a copy is swapped into the index's snapshot atomically)."""

    def __init__(self, lock: threading.Lock, limit_bytes: int, current: Callable[[], Sequence[MappedMatrix] | None],
                 swap_in: Callable[[], None], mapped: Callable[[], bool], where: str) -> None:
        self.limit_bytes = limit_bytes
        self._lock = lock
        self._current = current
        """The index's segments now (None: not opened yet), read under the lock."""
        self._swap_in = swap_in
        """Makes the index's snapshot scan the copies it holds (called under the lock after each copy)."""
        self._mapped = mapped
        """Whether the index's segments are memory maps now (an index kept in memory has nothing to copy)."""
        self._where = where
        self._copies: dict[str, np.ndarray] = {}
        self._copying = threading.Event()
        self._searches = 0
        """Searches so far, up to the second: the one that makes copying worthwhile."""
        self._failed = False
        self._settled = threading.Condition(lock)

    def copy_of(self, name: str) -> np.ndarray | None:
        return self._copies.get(name)

    def holds(self, segments: Sequence[MappedMatrix]) -> bool:
        """Whether every one of ``segments`` is scanned from a copy."""
        return all(seg.name in self._copies for seg in segments)

    @property
    def copying(self) -> bool:
        return self._copying.is_set()

    def note_search(self) -> None:
        """Count a search; the second one starts the copies."""
        if self._searches >= 2:
            return
        with self._lock:
            self._searches += 1
            if self._searches == 2:
                self.follow()

    def follow(self) -> None:
        """Forget the copies of replaced segments and start copying new ones, once a second search has shown that
        this process searches more than once (called with the lock held, after every change of segments)."""
        segments = self._current()
        if segments is None or self._searches < 2 or self._failed:
            self._settled.notify_all()
            return
        names = {seg.name for seg in segments}
        for name in set(self._copies) - names:
            del self._copies[name]
        wanted = [seg for seg in segments if seg.name not in self._copies]
        total = sum(seg.matrix.nbytes for seg in segments)
        if not wanted or not self._mapped() or total > self.limit_bytes or self._copying.is_set():
            self._settled.notify_all()
            return
        self._copying.set()
        threading.Thread(target=self._copy, args=(wanted,), name="chapterverse-resident", daemon=True).start()

    def wait(self, timeout: float | None) -> bool:
        """Start the copies now, as a second search would, and wait until no copy is under way; False when
        ``timeout`` passed first."""
        with self._settled:
            self._searches = 2
            self.follow()
            return self._settled.wait_for(lambda: not self._copying.is_set(), timeout)

    def _copy(self, segments: list[MappedMatrix]) -> None:
        try:
            for seg in segments:
                copy = np.array(seg.matrix)  # numpy asks for huge pages on large allocations
                with self._lock:
                    self._copies[seg.name] = copy
                    self._swap_in()
        except Exception as exc:  # noqa: BLE001 - MemoryError above all: the map still serves, never retry
            _LOG.warning("%s: keeping the vectors memory-mapped (%s: %s)", self._where, type(exc).__name__, exc)
            with self._lock:
                self._failed = True
        finally:
            with self._lock:
                self._copying.clear()
                self.follow()  # segments that arrived while copying
