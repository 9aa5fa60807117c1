"""The reading model's tooling (``bench fit-reader``): training groups made from real question sets, an export
that runs without torch and scores as the trained network does, and exported files that are refused when they
are not the ones described."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from chapterverse.analysis import content_words
from chapterverse.answering.model import load_reader_model
from chapterverse.bench.answers import holds_gold, load_fairytaleqa, load_question_file
from chapterverse_dev.cross_encoder import FORMAT, ReadingModelError, open_reading_model
from chapterverse_dev.fit_answers import TrainingData, collect
from chapterverse_dev.reader_pairs import GROUP_SIZE, groups_of, reader_groups
from conftest import shared_path

pytestmark = pytest.mark.slow  # training and exporting a model

DEMO = Path(__file__).resolve().parents[1] / "src" / "chapterverse" / "demo" / "the-keeper-of-gull-rock.md"
QUESTION = "Who was setting when the Snow Man spoke?"
SENTENCES = ["He meant the sun, who was just setting.", "It is so delightfully cold, said the Snow Man."]


def test_groups_put_the_gold_sentence_first_against_sentences_that_share_the_questions_words() -> None:
    answer_set = load_fairytaleqa(shared_path("qa", "fairytaleqa"), "val")
    keys = [(q.source, q.text) for q in answer_set.questions]
    answers = {(q.source, q.text): q.answers for q in answer_set.questions if keys.count((q.source, q.text)) == 1}
    groups = groups_of(answer_set, ["en"], seed=0, absent_share=1.0)
    answerable = [g for g in groups if g.answerable]
    absent = [g for g in groups if not g.answerable]
    assert len(answerable) > 500 and len(absent) > 300
    for group in answerable:
        assert len(group.sentences) == GROUP_SIZE
        if (group.source, group.question) not in answers:
            continue  # asked twice of one story, with other answers
        gold = answers[(group.source, group.question)]
        assert holds_gold(group.sentences[0], gold)
        assert not any(holds_gold(s, gold) for s in group.sentences[1:])
    asked = [frozenset(content_words(g.question, ["en"])) for g in answerable]
    shared = np.mean([len(a & frozenset(content_words(g.sentences[1], ["en"]))) for a, g in zip(asked, answerable)])
    drawn = np.mean([len(a & frozenset(content_words(g.sentences[-1], ["en"]))) for a, g in zip(asked, answerable)])
    assert shared > drawn  # the hardest negatives come first, the random ones last


def test_reader_groups_put_the_gold_sentence_against_the_readers_own_best_other_candidates(tmp_path: Path) -> None:
    """--negatives reader: the sentences the extractive reader would show instead of the answer, in its order."""
    lines = [{"document": str(DEMO), "question": "What was the name of the cat?", "answers": ["Admiral"]},
             {"document": str(DEMO), "question": "What did Marta find in the chest?", "answers": ["logbook"]},
             {"document": str(DEMO), "question": "How do I reset my router password?", "absent": True}]
    questions = tmp_path / "demo.jsonl"
    questions.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    data = TrainingData()
    collect(load_question_file(questions), tmp_path / "library", None, 0, data)
    model = load_reader_model()
    groups = reader_groups(data, model, absent=5)
    assert [g.answerable for g in groups] == [True, True, False]
    for group, line, reading, labels in zip(groups, lines, data.readings, data.labels):  # all in file order
        order = [int(i) for i in np.argsort(-reading.ranking_scores(model), kind="stable")]
        texts = [reading.candidates[i].text for i in order]
        if group.answerable:
            gold = line["answers"]
            assert holds_gold(group.sentences[0], gold) and not any(holds_gold(s, gold) for s in group.sentences[1:])
            assert list(group.sentences[1:]) == [t for t, i in zip(texts, order) if not labels[i]][:GROUP_SIZE - 1]
        else:
            assert list(group.sentences) == texts[:GROUP_SIZE]
    assert reader_groups(data, model, absent=0) == groups[:2]


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray]:
    """The pretrained encoder with an untrained head, exported as fit-reader exports, and what torch scores."""
    torch = pytest.importorskip("torch")
    from transformers import BertModel

    from chapterverse_dev.fit_reader import LAYERS, base_model_dir, export

    work = tmp_path_factory.mktemp("fit-reader")
    torch.manual_seed(0)
    model = BertModel.from_pretrained(base_model_dir(), num_hidden_layers=LAYERS, add_pooling_layer=False).eval()
    head = torch.nn.Linear(model.config.hidden_size, 1)
    torch.save({"model": model.state_dict(), "head": head.state_dict(), "step": 0}, work / "step0.pt")
    description = export(work / "step0.pt", work / "model", "test export")
    assert description["format"] == FORMAT and description["steps"] == 0
    reader = open_reading_model(work / "model")
    encoded = [reader.tokenizer.encode(QUESTION, s) for s in SENTENCES]
    width = max(len(e.ids) for e in encoded)
    rows = {key: torch.tensor([getattr(e, attr) + [0] * (width - len(e.ids)) for e in encoded])
            for key, attr in (("input_ids", "ids"), ("attention_mask", "attention_mask"),
                              ("token_type_ids", "type_ids"))}
    with torch.no_grad():
        expected = head(model(**rows).last_hidden_state[:, 0]).squeeze(-1).numpy()
    return work / "model", expected


def test_the_exported_int8_model_scores_as_the_network_it_was_made_from(exported: tuple[Path, np.ndarray]) -> None:
    folder, expected = exported
    scores = open_reading_model(folder).scores(QUESTION, SENTENCES)
    assert scores.shape == (2,)
    assert np.allclose(scores, expected, atol=0.05), (scores, expected)
    assert (folder / "model.onnx").stat().st_size < 40_000_000


def test_an_exported_model_is_read_without_torch(exported: tuple[Path, np.ndarray]) -> None:
    code = ("import sys; from pathlib import Path; from chapterverse_dev.cross_encoder import open_reading_model; "
            f"open_reading_model(Path({str(exported[0])!r})).scores({QUESTION!r}, {SENTENCES!r}); "
            "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert shown.stdout.strip() == "[]"


@pytest.fixture()
def copied(exported: tuple[Path, np.ndarray], tmp_path: Path) -> Path:
    return Path(shutil.copytree(exported[0], tmp_path / "model"))


def test_a_changed_weights_file_is_refused(copied: Path) -> None:
    weights = copied / "model.onnx"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0xFF
    weights.write_bytes(bytes(data))
    with pytest.raises(ReadingModelError, match="model.onnx: missing or not the file the model was fit with"):
        open_reading_model(copied)


def test_a_model_of_another_format_is_refused(copied: Path) -> None:
    path = copied / "model.json"
    path.write_text(json.dumps({**json.loads(path.read_text(encoding="utf-8")), "format": "cross-encoder/0"}),
                    encoding="utf-8")
    with pytest.raises(ReadingModelError, match="format 'cross-encoder/0'"):
        open_reading_model(copied)


def test_a_missing_tokenizer_is_refused(copied: Path) -> None:
    (copied / "tokenizer.json").unlink()
    with pytest.raises(ReadingModelError, match="tokenizer.json: missing"):
        open_reading_model(copied)
