"""Stopping long work from outside: a token its owner cancels and its worker checks between batches.

Long work (embedding a batch of documents takes minutes on a CPU) runs in a worker thread, and a thread cannot
be interrupted. So it asks: the library is handed the token (``cancel=``) and calls :meth:`CancelToken.checkpoint`
before each embedding batch, and the writer calls :meth:`CancelToken.check` once more just before its one write;
either raises the reason to stop, if there is one. Work therefore ends within one batch of its cancellation, and
never inside its write (one transaction): nothing is ever half-written. Progress callbacks only report.

Between its batches, work may also step aside (``between``): a write that is embedding a thousand documents
waits there while small searches run, so that they find the CPU and the interpreter free.

A token stops for one of three reasons, each its own error: the server stops (:class:`StoppingError`), the
request's client went away (:class:`ClientGoneError`), the request ran past its time budget
(:class:`OverBudgetError`). A request's token has the server's token as its parent, so a stopping server ends
every request's work too.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from .errors import ChapterverseError, ClientGoneError, OverBudgetError, StoppingError

__all__ = ["CancelToken", "Reason", "client_gone", "server_stopping"]

Reason = Callable[[str], ChapterverseError]
"""Why work stops: given the stage it stopped in ("embedding 1000 documents"), the error to raise."""


def server_stopping(stage: str) -> ChapterverseError:
    return StoppingError(f"the server is stopping; {stage} was abandoned and nothing was written")


def client_gone(stage: str) -> ChapterverseError:
    return ClientGoneError(f"the client disconnected; {stage} was abandoned and nothing was written")


class CancelToken:
    """Whether some work should go on: cancelled by its owner (any thread), or past its deadline.

    ``budget_s`` counts from the token's creation; ``budget_name`` is the setting that sets it, named in the
    error so that whoever reads it knows what to change. ``between`` is called at each ``checkpoint`` (between
    batches, never under a lock), before the check.
    """

    def __init__(self, *, parent: CancelToken | None = None, budget_s: float | None = None,
                 budget_name: str = "the time budget", between: Callable[[], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._parent = parent
        self._between = between
        self._budget_s = budget_s
        self._budget_name = budget_name
        self._clock = clock
        self._deadline = None if budget_s is None else clock() + budget_s
        self._reason: Reason | None = None
        self._lock = threading.Lock()

    def cancel(self, reason: Reason) -> None:
        """Stop the work at its next check; the first reason given is the one reported."""
        with self._lock:
            if self._reason is None:
                self._reason = reason

    @property
    def cancelled(self) -> bool:
        """Cancelled here or in a parent (a deadline passing is not a cancellation: ``check`` reports it)."""
        return self._reason is not None or (self._parent is not None and self._parent.cancelled)

    def check(self, stage: str) -> None:
        """Raise the reason to stop ``stage`` (a parent's first), or return: the work may go on."""
        if self._parent is not None:
            self._parent.check(stage)
        reason = self._reason
        if reason is not None:
            raise reason(stage)
        if self._deadline is not None and self._clock() > self._deadline:
            raise OverBudgetError(f"{stage} ran past this request's time budget ({self._budget_s:g} s, "
                                  f"{self._budget_name}) and was abandoned; nothing was written")

    def checkpoint(self, stage: str) -> None:
        """``between``, then :meth:`check`: the library's embedding loop calls it before each batch, where the
        work can step aside or stop cleanly."""
        if self._between is not None:
            self._between()
        self.check(stage)
