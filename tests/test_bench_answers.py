"""``chapterverse bench answers``: the scoring definitions, the loaders, and runs through the real CLI."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from conftest import shared_path
from fakellm import Reply, fake_llm
from typer.testing import CliRunner

from chapterverse.bench.answers import (
    RELIABILITY_BINS,
    AnswerQuestion,
    AnswerRecord,
    AnswerSet,
    absent_questions,
    holds_gold,
    phrase_matches_gold,
    load_fairytaleqa,
    load_question_file,
    load_squad_answers,
    normalise,
    reliability_table,
    sample_questions,
    score_records,
)
from chapterverse.bench.retrieval import BenchDocument
from chapterverse.cli import app
from chapterverse import InputError

DEMO = Path(__file__).resolve().parents[1] / "src" / "chapterverse" / "demo" / "the-keeper-of-gull-rock.md"
METRICS = {"questions", "absent", "answered", "answer_holds_gold", "cited_holds_gold", "gold_in_document",
           "false_refusals", "absent_refused", "answer_chars_mean", "answer_chars_median", "sentences_median", "ms_p50", "ms_p99",
           "phrase_marked", "phrase_matches_gold", "unsure", "unsure_passages_gold", "absent_unsure",
           "confidently_wrong", "useful", "reliability"}


# ------------------------------------------------------------------------------------------------ matching


def test_normalise_folds_case_and_punctuation_but_keeps_accents() -> None:
    assert normalise("  Él dijo: «¡Sí!»\n  well-to-do, U.S. ") == "él dijo sí well to do u s"
    assert normalise("Cafe\u0301") == normalise("Café")  # decomposed and composed accents agree
    assert normalise("él") != normalise("el")
    assert normalise("नमस्ते!") == "नमस्ते"  # combining vowel signs are part of the word


def test_holds_gold_matches_whole_words_only() -> None:
    assert holds_gold("There lived a well-to-do farmer, who had seven sons.", ["A well to do FARMER"])
    assert holds_gold("It was 308 points.", ["nothing", "308"])
    assert not holds_gold("the king said so", ["he"])  # "he" is inside "the", not a word of it
    assert not holds_gold("Él vino.", ["el"])  # accents are kept
    assert not holds_gold("anything at all", ["...", ""])  # gold that normalises to nothing never matches
    assert not holds_gold("a wooden chest", [])


# ------------------------------------------------------------------------------------------------ loaders


def test_squad_answers_take_gold_text_at_its_offsets(tmp_path: Path) -> None:
    context = "The lamp burned paraffin. The boat came on Thursdays."
    data = {"version": "1.1", "data": [{"title": "Gull_Rock", "paragraphs": [{"context": context, "qas": [
        {"id": "q1", "question": "What did the lamp burn?",
         "answers": [{"text": "paraffin", "answer_start": 16}, {"text": "paraffin", "answer_start": 3}]},
        {"id": "q2", "question": "When?", "answers": [{"text": "", "answer_start": -1}]},
    ]}]}]}
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    answer_set = load_squad_answers(path)
    assert answer_set.library_scope and answer_set.draws_absent and len(answer_set.documents) == 1
    [question] = answer_set.questions  # q2 has no usable answer
    assert question.answers == ("paraffin",) and question.evidence == ((16, 24),)


def _write_fairytaleqa(root: Path) -> None:
    (root / "questions" / "val").mkdir(parents=True)
    (root / "section-stories" / "val").mkdir(parents=True)
    (root / "section-stories" / "val" / "the-lamp-story.csv").write_text(
        'section,text\n1,"Marta kept the light.\n\nShe wound the clock."\n2,"A chest washed up."\n', encoding="utf-8")
    header = ("question_id,local-or-sum,cor_section,attribute1,attribute2,question,ex-or-im1,"
              "answer1,answer2,answer3,ex-or-im2,answer4,answer5,answer6\n")
    (root / "questions" / "val" / "the-lamp-questions.csv").write_text(
        header + "1,local,1,character,,Who kept the light?,explicit,Marta,,,explicit,marta,the keeper,\n"
                 "2,local,2,action,,Why did it wash up?,implicit,the storm,,,implicit,,,\n"
                 "3,local,2,setting,,What washed up?,explicit,a chest,,,explicit,,,\n", encoding="utf-8")


def test_fairytaleqa_story_sections_become_paragraphs_and_only_explicit_questions_count(tmp_path: Path) -> None:
    _write_fairytaleqa(tmp_path)
    answer_set = load_fairytaleqa(tmp_path, "val")
    [document] = answer_set.documents
    assert document.parsed is not None
    text = document.parsed.files[0].text
    assert text == "Marta kept the light.\n\nShe wound the clock.\n\nA chest washed up."
    assert [q.id for q in answer_set.questions] == ["the-lamp/1", "the-lamp/3"]
    first, third = answer_set.questions
    assert first.answers == ("Marta", "marta", "the keeper")
    assert [text[a:b] for a, b in third.evidence] == ["A chest washed up."]
    with pytest.raises(InputError, match="train"):
        load_fairytaleqa(tmp_path, "train")


def test_question_file_lines_and_their_errors(tmp_path: Path) -> None:
    (tmp_path / "book.md").write_text("# Book\n\nSome text.\n", encoding="utf-8")
    good = tmp_path / "mine.jsonl"
    good.write_text(json.dumps({"document": "book.md", "question": "What?", "answers": ["text"]}) + "\n\n"
                    + json.dumps({"document": str(tmp_path / "book.md"), "question": "Who?", "absent": True}) + "\n",
                    encoding="utf-8")
    answer_set = load_question_file(good)
    assert len(answer_set.documents) == 1 and answer_set.documents[0].path == (tmp_path / "book.md").resolve()
    assert [(q.answers, q.absent) for q in answer_set.questions] == [(("text",), False), ((), True)]
    bad_lines = {
        "not json": "not JSON",
        json.dumps({"document": "missing.md", "question": "What?", "answers": ["x"]}): "is not a file",
        json.dumps({"document": "book.md", "question": "", "answers": ["x"]}): "'question'",
        json.dumps({"document": "book.md", "question": "What?"}): "'answers'",
        json.dumps({"document": "book.md", "question": "What?", "answers": ["x"], "absent": True}): "absent",
    }
    for line, reason in bad_lines.items():
        bad = tmp_path / "bad.jsonl"
        bad.write_text(json.dumps({"document": "book.md", "question": "Fine?", "answers": ["y"]}) + "\n" + line,
                       encoding="utf-8")
        with pytest.raises(InputError, match=f"bad.jsonl:2: .*{reason}"):
            load_question_file(bad)


def test_question_file_splits_keep_their_half_and_reject_other_names(tmp_path: Path) -> None:
    (tmp_path / "book.md").write_text("# Book\n\nSome text.\n", encoding="utf-8")
    lines: list[dict[str, Any]] = [{"document": "book.md", "question": "One?", "answers": ["text"], "split": "train"},
             {"document": "book.md", "question": "Two?", "absent": True, "split": "test"},
             {"document": "book.md", "question": "Three?", "answers": ["Some"], "split": "test"},
             {"document": "book.md", "question": "Four?", "answers": ["Book"]}]
    path = tmp_path / "halves.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    whole = load_question_file(path)
    assert [q.split for q in whole.questions] == ["train", "test", "test", None] and whole.split is None
    test = load_question_file(path, "test")
    assert [q.text for q in test.questions] == ["Two?", "Three?"] and test.split == "test"
    assert [q.text for q in load_question_file(path, "train").questions] == ["One?"]
    with pytest.raises(InputError, match="split must be one of train, test"):
        load_question_file(path, "val")
    path.write_text(json.dumps(lines[0] | {"split": "dev"}) + "\n", encoding="utf-8")
    with pytest.raises(InputError, match="halves.jsonl:1: 'split' must be one of train, test"):
        load_question_file(path)
    path.write_text(json.dumps(lines[1]) + "\n", encoding="utf-8")
    with pytest.raises(InputError, match="no questions in split 'train'"):
        load_question_file(path, "train")


def test_shared_documents_resolve_under_the_shared_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shared = tmp_path / "elsewhere"
    (shared / "data" / "books").mkdir(parents=True)
    (shared / "data" / "books" / "tale.md").write_text("# Tale\n\nA fox.\n", encoding="utf-8")
    path = tmp_path / "q.jsonl"
    path.write_text(json.dumps({"document": "shared:data/books/tale.md", "question": "Who?", "answers": ["fox"]})
                    + "\n", encoding="utf-8")
    monkeypatch.setenv("CHAPTERVERSE_SHARED", str(shared))
    [document] = load_question_file(path).documents
    assert document.path == (shared / "data" / "books" / "tale.md").resolve()
    monkeypatch.setenv("CHAPTERVERSE_SHARED", str(tmp_path / "nowhere"))
    with pytest.raises(InputError, match="q.jsonl:1: .*shared data folder.*nowhere.*CHAPTERVERSE_SHARED"):
        load_question_file(path)
    monkeypatch.setenv("CHAPTERVERSE_SHARED", str(shared))
    path.write_text(json.dumps({"document": "shared:data/books/gone.md", "question": "Who?", "absent": True})
                    + "\n", encoding="utf-8")
    with pytest.raises(InputError, match="q.jsonl:1: document .*gone.md is not a file"):
        load_question_file(path)


def test_shared_folder_defaults_to_shared_beside_the_repository(monkeypatch: pytest.MonkeyPatch) -> None:
    """The rule tests/conftest.py follows, so question files and tests find the same folder."""
    from chapterverse.bench.answers import shared_folder

    monkeypatch.delenv("CHAPTERVERSE_SHARED", raising=False)
    assert shared_folder() == Path(__file__).resolve().parents[1].parent / "shared"


# ------------------------------------------------------------------------------------------------ sampling, scoring


def _set_of(documents: int, per_document: int) -> AnswerSet:
    questions = [AnswerQuestion(f"d{d}/q{n}", f"question {n} of {d}?", f"d{d}", (f"gold {d}",))
                 for d in range(documents) for n in range(per_document)]
    return AnswerSet("toy", [BenchDocument(f"d{d}") for d in range(documents)], questions, draws_absent=True)


def test_absent_questions_come_from_other_documents_one_per_answerable_and_repeatably() -> None:
    toy = _set_of(4, 5)
    drawn = absent_questions(toy, seed=3)
    assert len(drawn) == len(toy.questions)
    assert all(q.absent for q in drawn)
    by_text = {q.text: q.source for q in toy.questions}
    assert all(by_text[q.text] != q.source for q in drawn)  # never a question of the document itself
    assert sorted(q.source for q in drawn) == sorted(q.source for q in toy.questions)
    assert drawn == absent_questions(toy, seed=3) and drawn != absent_questions(toy, seed=4)
    sample = sample_questions(toy.questions, 6, seed=1)
    assert len(sample) == 6 and sample == sample_questions(toy.questions, 6, seed=1)
    assert len(absent_questions(toy, seed=3, asked=sample)) == 6
    assert absent_questions(_set_of(1, 5), seed=0) == []  # no other document to draw from


def test_scores_count_refusals_as_misses_and_lengths_only_of_shown_answers() -> None:
    gold = AnswerQuestion("a", "Who?", "d", ("Marta",))
    absent = AnswerQuestion("b", "Why?", "d")

    def record(question: AnswerQuestion, found: bool, answer: str, ms: float) -> AnswerRecord:
        hit = found and holds_gold(answer, question.answers)
        return AnswerRecord(question, "document", found, answer, hit, hit, 1, ms)

    score = score_records([record(gold, True, "Marta kept it.", 10), record(gold, False, "Not found.", 20),
                           record(gold, True, "Someone else.", 30), record(absent, False, "Not found.", 40),
                           record(absent, True, "An answer.", 50)])
    assert score.questions == 3 and score.absent == 2
    assert score.answered == pytest.approx(2 / 3) and score.false_refusals == pytest.approx(1 / 3)
    assert score.answer_holds_gold == pytest.approx(1 / 3)
    assert score.absent_refused == pytest.approx(0.5)
    assert score.answer_chars_median == len("Someone else.")  # of the three shown answers
    assert score.ms_p50 == 30 and score.ms_p99 == 50


def test_useful_is_right_or_unsure_with_the_answer_in_the_first_passage() -> None:
    gold = AnswerQuestion("a", "Who?", "d", ("Marta",))

    def unsure(first: bool, any_passage: bool) -> AnswerRecord:
        return AnswerRecord(gold, "document", False, "passages", False, False, 2, 1, state="unsure",
                            passages_gold=any_passage, first_passage_gold=first)

    right = AnswerRecord(gold, "document", True, "Marta kept it.", True, True, 1, 1, state="answered")
    score = score_records([right, unsure(True, True), unsure(False, True), unsure(False, False)])
    assert score.answer_holds_gold == pytest.approx(1 / 4)
    assert score.useful == pytest.approx(2 / 4)  # the answer in the third passage is not what a reader reads first
    assert score.unsure_passages_gold == pytest.approx(2 / 3)


def test_marked_phrases_are_scored_against_gold_only_where_the_reader_marked_one() -> None:
    cat = AnswerQuestion("a", "What was the cat called?", "d", ("a grey cat called Admiral",))
    year = AnswerQuestion("b", "When?", "d", ("1911",))
    records = [AnswerRecord(cat, "document", True, "...", True, True, 1, 1, phrases=["Admiral"]),
               AnswerRecord(year, "document", True, "...", True, True, 1, 1, phrases=["the storm"]),
               AnswerRecord(year, "document", True, "...", True, True, 1, 1),
               AnswerRecord(year, "document", False, "Not found.", False, False, 0, 1)]
    score = score_records(records)
    assert score.phrase_marked == pytest.approx(2 / 3)  # of the three shown answers
    assert score.phrase_matches_gold == pytest.approx(1 / 2)
    assert phrase_matches_gold("fourteenth of November 1911", ["1911"])
    assert not phrase_matches_gold("Admiralty", ["Admiral"])


def _confident(question: AnswerQuestion, found: bool, right: bool, confidence: float | None) -> AnswerRecord:
    return AnswerRecord(question, "document", found, "..." if found else "Not found.", right, right, 1, 1,
                        confidence=confidence)


def test_confidently_wrong_counts_sure_wrong_answers_to_answerable_questions() -> None:
    gold = AnswerQuestion("a", "Who?", "d", ("Marta",))
    absent = AnswerQuestion("b", "Why?", "d")
    score = score_records([_confident(gold, True, False, 0.95),   # sure and wrong
                           _confident(gold, True, False, 0.9),    # the threshold counts as sure
                           _confident(gold, True, True, 0.99),    # sure and right
                           _confident(gold, True, False, 0.5),    # wrong, but not shown as sure
                           _confident(gold, False, False, 0.97),  # refused: nothing misleads
                           _confident(gold, True, False, None),   # no confidence reported
                           _confident(absent, True, False, 0.99)])  # absent: in the reliability table only
    assert score.questions == 6 and score.confidently_wrong == pytest.approx(2 / 6)


def test_reliability_table_bins_shown_answers_and_counts_answered_absent_questions_as_wrong() -> None:
    gold = AnswerQuestion("a", "Who?", "d", ("Marta",))
    absent = AnswerQuestion("b", "Why?", "d")
    records = [_confident(gold, True, True, 0.2), _confident(gold, True, False, 0.49),
               _confident(gold, True, True, 0.5), _confident(gold, True, True, 0.95),
               _confident(absent, True, False, 0.95), _confident(gold, True, True, 1.0),
               _confident(gold, True, True, 0.99), _confident(gold, False, False, 0.3),
               _confident(gold, True, True, None)]
    table = reliability_table(records)
    assert [(b.low, b.high) for b in table] == list(RELIABILITY_BINS)
    assert [b.answers for b in table] == [2, 1, 0, 2, 2]  # refusals and answers without confidence are left out
    assert [b.right for b in table] == [0.5, 1.0, None, 0.5, 1.0]
    assert score_records(records).reliability == table
    assert reliability_table([_confident(gold, True, True, None)])[0].answers == 0


# ------------------------------------------------------------------------------------------------ the CLI


@pytest.fixture(scope="module")
def demo_library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One --library folder for the demo runs, so the book is embedded once."""
    return tmp_path_factory.mktemp("demo-library")


