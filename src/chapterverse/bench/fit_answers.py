"""Fits the extractive reader (``chapterverse bench fit-answers``) and writes ``answering/reader_weights.json``.

Training questions run through exactly the reader's own path (:func:`answering.extractive.read_evidence`:
retrieval scoped to the question's document, candidate sentences, features), so the models learn from
what they will see. Labels:

- *sentence model*: a candidate holds the gold answer (:func:`bench.answers.holds_gold`); fit listwise, a
  softmax over each question's candidates maximising the probability of its gold-holding ones, on the
  questions that have one (L2 1e-3, full-batch Adam);
- *meaning model*: the same listwise loss over :func:`answering.model.meaning_inputs` (features and the
  product of question and sentence vectors), a linear part and a hidden layer of :data:`MEANING_HIDDEN`
  rectified units (full-batch Adam from a seeded start), for the embedder the sets' libraries use;
- *confidence model*: answerable questions (1) against questions of other documents asked of each
  document (0), one of each per training question; logistic regression;
- *composition*: the ``keep_ratio`` that maximises "answer holds gold" on the training questions while
  the median answer stays within :data:`MEDIAN_CHARS_CAP`.

The default training data are the development halves in ../shared that the answer benchmark does not
report on: FairytaleQA train, and SQuAD-it and SQuAD-es articles of even position (odd ones are held out),
so FairytaleQA val, the odd SQuAD articles and both XQuAD sets measure the reader on unseen questions.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from ..answering.extractive import Reading, choose_sentences, confidence_features, read_evidence
from ..answering.features import FEATURES
from ..answering.model import CONFIDENCE_FEATURES, WEIGHTS_PATH, MeaningModel, ReaderModel, meaning_inputs
from ..embeddings import Embedder
from ..library import Library
from .answers import (
    AnswerQuestion,
    AnswerSet,
    absent_questions,
    holds_gold,
    load_fairytaleqa,
    load_squad_answers,
    open_answer_library,
    sample_questions,
    split_articles,
)

__all__ = ["TrainingData", "collect", "fit_reader", "MemoEmbedder", "training_sets",
           "write_weights", "describe"]

MEDIAN_CHARS_CAP = 450
"""Composition may not buy correctness with length: the median training answer stays under this."""
KEEP_RATIOS = (0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 1.01)
L2 = 1e-3
MEANING_HIDDEN = 16
"""Hidden units of the meaning model: with them the gold-holding sentence was among the top three held-out
candidates more often than with the linear part alone (docs/BENCHMARKS.md, 4 December), at 8.5 k weights."""
MEANING_STEPS = 300
"""Adam steps of the meaning model's fit: with 600 the held-out rankings were worse (top-1 on XQuAD-en 0.767
against 0.813), the sign of a fit that goes on past what generalises."""


class MemoEmbedder(Embedder):
    """An embedder that remembers every text it embedded: training asks many questions of one story, whose
    sentences would otherwise be embedded again for each question."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.name = inner.name
        self.batch_size = inner.batch_size
        self._memo: dict[tuple[bool, str], np.ndarray] = {}

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        return self.inner.embed(texts)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self._remembered(list(texts), query=False)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._remembered(list(texts), query=True)

    def _remembered(self, texts: list[str], *, query: bool) -> np.ndarray:
        missing = [t for t in dict.fromkeys(texts) if (query, t) not in self._memo]
        if missing:
            vectors = self.inner.embed_queries(missing) if query else self.inner.embed(missing)
            self._memo.update(((query, t), v) for t, v in zip(missing, vectors))
        if not texts:
            return np.zeros((0, self.inner.dim), np.float32)
        return np.stack([self._memo[(query, t)] for t in texts])


