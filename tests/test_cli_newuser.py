"""What a new user sees on a first session (issue 15, the trial on a fresh clone): help that lists flags as flags,
``--verbose`` where users type it (after the command), search hits that say where in the book they are, counts
in words ("1 file"), ``remove`` naming what it removed, citations quoted without doubled quote marks, and a
server that says which library its reader shows.

Commands run through typer's CliRunner against real library folders, or as real processes where a pipe or a
server process is what matters.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from fakellm import Reply, fake_llm
from hashembed import HashingEmbedder
from serverutil import free_port, serve_process, serving
from textpdf import text_pdf
from click.testing import Result
from cliutil import cli
from typer.testing import CliRunner

from chapterverse.cli import app
from chapterverse import Library

DEMO = Path(__file__).resolve().parents[1] / "src" / "chapterverse" / "demo"


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


def process(*args: str, stderr: int = subprocess.PIPE) -> subprocess.CompletedProcess[str]:
    """``chapterverse ARGS`` as its own process; stderr piped apart from stdout unless told otherwise."""
    return subprocess.run([sys.executable, "-m", "chapterverse", *args], stdout=subprocess.PIPE, stderr=stderr,
                          text=True, env={**os.environ, "COLUMNS": "200"}, timeout=300)


@pytest.fixture(scope="module")
def books(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo book and a small PDF with page labels, with the default embedder (search embeds the query)."""
    location = tmp_path_factory.mktemp("newuser")
    library = Library(location / "lib")
    library.ingest([DEMO, text_pdf(location / "keeper.pdf")])
    library.close()
    return location / "lib"


@pytest.fixture
def hashed(tmp_path: Path) -> Path:
    """The demo book, embedded by a test embedder: for the commands that embed nothing."""
    Library(tmp_path / "lib", embedder=HashingEmbedder()).ingest([DEMO])
    return tmp_path / "lib"


def test_help_lists_flags_without_a_value_placeholder() -> None:
    """typer's rich panels printed ``--json <bool>``, as if the flag took a value."""
    for command in ([], ["search"], ["ingest"], ["docs"]):
        code, output = run(*command, "--help")
        assert code == 0
        assert "<bool>" not in output
        assert re.search(r"^\s+--json\s+\S", output, re.M), output
    code, output = run("search", "--help")
    assert re.search(r"^\s+--k, -k <int range>|^\s+-k, --k <int range>", output, re.M), output


def test_help_lists_every_command_with_a_whole_sentence() -> None:
    """The command list shows each command's first sentence, never one cut off with "..."."""
    code, output = run("--help")
    commands = output[output.index("Commands:"):]
    assert code == 0 and "..." not in commands
    for line in ("ingest     Add books and documents to the library.",
                 "search     Find passages: hybrid BM25 + embedding search.",
                 "serve      Run the server: web reader, knowledge-base API, chat proxy."):
        assert line in commands


def test_verbose_is_accepted_after_the_command(books: Path) -> None:
    """``chapterverse ask ... --verbose`` shows the model's retries, as ``chapterverse --verbose ask ...`` does."""
    url = f"http://127.0.0.1:{free_port()}/v1"
    for where in ("after", "before"):
        args = ["ask", "Who kept the light on Gull Rock?", "--library", str(books), "--llm-base-url", url,
                "--llm-model", "m"]
        result = cli(*(args + ["--verbose"] if where == "after" else ["--verbose", *args]))
        assert result.exit_code == 0, result.stderr
        assert "retrying in" in result.stderr and "WARNING: model failed, answering extractively" in result.stderr
    code, output = run("search", "lamp", "--library", str(books), "-v", "-k", "1")
    assert code == 0 and output.count("(relevance ") == 1