def test_bench_answers_over_the_demo_book(tmp_path: Path, demo_library: Path) -> None:
    questions = tmp_path / "demo.jsonl"
    lines = [{"document": str(DEMO), "question": "What was inside the chest?", "answers": ["the logbook"]},
             {"document": str(DEMO), "question": "How tall was the tower?", "answers": ["forty-two feet"]},
             {"document": str(DEMO), "question": "Who won the 1998 football world cup?", "absent": True}]
    questions.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    records = tmp_path / "records.jsonl"
    result = CliRunner().invoke(app, ["bench", "answers", "--questions", str(questions), "--json",
                                      "--library", str(demo_library), "--records", str(records)])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["mode"] == "extractive" and report["documents"] == 1 and list(report["scopes"]) == ["document"]
    scores = report["scopes"]["document"]
    assert set(scores) == METRICS
    assert scores["answer_holds_gold"] <= scores["gold_in_document"] == 1.0, "every demo gold is in the book"
    assert scores["questions"] == 2 and scores["absent"] == 1
    assert scores["answer_holds_gold"] >= 0.5  # the chest question is answered by the demo's reader
    assert scores["answered"] + scores["false_refusals"] == pytest.approx(1)
    assert 0 < scores["ms_p50"] <= scores["ms_p99"]
    asked = [json.loads(line) for line in records.read_text(encoding="utf-8").splitlines()]
    assert [r["question"] for r in asked] == [line["question"] for line in lines]
    assert all(not r["holds_gold"] or r["found"] for r in asked)
    assert [r["found"] for r in asked] == [r["state"] == "answered" for r in asked]
    assert all("[f" not in r["answer"] for r in asked)  # scored and measured without citation tags


