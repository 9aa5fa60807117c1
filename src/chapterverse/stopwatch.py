"""Where a search's time goes: seconds per named stage, lap by lap.

A search passes through rankings, features, chunk reads and the relevance model; when one of them grows, the
total moves and nothing says which. :class:`Stopwatch` is what ``Retriever.search`` and ``Library.search_report``
record their stages into: a ``time.perf_counter`` call per stage, so it is always on. ``chapterverse search
--verbose`` logs the stages of its search (the ``chapterverse.search.retrieval`` logger at DEBUG), and ``chapterverse
bench scale`` reports each stage's median over its queries.
"""

from __future__ import annotations

import logging
from time import perf_counter

__all__ = ["Stopwatch"]


class Stopwatch:
    """Seconds per stage of one piece of work: each :meth:`lap` charges the time since the previous lap (or the
    start) to its stage; a stage lapped twice adds up."""

    __slots__ = ("laps", "_last")

    def __init__(self) -> None:
        self.laps: dict[str, float] = {}
        self._last = perf_counter()

    def lap(self, stage: str) -> None:
        now = perf_counter()
        self.laps[stage] = self.laps.get(stage, 0.0) + now - self._last
        self._last = now

    def skip(self) -> None:
        """Charge the time since the last lap to no stage (work of the caller's that is not a stage)."""
        self._last = perf_counter()

    @property
    def total(self) -> float:
        return sum(self.laps.values())

    def summary(self) -> str:
        """``lexical 0.41 ms, dense 2.10 ms, ... (total 3.02 ms)``."""
        stages = ", ".join(f"{stage} {seconds * 1000:.2f} ms" for stage, seconds in self.laps.items())
        return f"{stages} (total {self.total * 1000:.2f} ms)"

    def log(self, logger: logging.Logger, what: str) -> None:
        """One DEBUG line naming ``what`` and its stages, when the logger shows DEBUG."""
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug("%s: %s", what, self.summary())
