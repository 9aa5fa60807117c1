"""Command-line values of plain types (a number, a text, a path, a flag) converted without pydantic.

typer 0.29 turns every option's text into its annotated type through a pydantic ``TypeAdapter``, built on
first use and even for an option left out (its default passes through the same adapter). Importing pydantic
and building those adapters is a third of what a quick command costs (``remove`` on a 100 MB library: 0.25 s
of CPU with them, 0.18 s without; ``chapterverse bench cli`` measures it). For ``int``, ``str``, ``Path`` and
``bool``, optional or not, with no bounds, a plain conversion does as well, so those parameters get one of
their own before typer would build an adapter; every other parameter (a range, a list, a choice) keeps
typer's. The numbers are the same command before and after, run alternately on copies of one library.

This reaches into typer's runtime coercion (``typer.core._TyperParameter``, ``typer._coercion``): typer is
pinned (pyproject.toml), and ``tests/test_cli_startup.py`` fails if a quick command imports pydantic again.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union, get_args, get_origin

from typer._click.exceptions import BadParameter
from typer._coercion import RuntimeParam, TypeDescriptor
from typer.core import _TyperParameter

if TYPE_CHECKING:
    from typer import _click as click

__all__ = ["convert_plainly"]


def _flag(value: object) -> bool:
    """A flag's value comes from click as True or False (None when left out, which never gets here), and is
    returned as it is before any conversion; anything else is refused."""
    raise ValueError(value)


PLAIN_TYPES: dict[type, tuple[Callable[[Any], Any], str]] = {
    int: (int, "integer"), str: (str, "text"), Path: (Path, "path"), bool: (_flag, "flag")}
"""The types converted here: the conversion and the word an error message uses."""


def convert_plainly(params: list[click.Parameter]) -> list[click.Parameter]:
    """``params``, each plain one given a converter that needs no pydantic. Meant for a command's
    ``get_params``, which includes its ``--help``: a flag left out is ``None``, which typer also hands to an
    adapter."""
    for param in params:
        if isinstance(param, _TyperParameter) and param._runtime_param is None:
            plain = _plain_type(param.type_descriptor)
            if plain is not None:
                param._runtime_param = _PlainValue(param.type_descriptor.parameter_info,
                                                   param.type_descriptor.annotation, plain)
    return params


def _plain_type(descriptor: TypeDescriptor) -> type | None:
    """``int``, ``str``, ``Path`` or ``bool`` (``X | None`` included) without bounds, else None."""
    annotation: Any = descriptor.annotation
    if get_origin(annotation) in (Union, types.UnionType):
        rest = [arg for arg in get_args(annotation) if arg is not type(None)]
        annotation = rest[0] if len(rest) == 1 else None
    if annotation not in PLAIN_TYPES or descriptor.is_ranged or descriptor.is_file or descriptor.is_choice:
        return None
    return annotation  # type: ignore[no-any-return]


@dataclass(frozen=True)
class _PlainValue(RuntimeParam):
    """Converts by calling the type; a value that is not one says so as click would ("'x' is not a valid
    integer"). ``None`` (an option left out) never gets here: :class:`RuntimeParam` passes it through."""

    kind: type

    def _coerce_value(self, value: Any, param: _TyperParameter, ctx: click.Context) -> Any:
        if isinstance(value, self.kind):
            return value
        convert, word = PLAIN_TYPES[self.kind]
        try:
            return convert(value)
        except (TypeError, ValueError):
            raise BadParameter(f"{value!r} is not a valid {word}.", ctx=ctx, param=param) from None
