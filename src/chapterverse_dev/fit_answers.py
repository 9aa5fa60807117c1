"""Fits the extractive reader (``python -m chapterverse_dev fit-answers``) and writes ``answering/reader_weights.json``.

Training questions run through exactly the reader's own path (:func:`answering.extractive.read_evidence`:
retrieval scoped to the question's document, candidate sentences, features), so the models learn from
what they will see. Labels:

- *sentence model*: a candidate holds the gold answer (:func:`bench.answers.holds_gold`); fit listwise, a
  softmax over each question's candidates maximising the probability of its gold-holding ones, on the
  questions that have one (L2 1e-3, full-batch Adam);
- *meaning model*: the same listwise loss over :func:`answering.model.meaning_inputs` (features and the
  product of question and sentence vectors), a linear part and a hidden layer of :data:`MEANING_HIDDEN`
  rectified units (full-batch Adam from a seeded start), for the embedder the sets' libraries use;
- *composition*: the ``keep_ratio`` that maximises "answer holds gold" on the training questions while
  the median answer stays within :data:`MEDIAN_CHARS_CAP`;
- *confidence model*: whether the answer the fitted reader shows holds the gold answer (1) or not (0),
  logistic regression over every training question: answerable ones, questions of another document,
  questions of their own document with the answering paragraphs removed (in-domain absent) and questions of
  long documents made of several stories (:mod:`.long_books`), so that a long book's word-sharing sentences
  do not read as an answer; then its two thresholds (:func:`pick_thresholds`).

The default training data are the development halves in ../shared that the answer benchmark does not
report on: FairytaleQA train, and SQuAD-it and SQuAD-es articles of even position (odd ones are held out),
so FairytaleQA val, the odd SQuAD articles and both XQuAD sets measure the reader on unseen questions.
``--confidence-only`` keeps the packaged sentence, meaning and composition models and refits the confidence
model and thresholds alone.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from chapterverse.answering.extractive import (Reading, choose_sentences, confidence_features, first_introduction,
                                               read_evidence, shown_sentences)
from chapterverse.answering.features import FEATURES
from chapterverse.answering.model import CONFIDENCE_FEATURES, WEIGHTS_PATH, MeaningModel, ReaderModel, meaning_inputs
from chapterverse.embeddings import Embedder
from chapterverse.library import Library
from chapterverse.bench.answers import (
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
from chapterverse.bench.long_books import long_documents, without_evidence

__all__ = ["TrainingData", "collect", "fit_reader", "fit_confidence", "pick_thresholds", "threshold_figures",
           "threshold_readings", "FitPlan", "MemoEmbedder", "training_sets", "write_weights", "describe"]

MEDIAN_CHARS_CAP = 450
"""Composition may not buy correctness with length: the median training answer stays under this."""
KEEP_RATIOS = (0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 1.01)
L2 = 1e-3
MEANING_HIDDEN = 16
"""Hidden units of the meaning model: with them the gold-holding sentence was among the top three held-out
candidates more often than with the linear part alone (docs/BENCHMARKS.md, 4 December), at 8.5 k weights."""
TARGET_ABSENT_REFUSED = 0.95
"""The answer threshold is the lowest that refuses (does not answer) this share of the training's absent
questions of every kind, and leaves at most :data:`TARGET_CONFIDENTLY_WRONG` of the answerable ones answered
wrong at confidence >= 0.9."""
TARGET_CONFIDENTLY_WRONG = 0.02
CONFIDENTLY = 0.9
"""An answer shown with at least this confidence reads as sure: a wrong one there is "confidently wrong"."""
TARGET_HELPFUL_SHOWN = 0.95
"""The unsure threshold is the highest that still shows passages (answered or unsure) for this share of the
answerable training questions whose candidate sentences hold the gold answer: below it, "Not found"."""
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
    kinds: list[str] = field(default_factory=list)
    """Per question, the set it came from and whether it is answerable: "fairytaleqa-train:absent"."""
    embedder: str = ""

    def add(self, reading: Reading, answers: Sequence[str], kind: str = "") -> None:
        assert len(reading.embedded) == len(reading.candidates), "fit on readings with every candidate embedded"
        self.readings.append(reading)
        self.features.append(reading.features)
        self.meaning.append(meaning_inputs(reading.features, reading.query_vector, reading.vectors).astype(np.float32)
                            if len(reading.candidates) else np.zeros((0, 0), np.float32))
        self.embedder = reading.embedder
        self.labels.append(np.array([holds_gold(c.text, answers) for c in reading.candidates], dtype=bool))
        self.lengths.append(np.array([len(c.text) for c in reading.candidates]))
        self.answerable.append(bool(answers))
        self.kinds.append(f"{kind}:{'answerable' if answers else 'absent'}")


def collect(answer_set: AnswerSet, directory: Path, limit: int | None, seed: int, data: TrainingData,
            progress: Callable[[str, int, int], None] | None = None, kind: str = "") -> None:
    """Ask ``limit`` answerable questions of their own documents, as many drawn absent ones (when the set
    draws them) and up to ``limit`` of the set's own absent ones; add their readings under ``kind``."""
    library, doc_ids = open_answer_library(answer_set, directory)
    memo = Library(directory, embedder=MemoEmbedder(library.embedder))
    asked = sample_questions([q for q in answer_set.questions if not q.absent], limit, seed)
    questions: list[AnswerQuestion] = [*asked, *(absent_questions(answer_set, seed, asked)
                                                 if answer_set.draws_absent else []),
                                       *sample_questions([q for q in answer_set.questions if q.absent], limit, seed)]
    for n, question in enumerate(questions):
        if progress and n % 100 == 0:
            progress(answer_set.name, n, len(questions))
        reading = read_evidence(memo, question.text, doc_ids=[doc_ids[question.source]], embedded=None)
        data.add(reading, question.answers, kind or answer_set.name)
    library.close()
    memo.close()