@dataclass(slots=True)
class TrainingData:
    """Per question: its candidates' feature rows and labels, and whether the document answers it."""

    features: list[np.ndarray] = field(default_factory=list)
    labels: list[np.ndarray] = field(default_factory=list)
    lengths: list[np.ndarray] = field(default_factory=list)
    readings: list[Reading] = field(default_factory=list)
    answerable: list[bool] = field(default_factory=list)
    meaning: list[np.ndarray] = field(default_factory=list)
    """The meaning model's inputs per question (every candidate embedded)."""
    embedder: str = ""

    def add(self, reading: Reading, answers: Sequence[str]) -> None:
        assert len(reading.embedded) == len(reading.candidates), "fit on readings with every candidate embedded"
        self.readings.append(reading)
        self.features.append(reading.features)
        usable = answers and len(reading.candidates)
        self.meaning.append(meaning_inputs(reading.features, reading.query_vector, reading.vectors).astype(np.float32)
                            if usable else np.zeros((0, 0), np.float32))
        self.embedder = reading.embedder
        self.labels.append(np.array([holds_gold(c.text, answers) for c in reading.candidates], dtype=bool))
        self.lengths.append(np.array([len(c.text) for c in reading.candidates]))
        self.answerable.append(bool(answers))


def collect(answer_set: AnswerSet, directory: Path, limit: int | None, seed: int, data: TrainingData,
            progress: Callable[[str, int, int], None] | None = None) -> None:
    """Ask ``limit`` answerable questions of their own documents and as many absent ones; add their readings."""
    library, doc_ids = open_answer_library(answer_set, directory)
    memo = Library(directory, embedder=MemoEmbedder(library.embedder))
    asked = sample_questions([q for q in answer_set.questions if not q.absent], limit, seed)
    questions: list[AnswerQuestion] = [*asked, *absent_questions(answer_set, seed, asked)]
    for n, question in enumerate(questions):
        if progress and n % 100 == 0:
            progress(answer_set.name, n, len(questions))
        reading = read_evidence(memo, question.text, doc_ids=[doc_ids[question.source]], embedded=None)
        data.add(reading, question.answers)
    library.close()
    memo.close()


def training_sets(qa: Path) -> list[tuple[str, Callable[[], AnswerSet]]]:
    """The default training sets under ``qa`` (../shared/data/qa), by cache name: FairytaleQA train and the
    even articles of SQuAD-it and SQuAD-es (what the answer benchmark reports on is left out)."""
    return [
        ("fairytaleqa-train", lambda: load_fairytaleqa(qa / "fairytaleqa", "train")),
        ("squad-it-even", lambda: split_articles(load_squad_answers(qa / "squad-it" / "squad-it.dev.json"), 0)),
        ("squad-es-even", lambda: split_articles(load_squad_answers(qa / "squad-es" / "squad-es.dev.json"), 0)),
    ]


def _adam(gradient: Callable[[np.ndarray], tuple[float, np.ndarray]], size: int, steps: int = 600,
          rate: float = 0.05, start: np.ndarray | None = None) -> np.ndarray:
    """Full-batch Adam from zero (or ``start``): the losses here are small, so a fixed schedule converges."""
    w = np.zeros(size) if start is None else start.astype(np.float64)
    m = np.zeros(size)
    v = np.zeros(size)
    for t in range(1, steps + 1):
        _, g = gradient(w)
        m = 0.9 * m + 0.1 * g
        v = 0.999 * v + 0.001 * g * g
        w -= rate * (m / (1 - 0.9 ** t)) / (np.sqrt(v / (1 - 0.999 ** t)) + 1e-8)
    return w