def test_bench_answers_asks_one_half_of_a_question_file_and_prints_the_reliability_table(
        tmp_path: Path, demo_library: Path) -> None:
    questions = tmp_path / "halves.jsonl"
    lines = [{"document": str(DEMO), "question": "What was inside the chest?", "answers": ["the logbook"],
              "split": "test"},
             {"document": str(DEMO), "question": "How tall was the tower?", "answers": ["forty-two feet"],
              "split": "train"},
             {"document": str(DEMO), "question": "Who won the 1998 football world cup?", "absent": True,
              "split": "test"}]
    questions.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    records = tmp_path / "records.jsonl"
    result = CliRunner().invoke(app, ["bench", "answers", "--questions", str(questions), "--split", "test",
                                      "--library", str(demo_library), "--records", str(records)])
    assert result.exit_code == 0, result.output
    asked = [json.loads(line) for line in records.read_text(encoding="utf-8").splitlines()]
    assert [(r["question"], r["split"]) for r in asked] == [(lines[0]["question"], "test"),
                                                            (lines[2]["question"], "test")]
    assert "halves, split test" in result.output and "confidently wrong (>= 0.9)" in result.output
    shown = [r for r in asked if r["found"]]
    if shown:  # the reader answered something: its confidence is in the table
        assert "reliability (document)" in result.output and "[0.99, 1]" in result.output
    wrong = CliRunner().invoke(app, ["bench", "answers", "--questions", str(questions), "--split", "val"])
    assert wrong.exit_code == 2 and "train, test or all" in wrong.output