def test_a_failing_model_is_one_notice_without_verbose(books: Path) -> None:
    """Without ``--verbose`` the answer's notice alone says the model failed: neither the client's retries nor
    the dispatcher's fallback warning (``answering.ask``) repeat it on stderr."""
    url = f"http://127.0.0.1:{free_port()}/v1"
    result = cli("ask", "Who kept the light on Gull Rock?", "--library", str(books), "--llm-base-url", url,
                 "--llm-model", "m")
    assert result.exit_code == 0, result.stderr
    [line] = result.stderr.splitlines()
    assert line.startswith(f"note: The model could not answer (cannot reach {url}")
    assert line.endswith("this is an extractive answer from the retrieved passages.")
    assert "[f1-" in result.stdout


def test_search_hits_say_where_in_the_book_they_are(books: Path) -> None:
    """Each hit's line names the book and the contents' path where the passage starts, the path ``resolve``
    gives for its tag."""
    query = ["search", "Marta found a wooden chest", "--k", "3", "--library", str(books), "--doc", "1"]
    code, output = run(*query)
    assert code == 0
    heads = [line for line in output.splitlines() if re.match(r"\d\. \[f1-", line)]
    hits = json.loads(run(*query, "--json")[1])["results"]
    assert len(heads) == len(hits) == 3
    for n, (head, hit) in enumerate(zip(heads, hits), start=1):
        path = json.loads(run("resolve", hit["tag"], "--json", "--library", str(books))[1])["toc_path"]
        assert hit["toc_path"] == path and hit["page"] is None
        assert path[0] == "The Keeper of Gull Rock"  # the book's contents begin with its title: not said twice
        assert head == (f"{n}. [{hit['tag']}] The Keeper of Gull Rock — {' › '.join(path[1:])} "
                        f"(relevance {hit['score']})")
    assert any(line.endswith(" — Chapter 3. What She Found") for line in
               (head.rsplit(" (relevance", 1)[0] for head in heads)), heads
    code, output = run("search", "paraffin lamp", "--k", "1", "--library", str(books), "--doc", "2", "--json")
    [hit] = json.loads(output)["results"]
    assert (hit["toc_path"], hit["page"]) == (["Chapter One: The Lamp"], "1")


def test_search_hits_in_a_pdf_name_the_printed_page(books: Path) -> None:
    """The page label the PDF prints (1), not the page's position in the file (2)."""
    code, output = run("search", "paraffin lamp", "--k", "1", "--library", str(books), "--doc", "2")
    assert code == 0
    first = output.splitlines()[0]
    assert re.fullmatch(r"1\. \[f\d+-\d+-\d+\] keeper — Chapter One: The Lamp, p\. 1 \(relevance 0\.\d+\)", first), first


def test_remove_names_what_it_removed(hashed: Path) -> None:
    code, output = run("remove", "1", "--library", str(hashed))
    assert (code, output) == (0, "removed 1 The Keeper of Gull Rock\n")
    code, output = run("docs", "--library", str(hashed))
    assert (code, output) == (0, "")


def test_summarize_names_each_document_once(hashed: Path) -> None:
    """Piped with stderr apart: a progress line per document on stderr, the result line on stdout with the title;
    both into one pipe (``2>&1``): the result line alone. No "0 invalid tags removed"."""
    apart = process("summarize", "--library", str(hashed))
    assert apart.returncode == 0, apart.stderr
    assert apart.stdout.splitlines() == ["1 The Keeper of Gull Rock: 1 summarised, 0 already done"]
    assert re.fullmatch(r"summarised 1 The Keeper of Gull Rock: 1 segment, 0 already done, \d+\.\d s\n",
                        apart.stderr), apart.stderr
    together = process("summarize", "--library", str(hashed), stderr=subprocess.STDOUT)
    assert together.stdout.splitlines() == ["1 The Keeper of Gull Rock: 0 summarised, 1 already done"]


