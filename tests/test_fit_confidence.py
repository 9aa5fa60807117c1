"""How the confidence's two thresholds are picked (issue 27): ``bench fit-answers`` on training questions and
``bench fit-thresholds`` on a long-book question file, whose readings are those ``ask`` makes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from typer.testing import CliRunner

from chapterverse.answering.model import WEIGHTS_PATH
from chapterverse.cli import app
from chapterverse_dev.commands import dev_app
from chapterverse_dev.fit_answers import pick_thresholds

DEMO = Path(__file__).resolve().parents[1] / "src" / "chapterverse" / "demo" / "the-keeper-of-gull-rock.md"


def test_the_answer_threshold_refuses_every_absent_kind_and_the_unsure_one_keeps_helpful_passages() -> None:
    confidence = np.array([0.95, 0.8, 0.7, 0.6, 0.3, 0.2,   # answerable
                           0.75, 0.1, 0.1, 0.1,              # in-domain absent: one reads 0.75
                           0.05, 0.05, 0.05, 0.05])          # absent of another document
    right = np.array([1, 1, 0, 1, 0, 0] + [0] * 8, dtype=bool)
    answerable = np.array([True] * 6 + [False] * 8)
    helpful = np.array([1, 1, 1, 1, 1, 0] + [0] * 8, dtype=bool)
    kinds = ["a:answerable"] * 6 + ["in:absent"] * 4 + ["other:absent"] * 4
    answer, unsure = pick_thresholds(confidence, right, answerable, helpful, kinds, absent_refused=0.9)
    assert 0.75 < answer <= 0.8, "the one in-domain absent question at 0.75 must be refused"
    assert 0.25 < unsure <= 0.3, "every answerable question with a helpful passage still shows passages"
    loose, _ = pick_thresholds(confidence, right, answerable, helpful, kinds, absent_refused=0.75)
    assert loose == 0.5, "never below 0.5, where the shown answer is more likely wrong than right"


def test_the_fitting_commands_are_the_dev_tools_not_the_shipped_bench() -> None:
    shown = CliRunner().invoke(dev_app, ["--help"])
    assert shown.exit_code == 0
    assert all(command in shown.output for command in ("fit-answers", "fit-thresholds", "fit-reader"))
    assert "fit-answers: --qa DIR" in " ".join(shown.output.split())
    bench = CliRunner().invoke(app, ["bench", "fit-answers", "--help"])
    assert bench.exit_code == 2


def test_fit_thresholds_reads_a_question_file_and_leaves_the_packaged_weights_alone(tmp_path: Path) -> None:
    lines = [{"document": str(DEMO), "question": "What was the name of the cat?", "answers": ["Admiral"]},
             {"document": str(DEMO), "question": "How many fishermen were in the lifeboat?", "answers": ["three"]},
             {"document": str(DEMO), "question": "What was the name of Marta's husband?", "absent": True},
             {"document": str(DEMO), "question": "How do I reset my router password?", "absent": True}]
    questions = tmp_path / "demo.jsonl"
    questions.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    packaged = WEIGHTS_PATH.read_bytes()
    result = CliRunner().invoke(dev_app, ["fit-thresholds", "--questions", str(questions),
                                      "--library", str(tmp_path / "libraries"), "--split", "all"])
    assert result.exit_code == 0, result.output
    figures = json.loads(result.stdout)
    assert 0.5 <= figures["answer_threshold"] < 1 and figures["unsure_threshold"] <= figures["answer_threshold"]
    assert figures["demo:absent.answered"] == 0.0 and figures["demo:answerable.answered_right"] == 1.0
    assert WEIGHTS_PATH.read_bytes() == packaged
    unsplit = CliRunner().invoke(dev_app, ["fit-thresholds", "--questions", str(questions)])
    assert unsplit.exit_code == 2 and "no questions in split 'train'" in unsplit.output  # the default: train lines