@dataclass(frozen=True, slots=True)
class FitPlan:
    """How many questions of each kind a fit asks (``chapterverse_dev fit-answers`` options)."""

    fairytaleqa_limit: int = 10_000
    squad_limit: int = 1500
    in_domain_limit: int = 1500
    """FairytaleQA questions asked of their story without the answering sections (an eighth of this from
    each SQuAD half, without the answer's paragraph)."""
    long_limit: int = 1500
    """FairytaleQA questions asked of long documents of :attr:`per_document` stories (and as many absent)."""
    per_document: int = 8
    seed: int = 0


def training_sets(qa: Path, plan: FitPlan = FitPlan()) -> list[tuple[str, Callable[[], AnswerSet], int]]:
    """The training sets under ``qa`` (../shared/data/qa), by cache name, with the answerable questions to
    ask of each: FairytaleQA train and the even articles of SQuAD-it and SQuAD-es (what the answer benchmark
    reports on is left out), their in-domain absent questions, and FairytaleQA train as long documents."""
    def fairytales() -> AnswerSet:
        return load_fairytaleqa(qa / "fairytaleqa", "train")

    def squad(language: str) -> AnswerSet:
        return split_articles(load_squad_answers(qa / f"squad-{language}" / f"squad-{language}.dev.json"), 0)

    squad_in_domain = max(1, plan.in_domain_limit // 8)
    return [
        ("fairytaleqa-train", fairytales, plan.fairytaleqa_limit),
        ("squad-it-even", lambda: squad("it"), plan.squad_limit),
        ("squad-es-even", lambda: squad("es"), plan.squad_limit),
        ("fairytaleqa-train-without-evidence",
         lambda: without_evidence(fairytales(), plan.in_domain_limit, plan.seed), plan.in_domain_limit),
        ("squad-it-even-without-evidence",
         lambda: without_evidence(squad("it"), squad_in_domain, plan.seed), squad_in_domain),
        ("squad-es-even-without-evidence",
         lambda: without_evidence(squad("es"), squad_in_domain, plan.seed), squad_in_domain),
        (f"fairytaleqa-train-long-{plan.per_document}", lambda: long_documents(fairytales(), plan.per_document),
         plan.long_limit),
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
    model = ReaderModel(sentence_w, 0.0, np.zeros(len(CONFIDENCE_FEATURES)), 0.0, keep_ratio=1.01,
                        provenance=provenance, meaning=meaning)
    ratio, figures = _best_keep_ratio(model, data, answerable)
    model, confidence_figures = fit_confidence(data, replace(model, keep_ratio=ratio))
    return model, {**figures, **confidence_figures}


def fit_confidence(data: TrainingData, model: ReaderModel) -> tuple[ReaderModel, dict[str, float]]:
    """``model`` with its confidence model refit on ``data`` (label: the answer ``model`` shows holds gold)
    and its thresholds picked (:func:`pick_thresholds`); with the training figures by kind of question."""
    usable = [i for i, x in enumerate(data.features) if len(x)]
    conf_x = np.stack([confidence_features(data.readings[i], model.sentence_scores(data.features[i]))
                       for i in usable])
    right = np.array([bool(data.labels[i][_shown(model, data, i)].any()) for i in usable])
    conf_w, conf_b = fit_logistic(conf_x, right.astype(np.float64))
    model = replace(model, confidence_weights=conf_w, confidence_bias=conf_b)
    confidence = np.array([model.confidence(x) for x in conf_x])
    answerable = np.array([data.answerable[i] for i in usable])
    helpful = np.array([bool(data.labels[i].any()) for i in usable])
    kinds = [data.kinds[i] for i in usable]
    answer, unsure = pick_thresholds(confidence, right, answerable, helpful, kinds)
    model = replace(model, answer_threshold=answer, unsure_threshold=unsure)
    return model, threshold_figures(confidence, right, answerable, helpful, kinds, model)


def threshold_readings(answer_set: AnswerSet, directory: Path, model: ReaderModel) -> dict[str, np.ndarray]:
    """Every question of ``answer_set`` read as ``ask`` reads it (its own document, the packaged number of
    embedded candidates): ``confidence``, ``right`` (the answer ``model`` would show holds gold, whatever the
    thresholds), ``answerable`` and ``helpful`` (a candidate sentence holds gold), for
    ``chapterverse_dev fit-thresholds``."""
    library, doc_ids = open_answer_library(answer_set, directory)
    rows: list[tuple[float, bool, bool, bool]] = []
    for question in answer_set.questions:
        reading = read_evidence(library, question.text, doc_ids=[doc_ids[question.source]], model=model)
        if not reading.candidates:
            rows.append((0.0, False, not question.absent, False))
            continue
        confidence = model.confidence(confidence_features(reading, model.sentence_scores(reading.features)))
        shown = " ".join(reading.candidates[i].text for i in shown_sentences(reading, model))
        rows.append((confidence, holds_gold(shown, question.answers), not question.absent,
                     any(holds_gold(c.text, question.answers) for c in reading.candidates)))
    library.close()
    columns = list(zip(*rows)) if rows else [(), (), (), ()]
    return {"confidence": np.array(columns[0], dtype=np.float64),
            **{name: np.array(column, dtype=bool) for name, column in zip(("right", "answerable", "helpful"),
                                                                           columns[1:])}}


def _shown(model: ReaderModel, data: TrainingData, i: int) -> list[int]:
    """:func:`answering.extractive.shown_sentences` of question ``i`` from the stored inputs."""
    return choose_sentences(_ranking(model, data, i), data.lengths[i].tolist(), model,
                            introduction=first_introduction(data.readings[i]))


_GRID = np.round(np.arange(0.05, 0.995, 0.005), 3)


def pick_thresholds(confidence: np.ndarray, right: np.ndarray, answerable: np.ndarray, helpful: np.ndarray,
                    kinds: Sequence[str], absent_refused: float = TARGET_ABSENT_REFUSED) -> tuple[float, float]:
    """(answer threshold, unsure threshold) on training questions (see :data:`TARGET_ABSENT_REFUSED` and
    :data:`TARGET_HELPFUL_SHOWN`). The answer threshold is at least 0.5: below it the shown answer is more
    likely wrong than right, whatever the targets allow."""
    absent_kinds = sorted({k for k, a in zip(kinds, answerable) if not a})
    kind_of = np.array(kinds)

    def meets(t: float) -> bool:
        refused = all(np.mean(confidence[kind_of == k] < t) >= absent_refused for k in absent_kinds)
        sure_wrong = np.mean(answerable & ~right & (confidence >= max(t, CONFIDENTLY)))
        return refused and bool(sure_wrong <= TARGET_CONFIDENTLY_WRONG)

    answer = next((float(t) for t in _GRID if t >= 0.5 and meets(float(t))), float(_GRID[-1]))
    shown = answerable & helpful
    unsure = max((float(t) for t in _GRID if t <= answer and np.mean(confidence[shown] >= t) >= TARGET_HELPFUL_SHOWN),
                 default=float(_GRID[0]))
    return answer, unsure


def threshold_figures(confidence: np.ndarray, right: np.ndarray, answerable: np.ndarray, helpful: np.ndarray,
                      kinds: Sequence[str], model: ReaderModel) -> dict[str, float]:
    """What the thresholds do on the training questions: per kind, the shares answered, unsure and not found
    (and for answerable ones, answered right and answered wrong at confidence >= 0.9)."""
    answered = confidence >= model.answer_threshold
    unsure = ~answered & (confidence >= model.unsure_threshold)
    figures = {"answer_threshold": model.answer_threshold, "unsure_threshold": model.unsure_threshold,
               "answerable_right": float(np.mean(right[answerable])),
               "answerable_helpful": float(np.mean(helpful[answerable]))}
    kind_of = np.array(kinds)
    for kind in sorted(set(kinds)):
        rows = kind_of == kind
        figures[f"{kind}.answered"] = float(np.mean(answered[rows]))
        figures[f"{kind}.unsure"] = float(np.mean(unsure[rows]))
        if kind.endswith(":answerable"):
            figures[f"{kind}.answered_right"] = float(np.mean((answered & right)[rows]))
            figures[f"{kind}.confidently_wrong"] = float(np.mean((answered & ~right & (confidence >= CONFIDENTLY))[rows]))
    return figures


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
    lines.append(f"  conf bias {model.confidence_bias:+.3f}, thresholds: answer {model.answer_threshold}, "
                 f"unsure {model.unsure_threshold}; keep_ratio {model.keep_ratio}")
    if model.meaning is not None:
        lines.append(f"  meaning model for {model.meaning.embedder}: {model.meaning.dim} vector products, "
                     f"{len(model.meaning.output)} hidden units")
    return "\n".join(lines)