def test_citations_are_quoted_without_doubling_the_books_quote_marks(books: Path) -> None:
    """The cited text is shown exactly, indented under its footnote: a sentence that ends in the book's own
    closing quote mark is not shown as ``…ship.””``."""
    code, output = run("ask", "Who kept the light on Gull Rock?", "--library", str(books), "--doc", "1")
    assert code == 0
    lines = output.splitlines()
    footnote = next(i for i, line in enumerate(lines) if line.startswith("[1] [f1-"))
    assert lines[footnote + 1].startswith("    Marta Olsen kept the light on Gull Rock"), lines
    assert "“" not in lines[footnote + 1]


def test_serve_says_which_library_its_reader_shows(hashed: Path, tmp_path: Path) -> None:
    """With the knowledge base on, the reader shows the knowledge base's library, not the one ``ingest``
    filled: the start-up line says so, and how to choose another."""
    for args, says in ((["--library", str(hashed)], f"(library: {hashed})"),
                       (["--rag_enabled", "--rag_kb_path", str(tmp_path / "kb")],
                        f"(library: the knowledge base's, {tmp_path / 'kb' / '.chapterverse'}; --library DIR for "
                        "another)")):
        with serving(*args) as (port, line, _):
            assert f"serving the reader on http://127.0.0.1:{port}/ {says}, the API docs at /docs" in line, line
    # the knowledge base's folder is the user's: that the server writes its index inside it is said at start-up
    with serving("--rag_enabled", "--rag_kb_path", str(tmp_path / "kb")) as (_, line, _):
        assert (f"knowledge base {tmp_path / 'kb'}, its index written inside it in "
                f"{tmp_path / 'kb' / '.chapterverse'} (skipped by the folder scan)") in line, line
    # a folder the server had to make, and a reader library beside the knowledge base: which one the API searches
    with serving("--rag_enabled", "--rag_kb_path", str(tmp_path / "new-kb"), "--library", str(hashed)) as (_, line, _):
        assert (f"knowledge base {tmp_path / 'new-kb'} (new and empty: created now), its index written inside it in "
                f"{tmp_path / 'new-kb' / '.chapterverse'} (skipped by the folder scan); /v1/rag and the chat proxy "
                f"search the knowledge base, not {hashed}") in line, line


def test_the_demo_answer_names_the_book_once_per_footnote(books: Path) -> None:
    """The demo's first answer read "The Keeper of Gull Rock — The Keeper of Gull Rock › Chapter 3. What She
    Found": the book's contents begin with its title. ``ask`` and ``resolve`` name it once."""
    code, output = run("ask", "What did the lighthouse keeper find in the storm?", "--library", str(books),
                       "--doc", "1")
    assert code == 0, output
    footnotes = re.findall(r"^\[\d+\] \[(f[\d-]+)\] (.*)$", output, re.M)
    assert footnotes, output
    for tag, where in footnotes:
        assert where.startswith("The Keeper of Gull Rock — Chapter "), where
        code, resolved = run("resolve", tag, "--library", str(books))
        assert resolved.splitlines()[0] == f"[{tag}] {where}"


def test_chat_with_a_model_prints_footnotes_as_ask_does(books: Path) -> None:
    """After the streamed answer, each footnote with its place in the book and the exact text, indented."""
    tag = json.loads(run("search", "Marta Olsen kept the light", "--k", "1", "--json", "--library", str(books),
                         "--doc", "1")[1])["results"][0]["tag"]
    with fake_llm(Reply.text(f"Marta Olsen kept it [{tag}].")) as fake:
        result = cli("chat", "--doc", "1", "--library", str(books), "--llm-base-url", fake.base_url, "--llm-model",
                     "m", input="Who kept the light?\n")
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    footnotes = [(i, m) for i, line in enumerate(lines) if (m := re.fullmatch(r"\[(\d+)\] \[(f[\d-]+)\] (.*)", line))]
    assert [int(m[1]) for _, m in footnotes] == list(range(1, len(footnotes) + 1)) and footnotes, lines
    for at, match in footnotes:
        resolved = json.loads(run("resolve", match[2], "--json", "--library", str(books))[1])
        assert match[3] == f"The Keeper of Gull Rock — {' › '.join(resolved['toc_path'][1:])}"
        text = resolved["text"].splitlines()
        assert lines[at + 1:at + 1 + len(text)] == [f"    {line}" if line else "" for line in text]


