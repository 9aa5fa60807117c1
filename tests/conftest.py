"""Shared fixtures. Real data comes from ../shared and tests that need it skip cleanly without it.

Ctrl-C (SIGINT) and SIGTERM stop the run at once and tear every fixture down, so every server, model server and
database the suite started stops with it (``test_interrupt.py``). Without this a Ctrl-C that lands inside an
in-process CLI command (typer's ``CliRunner``) is taken by click as the command's own ("Aborted!", exit 1), the
test fails, and the run goes on; SIGTERM would end the process without a teardown.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import pytest

SHARED = Path(os.environ.get("CHAPTERVERSE_SHARED", Path(__file__).resolve().parents[1].parent / "shared"))
DATA = SHARED / "data"

_interrupted_at: list[float] = []
REPEAT_GRACE_S = 10.0
"""After the first interrupt, further ones within this long let the teardown finish (a second Ctrl-C must not
leave a database running); later ones interrupt the teardown too."""


def shared_path(*parts: str) -> Path:
    """A path under ../shared/data, or skip the calling test when it is absent."""
    path = DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"shared data not available: {path}")
    return path


def _interrupt(signum: int, frame: FrameType | None) -> None:
    if _interrupted_at and time.monotonic() - _interrupted_at[0] < REPEAT_GRACE_S:
        print("\nstopping the servers and databases the tests started ...", file=sys.stderr, flush=True)
        return
    _interrupted_at.append(time.monotonic())
    raise KeyboardInterrupt


def pytest_configure(config: pytest.Config) -> None:
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that asks for PostgreSQL is marked ``postgres`` when collected, before ``-m`` selects, so the quick
    set never starts a cluster."""
    for item in items:
        if {"pg_url", "pg_schema_url"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.postgres)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> None:
    """A test whose interrupt was swallowed on the way (click's "Aborted!", a child's exit 130) stops the run
    here, as an interrupt, not as that test's failure."""
    if _interrupted_at:
        raise KeyboardInterrupt


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """``scripts/test.sh`` says how long the whole command took: setup, mypy and the tests."""
    started = os.environ.get("CHAPTERVERSE_TEST_STARTED", "")
    if started.isdigit():
        took = int(time.time()) - int(started)
        terminalreporter.write_line(f"scripts/test.sh: {took // 60} min {took % 60} s (setup, mypy and pytest)")


@pytest.fixture(autouse=True)
def _package_logging_restored() -> Iterator[None]:
    """A command run in-process (``cliutil.cli``) configures the ``chapterverse`` logger as the process would
    (``--verbose`` sets it to DEBUG, with a handler of its own); put it back after each test, so that no later
    test runs with a level it did not ask for (every DEBUG record is then kept by pytest's log capture)."""
    import logging

    package = logging.getLogger("chapterverse")
    level, handlers, propagate = package.level, list(package.handlers), package.propagate
    yield
    package.setLevel(level)
    package.handlers = handlers
    package.propagate = propagate


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Never touch the real user data dir or a real provider from tests."""
    home = tmp_path_factory.mktemp("cv-home")
    monkeypatch.setenv("CHAPTERVERSE_HOME", str(home))
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "CHAPTERVERSE_LLM_BASE_URL", "CHAPTERVERSE_LLM_MODEL",
                "CHAPTERVERSE_LLM_API_KEY", "CHAPTERVERSE_STORE_URL", "CHAPTERVERSE_EMBED_API_KEY",
                "CHAPTERVERSE_EMBEDDING_MODEL", "CHAPTERVERSE_API_KEY", "CHAPTERVERSE_RERANKER",
                "CHAPTERVERSE_RERANK_TOP_N", "CHAPTERVERSE_RERANK_MODEL", "CHAPTERVERSE_RERANK_API_KEY"):
        monkeypatch.delenv(var, raising=False)
from serverutil import reader_server  # noqa: E402,F401  (fixture for the browser tests)
from realllm import real_llm_server  # noqa: E402,F401  (the real model, for the model-path tests)