def test_bench_answers_model_path_uses_the_same_definitions(tmp_path: Path, demo_library: Path) -> None:
    """--llm-* flags send the questions through the model's tool loop, and through the extractive reader in the
    same run: one row each, the model's answers right and verified, the absent question refused."""

    def model(request: dict[str, Any]) -> Reply:
        question = next(m["content"] for m in reversed(request["messages"]) if m["role"] == "user")
        evidence = [m["content"] for m in request["messages"] if m.get("role") == "tool"]
        if not evidence:
            return Reply.tool_call("search_passages", {"query": question})
        if "world cup" in question:
            return Reply.text("Not found in this document.")
        tags = re.finditer(r"\[f\d+-\d+-\d+\]", evidence[-1])
        chest = next(m.group() for m in tags if "wooden chest" in evidence[-1][:m.start()])
        return Reply.text(f"Marta found a wooden chest between two boulders {chest}.")

    questions = tmp_path / "demo.jsonl"
    lines = [{"document": str(DEMO), "question": "What did Marta find below the tower?", "answers": ["a wooden chest"]},
             {"document": str(DEMO), "question": "Who won the 1998 football world cup?", "absent": True}]
    questions.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    with fake_llm(handler=model) as fake:
        result = CliRunner().invoke(app, ["bench", "answers", "--questions", str(questions), "--json",
                                          "--library", str(demo_library), "--llm-base-url", fake.base_url,
                                          "--llm-model", "fake-model"])
        asked = {r.json["model"] for r in fake.chat_requests}
    assert result.exit_code == 0, result.output
    assert asked == {"fake-model"}
    report = json.loads(result.stdout)
    assert [row["answerer"] for row in report["rows"]] == ["extractive", "fake-model"]
    model_row = report["rows"][1]
    assert model_row["questions"] == 1 and model_row["absent"] == 1
    assert model_row["answered"] == 1 and model_row["right"] == 1 and model_row["verified"] == 1
    assert model_row["unsupported_sentences"] == 0 and model_row["fallbacks"] == 0
    assert model_row["absent_answered"] == 0


