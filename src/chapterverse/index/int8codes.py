"""The int8 codes of each segment's vectors (:func:`chapterverse.index.dense.quantize`), made in process memory by a
background thread once they pay.

An exact scan reads every value of the matrix: 100 k x 512 is 100 MB of float16 a query, each value upcast to
float32 (0.1-0.15 s here; 9-17 ms when the file held float32). Searching the codes first reads half of those
bytes, in a kernel that needs no conversion, and scores only the rows that can still make the top k in float32
(:func:`chapterverse.index.dense.top_candidates`). Making the codes reads the whole matrix once, so a one-shot
CLI search would only pay for them: once a process searches a second time (a server, a benchmark), and after
each write from then on, a thread quantizes the segments, up to a byte limit, and hands each one's codes over
as soon as they are complete; searches scan the whole matrix until then. The codes are derived in memory,
never written: the vector file stays the one format every reader maps. A failure (no memory) leaves the
full scans in use for good: it is never retried.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np

from .dense import QuantizedRows, quantize

__all__ = ["ResidentCodes", "NamedMatrix"]

_LOG = logging.getLogger(__name__)


class NamedMatrix(Protocol):
    """A named matrix that never changes once named (a segment's vectors)."""

    @property
    def name(self) -> str: ...

    @property
    def matrix(self) -> np.ndarray: ...


class ResidentCodes:
    """The codes of one index, by segment name. Every method but :meth:`note_search` and :meth:`wait` runs with
    the index's lock held (``lock``, shared so that codes are swapped into the index's snapshot atomically)."""

    def __init__(self, lock: threading.Lock, limit_bytes: int, current: Callable[[], Sequence[NamedMatrix] | None],
                 swap_in: Callable[[], None], where: str) -> None:
        self.limit_bytes = limit_bytes
        self._lock = lock
        self._current = current
        """The index's segments now (None: not opened yet), read under the lock."""
        self._swap_in = swap_in
        """Makes the index's snapshot search the codes it holds (called under the lock after each segment)."""
        self._where = where
        self._codes: dict[str, QuantizedRows] = {}
        self._making = threading.Event()
        self._searches = 0
        """Searches so far, up to the second: the one that makes the codes worthwhile."""
        self._failed = False
        self._settled = threading.Condition(lock)

    def codes_of(self, name: str) -> QuantizedRows | None:
        return self._codes.get(name)

    def holds(self, segments: Sequence[NamedMatrix]) -> bool:
        """Whether every one of ``segments`` has its codes."""
        return all(seg.name in self._codes for seg in segments)

    @property
    def making(self) -> bool:
        return self._making.is_set()

    def note_search(self) -> None:
        """Count a search; the second one starts making the codes."""
        if self._searches >= 2:
            return
        with self._lock:
            self._searches += 1
            if self._searches == 2:
                self.follow()

    def follow(self) -> None:
        """Forget the codes of replaced segments and start making new ones, once a second search has shown that
        this process searches more than once (called with the lock held, after every change of segments)."""
        segments = self._current()
        if segments is None or self._searches < 2 or self._failed:
            self._settled.notify_all()
            return
        names = {seg.name for seg in segments}
        for name in set(self._codes) - names:
            del self._codes[name]
        wanted = [seg for seg in segments if seg.name not in self._codes]
        total = sum(seg.matrix.size + 8 * len(seg.matrix) for seg in segments)  # int8 codes, 2 float32s a row
        if not wanted or total > self.limit_bytes or self._making.is_set():
            self._settled.notify_all()
            return
        self._making.set()
        threading.Thread(target=self._make, args=(wanted,), name="chapterverse-codes", daemon=True).start()

    def wait(self, timeout: float | None) -> bool:
        """Start making the codes now, as a second search would, and wait until none are under way; False when
        ``timeout`` passed first."""
        with self._settled:
            self._searches = 2
            self.follow()
            return self._settled.wait_for(lambda: not self._making.is_set(), timeout)

    def _make(self, segments: list[NamedMatrix]) -> None:
        try:
            for seg in segments:
                codes = quantize(seg.matrix)
                with self._lock:
                    self._codes[seg.name] = codes
                    self._swap_in()
        except Exception as exc:  # noqa: BLE001 - MemoryError above all: float32 scans still serve, never retry
            _LOG.warning("%s: scanning the float32 vectors only (%s: %s)", self._where, type(exc).__name__, exc)
            with self._lock:
                self._failed = True
        finally:
            with self._lock:
                self._making.clear()
                self.follow()  # segments that arrived meanwhile
