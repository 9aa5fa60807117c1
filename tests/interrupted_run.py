"""The run ``test_interrupt.py`` interrupts: tests that hold servers while an in-process CLI command runs.

Not collected on its own (no ``test_`` prefix); ``test_interrupt.py`` runs it as ``pytest tests/interrupted_run.py``
in a process group of its own. The first test starts what the suite starts (a ``chapterverse serve`` process, a
server in a thread, the scripted model; with ``CHAPTERVERSE_TEST_INTERRUPT_WITH=postgres,model`` also an embedded
PostgreSQL and the real model's llama.cpp server), writes the file ``CHAPTERVERSE_TEST_READY`` names, and runs
``chapterverse ask`` in-process until interrupted; the tests after it would keep the run going for minutes.

This is a helper module, not a test file.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakellm import Reply, fake_llm
from pgfixture import pg_url  # noqa: F401  (requested by name with CHAPTERVERSE_TEST_INTERRUPT_WITH=postgres)
from serverutil import running_server, settings_for, serving
from typer.testing import CliRunner

from chapterverse.cli import app
from chapterverse import Library

DEMO = Path(__file__).resolve().parents[1] / "src" / "chapterverse" / "demo"

WITH = set(filter(None, os.environ.get("CHAPTERVERSE_TEST_INTERRUPT_WITH", "").split(",")))


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[Path]:
    """Everything started at once; the library folder the CLI commands read."""
    root = tmp_path_factory.mktemp("interrupted")
    library = root / "library"
    Library(library).ingest([DEMO])
    if "postgres" in WITH:
        request.getfixturevalue("pg_url")
    if "model" in WITH:
        request.getfixturevalue("real_llm_server")
    with fake_llm(default=Reply.text("The book does not say.")), \
            running_server(settings_for(root, library=library)), \
            serving("--library", str(library)):
        yield library


def _commands_until_interrupted(library: Path) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        result = CliRunner().invoke(app, ["ask", "What did Marta find in the chest?", "--library", str(library)])
        assert result.exit_code == 0, result.output


def test_holds_the_servers_while_commands_run(servers: Path) -> None:
    Path(os.environ["CHAPTERVERSE_TEST_READY"]).write_text("ready")
    _commands_until_interrupted(servers)


def test_runs_after_it(servers: Path) -> None:
    _commands_until_interrupted(servers)


def test_runs_after_that(servers: Path) -> None:
    _commands_until_interrupted(servers)
