"""Paths a user gave (a CLI argument, a setting, an environment variable, a request's field) made usable without
an untyped error.

``Path.expanduser`` raises ``RuntimeError`` for ``~nosuchuser/x`` (and for ``~`` when no home can be found), and
``Path.resolve`` raises it for a symbolic link that loops; either would reach a user as a traceback, or a client
as a 500. Here both are an ``InputError`` naming the path: the CLI exits 2 with its message, and the server answers
it as it answers any path it cannot use.
"""

from __future__ import annotations

from pathlib import Path

from .errors import InputError

__all__ = ["expand_user", "resolved"]


def expand_user(path: str | Path) -> Path:
    """``path`` with a leading ``~`` or ``~user`` made that home folder; InputError when there is no such user or
    no home folder to be found."""
    given = Path(path)
    try:
        return given.expanduser()
    except (RuntimeError, ValueError) as exc:  # ValueError: a NUL in the user's name
        user = given.parts[0] if given.parts else str(path)
        raise InputError(f"{path}: no home folder for {user!r} (no such user)" if "\0" in user
                         else f"{path}: no home folder for {user} (no such user)") from exc


def resolved(path: str | Path) -> Path:
    """``path`` home-expanded (:func:`expand_user`) and made absolute, symbolic links followed; InputError for a
    link that loops (or a NUL in the name)."""
    expanded = expand_user(path)
    try:
        return expanded.resolve()
    except (RuntimeError, ValueError) as exc:
        raise InputError(f"{path}: cannot be resolved ({exc})") from exc
