"""The long-book constructions the confidence model is fit and measured on (bench/long_books.py, issue 27).

On the real FairytaleQA validation stories: a question asked without its answering sections keeps the
story's people and places but not the answer, and a question of a long document keeps its evidence.
"""

from __future__ import annotations

from conftest import shared_path

from chapterverse.bench.answers import AnswerSet, holds_gold, load_fairytaleqa
from chapterverse.bench.long_books import combined, long_documents, removed_text, without_evidence


def fairytales() -> AnswerSet:
    return load_fairytaleqa(shared_path("qa", "fairytaleqa"), "val")


def test_removed_text_drops_whole_paragraphs_touched_by_a_range() -> None:
    text = "First part.\n\nSecond, with the answer.\nStill second.\n\nThird part."
    start = text.index("answer")
    assert removed_text(text, [(start, start + 6)]) == "First part.\n\nThird part."
    assert removed_text(text, [(0, 3), (len(text) - 3, len(text))]) == "Second, with the answer.\nStill second."


def test_a_question_without_its_evidence_is_absent_but_its_story_is_still_there() -> None:
    answer_set = fairytales()
    stories = {d.source: d.parsed.files[0].text for d in answer_set.documents if d.parsed is not None}
    asked = {q.text: q for q in answer_set.questions}
    reduced = without_evidence(answer_set, 40, seed=0)
    assert 30 <= len(reduced.questions) <= 40 and len(reduced.documents) == len(reduced.questions)
    texts = {d.source: d.parsed.files[0].text for d in reduced.documents if d.parsed is not None}
    for question in reduced.questions:
        assert question.absent
        original = asked[question.text]
        text = texts[question.source]
        assert not holds_gold(text, original.answers)
        story = stories[original.source]
        assert 0 < len(text) < len(story)
        kept = [p for p in story.split("\n\n") if p.strip()]
        assert sum(p in text for p in kept) >= len(kept) // 2, "most of the story is still there"


def test_long_documents_join_stories_and_keep_each_questions_evidence() -> None:
    answer_set = fairytales()
    stories = {d.source: d.parsed.files[0].text for d in answer_set.documents if d.parsed is not None}
    joined = long_documents(answer_set, 4)
    assert len(joined.documents) == -(-len(answer_set.documents) // 4) and joined.draws_absent
    texts = {d.source: d.parsed.files[0].text for d in joined.documents if d.parsed is not None}
    assert sum(map(len, texts.values())) > sum(map(len, stories.values()))
    for before, after in zip(answer_set.questions, joined.questions):
        assert (after.text, after.answers) == (before.text, before.answers)
        for (a, b), (c, d) in zip(before.evidence, after.evidence):
            assert texts[after.source][c:d] == stories[before.source][a:b]
    both = combined(joined, without_evidence(joined, 5, seed=1))
    assert sum(q.absent for q in both.questions) == 5 and len(both.documents) == len(joined.documents) + 5
