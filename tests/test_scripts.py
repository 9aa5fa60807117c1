"""The README's two commands: the demo installs the package alone, the tests install the test extras and run the
quick set (``--all``: the whole suite, what CI runs).

The scripts run against a stub ``.venv`` whose python and chapterverse only record how they were called, so
the test needs no network and installs nothing.
"""

from __future__ import annotations

import re
import shutil
import subprocess
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
    assert calls[-2:] == ["python -m mypy", "python -m pytest -m not slow and not browser and not postgres -x"]


def test_all_runs_the_whole_suite_and_every_run_says_how_long_it_took(checkout: Path) -> None:
    done = subprocess.run(["bash", str(checkout / "scripts" / "test.sh"), "--all", "-x"], check=True,
                          capture_output=True, text=True)
    calls = (checkout / ".venv" / "calls.log").read_text().splitlines()
    assert calls[-2:] == ["python -m mypy", "python -m pytest -x"]
    assert re.fullmatch(r"scripts/test\.sh: \d+ min \d+ s \(setup, mypy and pytest; exit 0\)\n", done.stderr)


def test_a_failing_run_keeps_its_exit_status(checkout: Path) -> None:
    (checkout / ".venv" / "bin" / "python").write_text(_STUB + '[ "$2" = pytest ] && exit 1\nexit 0\n')
    done = subprocess.run(["bash", str(checkout / "scripts" / "test.sh")], capture_output=True, text=True)
    assert done.returncode == 1 and "exit 1)" in done.stderr


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
