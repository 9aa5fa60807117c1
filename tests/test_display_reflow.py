"""What a reader sees of hard-wrapped text and of an answer's state; what is stored stays exact.

A plain-text book or a PDF breaks its lines where the file did, mid-sentence; verse breaks them where the poet
did. The terminal and the web reader show the first as running text and keep the second, for display only:
``ask --json`` and every citation's text keep the stored characters, so every tag still resolves exactly. The
web reader's rule (``dom.js``) is run in node where it is installed. The search list says what orders it when
its numbers do not.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from chapterverse import open_library
from chapterverse.answering.extractive import extractive_answer
from chapterverse.cli import app
from chapterverse.export import chat_markdown

SHAPES = Path(__file__).parent / "data" / "shapes"
STATIC = Path(__file__).resolve().parents[1] / "src" / "chapterverse" / "web" / "static"
WRAPPED = "There were three of them in the tower, and Trotty had given each of\nthem a voice of its own."
VERSE = "Midway upon the journey of our life\nI found myself within a forest dark,\nFor the straightforward pathway"


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> str:
    location = str(tmp_path_factory.mktemp("reflow") / "lib")
    result = CliRunner().invoke(app, ["ingest", str(SHAPES / "the-chimes.md"), "--library", location])
    assert result.exit_code == 0, result.output
    return location


def test_the_terminal_reflows_a_hard_wrapped_passage_and_json_keeps_it_exact(library: str) -> None:
    question = "How many bells were there in the tower?"
    shown = CliRunner().invoke(app, ["ask", question, "--library", library]).output
    assert "he loved the Bells. There were three of them in the tower, and Trotty had given each of them a voice" in shown
    stored = json.loads(CliRunner().invoke(app, ["ask", question, "--json", "--library", library]).output)
    cited = " ".join(c["text"] for c in stored["citations"])
    assert "given each of\nthem a voice" in cited and "given each of\nthem a voice" in stored["answer"]
    for citation in stored["citations"]:
        resolved = CliRunner().invoke(app, ["resolve", citation["tag"], "--json", "--library", library]).output
        assert json.loads(resolved)["text"] == citation["text"]


def test_search_says_what_orders_its_list_when_the_numbers_do_not(library: str,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from chapterverse.search import passages

    real = passages.search_results

    def swapped(lib: Any, hits: Any) -> list[dict[str, Any]]:
        results = real(lib, hits)
        results[0]["score"], results[1]["score"] = 0.6292, 0.6354
        return results

    monkeypatch.setattr(passages, "search_results", swapped)
    result = CliRunner().invoke(app, ["search", "Trotty bells tower", "--k", "3", "--library", library])
    assert "hits are in ranking order" in result.output and "relevance alone" in result.output


def _node(script: str) -> Any:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    done = subprocess.run([node, "--input-type=module", "-e", script], capture_output=True, text=True, timeout=60,
                          check=True)
    return json.loads(done.stdout)


def test_the_web_reader_reflows_prose_keeps_verse_and_every_offset() -> None:
    answer = f"No direct answer found; passages that may help:\n{WRAPPED}[f1-1-2]\n{VERSE}[f1-3-4]"
    shown, prose, verse = _node(
        f"import {{ hardWrapped, reflowed }} from '{(STATIC / 'dom.js').as_uri()}';"
        f"console.log(JSON.stringify([reflowed({json.dumps(answer)}), hardWrapped({json.dumps(WRAPPED)}),"
        f" hardWrapped({json.dumps(VERSE)})]));")
    assert prose is True and verse is False
    page = f"{WRAPPED}\nA short last line.\n{WRAPPED}"  # a PDF page: paragraphs without blank lines
    listed = "The Bells of the Old Church, by Night, with snow on it\nTrotty\nThe Goblin of the Great Bell, ringing"
    assert _node(f"import {{ hardWrapped }} from '{(STATIC / 'dom.js').as_uri()}';"
                 f"console.log(JSON.stringify([hardWrapped({json.dumps(page)}), hardWrapped({json.dumps(listed)})]));"
                 ) == [True, False]
    assert len(shown) == len(answer)
    assert shown == answer.replace("each of\nthem", "each of them")


def test_the_answer_card_names_its_state_and_confidence() -> None:
    labels = _node(
        f"import {{ stateLabel }} from '{(STATIC / 'answer.js').as_uri()}';"
        "console.log(JSON.stringify([{state: 'unsure', found: false, confidence: 0.3114}, {found: true},"
        " {state: 'not_found', found: false, confidence: 0.01}].map((r) => stateLabel(r).text)));")
    assert labels == ["unsure · confidence 0.31", "answered", "not found · confidence 0.01"]


CANDIDE = """# Candide

