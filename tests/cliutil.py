"""``chapterverse`` commands run in the test process through typer's ``CliRunner``: stdout and stderr apart, the
exit code, no new Python process (which costs a second or more: the interpreter, the package and the model).

    result = cli("search", "lamp", "--library", str(library))
    assert result.exit_code == 0 and result.stderr == ""

Tests whose subject is the process boundary itself (exit codes seen by a shell, pipes, a terminal, signals) run
``python -m chapterverse`` instead. This is a helper module, not a test file.
"""

from __future__ import annotations

from collections.abc import Mapping

from click.testing import Result
from typer.testing import CliRunner

from chapterverse.cli import app

__all__ = ["cli"]


def cli(*args: str, input: str | None = None, env: Mapping[str, str] | None = None) -> Result:
    """``chapterverse ARGS`` in-process, 200 columns wide (as the process tests' ``COLUMNS``); an exception the
    command does not turn into an exit code fails the test with its traceback."""
    return CliRunner().invoke(app, list(args), input=input, env={"COLUMNS": "200", **(env or {})},
                              catch_exceptions=False)
