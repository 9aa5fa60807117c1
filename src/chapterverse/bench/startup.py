"""``chapterverse bench cli``: what each command costs a user at the shell, start-up included.

A command's cost is dominated by what it imports and loads before any work (the model SDK, the web server,
the embedder's weights), so it is measured the only way that sees all of that: a fresh process per run,
timed by the kernel. The figure is the child's CPU time (user + sys from ``wait4``), not wall time: on a
machine shared with other people's jobs, wall time measures the neighbours. Each command runs once untimed
(it fills the OS page cache and the embedder's model cache, a one-off after installing), then ``runs`` times;
the table shows the median. ``remove`` runs on a fresh copy of the library each time (the copy is not timed).
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.table import Table

from ..errors import ChapterverseError, InputError
from ..paths import expand_user

__all__ = ["DEFAULT_QUESTION", "CommandCase", "CommandTiming", "StartupReport", "run_startup_bench",
           "startup_table"]

DEFAULT_QUESTION = "What did the lighthouse keeper find in the storm?"
"""The demo's question (scripts/demo.sh), asked of the demo book when no library is given."""

LIBRARY = "{library}"
"""Placeholder in a case's arguments for the library the run uses."""

_DROPPED_ENV = ("CHAPTERVERSE_LLM_BASE_URL", "CHAPTERVERSE_LLM_MODEL", "CHAPTERVERSE_LLM_API_KEY",
                "OPENAI_BASE_URL", "OPENAI_API_KEY", "CHAPTERVERSE_STORE_URL", "PYTHONDONTWRITEBYTECODE")
"""Removed from the children's environment: ``ask`` must be the extractive answer the targets are for,
``--library`` must not be overridden by a store URL, and the untimed run must leave bytecode behind as an
installed package has it (compiling every module from source would add tens of milliseconds to each run)."""


@dataclass(frozen=True, slots=True)
class CommandCase:
    """One command line to time, with the issue's target for it."""

    name: str
    args: tuple[str, ...]
    target_s: float
    fresh_copy: bool = False
    """Run on a fresh copy of the library each time (a command that changes it)."""


@dataclass(slots=True)
class CommandTiming:
    case: CommandCase
    cpu_s: list[float] = field(default_factory=list)
    wall_s: list[float] = field(default_factory=list)

    @property
    def median_cpu_s(self) -> float:
        return statistics.median(self.cpu_s)

    def to_json(self) -> dict[str, Any]:
        return {"command": self.case.name, "target_s": self.case.target_s,
                "cpu_median_s": round(self.median_cpu_s, 3), "cpu_s": [round(v, 3) for v in self.cpu_s],
                "wall_median_s": round(statistics.median(self.wall_s), 3)}


@dataclass(slots=True)
class StartupReport:
    runs: int
    load_average: tuple[float, float, float]
    """``os.getloadavg()`` when the measurement started: how busy the shared machine was."""
    documents: int
    chunks: int
    timings: list[CommandTiming]

    def to_json(self) -> dict[str, Any]:
        return {"runs": self.runs, "load_average": [round(v, 2) for v in self.load_average],
                "documents": self.documents, "chunks": self.chunks,
                "commands": [t.to_json() for t in self.timings]}


def default_cases(tag: str, doc_id: int, question: str) -> list[CommandCase]:
    """The commands with startup targets (docs/BENCHMARKS.md): the quick ones, and those that embed a query."""
    lib = ("--library", LIBRARY)
    return [
        CommandCase("--help", ("--help",), 0.25),
        CommandCase("docs", ("docs", *lib), 0.25),
        CommandCase("resolve", ("resolve", tag, *lib), 0.25),
        CommandCase("remove", ("remove", str(doc_id), *lib), 0.25, fresh_copy=True),
        CommandCase("search", ("search", question, *lib), 1.0),
        CommandCase("ask (extractive)", ("ask", question, *lib), 1.0),
    ]