## Chapitre premier

Il y avait en Westphalie, dans le château de monsieur le baron de Thunder-ten-tronckh, un jeune garçon à qui la \
nature avait donné les mœurs les plus douces.

Le précepteur Pangloss[1] était l'oracle de la maison, et le petit Candide écoutait ses leçons avec toute la bonne \
foi de son âge et de son caractère.

[1] Pangloss: celui qui parle de tout.
"""


def test_a_book_s_own_footnote_numbers_are_raised_so_only_citations_read_as_bracketed_numbers(
        tmp_path: Path) -> None:
    """``Pangloss[1]`` is the book's note; the answer's citation is ``[1]`` too. The terminal shows the book's as
    ``Pangloss¹``, in the answer and in the cited passage; ``--json`` and the tag keep the book's characters."""
    (tmp_path / "candide.md").write_text(CANDIDE, encoding="utf-8")
    location = str(tmp_path / "lib")
    assert CliRunner().invoke(app, ["ingest", str(tmp_path / "candide.md"), "--library", location]).exit_code == 0
    question = "Qui était l'oracle de la maison?"
    shown = CliRunner().invoke(app, ["ask", question, "--library", location]).output
    answer, _, footnotes = shown.partition("\n\n")
    assert "Le précepteur Pangloss¹ était l'oracle de la maison" in answer
    assert answer.count("[1]") == 1 and answer.splitlines()[0].endswith("caractère.[1]"), shown
    assert footnotes.startswith("[1] [f") and "    Le précepteur Pangloss¹ était" in footnotes
    stored = json.loads(CliRunner().invoke(app, ["ask", question, "--json", "--library", location]).output)
    (citation,) = stored["citations"]
    assert "Pangloss[1] était" in stored["answer"] and "Pangloss[1] était" in citation["text"]
    resolved = CliRunner().invoke(app, ["resolve", citation["tag"], "--json", "--library", location]).output
    assert json.loads(resolved)["text"] == citation["text"]
    # in a Markdown export "[1]" is a reference link to the first citation's definition: the book's note is raised
    library = open_library(location)
    result = extractive_answer(library, question)
    chat = library.store.create_chat(result.citations[0].doc_id, question)
    library.store.add_message(chat, "user", question)
    library.store.add_message(chat, "assistant", result.answer, result.to_json())
    markdown = chat_markdown(library.store, chat, "http://reader")
    assert "Pangloss¹ était" in markdown and "Pangloss[1]" not in markdown
    assert "caractère.[[1]](http://reader/read/" in markdown and "\n[1]: [" in markdown


JOINED = ("The keeper climbed the stair to the lamp room and looked out over the\ngrey water, where the gulls were "
          "gathering on the rocks below\nthe tower.[f1-1-2] ‘It will blow hard tonight,’ said the keeper; and he wound "
          "the\nclock that turned the great lens.[f1-3-4] In\na minute or two the light swept round again across the\n"
          "harbour and the fishing boats that rode at anchor there.[f1-5-6]")
"""An answer of three sentences of a hard-wrapped book, joined on one line after each tag: the second starts
mid-line after the first's tag, the third ("In") at the end of a line."""


def test_each_cited_sentence_of_an_answer_is_reflowed_on_its_own_in_the_terminal_and_the_reader() -> None:
    from chapterverse.cli import _reflowed

    running = JOINED.replace("\n", " ")
    assert _reflowed(JOINED) == running
    shown, verse = _node(f"import {{ reflowed }} from '{(STATIC / 'dom.js').as_uri()}';"
                         f"console.log(JSON.stringify([reflowed({json.dumps(JOINED)}),"
                         f" reflowed({json.dumps(VERSE + '[f1-3-4]')})]));")
    assert shown == running and verse == VERSE + "[f1-3-4]"
    assert _reflowed(VERSE + "[f1-3-4]") == VERSE + "[f1-3-4]"
