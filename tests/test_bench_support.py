"""``bench support``: the labelled sentence-span pairs built from FairytaleQA, and the check's table on them."""

from __future__ import annotations

from conftest import shared_path
from typer.testing import CliRunner

from chapterverse.bench.support import measure_support, statement, support_pairs
from chapterverse.cli import app


def test_a_question_and_its_answer_become_the_statement_a_model_writes() -> None:
    assert statement("Who had seven sons and one daughter?", "a well-to-do farmer") == \
        "A well-to-do farmer had seven sons and one daughter."
    assert statement("What did Assipattle always think about?", "stories of Trolls.") == \
        "Assipattle always think about: stories of Trolls."


def test_pairs_of_each_class_come_from_the_same_statements_and_the_table_names_its_positive_class() -> None:
    folder = shared_path("qa", "fairytaleqa")
    pairs = support_pairs(folder, "val", stories=2, seed=0)
    supporting = [p for p in pairs if p.supports]
    wrong = [p for p in pairs if not p.supports]
    assert supporting and wrong
    assert {p.sentence for p in wrong} <= {p.sentence for p in supporting}
    assert all(p.span != next(s.span for s in supporting if s.sentence == p.sentence) for p in wrong)
    assert support_pairs(folder, "val", stories=2, seed=0) == pairs
    report = measure_support(pairs)
    assert report.pairs == len(pairs) and 0 < report.kept_precision <= 1 and 0 < report.flagged_recall <= 1
    shown = CliRunner().invoke(app, ["bench", "support", "--fairytaleqa", str(folder), "--stories", "2"])
    assert shown.exit_code == 0, shown.output
    assert "keeps (supports: positive)" in shown.output and "wrong-section/extraction" in shown.output