def test_bench_answers_counts_a_models_unsupported_sentences_and_fallbacks(tmp_path: Path) -> None:
    """The generated knowledge base, a model that answers without citing and then fails: its answers are
    answered but not verified, each uncited sentence counted; a failure is a fallback to the extractive
    answer. The extractive reader answers the same questions in the same run."""
    replies = iter([Reply.text("The shop says the order will arrive within five business days of purchase.")] * 4
                   + [Reply.error(500)] * 100)

    def model(request: dict[str, Any]) -> Reply:
        return next(replies)

    with fake_llm(handler=model) as fake:
        result = CliRunner().invoke(app, ["bench", "answers", "--kb", "--limit", "3", "--json", "--library",
                                          str(tmp_path / "lib"), "--llm-base-url", fake.base_url,
                                          "--llm-model", "fake-model", "--records", str(tmp_path / "r.jsonl")])
    assert result.exit_code == 0, result.output
    rows = {row["answerer"]: row for row in json.loads(result.stdout)["rows"]}
    assert set(rows) == {"extractive", "fake-model"}
    assert rows["extractive"]["fallbacks"] == 0 and rows["extractive"]["right"] is None
    records = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text(encoding="utf-8").splitlines()]
    model = [r for r in records if r["answerer"] == "fake-model"]
    assert len(model) == 3 and rows["fake-model"]["fallbacks"] == sum(r["fallback"] for r in model) >= 1
    unsupported = [r for r in model if not r["fallback"] and r["state"] == "answered"]
    assert all(r["unsupported"] == 1 and not r["verified"] for r in unsupported)
    assert rows["fake-model"]["unsupported_sentences"] == len(unsupported)


