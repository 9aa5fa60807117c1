"""A question the library cannot answer is "Not found" library-wide as it is asked of one book.

A library of books in several languages (an English novella, a Spanish tale, Latin odes: tests/data/shapes):
a question in English whose name no book holds ("Who is Queequeg?") finds its best passages in the books in
other languages, which share none of its words; those are not "passages that may help". Against the real
default embedder and the packaged reader.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from serverutil import shared_embedder

from chapterverse.answering import extractive_answer
from chapterverse.answering.question import as_question
from chapterverse import Library

SHAPES = Path(__file__).parent / "data" / "shapes"


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Library]:
    library = Library(tmp_path_factory.mktemp("multilingual"), embedder=shared_embedder())
    library.ingest([SHAPES / "the-chimes.md", SHAPES / "el-molino-es.md", SHAPES / "horace-odes-la.txt"])
    yield library
    library.close()


@pytest.mark.parametrize("question", ["Who is Queequeg?", "What is the capital of Australia?",
                                      "Who lies in the shade of the tree?"])
def test_a_question_no_book_answers_is_not_found_library_wide_as_in_one_book(library: Library,
                                                                            question: str) -> None:
    result = extractive_answer(library, question)
    assert result.state == "not_found" and result.citations == [], result.answer
    chimes = next(d.id for d in library.documents() if d.source == "the-chimes.md")
    assert extractive_answer(library, question, doc_ids=[chimes]).state == "not_found"


def test_a_question_about_the_one_book_in_another_language_still_gets_its_passages(library: Library) -> None:
    tale = next(d.id for d in library.documents() if d.source == "el-molino-es.md")
    result = extractive_answer(library, "What was the name of the miller's daughter?", doc_ids=[tale])
    assert result.state in ("unsure", "answered") and any("Rosalía" in c.text for c in result.citations)


def test_a_question_in_english_about_a_named_part_of_a_latin_book_gets_that_parts_passages(
        library: Library) -> None:
    """The embedder knows no Latin, so no passage of the odes was relevant enough to an English question and it
    was "Not found". A question that names the part ("the third ode") is shown that part's passages."""
    odes = next(d.id for d in library.documents() if d.source == "horace-odes-la.txt")
    result = extractive_answer(library, "Whom is the ship carrying in the third ode?", doc_ids=[odes])
    assert result.state == "unsure", result.answer
    third = next(e for e in library.store.toc(odes) if e.title.startswith("III."))
    fourth = next(e for e in library.store.toc(odes) if e.title.startswith("IV."))
    assert result.citations and all(third.offset <= c.start < fourth.offset for c in result.citations)
    assert any("Vergilium" in c.text for c in result.citations)


def test_a_question_in_english_about_a_latin_book_gets_passages_never_an_answer(library: Library) -> None:
    """Naming no part: the embedder does not relate English to Latin (no passage is relevant even at the recall
    level), so a sentence of the odes is no answer to it (it was answered at 0.67 with the ode to Pyrrha), but
    the passages are still shown, as for any question in another language than its book."""
    odes = next(d.id for d in library.documents() if d.source == "horace-odes-la.txt")
    result = extractive_answer(library, "Whom is the ship carrying?", doc_ids=[odes])
    assert result.state == "unsure" and not result.found, result.answer
    assert result.citations and all(c.doc_id == odes for c in result.citations)


@pytest.mark.parametrize(("question", "number"), [
    ("Who lies under the beech tree in the first eclogue?", 1), ("Whom is the ship carrying in the third ode?", 3),
    ("What happens in chapter 12?", 12), ("Who speaks in canto V?", 5), ("¿Qué pasa en el capítulo segundo?", 2),
    ("Who is Queequeg?", None), ("What did the first mate say?", None), ("Which book I read was long?", None)])
def test_the_part_a_question_names(question: str, number: int | None) -> None:
    assert as_question(question, ["english", "spanish"]).part == number
