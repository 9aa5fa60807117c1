"""The README's two commands: the demo installs the package alone, the tests install the test extras and run the
quick set (``--all``: the whole suite, what CI runs).

The scripts run against a stub ``.venv`` whose python and chapterverse only record how they were called, so
the test needs no network and installs nothing.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

_STUB = """#!/usr/bin/env bash
echo "$(basename "$0") $*" >> "$(dirname "$0")/../calls.log"
"""


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A copy of scripts/ beside a stub .venv that logs every call to .venv/calls.log."""
    shutil.copytree(ROOT / "scripts", tmp_path / "scripts")
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    for name in ("python", "chapterverse"):
        (bin_dir / name).write_text(_STUB)
        (bin_dir / name).chmod(0o755)
    return tmp_path


def _calls(checkout: Path, script: str, *args: str) -> list[str]:
    subprocess.run(["bash", str(checkout / "scripts" / script), *args], check=True, capture_output=True)
    return (checkout / ".venv" / "calls.log").read_text().splitlines()


def test_the_demo_installs_the_package_alone_then_ingests_and_asks(checkout: Path) -> None:
    calls = _calls(checkout, "demo.sh", "Who keeps the light?")
    assert "python -m pip install -q -e ." in calls
    assert not [c for c in calls if "test" in c or "[" in c]
    assert calls[-2:] == ["chapterverse ingest src/chapterverse/demo/", "chapterverse ask Who keeps the light?"]


def test_the_tests_install_the_test_extras_then_type_check_then_run_the_quick_set(checkout: Path) -> None:
    calls = _calls(checkout, "test.sh", "-x")
    assert "python -m pip install -q -e .[test,postgres,mcp]" in calls
    assert calls[-2:] == ["python -m mypy", "python -m pytest -n 2 --dist loadfile -m not slow and not browser and "
                                            "not postgres -x"]


def test_all_runs_the_whole_suite(checkout: Path) -> None:
    calls = _calls(checkout, "test.sh", "--all", "-x")
    assert calls[-2:] == ["python -m mypy", "python -m pytest -n 2 --dist loadfile -x"]


def test_the_tests_run_in_one_process_when_asked(checkout: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHAPTERVERSE_TEST_WORKERS", "0")
    assert _calls(checkout, "test.sh", "-x")[-1].startswith("python -m pytest -n 0 --dist loadfile -m not slow")


def test_a_run_says_how_long_the_whole_command_took(monkeypatch: pytest.MonkeyPatch) -> None:
    """test.sh stamps its start and execs pytest; the run's summary (tests/conftest.py) says how long setup, mypy
    and the tests took together."""
    import conftest

    lines: list[str] = []

    class Reporter:
        def write_line(self, line: str) -> None:
            lines.append(line)

    assert 'export CHAPTERVERSE_TEST_STARTED=' in (ROOT / "scripts" / "test.sh").read_text()
    monkeypatch.setenv("CHAPTERVERSE_TEST_STARTED", str(int(time.time()) - 125))
    conftest.pytest_terminal_summary(Reporter())  # type: ignore[arg-type]
    [line] = lines
    assert re.fullmatch(r"scripts/test\.sh: 2 min \d+ s \(setup, mypy and pytest\)", line), line
    monkeypatch.delenv("CHAPTERVERSE_TEST_STARTED")
    conftest.pytest_terminal_summary(Reporter())  # type: ignore[arg-type]
    assert len(lines) == 1, "a plain pytest run says nothing of test.sh"


def test_ci_runs_the_whole_suite_and_builds_the_docs_strictly() -> None:
    run = (ROOT / ".ci" / "run").read_text()
    assert "bash scripts/test.sh --all\n" in run and "bash scripts/docs.sh build\n" in run
    docs = (ROOT / "scripts" / "docs.sh").read_text()
    assert "mkdocs build --strict" in docs


def test_setup_refuses_an_unknown_option(checkout: Path) -> None:
    result = subprocess.run(["bash", str(checkout / "scripts" / "setup.sh"), "--everything"], capture_output=True,
                            text=True)
    assert result.returncode == 2 and "usage" in result.stderr
    assert not (checkout / ".venv" / "calls.log").exists()