def test_a_chat_is_named_by_its_first_question_and_an_empty_one_is_not_kept(books: Path) -> None:
    """``chat`` stored every session as a chat named after the book, before anything was asked: the reader's
    list of conversations filled with "The Keeper of Gull Rock", empty ones among them. Now a chat is stored
    at its first answer and named by its first question, as the reader names its own."""
    def chat(stdin: str) -> Result:
        return cli("chat", "--doc", "1", "--library", str(books), input=stdin, env={"COLUMNS": "60"})

    def titles() -> list[str]:
        library = Library(books)
        try:
            return [c.title for c in library.store.chats(1)]
        finally:
            library.close()

    before = titles()
    quiet = chat("")
    assert quiet.exit_code == 0, quiet.stderr
    assert quiet.stderr.splitlines()[0] == "chat about “The Keeper of Gull Rock” (extractive mode; Ctrl-D to end)"
    assert quiet.stderr.splitlines()[-1] == "nothing asked, nothing saved"
    assert titles() == before
    asked = chat("  Who kept   the light\non Gull Rock?\n")
    assert asked.exit_code == 0, asked.stderr
    assert "Marta Olsen" in asked.stdout
    [new] = [t for t in titles() if t not in before]
    assert new == "Who kept the light"
    chat_id = int(re.search(r"saved as chat (\d+); export with", asked.stderr)[1])  # type: ignore[index]
    code, exported = run("export", str(chat_id), "--library", str(books))
    assert code == 0 and exported.startswith("# Who kept the light\n")


def test_serve_names_a_library_it_had_to_make_and_refuses_a_file_as_kb_folder(tmp_path: Path) -> None:
    """``serve --library DIR`` of a folder holding no library makes one for the reader's uploads and says so on
    its start-up line (a mistyped folder shows at once); ``--rag_kb_path FILE`` is one error line, exit 2."""
    with serving("--library", str(tmp_path / "new-lib")) as (_, line, _):
        assert f"(library: {tmp_path / 'new-lib'}, new and empty: created now)" in line, line
    notes = tmp_path / "notes.txt"
    notes.write_text("not a folder\n")
    refused = serve_process("--port", str(free_port()), "--rag_enabled", "--rag_kb_path", str(notes))
    _, err = refused.communicate(timeout=120)
    assert refused.returncode == 2
    assert err.strip().splitlines()[-1] == (f"error: {notes}: --rag_kb_path names the knowledge base's folder, and "
                                            "this is not a folder"), err
    assert "Traceback" not in err


def test_search_says_when_no_hit_is_relevant(books: Path) -> None:
    """A query the library knows nothing about still lists its best hits, with a note on stderr that none is
    relevant; a relevant hit gets no note, and a threshold that leaves nothing says so."""
    unrelated = cli("search", "quantum chromodynamics lattice gauge", "--k", "1", "--library", str(books))
    assert unrelated.exit_code == 0, unrelated.stderr
    assert re.match(r"1\. \[f\d+-", unrelated.stdout)
    assert unrelated.stderr.startswith("note: no passage reaches relevance 0.25"), unrelated.stderr
    related = cli("search", "Marta found a wooden chest", "--k", "1", "--library", str(books))
    assert related.exit_code == 0 and related.stderr == "", related.stderr
    assert re.match(r"1\. \[f1-", related.stdout)
    nothing = cli("search", "quantum chromodynamics", "--threshold", "0.4", "--library", str(books))
    assert (nothing.exit_code, nothing.stdout, nothing.stderr) == (0, "", "note: no passage found.\n")