def test_bench_answers_bad_input_exits_2(tmp_path: Path) -> None:
    neither = CliRunner().invoke(app, ["bench", "answers"])
    assert neither.exit_code == 2 and "exactly one of" in neither.output
    broken = tmp_path / "broken.jsonl"
    broken.write_text("{\n", encoding="utf-8")
    bad = CliRunner().invoke(app, ["bench", "answers", "--questions", str(broken)])
    assert bad.exit_code == 2 and "broken.jsonl:1" in bad.output


@pytest.fixture(scope="module")
def fairytaleqa_slice(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The two shortest real FairytaleQA val stories and their questions, as a FairytaleQA directory of their own
    (a whole split's library takes minutes to embed)."""
    source = shared_path("qa", "fairytaleqa")
    root = tmp_path_factory.mktemp("fairytaleqa")
    for kind, suffix in (("questions", "questions"), ("section-stories", "story")):
        (root / kind / "val").mkdir(parents=True)
        for stem in ("finn-the-giant-and-the-minister-of-lund", "why-dog-and-cat-are-enemies"):
            name = f"{stem}-{suffix}.csv"
            (root / kind / "val" / name).write_bytes((source / kind / "val" / name).read_bytes())
    return root


def test_bench_answers_on_real_fairytaleqa(fairytaleqa_slice: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["bench", "answers", "--fairytaleqa", str(fairytaleqa_slice), "--split", "val",
                                      "--limit", "3", "--json", "--library", str(tmp_path)])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["set"] == "fairytaleqa-val" and report["documents"] == 2 and report["limit"] == 3
    scores = report["scopes"]["document"]
    assert scores["questions"] == 3 and scores["absent"] == 3
    assert set(scores) == METRICS
    for rate in ("answered", "answer_holds_gold", "cited_holds_gold", "false_refusals", "absent_refused"):
        assert 0 <= scores[rate] <= 1
