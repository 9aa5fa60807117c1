"""The three answer states (issue 27): answered, unsure (passages that may help) and not found.

What a user relies on: a question about the book's own people that the book does not answer is not shown a
confident wrong answer, nor a bare "Not found", but the passages that may help, each an exact cited span;
the reader, ``chapterverse ask`` (text and --json) and the reader's HTTP API say the same. Against the real
default embedder, the packaged weights and real SQLite libraries of the bundled demo book.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import Result
from cliutil import cli as run_cli
from serverutil import Server, running_server, settings_for, shared_embedder, wait_for_job

from chapterverse.answering import UNSURE_PREFIX, extractive_answer
from chapterverse.answering.model import load_reader_model
from chapterverse import Library

DEMO = Path(__file__).resolve().parents[1] / "src" / "chapterverse" / "demo"
DEMO_BOOK = DEMO / "the-keeper-of-gull-rock.md"
UNSURE_QUESTION = "What was the name of Marta's husband?"
"""The book is about Marta, and never names a husband: the words are there, the answer is not."""
ANSWERED_QUESTION = "What was the name of the cat?"
OFF_TOPIC_QUESTION = "How do I reset my router password?"
KEY = "states-test-key-0123456789"
AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    location = tmp_path_factory.mktemp("states")
    library = Library(location)
    library.ingest([DEMO])
    library.close()
    return location


@pytest.fixture(scope="module")
def demo(demo_dir: Path) -> Iterator[Library]:
    library = Library(demo_dir)
    yield library
    library.close()


def assert_unsure(result: dict[str, Any], resolve: Callable[[str], str]) -> None:
    """Unsure (an answer's JSON): the fixed opening, then two or three cited passages of the book, each an
    exact span (``resolve``: a tag's text)."""
    assert result["state"] == "unsure" and result["found"] is False
    assert result["answer"].startswith(UNSURE_PREFIX)
    assert 2 <= len(result["citations"]) <= 3
    for citation in result["citations"]:
        assert resolve(citation["tag"]) == citation["text"]
        assert f"{citation['text']}[{citation['tag']}]" in result["answer"]


# ------------------------------------------------------------------------------------------ the reader


def test_a_question_the_book_raises_but_does_not_answer_shows_passages_that_may_help(demo: Library) -> None:
    result = extractive_answer(demo, UNSURE_QUESTION, scope_title="The Keeper of Gull Rock")
    assert result.confidence is not None
    model = load_reader_model()
    assert model.unsure_threshold <= result.confidence < model.answer_threshold
    assert_unsure(result.to_json(), lambda tag: demo.resolve(tag).text)
    assert result.answer_spans == []
    assert len({c.tag for c in result.citations}) == len(result.citations)


def test_the_answered_and_not_found_states(demo: Library) -> None:
    answered = extractive_answer(demo, ANSWERED_QUESTION)
    assert answered.state == "answered" and answered.found and "Admiral" in answered.answer
    refused = extractive_answer(demo, OFF_TOPIC_QUESTION, scope_title="The Keeper of Gull Rock")
    assert refused.state == "not_found" and not refused.found and refused.citations == []
    assert refused.answer == "Not found in The Keeper of Gull Rock."


def test_a_question_about_someone_the_book_names_is_unsure_however_low_its_confidence(demo: Library) -> None:
    """Below the unsure threshold a question is "Not found", unless it names someone the passages mention: "Not
    found in" a book about Marta would say the book knows nothing of her. A name the book never mentions is still
    not found."""
    about_marta = extractive_answer(demo, "What was Marta's favourite colour?", scope_title="The Keeper of Gull Rock")
    assert about_marta.confidence is not None and about_marta.confidence < load_reader_model().unsure_threshold
    assert_unsure(about_marta.to_json(), lambda tag: demo.resolve(tag).text)
    assert any("Marta" in citation.text for citation in about_marta.citations)
    stranger = extractive_answer(demo, "What was Queequeg's favourite colour?", scope_title="The Keeper of Gull Rock")
    assert stranger.state == "not_found" and stranger.citations == []
    opening = extractive_answer(demo, "¿Cómo se reinicia la contraseña del router?", scope_title="The Keeper of Gull Rock")
    assert opening.state == "not_found", "a Spanish question's first word after its ¿ is no name"


def test_each_threshold_decides_its_state(demo: Library) -> None:
    """The same reading is answered, unsure or not found as the confidence stands to the two thresholds."""
    confidence = extractive_answer(demo, ANSWERED_QUESTION).confidence
    assert confidence is not None
    model = load_reader_model()
    states = [extractive_answer(demo, ANSWERED_QUESTION, model=replace(model, answer_threshold=answer,
                                                                        unsure_threshold=unsure)).state
              for answer, unsure in [(confidence, confidence), (confidence + 1e-3, confidence),
                                     (confidence + 2e-3, confidence + 1e-3)]]
    assert states == ["answered", "unsure", "not_found"]


# ------------------------------------------------------------------------------------------ the CLI


def cli(*args: str) -> Result:
    return run_cli(*args)


def test_cli_ask_says_it_is_unsure_and_cites_the_passages(demo_dir: Path, demo: Library) -> None:
    shown = cli("ask", UNSURE_QUESTION, "--library", str(demo_dir), "--json")
    assert shown.exit_code == 0, shown.stderr
    payload = json.loads(shown.stdout)
    assert_unsure(payload, lambda tag: demo.resolve(tag).text)

    text = cli("ask", UNSURE_QUESTION, "--library", str(demo_dir))
    assert text.exit_code == 0, text.stderr
    assert text.stdout.startswith(UNSURE_PREFIX)
    assert "[1]" in text.stdout and "[2]" in text.stdout and "[f" in text.stdout  # numbered, then the footnotes

    refused = json.loads(cli("ask", OFF_TOPIC_QUESTION, "--library", str(demo_dir), "--json").stdout)
    assert refused["state"] == "not_found" and refused["found"] is False and refused["citations"] == []


def test_cli_ask_shows_an_answers_confidence_on_its_own_line(demo_dir: Path) -> None:
    """The plain output says how sure an answer is, as --json does: one line after the answer, before the
    footnotes; unsure and not found say what they are in their own words, with no such line."""
    answered = json.loads(cli("ask", ANSWERED_QUESTION, "--library", str(demo_dir), "--json").stdout)
    assert answered["state"] == "answered", answered
    lines = cli("ask", ANSWERED_QUESTION, "--library", str(demo_dir)).stdout.splitlines()
    at = lines.index(f"confidence {answered['confidence']:.2f}")
    assert "Admiral" in " ".join(lines[:at]) and lines[at + 1] == "" and lines[at + 2].startswith("[1] [f"), lines
    for question in (UNSURE_QUESTION, OFF_TOPIC_QUESTION):
        shown = cli("ask", question, "--library", str(demo_dir))
        assert shown.exit_code == 0 and "confidence" not in shown.stdout, shown.stdout


# ------------------------------------------------------------------------------------------ the HTTP API


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("states-server")
    settings = settings_for(root, library=root / "library", api_key=KEY)
    with running_server(settings, embedder=shared_embedder()) as running:
        yield running


def test_reader_api_streams_the_unsure_state_and_keeps_it_with_the_chat(server: Server) -> None:
    with server.client() as client:
        reply = client.post("/api/documents", files={"file": (DEMO_BOOK.name, DEMO_BOOK.read_bytes(), "text/markdown")},
                            headers=AUTH)
        job = wait_for_job(client, reply.json()["job"])
        doc_id = int(job["document_ids"][0])
        done = _ask(client, doc_id, UNSURE_QUESTION)
        assert_unsure(done, lambda tag: str(client.get(f"/api/resolve/{tag}").json()["text"]))
        history = client.get(f"/api/chats/{done['chat_id']}").json()
        assert history["messages"][1]["result"]["state"] == "unsure"
        assert _ask(client, doc_id, ANSWERED_QUESTION)["state"] == "answered"
        assert _ask(client, doc_id, OFF_TOPIC_QUESTION)["state"] == "not_found"


def _ask(client: httpx.Client, doc_id: int, question: str) -> dict[str, Any]:
    """The ask stream's ``done`` event, with the chat id of its ``meta`` event."""
    reply = client.post(f"/api/documents/{doc_id}/ask", headers=AUTH,
                        json={"question": question, "mode": "extractive"})
    assert reply.status_code == 200, reply.text
    events = {}
    for block in reply.text.strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines())
        events[fields["event"]] = json.loads(fields["data"])
    return {**events["done"], "chat_id": events["meta"]["chat_id"]}