@dataclass(frozen=True, slots=True)
class _Lists:
    """Questions' candidate rows stacked, for a listwise loss: only questions with a gold-holding candidate
    and a candidate without it (the others teach a softmax nothing)."""

    matrix: np.ndarray
    gold: np.ndarray
    bounds: np.ndarray
    owner: np.ndarray

    @classmethod
    def of(cls, rows: Sequence[np.ndarray], labels: Sequence[np.ndarray], dtype: type = np.float64) -> _Lists:
        groups = [(x, y) for x, y in zip(rows, labels) if len(y) and y.any() and not y.all()]
        bounds = np.cumsum([0, *(len(y) for _, y in groups)])
        return cls(np.concatenate([x for x, _ in groups]).astype(dtype),
                   np.concatenate([y for _, y in groups]).astype(np.float64), bounds,
                   np.repeat(np.arange(len(groups)), np.diff(bounds)))

    def loss_gradient(self, scores: np.ndarray) -> tuple[float, np.ndarray]:
        """Mean negative log-probability of each question's gold-holding candidates, and its gradient in
        the scores."""
        starts = self.bounds[:-1]
        e = np.exp(scores - np.maximum.reduceat(scores, starts)[self.owner])
        total, positive = np.add.reduceat(e, starts), np.add.reduceat(e * self.gold, starts)
        groups = len(starts)
        loss = -float(np.sum(np.log(positive / total))) / groups
        return loss, (e / total[self.owner] - e * self.gold / positive[self.owner]) / groups


def fit_sentence_model(features: Sequence[np.ndarray], labels: Sequence[np.ndarray]) -> np.ndarray:
    """Listwise weights (no bias: a softmax ignores it) over the questions with a gold-holding candidate."""
    lists = _Lists.of(features, labels)

    def gradient(w: np.ndarray) -> tuple[float, np.ndarray]:
        loss, d_scores = lists.loss_gradient(lists.matrix @ w)
        return loss, lists.matrix.T @ d_scores + L2 * w

    return _adam(gradient, lists.matrix.shape[1])


def fit_meaning_model(inputs: Sequence[np.ndarray], labels: Sequence[np.ndarray], embedder: str,
                      seed: int = 0) -> MeaningModel:
    """The meaning model's weights, listwise as :func:`fit_sentence_model`, with the hidden layer started
    from small seeded random weights (from zero its units would never differ)."""
    lists = _Lists.of(inputs, labels, np.float32)
    x = lists.matrix
    n_in, hidden = x.shape[1], MEANING_HIDDEN
    sizes = [n_in, n_in * hidden, hidden, hidden]
    start = np.zeros(sum(sizes))
    start[n_in:n_in + n_in * hidden] = 0.05 * np.random.default_rng(seed).standard_normal(n_in * hidden)

    def unpack(w: np.ndarray) -> tuple[np.ndarray, ...]:
        linear, a, c, v = np.split(w, np.cumsum(sizes)[:-1])
        return linear, a.reshape(n_in, hidden), c, v

    def gradient(w: np.ndarray) -> tuple[float, np.ndarray]:
        linear, a, c, v = unpack(w)
        pre = x @ a.astype(np.float32) + c.astype(np.float32)
        act = np.maximum(pre, 0.0)
        loss, g = lists.loss_gradient(x @ linear.astype(np.float32) + act @ v.astype(np.float32))
        g = g.astype(np.float32)
        d_pre = np.outer(g, v).astype(np.float32) * (pre > 0)
        return loss, np.concatenate([x.T @ g + L2 * linear, (x.T @ d_pre + L2 * a).ravel(), d_pre.sum(axis=0),
                                     act.T @ g])

    linear, a, c, v = unpack(_adam(gradient, len(start), steps=MEANING_STEPS, rate=0.02, start=start))
    return MeaningModel(embedder, linear, a, c, v)


def fit_logistic(matrix: np.ndarray, target: np.ndarray) -> tuple[np.ndarray, float]:
    """Logistic regression (weights, bias) with standardised inputs, returned on the original scale."""
    mean, scale = matrix.mean(axis=0), matrix.std(axis=0) + 1e-9
    z = np.column_stack([(matrix - mean) / scale, np.ones(len(matrix))])

    def gradient(w: np.ndarray) -> tuple[float, np.ndarray]:
        p = 1 / (1 + np.exp(-np.clip(z @ w, -30, 30)))
        return 0.0, z.T @ (p - target) / len(target) + L2 * np.r_[w[:-1], 0.0]

    w = _adam(gradient, z.shape[1], steps=1500)
    weights = w[:-1] / scale
    return weights, float(w[-1] - weights @ mean)


