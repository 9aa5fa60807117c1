"""What a person meets at the command line (issue 29): one question limit for the CLI and the server, and a Ctrl-C
during ingest that says what the library kept. Real processes against real library folders."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from cliutil import cli

from chapterverse.limits import MAX_QUERY_CHARS, MAX_QUESTION_CHARS
from chapterverse.server.serve_settings import settings_from_mapping

DEMO = Path(__file__).resolve().parents[1] / "src" / "chapterverse" / "demo" / "the-keeper-of-gull-rock.md"


def test_the_cli_and_the_server_share_one_question_limit(tmp_path: Path) -> None:
    library = tmp_path / "lib"
    assert cli("ingest", str(DEMO), "--library", str(library)).exit_code == 0
    long_question = "Who kept the lamp " + "very " * (MAX_QUESTION_CHARS // 5)
    asked = cli("ask", long_question, "--library", str(library))
    assert asked.exit_code == 2
    assert f"at most {MAX_QUESTION_CHARS:,} are read" in asked.stderr and asked.stdout == ""
    searched = cli("search", "lamp " * (MAX_QUERY_CHARS // 5 + 1), "--library", str(library))
    assert searched.exit_code == 2 and f"at most {MAX_QUERY_CHARS:,} are read" in searched.stderr
    settings = settings_from_mapping({"rag_kb_path": tmp_path / "kb"})
    assert (settings.max_question_chars, settings.max_query_chars) == (MAX_QUESTION_CHARS, MAX_QUERY_CHARS)


def test_ctrl_c_during_ingest_says_what_was_kept(tmp_path: Path) -> None:
    folder = tmp_path / "books"
    folder.mkdir()
    text = DEMO.read_text(encoding="utf-8")
    for n in range(1, 31):  # every chunk its own text: none is a copy, and none is embedded from the cache
        (folder / f"book-{n:02d}.md").write_text(f"# Copy {n}\n\n{text.replace('.', f' ({n}).')}", encoding="utf-8")
    library = tmp_path / "lib"
    child = subprocess.Popen([sys.executable, "-m", "chapterverse", "ingest", str(folder), "--library", str(library)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stderr is not None
    first = child.stdout.readline()  # piped: each document's line comes as soon as it is stored
    assert "(ingested)" in first, first
    time.sleep(0.2)
    child.send_signal(signal.SIGINT)
    out, err = child.communicate(timeout=120)
    assert child.returncode == 130, err
    assert "Run the same command again" in err
    listed = cli("docs", "--library", str(library), "--json")
    kept = json.loads(listed.stdout)["documents"]
    assert 1 <= len(kept) < 30
    # what it says is what the library holds, in plain words
    named = ", ".join(d["source"] for d in kept[:5]) + (f" and {len(kept) - 5} more" if len(kept) > 5 else "")
    documents = "1 document" if len(kept) == 1 else f"{len(kept)} documents"
    assert f"interrupted: kept {documents} added before Ctrl-C ({named}); the one being read was not written." in err
    assert cli("check", "--library", str(library)).exit_code == 0
