"""The long-book question set (tests/data/longbooks/questions.jsonl) stays honest: every document resolves, every
gold answer is in the text chapterverse ingests from its book, and both halves hold both kinds of question.

A gold answer that the book does not hold word for word could never be shown by an extractive reader, so it
would count as a miss of the reader when it is a mistake of the set; a parser change that loses text shows up
here first. The text checked is ``read_source``'s, the text ``LibraryWriter.ingest_file`` stores; one real ingest
shows they agree.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from conftest import shared_path

from chapterverse.bench.answers import SHARED_PREFIX, AnswerSet, holds_gold, load_question_file
from chapterverse import Library
from chapterverse.sources import read_source

QUESTIONS = Path(__file__).with_name("data") / "longbooks" / "questions.jsonl"
KEPT_BACK = ("dickens", "plato", "melville", "moby-dick", "virgil", "aeneid", "cervantes", "quixote", "quijote")
"""Books held back to check work judged on this set: none of them may be in it."""
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def question_set() -> AnswerSet:
    if any(json.loads(line)["document"].startswith(SHARED_PREFIX)
           for line in QUESTIONS.read_text(encoding="utf-8").splitlines() if line.strip()):
        shared_path("books")  # skips when the shared data folder is absent
    return load_question_file(QUESTIONS)


def _text(path: Path) -> str:
    """The document's text as the benchmark reads it back from a library: its files joined by a blank line."""
    return "\n\n".join(f.text for f in read_source(path).files)


def test_every_gold_answer_is_in_its_books_text(question_set: AnswerSet) -> None:
    texts = {d.source: _text(d.path) for d in question_set.documents if d.path is not None}
    assert len(texts) == len(question_set.documents)  # every document resolved to a file
    missing = [(q.source.rpartition("/")[2], q.text, q.answers) for q in question_set.questions
               if not q.absent and not all(holds_gold(texts[q.source], [a]) for a in q.answers)]
    assert missing == []


def test_the_set_is_as_large_and_as_varied_as_issue_27_asks(question_set: AnswerSet) -> None:
    answerable = [q for q in question_set.questions if not q.absent]
    absent = [q for q in question_set.questions if q.absent]
    assert len(question_set.documents) >= 10 and len(answerable) >= 150 and len(absent) >= 50
    assert not [d.source for d in question_set.documents if any(name in d.source.lower() for name in KEPT_BACK)]
    halves = Counter((q.split, q.absent) for q in question_set.questions)
    assert None not in {split for split, _ in halves}  # every line names its half
    for absent_kind in (False, True):
        train, test = halves[("train", absent_kind)], halves[("test", absent_kind)]
        assert min(train, test) >= 0.35 * (train + test), halves


def test_the_library_stores_the_text_the_set_was_checked_against(tmp_path: Path) -> None:
    book = QUESTIONS.with_name("collodi-pinocchio-it.txt")
    library = Library(tmp_path / "library")
    try:
        doc_id = library.writer.ingest_file(book).document.id
        stored = "\n\n".join(library.store.file(f.id).text for f in library.store.files(doc_id))
    finally:
        library.close()
    assert stored == _text(book)
