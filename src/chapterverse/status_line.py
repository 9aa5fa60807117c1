"""The one status line a command keeps on a terminal's stderr while a person waits: drawn as early as the
process can (before the heavy imports), redrawn in place with each step, erased before anything else is
printed there and when the process ends. Where stderr is a file or a pipe, nothing: what a script keeps of
stderr is its notices and errors. Never on stdout, so ``--json`` stays JSON.

This module imports nothing of chapterverse's: ``python -m chapterverse`` draws the first line before the
command-line interface is imported.
"""

from __future__ import annotations

import atexit
import sys

__all__ = ["STATUS", "StatusLine", "draw_early"]

_WITH_VALUES = frozenset({"--library", "--store"})
"""The options before a sub-command that take a value (the value is not the sub-command)."""


class StatusLine:
    """One line on a terminal's stderr: :meth:`show` a step, :meth:`clear` it before other output."""

    def __init__(self) -> None:
        self._drawn = False
        self._last = ""

    def show(self, text: str) -> None:
        if text == self._last or not _terminal():
            return
        self._last = text
        sys.stderr.write(f"\r\x1b[2K… {text}")
        sys.stderr.flush()
        self._drawn = True

    def clear(self) -> None:
        if self._drawn:
            self._drawn = False
            self._last = ""
            sys.stderr.write("\r\x1b[2K")
            sys.stderr.flush()


STATUS = StatusLine()
"""The process's status line (one terminal, one line)."""
atexit.register(STATUS.clear)


def draw_early(argv: list[str]) -> None:
    """Show that ``ask`` has its question, first thing in the process: opening the library and importing what
    answers it take a second or more on a busy machine. Not for ``--help`` (its text goes to the same
    terminal), nor for any other command."""
    if _subcommand(argv) == "ask" and not {"--help", "-h"} & set(argv):
        STATUS.show("reading the library")


def _subcommand(argv: list[str]) -> str | None:
    """The sub-command's name: the first argument that is neither an option nor a global option's value."""
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in _WITH_VALUES:
            skip = True
        elif not arg.startswith("-"):
            return arg
    return None


def _terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # closed or replaced by something without a descriptor
        return False
