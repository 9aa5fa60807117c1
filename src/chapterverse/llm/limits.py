"""How much one turn with a model may cost: tokens to write (``max_tokens``) and seconds in all (a deadline).

Every request chapterverse makes to a model carries a ``max_tokens``: a server with no generation cap of its own
(llama.cpp's default) lets a looping model write until its window is full. And a turn (every round of tool calls,
streamed or not) ends at its :class:`Deadline`: a timeout between tokens never ends a model that keeps writing.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ..errors import DeadlineError

__all__ = ["DEFAULT_DEADLINE_S", "DEFAULT_MAX_TOKENS", "FALLBACK_RESERVE_S", "Deadline"]

DEFAULT_MAX_TOKENS = 1024
"""Tokens a model may write per request: a cited answer of several paragraphs, far short of a runaway."""
DEFAULT_DEADLINE_S = 60.0
"""Seconds one turn may take, every round included."""
FALLBACK_RESERVE_S = 3.0
"""At most this much of a model's turn (and at most a quarter of it) is kept for the extractive answer that
replaces an answer cut before it began: begun beside the turn it is ready or nearly by then, but begun cold (its
imports, the embedding model, the indexes) it takes up to a second on a busy CPU, and a command still has to
print it and exit."""


@dataclass(frozen=True, slots=True)
class Deadline:
    """When a turn must end: ``seconds`` from its start. ``setting`` names what sets it, for messages."""

    seconds: float
    setting: str
    reserve_s: float = 0.0
    """Seconds kept at the end for what replaces an answer the model did not begin (the extractive answer):
    the model's requests end this much before the deadline."""
    started: float = field(default_factory=time.monotonic)

    @property
    def remaining(self) -> float:
        """Seconds the model has left (0 when they passed)."""
        return max(0.0, self.started + self.seconds - self.reserve_s - time.monotonic())

    @property
    def passed(self) -> bool:
        return self.remaining <= 0.0

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def describe(self) -> str:
        """``the 60 s turn deadline (--llm-deadline-s)``."""
        return f"the {self.seconds:g} s turn deadline ({self.setting})"

    def error(self, url: str) -> DeadlineError:
        """The error of a request to ``url`` stopped at this deadline."""
        return DeadlineError(f"{url} did not finish within {self.describe()}; the request was stopped")
