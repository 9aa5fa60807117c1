"""The reader's two small learned models and how answers are composed, loaded from ``reader_weights.json``.

- *Sentence model*: a linear score per candidate sentence over :data:`.features.FEATURES`, fit listwise
  (a softmax over each question's candidates) on development questions whose gold answer lies in one of
  the candidates. It only ranks one question's sentences.
- *Meaning model* (optional, for one embedder): re-ranks the candidates that were embedded from their
  features and the element-wise product of the question's and the sentence's vectors (:func:`meaning_inputs`),
  linearly plus a small hidden layer. A cosine weighs every dimension of the embedding alike; learnt
  weights say which dimensions tell an answer from a sentence that merely shares the topic (held out, the
  gold-holding sentence among the top three: FairytaleQA val 0.577 -> 0.620, XQuAD-en 0.940 -> 0.957,
  SQuAD-it odd 0.820 -> 0.843). Its weights belong to the embedder they were fit with; a library with
  another embedder is ranked by the sentence model alone.
- *Confidence model*: a logistic model over :data:`CONFIDENCE_FEATURES` (how well the best sentence scored,
  how much of the question the evidence knows) whose label is "the answer the reader shows holds the gold
  answer", fit on answerable questions and on questions the document does not answer: of another document,
  of its own document with the answering section removed, and of long documents made of many stories, so a
  book whose every page shares the question's words does not read as sure. Two thresholds fit with it split
  its probability into the three answer states: at least ``answer_threshold`` answers, at least
  ``unsure_threshold`` shows the passages that may help, below that "Not found".

Both are refit with ``python -m chapterverse_dev fit-answers`` (see docs/BENCHMARKS.md), which rewrites the JSON.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from .features import FEATURES

__all__ = ["CONFIDENCE_FEATURES", "MEANING_SCALE", "MeaningModel", "ReaderModel", "load_reader_model",
           "meaning_inputs", "WEIGHTS_PATH"]

WEIGHTS_PATH = Path(__file__).with_name("reader_weights.json")

CONFIDENCE_FEATURES: tuple[str, ...] = (
    "best_score",  # the sentence model's score of the best candidate
    "best_cos",  # the best candidate's cosine to the question
    "best_overlap",  # the best candidate's rarity-weighted term overlap
    "coverage",  # rarity-weighted share of the question's terms found anywhere in the evidence
    "missing",  # rarity of the rarest question term found nowhere in the evidence (0 when none)
    "passage_cos",  # cosine of the question and the best retrieved passage
    "candidates",  # log(1 + number of candidate sentences)
    "stand_in",  # how close in meaning the evidence's words come to the question words it lacks
    "missing_name",  # the question names someone or something the evidence never mentions
    "margin",  # how far the best sentence's score stands above the second's
    "window_overlap",  # the most of the question's weight one sentence and its neighbours hold
)


MEANING_SCALE = 30.0
"""Multiplies the vector products so that they are on the scale of the other features (a product of two
unit vectors' coordinates is about 1 / dimension), which lets one step size fit both."""


def meaning_inputs(features: np.ndarray, query_vector: np.ndarray, sentence_vectors: np.ndarray) -> np.ndarray:
    """The meaning model's input rows: each sentence's features, then its vector times the question's."""
    return np.hstack([features, MEANING_SCALE * sentence_vectors * query_vector[None, :]])


@dataclass(frozen=True, slots=True)
class MeaningModel:
    """score = inputs . linear + relu(inputs @ hidden + hidden_bias) . output, over :func:`meaning_inputs`."""

    embedder: str
    """The embedder whose vectors the weights were fit on (``Embedder.name``)."""
    linear: np.ndarray
    hidden: np.ndarray
    hidden_bias: np.ndarray
    output: np.ndarray

    @property
    def dim(self) -> int:
        return int(self.linear.shape[0]) - len(FEATURES)

    def scores(self, inputs: np.ndarray) -> np.ndarray:
        hidden = np.maximum(inputs @ self.hidden + self.hidden_bias, 0.0)
        return np.asarray(inputs @ self.linear + hidden @ self.output, dtype=np.float64)

    def to_json(self) -> dict[str, Any]:
        def rounded(a: np.ndarray) -> Any:
            return np.round(a.astype(np.float64), 5).tolist()

        return {"embedder": self.embedder, "features": list(FEATURES), "dim": self.dim,
                "linear": rounded(self.linear), "hidden": rounded(self.hidden),
                "hidden_bias": rounded(self.hidden_bias), "output": rounded(self.output)}


@dataclass(frozen=True, slots=True)
class ReaderModel:
    sentence_weights: np.ndarray
    sentence_bias: float
    confidence_weights: np.ndarray
    confidence_bias: float
    keep_ratio: float
    """A further sentence is shown when its softmax share is at least this fraction of the best one's."""
    max_sentences: int = 3
    max_chars: int = 600
    provenance: str = ""
    meaning: MeaningModel | None = None
    answer_threshold: float = 0.5
    """The confidence from which the reader answers."""
    unsure_threshold: float = 0.5
    """The confidence from which, below :attr:`answer_threshold`, the reader shows passages that may help
    instead of "Not found"."""

    def meaning_for(self, embedder: str, dim: int) -> MeaningModel | None:
        """The meaning model when it was fit on this embedder's vectors, else None."""
        fits = self.meaning is not None and self.meaning.embedder == embedder and self.meaning.dim == dim
        return self.meaning if fits else None

    def sentence_scores(self, features: np.ndarray) -> np.ndarray:
        return np.asarray(features @ self.sentence_weights + self.sentence_bias, dtype=np.float64)

    def confidence(self, features: np.ndarray) -> float:
        logit = float(features @ self.confidence_weights + self.confidence_bias)
        return 1.0 / (1.0 + float(np.exp(-np.clip(logit, -30.0, 30.0))))

    def to_json(self) -> dict[str, Any]:
        return {
            "sentence": {"features": list(FEATURES), "weights": [round(float(w), 5) for w in self.sentence_weights],
                         "bias": round(self.sentence_bias, 5)},
            "confidence": {"features": list(CONFIDENCE_FEATURES),
                           "weights": [round(float(w), 5) for w in self.confidence_weights],
                           "bias": round(self.confidence_bias, 5),
                           "answer_threshold": round(self.answer_threshold, 4),
                           "unsure_threshold": round(self.unsure_threshold, 4)},
            "compose": {"keep_ratio": self.keep_ratio, "max_sentences": self.max_sentences,
                        "max_chars": self.max_chars},
            "provenance": self.provenance,
            **({"meaning": self.meaning.to_json()} if self.meaning is not None else {}),
        }


def _vector(section: dict[str, Any], names: tuple[str, ...], path: Path) -> np.ndarray:
    """The weights of ``section`` in ``names`` order; a file fit for other features is refused, not misread."""
    if tuple(section["features"]) != names:
        raise ValueError(f"{path}: weights were fit for features {section['features']}, the reader computes {names}")
    return np.asarray(section["weights"], dtype=np.float64)


def model_from_json(raw: dict[str, Any], path: Path = WEIGHTS_PATH) -> ReaderModel:
    compose = raw["compose"]
    return ReaderModel(
        sentence_weights=_vector(raw["sentence"], FEATURES, path), sentence_bias=float(raw["sentence"]["bias"]),
        confidence_weights=_vector(raw["confidence"], CONFIDENCE_FEATURES, path),
        confidence_bias=float(raw["confidence"]["bias"]), keep_ratio=float(compose["keep_ratio"]),
        max_sentences=int(compose["max_sentences"]), max_chars=int(compose["max_chars"]),
        provenance=str(raw.get("provenance", "")),
        **_thresholds(raw["confidence"], path),
        meaning=_meaning_from_json(raw["meaning"], path) if "meaning" in raw else None)


def _thresholds(section: dict[str, Any], path: Path) -> dict[str, float]:
    """The confidence model's two thresholds, 0 <= unsure <= answer <= 1: a confidence fit without them
    (an older format, without the three answer states) means something else, so its file is refused rather
    than read with a guess."""
    try:
        answer, unsure = float(section["answer_threshold"]), float(section["unsure_threshold"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{path}: the confidence model has no answer and unsure thresholds; refit it with "
                         f"`python -m chapterverse_dev fit-answers`") from exc
    if not 0.0 <= unsure <= answer <= 1.0:
        raise ValueError(f"{path}: thresholds must satisfy 0 <= unsure ({unsure}) <= answer ({answer}) <= 1")
    return {"answer_threshold": answer, "unsure_threshold": unsure}


def _meaning_from_json(raw: dict[str, Any], path: Path) -> MeaningModel:
    if tuple(raw["features"]) != FEATURES:
        raise ValueError(f"{path}: the meaning model was fit for features {raw['features']}, the reader computes "
                         f"{FEATURES}")
    model = MeaningModel(str(raw["embedder"]), *(np.asarray(raw[k], dtype=np.float64)
                                                 for k in ("linear", "hidden", "hidden_bias", "output")))
    if model.dim != int(raw["dim"]) or model.hidden.shape != (len(model.linear), len(model.output)):
        raise ValueError(f"{path}: the meaning model's weights do not fit together")
    return model


@lru_cache(maxsize=1)
def load_reader_model() -> ReaderModel:
    """The packaged model (read once per process)."""
    return model_from_json(json.loads(WEIGHTS_PATH.read_text(encoding="utf-8")))