def run_child(argv: list[str], env: Mapping[str, str], label: str) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one process running ``argv``; ChapterverseError when it fails."""
    with tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            err.seek(0)
            last = err.read().decode(errors="replace").strip().splitlines()[-1:] or ["(no output)"]
            raise ChapterverseError(f"{label} exited with {proc.returncode}: {last[0]}")
    return usage.ru_utime + usage.ru_stime, wall


def time_case(case: CommandCase, library: Path, runs: int, env: Mapping[str, str]) -> CommandTiming:
    """One untimed run, then ``runs`` timed ones."""
    timing = CommandTiming(case)
    for n in range(runs + 1):
        with _library_for(case, library) as location:
            argv = [sys.executable, "-m", "chapterverse",
                    *(str(location) if a == LIBRARY else a for a in case.args)]
            cpu, wall = run_child(argv, env, case.name)
        if n:
            timing.cpu_s.append(cpu)
            timing.wall_s.append(wall)
    return timing


@contextmanager
def _library_for(case: CommandCase, library: Path) -> Iterator[Path]:
    if not case.fresh_copy:
        yield library
        return
    with tempfile.TemporaryDirectory(prefix="chapterverse-bench-cli-") as tmp:
        copy = Path(tmp) / "library"
        shutil.copytree(library, copy)
        yield copy


def _child_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in _DROPPED_ENV}


def _demo_library(location: Path) -> None:
    """Ingest the bundled demo book into ``location`` (skipped when it is already there, unchanged)."""
    from ..library import Library

    lib = Library(location)
    try:
        lib.ingest([Path(__file__).resolve().parent.parent / "demo"])
    finally:
        lib.close()


def _first_passage(location: Path) -> tuple[int, str, int, int]:
    """(first document's id, tag of its first chunk, documents, chunks) of an existing library."""
    from ..store import open_store

    store = open_store(location)
    try:
        docs = store.documents()
        if not docs:
            raise InputError(f"{location}: the library holds no documents; ingest something first")
        chunk = store.chunks(doc_id=docs[0].id)[0]
        return docs[0].id, f"f{chunk.file_id}-{chunk.start}-{chunk.end}", len(docs), sum(d.chunks for d in docs)
    finally:
        store.close()


def run_startup_bench(library: Path | None, *, runs: int = 5, question: str = DEFAULT_QUESTION) -> StartupReport:
    """Time every default case against ``library`` (default: a temporary library holding the demo book)."""
    with tempfile.TemporaryDirectory(prefix="chapterverse-bench-cli-") as tmp:
        location = expand_user(library) if library is not None else Path(tmp) / "demo-library"
        if library is None:
            _demo_library(location)
        elif not (location / "library.sqlite3").is_file():
            raise InputError(f"{location}: not a library (no library.sqlite3)")
        doc_id, tag, documents, chunks = _first_passage(location)
        load = os.getloadavg()
        env = _child_env()
        timings = [time_case(case, location, runs, env) for case in default_cases(tag, doc_id, question)]
        return StartupReport(runs=runs, load_average=load, documents=documents, chunks=chunks, timings=timings)


def startup_table(report: StartupReport) -> Table:
    """One row per command: median CPU, the runs' range, the median wall time and the target."""
    load = " / ".join(f"{v:.2f}" for v in report.load_average)
    table = Table(title=f"whole-process CPU time, median of {report.runs} (library: {report.documents} documents, "
                        f"{report.chunks} chunks; load average {load})")
    table.add_column("command")
    for column in ("CPU s", "min-max s", "wall s", "target s"):
        table.add_column(column, justify="right")
    for t in report.timings:
        table.add_row(t.case.name, f"{t.median_cpu_s:.3f}", f"{min(t.cpu_s):.2f}-{max(t.cpu_s):.2f}",
                      f"{statistics.median(t.wall_s):.2f}", f"{t.case.target_s:.2f}")
    return table
