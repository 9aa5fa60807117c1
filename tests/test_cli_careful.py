"""The CLI behaves like a careful tool (issue 15): mistakes exit 2 with one line that says what is wrong, read-only
commands never create a library, global options work before the sub-command, a model that cannot be reached is
one line of notice, and progress reaches a log or a pipe as one line per document.

Commands run through typer's CliRunner against real library folders, or as real processes where what matters is
what a terminal or a pipe would see (stderr apart from stdout, logging from background threads).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from hashembed import HashingEmbedder
from cliutil import cli
from typer.testing import CliRunner

from chapterverse.cli import app
from chapterverse import Library

DEMO = Path(__file__).resolve().parents[1] / "src" / "chapterverse" / "demo"


@pytest.fixture
def library(tmp_path: Path) -> Path:
    """The demo book in a library made with a test embedder (enough for every check that embeds nothing)."""
    Library(tmp_path / "lib", embedder=HashingEmbedder()).ingest([DEMO])
    return tmp_path / "lib"


@pytest.fixture(scope="module")
def demo_library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo book with the default embedder, for the commands that embed a question."""
    location = tmp_path_factory.mktemp("careful-lib")
    Library(location).ingest([DEMO])
    return location


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


def process(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """``chapterverse ARGS`` as its own process, stdout and stderr piped apart."""
    return subprocess.run([sys.executable, "-m", "chapterverse", *args], input=stdin, capture_output=True,
                          text=True, env={**os.environ, "COLUMNS": "200"}, timeout=300)


def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("command", ["ask", "search"])
@pytest.mark.parametrize("text", ["", "   ", "\n\t"])
def test_an_empty_question_or_query_exits_2_and_says_so(library: Path, command: str, text: str) -> None:
    code, output = run(command, text, "--library", str(library))
    assert code == 2
    assert output.strip() == f"error: the {'question' if command == 'ask' else 'search query'} is empty"


def test_an_empty_folder_exits_2_and_makes_no_document(library: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    code, output = run("ingest", str(empty), "--library", str(library))
    assert code == 2
    assert f"nothing to ingest in {empty}: no files of the supported types" in output
    assert [d.title for d in Library(library, embedder=HashingEmbedder()).documents()] == ["The Keeper of Gull Rock"]


def test_a_folder_of_other_files_names_what_it_skipped(library: Path, tmp_path: Path) -> None:
    folder = tmp_path / "office"
    (folder / "sub").mkdir(parents=True)
    for name in ("report.docx", "sub/table.xlsx", ".hidden.pdf"):
        (folder / name).write_text("x")
    code, output = run("ingest", str(folder), "--library", str(library))
    assert code == 2
    assert f"skipped 2 files of unsupported types: {folder / 'report.docx'}, {folder / 'sub' / 'table.xlsx'}" in output
    assert ".hidden.pdf" not in output and "nothing to ingest" in output


def test_skipped_files_are_named_beside_what_was_ingested(tmp_path: Path) -> None:
    folder = tmp_path / "mixed"
    folder.mkdir()
    (folder / "notes.md").write_text("# Notes\n\nThe lamp was lit at dusk.\n")
    (folder / "scan.tiff").write_bytes(b"II*\0")
    result = cli("ingest", str(folder), "--library", str(tmp_path / "lib"))
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith("1 Notes — 1 file, 1 chunk")
    lines = result.stderr.splitlines()
    assert f"skipped 1 file of unsupported types: {folder / 'scan.tiff'}" in lines
    [progress] = [line for line in lines if line.startswith("ingested ")]
    assert progress.startswith("ingested notes.md: 1 file, 1 chunk, 1 segment, ") and progress.endswith(" s")


def test_json_lists_the_skipped_files_as_the_plain_output_names_them(tmp_path: Path) -> None:
    folder = tmp_path / "mixed"
    folder.mkdir()
    (folder / "notes.md").write_text("# Notes\n\nThe lamp was lit at dusk.\n")
    (folder / "image.PNG").write_bytes(b"\x89PNG")
    (folder / "README").write_text("no extension")
    result = cli("--json", "ingest", str(folder), "--library", str(tmp_path / "lib"))
    assert result.exit_code == 0, result.stderr
    payload = json.loads(result.stdout)
    assert [d["source"] for d in payload["documents"]] == ["notes.md"] and payload["failed"] == []
    assert payload["skipped"] == [{"path": str(folder / "README"), "reason": "unsupported type (no extension)"},
                                  {"path": str(folder / "image.PNG"), "reason": "unsupported type (.png)"}]
    assert f"skipped 2 files of unsupported types: {folder / 'README'}, {folder / 'image.PNG'}" in result.stderr


@pytest.mark.parametrize("command", ["ask", "search"])
def test_an_unknown_document_id_exits_2_for_search_and_ask(library: Path, command: str) -> None:
    code, output = run(command, "whale", "--doc", "9999", "--library", str(library))
    assert (code, output.strip()) == (2, "error: no document with id 9999")


@pytest.mark.parametrize("args", [["docs"], ["docs", "--json"], ["search", "lamp"], ["ask", "who kept the light?"],
                                  ["resolve", "f1-0-10"], ["remove", "1"], ["check"], ["export", "1"],
                                  ["summarize"], ["summaries", "--doc", "1"]])
def test_read_only_commands_never_create_a_library(tmp_path: Path, args: list[str]) -> None:
    missing = tmp_path / "typo"
    code, output = run(*args, "--library", str(missing))
    assert code == 2
    assert output.strip() == f"error: {missing}: no library here (`chapterverse ingest FILE` makes one)"
    assert not missing.exists()


def test_the_default_library_is_not_created_by_docs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("CHAPTERVERSE_HOME", str(home))
    code, _ = run("docs")
    assert code == 2 and not home.exists()


def test_global_options_before_the_sub_command(library: Path, tmp_path: Path) -> None:
    code, output = run("--library", str(library), "--json", "docs")
    assert code == 0
    assert [d["title"] for d in json.loads(output)["documents"]] == ["The Keeper of Gull Rock"]
    code, output = run("--library", str(library), "resolve", "f1-0-25")
    assert code == 0 and output.splitlines()[1] == "# The Keeper of Gull Rock"
    code, output = run("--library", str(tmp_path / "elsewhere"), "--json", "docs", "--library", str(library))
    assert code == 0 and len(json.loads(output)["documents"]) == 1, "the sub-command's own --library wins"


def test_global_library_given_to_ingest_creates_it_there(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# Page\n\nA lighthouse keeper's log.\n")
    target = tmp_path / "new-lib"
    result = cli("--library", str(target), "--json", "ingest", str(page))
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["documents"][0]["title"] == "Page"
    assert (target / "library.sqlite3").is_file()


def test_version() -> None:
    from importlib.metadata import version

    code, output = run("--version")
    assert (code, output) == (0, f"chapterverse {version('chapterverse')}\n")


def test_serve_and_bench_refuse_global_library_options(tmp_path: Path) -> None:
    for command in ("serve", "bench"):
        code, output = run("--library", str(tmp_path), command, "--help")
        assert code == 2 and f"{command} takes its own options: give them after `{command}`" in output


def test_help_texts_a_new_user_needs() -> None:
    code, output = run("ingest", "--help")
    assert code == 0 and "Read, chunk and embed again even the files whose bytes are unchanged" in " ".join(
        output.replace("│", " ").split())
    code, output = run("bench", "--help")
    flat = " ".join(output.replace("│", " ").split())
    assert code == 0
    for needs in ("retrieval: --squad FILE (SQuAD v1.1 JSON", "latency: an existing --library",
                  "stores: nothing for SQLite", "crash, cli: nothing"):
        assert needs in flat, needs


def test_an_unreachable_model_is_one_line_of_notice(demo_library: Path) -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    result = cli("ask", "Who kept the light on Gull Rock?", "--doc", "1", "--library", str(demo_library),
                     "--llm-base-url", url, "--llm-model", "m")
    assert result.exit_code == 0
    assert "Marta Olsen" in result.stdout
    assert result.stderr.splitlines() == [
        f"note: The model could not answer (cannot reach {url}: [Errno 111] Connection refused); this is an "
        "extractive answer from the retrieved passages."]


def test_a_failing_background_job_logs_one_line_not_a_traceback(demo_library: Path) -> None:
    """``chat`` starts the document's summary job in a thread; with the model unreachable it fails: one line."""
    url = f"http://127.0.0.1:{closed_port()}/v1"
    script = ("import sys, threading; from chapterverse.cli import app\n"
              "try:\n    app(sys.argv[1:], prog_name='chapterverse')\nexcept SystemExit:\n    pass\n"
              "for t in threading.enumerate():\n    t.name.startswith('summaries-') and t.join(60)\n")
    result = subprocess.run([sys.executable, "-c", script, "chat", "--doc", "1", "--library", str(demo_library),
                             "--llm-base-url", url, "--llm-model", "m"],
                            input="Who kept the light?\n", capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert (f"error: summary job for document 1 failed: cannot reach {url}: [Errno 111] Connection refused"
            in result.stderr.splitlines())
