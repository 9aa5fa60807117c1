"""Commands import what they need when they run (issue 15): the quick ones never load numpy, rich, the model SDK,
the server or the benchmarks; search and extractive ask never load the SDK, the server or the PDF readers.

Which modules a command loaded is deterministic where its CPU time on a shared machine is not, so that is what
is checked, in a fresh process per command; ``chapterverse bench cli`` measures the time.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hashembed import HashingEmbedder
from typer.testing import CliRunner

from chapterverse.bench.commands import bench_app
from chapterverse.cli import LAZY_GROUPS, app
from chapterverse import Library

DEMO = Path(__file__).resolve().parents[1] / "src" / "chapterverse" / "demo"

SERVER_AND_SDK = {"openai", "httpx", "httpx2", "fastapi", "uvicorn", "chapterverse.server.app",
                  "chapterverse.bench.commands"}
QUICK_FORBIDDEN = SERVER_AND_SDK | {"numpy", "rich", "chapterverse.embeddings", "chapterverse.search.retrieval",
                                    "chapterverse.sources", "platformdirs", "logging", "pydantic"}
"""pydantic too: typer would convert every option through it (chapterverse.cli_values)."""

_CHILD = """
import json, sys
from chapterverse.cli import app
try:
    app(sys.argv[2:], prog_name="chapterverse")
    code = 0
except SystemExit as exit:
    code = exit.code or 0
with open(sys.argv[1], "w") as out:
    json.dump({"code": code, "modules": sorted(sys.modules)}, out)
"""


def _loaded(tmp_path: Path, *args: str) -> set[str]:
    """The modules a fresh process has loaded after running ``chapterverse ARGS`` (which must succeed)."""
    report = tmp_path / "modules.json"
    subprocess.run([sys.executable, "-c", _CHILD, str(report), *args], check=True, stdout=subprocess.DEVNULL)
    result = json.loads(report.read_text())
    assert result["code"] == 0, args
    return set(result["modules"])


@pytest.fixture
def hashed_library(tmp_path: Path) -> Path:
    """The demo book, embedded by a test embedder: enough for the commands that never embed."""
    Library(tmp_path / "lib", embedder=HashingEmbedder()).ingest([DEMO])
    return tmp_path / "lib"


@pytest.fixture(scope="module")
def demo_library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo book with the default embedder, for search and ask."""
    location = tmp_path_factory.mktemp("demo-lib")
    library = Library(location)
    library.ingest([DEMO])
    library.close()
    return location


def test_help_loads_neither_the_library_nor_the_benchmarks(tmp_path: Path) -> None:
    """Help is click's plain layout: not even rich (nor the logging it loads); nothing beyond typer."""
    unexpected = _loaded(tmp_path, "--help") & (QUICK_FORBIDDEN | {"chapterverse.library", "pydantic"})
    assert not unexpected, sorted(unexpected)


@pytest.mark.parametrize("command", ["docs", "resolve", "remove"])
def test_quick_commands_load_no_heavy_module(hashed_library: Path, tmp_path: Path, command: str) -> None:
    args = {"docs": ["docs"], "resolve": ["resolve", "f1-0-20"], "remove": ["remove", "1"]}[command]
    loaded = _loaded(tmp_path, *args, "--library", str(hashed_library))
    assert "chapterverse.library" in loaded
    assert not loaded & QUICK_FORBIDDEN, sorted(loaded & QUICK_FORBIDDEN)


@pytest.mark.parametrize("args", [["search", "storm"], ["ask", "What did the lighthouse keeper find?"]])
def test_search_and_extractive_ask_load_no_sdk_server_or_pdf_reader(demo_library: Path, tmp_path: Path,
                                                                    args: list[str]) -> None:
    loaded = _loaded(tmp_path, *args, "--library", str(demo_library))
    assert "chapterverse.search.retrieval" in loaded
    unexpected = loaded & (SERVER_AND_SDK | {"pypdf", "pypdfium2", "chapterverse.sources.pdf"})
    assert not unexpected, sorted(unexpected)


def test_the_bench_group_is_listed_without_being_imported_and_runs_when_asked() -> None:
    assert LAZY_GROUPS["bench"][2] == bench_app.info.help
    listed = CliRunner().invoke(app, ["--help"])
    assert listed.exit_code == 0 and "bench" in listed.output and "Benchmarks against real data." in listed.output
    group = CliRunner().invoke(app, ["bench", "--help"])
    assert group.exit_code == 0 and "latency" in group.output and "cli" in group.output
    assert CliRunner().invoke(app, ["bench", "no-such-benchmark"]).exit_code == 2
    assert CliRunner().invoke(app, ["no-such-command"]).exit_code == 2


def test_resolve_prints_the_exact_text_however_it_looks(tmp_path: Path) -> None:
    """Plain output: markup- or emoji-like text is the source's text, not something for rich to render."""
    text = "Odd text: a :fish: code, [bold]markup[/bold] and [f1-2-3] in brackets."
    (tmp_path / "odd.txt").write_text(text, encoding="utf-8")
    library = Library(tmp_path / "lib", embedder=HashingEmbedder())
    doc_id = library.ingest([tmp_path / "odd.txt"])[0].document.id
    tag = f"f{library.store.files(doc_id)[0].id}-0-{len(text)}"
    result = CliRunner().invoke(app, ["resolve", tag, "--library", str(tmp_path / "lib")])
    assert result.exit_code == 0
    assert result.output.splitlines()[1] == text


@pytest.mark.parametrize(("args", "message"), [
    (["remove", "abc"], "Invalid value for 'doc_id': 'abc' is not a valid integer."),
    (["summaries", "--doc", "1.5"], "Invalid value for '--doc': '1.5' is not a valid integer."),
    (["search", "whale", "-k", "0"], "Invalid value for '--k' / '-k': Input should be greater than or equal to 1"),
])
def test_a_value_of_the_wrong_type_is_a_usage_error_that_names_it(hashed_library: Path, args: list[str],
                                                                  message: str) -> None:
    """Plain values convert without pydantic, bounded ones through it: either way one line says what is wrong."""
    result = CliRunner().invoke(app, [*args, "--library", str(hashed_library)])
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1] == f"Error: {message}"
