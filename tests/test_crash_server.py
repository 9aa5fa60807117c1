"""SIGKILL a real server during acknowledged writes: nothing acknowledged is lost, nothing is half-written."""

from __future__ import annotations

from pathlib import Path

import pytest

from chapterverse.bench.crash import run_crash_trials


@pytest.mark.slow
def test_server_killed_during_writes_loses_nothing_acknowledged(tmp_path: Path) -> None:
    reports = run_crash_trials(tmp_path / "kb", trials=3, seed=5)
    assert sum(r.acknowledged for r in reports) > 0, "the trials must actually write"
    for report in reports:
        assert report.lost == [] and report.half_written == [] and report.integrity == []