def fit_reader(data: TrainingData, provenance: str) -> tuple[ReaderModel, dict[str, float]]:
    """Every part of the reader from ``data``; returns the model and its training-set figures."""
    answerable = [i for i, a in enumerate(data.answerable) if a]
    labels = [data.labels[i] for i in answerable]
    sentence_w = fit_sentence_model([data.features[i] for i in answerable], labels)
    meaning = fit_meaning_model([data.meaning[i] for i in answerable], labels, data.embedder)
    usable = [i for i, x in enumerate(data.features) if len(x)]
    conf_x = np.stack([confidence_features(data.readings[i], data.features[i] @ sentence_w) for i in usable])
    conf_y = np.array([float(data.answerable[i]) for i in usable])
    conf_w, conf_b = fit_logistic(conf_x, conf_y)
    model = ReaderModel(sentence_w, 0.0, conf_w, conf_b, keep_ratio=1.01, provenance=provenance, meaning=meaning)
    ratio, figures = _best_keep_ratio(model, data, answerable)
    model = replace(model, keep_ratio=ratio)
    found = np.array([model.confidence(x) >= 0.5 for x in conf_x])
    figures["false_refusals"] = float(np.mean(~found[conf_y == 1]))
    figures["absent_refused"] = float(np.mean(~found[conf_y == 0]))
    return model, figures


def _best_keep_ratio(model: ReaderModel, data: TrainingData,
                     answerable: Sequence[int]) -> tuple[float, dict[str, float]]:
    """The keep ratio with the most gold-holding answers whose median length stays under the cap."""
    best: tuple[float, float, dict[str, float]] | None = None
    trials: dict[str, float] = {}
    for ratio in KEEP_RATIOS:
        trial = replace(model, keep_ratio=ratio)
        hits, chars = [], []
        for i in answerable:
            if not len(data.labels[i]):
                hits.append(False)
                chars.append(0)
                continue
            chosen = choose_sentences(_ranking(trial, data, i), data.lengths[i].tolist(), trial)
            hits.append(bool(data.labels[i][chosen].any()))
            chars.append(int(data.lengths[i][chosen].sum()))
        holds, median = float(np.mean(hits)), float(np.median(chars))
        trials[f"holds_gold@{ratio}"] = holds
        trials[f"median_chars@{ratio}"] = median
        if median <= MEDIAN_CHARS_CAP and (best is None or holds > best[1]):
            best = (ratio, holds, {"keep_ratio": ratio, "holds_gold": holds, "median_chars": median})
    assert best is not None, "even one sentence per answer exceeds the median length cap"
    return best[0], {**best[2], **trials}


def _ranking(model: ReaderModel, data: TrainingData, i: int) -> np.ndarray:
    """:meth:`Reading.ranking_scores` of question ``i`` from the stored inputs (every candidate embedded)."""
    if model.meaning is None:
        return model.sentence_scores(data.features[i])
    return model.meaning.scores(data.meaning[i])


def write_weights(model: ReaderModel, path: Path = WEIGHTS_PATH) -> None:
    path.write_text(json.dumps(model.to_json(), indent=1) + "\n", encoding="utf-8")


def describe(model: ReaderModel) -> str:
    """The fitted weights by feature name, for the command's output and the docs."""
    lines = [f"  {name:20s} {w:+.3f}" for name, w in zip(FEATURES, model.sentence_weights)]
    lines += [f"  conf {name:15s} {w:+.3f}" for name, w in zip(CONFIDENCE_FEATURES, model.confidence_weights)]
    lines.append(f"  conf bias {model.confidence_bias:+.3f}, keep_ratio {model.keep_ratio}")
    if model.meaning is not None:
        lines.append(f"  meaning model for {model.meaning.embedder}: {model.meaning.dim} vector products, "
                     f"{len(model.meaning.output)} hidden units")
    return "\n".join(lines)

