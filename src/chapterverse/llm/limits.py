"""How much one turn with a model may cost: tokens to write (``max_tokens``) and seconds in all (a deadline).

Every request chapterverse makes to a model carries a ``max_tokens``: a server with no generation cap of its own
(llama.cpp's default) lets a looping model write until its window is full. And a turn (every round of tool calls,
streamed or not) ends at its :class:`Deadline`: a timeout between tokens never ends a model that keeps writing.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ..errors import DeadlineError

__all__ = ["DEFAULT_DEADLINE_S", "DEFAULT_MAX_TOKENS", "Deadline"]

DEFAULT_MAX_TOKENS = 1024
"""Tokens a model may write per request: a cited answer of several paragraphs, far short of a runaway."""
DEFAULT_DEADLINE_S = 60.0
"""Seconds one turn may take, every round included."""


@dataclass(frozen=True, slots=True)
class Deadline:
    """When a turn must end: ``seconds`` from its start. ``setting`` names what sets it, for messages."""

    seconds: float
    setting: str
    started: float = field(default_factory=time.monotonic)

    @property
    def remaining(self) -> float:
        """Seconds left (0 when passed)."""
        return max(0.0, self.started + self.seconds - time.monotonic())

    @property
    def passed(self) -> bool:
        return time.monotonic() >= self.started + self.seconds

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def describe(self) -> str:
        """``the 60 s turn deadline (--llm-deadline-s)``."""
        return f"the {self.seconds:g} s turn deadline ({self.setting})"

    def error(self, url: str) -> DeadlineError:
        """The error of a request to ``url`` stopped at this deadline."""
        return DeadlineError(f"{url} did not finish within {self.describe()}; the request was stopped")
