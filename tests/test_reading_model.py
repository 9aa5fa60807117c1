"""The packaged reading model (answering/cross_encoder.py): it loads without torch, reads a question and a
sentence together, and refuses files that are not the ones it was fit with."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from chapterverse.answering.cross_encoder import (FORMAT, MODEL_DIR, ReadingModelError, load_reading_model,
                                                  open_reading_model)

QUESTION = "What is the name of the inn kept by Jim's father?"
ANSWER = "My father kept the Admiral Benbow inn, and the old seaman took up his lodging under our roof."
DISTRACTORS = [
    "Jim's father was ill, and the doctor came to see him every evening.",
    "The captain sat all evening in the parlour, singing his wicked old sea-song.",
    "His name was Billy Bones, and he kept a chest in his room.",
]


def test_the_answering_sentence_reads_above_sentences_that_share_the_questions_words() -> None:
    scores = load_reading_model().scores(QUESTION, [*DISTRACTORS, ANSWER])
    assert scores.shape == (4,)
    assert int(scores.argmax()) == 3, scores


def test_the_packaged_model_names_its_format_and_what_it_was_made_from() -> None:
    description = json.loads((MODEL_DIR / "model.json").read_text(encoding="utf-8"))
    assert description["format"] == FORMAT
    assert description["base"] == "sentence-transformers/all-MiniLM-L6-v2"
    assert set(description["sha256"]) == {"model.onnx", "tokenizer.json"}
    assert (MODEL_DIR / "model.onnx").stat().st_size < 40_000_000


@pytest.fixture()
def copied_model(tmp_path: Path) -> Path:
    target = tmp_path / "reading_model"
    shutil.copytree(MODEL_DIR, target)
    return target


def test_a_changed_weights_file_is_refused(copied_model: Path) -> None:
    weights = copied_model / "model.onnx"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0xFF
    weights.write_bytes(bytes(data))
    with pytest.raises(ReadingModelError, match="model.onnx: missing or not the file the model was fit with"):
        open_reading_model(copied_model)


def test_a_model_of_another_format_is_refused(copied_model: Path) -> None:
    path = copied_model / "model.json"
    description = json.loads(path.read_text(encoding="utf-8"))
    path.write_text(json.dumps({**description, "format": "chapterverse-cross-encoder/0"}), encoding="utf-8")
    with pytest.raises(ReadingModelError, match="format 'chapterverse-cross-encoder/0'"):
        open_reading_model(copied_model)


def test_a_missing_tokenizer_is_refused(copied_model: Path) -> None:
    (copied_model / "tokenizer.json").unlink()
    with pytest.raises(ReadingModelError, match="tokenizer.json: missing"):
        open_reading_model(copied_model)


def test_reading_needs_no_torch() -> None:
    code = ("import sys; from chapterverse.answering.cross_encoder import load_reading_model; "
            f"load_reading_model().scores({QUESTION!r}, [{ANSWER!r}]); "
            "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert shown.stdout.strip() == "[]"
